//! The agent against real runc containers: exit codes, signals, timeouts, stop, env/cwd, launch
//! errors, readiness, logs, idempotency, security context.
mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use sandbox_wire::wire::{EndReason, EnvVar, LogEvent, Phase, ProbeKind, Readiness};
use serde_json::json;

fn fx_with(uid: u32, extra: &[&str]) -> Fx {
    Fx::new("exec", uid, extra)
}

fn fx() -> Fx {
    fx_with(0, &[])
}

/// Starts `pwd` in `cwd`, which the agent must refuse as 400 InvalidProcessCwd; the answer.
async fn refused_cwd(f: &Fx, cwd: &str) -> serde_json::Value {
    let mut q = req(&f.ctr, &["pwd"]);
    q.working_dir = Some(cwd.into());
    let (s, v) = f.agent.start(&q).await.unwrap_err();
    assert_eq!(
        (s, v["code"].as_str()),
        (400, Some("InvalidProcessCwd")),
        "{v}"
    );
    v
}

/// An executable shell script with `body`, to stand in for a binary the agent runs.
fn script(name: &str, body: &str) -> String {
    let path = base_dir("exec").join(uniq(name));
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_string()
}

const T: Duration = Duration::from_secs(20);

#[tokio::test]
async fn exit_code_is_exact() {
    let f = fx();
    let r = f
        .agent
        .start(&req(
            &f.ctr,
            &["sh", "-c", "echo out; echo err >&2; exit 7"],
        ))
        .await
        .unwrap();
    assert!(matches!(r.phase, Phase::Running | Phase::Exited), "{r:?}");
    assert!(
        r.pid.is_some_and(|p| p > 1),
        "pid inside the container: {r:?}"
    );
    let r = f.agent.wait_final(&r.exec_id, T).await;
    let exit = r.exit.clone().unwrap();
    assert_eq!((exit.code, exit.signal, exit.timed_out), (7, None, false));
    assert_eq!(r.end_reason, Some(EndReason::Exited));
    assert_eq!((r.output.stdout_bytes, r.output.stderr_bytes), (4, 4));
    assert_eq!(r.output.tail, "out\nerr\n");
    assert!(r.started_at.is_some() && r.finished_at.is_some());
}

#[tokio::test]
async fn signal_death_reports_128_plus_signal() {
    let f = fx();
    let r = f
        .agent
        .start(&req(&f.ctr, &["sh", "-c", "kill -TERM $$; sleep 5"]))
        .await
        .unwrap();
    let r = f.agent.wait_final(&r.exec_id, T).await;
    let exit = r.exit.unwrap();
    assert_eq!((exit.code, exit.signal), (143, Some(15)));
    assert_eq!(r.end_reason, Some(EndReason::Signaled));

    // Any numeric signal through the API, to the whole group.
    let r = f
        .agent
        .start(&req(&f.ctr, &["sleep", "100"]))
        .await
        .unwrap();
    let (s, v) = f.agent.signal(&r.exec_id, json!({"signal": 10})).await;
    assert_eq!(s, 200, "{v}");
    let r = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(r.exit.unwrap().signal, Some(10));
    assert_eq!(r.end_reason, Some(EndReason::Signaled));
    let (s, v) = f.agent.signal(&r.exec_id, json!({"signal": 99})).await;
    assert_eq!(s, 400, "signal out of range: {v}");
}

