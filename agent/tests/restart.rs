//! Agent restarts: supervisors outlive the agent, exit codes stay exact, starts stay idempotent,
//! and a supervisor that dies without a record is reported as ProcessLost.
mod common;

use std::time::Duration;

use common::*;
use sandbox_wire::wire::{EndReason, ErrorCode, Phase, ProcessObject};

const T: Duration = Duration::from_secs(60);

#[tokio::test]
async fn agent_sigkill_with_50_running_processes_keeps_exit_codes_exact() {
    require_root();
    let base = base_dir("restart");
    let runc_root = base.join(uniq("runc"));
    let ctr = Container::start(&base, &runc_root, 0);
    let mut agent = Agent::launch(&base, &runc_root, &[]);
    let mut ids = Vec::new();
    for i in 0..50 {
        // Each prints while the agent is gone; the output must still be complete afterwards.
        let q = req(
            &ctr,
            &[
                "sh",
                "-c",
                &format!(
                    "for n in 1 2 3 4 5 6; do echo tick$n; sleep 0.5; done; exit {}",
                    i % 50 + 1
                ),
            ],
        );
        let r = agent.start(&q).await.unwrap();
        assert_eq!(r.phase, Phase::Running, "{r:?}");
        ids.push((r.exec_id.clone(), i % 50 + 1, q));
    }
    agent.kill9();
    tokio::time::sleep(Duration::from_secs(1)).await;
    agent.spawn();
    // A repeated start after the restart returns the same process, not a second one.
    let again = agent.start(&ids[0].2).await.unwrap();
    assert_eq!(again.exec_id, ids[0].0);
    for (id, code, _) in &ids {
        let r = agent.wait_final(id, T).await;
        let exit = r
            .exit
            .clone()
            .unwrap_or_else(|| panic!("{id}: no exit: {r:?}"));
        assert_eq!(exit.code, *code, "{id}: {r:?}");
        assert_eq!(r.end_reason, Some(EndReason::Exited));
        let out = text(&agent.logs(id, "").await, None);
        assert_eq!(out, "tick1\ntick2\ntick3\ntick4\ntick5\ntick6\n", "{id}");
    }
    assert_eq!(again.host_pid, agent.record(&ids[0].0).await.host_pid);
}

/// A `processes` object's labels changed after its start are served on every later record,
/// also on the final one the supervisor wrote (with the object as started) while no agent ran.
#[tokio::test]
async fn a_changed_object_outlives_the_agent_and_the_process() {
    require_root();
    let base = base_dir("object");
    let runc_root = base.join(uniq("runc"));
    let ctr = Container::start(&base, &runc_root, 0);
    let mut agent = Agent::launch(&base, &runc_root, &[]);
    let mut q = req(&ctr, &["sh", "-c", "sleep 2; exit 4"]);
    let started = ProcessObject {
        namespace: "ns".into(),
        name: "p".into(),
        creation_timestamp: "2026-12-06T00:00:00Z".into(),
        labels: [("app".to_string(), "a".to_string())].into(),
        annotations: Default::default(),
        pod_name: "pod".into(),
        node_name: "node".into(),
        spec: serde_json::json!({"podName": "pod", "command": ["sh"]}),
    };
    q.object = Some(Box::new(started.clone()));
    let r = agent.start(&q).await.unwrap();
    let path = format!("/v1/processes/{}/object", r.exec_id);
    let mut changed = started.clone();
    changed.labels.insert("tier".into(), "b".into());
    changed.annotations.insert("note".into(), "x".into());
    let (s, v) = agent
        .put(&path, &serde_json::to_value(&changed).unwrap())
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["object"]["labels"]["tier"], "b", "{v}");
    let mut respec = changed.clone();
    respec.spec["command"][0] = "false".into();
    let (s, v) = agent
        .put(&path, &serde_json::to_value(&respec).unwrap())
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("object.spec"),
        "{v}"
    );
    agent.kill9();
    tokio::time::sleep(Duration::from_secs(3)).await; // it ends while no agent runs
    agent.spawn();
    let r = agent.wait_final(&r.exec_id, T).await;
    assert_eq!(r.exit.as_ref().map(|e| e.code), Some(4), "{r:?}");
    assert_eq!(r.object.as_deref(), Some(&changed), "{r:?}");
    let (s, _) = agent
        .put(
            &path.replace(&r.exec_id, "0123456789abcdef0123456789abcdef"),
            &serde_json::to_value(&changed).unwrap(),
        )
        .await;
    assert_eq!(s, 404);
}

