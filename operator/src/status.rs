//! Status computation: a pure function from what the controller observed (the object, its pod, the
//! agent's record or the agent's failure, the time) to the status it should have, and the Events
//! a change of status announces.
//!
//! Determinism matters: the controller writes the status only when [`compute`] returns something
//! different from what is stored, so everything here is a function of the inputs, timestamps are
//! cut to whole seconds (what `metav1.Time` keeps), and a condition's `lastTransitionTime` changes
//! only when its `status` does.
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use sandbox_api::crd::{
    condition, EndReason, ErrorCode, ExitStatus, LastExitStatus, LogMatchStatus, OutputStatus,
    Phase, ProcessError, SandboxProcessSpec, SandboxProcessStatus, StdinStatus, UsageStatus,
    DEFAULT_START_DEADLINE_SECONDS,
};
use sandbox_api::validate::Violation;
use sandbox_api::wire::{self, ProcessRecord};

/// The pod named by `spec.podName`, as far as the process is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFacts {
    pub uid: String,
    pub node_name: Option<String>,
    pub phase: PodPhase,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    pub container: ContainerFacts,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    pub fn parse(s: Option<&str>) -> PodPhase {
        match s {
            Some("Pending") => PodPhase::Pending,
            Some("Running") => PodPhase::Running,
            Some("Succeeded") => PodPhase::Succeeded,
            Some("Failed") => PodPhase::Failed,
            _ => PodPhase::Unknown,
        }
    }
}

/// The target container (`spec.container`, else the default-container annotation, else the first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerFacts {
    /// No container of that name in the pod spec.
    NotInSpec { name: String },
    /// An init container: processes run only in the pod's regular containers.
    InitContainer { name: String },
    Found {
        name: String,
        /// Its status says `running`.
        running: bool,
    },
}

/// What the agent on the process's node told us.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentView {
    /// Nothing asked (the process is not to be started yet, or no agent was needed).
    NotAsked,
    /// The agent's record of the process (`execId` = the object's UID).
    Record(Box<ProcessRecord>),
    /// The agent answered that it has no such process.
    NotFound,
    /// The agent refused to start the process (deterministic: container missing, bad cwd, ...).
    Rejected(wire::ApiError),
    /// The agent refused for now, and will be asked again (the runtime has not caught up with
    /// the pod's status yet): the process stays Pending with this message.
    Retrying { reason: String, message: String },
    /// No answer from the agent (or no agent known for the node) since `since`.
    Unreachable { since: Time, message: String },
}

/// Everything [`compute`] looks at.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    /// `metadata.generation`.
    pub generation: Option<i64>,
    pub spec: &'a SandboxProcessSpec,
    /// The stored status (default when there is none yet).
    pub prev: &'a SandboxProcessStatus,
    /// The target pod's name: `spec.podName`, or the pod `spec.podSelector` chose ("" while none
    /// matches).
    pub pod_name: &'a str,
    /// `None`: no such pod exists.
    pub pod: Option<&'a PodFacts>,
    /// `metadata.creationTimestamp`: the start deadline counts from it.
    pub created: Option<&'a Time>,
    pub agent: &'a AgentView,
    /// The spec breaks a rule (objects written before the rule existed; regex syntax).
    pub invalid: Option<&'a Violation>,
    pub now: Time,
    /// How long the agent may be unreachable before the status says so.
    pub agent_grace: Duration,
    /// The output summary may be refreshed now (at most every `OUTPUT_REFRESH` while running).
    pub output_due: bool,
}

/// Whether the process has reached an end the controller never leaves (the rule is in `api`,
/// shared with the clients).
pub fn is_final(s: &SandboxProcessStatus) -> bool {
    s.is_final()
}

/// Whether a status is settled: final, and current (`observedGeneration` on it and on each
/// condition is the object's). [`compute`] only copies a final status, with the generation, so a
/// settled one is never written again: nothing reads what it shows only to users.
pub fn settled(s: &SandboxProcessStatus, generation: Option<i64>) -> bool {
    is_final(s)
        && s.observed_generation == generation
        && s.conditions
            .iter()
            .all(|c| c.observed_generation == generation)
}

/// What the operator reads of a settled status, all it keeps of one in its cache
/// (cache::Settled): the phase, generation, pod, node, end, error code and finish time; deletion
/// and the TTL read them, and [`compute`] gives the rest back as it is. Dropped: what only users
/// read (conditions, output, error message, usage; ~1 KB of a `true`, up to ~4 KB with output).
pub fn kept_when_settled(s: &SandboxProcessStatus) -> SandboxProcessStatus {
    SandboxProcessStatus {
        observed_generation: s.observed_generation,
        phase: s.phase,
        pod_name: s.pod_name.clone(),
        node_name: s.node_name.clone(),
        pod_uid: s.pod_uid.clone(),
        finished_at: s.finished_at.clone(),
        exit: s.exit.clone(),
        end_reason: s.end_reason,
        error: s.error.as_ref().map(|e| ProcessError {
            code: e.code,
            message: String::new(),
        }),
        ..Default::default()
    }
}

