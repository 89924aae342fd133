//! Where a SandboxProcess's process is: the object (read from the API server, so a request never
//! acts on a stale status), its exec id, its pod, and the agent serving its node, from the
//! operator's agent registry (the agent-pod watch the controller uses too, not a list per request).
use std::time::Duration;

use kube::Api;
use sandbox_api::crd::{SandboxProcess, SandboxProcessStatus, GROUP};

use super::error::{Result, SubresourceError};
use super::server::Server;
pub use super::table::Located;

/// How long a request waits for the agent pods' first list (an operator that has just started).
const LISTED_WAIT: Duration = Duration::from_secs(10);

/// Which resource a request names: the CRD's `sandboxprocesses`, or the `processes` served from
/// the nodes. Both have the same subresources, checked alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Door {
    SandboxProcess,
    Process,
}

impl Door {
    /// The API group of the resource itself (what RBAC on the object names).
    pub fn group(self) -> &'static str {
        match self {
            Door::SandboxProcess => GROUP,
            Door::Process => super::PROCESSES_GROUP,
        }
    }

    pub fn resource(self) -> &'static str {
        match self {
            Door::SandboxProcess => "sandboxprocesses",
            Door::Process => "processes",
        }
    }

    /// The kind, as messages name it.
    pub fn kind(self) -> &'static str {
        match self {
            Door::SandboxProcess => "SandboxProcess",
            Door::Process => "Process",
        }
    }

    /// What refusals call one ("sandboxprocess \"x\"").
    pub fn singular(self) -> &'static str {
        match self {
            Door::SandboxProcess => "sandboxprocess",
            Door::Process => "process",
        }
    }
}

/// Why there is no process to read or signal: not started yet, or never started (the object's
/// `status.error`, which names the cause). `None` once the process was started.
fn not_started(name: &str, status: &SandboxProcessStatus) -> Option<SubresourceError> {
    if status.pod_uid.is_some() && status.node_name.is_some() {
        return None;
    }
    let phase = status.phase.map(|p| p.to_string());
    Some(SubresourceError::BadRequest(match &status.error {
        Some(e) => format!(
            "sandboxprocess \"{name}\" could not start a process (phase {}): {}: {}",
            phase.as_deref().unwrap_or("unset"),
            e.code.as_str(),
            e.message
        ),
        None => format!(
            "sandboxprocess \"{name}\" has not started a process (phase {})",
            phase.as_deref().unwrap_or("unset")
        ),
    }))
}

/// The process `namespace/name` behind `door`.
pub async fn locate(server: &Server, door: Door, namespace: &str, name: &str) -> Result<Located> {
    match door {
        Door::SandboxProcess => locate_sandbox_process(server, namespace, name).await,
        Door::Process => {
            server.all_known().await?;
            server
                .processes
                .as_ref()
                .and_then(|t| t.locate(namespace, name))
                .ok_or_else(|| {
                    SubresourceError::NotFound(format!(
                        "processes.{} \"{name}\" not found",
                        super::PROCESSES_GROUP
                    ))
                })
        }
    }
}

/// The process of the SandboxProcess `namespace/name`, once started.
async fn locate_sandbox_process(server: &Server, namespace: &str, name: &str) -> Result<Located> {
    let sbp = Api::<SandboxProcess>::namespaced(server.client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| SubresourceError::Internal(format!("reading the SandboxProcess: {e}")))?
        .ok_or_else(|| {
            SubresourceError::NotFound(format!("sandboxprocesses.{GROUP} \"{name}\" not found"))
        })?;
    let status = sbp.status.clone().unwrap_or_default();
    if let Some(e) = not_started(name, &status) {
        return Err(e);
    }
    let node = status.node_name.clone().unwrap_or_default();
    Ok(Located {
        agent: agent_url(server, &node, LISTED_WAIT).await?,
        exec_id: sbp.metadata.uid.clone().unwrap_or_default(),
        // Recorded before the start.
        pod: status.pod_name.clone().unwrap_or(sbp.spec.pod_name),
        tty: sbp.spec.tty,
    })
}

