use super::*;
use sandbox_api::wire::{ApiError, OutputSummary};

const GRACE: Duration = Duration::from_secs(30);

fn t(s: i64) -> Time {
    Time(Timestamp::from_second(1_800_000_000 + s).unwrap())
}

fn spec() -> SandboxProcessSpec {
    serde_json::from_str(r#"{"podName":"web","command":["sleep","10"]}"#).unwrap()
}

fn pod(uid: &str) -> PodFacts {
    PodFacts {
        uid: uid.into(),
        node_name: Some("node-a".into()),
        phase: PodPhase::Running,
        terminating: false,
        container: ContainerFacts::Found {
            name: "main".into(),
            running: true,
        },
    }
}

fn record(phase: wire::Phase) -> ProcessRecord {
    ProcessRecord {
        phase,
        pid: Some(42),
        host_pid: Some(4242),
        started_at: Some("2027-01-15T08:00:00.123456789Z".into()),
        output: OutputSummary {
            stdout_bytes: 3,
            stderr_bytes: 0,
            tail: "hi\n".into(),
            dropped_bytes: 0,
        },
        revision: 1,
        ..ProcessRecord::starting("obj-uid", "pod-1", "main", "ctr-1")
    }
}

fn exited(code: i32, signal: Option<i32>, reason: wire::EndReason) -> ProcessRecord {
    let mut r = record(wire::Phase::Exited);
    r.exit = Some(wire::ExitStatus {
        code,
        signal,
        timed_out: reason == wire::EndReason::TimedOut,
    });
    r.end_reason = Some(reason);
    r.finished_at = Some("2027-01-15T08:00:05.9Z".into());
    r
}

struct Case {
    spec: SandboxProcessSpec,
    prev: SandboxProcessStatus,
    pod: Option<PodFacts>,
    agent: AgentView,
    now: Time,
    output_due: bool,
    generation: i64,
    created: Option<Time>,
}

impl Case {
    fn new() -> Case {
        Case {
            spec: spec(),
            prev: SandboxProcessStatus::default(),
            pod: Some(pod("pod-1")),
            agent: AgentView::NotAsked,
            now: t(0),
            output_due: true,
            generation: 1,
            created: None,
        }
    }
    fn pod(mut self, p: Option<PodFacts>) -> Case {
        self.pod = p;
        self
    }
    fn agent(mut self, a: AgentView) -> Case {
        self.agent = a;
        self
    }
    fn record(self, r: ProcessRecord) -> Case {
        self.agent(AgentView::Record(Box::new(r)))
    }
    fn prev(mut self, p: SandboxProcessStatus) -> Case {
        self.prev = p;
        self
    }
    /// The spec declares a readiness check (a TCP port).
    fn readiness(mut self) -> Case {
        self.spec.readiness = Some(
            serde_json::from_str(r#"{"tcpSocket":{"port":8080},"timeoutSeconds":5}"#).unwrap(),
        );
        self
    }
    fn at(mut self, s: i64) -> Case {
        self.now = t(s);
        self
    }
    fn clone_at(&self, s: i64) -> Case {
        Case {
            spec: self.spec.clone(),
            prev: self.prev.clone(),
            pod: self.pod.clone(),
            agent: AgentView::NotAsked,
            now: t(s),
            output_due: self.output_due,
            generation: self.generation,
            created: self.created.clone(),
        }
    }
    fn run(&self) -> SandboxProcessStatus {
        compute(&Facts {
            generation: Some(self.generation),
            spec: &self.spec,
            prev: &self.prev,
            pod_name: &self.spec.pod_name,
            pod: self.pod.as_ref(),
            created: self.created.as_ref(),
            agent: &self.agent,
            invalid: None,
            now: self.now.clone(),
            agent_grace: GRACE,
            output_due: self.output_due,
        })
    }
}

fn cond<'a>(s: &'a SandboxProcessStatus, ty: &str) -> &'a Condition {
    s.condition(ty)
        .unwrap_or_else(|| panic!("no {ty} condition"))
}

/// (status, reason) of Ready, Succeeded, Reconciling, Stalled.
fn conds(s: &SandboxProcessStatus) -> [(String, String); 4] {
    [
        condition::READY,
        condition::SUCCEEDED,
        condition::RECONCILING,
        condition::STALLED,
    ]
    .map(|ty| {
        let c = cond(s, ty);
        (c.status.clone(), c.reason.clone())
    })
}

fn c(status: &str, reason: &str) -> (String, String) {
    (status.into(), reason.into())
}

#[test]
fn pod_missing_is_pending_pod_not_found() {
    let s = Case::new().pod(None).run();
    assert_eq!(s.phase, Some(Phase::Pending));
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(
        conds(&s),
        [
            c("False", "PodNotFound"),
            c("Unknown", "PodNotFound"),
            c("True", "PodNotFound"),
            c("False", "PodNotFound"),
        ]
    );
    for c in &s.conditions {
        assert_eq!(c.observed_generation, Some(1));
        assert_eq!(c.last_transition_time, t(0));
    }
    assert!(!is_final(&s));
}

#[test]
fn pod_pending_or_container_not_running_is_pending_pod_pending() {
    let mut p = pod("pod-1");
    p.phase = PodPhase::Pending;
    p.node_name = None;
    let s = Case::new().pod(Some(p)).run();
    assert_eq!(s.phase, Some(Phase::Pending));
    assert_eq!(cond(&s, condition::RECONCILING).reason, "PodPending");

    let mut p = pod("pod-1");
    p.container = ContainerFacts::Found {
        name: "main".into(),
        running: false,
    };
    let s = Case::new().pod(Some(p)).run();
    assert_eq!(cond(&s, condition::RECONCILING).reason, "PodPending");

    let mut p = pod("pod-1");
    p.terminating = true;
    let s = Case::new().pod(Some(p)).run();
    assert_eq!(cond(&s, condition::RECONCILING).reason, "PodPending");
}

#[test]
fn container_not_in_pod_spec_is_error_container_not_found() {
    let mut p = pod("pod-1");
    p.container = ContainerFacts::NotInSpec {
        name: "nope".into(),
    };
    let s = Case::new().pod(Some(p)).run();
    assert_eq!(s.phase, Some(Phase::Error));
    assert_eq!(s.error.as_ref().unwrap().code, ErrorCode::ContainerNotFound);
    assert!(s.error.as_ref().unwrap().message.contains("nope"));
    assert_eq!(cond(&s, condition::STALLED).status, "True");
    assert_eq!(cond(&s, condition::SUCCEEDED).status, "False");
    assert!(is_final(&s));

    // An init container: said so, not "no container".
    let mut p = pod("pod-1");
    p.container = ContainerFacts::InitContainer {
        name: "setup".into(),
    };
    let s = Case::new().pod(Some(p)).run();
    let e = s.error.as_ref().unwrap();
    assert_eq!(e.code, ErrorCode::ContainerNotFound);
    assert!(
        e.message.contains("\"setup\"") && e.message.contains("is an init container"),
        "{}",
        e.message
    );
}

#[test]
fn terminal_pod_is_error_container_unavailable() {
    let mut p = pod("pod-1");
    p.phase = PodPhase::Succeeded;
    let s = Case::new().pod(Some(p)).run();
    assert_eq!(
        s.error.as_ref().unwrap().code,
        ErrorCode::ContainerUnavailable
    );
    assert!(is_final(&s));
}