/// Whether the process was started (the agent has or had it).
pub fn is_started(s: &SandboxProcessStatus) -> bool {
    s.is_started()
}

/// Time left until a finished object is to be deleted (`ttlSecondsAfterFinished`); zero when due,
/// `None` when it is not to be deleted (no TTL, or not finished).
pub fn ttl_remaining(
    spec: &SandboxProcessSpec,
    s: &SandboxProcessStatus,
    now: &Time,
) -> Option<Duration> {
    let ttl = spec.ttl_seconds_after_finished?;
    if !is_final(s) {
        return None;
    }
    let finished = s.finished_at.as_ref()?;
    let due = finished.0.as_second().saturating_add(ttl.max(0));
    Some(Duration::from_secs(
        due.saturating_sub(now.0.as_second()).max(0) as u64,
    ))
}

/// Cuts a time to whole seconds, as `metav1.Time` stores it.
pub fn seconds(t: &Time) -> Time {
    Time(Timestamp::from_second(t.0.as_second()).unwrap_or(t.0))
}

fn parse_time(s: Option<&str>) -> Option<Time> {
    let ts: Timestamp = s?.parse().ok()?;
    Some(seconds(&Time(ts)))
}

/// How the conditions read.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    /// Not started yet (reason: PodNotFound, PodPending, Starting, ...).
    Pending {
        reason: String,
        message: String,
    },
    /// Started, readiness not yet passed.
    NotReady {
        reason: String,
        message: String,
    },
    Ready {
        message: String,
    },
    /// Running, readiness timed out (the process keeps running).
    ReadinessTimeout {
        message: String,
    },
    /// Ended with code 0. `stopped`: after a requested stop.
    Succeeded {
        stopped: bool,
        message: String,
    },
    /// Ended after a requested stop, not with code 0.
    Stopped {
        message: String,
    },
    /// A process with `readiness` ended without ever having been ready: not ready and stalled
    /// whatever its exit. `succeeded`: the `Succeeded` condition's (status, reason, message),
    /// which still follows the exit.
    ExitedBeforeReady {
        succeeded: (&'static str, String, String),
        message: String,
    },
    /// Ended in failure.
    Failed {
        reason: String,
        message: String,
    },
    /// An error that may heal (agent unreachable).
    Degraded {
        reason: String,
        message: String,
    },
}

/// The status the object should have, given the facts.
pub fn compute(f: &Facts<'_>) -> SandboxProcessStatus {
    let now = seconds(&f.now);
    if is_final(f.prev) {
        return with_generation(f.prev, f.generation);
    }
    let (mut s, outcome) = match compute_inner(f, &now) {
        Some(x) => x,
        // Nothing new (agent briefly unreachable): keep what is stored.
        None => return with_generation(f.prev, f.generation),
    };
    s.observed_generation = f.generation;
    s.conditions = conditions(&outcome, &f.prev.conditions, f.generation, &now);
    if !f.pod_name.is_empty() {
        s.pod_name = Some(f.pod_name.to_string());
    }
    s
}

fn with_generation(prev: &SandboxProcessStatus, generation: Option<i64>) -> SandboxProcessStatus {
    let mut s = prev.clone();
    s.observed_generation = generation;
    for c in &mut s.conditions {
        c.observed_generation = generation;
    }
    s
}

fn compute_inner(f: &Facts<'_>, now: &Time) -> Option<(SandboxProcessStatus, Outcome)> {
    let record = match f.agent {
        AgentView::Record(r) => Some(r.as_ref()),
        _ => None,
    };
    // The pod the process was started in: recorded, else the agent's record.
    let started_in = f
        .prev
        .pod_uid
        .clone()
        .or_else(|| record.map(|r| r.pod_uid.clone()));
    let Some(started_in) = started_in else {
        return Some(not_started(f, now));
    };
    let mut s = carried_over(f, &started_in);
    if let Some(r) = record {
        record_parts(&mut s, r, f.output_due);
    }
    // The pod is gone or replaced: the handle is stale — unless the process had already ended on
    // its own, in which case that end is the truth.
    let ended_on_its_own = record
        .is_some_and(|r| r.is_final() && r.end_reason != Some(wire::EndReason::ContainerExited));
    if let Some((reason, message)) = stale(f, &started_in, record).filter(|_| !ended_on_its_own) {
        if let Some(r) = record.filter(|r| r.is_final()) {
            s.exit = r.exit.clone();
            s.finished_at = parse_time(r.finished_at.as_deref());
        }
        return Some(stale_handle(s, reason, message, now));
    }
    match f.agent {
        AgentView::Record(r) => Some(from_record(s, r, f.spec.readiness.is_some(), now)),
        AgentView::NotFound => Some(not_found(s, now)),
        AgentView::Unreachable { since, message } if elapsed(since, now) >= f.agent_grace => {
            Some(unreachable(s, since, message))
        }
        // Within the grace period, or started but not asked (cannot happen in the controller):
        // keep what is stored.
        _ => None,
    }
}

