//! The status parts that come from the agent's record of a started process.
use super::*;

/// Copies what the record says about the process into the status; output and usage only when
/// `due` (or final, or never written).
pub(super) fn record_parts(s: &mut SandboxProcessStatus, r: &ProcessRecord, output_due: bool) {
    if !r.container_id.is_empty() {
        s.container_id = Some(r.container_id.clone());
    }
    if !r.container.is_empty() {
        s.container_name = Some(r.container.clone());
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
    // The count of bytes taken rides with the output refresh: a stream of writes is not a
    // stream of status writes (a writer resumes from `GET …/stdin`, which is live). Its first
    // sight and the close (EOF sent, which a watcher may wait for) are written at once.
    if let Some(i) = &r.stdin {
        let next = StdinStatus::from(i);
        if due || s.stdin.as_ref().is_none_or(|st| st.closed != next.closed) {
            s.stdin = Some(next);
        }
    }
    if r.restart_count > 0 {
        s.restart_count = r.restart_count.min(i32::MAX as u32) as i32;
    }
    if let Some(l) = &r.last_exit {
        s.last_exit = Some(Box::new(LastExitStatus {
            exit: l.exit.clone(),
            end_reason: l.end_reason.into(),
            started_at: parse_time(l.started_at.as_deref()),
            finished_at: parse_time(Some(&l.finished_at)),
        }));
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
    s: SandboxProcessStatus,
    r: &ProcessRecord,
    readiness: bool,
    now: &Time,
) -> (SandboxProcessStatus, Outcome) {
    match r.phase {
        wire::Phase::Starting | wire::Phase::Running => running(s, r),
        wire::Phase::Exited | wire::Phase::Error => ended(s, r, readiness, now),
    }
}

/// The reason of `Ready=False` and `Reconciling=True` while a restart waits out its back-off (as
/// a container's `CrashLoopBackOff`).
pub const BACK_OFF: &str = "BackOff";

/// The reason of `Ready=False` while the agent launches the process (its record: Starting).
pub const LAUNCHING: &str = "Starting";

/// A live process: `Running`, ready or not (yet).
fn running(mut s: SandboxProcessStatus, r: &ProcessRecord) -> (SandboxProcessStatus, Outcome) {
    s.phase = Some(Phase::Running);
    let outcome = if let Some(until) = &r.backoff_until {
        let after = r.last_exit.as_ref().map_or_else(String::new, |l| {
            format!(
                " after the last run {}",
                describe_exit(&l.exit, Some(l.end_reason.into()))
            )
        });
        Outcome::NotReady {
            reason: BACK_OFF.into(),
            message: format!(
                "back-off: restart {} at {until}{after}",
                r.restart_count + 1
            ),
        }
    } else if r.ready {
        Outcome::Ready {
            message: "the process is running and ready".into(),
        }
    } else if r.readiness_timed_out {
        Outcome::ReadinessTimeout {
            message:
                "readiness did not pass before readiness.timeoutSeconds; the process keeps running"
                    .into(),
        }
    } else if r.phase == wire::Phase::Starting {
        Outcome::NotReady {
            reason: LAUNCHING.into(),
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

/// An ended process: the agent's error, the container gone under it, or its exit.
fn ended(
    mut s: SandboxProcessStatus,
    r: &ProcessRecord,
    readiness: bool,
    now: &Time,
) -> (SandboxProcessStatus, Outcome) {
    s.finished_at = parse_time(r.finished_at.as_deref()).or_else(|| Some(now.clone()));
    s.exit = r.exit.clone();
    s.end_reason = r.end_reason.map(EndReason::from);
    if let Some(e) = &r.error {
        let code = ErrorCode::from_wire(e.code).unwrap_or(ErrorCode::ProcessSpawnFailed);
        return failed(s, code, e.message.clone());
    }
    // Ended during a restart's back-off: no run in progress, so no exit of its own; the last
    // run's end stays in `lastExit` (docs/guides/restarts.md).
    let between_runs = match (&s.exit, &r.last_exit) {
        (None, Some(l)) => format!(
            " while it waited to be restarted (back-off; the last run {})",
            describe_exit(&l.exit, Some(l.end_reason.into()))
        ),
        _ => String::new(),
    };
    if s.end_reason == Some(EndReason::ContainerExited) {
        let message = match &s.exit {
            Some(e) => format!(
                "the container exited under the process ({})",
                describe_exit(e, None)
            ),
            None if !between_runs.is_empty() => format!("the container exited{between_runs}"),
            None => "the container exited under the process".into(),
        };
        return stale_handle(s, EndReason::ContainerExited, message, now);
    }
    if s.exit.is_none() && s.end_reason == Some(EndReason::Stopped) && !between_runs.is_empty() {
        s.phase = Some(Phase::Exited);
        let message = format!("stopped on request{between_runs}");
        let outcome = Outcome::Stopped { message };
        if readiness && !(r.ready || s.ready_at.is_some()) {
            return (s, before_ready(outcome, r.readiness_timed_out));
        }
        return (s, outcome);
    }
    let Some(e) = s.exit.clone() else {
        // An exited record always carries its exit; be safe rather than invent one.
        s.end_reason = Some(EndReason::Lost);
        let message = "the process ended without an exit status".to_string();
        return failed(s, ErrorCode::ProcessLost, message);
    };
    s.phase = Some(Phase::Exited);
    let outcome = exit_outcome(&e, s.end_reason);
    // Ready at some point: the record says so, or an earlier look saw `readyAt`.
    let ever_ready = r.ready || s.ready_at.is_some();
    if readiness && !ever_ready {
        return (s, before_ready(outcome, r.readiness_timed_out));
    }
    (s, outcome)
}

fn failed(
    mut s: SandboxProcessStatus,
    code: ErrorCode,
    message: String,
) -> (SandboxProcessStatus, Outcome) {
    s.phase = Some(Phase::Error);
    s.error = Some(ProcessError {
        code,
        message: message.clone(),
    });
    let reason = code.as_str().into();
    (s, Outcome::Failed { reason, message })
}

/// Succeeded only for a clean exit (code 0, no signal), also after a requested stop.
fn exit_outcome(e: &ExitStatus, end: Option<EndReason>) -> Outcome {
    let message = describe_exit(e, end);
    let clean = e.code == 0 && e.signal.is_none();
    match end {
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
