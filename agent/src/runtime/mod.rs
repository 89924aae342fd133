//! Finding the target container and describing how to exec into it.
//!
//! Two lookups: [`cri`] asks the node's CRI runtime (containerd, CRI-O) the way kubelet does;
//! [`runc_state`] reads a runc state root directly (containers started with plain runc, used by
//! the agent's own tests and usable on nodes without CRI). Both produce a [`ContainerInfo`] whose
//! OCI spec is the source of the exec'd process's security context.
pub mod cri;
pub mod exec_spec;
pub mod runc_state;
pub mod user;
pub mod version;

use crate::error::AgentError;

pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

#[derive(Clone, Debug)]
pub struct ContainerInfo {
    pub id: String,
    /// Host pid of the container's init process.
    pub pid: i32,
    /// The container's OCI runtime spec (config.json).
    pub spec: serde_json::Value,
    /// The OCI runtime's state root holding this container, when the lookup knows it.
    pub runtime_root: Option<String>,
    /// The runtime binary of the container's handler (e.g. crun), when not the node's default.
    pub runtime_binary: Option<String>,
}

pub enum Lookup {
    Cri(cri::CriLookup),
    RuncState(runc_state::RuncStateLookup),
}

impl Lookup {
    pub async fn find(&self, pod_uid: &str, container: &str) -> Result<ContainerInfo, AgentError> {
        match self {
            Lookup::Cri(l) => l.find(pod_uid, container).await,
            Lookup::RuncState(l) => {
                let l = l.clone();
                let (p, c) = (pod_uid.to_string(), container.to_string());
                tokio::task::spawn_blocking(move || l.find(&p, &c))
                    .await
                    .map_err(|e| AgentError::Internal(format!("lookup task: {e}")))?
            }
        }
    }
}
