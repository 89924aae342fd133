//! The conditions for an outcome, and the Events for a status transition.
use super::*;

/// (type, status, reason, message) for each condition.
pub(super) fn condition_values(o: &Outcome) -> [(&'static str, &'static str, String, String); 4] {
    use condition::*;
    let t = |ty, st, reason: &str, message: &str| (ty, st, reason.to_string(), message.to_string());
    match o {
        Outcome::Pending { reason, message } => [
            t(READY, "False", reason, message),
            t(SUCCEEDED, "Unknown", reason, "the process has not ended"),
            t(RECONCILING, "True", reason, message),
            t(STALLED, "False", reason, "no failure"),
        ],
        Outcome::NotReady { reason, message } => [
            t(READY, "False", reason, message),
            t(SUCCEEDED, "Unknown", "Running", "the process has not ended"),
            t(RECONCILING, "True", reason, message),
            t(STALLED, "False", reason, "no failure"),
        ],
        Outcome::Ready { message } => [
            t(READY, "True", "Ready", message),
            t(SUCCEEDED, "Unknown", "Running", "the process has not ended"),
            t(RECONCILING, "False", "Ready", message),
            t(STALLED, "False", "Ready", "no failure"),
        ],
        Outcome::ReadinessTimeout { message } => [
            t(READY, "False", "ReadinessTimeout", message),
            t(SUCCEEDED, "Unknown", "Running", "the process has not ended"),
            t(RECONCILING, "False", "ReadinessTimeout", message),
            t(STALLED, "True", "ReadinessTimeout", message),
        ],
        Outcome::Succeeded { stopped, message } => {
            let ready = if *stopped { "Stopped" } else { "Succeeded" };
            [
                t(READY, "True", ready, message),
                t(SUCCEEDED, "True", "Succeeded", message),
                t(RECONCILING, "False", ready, message),
                t(STALLED, "False", ready, "no failure"),
            ]
        }
        Outcome::Stopped { message } => [
            t(READY, "True", "Stopped", message),
            t(SUCCEEDED, "False", "Stopped", message),
            t(RECONCILING, "False", "Stopped", message),
            t(STALLED, "False", "Stopped", "stopped on request"),
        ],
        Outcome::ExitedBeforeReady { succeeded, message } => {
            let (status, reason, exit) = succeeded;
            [
                t(READY, "False", EXITED_BEFORE_READY, message),
                t(SUCCEEDED, status, reason, exit),
                t(RECONCILING, "False", EXITED_BEFORE_READY, message),
                t(STALLED, "True", EXITED_BEFORE_READY, message),
            ]
        }
        Outcome::Failed { reason, message } => [
            t(READY, "False", reason, message),
            t(SUCCEEDED, "False", reason, message),
            t(RECONCILING, "False", reason, message),
            t(STALLED, "True", reason, message),
        ],
        Outcome::Degraded { reason, message } => [
            t(READY, "False", reason, message),
            t(SUCCEEDED, "Unknown", reason, "the process has not ended"),
            t(RECONCILING, "False", reason, message),
            t(STALLED, "True", reason, message),
        ],
    }
}

pub(super) fn conditions(
    o: &Outcome,
    prev: &[Condition],
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    condition_values(o)
        .into_iter()
        .map(|(type_, status, reason, message)| {
            let last_transition_time = prev
                .iter()
                .find(|c| c.type_ == type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: type_.into(),
                status: status.into(),
                reason,
                message: truncate(message, 1024),
                last_transition_time,
                observed_generation: generation,
            }
        })
        .collect()
}

pub(super) fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// A Kubernetes Event announcing a change of status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    /// Started, Ready, Exited, ExitedBeforeReady, Failed, Stopped, Stale.
    pub reason: &'static str,
    pub message: String,
}

pub(super) fn ready(s: &SandboxProcessStatus) -> bool {
    s.condition(condition::READY)
        .is_some_and(|c| c.status == "True")
}

/// The Events that the change from `prev` to `next` announces. A process that ends before any
/// status said it started (a short process: its final status is its only status write) gets
/// only its Warnings: its Normal Events (Started, Exited, ...) would be API writes that tell
/// nothing its status does not (docs/concepts/writes.md).
pub fn transitions(prev: &SandboxProcessStatus, next: &SandboxProcessStatus) -> Vec<Note> {
    let mut notes = all_transitions(prev, next);
    if !prev.is_started() && is_final(next) {
        notes.retain(|n| n.warning);
    }
    notes
}

fn all_transitions(prev: &SandboxProcessStatus, next: &SandboxProcessStatus) -> Vec<Note> {
    let mut notes = Vec::new();
    let note = |warning, reason, message: String| Note {
        warning,
        reason,
        message,
    };
    if prev.started_at.is_none() && next.started_at.is_some() {
        notes.push(note(
            false,
            "Started",
            format!(
                "started as pid {} in container {} on node {}",
                next.pid
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "?".into()),
                next.container_id.as_deref().unwrap_or("?"),
                next.node_name.as_deref().unwrap_or("?")
            ),
        ));
    }
    let now_ready = next.phase == Some(Phase::Running) && ready(next);
    // Ready in the status that first shows the process started (no readiness check) is said by
    // Started: a second Event would be a second write for it.
    if now_ready && !ready(prev) && prev.is_started() {
        notes.push(note(false, "Ready", "the process is ready".into()));
    }
    let was_final = is_final(prev);
    let degraded = |s: &SandboxProcessStatus| s.phase == Some(Phase::Error) && !is_final(s);
    if !was_final && is_final(next) {
        let succeeded = next
            .condition(condition::SUCCEEDED)
            .is_some_and(|c| c.status == "True");
        let message = next
            .condition(condition::SUCCEEDED)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        if next.error.as_ref().map(|e| e.code) == Some(ErrorCode::StaleProcessHandle) {
            notes.push(note(
                true,
                "Stale",
                next.error
                    .as_ref()
                    .map(|e| e.message.clone())
                    .unwrap_or_default(),
            ));
        } else if let Some(c) = next
            .condition(condition::READY)
            .filter(|c| c.reason == condition::EXITED_BEFORE_READY)
        {
            notes.push(note(true, "ExitedBeforeReady", c.message.clone()));
        } else if next.end_reason == Some(EndReason::Stopped) {
            notes.push(note(false, "Stopped", message));
        } else if succeeded {
            notes.push(note(false, "Exited", message));
        } else {
            let message = match &next.error {
                Some(e) => format!("{}: {}", e.code, e.message),
                None => message,
            };
            notes.push(note(true, "Failed", message));
        }
    } else if !degraded(prev) && degraded(next) {
        let message = next
            .error
            .as_ref()
            .map(|e| format!("{}: {}", e.code, e.message))
            .unwrap_or_default();
        notes.push(note(true, "Failed", message));
    }
    notes
}