/// Every signal 1–64 sent through the API (as `kubectl sandbox kill --signal N` does) to a real
/// process in a runc container: the ones whose default action ends a process end it with code
/// 128+n and `signal: n` — the real-time ones (32–64) included, which were once reaped and lost,
/// leaving the record Running forever. The ones that ignore or stop (17–23, 28) end nothing, and
/// a stop afterwards still ends the process.
#[tokio::test]
async fn every_signal_1_to_64_is_recorded() {
    let f = fx();
    let not_fatal = [17, 18, 19, 20, 21, 22, 23, 28];
    let mut ids = Vec::new();
    for sig in 1..=64 {
        let r = f
            .agent
            .start(&req(&f.ctr, &["sleep", "100"]))
            .await
            .unwrap();
        let (s, v) = f.agent.signal(&r.exec_id, json!({ "signal": sig })).await;
        assert_eq!(s, 200, "signal {sig}: {v}");
        ids.push((sig, r.exec_id));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut wrong = Vec::new();
    for (sig, id) in ids.iter().filter(|(s, _)| !not_fatal.contains(s)) {
        let r = f.agent.record(id).await;
        let got = r.exit.as_ref().map(|e| (e.code, e.signal, r.end_reason));
        if got != Some((128 + sig, Some(*sig), Some(EndReason::Signaled))) {
            wrong.push(format!("signal {sig}: {:?} {got:?}", r.phase));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    for (sig, id) in ids.iter().filter(|(s, _)| not_fatal.contains(s)) {
        let r = f.agent.record(id).await;
        assert_eq!(r.phase, Phase::Running, "signal {sig} ends nothing: {r:?}");
        let (s, v) = f
            .agent
            .signal(id, json!({"stop": true, "graceSeconds": 0}))
            .await;
        assert_eq!(s, 200, "{v}");
        let r = f.agent.wait_final(id, T).await;
        assert_eq!(r.end_reason, Some(EndReason::Stopped), "after {sig}: {r:?}");
    }
}

/// The process killing itself with a real-time signal, and a stop whose stop signal is one.
#[tokio::test]
async fn realtime_signal_deaths_and_stops() {
    let f = fx();
    for sig in [34, 40, 64] {
        let r = f
            .agent
            .start(&req(
                &f.ctr,
                &["sh", "-c", &format!("echo before; kill -{sig} $$; sleep 5")],
            ))
            .await
            .unwrap();
        let r = f.agent.wait_final(&r.exec_id, T).await;
        let exit = r.exit.clone().unwrap();
        assert_eq!(
            (exit.code, exit.signal, r.end_reason),
            (128 + sig, Some(sig), Some(EndReason::Signaled)),
            "{r:?}"
        );
        assert_eq!(r.output.tail, "before\n");
    }
    let r = f
        .agent
        .start(&req(&f.ctr, &["sleep", "100"]))
        .await
        .unwrap();
    let (s, v) = f
        .agent
        .signal(
            &r.exec_id,
            json!({"stop": true, "signal": 64, "graceSeconds": 5}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let r = f.agent.wait_final(&r.exec_id, T).await;
    let exit = r.exit.clone().unwrap();
    assert_eq!(
        (exit.code, exit.signal, r.end_reason),
        (192, Some(64), Some(EndReason::Stopped)),
        "{r:?}"
    );
}

/// Durations beyond the API's bound (int32 seconds) are refused at the agent's door, naming the
/// field; before, i64::MAX-sized ones overflowed the supervisor's deadlines (a panic, and the
/// process left unsupervised) and the agent's forget wait (an abort of the whole agent).
#[tokio::test]
async fn durations_beyond_the_bound_are_refused_by_name() {
    let f = fx();
    let huge = u64::MAX / 2;
    for (field, patch) in [
        ("timeoutSeconds", json!({"timeoutSeconds": huge})),
        // Named as in the SandboxProcess spec, as the operator names it (one validator).
        (
            "terminationGracePeriodSeconds",
            json!({"graceSeconds": huge}),
        ),
        (
            "readiness.timeoutSeconds",
            json!({"readiness": {"probe": {"tcpSocket": {"port": 1}}, "timeoutSeconds": huge}}),
        ),
        (
            "readiness.periodMillis",
            json!({"readiness": {"probe": {"tcpSocket": {"port": 1}}, "periodMillis": huge}}),
        ),
    ] {
        let mut body = serde_json::to_value(req(&f.ctr, &["true"])).unwrap();
        body.as_object_mut()
            .unwrap()
            .extend(patch.as_object().unwrap().clone());
        let (s, v) = f.agent.post("/v1/processes", &body).await;
        assert_eq!(s, 400, "{field}: {v}");
        assert!(v["message"].as_str().unwrap().contains(field), "{v}");
    }
    // At the bound it runs; a stop with a grace beyond it is refused, one at it is taken.
    let mut q = req(&f.ctr, &["sh", "-c", "trap '' TERM; sleep 100"]);
    q.timeout_seconds = Some(i32::MAX as u64);
    q.grace_seconds = i32::MAX as u64;
    let r = f.agent.start(&q).await.unwrap();
    let (s, v) = f
        .agent
        .signal(&r.exec_id, json!({"stop": true, "graceSeconds": huge}))
        .await;
    assert_eq!(s, 400, "{v}");
    let (s, v) = f.agent.signal(&r.exec_id, json!({"stop": true})).await;
    assert_eq!(s, 200, "{v}");
    // TERM is ignored and SIGKILL is 68 years away: still running, still supervised.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(f.agent.record(&r.exec_id).await.phase, Phase::Running);
    let (s, v) = f.agent.signal(&r.exec_id, json!({"signal": 9})).await;
    assert_eq!(s, 200, "{v}");
    let done = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(done.end_reason, Some(EndReason::Stopped), "{done:?}");
}

#[tokio::test]
async fn timeout_kills_the_whole_group() {
    let f = fx();
    let mut q = req(
        &f.ctr,
        &[
            "sh",
            "-c",
            "sleep 100 & sleep 100 & trap '' TERM; while true; do sleep 1; done",
        ],
    );
    q.timeout_seconds = Some(1);
    q.grace_seconds = 1;
    let r = f.agent.start(&q).await.unwrap();
    let pgid = r.host_pid.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        group_members(pgid).len() >= 3,
        "grandchildren running: {:?}",
        group_members(pgid)
    );
    let r = f.agent.wait_final(&r.exec_id, T).await;
    let exit = r.exit.unwrap();
    assert!(exit.timed_out);
    assert_eq!(r.end_reason, Some(EndReason::TimedOut));
    assert_eq!(
        (exit.code, exit.signal),
        (137, Some(9)),
        "shell ignores TERM: SIGKILL after grace"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        group_members(pgid).is_empty(),
        "group members survived: {:?}",
        group_members(pgid)
    );
}

#[tokio::test]
async fn stop_is_graceful_then_forced_and_idempotent() {
    let f = fx();
    let r = f
        .agent
        .start(&req(&f.ctr, &["sleep", "100"]))
        .await
        .unwrap();
    let (s, _) = f.agent.signal(&r.exec_id, json!({"stop": true})).await;
    assert_eq!(s, 200);
    let done = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(done.end_reason, Some(EndReason::Stopped));
    assert_eq!(done.exit.clone().unwrap().signal, Some(15));
    assert!(done.stop_requested);
    let (s, v) = f.agent.signal(&r.exec_id, json!({"stop": true})).await;
    assert_eq!(s, 200, "stopping an ended process succeeds: {v}");
    assert_eq!(v["exit"]["code"], 143);

    let r = f
        .agent
        .start(&req(
            &f.ctr,
            &["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
        ))
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    let (s, _) = f
        .agent
        .signal(&r.exec_id, json!({"stop": true, "graceSeconds": 1}))
        .await;
    assert_eq!(s, 200);
    let done = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(done.exit.unwrap().signal, Some(9));
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "SIGKILL only after the grace period"
    );
}

/// Env values (Secrets, with `valueFrom`) reach the process and nothing in the state dir keeps
/// them once it runs.
#[tokio::test]
async fn env_values_are_not_kept_at_rest() {
    let f = fx();
    let secret = "s3cr3t-value-4a1c9e";
    let mut q = req(&f.ctr, &["sh", "-c", "printf %s \"$TOKEN\" | sha256sum"]);
    q.env = vec![EnvVar {
        name: "TOKEN".into(),
        value: secret.into(),
    }];
    let r = f.agent.start(&q).await.unwrap();
    let r = f.agent.wait_final(&r.exec_id, T).await;
    let out = text(&f.agent.logs(&r.exec_id, "").await, None);
    use sha2::Digest;
    let want: String = sha2::Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(
        out.starts_with(&want),
        "the process saw another value: {out}"
    );
    for p in walk(&f.agent.state) {
        let bytes = std::fs::read(&p).unwrap_or_default();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{} keeps the env value",
            p.display()
        );
    }
}

#[tokio::test]
async fn env_overlay_and_working_dir() {
    let f = fx();
    let mut q = req(
        &f.ctr,
        &[
            "sh",
            "-c",
            "pwd; echo $FOO; echo $CONTAINER_VAR; echo $PATH",
        ],
    );
    q.working_dir = Some("/tmp".into());
    q.env = vec![EnvVar {
        name: "FOO".into(),
        value: "bar baz".into(),
    }];
    let r = f.agent.start(&q).await.unwrap();
    f.agent.wait_final(&r.exec_id, T).await;
    let out = text(&f.agent.logs(&r.exec_id, "").await, None);
    assert_eq!(out, "/tmp\nbar baz\nfrom-image\n/bin\n");
}

/// A working directory through the tenant's symlinks: runc is handed the path they resolve to in
/// the container, and one that resolves into procfs (CVE-2024-21626: /proc/self/fd/N reaches the
/// host) is refused before runc runs.
#[tokio::test]
async fn working_dir_symlinks_resolve_inside_the_container() {
    let f = fx();
    let d = format!("/tmp/{}", uniq("cwd"));
    let setup = f
        .agent
        .start(&req(
            &f.ctr,
            &[
                "sh",
                "-c",
                &format!("mkdir -p {d}/srv/app && ln -s {d}/srv {d}/link && ln -s ../../../../../{d}/srv/app {d}/up && ln -s /proc/self/fd/7 {d}/leak"),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(
        f.agent.wait_final(&setup.exec_id, T).await.phase,
        Phase::Exited
    );
    for (cwd, want) in [
        (format!("{d}/link/app"), format!("{d}/srv/app")),
        (format!("{d}/up"), format!("{d}/srv/app")),
    ] {
        let mut q = req(&f.ctr, &["pwd"]);
        q.working_dir = Some(cwd.clone());
        let r = f.agent.start(&q).await.unwrap();
        f.agent.wait_final(&r.exec_id, T).await;
        assert_eq!(
            text(&f.agent.logs(&r.exec_id, "").await, None),
            format!("{want}\n"),
            "{cwd}"
        );
    }
    let v = refused_cwd(&f, &format!("{d}/leak")).await;
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("resolves to /proc/self/fd/7"),
        "{v}"
    );
}

/// runc known to let a process reach the host (CVE-2024-21626) is refused, saying so, unless
/// the node's operator says the build is patched.
#[tokio::test]
async fn a_vulnerable_runc_is_refused() {
    let old = script(
        "old-runc",
        &format!("if [ \"$1\" = --version ]; then printf 'runc version 1.1.11\\ncommit: v1.1.11-0-g4bccb38c\\n'; exit 0; fi\nexec {} \"$@\"", runc()),
    );
    let f = fx_with(0, &["--runtime-binary", &old]);
    let (s, v) = f.agent.start(&req(&f.ctr, &["true"])).await.unwrap_err();
    assert_eq!(v["code"], "RuntimeUnsupported", "{s} {v}");
    assert!(
        v["message"].as_str().unwrap().contains("CVE-2024-21626"),
        "{v}"
    );
    let f = fx_with(0, &["--runtime-binary", &old, "--allow-vulnerable-runtime"]);
    let (agent, ctr) = (&f.agent, &f.ctr);
    let r = agent.start(&req(ctr, &["true"])).await.unwrap();
    let r = agent.wait_final(&r.exec_id, T).await;
    assert_eq!(
        (r.phase, r.exit.as_ref().map(|e| e.code)),
        (Phase::Exited, Some(0)),
        "{r:?}"
    );
}

/// Processes on the host whose command line is exactly `argv`.
fn procs_with_cmdline(argv: &[&str]) -> Vec<i32> {
    let want = argv.join("\0") + "\0";
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want.as_bytes())
        })
        .collect()
}

/// A runtime that starts the process and then never returns (a start once hung for good under
/// load) fails the start after --runtime-timeout-ms, and leaves nothing running: not the
/// runtime, not the process it had started.
#[tokio::test]
async fn a_runtime_that_never_returns_fails_the_start_and_leaves_nothing() {
    let dir = base_dir("hung-runtime");
    let wrapper = dir.join("runc-then-hang");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{} \"$@\" || exit $?\ncase \" $* \" in *\" exec \"*) exec sleep 3601 ;; esac\n",
            runc()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let w = wrapper.to_str().unwrap();
    let f = Fx::new(
        "hung-runtime",
        0,
        &["--runtime-binary", w, "--runtime-timeout-ms", "2000"],
    );
    let t = std::time::Instant::now();
    let rec = f
        .agent
        .start(&req(&f.ctr, &["sleep", "3602"]))
        .await
        .expect("the start is answered with its record");
    let rec = f
        .agent
        .wait_final(&rec.exec_id, Duration::from_secs(20))
        .await;
    assert_eq!(rec.phase, Phase::Error, "{rec:?}");
    let err = rec.error.expect("an error");
    assert_eq!(err.code, sandbox_wire::wire::ErrorCode::ProcessSpawnFailed);
    assert!(
        err.message
            .contains("did not start the process within 2000 ms"),
        "{err:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    // The process runc had started, and the runtime itself, are gone.
    let until = std::time::Instant::now() + Duration::from_secs(5);
    let mut left = (vec![], vec![]);
    while std::time::Instant::now() < until {
        left = (
            procs_with_cmdline(&["sleep", "3602"]),
            procs_with_cmdline(&["sleep", "3601"]),
        );
        if left == (vec![], vec![]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, (vec![], vec![]), "(process, runtime) still running");
}

#[tokio::test]
async fn launch_errors_are_precise() {
    let f = fx();
    let v = refused_cwd(&f, "/does/not/exist").await;
    assert!(
        v["message"].as_str().unwrap().contains("/does/not/exist"),
        "{v}"
    );

    let (s, v) = f
        .agent
        .start(&req(&f.ctr, &["no-such-binary"]))
        .await
        .unwrap_err();
    assert_eq!(
        (s, v["code"].as_str()),
        (409, Some("ProcessSpawnFailed")),
        "{v}"
    );
    assert!(v["message"].as_str().unwrap().contains("not found"), "{v}");

    let (_, v) = f
        .agent
        .start(&req(&f.ctr, &["/etc/not-executable"]))
        .await
        .unwrap_err();
    assert_eq!(v["code"], "ProcessSpawnFailed");
    assert!(
        v["message"].as_str().unwrap().contains("permission denied"),
        "{v}"
    );

    let mut q = req(&f.ctr, &["env"]);
    q.env = vec![EnvVar {
        name: "A=B".into(),
        value: "x".into(),
    }];
    let (s, v) = f.agent.start(&q).await.unwrap_err();
    assert_eq!(
        (s, v["code"].as_str()),
        (400, Some("InvalidProcessEnvironment")),
        "{v}"
    );

    let mut q = req(&f.ctr, &["env"]);
    q.container = "nope".into();
    let (s, v) = f.agent.start(&q).await.unwrap_err();
    assert_eq!(
        (s, v["code"].as_str()),
        (404, Some("ContainerNotFound")),
        "{v}"
    );

    let (s, v) = f
        .agent
        .post(
            "/v1/processes",
            &json!({"execId": "a/b", "podUid": "p", "container": "c", "command": ["x"]}),
        )
        .await;
    assert_eq!(
        (s, v["code"].as_str()),
        (400, Some("InvalidRequest")),
        "{v}"
    );
    assert!(v["message"].as_str().unwrap().contains("execId"), "{v}");
}

#[tokio::test]
async fn container_not_running_is_unavailable() {
    let f = fx();
    let r = f
        .agent
        .start(&req(&f.ctr, &["sleep", "100"]))
        .await
        .unwrap();
    f.ctr.kill();
    let r = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(r.end_reason, Some(EndReason::ContainerExited), "{r:?}");
    assert_eq!(r.exit.unwrap().signal, Some(9));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (s, v) = f.agent.start(&req(&f.ctr, &["true"])).await.unwrap_err();
    assert_eq!(
        (s, v["code"].as_str()),
        (409, Some("ContainerUnavailable")),
        "{v}"
    );
}

fn readiness(probe: ProbeKind, timeout: Option<u64>) -> Option<Readiness> {
    Some(Readiness {
        probe,
        period_millis: 100,
        timeout_seconds: timeout,
    })
}

#[tokio::test]
async fn readiness_tcp_on_loopback_only_listener() {
    let f = fx();
    // busybox httpd bound to 127.0.0.1 only: a kubelet-style probe of the pod IP would miss it.
    let mut q = req(
        &f.ctr,
        &[
            "sh",
            "-c",
            "sleep 1; exec httpd -f -p 127.0.0.1:7001 -h /www",
        ],
    );
    q.readiness = readiness(ProbeKind::TcpSocket { port: 7001 }, None);
    let r = f.agent.start(&q).await.unwrap();
    assert!(!r.ready, "not ready before listening");
    let r = f.agent.wait_for(&r.exec_id, T, "ready", |r| r.ready).await;
    assert!(r.ready_at.is_some());
    assert_eq!(r.phase, Phase::Running);
}

#[tokio::test]
async fn readiness_http_status_range() {
    let f = fx();
    let mut q = req(
        &f.ctr,
        &["httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/www"],
    );
    q.readiness = readiness(
        ProbeKind::HttpGet {
            port: 8080,
            path: "/index.html".into(),
            status: Default::default(),
        },
        None,
    );
    let r = f.agent.start(&q).await.unwrap();
    f.agent.wait_for(&r.exec_id, T, "ready", |r| r.ready).await;

    let mut q = req(
        &f.ctr,
        &["httpd", "-f", "-p", "127.0.0.1:8081", "-h", "/www"],
    );
    q.readiness = readiness(
        ProbeKind::HttpGet {
            port: 8081,
            path: "/missing".into(),
            status: Default::default(),
        },
        Some(2),
    );
    let r = f.agent.start(&q).await.unwrap();
    let r = f
        .agent
        .wait_for(&r.exec_id, T, "readiness timeout", |r| {
            r.readiness_timed_out
        })
        .await;
    assert!(!r.ready, "404 is outside 200-399");
    assert_eq!(
        r.phase,
        Phase::Running,
        "process keeps running after a readiness timeout"
    );
}

#[tokio::test]
async fn readiness_log_match() {
    let f = fx();
    let mut q = req(
        &f.ctr,
        &[
            "sh",
            "-c",
            // One write holds the matching line and the next: the cursor still falls between them.
            "echo booting; sleep 0.5; printf 'listening on port 9000\\nafter the match\\n' >&2; sleep 100",
        ],
    );
    q.readiness = readiness(
        ProbeKind::LogMatch {
            pattern: "listening on port [0-9]+".into(),
            stream: Default::default(),
        },
        None,
    );
    let r = f.agent.start(&q).await.unwrap();
    let r = f.agent.wait_for(&r.exec_id, T, "ready", |r| r.ready).await;
    assert!(r.output.tail.contains("listening"));
    let hit = r.log_match.clone().expect("the matched line is recorded");
    assert_eq!(hit.line, "listening on port 9000");
    let after = f
        .agent
        .logs(&r.exec_id, &format!("since={}", hit.cursor))
        .await;
    assert_eq!(
        text(&after, None),
        "after the match\n",
        "resumes right after the match"
    );

    let mut q = req(&f.ctr, &["sleep", "100"]);
    q.readiness = readiness(
        ProbeKind::LogMatch {
            pattern: "(".into(),
            stream: Default::default(),
        },
        None,
    );
    let (s, v) = f.agent.start(&q).await.unwrap_err();
    assert_eq!(s, 400);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("readiness.logMatch.pattern"),
        "{v}"
    );
}

#[tokio::test]
async fn readiness_log_match_waits_for_whole_lines() {
    let f = fx();
    let mut q = req(
        &f.ctr,
        &[
            "sh",
            "-c",
            "printf 'port=80'; sleep 2; printf '80\\n'; sleep 1; echo port=80; sleep 100",
        ],
    );
    q.readiness = readiness(
        ProbeKind::LogMatch {
            pattern: "^port=80$".into(),
            stream: Default::default(),
        },
        None,
    );
    let r = f.agent.start(&q).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mid = f.agent.record(&r.exec_id).await;
    assert!(!mid.ready, "ready on the partial line \"port=80\": {mid:?}");
    let r = f.agent.wait_for(&r.exec_id, T, "ready", |r| r.ready).await;
    assert!(r.output.tail.ends_with("port=8080\nport=80\n"), "{r:?}");
}

#[tokio::test]
async fn logs_cursors_replay_follow() {
    let f = fx();
    let r = f
        .agent
        .start(&req(
            &f.ctr,
            &[
                "sh",
                "-c",
                "for i in $(seq 1 50); do echo out$i; echo err$i >&2; sleep 0.02; done; exit 3",
            ],
        ))
        .await
        .unwrap();
    // Follow from the start while it runs: everything in order, then an end event with the exit.
    let events = f.agent.logs(&r.exec_id, "follow=true").await;
    let expect_out: String = (1..=50).map(|i| format!("out{i}\n")).collect();
    let expect_err: String = (1..=50).map(|i| format!("err{i}\n")).collect();
    assert_eq!(text(&events, Some("stdout")), expect_out);
    assert_eq!(text(&events, Some("stderr")), expect_err);
    match events.last().unwrap() {
        LogEvent::End {
            record: Some(rec), ..
        } => assert_eq!(rec.exit.as_ref().unwrap().code, 3),
        e => panic!("last event {e:?}"),
    }
    // Resume from a mid-stream cursor: no duplicate, no gap.
    let mid = events.len() / 2;
    let LogEvent::Data { cursor, .. } = &events[mid] else {
        panic!()
    };
    let rest = f.agent.logs(&r.exec_id, &format!("since={cursor}")).await;
    let mut joined = text(&events[..=mid], None);
    joined.push_str(&text(&rest, None));
    assert_eq!(joined, text(&events, None));
    // The same place as an agent before owner-tagged cursors wrote it (`c<offset>`): a follow
    // that crosses the agent's upgrade goes on from there, the same bytes.
    let offset = cursor.trim_start_matches('c').split('.').next().unwrap();
    let old = f.agent.logs(&r.exec_id, &format!("since=c{offset}")).await;
    assert_eq!(text(&old, None), text(&rest, None));
    // Stream filter and maxBytes.
    let only_err = f.agent.logs(&r.exec_id, "stream=Stderr").await;
    assert_eq!(text(&only_err, None), expect_err);
    // Up to maxBytes, but at least one frame: on a busy node the supervisor reads several
    // lines at once, and one frame may be longer than the page.
    let page = f.agent.logs(&r.exec_id, "maxBytes=20").await;
    let frames = page
        .iter()
        .filter(|e| matches!(e, LogEvent::Data { .. }))
        .count();
    let got = text(&page, None);
    assert!(
        !got.is_empty() && (got.len() <= 20 || frames == 1),
        "{page:?}"
    );
    // A limited read is not the end: it says where more follows, and reading on from there
    // page by page gives everything, then the real end.
    let (all, pages) = read_on_in_pages(&f.agent, &r.exec_id, page).await;
    assert!(pages > 2, "{pages}");
    assert_eq!(text(&all, None), text(&events, None));
    // The end event tenants read carries no node PID.
    let LogEvent::End {
        record: Some(rec), ..
    } = events.last().unwrap()
    else {
        panic!()
    };
    assert_eq!(rec.host_pid, None);
    assert!(f.agent.record(&r.exec_id).await.host_pid.is_some());
    bad_cursors_are_refused_naming_the_cause(&f, &r.exec_id, &events).await;
}

/// Reads on from a limited read's `More` cursor, 200 bytes a page, to the process's end: the
/// events of every page and how many pages it took.
async fn read_on_in_pages(agent: &Agent, id: &str, first: Vec<LogEvent>) -> (Vec<LogEvent>, usize) {
    let mut all = first;
    let mut pages = 1;
    loop {
        match all.last().unwrap() {
            LogEvent::More { cursor } => {
                let next = agent
                    .logs(id, &format!("maxBytes=200&since={cursor}"))
                    .await;
                all.extend(next);
                pages += 1;
            }
            LogEvent::End { record, .. } => {
                assert!(record.is_some(), "the end of an exited process");
                return (all, pages);
            }
            e => panic!("a limited read ended with {e:?}"),
        }
        assert!(pages < 100);
    }
}

/// A bad cursor is a clear 400, a long one is echoed cut short, and a cursor of another process
/// (`events` are the process `id`'s) is refused naming the cause, even where offsets coincide.
async fn bad_cursors_are_refused_naming_the_cause(f: &Fx, id: &str, events: &[LogEvent]) {
    let (s, v) = f
        .agent
        .get(&format!("/v1/processes/{id}/logs?since=zz"))
        .await;
    assert_eq!(s, 400, "{v}");
    let long = "c".to_string() + &"9".repeat(5000);
    let (s, v) = f
        .agent
        .get(&format!("/v1/processes/{id}/logs?since={long}"))
        .await;
    let msg = v["message"].as_str().unwrap();
    assert!(
        s == 400 && msg.len() < 300 && msg.contains("not a cursor"),
        "{msg}"
    );
    let other = f
        .agent
        .start(&req(
            &f.ctr,
            &["sh", "-c", "echo out1; echo err1 >&2; echo out2"],
        ))
        .await
        .unwrap();
    f.agent.wait_final(&other.exec_id, T).await;
    let LogEvent::Data { cursor, .. } = &events[0] else {
        panic!()
    };
    let (s, v) = f
        .agent
        .get(&format!(
            "/v1/processes/{}/logs?since={cursor}",
            other.exec_id
        ))
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("cursor belongs to another process"),
        "{v}"
    );
}

#[tokio::test]
async fn retention_cap_shows_an_explicit_gap() {
    let f = fx_with(0, &["--log-retention-bytes", "65536"]);
    let r = f
        .agent
        .start(&req(
            &f.ctr,
            &["sh", "-c", "yes 0123456789 | head -c 1100000"],
        ))
        .await
        .unwrap();
    let done = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(done.output.stdout_bytes, 1_100_000);
    let events = f.agent.logs(&r.exec_id, "").await;
    let LogEvent::Truncated { dropped_bytes, .. } = &events[0] else {
        panic!("first event {:?}", events[0])
    };
    assert!(*dropped_bytes > 900_000, "{dropped_bytes}");
    let kept = text(&events, None).len();
    // Output bytes only, no frame headers: what was dropped and what was kept add up exactly.
    assert_eq!(*dropped_bytes + kept as u64, 1_100_000);
    assert_eq!(done.output.dropped_bytes, *dropped_bytes);
    // At most the cap plus the segment being written.
    assert!(kept > 32_768 && kept <= 2 * 65_536, "kept {kept}");
    assert!(
        text(&events, None).ends_with("0123456789\n"),
        "newest output is kept"
    );
}

#[tokio::test]
async fn concurrent_starts_of_one_id_make_one_process() {
    let f = fx();
    let q = req(
        &f.ctr,
        &["sh", "-c", "echo started >> /tmp/idem-$0; sleep 30"],
    );
    let mut q = q;
    let marker = uniq("m");
    q.command = vec![
        "sh".into(),
        "-c".into(),
        format!("echo started >> /tmp/{marker}; sleep 30"),
    ];
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (c, url, q) = (
            f.agent.client.clone(),
            f.agent.url("/v1/processes"),
            q.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let r = c
                .post(url)
                .bearer_auth(TOKEN)
                .json(&q)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200);
            r.json::<sandbox_wire::wire::ProcessRecord>().await.unwrap()
        }));
    }
    let mut pids = std::collections::BTreeSet::new();
    for t in tasks {
        pids.insert(t.await.unwrap().host_pid);
    }
    assert_eq!(pids.len(), 1, "one process for one exec id: {pids:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rootfs = f.base.join("rootfs");
    let lines = std::fs::read_to_string(rootfs.join("tmp").join(&marker)).unwrap();
    assert_eq!(lines, "started\n");
    let (s, _) = f.agent.signal(&q.exec_id, json!({"signal": 9})).await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn container_user_and_capabilities_apply() {
    let f = fx_with(1000, &[]);
    let r = f
        .agent
        .start(&req(&f.ctr, &["sh", "-c", "id -u; id -g; grep -E '^Cap(Eff|Bnd)' /proc/self/status; cat /proc/1/status | grep ^CapBnd"]))
        .await
        .unwrap();
    let done = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(done.exit.unwrap().code, 0);
    let out = text(&f.agent.logs(&r.exec_id, "").await, None);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(&lines[..2], &["1000", "1000"], "{out}");
    assert_eq!(
        lines[2], "CapEff:\t0000000000000000",
        "non-root has no effective caps: {out}"
    );
    assert_eq!(lines[3], lines[4], "bounding set is the container's: {out}");
    assert!(
        !lines[3].ends_with("ffffffffff"),
        "not the host's full bounding set: {out}"
    );
}

#[tokio::test]
async fn unauthenticated_calls_are_refused() {
    let f = fx();
    let c = &f.agent.client;
    let r = c.get(f.agent.url("/v1/processes")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = c
        .get(f.agent.url("/v1/processes"))
        .bearer_auth("wrong-token-wrong-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = c
        .post(f.agent.url("/v1/processes"))
        .json(&req(&f.ctr, &["true"]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
}

#[tokio::test]
async fn forget_stops_and_deletes() {
    let f = fx();
    let r = f
        .agent
        .start(&req(&f.ctr, &["sleep", "100"]))
        .await
        .unwrap();
    let pgid = r.host_pid.unwrap();
    let resp = f
        .agent
        .client
        .delete(f.agent.url(&format!("/v1/processes/{}", r.exec_id)))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    assert!(group_members(pgid).is_empty());
    let (s, v) = f.agent.get(&format!("/v1/processes/{}", r.exec_id)).await;
    assert_eq!((s, v["code"].as_str()), (404, Some("ProcessNotFound")));
    assert!(!f.agent.state.join("procs").join(&r.exec_id).exists());
}

#[tokio::test]
async fn watch_streams_changes() {
    use futures::StreamExt;
    let f = fx();
    let resp = f.agent.watch().await;
    let mut body = resp.bytes_stream();
    let r = f
        .agent
        .start(&req(&f.ctr, &["sh", "-c", "sleep 0.2; exit 4"]))
        .await
        .unwrap();
    let mut buf = Vec::new();
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .expect("watch event")
            .unwrap()
            .unwrap();
        buf.extend_from_slice(&chunk);
        let text = String::from_utf8_lossy(&buf);
        if text.lines().any(|l| {
            l.contains(&r.exec_id) && l.contains("\"phase\":\"Exited\"") && l.contains("\"code\":4")
        }) {
            break;
        }
    }
    assert!(String::from_utf8_lossy(&buf).contains("{\"type\":\"synced\"}"));
}

#[tokio::test]
async fn oom_kill_is_reported() {
    require_root();
    let base = base_dir("exec");
    let runc_root = base.join(uniq("runc"));
    let ctr = Container::start_with(&base, &runc_root, 0, Some(32 << 20));
    let agent = Agent::launch(&base, &runc_root, &[]);
    // dd allocates its block size: 256 MiB in a 32 MiB container.
    let r = agent
        .start(&req(
            &ctr,
            &["dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"],
        ))
        .await
        .unwrap();
    let r = agent.wait_final(&r.exec_id, T).await;
    assert_eq!(r.end_reason, Some(EndReason::OOMKilled), "{r:?}");
    assert_eq!(r.exit.unwrap().signal, Some(9));
}

/// The state dir holds the containers' environment (Secret values too) and the tenants' output:
/// only root on the node may read it. Root 0700, every regular file of a process 0600.
#[tokio::test]
async fn state_dir_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let f = fx();
    let mut q = req(&f.ctr, &["sh", "-c", "echo secret-output"]);
    q.env = vec![EnvVar {
        name: "TOKEN".into(),
        value: "s3cr3t".into(),
    }];
    let r = f.agent.start(&q).await.unwrap();
    f.agent.wait_final(&r.exec_id, T).await;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&f.agent.state), 0o700);
    let mut files = 0;
    let mut stack = vec![f.agent.state.join("records"), f.agent.state.join("procs")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() && e.file_name() != "pid" {
                // (runc writes the pid file with its umask: a number, and under the 0700 root)
                assert_eq!(
                    mode(&e.path()) & 0o077,
                    0,
                    "{} readable by others",
                    e.path().display()
                );
                files += 1;
            }
        }
    }
    assert!(files >= 3, "record, launch spec, ledger: {files} files");
}

