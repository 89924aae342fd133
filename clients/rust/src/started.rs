//! The one rule of every handle call that needs a started process (stdin, signal, probe, logs,
//! output, `wait_for_log`, `wait_for_port`): wait for the start within the call's own timeout; a
//! start that failed is that start's typed error, not the subresource's "has not started a
//! process"; a wait that runs out says what the process is waiting for. The decision is pure
//! ([`start_state`]) and checked against `clients/conformance/start.json`, which the Python
//! client's tests run too.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sandbox_api::crd::{condition, SandboxProcess, SandboxProcessStatus};

use crate::error::{Error, Result};
use crate::process::Process;
use crate::state::exit_of;

/// How long a read of the object may take when a timeout is being explained.
const EXPLAIN_READ: Duration = Duration::from_secs(10);

/// Where a process is with its start.
#[derive(Debug)]
pub enum StartState {
    /// Started: it has (or had) output, stdin and a process group.
    Started,
    /// Not yet. `reason` is the machine-readable why (`PodNotFound`, `PodPending`,
    /// `AgentUnavailable`, ...; `None` before the operator wrote a status), `state` says it for
    /// people (see [`describe`]).
    Waiting {
        reason: Option<String>,
        state: String,
    },
    /// It never will: the error of the start (`ContainerNotFound`, `StartDeadlineExceeded`, a
    /// stop before the start, ...).
    Failed(Error),
}

/// Whether `o`'s process has started, still may, or never will.
pub fn start_state(o: &SandboxProcess) -> StartState {
    let s = o.status.clone().unwrap_or_default();
    if s.is_started() {
        return StartState::Started;
    }
    if s.is_final() {
        // An end with an exit status of its own was a start (a status without podUID from an
        // older operator): the call goes ahead and the subresource answers for it.
        return match exit_of(o) {
            Ok(_) => StartState::Started,
            Err(e) => StartState::Failed(e),
        };
    }
    StartState::Waiting {
        reason: why(&s).map(|(r, _)| r),
        state: describe(o),
    }
}

/// What the process is at, for people: `phase Pending, PodNotFound: pod w does not exist
/// (yet)`; the error or the `Ready` condition's reason and message when there is one.
pub fn describe(o: &SandboxProcess) -> String {
    let Some((s, phase)) = o.status.as_ref().and_then(|s| Some((s, s.phase?))) else {
        return "no status yet (the operator has not taken it up)".into();
    };
    match why(s) {
        Some((r, m)) if m.is_empty() => format!("phase {phase}, {r}"),
        Some((r, m)) => format!("phase {phase}, {r}: {m}"),
        None => format!("phase {phase}"),
    }
}

/// The reason and message the status gives for where it is: its error, else a `Ready`
/// condition that is not `True`.
fn why(s: &SandboxProcessStatus) -> Option<(String, String)> {
    if let Some(e) = &s.error {
        return Some((e.code.as_str().to_string(), e.message.clone()));
    }
    s.condition(condition::READY)
        .filter(|c| c.status != "True" && !c.reason.is_empty())
        .map(|c| (c.reason.clone(), c.message.clone()))
}

impl Process {
    /// Waits until the process has started, at most `timeout` (`None`: for ever). A start that
    /// failed is its error ([`Error::Process`] with its code, [`Error::EndedWithoutExit`]); one
    /// still waiting at the timeout is [`Error::NotStarted`] with the reason. `what` names the
    /// call in that error. Once seen started, a handle does not ask again.
    pub(crate) async fn ensure_started(
        &self,
        what: &'static str,
        timeout: Option<Duration>,
    ) -> Result<()> {
        if self.started.load(Ordering::Relaxed) {
            return Ok(());
        }
        let decided = |o: &SandboxProcess| !matches!(start_state(o), StartState::Waiting { .. });
        let watched = self.until(None, what, decided);
        let o = match timeout {
            None => watched.await?,
            Some(t) => match tokio::time::timeout(t, watched).await {
                Ok(got) => got?,
                Err(_) => return self.not_started(what, t).await,
            },
        };
        self.decide(what, &o, Duration::ZERO)
    }

    fn decide(&self, what: &'static str, o: &SandboxProcess, waited: Duration) -> Result<()> {
        match start_state(o) {
            StartState::Started => {
                self.started.store(true, Ordering::Relaxed);
                Ok(())
            }
            StartState::Failed(e) => Err(e),
            StartState::Waiting { reason, state } => Err(Error::NotStarted {
                name: self.name.clone(),
                what,
                timeout: waited,
                reason,
                state,
            }),
        }
    }

