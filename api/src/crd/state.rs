//! Where a process is, read from its status: final, started, ready, and how it ended. One rule
//! each, for the operator and the Rust client; the Python client's copy runs the same cases
//! (`clients/conformance/status.json`).
use super::{
    condition, EndReason, ErrorCode, Phase, ProcessError, SandboxProcessSpec, SandboxProcessStatus,
};

/// How a process ended: the root's exit code (128+n when signal n killed it), the signal,
/// whether `timeoutSeconds` stopped it, and the end reason (`Exited`, `Signaled`, `TimedOut`,
/// `Stopped`, `OOMKilled`, `ContainerExited`, `PodDeleted`, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    pub code: i32,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub end_reason: Option<EndReason>,
}

/// Why a status has no [`Exit`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoExit {
    /// Phase `Error`: the process could not run, was lost, or (while not final) its agent is
    /// unreachable.
    Failed(ProcessError),
    /// Ended before it ran (stopped or its pod gone before the start): an end reason, no exit.
    EndedWithoutExit(EndReason),
    /// Neither an exit nor a reason (not ended yet).
    Unknown,
}

impl SandboxProcessStatus {
    /// Whether the process has reached an end the controller never leaves: exited, or an error
    /// that cannot heal. `AgentUnavailable`, and `ProcessLost` seen only as an unreachable agent
    /// (no end reason), recover when the agent answers again.
    pub fn is_final(&self) -> bool {
        match self.phase {
            Some(Phase::Exited) => true,
            Some(Phase::Error) => match self.error.as_ref().map(|e| e.code) {
                Some(ErrorCode::AgentUnavailable) => false,
                Some(ErrorCode::ProcessLost) => self.end_reason.is_some(),
                _ => true,
            },
            _ => false,
        }
    }

    /// Whether the process was started (the agent has or had it): `podUID` is set then.
    pub fn is_started(&self) -> bool {
        self.pod_uid.is_some()
    }

    /// `Ready=True`; for a process with `readiness` that has ended, only if it was ever ready
    /// (`readyAt`): an older operator wrote `Ready=True` for one that exited with 0 before it
    /// was.
    pub fn is_ready(&self, spec: &SandboxProcessSpec) -> bool {
        let said = self
            .condition(condition::READY)
            .is_some_and(|c| c.status == "True");
        let ended_never_ready =
            spec.readiness.is_some() && self.ready_at.is_none() && self.is_final();
        said && !ended_never_ready
    }

    /// How the process ended: its [`Exit`] (phase `Exited` with `exit`), else why there is none.
    pub fn outcome(&self) -> Result<Exit, NoExit> {
        match (self.phase, &self.exit, &self.error, self.end_reason) {
            (Some(Phase::Exited), Some(e), _, reason) => Ok(Exit {
                code: e.code,
                signal: e.signal,
                timed_out: e.timed_out,
                end_reason: reason,
            }),
            (_, _, Some(e), _) => Err(NoExit::Failed(e.clone())),
            (_, _, None, Some(reason)) => Err(NoExit::EndedWithoutExit(reason)),
            _ => Err(NoExit::Unknown),
        }
    }

    /// The error of a process that ended without ever being started (`ContainerNotFound`,
    /// `ProcessSpawnFailed`, ...): it has no output, only `status.error`.
    pub fn never_started(&self) -> Option<&ProcessError> {
        if self.is_started() || self.phase != Some(Phase::Error) || !self.is_final() {
            return None;
        }
        self.error.as_ref()
    }
}