/// A started process's status before this look: what we knew, on the node it was started on
/// (recorded once started; on the first look after the start, the pod's).
fn carried_over(f: &Facts<'_>, started_in: &str) -> SandboxProcessStatus {
    let prev = f.prev;
    let pod_node = f.pod.and_then(|p| p.node_name.clone());
    let node_name = match prev.pod_uid {
        Some(_) => prev.node_name.clone().or(pod_node),
        None => pod_node.or_else(|| prev.node_name.clone()),
    };
    SandboxProcessStatus {
        node_name,
        pod_uid: Some(started_in.to_string()),
        target_pod_uid: prev.target_pod_uid.clone().or(Some(started_in.to_string())),
        container_name: prev.container_name.clone(),
        container_id: prev.container_id.clone(),
        pid: prev.pid,
        started_at: prev.started_at.clone(),
        ready_at: prev.ready_at.clone(),
        output: prev.output.clone(),
        usage: prev.usage.clone(),
        processes: prev.processes,
        log_match: prev.log_match.clone(),
        stdin: prev.stdin,
        restart_count: prev.restart_count,
        last_exit: prev.last_exit.clone(),
        phase: Some(Phase::Running),
        ..Default::default()
    }
}

/// Why the handle is stale, if the pod it was started in is gone, replaced, or being deleted
/// with the process ended with its container.
fn stale(
    f: &Facts<'_>,
    started_in: &str,
    record: Option<&ProcessRecord>,
) -> Option<(EndReason, String)> {
    match f.pod {
        None => Some((
            EndReason::PodDeleted,
            format!("pod {} was deleted while the process ran", f.pod_name),
        )),
        Some(p) if p.uid != started_in => Some((
            EndReason::PodReplaced,
            format!(
                "pod {} was replaced (uid {} → {}) while the process ran",
                f.pod_name, started_in, p.uid
            ),
        )),
        Some(p) if p.terminating && record.is_some_and(|r| r.is_final()) => Some((
            EndReason::PodDeleted,
            format!(
                "pod {} was deleted; the process ended with its container",
                f.pod_name
            ),
        )),
        _ => None,
    }
}

/// The agent answers but has no record of a process it started: lost, finally.
fn not_found(mut s: SandboxProcessStatus, now: &Time) -> (SandboxProcessStatus, Outcome) {
    s.phase = Some(Phase::Error);
    s.end_reason = Some(EndReason::Lost);
    s.finished_at = Some(now.clone());
    let message = format!(
        "the agent on node {} has no record of the process",
        s.node_name.as_deref().unwrap_or("?")
    );
    s.error = Some(ProcessError {
        code: ErrorCode::ProcessNotFound,
        message: message.clone(),
    });
    let reason = ErrorCode::ProcessNotFound.as_str().into();
    (s, Outcome::Failed { reason, message })
}

/// No answer from the agent beyond the grace period: not final (it may come back).
fn unreachable(
    mut s: SandboxProcessStatus,
    since: &Time,
    message: &str,
) -> (SandboxProcessStatus, Outcome) {
    s.phase = Some(Phase::Error);
    let message = format!(
        "the agent on node {} has not answered since {}: {message}",
        s.node_name.as_deref().unwrap_or("?"),
        since.0
    );
    s.error = Some(ProcessError {
        code: ErrorCode::ProcessLost,
        message: message.clone(),
    });
    let reason = ErrorCode::ProcessLost.as_str().into();
    (s, Outcome::Degraded { reason, message })
}

fn elapsed(since: &Time, now: &Time) -> Duration {
    Duration::from_secs(now.0.as_second().saturating_sub(since.0.as_second()).max(0) as u64)
}

mod conditions;
mod not_started;
mod plan;
mod record;
mod withheld;

use conditions::*;
pub use conditions::{transitions, Note};
use not_started::*;
pub use not_started::{start_deadline_left, start_refusal};
pub use plan::{plan, refreshes, with_output, Write, LAUNCH_HOLD};
use record::*;
pub use withheld::{printable, refuses_content, withheld};

#[cfg(test)]
mod tests;
