//! Container lookup through the node's CRI socket, as kubelet sees containers: list by the
//! pod-uid and container-name labels, then a verbose ContainerStatus for the init pid and OCI spec.
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    Container, ContainerFilter, ContainerState, ContainerStatusRequest, ListContainersRequest,
    PodSandboxStatusRequest,
};
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use super::{ContainerInfo, CONTAINER_NAME_LABEL, POD_UID_LABEL};
use crate::error::AgentError;
use sandbox_node_protocol::procfs;

#[derive(Clone)]
pub struct CriLookup {
    client: RuntimeServiceClient<Channel>,
    socket: PathBuf,
    /// Lookups kept while the container's init process lives (same pid and start time): a
    /// container instance's id, pid, OCI spec and runtime cannot change during its life, and
    /// asking cost the runtime two calls per start, one of which serializes the whole spec
    /// (~2 ms of containerd CPU per process, e2e/benches/costbench). A restarted container has a new
    /// init process, so its entry is not used.
    known: Arc<Mutex<Known>>,
}

/// (pod UID, container name) → the lookup and its init process's start time.
type Known = HashMap<(String, String), (ContainerInfo, u64)>;

/// Entries of the lookup cache at most (about 110 pods per node, a few containers each); dead
/// ones go first.
const KNOWN_MAX: usize = 4096;

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
            known: Arc::default(),
        })
    }

    pub async fn find(&self, pod_uid: &str, container: &str) -> Result<ContainerInfo, AgentError> {
        let key = (pod_uid.to_string(), container.to_string());
        if let Some(info) = self.known(&key) {
            return Ok(info);
        }
        let info = self.ask(pod_uid, container).await?;
        if let Some(start) = procfs::start_time(info.pid) {
            self.remember(key, info.clone(), start);
        }
        Ok(info)
    }

    /// The cached lookup, if its container's init process still lives.
    fn known(&self, key: &(String, String)) -> Option<ContainerInfo> {
        let mut known = self.known.lock().unwrap();
        let (info, start) = known.get(key)?;
        if procfs::alive(info.pid, Some(*start)) {
            return Some(info.clone());
        }
        known.remove(key);
        None
    }

    fn remember(&self, key: (String, String), info: ContainerInfo, start: u64) {
        let mut known = self.known.lock().unwrap();
        if known.len() >= KNOWN_MAX {
            known.retain(|_, (i, s)| procfs::alive(i.pid, Some(*s)));
        }
        if known.len() < KNOWN_MAX {
            known.insert(key, (info, start));
        }
    }

    /// The runtime's answer: the running instance, then its verbose status.
    async fn ask(&self, pod_uid: &str, container: &str) -> Result<ContainerInfo, AgentError> {
        let c = self.running(pod_uid, container).await?;
        let info = self.verbose_info(&c.id).await?;
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
        let runtime = match runtime_of(&info) {
            Ok(r) => r,
            Err(runtime_type) => {
                let handler = self.handler(&c.pod_sandbox_id).await;
                return Err(unsupported(handler.as_deref(), &runtime_type));
            }
        };
        Ok(ContainerInfo {
            id: c.id.clone(),
            pid,
            spec,
            runtime_root: runtime.root,
            runtime_binary: runtime.binary,
        })
    }

    /// The runtime's words for the tenant (its status and Events show them); the node's socket
    /// path only in the agent's log.
    fn runtime_error(&self, e: tonic::Status) -> AgentError {
        tracing::warn!(socket = %self.socket.display(), error = %e.message(), "CRI call failed");
        AgentError::Runtime(format!("the container runtime (CRI): {}", e.message()))
    }

    /// The newest running instance of the pod's container (a restarted container has several).
    async fn running(&self, pod_uid: &str, container: &str) -> Result<Container, AgentError> {
        let labels = HashMap::from([
            (POD_UID_LABEL.to_string(), pod_uid.to_string()),
            (CONTAINER_NAME_LABEL.to_string(), container.to_string()),
        ]);
        let list = self
            .client
            .clone()
            .list_containers(ListContainersRequest {
                filter: Some(ContainerFilter {
                    label_selector: labels,
                    ..Default::default()
                }),
            })
            .await
            .map_err(|e| self.runtime_error(e))?
            .into_inner()
            .containers;
        let running = list
            .iter()
            .filter(|c| c.state == ContainerState::ContainerRunning as i32)
            .max_by_key(|c| c.created_at);
        match running {
            Some(c) => Ok(c.clone()),
            None if list.is_empty() => Err(AgentError::ContainerNotFound {
                pod_uid: pod_uid.into(),
                container: container.into(),
                detail: "the runtime lists no such container".into(),
            }),
            None => Err(AgentError::ContainerUnavailable {
                pod_uid: pod_uid.into(),
                container: container.into(),
                detail: "no running instance (created or exited)".into(),
            }),
        }
    }

    /// containerd's verbose `info` of a container: its pid, OCI spec and runtime options.
    async fn verbose_info(&self, id: &str) -> Result<serde_json::Value, AgentError> {
        let status = self
            .client
            .clone()
            .container_status(ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: true,
            })
            .await
            .map_err(|e| self.runtime_error(e))?
            .into_inner();
        let info = status
            .info
            .get("info")
            .ok_or_else(|| AgentError::Runtime("verbose ContainerStatus has no info".into()))?;
        serde_json::from_str(info)
            .map_err(|e| AgentError::Runtime(format!("ContainerStatus info: {e}")))
    }

    /// The pod's RuntimeClass handler, what the user chose (to name it in a refusal).
    async fn handler(&self, sandbox_id: &str) -> Option<String> {
        self.client
            .clone()
            .pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                verbose: false,
            })
            .await
            .ok()
            .and_then(|r| r.into_inner().status)
            .map(|s| s.runtime_handler)
            .filter(|h| !h.is_empty())
    }
}