#[test]
fn ready_to_start_is_pending_starting() {
    let s = Case::new().run();
    assert_eq!(s.phase, Some(Phase::Pending));
    assert_eq!(s.node_name.as_deref(), Some("node-a"));
    assert_eq!(cond(&s, condition::RECONCILING).reason, "Starting");
    assert!(!is_started(&s));
}

#[test]
fn start_rejected_by_agent_is_error_with_its_code() {
    let s = Case::new()
        .agent(AgentView::Rejected(ApiError {
            code: wire::ErrorCode::InvalidProcessCwd,
            message: "working directory \"/nope\": not found".into(),
        }))
        .run();
    assert_eq!(s.phase, Some(Phase::Error));
    assert_eq!(s.error.as_ref().unwrap().code, ErrorCode::InvalidProcessCwd);
    assert!(is_final(&s));
    // An agent-side request error is not a status code: reported as a spawn failure.
    let s = Case::new()
        .agent(AgentView::Rejected(ApiError {
            code: wire::ErrorCode::InvalidRequest,
            message: "readiness.logMatch.pattern: bad".into(),
        }))
        .run();
    assert_eq!(
        s.error.as_ref().unwrap().code,
        ErrorCode::ProcessSpawnFailed
    );
}

#[test]
fn start_retried_stays_pending() {
    let s = Case::new()
        .agent(AgentView::Retrying {
            reason: "ContainerNotReady".into(),
            message: "container \"main\" not found yet".into(),
        })
        .run();
    assert_eq!(s.phase, Some(Phase::Pending));
    assert_eq!(cond(&s, condition::RECONCILING).reason, "ContainerNotReady");
    assert!(!is_final(&s));
    let s = Case::new()
        .agent(AgentView::Retrying {
            reason: "NodeAtCapacity".into(),
            message: "this node's agent supervises 2000 processes".into(),
        })
        .run();
    assert_eq!(
        s.phase,
        Some(Phase::Pending),
        "a node at capacity is not an error"
    );
    assert_eq!(cond(&s, condition::READY).reason, "NodeAtCapacity");
}

#[test]
fn invalid_spec_is_error_naming_the_field() {
    let spec = spec();
    let run = |field: &str, message: &str| {
        let invalid = Violation::new(field, message);
        compute(&Facts {
            generation: Some(1),
            spec: &spec,
            prev: &SandboxProcessStatus::default(),
            pod_name: &spec.pod_name,
            pod: None,
            created: None,
            agent: &AgentView::NotAsked,
            invalid: Some(&invalid),
            now: t(0),
            agent_grace: GRACE,
            output_due: true,
        })
    };
    let s = run("readiness.logMatch.pattern", "unclosed group");
    assert_eq!(s.phase, Some(Phase::Error));
    let e = s.error.unwrap();
    assert_eq!(e.code, ErrorCode::ProcessSpawnFailed);
    assert!(e.message.contains("spec.readiness.logMatch.pattern"));
    // The code the agent gives for the same mistake.
    let e = run("env[0]", "must not contain NUL").error.unwrap();
    assert_eq!(e.code, ErrorCode::InvalidProcessEnvironment);
    assert!(e.message.contains("spec.env[0]"), "{}", e.message);
    let e = run("workingDir", "must be an absolute path").error.unwrap();
    assert_eq!(e.code, ErrorCode::InvalidProcessCwd);
}

#[test]
fn running_without_readiness_is_ready() {
    let mut r = record(wire::Phase::Running);
    r.ready = true;
    r.ready_at = r.started_at.clone();
    let s = Case::new().record(r).run();
    assert_eq!(s.phase, Some(Phase::Running));
    assert_eq!(s.pod_uid.as_deref(), Some("pod-1"));
    assert_eq!(s.container_id.as_deref(), Some("ctr-1"));
    assert_eq!(s.pid, Some(42));
    // Sub-second precision is dropped, as metav1.Time stores it.
    assert_eq!(
        s.started_at.as_ref().unwrap().0.to_string(),
        "2027-01-15T08:00:00Z"
    );
    assert_eq!(
        conds(&s),
        [
            c("True", "Ready"),
            c("Unknown", "Running"),
            c("False", "Ready"),
            c("False", "Ready"),
        ]
    );
    assert_eq!(s.output.as_ref().unwrap().tail, "hi\n");
    assert!(is_started(&s));
}

/// The previous run's end in a record: exit code 3, 20 s after its start.
fn last_run_exited_3() -> wire::RunEnd {
    wire::RunEnd {
        exit: wire::ExitStatus {
            code: 3,
            signal: None,
            timed_out: false,
        },
        end_reason: wire::EndReason::Exited,
        started_at: Some("2027-01-15T08:00:00.5Z".into()),
        finished_at: "2027-01-15T08:00:20.5Z".into(),
        output_from: "c0.0.0".into(),
        output_until: "c1.1.0".into(),
    }
}

/// A run ended and the next waits out its back-off: still Running, not ready, reconciling with
/// reason BackOff (kstatus InProgress, as a container in CrashLoopBackOff), the count and the
/// previous run's end in the status; the next run makes it ready again.
#[test]
fn back_off_is_running_not_ready_with_the_last_exit() {
    let mut r = record(wire::Phase::Running);
    r.ready = true;
    r.restart_count = 2;
    r.backoff_until = Some("2027-01-15T08:00:40Z".into());
    r.last_exit = Some(last_run_exited_3());
    let s = Case::new().record(r.clone()).run();
    assert_eq!(s.phase, Some(Phase::Running));
    assert_eq!(s.restart_count, 2);
    let last = s.last_exit.as_ref().expect("lastExit");
    assert_eq!((last.exit.code, last.end_reason), (3, EndReason::Exited));
    assert_eq!(
        last.finished_at.as_ref().unwrap().0.to_string(),
        "2027-01-15T08:00:20Z"
    );
    assert_eq!(s.finished_at, None, "not final");
    assert_eq!(
        conds(&s),
        [
            c("False", "BackOff"),
            c("Unknown", "Running"),
            c("True", "BackOff"),
            c("False", "BackOff"),
        ]
    );
    let msg = &cond(&s, "Ready").message;
    assert!(
        msg.contains("restart 3") && msg.contains("exited with code 3"),
        "{msg}"
    );
    // The next run is ready: the count and the last exit stay.
    r.backoff_until = None;
    r.restart_count = 3;
    let s = Case::new().prev(s).record(r).run();
    assert_eq!(cond(&s, "Ready").reason, "Ready");
    assert_eq!(s.restart_count, 3);
    assert!(s.last_exit.is_some());
}

/// An end while a back-off is waited out has no run in progress: whatever ends it, `exit` is
/// null, `endReason` says what ended it, and `lastExit` keeps the last run's end.
#[test]
fn an_end_during_the_back_off_has_no_exit_of_its_own() {
    let mut waiting = record(wire::Phase::Running);
    waiting.restart_count = 1;
    waiting.backoff_until = Some("2027-01-15T08:00:40Z".into());
    waiting.last_exit = Some(last_run_exited_3());
    let prev = Case::new().record(waiting.clone()).run();
    let ended = |reason| ProcessRecord {
        phase: wire::Phase::Exited,
        end_reason: Some(reason),
        backoff_until: None,
        finished_at: Some("2027-01-15T08:00:30Z".into()),
        ..waiting.clone()
    };
    let stopped = Case::new()
        .prev(prev.clone())
        .record(ended(wire::EndReason::Stopped))
        .run();
    let container = Case::new()
        .prev(prev.clone())
        .record(ended(wire::EndReason::ContainerExited))
        .run();
    let pod = Case::new()
        .prev(prev.clone())
        .pod(None)
        .record(waiting.clone())
        .run();
    let table = [
        (
            &stopped,
            Phase::Exited,
            EndReason::Stopped,
            "stopped on request while it waited",
        ),
        (
            &container,
            Phase::Error,
            EndReason::ContainerExited,
            "the container exited while it waited",
        ),
        (&pod, Phase::Error, EndReason::PodDeleted, ""),
    ];
    for (s, phase, reason, says) in table {
        assert_eq!(
            (s.phase, s.end_reason),
            (Some(phase), Some(reason)),
            "{s:?}"
        );
        assert!(s.exit.is_none(), "no run was in progress: {s:?}");
        assert_eq!(s.last_exit.as_ref().map(|l| l.exit.code), Some(3), "{s:?}");
        assert!(is_final(s));
        let msg = &cond(s, condition::SUCCEEDED).message;
        assert!(msg.contains(says), "{reason:?}: {msg}");
        if !says.is_empty() {
            assert!(msg.contains("the last run exited with code 3"), "{msg}");
        }
    }
    assert_eq!(cond(&stopped, condition::SUCCEEDED).reason, "Stopped");
}

