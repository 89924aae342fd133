//! Starting a supervisor: what the agent hands it (the launch spec; the mode that ends a lost
//! supervisor's tree) and what it publishes back (its identity, pid-reuse safe).
use sandbox_wire::wire::StartRequest;
use serde::{Deserialize, Serialize};

use crate::procfs;

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
    /// How long the runtime (`runc exec -d`) may take to start the process before the start
    /// fails; absent in a spec from an agent that predates the bound.
    #[serde(default = "default_runtime_timeout_ms")]
    pub runtime_timeout_ms: u64,
    /// The back-off between runs of a restarting process (`restartPolicy`).
    #[serde(default)]
    pub backoff: Backoff,
}

/// runc starts a process in tens of milliseconds, seconds on a loaded node; a minute is a hang.
pub const DEFAULT_RUNTIME_TIMEOUT_MS: u64 = 60_000;

fn default_runtime_timeout_ms() -> u64 {
    DEFAULT_RUNTIME_TIMEOUT_MS
}

/// The wait before a process's next run, as the kubelet's before a container's restart: `initial`
/// after the first end, doubled after each restart up to `max`, back to `initial` after a run
/// that lasted `reset_after` (milliseconds each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Backoff {
    pub initial_ms: u64,
    pub max_ms: u64,
    pub reset_after_ms: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial_ms: 10_000,
            max_ms: 300_000,
            reset_after_ms: 600_000,
        }
    }
}

impl Backoff {
    /// The wait before the next run, after `restarts` restarts since the last reset.
    pub fn delay(&self, restarts: u32) -> std::time::Duration {
        let ms = self
            .initial_ms
            .saturating_mul(1u64.checked_shl(restarts).unwrap_or(u64::MAX))
            .min(self.max_ms.max(self.initial_ms));
        std::time::Duration::from_millis(ms)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_ten_seconds_to_five_minutes() {
        let b = Backoff::default();
        let secs: Vec<u64> = (0..8).map(|n| b.delay(n).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(b.delay(63).as_secs(), 300);
        assert_eq!(
            b.delay(64).as_secs(),
            300,
            "a shift past the width is the cap"
        );
        assert_eq!(b.delay(u32::MAX).as_secs(), 300);
        let none = Backoff {
            initial_ms: 0,
            max_ms: 0,
            reset_after_ms: 0,
        };
        assert_eq!(none.delay(5).as_millis(), 0);
    }
}
