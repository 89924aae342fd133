//! Container lookup from a runc state root: `<root>/<id>/state.json` names the bundle, whose
//! config.json carries the Kubernetes pod-uid and container-name annotations.
use std::fs;
use std::path::PathBuf;

use super::{ContainerInfo, CONTAINER_NAME_LABEL, POD_UID_LABEL};
use crate::error::AgentError;
use sandbox_node_protocol::procfs;

#[derive(Clone, Debug)]
pub struct RuncStateLookup {
    pub root: PathBuf,
}

impl RuncStateLookup {
    pub fn find(&self, pod_uid: &str, container: &str) -> Result<ContainerInfo, AgentError> {
        let not_found = |detail: String| AgentError::ContainerNotFound {
            pod_uid: pod_uid.to_string(),
            container: container.to_string(),
            detail,
        };
        let entries = fs::read_dir(&self.root)
            .map_err(|e| not_found(format!("reading runtime root {}: {e}", self.root.display())))?;
        for entry in entries.flatten() {
            let Ok(state) = fs::read(entry.path().join("state.json")) else {
                continue;
            };
            let Ok(state) = serde_json::from_slice::<serde_json::Value>(&state) else {
                continue;
            };
            let Some(bundle) = bundle_of(&state) else {
                continue;
            };
            let Ok(spec) = fs::read(PathBuf::from(&bundle).join("config.json")) else {
                continue;
            };
            let Ok(spec) = serde_json::from_slice::<serde_json::Value>(&spec) else {
                continue;
            };
            let ann = &spec["annotations"];
            if ann[POD_UID_LABEL].as_str() != Some(pod_uid)
                || ann[CONTAINER_NAME_LABEL].as_str() != Some(container)
            {
                continue;
            }
            let id = state["id"].as_str().unwrap_or_default().to_string();
            let pid = state["init_process_pid"].as_i64().unwrap_or(0) as i32;
            let start = state["init_process_start"].as_u64();
            if pid <= 0 || !procfs::alive(pid, start) {
                return Err(AgentError::ContainerUnavailable {
                    pod_uid: pod_uid.to_string(),
                    container: container.to_string(),
                    detail: format!("container {id} has no running init process"),
                });
            }
            return Ok(ContainerInfo {
                id,
                pid,
                spec,
                runtime_root: Some(self.root.display().to_string()),
                runtime_binary: None,
            });
        }
        Err(not_found(format!(
            "no container with these labels under {}",
            self.root.display()
        )))
    }
}

fn bundle_of(state: &serde_json::Value) -> Option<String> {
    state["config"]["labels"]
        .as_array()?
        .iter()
        .filter_map(|l| l.as_str())
        .find_map(|l| l.strip_prefix("bundle=").map(str::to_string))
}