#[test]
fn running_not_yet_ready_is_reconciling() {
    let s = Case::new().record(record(wire::Phase::Running)).run();
    assert_eq!(s.phase, Some(Phase::Running));
    assert_eq!(
        conds(&s),
        [
            c("False", "ReadinessPending"),
            c("Unknown", "Running"),
            c("True", "ReadinessPending"),
            c("False", "ReadinessPending"),
        ]
    );
}

#[test]
fn readiness_timeout_keeps_running_not_ready() {
    let mut r = record(wire::Phase::Running);
    r.readiness_timed_out = true;
    let s = Case::new().record(r).run();
    assert_eq!(s.phase, Some(Phase::Running));
    assert_eq!(cond(&s, condition::READY).status, "False");
    assert_eq!(cond(&s, condition::READY).reason, "ReadinessTimeout");
    assert_eq!(cond(&s, condition::RECONCILING).status, "False");
    assert!(!is_final(&s));
}

#[test]
fn exit_zero_is_succeeded_and_stays_ready() {
    let s = Case::new()
        .record(exited(0, None, wire::EndReason::Exited))
        .run();
    assert_eq!(s.phase, Some(Phase::Exited));
    assert_eq!(s.exit.as_ref().unwrap().code, 0);
    assert_eq!(s.end_reason, Some(EndReason::Exited));
    assert_eq!(
        s.finished_at.as_ref().unwrap().0.to_string(),
        "2027-01-15T08:00:05Z"
    );
    assert_eq!(
        conds(&s),
        [
            c("True", "Succeeded"),
            c("True", "Succeeded"),
            c("False", "Succeeded"),
            c("False", "Succeeded"),
        ]
    );
    assert!(is_final(&s));
}

#[test]
fn non_zero_exit_is_failed_and_stalled() {
    let s = Case::new()
        .record(exited(3, None, wire::EndReason::Exited))
        .run();
    assert_eq!(s.phase, Some(Phase::Exited));
    assert_eq!(s.exit.as_ref().unwrap().code, 3);
    assert_eq!(
        conds(&s),
        [
            c("False", "NonZeroExit"),
            c("False", "NonZeroExit"),
            c("False", "NonZeroExit"),
            c("True", "NonZeroExit"),
        ]
    );
    assert!(cond(&s, condition::STALLED).message.contains("code 3"));
}

#[test]
fn timeout_signal_and_oom_are_failures() {
    for (rec, reason) in [
        (exited(143, Some(15), wire::EndReason::TimedOut), "TimedOut"),
        (exited(137, Some(9), wire::EndReason::Signaled), "Signaled"),
        (
            exited(137, Some(9), wire::EndReason::OOMKilled),
            "OOMKilled",
        ),
        // A process that handles the timeout signal and exits 0 still timed out.
        (exited(0, None, wire::EndReason::TimedOut), "TimedOut"),
    ] {
        let s = Case::new().record(rec).run();
        assert_eq!(s.phase, Some(Phase::Exited));
        assert_eq!(cond(&s, condition::SUCCEEDED).status, "False", "{reason}");
        assert_eq!(cond(&s, condition::STALLED).status, "True", "{reason}");
        assert_eq!(cond(&s, condition::READY).reason, reason);
    }
    let s = Case::new()
        .record(exited(143, Some(15), wire::EndReason::TimedOut))
        .run();
    assert!(s.exit.as_ref().unwrap().timed_out);
    assert_eq!(s.exit.as_ref().unwrap().signal, Some(15));
}

#[test]
fn requested_stop_is_ready_stopped_not_succeeded() {
    let s = Case::new()
        .record(exited(143, Some(15), wire::EndReason::Stopped))
        .run();
    assert_eq!(s.phase, Some(Phase::Exited));
    assert_eq!(s.end_reason, Some(EndReason::Stopped));
    assert_eq!(
        conds(&s),
        [
            c("True", "Stopped"),
            c("False", "Stopped"),
            c("False", "Stopped"),
            c("False", "Stopped"),
        ]
    );
    // Stopped, but it handled the signal and exited 0: that is an exit with code 0.
    let s = Case::new()
        .record(exited(0, None, wire::EndReason::Stopped))
        .run();
    assert_eq!(cond(&s, condition::SUCCEEDED).status, "True");
    assert_eq!(cond(&s, condition::READY).reason, "Stopped");
}

#[test]
fn stop_before_start_never_starts() {
    let mut case = Case::new();
    case.spec.stop = true;
    let s = case.run();
    assert_eq!(s.phase, Some(Phase::Exited));
    assert_eq!(s.end_reason, Some(EndReason::Stopped));
    assert!(s.exit.is_none());
    assert_eq!(cond(&s, condition::READY).reason, "Stopped");
    assert!(is_final(&s));
}

/// (status, reason) of Ready, Succeeded, Reconciling, Stalled for a process with readiness that
/// ended before it was ever ready, `Succeeded` being (status, reason).
fn before_ready(succeeded: (&str, &str)) -> [(String, String); 4] {
    [
        c("False", "ExitedBeforeReady"),
        c(succeeded.0, succeeded.1),
        c("False", "ExitedBeforeReady"),
        c("True", "ExitedBeforeReady"),
    ]
}

#[test]
fn exit_zero_before_ever_ready_is_not_ready_and_stalled() {
    // Still probing when it exited (a server that never listened).
    let running = Case::new()
        .readiness()
        .record(record(wire::Phase::Running))
        .run();
    assert_eq!(cond(&running, condition::READY).reason, "ReadinessPending");
    let s = Case::new()
        .readiness()
        .prev(running)
        .record(exited(0, None, wire::EndReason::Exited))
        .run();
    assert_eq!(s.phase, Some(Phase::Exited));
    assert_eq!(s.exit.as_ref().unwrap().code, 0);
    assert_eq!(s.end_reason, Some(EndReason::Exited));
    assert!(s.ready_at.is_none());
    assert_eq!(conds(&s), before_ready(("True", "Succeeded")));
    assert_eq!(
        cond(&s, condition::READY).message,
        "exited with code 0 before it was ever ready"
    );
    assert_eq!(
        cond(&s, condition::STALLED).message,
        "exited with code 0 before it was ever ready"
    );
    // Succeeded still says how it exited.
    assert_eq!(cond(&s, condition::SUCCEEDED).message, "exited with code 0");
    assert!(is_final(&s));
    // Ended between two looks (never seen running): the same.
    let s = Case::new()
        .readiness()
        .record(exited(0, None, wire::EndReason::Exited))
        .run();
    assert_eq!(conds(&s), before_ready(("True", "Succeeded")));
}

