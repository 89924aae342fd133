//! The two crossings between the object and the wire, in one place: a spec becomes the agent's
//! start request ([`start_request`], never clamping a value into another: a value that does not
//! fit is a [`Violation`] naming its field), and a process record becomes the parts of a status
//! it supplies (the `From` impls below).
use std::collections::BTreeMap;

use crate::crd::{
    EndReason, ErrorCode, LogMatchStatus, OutputStatus, SandboxProcessSpec, StdinStatus,
    UsageStatus,
};
use crate::wire;
use crate::wire_rules::{self, Violation};

/// Where the process goes: the values the spec leaves open.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// The object's UID: the agent's idempotency key.
    pub exec_id: &'a str,
    pub pod_uid: &'a str,
    /// The resolved container name.
    pub container: &'a str,
}

/// The agent's start request for this spec. `from_sources` holds the values of the `valueFrom`
/// variables by name (read from Secrets and ConfigMaps); one not in it is left out (an optional
/// reference that was not found).
pub fn start_request(
    spec: &SandboxProcessSpec,
    target: Target<'_>,
    from_sources: &BTreeMap<String, String>,
) -> Result<wire::StartRequest, Violation> {
    let unsigned = |field: &str, v: i64| {
        u64::try_from(v).map_err(|_| Violation::new(field, "must not be negative"))
    };
    let opt_unsigned = |field: &str, v: Option<i64>| v.map(|v| unsigned(field, v)).transpose();
    Ok(wire::StartRequest {
        exec_id: target.exec_id.to_string(),
        pod_uid: target.pod_uid.to_string(),
        container: target.container.to_string(),
        command: spec.command.clone(),
        working_dir: spec.working_dir.clone(),
        env: spec
            .env
            .iter()
            .filter_map(|e| {
                let value = match &e.value_from {
                    None => e.value.clone(),
                    Some(_) => from_sources.get(&e.name)?.clone(),
                };
                Some(wire::EnvVar {
                    name: e.name.clone(),
                    value,
                })
            })
            .collect(),
        timeout_seconds: opt_unsigned("timeoutSeconds", spec.timeout_seconds)?,
        stop_signal: spec.stop_signal,
        grace_seconds: unsigned(
            "terminationGracePeriodSeconds",
            spec.termination_grace_period_seconds,
        )?,
        readiness: match &spec.readiness {
            None => None,
            Some(r) => Some(wire::Readiness {
                probe: probe(r)?,
                period_millis: unsigned("readiness.periodMillis", r.period_millis)?,
                timeout_seconds: opt_unsigned("readiness.timeoutSeconds", r.timeout_seconds)?,
            }),
        },
        resources: match spec.resources.as_ref().and_then(|r| r.limits.as_ref()) {
            None => None,
            Some(l) => Some(l.to_wire()?),
        },
        // A terminal's input is stdin: `tty` implies it.
        stdin: spec.stdin || spec.tty,
        tty: terminal(spec)?,
        security_context: match &spec.security_context {
            None => None,
            Some(sc) => Some(sc.to_wire()?),
        },
        restart_policy: spec.restart_policy,
        object: None,
    })
}

/// `spec.tty` with its size (`terminal`, else the default); `terminal` alone is refused.
fn terminal(spec: &SandboxProcessSpec) -> Result<Option<wire::TerminalSize>, Violation> {
    let Some(t) = &spec.terminal else {
        return Ok(spec.tty.then_some(wire::TerminalSize::DEFAULT));
    };
    if !spec.tty {
        return Err(Violation::new("terminal", TERMINAL_WITHOUT_TTY));
    }
    let cells = |field: &str, v: i32, max: u16| {
        u16::try_from(v)
            .ok()
            .filter(|v| (1..=max).contains(v))
            .ok_or_else(|| Violation::new(field, format!("{v}: must be 1-{max}")))
    };
    Ok(Some(wire::TerminalSize {
        rows: cells("terminal.rows", t.rows, wire::MAX_TERMINAL_ROWS)?,
        cols: cells("terminal.cols", t.cols, wire::MAX_TERMINAL_COLS)?,
    }))
}

/// The message of both enforcers for `terminal` without `tty`.
const TERMINAL_WITHOUT_TTY: &str = "terminal requires tty";