    /// The start was waited for `t` in vain: the object now says why (or that it just started).
    async fn not_started(&self, what: &'static str, t: Duration) -> Result<()> {
        match tokio::time::timeout(EXPLAIN_READ, self.object()).await {
            Ok(Ok(o)) => self.decide(what, &o, t),
            Ok(Err(e @ Error::NotFound(_))) => Err(e),
            Ok(Err(e)) => Err(Error::NotStarted {
                name: self.name.clone(),
                what,
                timeout: t,
                reason: None,
                state: format!("its status could not be read: {e}"),
            }),
            Err(_) => Err(Error::NotStarted {
                name: self.name.clone(),
                what,
                timeout: t,
                reason: None,
                state: "its status could not be read in time".into(),
            }),
        }
    }

    /// `fut`, given up `timeout` after `begun` (`None`: never) as [`Error::Timeout`] that says
    /// where the process is then; the process is not touched.
    pub(crate) async fn within<T>(
        &self,
        what: &'static str,
        timeout: Option<Duration>,
        begun: Instant,
        fut: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(t) = timeout else {
            return fut.await;
        };
        match tokio::time::timeout(t.saturating_sub(begun.elapsed()), fut).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout {
                name: self.name.clone(),
                what,
                timeout: t,
                state: self.state_now().await,
            }),
        }
    }

    /// [`describe`] of the object now; empty when it cannot be read quickly.
    async fn state_now(&self) -> String {
        match tokio::time::timeout(EXPLAIN_READ, self.object()).await {
            Ok(Ok(o)) => describe(&o),
            Ok(Err(Error::NotFound(_))) => "the object is gone".into(),
            _ => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// clients/conformance/start.json: the same cases the Python client's tests run.
    const CASES: &str = include_str!("../../conformance/start.json");

    #[test]
    fn conformance_cases() {
        let doc: Value = serde_json::from_str(CASES).expect("start.json is JSON");
        for case in crate::conformance::cases(&doc, "cases", 10) {
            let name = case["name"].as_str().expect("name");
            let o = crate::conformance::object(case);
            let want = &case["expect"];
            assert_eq!(
                crate::is_final(&o),
                want["final"].as_bool().expect("final"),
                "{name}: final"
            );
            let (decision, code) = match start_state(&o) {
                StartState::Started => ("started", None),
                StartState::Waiting { reason, .. } => ("wait", reason),
                StartState::Failed(e) => ("failed", Some(e.code().to_string())),
            };
            assert_eq!(decision, want["start"].as_str().unwrap(), "{name}: start");
            assert_eq!(code.as_deref(), want["code"].as_str(), "{name}: code");
            let said = describe(&o);
            for part in want["describe"].as_array().into_iter().flatten() {
                let part = part.as_str().unwrap();
                assert!(said.contains(part), "{name}: {said:?} lacks {part:?}");
            }
        }
    }

    #[test]
    fn a_start_that_times_out_is_named_by_its_reason() {
        let e = Error::NotStarted {
            name: "p".into(),
            what: "send_stdin",
            timeout: Duration::from_secs(2),
            reason: Some("PodNotFound".into()),
            state: "phase Pending, PodNotFound: pod w does not exist (yet)".into(),
        };
        assert_eq!(e.code(), "PodNotFound");
        assert!(e.is_timeout());
        assert_eq!(
            e.to_string(),
            "sandboxprocess p has not started after 2s (send_stdin needs a started process): \
             phase Pending, PodNotFound: pod w does not exist (yet)"
        );
        let t = Error::Timeout {
            name: "p".into(),
            what: "exit",
            timeout: Duration::from_secs(1),
            state: "phase Running".into(),
        };
        assert_eq!(
            t.to_string(),
            "timed out after 1s waiting for sandboxprocess p to exit: phase Running"
        );
    }

    /// clients/conformance/restart.json `status`: restarts and the last exit, read alike by
    /// both clients; a back-off is neither final nor a start to wait for.
    #[test]
    fn conformance_restarts() {
        let doc: Value = serde_json::from_str(include_str!("../../conformance/restart.json"))
            .expect("restart.json is JSON");
        for case in crate::conformance::cases(&doc, "status", 4) {
            let name = case["name"].as_str().expect("name");
            let o = crate::conformance::object(case);
            let want = &case["expect"];
            assert_eq!(
                crate::is_final(&o),
                want["final"].as_bool().unwrap(),
                "{name}"
            );
            let started = matches!(start_state(&o), StartState::Started);
            assert_eq!(started, want["start"] == "started", "{name}");
            let count = o.status.as_ref().map_or(0, |s| s.restart_count);
            assert_eq!(
                Some(i64::from(count)),
                want["restartCount"].as_i64(),
                "{name}"
            );
            let wanted = match &want["lastExit"] {
                Value::Null => None,
                w => Some(crate::Exit {
                    code: w["code"].as_i64().expect("code") as i32,
                    signal: w["signal"].as_i64().map(|s| s as i32),
                    timed_out: w["timedOut"].as_bool().expect("timedOut"),
                    end_reason: serde_json::from_value(w["endReason"].clone()).unwrap(),
                }),
            };
            assert_eq!(crate::last_exit_of(&o), wanted, "{name}");
        }
    }
}
