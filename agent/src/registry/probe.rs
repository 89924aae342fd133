//! One port check inside a running process's pod, asked for after the start
//! (`wait_for_port`): dialled from a thread that joined the container's network namespace, like
//! the readiness probes, so a server bound to 127.0.0.1 in the pod counts.
use std::fs::File;

use nix::sched::{setns, CloneFlags};
use sandbox_wire::wire::{Phase, ProbeKind, ProbeResult};
use tokio::sync::Semaphore;

use super::Registry;
use crate::error::AgentError;
use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::launch::LaunchSpec;
use sandbox_node_protocol::procfs;
use sandbox_node_protocol::readiness;
use sandbox_node_protocol::record;

/// Checks running at once on this agent: each holds a thread for a few seconds at most (per
/// address a 1 s dial, an HTTP answer within 2 s), and any caller may ask, so the count is
/// bounded (beyond it: 429, try again).
static CHECKS: Semaphore = Semaphore::const_new(16);

impl Registry {
    pub async fn probe(&self, id: &str, probe: ProbeKind) -> Result<ProbeResult, AgentError> {
        sandbox_wire::wire_rules::port_check("probe", &probe)?;
        let rec = self.get(id)?;
        if rec.phase != Phase::Running {
            return Ok(ProbeResult {
                ready: false,
                message: format!("the process is {:?}, not running", rec.phase),
            });
        }
        let id = ExecId::parse(id)?;
        let launch: LaunchSpec = record::read_json(&self.cfg.layout.launch(&id))
            .map_err(AgentError::io("reading launch spec"))?;
        // Held by the check's thread, not this handler: a caller that goes away does not free
        // a slot while the thread still dials.
        let permit = CHECKS.try_acquire().map_err(|_| {
            AgentError::TooManyRequests("too many port checks at once on this node".into())
        })?;
        let (pid, start) = (launch.container_pid, launch.container_start);
        let Some(start) = start else {
            // Without the init's start time a reused pid could not be told apart.
            return Ok(ProbeResult {
                ready: false,
                message: "the container's init process cannot be identified (no start time)".into(),
            });
        };
        let ns = match File::open(format!("/proc/{pid}/ns/net")) {
            Ok(f) => f,
            Err(e) => {
                return Ok(ProbeResult {
                    ready: false,
                    message: format!("the container's network namespace: {e}"),
                })
            }
        };
        // Opened, then checked: the namespace is the container's only if its init (same pid,
        // same start time) still ran after the open — never a reused pid's.
        if !procfs::alive(pid, Some(start)) {
            return Ok(ProbeResult {
                ready: false,
                message: "the container has ended".into(),
            });
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("port-check".into())
            .stack_size(128 * 1024)
            .spawn(move || {
                let _permit = permit;
                // This thread alone changes namespace, and ends after the check.
                let r = match setns(&ns, CloneFlags::CLONE_NEWNET) {
                    Err(e) => ProbeResult {
                        ready: false,
                        message: format!("joining the pod's network namespace: {e}"),
                    },
                    Ok(()) => check(&probe),
                };
                let _ = tx.send(r);
            })
            .map_err(AgentError::io("starting a port check"))?;
        rx.await
            .map_err(|_| AgentError::Internal("port check thread ended without a result".into()))
    }
}

fn check(probe: &ProbeKind) -> ProbeResult {
    let (ready, message) = match probe {
        ProbeKind::TcpSocket { port } => match readiness::tcp_check(*port) {
            Ok(()) => (true, String::new()),
            Err(e) => (false, e.to_string()),
        },
        ProbeKind::HttpGet { port, path, status } => match readiness::http_status(*port, path) {
            Ok(code) if code >= status.min && code <= status.max => (true, format!("HTTP {code}")),
            Ok(code) => (
                false,
                format!("HTTP {code}, not {}-{}", status.min, status.max),
            ),
            Err(e) => (false, e.to_string()),
        },
        ProbeKind::LogMatch { .. } => (false, "not a port check".into()),
    };
    ProbeResult { ready, message }
}