/// An httpGet path goes into the request line verbatim: CR/LF or spaces would inject headers or
/// a second request into the pod's own server. Refused at the agent's door, naming the field.
#[tokio::test]
async fn http_probe_path_must_be_plain() {
    let f = fx();
    for path in ["/x\r\nHost: evil", "/a b", "/tab\there", "/ü"] {
        let mut body = serde_json::to_value(req(&f.ctr, &["true"])).unwrap();
        body["readiness"] = json!({"probe": {"httpGet": {"port": 80, "path": path}}});
        let (s, v) = f.agent.post("/v1/processes", &body).await;
        assert_eq!(s, 400, "{path:?}: {v}");
        assert!(
            v["message"].as_str().unwrap().contains("httpGet.path"),
            "{v}"
        );
    }
}

/// Followers are woken by the output (inotify), not by polling: 50 idle follows cost the agent
/// next to no CPU, a write reaches all of them at once, and a cap refuses the 51st with 429.
#[tokio::test]
async fn idle_follows_cost_nothing_wake_on_output_and_are_capped() {
    use futures::StreamExt;
    let f = fx_with(0, &["--max-follows-per-process", "50"]);
    let r = f
        .agent
        .start(&req(
            &f.ctr,
            &[
                "sh",
                "-c",
                "read x < /dev/null; sleep 3; echo late; sleep 100",
            ],
        ))
        .await
        .unwrap();
    let mut streams = Vec::new();
    for _ in 0..50 {
        let resp = f
            .agent
            .client
            .get(
                f.agent
                    .url(&format!("/v1/processes/{}/logs?follow=true", r.exec_id)),
            )
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        streams.push(resp.bytes_stream());
    }
    let over = f
        .agent
        .client
        .get(
            f.agent
                .url(&format!("/v1/processes/{}/logs?follow=true", r.exec_id)),
        )
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(over.status().as_u16(), 429);
    let body: serde_json::Value = over.json().await.unwrap();
    assert_eq!(body["code"], "TooManyRequests", "{body}");
    let before = cpu_ticks(f.agent.pid());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let idle = cpu_ticks(f.agent.pid()) - before;
    assert!(idle <= 5, "50 idle follows used {idle} CPU ticks in 1.5 s");
    // "late" arrives in every stream soon after it is written (t = 3 s).
    let t0 = std::time::Instant::now();
    for s in streams.iter_mut() {
        let ev = loop {
            let chunk = tokio::time::timeout(Duration::from_secs(5), s.next())
                .await
                .expect("a follower was not woken")
                .unwrap()
                .unwrap();
            let first = chunk.split(|b| *b == b'\n').next().unwrap();
            if !sandbox_wire::wire::log_line_is_keepalive(first) {
                break serde_json::from_slice::<LogEvent>(first).unwrap();
            }
        };
        assert!(matches!(ev, LogEvent::Data { .. }), "{ev:?}");
    }
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    // Idle again: each follow says it is alive (an empty line) within the keepalive interval,
    // so a reader can tell an idle process from a dead connection.
    let t1 = std::time::Instant::now();
    let bound = sandbox_wire::wire::LOG_KEEPALIVE + Duration::from_secs(2);
    for s in streams.iter_mut() {
        let chunk = tokio::time::timeout(bound.saturating_sub(t1.elapsed()), s.next())
            .await
            .expect("an idle follow sent no keepalive")
            .unwrap()
            .unwrap();
        assert_eq!(&chunk[..], b"\n", "a keepalive is one empty line");
    }
    drop(streams);
}

