//! Where a process is, from its object: the rules live on the status type in `sandbox_api`
//! (one definition for the operator and this library); here they are read off an object and
//! their answers turned into this library's errors.
use kube::ResourceExt;
use sandbox_api::crd::{NoExit, Phase, ProcessError, SandboxProcess};

use crate::error::{Error, Result};

/// How a process ended ([`Process::wait`](crate::Process::wait)).
pub use sandbox_api::crd::Exit;

/// The status will not change any more: phase `Exited`, or an `Error` that cannot heal
/// (`AgentUnavailable`, and `ProcessLost` without an end reason, recover when the agent answers).
pub fn is_final(o: &SandboxProcess) -> bool {
    o.status.as_ref().is_some_and(|s| s.is_final())
}

/// The operator has started the process (`status.podUID` is set then): it has output.
pub fn is_started(o: &SandboxProcess) -> bool {
    o.status.as_ref().is_some_and(|s| s.is_started())
}

/// `Ready=True`; for a process with `readiness` that has ended, only if it was ever ready.
pub fn is_ready(o: &SandboxProcess) -> bool {
    o.status.as_ref().is_some_and(|s| s.is_ready(&o.spec))
}

fn failed(o: &SandboxProcess, e: &ProcessError) -> Error {
    Error::Process {
        name: o.name_any(),
        code: e.code,
        message: e.message.clone(),
    }
}

/// The error of a process that ended without ever being started (`ContainerNotFound`,
/// `ProcessSpawnFailed`, `InvalidProcessCwd`, ...): it has no output, only `status.error`.
pub fn never_started(o: &SandboxProcess) -> Option<Error> {
    let e = o.status.as_ref()?.never_started()?;
    Some(failed(o, e))
}

/// How a final object ended: its [`Exit`], or the error that phase `Error` carries.
pub fn exit_of(o: &SandboxProcess) -> Result<Exit> {
    let outcome = match &o.status {
        Some(s) => s.outcome(),
        None => Err(NoExit::Unknown),
    };
    outcome.map_err(|why| match why {
        NoExit::Failed(e) => failed(o, &e),
        NoExit::EndedWithoutExit(reason) => Error::EndedWithoutExit {
            name: o.name_any(),
            reason,
        },
        NoExit::Unknown => Error::Transport(format!(
            "sandboxprocess {} ended without an exit status",
            o.name_any()
        )),
    })
}

/// How the previous run of a restarting process ended (`status.lastExit`, as a container's
/// `lastState.terminated`); `None` before its first restart. `status.restartCount` counts them.
pub fn last_exit_of(o: &SandboxProcess) -> Option<Exit> {
    let l = o.status.as_ref()?.last_exit.as_ref()?;
    Some(Exit {
        code: l.exit.code,
        signal: l.exit.signal,
        timed_out: l.exit.timed_out,
        end_reason: Some(l.end_reason),
    })
}

/// What `wait_ready` says of the object that ended its wait.
pub fn ready_outcome(o: &SandboxProcess) -> Result<()> {
    if is_ready(o) {
        return Ok(());
    }
    let s = o.status.clone().unwrap_or_default();
    if let (Some(Phase::Error), Some(e)) = (s.phase, &s.error) {
        return Err(failed(o, e));
    }
    let message = match s.condition(sandbox_api::crd::condition::READY) {
        Some(c) if c.status != "True" && !c.reason.is_empty() => {
            format!("{}: {}", c.reason, c.message)
        }
        _ => "readiness never passed".to_string(),
    };
    Err(Error::ExitedBeforeReady {
        name: o.name_any(),
        message,
    })
}