#[tokio::test]
async fn supervisor_killed_is_process_lost() {
    require_root();
    let base = base_dir("lost");
    let runc_root = base.join(uniq("runc"));
    let ctr = Container::start(&base, &runc_root, 0);
    let mut agent = Agent::launch(&base, &runc_root, &[]);

    // While the agent runs: noticed through the supervisor's pidfd.
    let r = agent.start(&req(&ctr, &["sleep", "100"])).await.unwrap();
    let sup = supervisor_pid(&agent, &r.exec_id);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sup),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let lost = agent.wait_final(&r.exec_id, T).await;
    assert_eq!(lost.phase, Phase::Error);
    assert_eq!(lost.error.as_ref().unwrap().code, ErrorCode::ProcessLost);
    assert_eq!(lost.end_reason, Some(EndReason::Lost));
    assert!(lost.exit.is_none(), "no invented exit code: {lost:?}");

    // While the agent is down: noticed on restart.
    let r = agent.start(&req(&ctr, &["sleep", "100"])).await.unwrap();
    let sup = supervisor_pid(&agent, &r.exec_id);
    agent.kill9();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sup),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    agent.spawn();
    let lost = agent.wait_final(&r.exec_id, T).await;
    assert_eq!(lost.error.as_ref().unwrap().code, ErrorCode::ProcessLost);
    assert!(lost.exit.is_none());
}

fn supervisor_pid(agent: &Agent, id: &str) -> i32 {
    let v: serde_json::Value = serde_json::from_slice(
        &std::fs::read(agent.state.join("procs").join(id).join("supervisor.json")).unwrap(),
    )
    .unwrap();
    v["pid"].as_i64().unwrap() as i32
}

#[tokio::test]
async fn sigterm_with_an_open_watch_exits_promptly() {
    use futures::StreamExt;
    require_root();
    let base = base_dir("term");
    let runc_root = base.join(uniq("runc"));
    let ctr = Container::start(&base, &runc_root, 0);
    let mut agent = Agent::launch(&base, &runc_root, &[]);
    let r = agent.start(&req(&ctr, &["sleep", "100"])).await.unwrap();
    let resp = agent.watch().await;
    let mut body = resp.bytes_stream();
    body.next().await.unwrap().unwrap();
    let pid = nix::unistd::Pid::from_raw(agent.pid() as i32);
    let t0 = std::time::Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("agent still running 10 s after SIGTERM");
    assert!(status.success(), "{status:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t0.elapsed()
    );
    // The watch stream ended instead of holding the agent up.
    while let Some(chunk) = body.next().await {
        if chunk.is_err() {
            break;
        }
    }
    // The process was not the agent's to stop: it still runs under its supervisor.
    agent.spawn();
    assert_eq!(agent.record(&r.exec_id).await.phase, Phase::Running);
}

/// Two agents on one state dir (a second release's DaemonSet on the same agent.stateDir): the
/// second stands by, saying so, and serves only once the first is gone.
#[tokio::test]
async fn second_agent_on_the_same_state_dir_stands_by() {
    require_root();
    let base = base_dir("statelock");
    let runc_root = base.join(uniq("runc"));
    let mut a = Agent::launch(&base, &runc_root, &[]);
    let b = a.second_on_same_state();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!b.listening(), "the second agent serves the same state dir");
    assert!(b.log().contains("standing by"), "log: {}", b.log());
    a.kill9();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !b.listening() {
        assert!(
            std::time::Instant::now() < deadline,
            "the second agent did not take over: {}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