/// A tmpfs of `size` bytes mounted as a state dir, with a container and an agent on it; the mount
/// goes (lazily) with the returned guard.
struct TmpfsAgent {
    agent: Agent,
    ctr: Container,
    state: std::path::PathBuf,
}

impl Drop for TmpfsAgent {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.state)
            .status();
    }
}

fn agent_on_tmpfs(name: &str, size: u64) -> TmpfsAgent {
    require_root();
    let base = base_dir("exec");
    let runc_root = base.join(uniq("runc"));
    let ctr = Container::start(&base, &runc_root, 0);
    let state = base.join(uniq(name));
    std::fs::create_dir_all(&state).unwrap();
    let st = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0700"),
            "tmpfs",
        ])
        .arg(&state)
        .status()
        .unwrap();
    assert!(st.success(), "mounting a tmpfs state dir");
    let agent = Agent::launch_in(&base, &runc_root, &state, &[]);
    TmpfsAgent { agent, ctr, state }
}

/// A full filesystem under the state dir never ends supervision: output that cannot be stored
/// becomes an explicit gap, and the final record (exit code) is still written.
#[tokio::test]
async fn a_full_state_filesystem_loses_output_not_the_exit() {
    let t = agent_on_tmpfs("small-state", 1 << 30);
    let (agent, ctr, state) = (&t.agent, &t.ctr, t.state.as_path());
    // Now shrink it to what the agent uses so far plus 4 MiB.
    let used = {
        let st = nix::sys::statvfs::statvfs(state).unwrap();
        (st.blocks() - st.blocks_free()) as u64 * st.fragment_size() as u64
    };
    let st = std::process::Command::new("mount")
        .args(["-o", &format!("remount,size={}", used + (4 << 20))])
        .arg(state)
        .status()
        .unwrap();
    assert!(st.success(), "shrinking the tmpfs");
    // 16 MiB of output into 4 MiB of room, then a last line and an exit code.
    let r = agent
        .start(&req(
            ctr,
            &[
                "sh",
                "-c",
                "dd if=/dev/zero bs=65536 count=256 2>/dev/null; echo; echo the-end; exit 3",
            ],
        ))
        .await
        .unwrap_or_else(|e| {
            let logs: Vec<String> = walk(state)
                .into_iter()
                .map(|p| {
                    let body = if p.ends_with("supervisor.log") {
                        std::fs::read_to_string(&p).unwrap_or_default()
                    } else {
                        String::new()
                    };
                    format!("{} {body}", p.display())
                })
                .collect();
            panic!("start: {e:?}\nstate dir:\n{}", logs.join("\n"))
        });
    let r = agent.wait_final(&r.exec_id, Duration::from_secs(60)).await;
    assert_loss_is_a_gap(agent, &r.exec_id).await;
    let exit = r.exit.clone().expect("the exit is recorded");
    assert_eq!(
        (exit.code, r.end_reason),
        (3, Some(EndReason::Exited)),
        "{r:?}"
    );
    assert_eq!(r.output.stdout_bytes, (16 << 20) + 1 + 8);
    assert!(
        r.output.dropped_bytes >= 8 << 20,
        "most of the output could not be kept: {}",
        r.output.dropped_bytes
    );
    assert!(r.output.tail.ends_with("the-end\n"), "{:?}", &r.output.tail);
}

