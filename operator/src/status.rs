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
    condition, EndReason, ErrorCode, ExitStatus, LogMatchStatus, OutputStatus, Phase, ProcessError,
    SandboxProcessSpec, SandboxProcessStatus, UsageStatus, DEFAULT_START_DEADLINE_SECONDS,
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
    /// The output summary may be refreshed now (at most every 5 s while running).
    pub output_due: bool,
}

/// Whether the process has reached an end the controller never leaves: exited, or an error that
/// cannot heal. `AgentUnavailable`, and `ProcessLost` seen only as an unreachable agent (no end
/// reason), recover when the agent answers again.
pub fn is_final(s: &SandboxProcessStatus) -> bool {
    match s.phase {
        Some(Phase::Exited) => true,
        Some(Phase::Error) => match s.error.as_ref().map(|e| e.code) {
            Some(ErrorCode::AgentUnavailable) => false,
            Some(ErrorCode::ProcessLost) => s.end_reason.is_some(),
            _ => true,
        },
        _ => false,
    }
}

/// Whether the process was started (the agent has or had it).
pub fn is_started(s: &SandboxProcessStatus) -> bool {
    s.pod_uid.is_some()
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
    let prev = f.prev;
    let record = match f.agent {
        AgentView::Record(r) => Some(r.as_ref()),
        _ => None,
    };
    // The pod the process was started in: recorded, else the agent's record.
    let started_in = prev
        .pod_uid
        .clone()
        .or_else(|| record.map(|r| r.pod_uid.clone()));

    let Some(started_in) = started_in else {
        return Some(not_started(f, now));
    };

    // Started. Carry over what we knew.
    // The node: recorded once started; on the first look after the start, the pod's.
    let pod_node = f.pod.and_then(|p| p.node_name.clone());
    let node_name = match prev.pod_uid {
        Some(_) => prev.node_name.clone().or(pod_node),
        None => pod_node.or_else(|| prev.node_name.clone()),
    };
    let mut s = SandboxProcessStatus {
        node_name,
        pod_uid: Some(started_in.clone()),
        target_pod_uid: prev.target_pod_uid.clone().or(Some(started_in.clone())),
        container_id: prev.container_id.clone(),
        pid: prev.pid,
        started_at: prev.started_at.clone(),
        ready_at: prev.ready_at.clone(),
        output: prev.output.clone(),
        usage: prev.usage.clone(),
        processes: prev.processes,
        log_match: prev.log_match.clone(),
        phase: Some(Phase::Running),
        ..Default::default()
    };
    if let Some(r) = record {
        if !r.container_id.is_empty() {
            s.container_id = Some(r.container_id.clone());
        }
        s.pid = r.pid.or(s.pid);
        s.started_at = parse_time(r.started_at.as_deref()).or(s.started_at);
        s.ready_at = parse_time(r.ready_at.as_deref()).or(s.ready_at);
        let due = r.is_final() || f.output_due || s.output.is_none();
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

    // The pod is gone or replaced: the handle is stale — unless the process had already ended on
    // its own, in which case that end is the truth.
    let ended_on_its_own = record
        .is_some_and(|r| r.is_final() && r.end_reason != Some(wire::EndReason::ContainerExited));
    if !ended_on_its_own {
        let stale = match f.pod {
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
            // Being deleted, and the process died with its container: the pod is the reason.
            Some(p) if p.terminating && record.is_some_and(|r| r.is_final()) => Some((
                EndReason::PodDeleted,
                format!(
                    "pod {} was deleted; the process ended with its container",
                    f.pod_name
                ),
            )),
            _ => None,
        };
        if let Some((reason, message)) = stale {
            if let Some(r) = record.filter(|r| r.is_final()) {
                s.exit = r.exit.clone();
                s.finished_at = parse_time(r.finished_at.as_deref());
            }
            return Some(stale_handle(s, reason, message, now));
        }
    }

    match f.agent {
        AgentView::Record(r) => Some(from_record(s, r, f.spec.readiness.is_some(), now)),
        AgentView::NotFound => {
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
            Some((
                s,
                Outcome::Failed {
                    reason: ErrorCode::ProcessNotFound.as_str().into(),
                    message,
                },
            ))
        }
        AgentView::Unreachable { since, message } => {
            if elapsed(since, now) < f.agent_grace {
                return None;
            }
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
            Some((
                s,
                Outcome::Degraded {
                    reason: ErrorCode::ProcessLost.as_str().into(),
                    message,
                },
            ))
        }
        // Started but not asked (cannot happen in the controller): keep what is stored.
        AgentView::NotAsked | AgentView::Rejected(_) | AgentView::Retrying { .. } => None,
    }
}

fn elapsed(since: &Time, now: &Time) -> Duration {
    Duration::from_secs(now.0.as_second().saturating_sub(since.0.as_second()).max(0) as u64)
}

/// How long until the start deadline passes, counted from the object's creation; `None` without
/// a creation time. A Pending object is looked at again by then, so the deadline's final `Error`
/// does not wait for an unrelated event.
pub fn start_deadline_left(
    spec: &SandboxProcessSpec,
    created: Option<&Time>,
    now: &Time,
) -> Option<Duration> {
    let deadline = spec
        .start_deadline_seconds
        .unwrap_or(DEFAULT_START_DEADLINE_SECONDS);
    created.map(|c| Duration::from_secs(deadline.max(0) as u64).saturating_sub(elapsed(c, now)))
}

/// Why the process must not start (any more), though the pod may be ready for it: the start
/// deadline has passed, or the pod is not the one first seen under that name. Final.
pub fn start_refusal(
    spec: &SandboxProcessSpec,
    prev: &SandboxProcessStatus,
    pod: Option<&PodFacts>,
    created: Option<&Time>,
    now: &Time,
) -> Option<(ErrorCode, String)> {
    let deadline = spec
        .start_deadline_seconds
        .unwrap_or(DEFAULT_START_DEADLINE_SECONDS);
    if let Some(c) = created {
        if elapsed(c, now) >= Duration::from_secs(deadline.max(0) as u64) {
            return Some((
                ErrorCode::StartDeadlineExceeded,
                format!(
                    "the process did not start within startDeadlineSeconds ({deadline} s) of the object's creation ({})",
                    c.0
                ),
            ));
        }
    }
    match (prev.target_pod_uid.as_deref(), pod) {
        (Some(pinned), Some(p)) if p.uid != pinned => Some((
            ErrorCode::StaleProcessHandle,
            format!(
                "pod {} was replaced before the process started (uid {pinned} when first seen, now {}); a process never starts in a pod created later under the same name",
                prev.pod_name.as_deref().unwrap_or(&spec.pod_name), p.uid
            ),
        )),
        _ => None,
    }
}

fn not_started(f: &Facts<'_>, now: &Time) -> (SandboxProcessStatus, Outcome) {
    // Pinned to the pod first seen under the name.
    let target = f
        .prev
        .target_pod_uid
        .clone()
        .or_else(|| f.pod.map(|p| p.uid.clone()));
    let pending = |reason: &str, message: String| {
        (
            SandboxProcessStatus {
                phase: Some(Phase::Pending),
                node_name: f.pod.and_then(|p| p.node_name.clone()),
                target_pod_uid: target.clone(),
                ..Default::default()
            },
            Outcome::Pending {
                reason: reason.into(),
                message,
            },
        )
    };
    let error = |code: ErrorCode, message: String| {
        (
            SandboxProcessStatus {
                phase: Some(Phase::Error),
                node_name: f.pod.and_then(|p| p.node_name.clone()),
                target_pod_uid: target.clone(),
                finished_at: Some(now.clone()),
                error: Some(ProcessError {
                    code,
                    message: message.clone(),
                }),
                ..Default::default()
            },
            Outcome::Failed {
                reason: code.as_str().into(),
                message,
            },
        )
    };
    if let Some(inv) = f.invalid {
        let code = ErrorCode::from_wire(inv.code).unwrap_or(ErrorCode::ProcessSpawnFailed);
        return error(code, format!("invalid spec: {inv}"));
    }
    if f.spec.stop {
        let message = "stop was requested before the process started; it was never started";
        let mut outcome = Outcome::Stopped {
            message: message.into(),
        };
        if f.spec.readiness.is_some() {
            // Never started, so never ready either: a wait for Ready must not pass.
            outcome = Outcome::ExitedBeforeReady {
                succeeded: ("False", "Stopped".into(), message.into()),
                message: format!("{message}, so it was never ready"),
            };
        }
        return (
            SandboxProcessStatus {
                phase: Some(Phase::Exited),
                end_reason: Some(EndReason::Stopped),
                finished_at: Some(now.clone()),
                target_pod_uid: target.clone(),
                ..Default::default()
            },
            outcome,
        );
    }
    if let Some((code, message)) = start_refusal(f.spec, f.prev, f.pod, f.created, now) {
        return error(code, message);
    }
    let Some(pod) = f.pod else {
        return pending(
            "PodNotFound",
            if f.pod_name.is_empty() {
                "no pod matches spec.podSelector with its target container running and ready (yet)"
                    .to_string()
            } else {
                format!("pod {} does not exist (yet)", f.pod_name)
            },
        );
    };
    let (container, running) = match &pod.container {
        ContainerFacts::NotInSpec { name } => {
            return error(
                ErrorCode::ContainerNotFound,
                format!("pod {} has no container {name:?}", f.pod_name),
            )
        }
        ContainerFacts::InitContainer { name } => {
            return error(
                ErrorCode::ContainerNotFound,
                format!(
                    "container {name:?} of pod {} is an init container; a process runs only in one of the pod's containers",
                    f.pod_name
                ),
            )
        }
        ContainerFacts::Found { name, running } => (name.as_str(), *running),
    };
    if matches!(pod.phase, PodPhase::Succeeded | PodPhase::Failed) {
        return error(
            ErrorCode::ContainerUnavailable,
            format!("pod {} has terminated (phase {:?})", f.pod_name, pod.phase),
        );
    }
    if pod.terminating {
        return pending("PodPending", format!("pod {} is terminating", f.pod_name));
    }
    if pod.phase != PodPhase::Running || pod.node_name.is_none() || !running {
        return pending(
            "PodPending",
            format!(
                "waiting for container {container:?} of pod {} to run (pod phase {:?})",
                f.pod_name, pod.phase
            ),
        );
    }
    let node = pod.node_name.as_deref().unwrap_or_default();
    match f.agent {
        AgentView::Rejected(e) => {
            let code = ErrorCode::from_wire(e.code).unwrap_or(ErrorCode::ProcessSpawnFailed);
            error(code, e.message.clone())
        }
        AgentView::Unreachable { since, message } if elapsed(since, now) >= f.agent_grace => {
            let message = format!(
                "the agent on node {node} has not answered since {}: {message}",
                since.0
            );
            let (mut s, _) = error(ErrorCode::AgentUnavailable, message.clone());
            s.finished_at = None;
            (
                s,
                Outcome::Degraded {
                    reason: ErrorCode::AgentUnavailable.as_str().into(),
                    message,
                },
            )
        }
        AgentView::Retrying { reason, message } => pending(reason, message.clone()),
        AgentView::Unreachable { message, .. } => pending(
            "Starting",
            format!("waiting for the agent on node {node}: {message}"),
        ),
        _ => pending(
            "Starting",
            format!("starting in container {container:?} on node {node}"),
        ),
    }
}

fn stale_handle(
    mut s: SandboxProcessStatus,
    reason: EndReason,
    message: String,
    now: &Time,
) -> (SandboxProcessStatus, Outcome) {
    s.phase = Some(Phase::Error);
    s.end_reason = Some(reason);
    s.finished_at = s.finished_at.or_else(|| Some(now.clone()));
    s.error = Some(ProcessError {
        code: ErrorCode::StaleProcessHandle,
        message: message.clone(),
    });
    (
        s,
        Outcome::Failed {
            reason: ErrorCode::StaleProcessHandle.as_str().into(),
            message,
        },
    )
}

fn describe_exit(e: &ExitStatus, reason: Option<EndReason>) -> String {
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
fn from_record(
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
fn before_ready(end: Outcome, readiness_timed_out: bool) -> Outcome {
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

/// (type, status, reason, message) for each condition.
fn condition_values(o: &Outcome) -> [(&'static str, &'static str, String, String); 4] {
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

fn conditions(
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

fn truncate(mut s: String, max: usize) -> String {
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

fn ready(s: &SandboxProcessStatus) -> bool {
    s.condition(condition::READY)
        .is_some_and(|c| c.status == "True")
}

/// The Events that the change from `prev` to `next` announces.
pub fn transitions(prev: &SandboxProcessStatus, next: &SandboxProcessStatus) -> Vec<Note> {
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
    if now_ready && !ready(prev) {
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

#[cfg(test)]
mod tests;