#[test]
fn failure_before_ever_ready_is_exited_before_ready_and_succeeded_follows_the_exit() {
    for (rec, succeeded) in [
        (exited(3, None, wire::EndReason::Exited), "NonZeroExit"),
        (exited(137, Some(9), wire::EndReason::Signaled), "Signaled"),
        (exited(143, Some(15), wire::EndReason::TimedOut), "TimedOut"),
        (exited(0, None, wire::EndReason::TimedOut), "TimedOut"),
        (
            exited(137, Some(9), wire::EndReason::OOMKilled),
            "OOMKilled",
        ),
    ] {
        let end = rec.end_reason;
        let s = Case::new().readiness().record(rec).run();
        assert_eq!(s.phase, Some(Phase::Exited), "{end:?}");
        assert_eq!(conds(&s), before_ready(("False", succeeded)), "{end:?}");
    }
    let s = Case::new()
        .readiness()
        .record(exited(3, None, wire::EndReason::Exited))
        .run();
    assert_eq!(s.exit.as_ref().unwrap().code, 3);
    assert_eq!(
        cond(&s, condition::READY).message,
        "exited with code 3 before it was ever ready"
    );
    assert_eq!(cond(&s, condition::SUCCEEDED).message, "exited with code 3");
    let s = Case::new()
        .readiness()
        .record(exited(143, Some(15), wire::EndReason::TimedOut))
        .run();
    assert_eq!(
        cond(&s, condition::STALLED).message,
        "timed out; killed by signal 15 (code 143) before it was ever ready"
    );
}

#[test]
fn exit_after_readiness_timed_out_is_exited_before_ready() {
    let mut r = record(wire::Phase::Running);
    r.readiness_timed_out = true;
    let timed_out = Case::new().readiness().record(r).run();
    assert_eq!(
        cond(&timed_out, condition::READY).reason,
        "ReadinessTimeout"
    );
    for (code, succeeded) in [(0, ("True", "Succeeded")), (1, ("False", "NonZeroExit"))] {
        let mut r = exited(code, None, wire::EndReason::Exited);
        r.readiness_timed_out = true;
        let s = Case::new()
            .readiness()
            .prev(timed_out.clone())
            .record(r)
            .at(5)
            .run();
        assert_eq!(conds(&s), before_ready(succeeded), "code {code}");
        assert_eq!(
            cond(&s, condition::READY).message,
            format!("exited with code {code} before it was ever ready (readiness had timed out)")
        );
        // Stalled was already True (ReadinessTimeout): its transition time stays; Reconciling
        // was False already too.
        assert_eq!(cond(&s, condition::STALLED).last_transition_time, t(0));
        assert_eq!(cond(&s, condition::READY).last_transition_time, t(0));
        assert_eq!(cond(&s, condition::SUCCEEDED).last_transition_time, t(5));
    }
}

#[test]
fn stop_before_ever_ready_is_exited_before_ready() {
    let s = Case::new()
        .readiness()
        .record(exited(143, Some(15), wire::EndReason::Stopped))
        .run();
    assert_eq!(s.end_reason, Some(EndReason::Stopped));
    assert_eq!(conds(&s), before_ready(("False", "Stopped")));
    assert_eq!(
        cond(&s, condition::READY).message,
        "stopped on request; killed by signal 15 (code 143) before it was ever ready"
    );
    // It handled the stop signal and exited 0: Succeeded follows the code.
    let s = Case::new()
        .readiness()
        .record(exited(0, None, wire::EndReason::Stopped))
        .run();
    assert_eq!(conds(&s), before_ready(("True", "Succeeded")));
    // Stopped before it was even started: never ready either.
    let mut case = Case::new().readiness();
    case.spec.stop = true;
    let s = case.run();
    assert_eq!(s.phase, Some(Phase::Exited));
    assert!(s.exit.is_none());
    assert_eq!(conds(&s), before_ready(("False", "Stopped")));
    assert!(cond(&s, condition::READY)
        .message
        .ends_with("so it was never ready"));
    assert!(is_final(&s));
}

#[test]
fn ready_then_exited_is_unchanged_by_readiness() {
    let mut r = record(wire::Phase::Running);
    r.ready = true;
    r.ready_at = Some("2027-01-15T08:00:02Z".into());
    let ready = Case::new().readiness().record(r).run();
    assert_eq!(cond(&ready, condition::READY).reason, "Ready");
    let ended = |code: i32, reason: wire::EndReason, prev: &SandboxProcessStatus| {
        let mut r = exited(code, (code > 128).then_some(code - 128), reason);
        r.ready = true;
        r.ready_at = Some("2027-01-15T08:00:02Z".into());
        Case::new().readiness().prev(prev.clone()).record(r).run()
    };
    let s = ended(0, wire::EndReason::Exited, &ready);
    assert_eq!(
        conds(&s),
        [
            c("True", "Succeeded"),
            c("True", "Succeeded"),
            c("False", "Succeeded"),
            c("False", "Succeeded"),
        ]
    );
    assert_eq!(
        s.ready_at.as_ref().unwrap().0.to_string(),
        "2027-01-15T08:00:02Z"
    );
    let s = ended(3, wire::EndReason::Exited, &ready);
    assert_eq!(cond(&s, condition::READY).reason, "NonZeroExit");
    let s = ended(143, wire::EndReason::Stopped, &ready);
    assert_eq!(cond(&s, condition::READY).status, "True");
    assert_eq!(cond(&s, condition::READY).reason, "Stopped");
    assert_eq!(cond(&s, condition::STALLED).status, "False");
    // Seen ready by an earlier look (`readyAt` stored) is ready, whatever the last record says.
    let mut r = exited(0, None, wire::EndReason::Exited);
    r.ready = false;
    let s = Case::new().readiness().prev(ready.clone()).record(r).run();
    assert_eq!(cond(&s, condition::READY).reason, "Succeeded");
}

#[test]
fn without_readiness_an_early_exit_is_not_exited_before_ready() {
    // No readiness declared: started = ready, even if the record never said ready.
    for rec in [
        exited(0, None, wire::EndReason::Exited),
        exited(143, Some(15), wire::EndReason::Stopped),
    ] {
        let s = Case::new().record(rec).run();
        assert_eq!(cond(&s, condition::READY).status, "True");
        assert_eq!(cond(&s, condition::STALLED).status, "False");
    }
    let mut case = Case::new();
    case.spec.stop = true;
    assert_eq!(cond(&case.run(), condition::READY).reason, "Stopped");
}

#[test]
fn errors_before_ever_ready_keep_their_error_reason() {
    // A failed start, the pod deleted, the container exited: the error is the reason.
    let mut r = record(wire::Phase::Error);
    r.error = Some(ApiError {
        code: wire::ErrorCode::ProcessSpawnFailed,
        message: "exec: not found".into(),
    });
    r.finished_at = r.started_at.clone();
    let s = Case::new().readiness().record(r).run();
    assert_eq!(cond(&s, condition::READY).reason, "ProcessSpawnFailed");
    let running = Case::new()
        .readiness()
        .record(record(wire::Phase::Running))
        .run();
    let s = Case::new()
        .readiness()
        .prev(running.clone())
        .pod(None)
        .run();
    assert_eq!(cond(&s, condition::READY).reason, "StaleProcessHandle");
    let s = Case::new()
        .readiness()
        .prev(running)
        .record(exited(137, Some(9), wire::EndReason::ContainerExited))
        .run();
    assert_eq!(cond(&s, condition::READY).reason, "StaleProcessHandle");
}