/// As on a node whose disk another writer filled: 2 MiB left when three processes start and write
/// 16 MiB each at once; every one ends with its exit code (e2e/suites/hostile's case, reproduced here).
#[tokio::test]
async fn concurrent_writers_on_a_nearly_full_state_filesystem_keep_their_exits() {
    let t = agent_on_tmpfs("full-state", 128 << 20);
    let (agent, ctr, state) = (&t.agent, &t.ctr, t.state.as_path());
    let avail = {
        let st = nix::sys::statvfs::statvfs(state).unwrap();
        st.blocks_available() as u64 * st.fragment_size() as u64
    };
    assert!(std::process::Command::new("fallocate")
        .args(["-l", &(avail - (2 << 20)).to_string()])
        .arg(state.join("fill"))
        .status()
        .unwrap()
        .success());
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = agent
            .start(&req(
                ctr,
                &[
                    "sh",
                    "-c",
                    "sleep 2; dd if=/dev/zero bs=65536 count=256 2>/dev/null; echo; echo the-end; exit 3",
                ],
            ))
            .await
            .unwrap();
        ids.push(r.exec_id);
    }
    for id in &ids {
        let r = agent.wait_final(id, Duration::from_secs(60)).await;
        assert_eq!(
            (r.phase, r.exit.as_ref().map(|e| e.code)),
            (Phase::Exited, Some(3)),
            "{r:?}\n{}",
            std::fs::read_to_string(state.join("procs").join(id).join("supervisor.log"))
                .unwrap_or_default()
        );
    }
}