/// For a process that has already ended, how (what `kill` reports instead of acting).
pub fn already_ended(o: &SandboxProcess) -> Option<String> {
    if !is_final(o) {
        return None; // also an Error that heals: it may still run
    }
    let s = o.status.as_ref()?;
    match s.phase? {
        Phase::Exited => Some(match (&s.exit, s.end_reason) {
            (Some(e), _) => match e.signal {
                Some(sig) => format!("already exited (code {}, signal {sig})", e.code),
                None => format!("already exited (code {})", e.code),
            },
            (None, Some(r)) => format!("already ended ({r}) without an exit code"),
            (None, None) => "already ended".to_string(),
        }),
        Phase::Error => Some(match &s.error {
            Some(e) => format!("already ended: {}: {}", e.code.as_str(), e.message),
            None => "already ended (phase Error)".to_string(),
        }),
        Phase::Pending | Phase::Running => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_api::crd::EndReason;
    use serde_json::Value;

    fn object(status: serde_json::Value) -> SandboxProcess {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "spec": {"podName": "w", "command": ["x"]},
            "status": status,
        }))
        .unwrap()
    }

    fn with_readiness(status: serde_json::Value) -> SandboxProcess {
        let mut o = object(status);
        o.spec.readiness =
            Some(serde_json::from_value(serde_json::json!({"tcpSocket": {"port": 8080}})).unwrap());
        o
    }

    fn ready_cond(status: &str, reason: &str, message: &str) -> serde_json::Value {
        serde_json::json!([{"type": "Ready", "status": status, "reason": reason,
            "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}])
    }

    #[test]
    fn exits_and_errors_carry_the_status() {
        let e = exit_of(&object(serde_json::json!({"phase": "Exited",
            "exit": {"code": 137, "signal": 9}, "endReason": "Signaled"})))
        .unwrap();
        assert_eq!(
            e,
            Exit {
                code: 137,
                signal: Some(9),
                timed_out: false,
                end_reason: Some(EndReason::Signaled)
            }
        );
        let e = exit_of(&object(serde_json::json!({"phase": "Error",
            "error": {"code": "ContainerNotFound", "message": "no container x"}})))
        .unwrap_err();
        assert_eq!(e.code(), "ContainerNotFound");
        assert_eq!(
            e.process_code(),
            Some(sandbox_api::crd::ErrorCode::ContainerNotFound)
        );
        let e = exit_of(&object(
            serde_json::json!({"phase": "Exited", "endReason": "Stopped"}),
        ))
        .unwrap_err();
        assert_eq!(e.code(), "EndedWithoutExit");
    }

    #[test]
    fn a_process_that_never_started_is_its_status_error() {
        let o = object(serde_json::json!({"phase": "Error", "nodeName": "n1",
            "error": {"code": "ProcessSpawnFailed", "message": "exec \"nope\": not found"}}));
        assert!(!is_started(&o));
        let e = never_started(&o).expect("never started");
        assert_eq!(
            e.to_string(),
            "sandboxprocess p failed: ProcessSpawnFailed: exec \"nope\": not found"
        );
        let lost = object(
            serde_json::json!({"phase": "Error", "nodeName": "n1", "podUID": "u",
            "error": {"code": "ProcessLost", "message": "gone"}}),
        );
        assert!(is_started(&lost) && never_started(&lost).is_none());
        let pending = object(serde_json::json!({"phase": "Pending", "nodeName": "n1"}));
        assert!(!is_started(&pending) && never_started(&pending).is_none());
    }

    #[test]
    fn kill_leaves_an_ended_process_alone() {
        let said = |v: serde_json::Value| already_ended(&object(v));
        assert_eq!(
            said(serde_json::json!({"phase": "Exited", "exit": {"code": 3}})).as_deref(),
            Some("already exited (code 3)")
        );
        assert_eq!(
            said(serde_json::json!({"phase": "Exited", "exit": {"code": 143, "signal": 15}}))
                .as_deref(),
            Some("already exited (code 143, signal 15)")
        );
        assert_eq!(
            said(serde_json::json!({"phase": "Error",
                "error": {"code": "ContainerNotFound", "message": "no container x"}}))
            .as_deref(),
            Some("already ended: ContainerNotFound: no container x")
        );
        assert!(
            said(serde_json::json!({"phase": "Exited", "endReason": "Stopped"}))
                .unwrap()
                .starts_with("already ended (Stopped)")
        );
        for running in ["Running", "Pending"] {
            assert_eq!(said(serde_json::json!({"phase": running})), None);
        }
        assert_eq!(said(serde_json::json!({})), None, "no status yet");
    }

    #[test]
    fn ready_only_if_it_was_ever_ready() {
        let o = with_readiness(serde_json::json!({"phase": "Exited", "exit": {"code": 0},
            "endReason": "Exited", "conditions": ready_cond("False", "ExitedBeforeReady",
                "exited with code 0 before it was ever ready")}));
        let e = ready_outcome(&o).unwrap_err();
        assert_eq!(e.code(), "ExitedBeforeReady");
        assert_eq!(
            e.to_string(),
            "sandboxprocess p ended before it was ready: \
             ExitedBeforeReady: exited with code 0 before it was ever ready"
        );
        for reason in ["Succeeded", "Stopped"] {
            let o = with_readiness(serde_json::json!({"phase": "Exited", "exit": {"code": 0},
                "conditions": ready_cond("True", reason, "exited with code 0")}));
            assert!(!is_ready(&o), "{reason}");
            let e = ready_outcome(&o).unwrap_err();
            assert!(e.to_string().ends_with("readiness never passed"), "{e}");
        }
        let o = with_readiness(serde_json::json!({"phase": "Error", "podUID": "u",
            "error": {"code": "StaleProcessHandle", "message": "pod w was deleted"},
            "conditions": ready_cond("False", "StaleProcessHandle", "pod w was deleted")}));
        assert_eq!(ready_outcome(&o).unwrap_err().code(), "StaleProcessHandle");
        let running = with_readiness(serde_json::json!({"phase": "Running",
            "readyAt": "2026-01-01T00:00:01Z", "conditions": ready_cond("True", "Ready", "")}));
        assert!(ready_outcome(&running).is_ok());
        for reason in ["Succeeded", "Stopped"] {
            let o = with_readiness(serde_json::json!({"phase": "Exited", "exit": {"code": 0},
                "readyAt": "2026-01-01T00:00:01Z", "conditions": ready_cond("True", reason, "")}));
            assert!(ready_outcome(&o).is_ok(), "{reason}");
        }
        let o = object(serde_json::json!({"phase": "Exited", "exit": {"code": 0},
            "conditions": ready_cond("True", "Succeeded", "exited with code 0")}));
        assert!(ready_outcome(&o).is_ok());
        let o = with_readiness(serde_json::json!({"phase": "Running",
            "conditions": ready_cond("False", "ReadinessPending", "")}));
        assert!(!is_ready(&o) && !is_final(&o));
    }

    /// clients/conformance/status.json: the same cases the Python client's tests run.
    const STATUS: &str = include_str!("../../conformance/status.json");

    #[test]
    fn conformance_status() {
        let doc: Value = serde_json::from_str(STATUS).expect("status.json is JSON");
        for case in crate::conformance::cases(&doc, "cases", 20) {
            let name = case["name"].as_str().expect("name");
            let o = crate::conformance::object(case);
            let want = &case["expect"];
            let flag = |k: &str| want[k].as_bool().expect(k);
            assert_eq!(is_final(&o), flag("final"), "{name}: final");
            assert_eq!(is_started(&o), flag("started"), "{name}: started");
            assert_eq!(is_ready(&o), flag("ready"), "{name}: ready");
            let never = never_started(&o).map(|e| e.code().to_string());
            assert_eq!(
                never.as_deref(),
                want["neverStarted"].as_str(),
                "{name}: never"
            );
            match (exit_of(&o), &want["exit"]) {
                (Ok(got), Value::Object(w)) if !w.contains_key("error") => {
                    let wanted = Exit {
                        code: w["code"].as_i64().expect("code") as i32,
                        signal: w["signal"].as_i64().map(|s| s as i32),
                        timed_out: w["timedOut"].as_bool().expect("timedOut"),
                        end_reason: serde_json::from_value(w["endReason"].clone()).unwrap(),
                    };
                    assert_eq!(got, wanted, "{name}: exit");
                }
                (Err(e), Value::Object(w)) => {
                    assert_eq!(Some(e.code()), w["error"].as_str(), "{name}: exit error")
                }
                // No outcome yet: neither a process code nor an end.
                (Err(e), Value::Null) => assert_eq!(e.code(), "Transport", "{name}: {e}"),
                (got, w) => panic!("{name}: exit {got:?}, expected {w}"),
            }
        }
    }
}