/// The agent serving `node`. A stale address (an agent pod replaced since the watch last heard)
/// only fails the handshake pinned to the node's name: 503, which the clients retry.
async fn agent_url(server: &Server, node: &str, wait: Duration) -> Result<String> {
    if !server.agents.listed_within(wait).await {
        return Err(SubresourceError::Internal(
            "listing agent pods: not listed yet; try again".into(),
        ));
    }
    server
        .agents
        .agent_url(node)
        .ok_or_else(|| SubresourceError::Unavailable(format!("no running agent on node {node}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{AgentClient, Agents};
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;
    use serde_json::json;

    /// A server whose agent registry holds `agent_pods` once listed (`None`: not listed yet).
    fn server(agent_pods: Option<Vec<Pod>>) -> (Server, Writer<Pod>) {
        let mut w: Writer<Pod> = Writer::default();
        let listed = if agent_pods.is_some() {
            crate::listed::Listed::already()
        } else {
            crate::listed::Listed::new().1
        };
        if let Some(pods) = agent_pods {
            w.apply_watcher_event(&watcher::Event::Init);
            for p in pods {
                w.apply_watcher_event(&watcher::Event::InitApply(p));
            }
            w.apply_watcher_event(&watcher::Event::InitDone);
        }
        let client = AgentClient::plain("/nonexistent".into()).unwrap();
        let (tx, _) = tokio::sync::mpsc::unbounded_channel();
        let pods = Some((w.as_reader(), listed));
        let agents = Agents::new(client, None, pods, 9443, tx);
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let server = Server {
            client: kube::Client::try_from(config).unwrap(),
            agents,
            request_headers: tokio::sync::watch::channel(Default::default()).1,
            processes: None,
        };
        (server, w)
    }

    /// The agent comes from the registry's agent pods, by node; the answers when none serves
    /// the node, and before the agent pods were first listed.
    #[tokio::test]
    async fn the_agent_of_a_node_comes_from_the_registry() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "a1", "namespace": "sandbox-system"},
            "spec": {"nodeName": "n1", "containers": [{"name": "agent"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.5"}
        }))
        .unwrap();
        let wait = Duration::from_millis(50);
        let (s, _w) = server(Some(vec![pod]));
        assert_eq!(
            agent_url(&s, "n1", wait).await.unwrap(),
            "http://10.0.0.5:9443"
        );
        match agent_url(&s, "n2", wait).await {
            Err(SubresourceError::Unavailable(m)) => assert_eq!(m, "no running agent on node n2"),
            other => panic!("{other:?}"),
        }
        let (s, _w) = server(None);
        match agent_url(&s, "n1", wait).await {
            Err(SubresourceError::Internal(m)) => {
                assert!(m.starts_with("listing agent pods"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_process_that_never_started_is_named_by_its_error() {
        let st =
            |v: serde_json::Value| -> SandboxProcessStatus { serde_json::from_value(v).unwrap() };
        // Refused by the agent: the pod's node is known, but nothing was started there.
        let e = not_started(
            "p",
            &st(json!({"phase": "Error", "nodeName": "n1",
                "error": {"code": "ProcessSpawnFailed", "message": "exec \"nope\": not found"}})),
        )
        .expect("not started")
        .to_string();
        assert_eq!(
            e,
            "sandboxprocess \"p\" could not start a process (phase Error): ProcessSpawnFailed: exec \"nope\": not found"
        );
        let e = not_started("p", &st(json!({"phase": "Pending", "nodeName": "n1"})))
            .unwrap()
            .to_string();
        assert!(
            e.contains("has not started a process (phase Pending)"),
            "{e}"
        );
        assert!(not_started(
            "p",
            &st(json!({"phase": "Running", "nodeName": "n1", "podUID": "u"}))
        )
        .is_none());
    }
}