/// Output stops short of the filesystem's last 2 MiB (`ledger::OUTPUT_FLOOR`): a writer that fills
/// the rest leaves the room a later start needs (1 MiB). Before, its output took every byte, and a
/// start let in a moment earlier lost its supervisor to the full disk (e2e/suites/hostile, in CI).
#[tokio::test]
async fn output_leaves_the_room_starts_need() {
    let t = agent_on_tmpfs("floor-state", 128 << 20);
    let (agent, ctr, state) = (&t.agent, &t.ctr, t.state.as_path());
    let free = || {
        let st = nix::sys::statvfs::statvfs(state).unwrap();
        st.blocks_available() as u64 * st.fragment_size() as u64
    };
    assert!(std::process::Command::new("fallocate")
        .args(["-l", &(free() - (3 << 20)).to_string()])
        .arg(state.join("fill"))
        .status()
        .unwrap()
        .success());
    let r = agent
        .start(&req(
            ctr,
            &[
                "sh",
                "-c",
                "dd if=/dev/zero bs=65536 count=256 2>/dev/null; echo the-end; exit 3",
            ],
        ))
        .await
        .unwrap();
    let r = agent.wait_final(&r.exec_id, Duration::from_secs(60)).await;
    assert_eq!(
        (r.phase, r.exit.as_ref().map(|e| e.code)),
        (Phase::Exited, Some(3)),
        "{r:?}"
    );
    assert_eq!(r.output.stdout_bytes, (16 << 20) + 8);
    assert!(r.output.dropped_bytes >= 14 << 20, "{r:?}");
    let left = free();
    assert!(left >= 1 << 20, "the writer left {left} bytes free");
    // The loss is a gap readers see, though the end came below the floor.
    assert_loss_is_a_gap(agent, &r.exec_id).await;
    // A start now is let in, runs and ends exactly.
    let r = agent
        .start(&req(ctr, &["sh", "-c", "echo hello; exit 4"]))
        .await
        .unwrap_or_else(|e| panic!("start with {left} bytes free: {e:?}"));
    let r = agent.wait_final(&r.exec_id, Duration::from_secs(30)).await;
    assert_eq!(
        (r.phase, r.exit.as_ref().map(|e| e.code)),
        (Phase::Exited, Some(4)),
        "{r:?}"
    );
}

