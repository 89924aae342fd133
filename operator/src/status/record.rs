//! The status parts that come from the agent's record of a started process.
use super::*;

/// Copies what the record says about the process into the status; output and usage only when
/// `due` (or final, or never written).
pub(super) fn record_parts(s: &mut SandboxProcessStatus, r: &ProcessRecord, output_due: bool) {
    if !r.container_id.is_empty() {
        s.container_id = Some(r.container_id.clone());
    }
    s.pid = r.pid.or(s.pid);
    s.started_at = parse_time(r.started_at.as_deref()).or(s.started_at.take());
    s.ready_at = parse_time(r.ready_at.as_deref()).or(s.ready_at.take());
    let due = r.is_final() || output_due || s.output.is_none();
    if due {
        s.output = Some(OutputStatus::from(&r.output));
        if let Some(u) = &r.usage {
            s.usage = Some(UsageStatus::from(u));
        }
    }
    // While the root is gone and others run, the count is why the object is still Running:
    // not held back with output and usage (the supervisor changes it at most every 5 s, and
    // once when the root exits), so `rootExited: true` comes with it.
    if (due || r.root_exited) && r.processes.is_some() {
        s.processes = r.processes.map(|n| n.min(i32::MAX as u32) as i32);
    }
    s.root_exited = r.root_exited && !r.is_final();
    if let Some(m) = &r.log_match {
        s.log_match = Some(LogMatchStatus::from(m));
    }
}

pub(super) fn describe_exit(e: &ExitStatus, reason: Option<EndReason>) -> String {
    let how = match e.signal {
        Some(sig) => format!("killed by signal {sig} (code {})", e.code),
        None => format!("exited with code {}", e.code),
    };
    match reason {
        Some(EndReason::TimedOut) => format!("timed out; {how}"),
        Some(EndReason::Stopped) => format!("stopped on request; {how}"),
        Some(EndReason::OOMKilled) => format!("killed by the OOM killer; {how}"),
        _ => how,
    }
}

/// `readiness`: the spec declares a readiness check (without one, started = ready).
pub(super) fn from_record(
    mut s: SandboxProcessStatus,
    r: &ProcessRecord,
    readiness: bool,
    now: &Time,
) -> (SandboxProcessStatus, Outcome) {
    match r.phase {
        wire::Phase::Starting | wire::Phase::Running => {
            s.phase = Some(Phase::Running);
            let outcome = if r.ready {
                Outcome::Ready {
                    message: "the process is running and ready".into(),
                }
            } else if r.readiness_timed_out {
                Outcome::ReadinessTimeout {
                    message: "readiness did not pass before readiness.timeoutSeconds; the process keeps running".into(),
                }
            } else if r.phase == wire::Phase::Starting {
                Outcome::NotReady {
                    reason: "Starting".into(),
                    message: "the process is being started".into(),
                }
            } else {
                Outcome::NotReady {
                    reason: "ReadinessPending".into(),
                    message: "the process is running; readiness has not passed yet".into(),
                }
            };
            (s, outcome)
        }
        wire::Phase::Exited | wire::Phase::Error => {
            s.finished_at = parse_time(r.finished_at.as_deref()).or_else(|| Some(now.clone()));
            s.exit = r.exit.clone();
            s.end_reason = r.end_reason.map(EndReason::from);
            if let Some(e) = &r.error {
                let code = ErrorCode::from_wire(e.code).unwrap_or(ErrorCode::ProcessSpawnFailed);
                s.phase = Some(Phase::Error);
                s.error = Some(ProcessError {
                    code,
                    message: e.message.clone(),
                });
                return (
                    s,
                    Outcome::Failed {
                        reason: code.as_str().into(),
                        message: e.message.clone(),
                    },
                );
            }
            if s.end_reason == Some(EndReason::ContainerExited) {
                let message = match &s.exit {
                    Some(e) => format!(
                        "the container exited under the process ({})",
                        describe_exit(e, None)
                    ),
                    None => "the container exited under the process".into(),
                };
                return stale_handle(s, EndReason::ContainerExited, message, now);
            }
            s.phase = Some(Phase::Exited);
            let Some(e) = s.exit.clone() else {
                // An exited record always carries its exit; be safe rather than invent one.
                let message = "the process ended without an exit status".to_string();
                s.phase = Some(Phase::Error);
                s.error = Some(ProcessError {
                    code: ErrorCode::ProcessLost,
                    message: message.clone(),
                });
                s.end_reason = Some(EndReason::Lost);
                return (
                    s,
                    Outcome::Failed {
                        reason: ErrorCode::ProcessLost.as_str().into(),
                        message,
                    },
                );
            };
            let message = describe_exit(&e, s.end_reason);
            let clean = e.code == 0 && e.signal.is_none();
            let outcome = match s.end_reason {
                Some(EndReason::Stopped) if clean => Outcome::Succeeded {
                    stopped: true,
                    message,
                },
                Some(EndReason::Stopped) => Outcome::Stopped { message },
                Some(EndReason::Exited) | None if clean => Outcome::Succeeded {
                    stopped: false,
                    message,
                },
                Some(EndReason::Exited) | None => Outcome::Failed {
                    reason: "NonZeroExit".into(),
                    message,
                },
                Some(other) => Outcome::Failed {
                    reason: other.as_str().into(),
                    message,
                },
            };
            // Ready at some point: the record says so, or an earlier look saw `readyAt`.
            let ever_ready = r.ready || s.ready_at.is_some();
            if readiness && !ever_ready {
                return (s, before_ready(outcome, r.readiness_timed_out));
            }
            (s, outcome)
        }
    }
}

/// The end of a process with `readiness` that was never ready: `Ready=False` and `Stalled=True`
/// with reason `ExitedBeforeReady`, whatever the exit code (so `kubectl wait
/// --for=condition=Ready` does not pass for a server that never listened); `Succeeded` as `end`
/// says.
pub(super) fn before_ready(end: Outcome, readiness_timed_out: bool) -> Outcome {
    let (succeeded, how) = match end {
        Outcome::Succeeded { message, .. } => (("True", "Succeeded".to_string()), message),
        Outcome::Stopped { message } => (("False", "Stopped".to_string()), message),
        Outcome::Failed { reason, message } => (("False", reason), message),
        other => return other,
    };
    let timed_out = if readiness_timed_out {
        " (readiness had timed out)"
    } else {
        ""
    };
    Outcome::ExitedBeforeReady {
        message: format!("{how} before it was ever ready{timed_out}"),
        succeeded: (succeeded.0, succeeded.1, how),
    }
}