fn running_status() -> SandboxProcessStatus {
    let mut r = record(wire::Phase::Running);
    r.ready = true;
    Case::new().record(r).run()
}

#[test]
fn pod_replaced_while_running_is_stale() {
    let prev = running_status();
    let mut r = record(wire::Phase::Running);
    r.ready = true;
    let s = Case::new()
        .prev(prev.clone())
        .pod(Some(pod("pod-2")))
        .record(r)
        .at(3)
        .run();
    assert_eq!(s.phase, Some(Phase::Error));
    assert_eq!(
        s.error.as_ref().unwrap().code,
        ErrorCode::StaleProcessHandle
    );
    assert_eq!(s.end_reason, Some(EndReason::PodReplaced));
    assert_eq!(s.finished_at, Some(t(3)));
    assert!(s.exit.is_none(), "never a made-up exit code");
    assert_eq!(cond(&s, condition::STALLED).status, "True");
    assert_eq!(cond(&s, condition::READY).last_transition_time, t(3));
    assert!(is_final(&s));
    // The started-in pod is kept.
    assert_eq!(s.pod_uid.as_deref(), Some("pod-1"));
}

#[test]
fn pod_deleted_while_running_is_stale_even_without_the_agent() {
    let prev = running_status();
    for agent in [
        AgentView::NotAsked,
        AgentView::Unreachable {
            since: t(0),
            message: "connection refused".into(),
        },
    ] {
        let s = Case::new().prev(prev.clone()).pod(None).agent(agent).run();
        assert_eq!(
            s.error.as_ref().unwrap().code,
            ErrorCode::StaleProcessHandle
        );
        assert_eq!(s.end_reason, Some(EndReason::PodDeleted));
    }
}

#[test]
fn pod_gone_after_the_process_ended_keeps_the_real_end() {
    let prev = Case::new()
        .record(exited(0, None, wire::EndReason::Exited))
        .run();
    // Final status: never changes again.
    let s = Case::new().prev(prev.clone()).pod(None).run();
    assert_eq!(s, prev);
    // Not yet written, but the record already says it exited on its own.
    let s = Case::new()
        .prev(running_status())
        .pod(None)
        .record(exited(0, None, wire::EndReason::Exited))
        .run();
    assert_eq!(s.phase, Some(Phase::Exited));
    assert_eq!(s.end_reason, Some(EndReason::Exited));
}

#[test]
fn container_exited_under_the_process_is_stale() {
    let s = Case::new()
        .prev(running_status())
        .record(exited(137, Some(9), wire::EndReason::ContainerExited))
        .run();
    assert_eq!(s.phase, Some(Phase::Error));
    assert_eq!(
        s.error.as_ref().unwrap().code,
        ErrorCode::StaleProcessHandle
    );
    assert_eq!(s.end_reason, Some(EndReason::ContainerExited));
    assert_eq!(s.exit.as_ref().unwrap().code, 137);
    // ... and when the pod is gone too, the pod is the reason.
    let s = Case::new()
        .prev(running_status())
        .pod(None)
        .record(exited(137, Some(9), wire::EndReason::ContainerExited))
        .run();
    assert_eq!(s.end_reason, Some(EndReason::PodDeleted));
}

#[test]
fn container_killed_by_pod_deletion_is_pod_deleted() {
    let mut p = pod("pod-1");
    p.terminating = true;
    // Still running during the pod's grace period: nothing to say yet.
    let mut r = record(wire::Phase::Running);
    r.ready = true;
    let s = Case::new()
        .prev(running_status())
        .pod(Some(p.clone()))
        .record(r)
        .run();
    assert_eq!(s.phase, Some(Phase::Running));
    let s = Case::new()
        .prev(running_status())
        .pod(Some(p))
        .record(exited(137, Some(9), wire::EndReason::ContainerExited))
        .run();
    assert_eq!(
        s.error.as_ref().unwrap().code,
        ErrorCode::StaleProcessHandle
    );
    assert_eq!(s.end_reason, Some(EndReason::PodDeleted));
}

#[test]
fn record_for_another_pod_is_stale_even_before_status_was_written() {
    // Operator restarted between start and status write, and the pod was replaced meanwhile.
    let s = Case::new()
        .pod(Some(pod("pod-2")))
        .record(record(wire::Phase::Running))
        .run();
    assert_eq!(s.end_reason, Some(EndReason::PodReplaced));
}

#[test]
fn agent_unreachable_within_grace_changes_nothing() {
    let prev = running_status();
    let s = Case::new()
        .prev(prev.clone())
        .agent(AgentView::Unreachable {
            since: t(0),
            message: "refused".into(),
        })
        .at(29)
        .run();
    assert_eq!(s, prev);
}

#[test]
fn agent_unreachable_beyond_grace_is_process_lost_then_recovers() {
    let prev = running_status();
    let lost = Case::new()
        .prev(prev.clone())
        .agent(AgentView::Unreachable {
            since: t(0),
            message: "refused".into(),
        })
        .at(31)
        .run();
    assert_eq!(lost.phase, Some(Phase::Error));
    assert_eq!(lost.error.as_ref().unwrap().code, ErrorCode::ProcessLost);
    assert!(lost.exit.is_none(), "never a made-up exit code");
    assert!(lost.end_reason.is_none());
    assert_eq!(cond(&lost, condition::STALLED).status, "True");
    assert!(!is_final(&lost), "recovers when the agent comes back");
    assert_eq!(lost.started_at, prev.started_at);

    let mut r = record(wire::Phase::Running);
    r.ready = true;
    let back = Case::new().prev(lost).record(r).at(40).run();
    assert_eq!(back.phase, Some(Phase::Running));
    assert!(back.error.is_none());
    assert_eq!(cond(&back, condition::READY).status, "True");
    assert_eq!(cond(&back, condition::STALLED).status, "False");
}

#[test]
fn agent_unavailable_before_start_then_recovers() {
    let unreachable = AgentView::Unreachable {
        since: t(0),
        message: "no agent pod on node node-a".into(),
    };
    let s = Case::new().agent(unreachable.clone()).at(10).run();
    assert_eq!(s.phase, Some(Phase::Pending));
    assert_eq!(cond(&s, condition::RECONCILING).reason, "Starting");
    let s = Case::new().agent(unreachable).at(30).run();
    assert_eq!(s.phase, Some(Phase::Error));
    assert_eq!(s.error.as_ref().unwrap().code, ErrorCode::AgentUnavailable);
    assert!(s.finished_at.is_none());
    assert!(!is_final(&s));
    let started = Case::new()
        .prev(s)
        .record(record(wire::Phase::Running))
        .at(31)
        .run();
    assert_eq!(started.phase, Some(Phase::Running));
}

#[test]
fn agent_has_no_record_of_a_started_process() {
    let s = Case::new()
        .prev(running_status())
        .agent(AgentView::NotFound)
        .run();
    assert_eq!(s.phase, Some(Phase::Error));
    assert_eq!(s.error.as_ref().unwrap().code, ErrorCode::ProcessNotFound);
    assert_eq!(s.end_reason, Some(EndReason::Lost));
    assert!(is_final(&s));
}

#[test]
fn agent_lost_record_is_error_process_lost() {
    let mut r = record(wire::Phase::Error);
    r.end_reason = Some(wire::EndReason::Lost);
    r.error = Some(ApiError {
        code: wire::ErrorCode::ProcessLost,
        message: "supervisor vanished".into(),
    });
    let s = Case::new().prev(running_status()).record(r).run();
    assert_eq!(s.phase, Some(Phase::Error));
    assert_eq!(s.error.as_ref().unwrap().code, ErrorCode::ProcessLost);
    assert_eq!(s.end_reason, Some(EndReason::Lost));
    assert!(is_final(&s));
}