/// The final record has room kept for it from the start: a filesystem filled to the last byte by
/// someone else while a quiet process runs (no output of its own to give up) still gets its
/// exit code.
#[tokio::test]
async fn a_filesystem_filled_by_others_still_gets_the_exit() {
    let t = agent_on_tmpfs("filled-state", 64 << 20);
    let (agent, ctr, state) = (&t.agent, &t.ctr, t.state.as_path());
    let r = agent
        .start(&req(ctr, &["sh", "-c", "sleep 2; exit 7"]))
        .await
        .unwrap();
    // Everything left, and then byte by byte what fallocate's page rounding leaves.
    let avail = {
        let st = nix::sys::statvfs::statvfs(state).unwrap();
        st.blocks_available() as u64 * st.fragment_size() as u64
    };
    assert!(std::process::Command::new("fallocate")
        .args(["-l", &avail.to_string()])
        .arg(state.join("fill"))
        .status()
        .unwrap()
        .success());
    let mut n = 0;
    while std::fs::write(state.join(format!("fill-{n}")), [0u8; 512]).is_ok() {
        n += 1;
    }
    let t0 = std::time::Instant::now();
    let r = agent.wait_final(&r.exec_id, Duration::from_secs(30)).await;
    assert_eq!(
        (r.phase, r.exit.as_ref().map(|e| e.code)),
        (Phase::Exited, Some(7)),
        "{r:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    // And a start now waits for room: 429, not an error of the process.
    let (status, body) = agent.start(&req(ctr, &["true"])).await.unwrap_err();
    assert_eq!(status, 429, "{body}");
}

/// Readers of the process's log see output that could not be kept as a gap.
async fn assert_loss_is_a_gap(agent: &Agent, exec_id: &str) {
    let events = agent.logs(exec_id, "").await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, LogEvent::Truncated { dropped_bytes, .. } if *dropped_bytes > 0)),
        "readers see the loss as a gap"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

/// The state dir's path length is the admin's choice: a supervisor's control socket deeper than
/// a unix socket path may be (108 bytes) is bound and reached all the same (stop goes through it).
#[tokio::test]
async fn a_deep_state_dir_is_no_limit() {
    require_root();
    let base = base_dir("exec");
    let runc_root = base.join(uniq("runc"));
    let ctr = Container::start(&base, &runc_root, 0);
    let state = base.join("d".repeat(80)).join(uniq("state"));
    std::fs::create_dir_all(state.parent().unwrap()).unwrap();
    let agent = Agent::launch_in(&base, &runc_root, &state, &[]);
    let r = agent.start(&req(&ctr, &["sleep", "100"])).await.unwrap();
    assert_eq!(r.phase, Phase::Running, "{r:?}");
    let sock = state.join("procs").join(&r.exec_id).join("control.sock");
    assert!(sock.as_os_str().len() > 108, "{}", sock.display());
    let (s, v) = agent.signal(&r.exec_id, json!({"stop": true})).await;
    assert_eq!(s, 200, "{v}");
    let done = agent.wait_final(&r.exec_id, T).await;
    assert_eq!(done.end_reason, Some(EndReason::Stopped), "{done:?}");
}