fn probe(r: &crate::crd::ReadinessSpec) -> Result<wire::ProbeKind, Violation> {
    Ok(match (&r.tcp_socket, &r.http_get, &r.log_match) {
        (Some(t), None, None) => wire::ProbeKind::TcpSocket {
            port: wire_rules::port("readiness.tcpSocket.port", t.port.into())?,
        },
        (None, Some(h), None) => {
            let code = |v: i32| {
                u16::try_from(v).map_err(|_| {
                    Violation::new("readiness.httpGet.status", wire_rules::STATUS_RANGE_MESSAGE)
                })
            };
            wire::ProbeKind::HttpGet {
                port: wire_rules::port("readiness.httpGet.port", h.port.into())?,
                path: h.path.clone(),
                status: wire::StatusRange {
                    min: code(h.status.min)?,
                    max: code(h.status.max)?,
                },
            }
        }
        (None, None, Some(l)) => wire::ProbeKind::LogMatch {
            pattern: l.pattern.clone(),
            stream: l.stream,
        },
        _ => {
            return Err(Violation::new(
                "readiness",
                "must set exactly one of tcpSocket, httpGet, logMatch",
            ))
        }
    })
}

impl From<&wire::OutputSummary> for OutputStatus {
    fn from(o: &wire::OutputSummary) -> Self {
        OutputStatus {
            stdout_bytes: saturating_i64(o.stdout_bytes),
            stderr_bytes: saturating_i64(o.stderr_bytes),
            tail: o.tail.clone(),
        }
    }
}

impl From<&wire::StdinState> for StdinStatus {
    fn from(s: &wire::StdinState) -> Self {
        StdinStatus {
            bytes: saturating_i64(s.bytes),
            closed: s.closed,
        }
    }
}

impl From<&wire::Usage> for UsageStatus {
    fn from(u: &wire::Usage) -> Self {
        UsageStatus {
            memory_peak_bytes: saturating_i64(u.memory_peak_bytes),
            cpu_time_millis: saturating_i64(u.cpu_nanos / 1_000_000),
        }
    }
}

impl From<&wire::LogMatchHit> for LogMatchStatus {
    fn from(m: &wire::LogMatchHit) -> Self {
        LogMatchStatus {
            line: m.line.clone(),
            cursor: m.cursor.clone(),
        }
    }
}

/// Every way a process ends on its node is an end the object can show; the object adds its own
/// (`PodReplaced`, `PodDeleted`).
impl From<wire::EndReason> for EndReason {
    fn from(r: wire::EndReason) -> Self {
        match r {
            wire::EndReason::Exited => EndReason::Exited,
            wire::EndReason::Signaled => EndReason::Signaled,
            wire::EndReason::TimedOut => EndReason::TimedOut,
            wire::EndReason::Stopped => EndReason::Stopped,
            wire::EndReason::OOMKilled => EndReason::OOMKilled,
            wire::EndReason::ContainerExited => EndReason::ContainerExited,
            wire::EndReason::Lost => EndReason::Lost,
        }
    }
}

impl ErrorCode {
    /// The status code for an agent error code; `None` for the wire-only codes, which describe
    /// the request or the agent itself rather than the process (the operator handles those).
    /// `StartDeadlineExceeded` is the status-only code: the operator's own verdict.
    pub fn from_wire(code: wire::ErrorCode) -> Option<ErrorCode> {
        use wire::ErrorCode as W;
        Some(match code {
            W::ContainerNotFound => ErrorCode::ContainerNotFound,
            W::ContainerUnavailable => ErrorCode::ContainerUnavailable,
            W::InvalidProcessCwd => ErrorCode::InvalidProcessCwd,
            W::InvalidProcessEnvironment => ErrorCode::InvalidProcessEnvironment,
            W::InvalidResourceLimits => ErrorCode::InvalidResourceLimits,
            W::ProcessSpawnFailed => ErrorCode::ProcessSpawnFailed,
            W::RuntimeUnsupported => ErrorCode::RuntimeUnsupported,
            W::StaleProcessHandle => ErrorCode::StaleProcessHandle,
            W::ProcessNotFound => ErrorCode::ProcessNotFound,
            W::ProcessLost => ErrorCode::ProcessLost,
            W::OperationInterrupted => ErrorCode::OperationInterrupted,
            W::AgentUnavailable => ErrorCode::AgentUnavailable,
            W::UserNotPermitted => ErrorCode::UserNotPermitted,
            W::InvalidRequest
            | W::Unauthorized
            | W::Internal
            | W::TooManyRequests
            | W::OutputFreed
            | W::StdinOffsetMismatch
            | W::StdinUnavailable
            | W::StdinConflict => return None,
        })
    }
}

fn saturating_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