#[test]
fn recompute_with_the_same_facts_is_identical() {
    // The controller skips the write when nothing changed: same facts later → same status.
    let mut r = record(wire::Phase::Running);
    r.ready = true;
    let first = Case::new().record(r.clone()).at(0).run();
    let again = Case::new().prev(first.clone()).record(r).at(100).run();
    assert_eq!(first, again);
    // Also after a round trip through JSON (what the API server stores).
    let stored: SandboxProcessStatus =
        serde_json::from_value(serde_json::to_value(&first).unwrap()).unwrap();
    assert_eq!(stored, first);
}

#[test]
fn last_transition_time_changes_only_with_status() {
    let pending = Case::new().pod(None).at(0).run();
    // Pod appears but is not running: reasons change, statuses do not.
    let mut p = pod("pod-1");
    p.phase = PodPhase::Pending;
    let still = Case::new().prev(pending.clone()).pod(Some(p)).at(5).run();
    for c in &still.conditions {
        assert_eq!(c.last_transition_time, t(0), "{}", c.type_);
    }
    assert_eq!(cond(&still, condition::READY).reason, "PodPending");
    // Ready flips: only the conditions whose status changed move.
    let mut r = record(wire::Phase::Running);
    r.ready = true;
    let ready = Case::new().prev(still).record(r).at(9).run();
    assert_eq!(cond(&ready, condition::READY).last_transition_time, t(9));
    assert_eq!(
        cond(&ready, condition::RECONCILING).last_transition_time,
        t(9)
    );
    assert_eq!(cond(&ready, condition::STALLED).last_transition_time, t(0));
    assert_eq!(
        cond(&ready, condition::SUCCEEDED).last_transition_time,
        t(0)
    );
}

#[test]
fn observed_generation_follows_the_object() {
    let prev = Case::new()
        .record(exited(0, None, wire::EndReason::Exited))
        .run();
    let mut case = Case::new().prev(prev);
    case.generation = 2;
    let s = case.run();
    assert_eq!(s.observed_generation, Some(2));
    assert!(s
        .conditions
        .iter()
        .all(|c| c.observed_generation == Some(2)));
}

#[test]
fn output_is_refreshed_only_when_due_and_at_the_end() {
    let first = Case::new().record(record(wire::Phase::Running)).run();
    let mut more = record(wire::Phase::Running);
    more.output.stdout_bytes = 100;
    more.output.tail = "lots".into();
    let mut case = Case::new().prev(first.clone()).record(more.clone());
    case.output_due = false;
    let held = case.run();
    assert_eq!(held.output, first.output);
    case.output_due = true;
    assert_eq!(case.run().output.unwrap().stdout_bytes, 100);
    // Final output is always taken.
    let mut end = exited(0, None, wire::EndReason::Exited);
    end.output.tail = "bye".into();
    let mut case = Case::new().prev(first).record(end);
    case.output_due = false;
    assert_eq!(case.run().output.unwrap().tail, "bye");
}

#[test]
fn stdin_bytes_ride_with_the_output_refresh_and_a_close_is_written_at_once() {
    let mut open = record(wire::Phase::Running);
    open.stdin = Some(wire::StdinState {
        bytes: 0,
        closed: false,
    });
    let first = Case::new().record(open.clone()).run();
    assert_eq!(
        first.stdin.as_ref().map(|s| (s.bytes, s.closed)),
        Some((0, false))
    );
    let mut fed = open.clone();
    fed.stdin.as_mut().unwrap().bytes = 4096;
    let mut case = Case::new().prev(first.clone()).record(fed.clone());
    case.output_due = false;
    assert_eq!(case.run(), first, "bytes taken alone: no status write");
    case.output_due = true;
    assert_eq!(case.run().stdin.unwrap().bytes, 4096);
    let mut closed = fed;
    closed.stdin.as_mut().unwrap().closed = true;
    let mut case = Case::new().prev(first).record(closed);
    case.output_due = false;
    let s = case.run().stdin.unwrap();
    assert_eq!(
        (s.bytes, s.closed),
        (4096, true),
        "the close, with the bytes"
    );
}

#[test]
fn root_exited_comes_with_the_live_count_while_output_is_held() {
    let first = Case::new().record(record(wire::Phase::Running)).run();
    assert_eq!((first.root_exited, first.processes), (false, None));
    // while the root runs, the count waits for the output refresh (no extra status writes)
    let mut counted = record(wire::Phase::Running);
    counted.processes = Some(1);
    let mut case = Case::new().prev(first.clone()).record(counted);
    case.output_due = false;
    assert_eq!(case.run().processes, None);
    let mut gone = record(wire::Phase::Running);
    gone.root_exited = true;
    gone.processes = Some(2);
    let mut case = Case::new().prev(first).record(gone);
    case.output_due = false;
    let s = case.run();
    assert_eq!(s.phase, Some(Phase::Running));
    assert_eq!((s.root_exited, s.processes), (true, Some(2)));
    // at the end: the root no longer "exited while others run", nothing left
    let mut end = exited(7, None, wire::EndReason::Exited);
    end.processes = Some(0);
    let mut case = Case::new().prev(s).record(end);
    case.output_due = false;
    let s = case.run();
    assert_eq!((s.root_exited, s.processes), (false, Some(0)));
}

#[test]
fn ttl_counts_from_the_end() {
    let mut spec = spec();
    let done = Case::new()
        .record(exited(0, None, wire::EndReason::Exited))
        .run();
    let finished = done.finished_at.clone().unwrap();
    assert_eq!(ttl_remaining(&spec, &done, &finished), None);
    spec.ttl_seconds_after_finished = Some(10);
    assert_eq!(
        ttl_remaining(&spec, &done, &finished),
        Some(Duration::from_secs(10))
    );
    let later = Time(finished.0 + k8s_openapi::jiff::SignedDuration::from_secs(25));
    assert_eq!(ttl_remaining(&spec, &done, &later), Some(Duration::ZERO));
    assert_eq!(ttl_remaining(&spec, &running_status(), &later), None);
}

fn names(notes: &[Note]) -> Vec<&'static str> {
    notes.iter().map(|n| n.reason).collect()
}