/// A supervisor that ends before its process has a record (here: one that cannot start at all)
/// makes the start an Error that says why, at once, not a start that vanishes (404).
#[tokio::test]
async fn a_supervisor_that_dies_at_once_is_an_error_saying_why() {
    let broken = script(
        "broken-supervisor",
        "echo 'supervisor: cannot start: the test says so' >&2\nexit 1",
    );
    let f = fx_with(0, &["--supervisor-binary", &broken]);
    let (agent, ctr) = (&f.agent, &f.ctr);
    let t0 = std::time::Instant::now();
    let r = agent.start(&req(ctr, &["sleep", "100"])).await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(r.phase, Phase::Error, "{r:?}");
    assert_eq!(r.end_reason, Some(EndReason::Lost));
    let e = r.error.unwrap();
    assert!(
        e.message.contains("cannot start: the test says so"),
        "{}",
        e.message
    );
    assert_eq!(agent.record(&r.exec_id).await.phase, Phase::Error);
}

/// The supervisors' own cgroup carries the memory and pids caps, and they are in it.
#[tokio::test]
async fn supervisors_run_under_their_cgroups_limits() {
    let cg = "spo-agent-test-limits";
    let f = fx_with(
        0,
        &[
            "--supervisor-cgroup",
            cg,
            "--supervisor-memory-bytes",
            "100000000",
            "--supervisor-pids",
            "500",
        ],
    );
    let r = f
        .agent
        .start(&req(&f.ctr, &["sleep", "100"]))
        .await
        .unwrap();
    let root = Path::new("/sys/fs/cgroup");
    let (mem, pids) = if root.join("cgroup.controllers").exists() {
        (
            root.join(cg).join("memory.max"),
            root.join(cg).join("pids.max"),
        )
    } else {
        (
            root.join("memory").join(cg).join("memory.limit_in_bytes"),
            root.join("pids").join(cg).join("pids.max"),
        )
    };
    // Whole pages: 100000000 rounded down to 4096 bytes.
    assert_eq!(std::fs::read_to_string(&mem).unwrap().trim(), "99999744");
    assert_eq!(std::fs::read_to_string(&pids).unwrap().trim(), "500");
    let members = std::fs::read_to_string(pids.with_file_name("cgroup.procs")).unwrap();
    let supervisors = members
        .lines()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&r.exec_id))
                .unwrap_or(false)
        })
        .count();
    assert_eq!(supervisors, 1, "members: {members}");
    let (s, _) = f
        .agent
        .signal(&r.exec_id, json!({"stop": true, "graceSeconds": 0}))
        .await;
    assert_eq!(s, 200);
}

/// Supervisors out of pids (the node's cap reached): the start is an Error that says so, and
/// the agent serves on.
#[tokio::test]
async fn supervisors_out_of_pids_is_an_error_not_a_crash() {
    let f = fx_with(
        0,
        &[
            "--supervisor-cgroup",
            "spo-agent-test-pids1",
            "--supervisor-pids",
            "1",
        ],
    );
    let r = f.agent.start(&req(&f.ctr, &["true"])).await.unwrap();
    let r = if r.phase == Phase::Starting {
        f.agent
            .wait_final(&r.exec_id, Duration::from_secs(10))
            .await
    } else {
        r
    };
    assert_eq!(r.phase, Phase::Error, "{r:?}");
    let e = r.error.unwrap();
    assert!(e.message.contains("pids cap"), "{}", e.message);
    let (s, _) = f.agent.get("/healthz").await;
    assert_eq!(s, 200);
}

/// The metrics listener answers without a token, with aggregates that follow the processes.
#[tokio::test]
async fn metrics_count_processes_and_errors() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let f = fx_with(0, &["--metrics-listen", &addr]);
    let r = f
        .agent
        .start(&req(&f.ctr, &["sh", "-c", "echo hello"]))
        .await
        .unwrap();
    f.agent.wait_final(&r.exec_id, T).await;
    let mut bad = req(&f.ctr, &["true"]);
    bad.working_dir = Some("relative".into());
    assert!(f.agent.start(&bad).await.is_err());
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for want in [
        "sandbox_agent_processes{phase=\"Exited\"} 1",
        "sandbox_agent_output_bytes 6",
        "sandbox_agent_errors_total{code=\"InvalidProcessCwd\"} 1",
        "sandbox_agent_start_duration_seconds_count 1",
    ] {
        assert!(text.contains(want), "{want} not in:\n{text}");
    }
    assert!(!text.contains(&r.exec_id), "no process ids in metrics");
}

/// A node-wide cap on supervised processes: a start beyond it is refused for now (429), not an
/// error of the process, and goes through once one has ended.
#[tokio::test]
async fn starts_beyond_the_node_cap_wait_for_room() {
    let f = fx_with(0, &["--max-processes", "2"]);
    let a = f
        .agent
        .start(&req(&f.ctr, &["sleep", "100"]))
        .await
        .unwrap();
    let _b = f
        .agent
        .start(&req(&f.ctr, &["sleep", "100"]))
        .await
        .unwrap();
    let third = req(&f.ctr, &["true"]);
    let (status, body) = f.agent.start(&third).await.unwrap_err();
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["code"], "TooManyRequests");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("--max-processes"),
        "{body}"
    );
    let (s, _) = f
        .agent
        .signal(&a.exec_id, json!({"stop": true, "graceSeconds": 0}))
        .await;
    assert_eq!(s, 200);
    f.agent.wait_final(&a.exec_id, T).await;
    let r = f.agent.start(&third).await.unwrap();
    let r = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(r.exit.unwrap().code, 0);
}

async fn logs_status(agent: &Agent, id: &str) -> (u16, serde_json::Value) {
    let r = agent
        .client
        .get(agent.url(&format!("/v1/processes/{id}/logs")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// The node's output budget frees the oldest finished output first (the record stays, and says
/// how much was dropped; `logs` says why), and finished output is freed after the retention
/// period.
#[tokio::test]
async fn the_node_output_budget_frees_the_oldest_finished_output_first() {
    let f = fx_with(
        0,
        &[
            "--output-budget-bytes",
            "3145728",
            "--finished-output-retention-seconds",
            "8",
            "--budget-sweep-seconds",
            "1",
        ],
    );
    let two_mib = ["dd", "if=/dev/zero", "bs=65536", "count=32"];
    let a = f.agent.start(&req(&f.ctr, &two_mib)).await.unwrap();
    let a = f.agent.wait_final(&a.exec_id, T).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let b = f.agent.start(&req(&f.ctr, &two_mib)).await.unwrap();
    let b = f.agent.wait_final(&b.exec_id, T).await;
    // A (older) goes to keep 3 MiB; B stays.
    let a2 = f
        .agent
        .wait_for(&a.exec_id, Duration::from_secs(5), "output freed", |r| {
            r.output.dropped_bytes > 0
                && r.output.dropped_bytes == r.output.stdout_bytes + r.output.stderr_bytes
        })
        .await;
    assert_eq!(a2.exit.unwrap().code, 0, "the record stays");
    let (s, v) = logs_status(&f.agent, &a.exec_id).await;
    assert_eq!(s, 410, "{v}");
    assert_eq!(v["code"], "OutputFreed");
    assert!(v["message"].as_str().unwrap().contains("budget"), "{v}");
    let (s, _) = logs_status(&f.agent, &b.exec_id).await;
    assert_eq!(s, 200, "the newer output is kept");
    assert_eq!(f.agent.record(&b.exec_id).await.output.dropped_bytes, 0);
    // Then the retention period (8 s after B's end) frees B too.
    let t0 = std::time::Instant::now();
    loop {
        let (s, v) = logs_status(&f.agent, &b.exec_id).await;
        if s == 410 {
            assert!(v["message"].as_str().unwrap().contains("retention"), "{v}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "B's output not freed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