/// The runc-compatible runtime a container runs under, as containerd reports it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RuncRuntime {
    /// The runtime binary of its handler (`BinaryName`, e.g. crun), if not the node's default.
    pub binary: Option<String>,
    /// Its state root (`Root`), if not the default.
    pub root: Option<String>,
}

/// containerd shims whose containers live in a runc-compatible state root the agent can exec in.
const RUNC_SHIMS: &[&str] = &["io.containerd.runc.v2", "io.containerd.runc.v1"];

/// From a verbose ContainerStatus `info`: the runc-compatible runtime, or (Err) the runtime type
/// the agent cannot exec with (gVisor's runsc, Kata, ...). A runtime that says nothing of its
/// type (CRI-O, older containerd) is taken as the node's default runtime.
pub fn runtime_of(info: &serde_json::Value) -> Result<RuncRuntime, String> {
    let text = |v: &serde_json::Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    if let Some(t) = text(&info["runtimeType"]) {
        if !RUNC_SHIMS.contains(&t.as_str()) {
            return Err(t);
        }
    }
    let opts = &info["runtimeOptions"];
    Ok(RuncRuntime {
        binary: text(&opts["binary_name"]).or_else(|| text(&opts["BinaryName"])),
        root: text(&opts["root"]).or_else(|| text(&opts["Root"])),
    })
}

fn unsupported(handler: Option<&str>, runtime_type: &str) -> AgentError {
    AgentError::RuntimeUnsupported(match handler {
        Some(h) => format!(
            "the pod's runtime handler {h:?} ({runtime_type}) is not runc-compatible: a process cannot be started in its containers (supported: runc, crun and other runc-compatible handlers of io.containerd.runc.v2)"
        ),
        None => format!(
            "the container's runtime {runtime_type} is not runc-compatible: a process cannot be started in it (supported: runc, crun and other runc-compatible handlers of io.containerd.runc.v2)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn runc_handlers_give_their_binary_and_root() {
        let info = json!({"runtimeType": "io.containerd.runc.v2",
            "runtimeOptions": {"binary_name": "/usr/bin/crun", "root": "/run/crun-k8s"}});
        assert_eq!(
            runtime_of(&info).unwrap(),
            RuncRuntime {
                binary: Some("/usr/bin/crun".into()),
                root: Some("/run/crun-k8s".into())
            }
        );
        let plain = json!({"runtimeType": "io.containerd.runc.v2", "runtimeOptions": {}});
        assert_eq!(runtime_of(&plain).unwrap(), RuncRuntime::default());
        // CRI-O and older runtimes say nothing: the node's default.
        assert_eq!(
            runtime_of(&json!({"pid": 1})).unwrap(),
            RuncRuntime::default()
        );
    }

    #[test]
    fn other_shims_are_unsupported_by_name() {
        for t in ["io.containerd.runsc.v1", "io.containerd.kata.v2"] {
            let info = json!({"runtimeType": t, "runtimeOptions": {"TypeUrl": "x"}});
            assert_eq!(runtime_of(&info).unwrap_err(), t);
        }
        let e = unsupported(Some("gvisor"), "io.containerd.runsc.v1");
        assert_eq!(e.code(), sandbox_wire::wire::ErrorCode::RuntimeUnsupported);
        assert!(e.to_string().contains("\"gvisor\""), "{e}");
    }

    /// A cached lookup serves while its init process lives with the same start time; one whose
    /// process is gone or was replaced (another start time: pid reuse, a restart) is dropped.
    #[tokio::test]
    async fn a_lookup_is_kept_while_its_init_process_lives() {
        let l = CriLookup::new("/nonexistent/cri.sock".into()).unwrap();
        let me = std::process::id() as i32;
        let start = procfs::start_time(me).unwrap();
        let info = |pid| ContainerInfo {
            id: "c1".into(),
            pid,
            spec: json!({}),
            runtime_root: None,
            runtime_binary: None,
        };
        let key = ("uid".to_string(), "main".to_string());
        l.remember(key.clone(), info(me), start);
        assert_eq!(l.known(&key).map(|i| i.id), Some("c1".into()));
        l.remember(key.clone(), info(me), start + 1);
        assert!(l.known(&key).is_none());
        assert!(
            l.known.lock().unwrap().is_empty(),
            "the stale entry is dropped"
        );
        l.remember(key.clone(), info(i32::MAX), start);
        assert!(l.known(&key).is_none());
    }
}