#[test]
fn events_announce_each_transition_once() {
    let pending = Case::new().run();
    let mut r = record(wire::Phase::Running);
    let running = Case::new().prev(pending.clone()).record(r.clone()).run();
    assert_eq!(names(&transitions(&pending, &running)), ["Started"]);
    // Ready at the first status that shows it started: Started says it.
    r.ready = true;
    let at_once = Case::new().prev(pending.clone()).record(r.clone()).run();
    assert_eq!(conds(&at_once)[0], c("True", "Ready"));
    assert_eq!(names(&transitions(&pending, &at_once)), ["Started"]);
    let ready = Case::new().prev(running.clone()).record(r.clone()).run();
    assert_eq!(names(&transitions(&running, &ready)), ["Ready"]);
    assert!(transitions(&ready, &ready).is_empty());
    let done = Case::new()
        .prev(ready.clone())
        .record(exited(0, None, wire::EndReason::Exited))
        .run();
    assert_eq!(names(&transitions(&ready, &done)), ["Exited"]);
    assert!(transitions(&done, &done).is_empty());
    let failed = Case::new()
        .prev(ready.clone())
        .record(exited(1, None, wire::EndReason::Exited))
        .run();
    let notes = transitions(&ready, &failed);
    assert_eq!(names(&notes), ["Failed"]);
    assert!(notes[0].warning);
    let stopped = Case::new()
        .prev(ready.clone())
        .record(exited(143, Some(15), wire::EndReason::Stopped))
        .run();
    assert_eq!(names(&transitions(&ready, &stopped)), ["Stopped"]);
    let stale = Case::new().prev(ready.clone()).pod(None).run();
    assert_eq!(names(&transitions(&ready, &stale)), ["Stale"]);
    // Readiness declared and never passed: a warning, whatever the exit code.
    let probing = Case::new()
        .readiness()
        .prev(pending.clone())
        .record(record(wire::Phase::Running))
        .run();
    let early = Case::new()
        .readiness()
        .prev(probing.clone())
        .record(exited(0, None, wire::EndReason::Exited))
        .run();
    let notes = transitions(&probing, &early);
    assert_eq!(names(&notes), ["ExitedBeforeReady"]);
    assert!(notes[0].warning);
    assert_eq!(
        notes[0].message,
        "exited with code 0 before it was ever ready"
    );
    // Started and ended before any status said it started: only a failure is announced (the
    // status, one write, says the rest).
    let quick = Case::new()
        .prev(pending.clone())
        .record(exited(0, None, wire::EndReason::Exited))
        .run();
    assert!(transitions(&pending, &quick).is_empty());
    let quick_failure = Case::new()
        .prev(pending.clone())
        .record(exited(3, None, wire::EndReason::Exited))
        .run();
    assert_eq!(names(&transitions(&pending, &quick_failure)), ["Failed"]);
    // Agent lost: one warning, none while it stays lost.
    let lost = Case::new()
        .prev(ready.clone())
        .agent(AgentView::Unreachable {
            since: t(0),
            message: "x".into(),
        })
        .at(60)
        .run();
    assert_eq!(names(&transitions(&ready, &lost)), ["Failed"]);
    assert!(transitions(&lost, &lost).is_empty());
}

#[test]
fn start_deadline_is_final_once_passed() {
    let mut case = Case::new().pod(None);
    case.created = Some(t(0));
    let s = case.at(599).run();
    assert_eq!(s.phase, Some(Phase::Pending), "600 s by default");
    let s = Case {
        created: Some(t(0)),
        ..Case::new().pod(None)
    }
    .at(600)
    .run();
    assert_eq!(s.phase, Some(Phase::Error));
    let e = s.error.clone().unwrap();
    assert_eq!(e.code, ErrorCode::StartDeadlineExceeded);
    assert!(e.message.contains("600 s"), "{}", e.message);
    assert!(is_final(&s));
    assert_eq!(cond(&s, condition::STALLED).reason, "StartDeadlineExceeded");
    // Its own value; a pod ready to start does not extend it.
    let mut case = Case::new();
    case.spec.start_deadline_seconds = Some(10);
    case.created = Some(t(0));
    assert_eq!(case.clone_at(9).run().phase, Some(Phase::Pending));
    let s = case.clone_at(10).run();
    assert_eq!(s.error.unwrap().code, ErrorCode::StartDeadlineExceeded);
    assert!(start_refusal(
        &case.spec,
        &case.prev,
        case.pod.as_ref(),
        Some(&t(0)),
        &t(10)
    )
    .is_some());
    assert!(start_refusal(
        &case.spec,
        &case.prev,
        case.pod.as_ref(),
        Some(&t(0)),
        &t(9)
    )
    .is_none());
}

/// A Pending object is looked at again when its start deadline passes (not only at the next
/// periodic recheck), so a short deadline ends it on time.
#[test]
fn start_deadline_left_counts_down_from_creation() {
    let mut spec = Case::new().spec;
    spec.start_deadline_seconds = Some(3);
    assert_eq!(
        start_deadline_left(&spec, Some(&t(0)), &t(1)),
        Some(Duration::from_secs(2))
    );
    assert_eq!(
        start_deadline_left(&spec, Some(&t(0)), &t(99)),
        Some(Duration::ZERO)
    );
    assert_eq!(start_deadline_left(&spec, None, &t(1)), None);
    spec.start_deadline_seconds = None;
    assert_eq!(
        start_deadline_left(&spec, Some(&t(0)), &t(0)),
        Some(Duration::from_secs(600))
    );
}

#[test]
fn the_pod_first_seen_is_the_only_target() {
    // First sight pins the pod's UID.
    let s = Case::new().run();
    assert_eq!(s.target_pod_uid.as_deref(), Some("pod-1"));
    // The same pod later: still fine. A new pod under the name before the start: final.
    let pinned = Case::new().prev(s.clone()).run();
    assert_eq!(pinned.phase, Some(Phase::Pending));
    let s = Case::new().prev(s).pod(Some(pod("pod-2"))).run();
    assert_eq!(s.phase, Some(Phase::Error));
    let e = s.error.unwrap();
    assert_eq!(e.code, ErrorCode::StaleProcessHandle);
    assert!(
        e.message.contains("pod-1") && e.message.contains("pod-2"),
        "{}",
        e.message
    );
    // Seen missing first, then created: that pod is the first seen.
    let missing = Case::new().pod(None).run();
    assert_eq!(missing.target_pod_uid, None);
    let s = Case::new().prev(missing).pod(Some(pod("pod-3"))).run();
    assert_eq!(
        (s.phase, s.target_pod_uid.as_deref()),
        (Some(Phase::Pending), Some("pod-3"))
    );
    // Started: kept.
    let s = Case::new()
        .prev(s)
        .pod(Some(pod("pod-3")))
        .record(ProcessRecord {
            pod_uid: "pod-3".into(),
            ..record(wire::Phase::Running)
        })
        .run();
    assert_eq!(s.target_pod_uid.as_deref(), Some("pod-3"));
}

/// What the write-plan simulation's output refresh interval is (`context::OUTPUT_REFRESH`,
/// pinned in apply.rs's tests).
const REFRESH: i64 = 30;

/// The API writes that a process's looks cause after its create and finalizer, made as a
/// reconcile makes them: `compute`, `plan`, and for a written status its `transitions`' Events.
/// Each look is (second, the agent's record); the output may be refreshed once `REFRESH` has
/// passed since it was last written.
fn write_plan(readiness: bool, looks: &[(i64, ProcessRecord)]) -> Vec<String> {
    let (mut stored, mut held) = (SandboxProcessStatus::default(), None::<i64>);
    let (mut output_at, mut writes) = (None::<i64>, Vec::new());
    for (at, r) in looks {
        let mut case = Case::new().prev(stored.clone()).record(r.clone()).at(*at);
        if readiness {
            case = case.readiness();
        }
        case.output_due = output_at.is_none_or(|t| at - t >= REFRESH);
        let plain = case.run();
        case.output_due = true;
        let full = (plain != case.run()).then(|| case.run());
        let next = with_output(&stored, plain, full);
        let so_far = held.map(|since| Duration::from_secs((at - since) as u64));
        match plan(&stored, &next, so_far) {
            Write::Nothing => {}
            Write::Hold { .. } => {
                held.get_or_insert(*at);
            }
            Write::Status => {
                writes.push(format!("status {:?}", next.phase.unwrap()));
                let events = transitions(&stored, &next);
                writes.extend(events.iter().map(|n| format!("event {}", n.reason)));
                if refreshes(&stored, &next) {
                    output_at = Some(*at);
                }
                stored = next;
            }
        }
    }
    writes
}

