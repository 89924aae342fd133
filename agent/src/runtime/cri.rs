//! Container lookup through the node's CRI socket, as kubelet sees containers: list by the
//! pod-uid and container-name labels, then a verbose ContainerStatus for the init pid and OCI spec.
use std::collections::HashMap;
use std::path::PathBuf;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{ContainerFilter, ContainerState, ContainerStatusRequest, ListContainersRequest};
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use super::{ContainerInfo, CONTAINER_NAME_LABEL, POD_UID_LABEL};
use crate::error::AgentError;

#[derive(Clone)]
pub struct CriLookup {
    client: RuntimeServiceClient<Channel>,
    socket: PathBuf,
}

/// Deadline of one CRI call (list, status) and of connecting to the runtime's socket.
const CRI_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl CriLookup {
    /// Connects lazily: an agent started before the runtime socket exists still comes up.
    pub fn new(socket: PathBuf) -> Result<Self, AgentError> {
        let path = socket.clone();
        let channel =
            Endpoint::try_from("http://[::]:50051")
                .map_err(|e| AgentError::Internal(e.to_string()))?
                // A wedged runtime must not wedge starts: every CRI call has a deadline (the
                // error is ContainerUnavailable, retried by the operator like any refusal).
                .timeout(CRI_TIMEOUT)
                .connect_timeout(CRI_TIMEOUT)
                .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?))
                    }
                }));
        Ok(CriLookup {
            client: RuntimeServiceClient::new(channel),
            socket,
        })
    }

    pub async fn find(&self, pod_uid: &str, container: &str) -> Result<ContainerInfo, AgentError> {
        let mut client = self.client.clone();
        let rt = |e: tonic::Status| {
            AgentError::Runtime(format!("CRI {}: {}", self.socket.display(), e.message()))
        };
        let labels = HashMap::from([
            (POD_UID_LABEL.to_string(), pod_uid.to_string()),
            (CONTAINER_NAME_LABEL.to_string(), container.to_string()),
        ]);
        let list = client
            .list_containers(ListContainersRequest {
                filter: Some(ContainerFilter {
                    label_selector: labels,
                    ..Default::default()
                }),
            })
            .await
            .map_err(rt)?
            .into_inner()
            .containers;
        let running = list
            .iter()
            .filter(|c| c.state == ContainerState::ContainerRunning as i32)
            .max_by_key(|c| c.created_at);
        let Some(c) = running else {
            return Err(if list.is_empty() {
                AgentError::ContainerNotFound {
                    pod_uid: pod_uid.into(),
                    container: container.into(),
                    detail: "the runtime lists no such container".into(),
                }
            } else {
                AgentError::ContainerUnavailable {
                    pod_uid: pod_uid.into(),
                    container: container.into(),
                    detail: "no running instance (created or exited)".into(),
                }
            });
        };
        let status = client
            .container_status(ContainerStatusRequest {
                container_id: c.id.clone(),
                verbose: true,
            })
            .await
            .map_err(rt)?
            .into_inner();
        let info = status
            .info
            .get("info")
            .ok_or_else(|| AgentError::Runtime("verbose ContainerStatus has no info".into()))?;
        let info: serde_json::Value = serde_json::from_str(info)
            .map_err(|e| AgentError::Runtime(format!("ContainerStatus info: {e}")))?;
        let pid = info["pid"].as_i64().unwrap_or(0) as i32;
        if pid <= 0 {
            return Err(AgentError::ContainerUnavailable {
                pod_uid: pod_uid.into(),
                container: container.into(),
                detail: format!("container {} reports no init pid", c.id),
            });
        }
        let spec = info["runtimeSpec"].clone();
        if !spec.is_object() {
            return Err(AgentError::Runtime(format!(
                "container {}: runtime did not report its OCI spec",
                c.id
            )));
        }
        // containerd: runc options may carry a custom root; otherwise the caller's default applies.
        let runtime_root = info["runtimeOptions"]["root"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        Ok(ContainerInfo {
            id: c.id.clone(),
            pid,
            spec,
            runtime_root,
        })
    }
}
