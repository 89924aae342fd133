//! The status of a process not started yet: waiting for its pod, its container, its agent, the
//! start deadline; or never to be started (a stale handle, a stop before the start).
use super::*;

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
pub(super) fn not_started(f: &Facts<'_>, now: &Time) -> (SandboxProcessStatus, Outcome) {
    let v = Verdicts {
        f,
        now,
        // Pinned to the pod first seen under the name.
        target: f
            .prev
            .target_pod_uid
            .clone()
            .or_else(|| f.pod.map(|p| p.uid.clone())),
    };
    if let Some(done) = v.by_spec() {
        return done;
    }
    match v.by_pod() {
        Err(done) => done,
        Ok((container, node)) => v.by_agent(container, node),
    }
}

/// The status of a process not started, judged in turn by the spec, the pod, the agent.
struct Verdicts<'a, 'f> {
    f: &'a Facts<'f>,
    now: &'a Time,
    target: Option<String>,
}

// The `Err` of `by_pod` is the verdict itself, built once per reconcile and returned at once: its
// size costs nothing here.
#[allow(clippy::result_large_err)]
impl Verdicts<'_, '_> {
    fn pending(&self, reason: &str, message: String) -> (SandboxProcessStatus, Outcome) {
        let s = SandboxProcessStatus {
            phase: Some(Phase::Pending),
            node_name: self.f.pod.and_then(|p| p.node_name.clone()),
            target_pod_uid: self.target.clone(),
            ..Default::default()
        };
        let reason = reason.into();
        (s, Outcome::Pending { reason, message })
    }

    fn error(&self, code: ErrorCode, message: String) -> (SandboxProcessStatus, Outcome) {
        let s = SandboxProcessStatus {
            phase: Some(Phase::Error),
            node_name: self.f.pod.and_then(|p| p.node_name.clone()),
            target_pod_uid: self.target.clone(),
            finished_at: Some(self.now.clone()),
            error: Some(ProcessError {
                code,
                message: message.clone(),
            }),
            ..Default::default()
        };
        let reason = code.as_str().into();
        (s, Outcome::Failed { reason, message })
    }

    /// Never to be started: an invalid spec, a stop before the start, a start refused (deadline,
    /// the pinned pod replaced).
    fn by_spec(&self) -> Option<(SandboxProcessStatus, Outcome)> {
        let f = self.f;
        if let Some(inv) = f.invalid {
            let code = ErrorCode::from_wire(inv.code).unwrap_or(ErrorCode::ProcessSpawnFailed);
            return Some(self.error(code, format!("invalid spec: {inv}")));
        }
        if f.spec.stop {
            return Some(self.stopped_before_start());
        }
        start_refusal(f.spec, f.prev, f.pod, f.created, self.now)
            .map(|(code, message)| self.error(code, message))
    }

    fn stopped_before_start(&self) -> (SandboxProcessStatus, Outcome) {
        let message = "stop was requested before the process started; it was never started";
        let mut outcome = Outcome::Stopped {
            message: message.into(),
        };
        if self.f.spec.readiness.is_some() {
            // Never started, so never ready either: a wait for Ready must not pass.
            outcome = Outcome::ExitedBeforeReady {
                succeeded: ("False", "Stopped".into(), message.into()),
                message: format!("{message}, so it was never ready"),
            };
        }
        let s = SandboxProcessStatus {
            phase: Some(Phase::Exited),
            end_reason: Some(EndReason::Stopped),
            finished_at: Some(self.now.clone()),
            target_pod_uid: self.target.clone(),
            ..Default::default()
        };
        (s, outcome)
    }

    /// The pod and its container: `Ok((container, node))` when the process can start there.
    fn by_pod(&self) -> Result<(&str, &str), (SandboxProcessStatus, Outcome)> {
        let f = self.f;
        let Some(pod) = f.pod else {
            return Err(self.pending(
                "PodNotFound",
                if f.pod_name.is_empty() {
                    "no pod matches spec.podSelector with its target container running and ready (yet)"
                        .to_string()
                } else {
                    format!("pod {} does not exist (yet)", f.pod_name)
                },
            ));
        };
        let not_found = |m: String| Err(self.error(ErrorCode::ContainerNotFound, m));
        let (container, running) = match &pod.container {
            ContainerFacts::NotInSpec { name } => {
                return not_found(format!("pod {} has no container {name:?}", f.pod_name))
            }
            ContainerFacts::InitContainer { name } => {
                return not_found(format!(
                    "container {name:?} of pod {} is an init container; a process runs only in one of the pod's containers",
                    f.pod_name
                ))
            }
            ContainerFacts::Found { name, running } => (name.as_str(), *running),
        };
        if matches!(pod.phase, PodPhase::Succeeded | PodPhase::Failed) {
            return Err(self.error(
                ErrorCode::ContainerUnavailable,
                format!("pod {} has terminated (phase {:?})", f.pod_name, pod.phase),
            ));
        }
        if pod.terminating {
            return Err(self.pending("PodPending", format!("pod {} is terminating", f.pod_name)));
        }
        match pod.node_name.as_deref() {
            Some(node) if pod.phase == PodPhase::Running && running => Ok((container, node)),
            _ => Err(self.pending(
                "PodPending",
                format!(
                    "waiting for container {container:?} of pod {} to run (pod phase {:?})",
                    f.pod_name, pod.phase
                ),
            )),
        }
    }

    /// What the node's agent said about the start.
    fn by_agent(&self, container: &str, node: &str) -> (SandboxProcessStatus, Outcome) {
        match self.f.agent {
            AgentView::Rejected(e) => {
                let code = ErrorCode::from_wire(e.code).unwrap_or(ErrorCode::ProcessSpawnFailed);
                self.error(code, e.message.clone())
            }
            AgentView::Unreachable { since, message }
                if elapsed(since, self.now) >= self.f.agent_grace =>
            {
                let message = format!(
                    "the agent on node {node} has not answered since {}: {message}",
                    since.0
                );
                let (mut s, _) = self.error(ErrorCode::AgentUnavailable, message.clone());
                s.finished_at = None;
                let reason = ErrorCode::AgentUnavailable.as_str().into();
                (s, Outcome::Degraded { reason, message })
            }
            AgentView::Retrying { reason, message } => self.pending(reason, message.clone()),
            AgentView::Unreachable { message, .. } => self.pending(
                "Starting",
                format!("waiting for the agent on node {node}: {message}"),
            ),
            _ => self.pending(
                "Starting",
                format!("starting in container {container:?} on node {node}"),
            ),
        }
    }
}

pub(super) fn stale_handle(
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