/// A running record whose output has grown to `bytes`.
fn printing(bytes: u64) -> ProcessRecord {
    let mut r = record(wire::Phase::Running);
    r.ready = true;
    r.output.stdout_bytes = bytes;
    r.output.tail = format!("{bytes} bytes\n");
    r
}

type Looks = Vec<(i64, ProcessRecord)>;

/// Long, printing every 10 s for 100 s: the output reaches the status at most every 30 s.
fn printer_looks() -> Looks {
    let mut printer: Looks = vec![(0, printing(1)), (1, printing(1))];
    printer.extend((1..=10).map(|k| (k * 10, printing(k as u64 + 1))));
    printer.push((101, exited(0, None, wire::EndReason::Exited)));
    printer
}

/// Busy without output: a usage sample every 5 s is refreshed at most every 30 s too.
fn busy_looks() -> Looks {
    let busy = |k: u64| {
        let mut r = printing(1);
        r.usage = Some(wire::Usage {
            memory_peak_bytes: 1 << 20,
            cpu_nanos: k * 1_000_000_000,
        });
        r
    };
    let mut looks: Looks = vec![(0, printing(1)), (1, printing(1))];
    looks.extend((1..=13).map(|k| (k * 5, busy(k as u64))));
    looks.push((66, exited(0, None, wire::EndReason::Exited)));
    looks
}

/// Fed a line on stdin every second for 65 s, answering nothing: the count rides with the
/// output refresh, the close is written when it comes.
fn fed_looks() -> Looks {
    let fed = |bytes: i64, closed: bool| {
        let mut r = printing(1);
        r.stdin = Some(wire::StdinState {
            bytes: bytes as u64,
            closed,
        });
        r
    };
    let mut looks: Looks = vec![(0, fed(0, false)), (1, fed(0, false))];
    looks.extend((2..=65).map(|k| (k, fed(k * 10, false))));
    looks.extend([
        (66, fed(650, true)),
        (67, exited(0, None, wire::EndReason::Exited)),
    ]);
    looks
}

/// With a readiness check passing at 10 s: its write carries the output of then.
fn probed_looks() -> Looks {
    let mut probed = vec![(0, printing(1)), (1, printing(1))];
    let mut ready = printing(2);
    ready.ready = true;
    probed.extend([(10, ready.clone()), (20, ready.clone()), (50, ready)]);
    for (_, r) in &mut probed[..2] {
        r.ready = false;
    }
    probed
}

/// A long process whose output (or stdin's count) changes all along: Running, three refreshes
/// at most one per 30 s (or the close, written at once), then its end.
const REFRESHED_TWICE: &[&str] = &[
    "status Running",
    "event Started",
    "status Running",
    "status Running",
    "status Running",
    "status Exited",
    "event Exited",
];

#[test]
fn write_plan_per_shape() {
    let running = || printing(3);
    let ok = || exited(0, None, wire::EndReason::Exited);
    let launching = || {
        let mut r = record(wire::Phase::Starting);
        r.pid = None;
        r
    };
    let (printer, busy_looks) = (printer_looks(), busy_looks());
    let cases: Vec<(&str, Looks, &[&str])> = vec![
        (
            "short: its tree ended before the runtime returned (reported once, final)",
            vec![(0, ok())],
            &["status Exited"],
        ),
        (
            "short: launched, then ended before the launch hold ran out",
            vec![(0, launching()), (0, ok())],
            &["status Exited"],
        ),
        (
            "short, but ended after the agent said it runs: shown Running at once",
            vec![(0, running()), (0, ok())],
            &[
                "status Running",
                "event Started",
                "status Exited",
                "event Exited",
            ],
        ),
        (
            "slow launch: shown once LAUNCH_HOLD has passed",
            vec![
                (0, launching()),
                (3, launching()),
                (4, running()),
                (60, ok()),
            ],
            &[
                "status Running",
                "event Started",
                "status Running",
                "event Ready",
                "status Exited",
                "event Exited",
            ],
        ),
        (
            "long, busy without output: usage refreshed at most every 30 s",
            busy_looks,
            &[
                "status Running",
                "event Started",
                "status Running",
                "status Running",
                "status Exited",
                "event Exited",
            ],
        ),
        (
            "short failure: its Warning stays",
            vec![(0, exited(3, None, wire::EndReason::Exited))],
            &["status Exited", "event Failed"],
        ),
        (
            "long and quiet: Running at once, no write while nothing changes",
            vec![(0, running()), (1, running()), (60, running()), (300, ok())],
            &[
                "status Running",
                "event Started",
                "status Exited",
                "event Exited",
            ],
        ),
        (
            "long, fed stdin every second: the count rides with the 30 s refresh, the close at once",
            fed_looks(),
            REFRESHED_TWICE,
        ),
        (
            "long, printing: one output refresh per 30 s",
            printer,
            REFRESHED_TWICE,
        ),
    ];
    for (shape, looks, want) in cases {
        assert_eq!(write_plan(false, &looks), want, "{shape}");
    }
}

#[test]
fn write_plan_with_a_readiness_check() {
    // Readiness passing at 10 s with new output: one write for both; nothing new until 50 s.
    assert_eq!(
        write_plan(true, &probed_looks()),
        [
            "status Running",
            "event Started",
            "status Running",
            "event Ready"
        ]
    );
}

/// The operator's cache keeps only what it reads of a settled status (cache::Settled) and its
/// reconcile skips recomputing one (apply::finished): both rest on compute giving a settled
/// status back as it is, with or without what was dropped.
#[test]
fn a_settled_status_is_computed_as_it_is() {
    let ends = [
        exited(0, None, wire::EndReason::Exited),
        exited(3, None, wire::EndReason::Exited),
        exited(0, Some(15), wire::EndReason::Stopped),
        exited(0, None, wire::EndReason::TimedOut),
    ];
    for end in ends {
        let mut r = end.clone();
        r.log_match = Some(wire::LogMatchHit {
            line: "listening".into(),
            cursor: "c1".into(),
        });
        let s = Case::new().record(r).at(6).run();
        assert!(is_final(&s) && !s.conditions.is_empty(), "{s:?}");
        assert!(settled(&s, Some(1)), "{s:?}");
        assert_eq!(Case::new().prev(s.clone()).at(99).run(), s);
        let shown_dropped = kept_when_settled(&s);
        assert!(shown_dropped.conditions.is_empty() && shown_dropped.log_match.is_none());
        assert_eq!(shown_dropped.output, None);
        let kept = (s.phase, s.exit.clone(), s.end_reason, s.finished_at.clone());
        let left = &shown_dropped;
        assert_eq!(
            kept,
            (
                left.phase,
                left.exit.clone(),
                left.end_reason,
                left.finished_at.clone()
            )
        );
        assert!(settled(left, Some(1)));
        assert_eq!(Case::new().prev(left.clone()).at(99).run(), *left);
        // A new generation: not settled; computed again, the generation follows.
        assert!(!settled(&s, Some(2)));
        let mut next = Case::new().prev(s.clone()).at(99);
        next.generation = 2;
        let s2 = next.run();
        assert_ne!(s2, s);
        assert!(settled(&s2, Some(2)), "{s2:?}");
        // One condition of an older generation is not settled either.
        let mut stale = s2.clone();
        stale.conditions[1].observed_generation = Some(1);
        assert!(!settled(&stale, Some(2)));
    }
    // Not final: never settled, whatever the generation.
    let running = Case::new().record(record(wire::Phase::Running)).run();
    assert!(!settled(&running, Some(1)), "{running:?}");
}
