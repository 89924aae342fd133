//! Starting a supervisor: what the agent hands it (the launch spec; the mode that ends a lost
//! supervisor's tree) and what it publishes back (its identity, pid-reuse safe).
use sandbox_api::wire::StartRequest;
use serde::{Deserialize, Serialize};

use crate::shared::procfs;

/// Everything the supervisor needs to launch one process; written by the agent.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchSpec {
    pub request: StartRequest,
    pub container_id: String,
    pub container_pid: i32,
    #[serde(default)]
    pub container_start: Option<u64>,
    pub runtime_binary: String,
    pub runtime_root: String,
    pub retention_bytes: u64,
}

/// Identity of a running supervisor (pid reuse safe).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SupervisorIdentity {
    pub pid: i32,
    pub start_time: u64,
}

impl SupervisorIdentity {
    pub fn alive(&self) -> bool {
        procfs::alive(self.pid, Some(self.start_time))
    }
}

/// Mode argument: end what is left of a lost supervisor's tree, then exit.
pub const END_TREE: &str = "--end-tree";
