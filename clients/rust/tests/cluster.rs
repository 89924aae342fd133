//! The handle API against a real cluster (`e2e/suites/clients` runs these with `--ignored` after
//! creating namespace `$SPO_NS` with a running pod `$SPO_POD` of the busybox workload image).
//! The Python package's pytest suite (clients/python/tests) runs the same scenarios.
use std::time::Duration;

use futures::StreamExt;
use sandbox_client::{
    Error, ErrorCode, LogEvent, LogOptions, LogStream, PortCheck, RestartPolicy, Sandbox,
    SecurityContext, Start,
};

const MIN: Option<Duration> = Some(Duration::from_secs(60));

fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set (run through e2e/suites/clients)"))
}

async fn sandbox() -> Sandbox {
    Sandbox::try_default()
        .await
        .expect("kubeconfig")
        .in_namespace(env("SPO_NS"))
}

fn pod() -> String {
    env("SPO_POD")
}

/// All output after `after` (or from the start) until the process ended, as text.
async fn read_all(p: &sandbox_client::Process, after: Option<String>) -> String {
    let mut s = Box::pin(p.logs(LogOptions {
        follow: true,
        after,
        ..Default::default()
    }));
    let mut out = Vec::new();
    while let Some(ev) = s.next().await {
        match ev.expect("log event") {
            LogEvent::Data { data, .. } => out.extend(data),
            LogEvent::Truncated { .. } => panic!("unexpected gap"),
            LogEvent::End { record, .. } => {
                assert!(record.is_some(), "a follow ends with the process's end");
                break;
            }
        }
    }
    String::from_utf8(out).expect("utf-8")
}

#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn start_and_wait_gives_the_exit_code() {
    let sb = sandbox().await;
    let p = sb
        .start(Start::new(pod(), ["sh", "-c", "echo out; echo err >&2; exit 7"]).id("rs-exit"))
        .await
        .unwrap();
    let exit = p.wait(MIN).await.unwrap();
    assert_eq!((exit.code, exit.signal, exit.timed_out), (7, None, false));
    assert_eq!(exit.end_reason, Some(sandbox_client::EndReason::Exited));
    let out = p.output(None, MIN).await.unwrap();
    assert_eq!(
        (out.stdout.as_slice(), out.stderr.as_slice()),
        (&b"out\n"[..], &b"err\n"[..])
    );
    assert!(!out.truncated);
    p.delete().await.unwrap();
}

#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn wait_for_log_then_logs_after_its_cursor_neither_repeat_nor_skip() {
    let sb = sandbox().await;
    // The matched line and what follows it arrive in one write: the cursor must point inside it.
    // A stderr line first: a cursor made while reading stdout only must still count it.
    let script =
        "echo warn >&2; sleep 0.2; printf 'one\\nready on 8080\\nafter-1\\n'; sleep 1; echo after-2; printf tail";
    let p = sb
        .start(Start::new(pod(), ["sh", "-c", script]).id("rs-log"))
        .await
        .unwrap();
    let m = p
        .wait_for_log("^ready on [0-9]+$", LogStream::Stdout, None, MIN)
        .await
        .unwrap();
    assert_eq!(m.line, "ready on 8080");
    assert_eq!(m.stream, LogStream::Stdout);
    let after = read_all(&p, Some(m.cursor.clone())).await;
    assert_eq!(after, "after-1\nafter-2\ntail");
    let whole = read_all(&p, None).await;
    assert_eq!(whole, format!("warn\none\nready on 8080\n{after}"));
    // The same cursor read with a stream filter.
    let mut s = Box::pin(p.logs(LogOptions {
        after: Some(m.cursor.clone()),
        stream: LogStream::Stdout,
        ..Default::default()
    }));
    let mut out = Vec::new();
    while let Some(ev) = s.next().await {
        if let LogEvent::Data { data, .. } = ev.unwrap() {
            out.extend(data);
        }
    }
    assert_eq!(out, after.as_bytes(), "filtered read after the cursor");
    // Waiting again after the cursor: the next line, and at the end a last line without newline.
    let m2 = p
        .wait_for_log("^after", LogStream::Stdout, Some(m.cursor), MIN)
        .await
        .unwrap();
    assert_eq!(m2.line, "after-1");
    let m3 = p
        .wait_for_log("^tail$", LogStream::Both, Some(m2.cursor), MIN)
        .await
        .unwrap();
    assert_eq!(m3.line, "tail");
    // A pattern that never comes: the end says so.
    let e = p
        .wait_for_log("never", LogStream::Both, None, MIN)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "ExitedBeforeLog", "{e}");
    // limit_bytes cuts inside an event; reading on from its cursor continues exactly there.
    let mut s = Box::pin(p.logs(LogOptions {
        limit_bytes: Some(6),
        ..Default::default()
    }));
    let (mut first, mut cursor) = (Vec::new(), None);
    while let Some(ev) = s.next().await {
        match ev.unwrap() {
            LogEvent::Data { data, .. } => first.extend(data),
            LogEvent::End { cursor: c, record } => {
                assert!(record.is_none(), "a limited read is not the end");
                cursor = Some(c);
            }
            LogEvent::Truncated { .. } => panic!("gap"),
        }
    }
    assert_eq!(first, b"warn\no");
    assert_eq!(format!("warn\no{}", read_all(&p, cursor).await), whole);
    p.delete().await.unwrap();
}

#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn wait_for_port_sees_a_server_on_the_pods_loopback() {
    let sb = sandbox().await;
    // Listens on 127.0.0.1 only (a kubelet probe from the host could not see it) after 2 s.
    let p = sb
        .start(
            Start::new(
                pod(),
                [
                    "sh",
                    "-c",
                    "mkdir -p /tmp/rs-www && echo hi > /tmp/rs-www/index.html && sleep 2 && exec httpd -f -p 127.0.0.1:18080 -h /tmp/rs-www",
                ],
            )
            .id("rs-port"),
        )
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    p.wait_for_port(
        18080,
        PortCheck {
            timeout: MIN,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(1500),
        "ready before it listened"
    );
    p.wait_for_port(
        18080,
        PortCheck {
            http_path: Some("/index.html".into()),
            timeout: MIN,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    // A port nobody listens on: the local timeout, the process untouched.
    let e = p
        .wait_for_port(
            18081,
            PortCheck {
                timeout: Some(Duration::from_secs(2)),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "Timeout", "{e}");
    assert_eq!(
        p.status().await.unwrap().phase,
        Some(sandbox_client::Phase::Running)
    );
    p.kill(None).await.unwrap();
    p.wait(MIN).await.unwrap();
    // After the end: the wait fails at once, naming it.
    let e = p
        .wait_for_port(18080, PortCheck::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "ExitedBeforeReady", "{e}");
    p.delete().await.unwrap();
}

#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn kill_with_a_signal_is_128_plus_n() {
    let sb = sandbox().await;
    let p = sb
        .start(Start::new(pod(), ["sleep", "300"]).id("rs-kill"))
        .await
        .unwrap();
    p.wait_started(MIN).await.unwrap();
    // Local deadlines end the waits, not the process.
    let two = Some(Duration::from_secs(2));
    let e = p
        .wait_for_log("never", LogStream::Both, None, two)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "Timeout", "{e}");
    let e = p.output(None, two).await.unwrap_err();
    assert_eq!(e.code(), "Timeout", "{e}");
    assert_eq!(
        p.status().await.unwrap().phase,
        Some(sandbox_client::Phase::Running)
    );
    assert_eq!(
        p.kill(Some(10)).await.unwrap(),
        sandbox_client::Killed::Signalled(10)
    );
    let exit = p.wait(MIN).await.unwrap();
    assert_eq!((exit.code, exit.signal), (138, Some(10)));
    assert!(matches!(
        p.kill(Some(9)).await.unwrap(),
        sandbox_client::Killed::AlreadyEnded(_)
    ));
    p.delete().await.unwrap();
}

#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn a_second_client_reattaches_by_id() {
    {
        let first = sandbox().await;
        first
            .start(Start::new(pod(), ["sh", "-c", "sleep 2; echo done; exit 4"]).id("rs-reattach"))
            .await
            .unwrap();
        // `first` and its handle are dropped here: the process goes on.
    }
    let second = sandbox().await;
    let p = second
        .get("rs-reattach")
        .await
        .unwrap()
        .expect("found by id");
    assert_eq!(p.wait(MIN).await.unwrap().code, 4);
    assert_eq!(p.output(None, MIN).await.unwrap().stdout, b"done\n");
    assert!(second.get("rs-no-such-id").await.unwrap().is_none());
    p.delete().await.unwrap();
}

#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn starting_twice_with_one_id_is_one_process() {
    let sb = sandbox().await;
    let start = || Start::new(pod(), ["sh", "-c", "echo started; sleep 2"]).id("rs-idem");
    let a = sb.start(start()).await.unwrap();
    let uid = a.object().await.unwrap().metadata.uid;
    let b = sb.start(start()).await.unwrap();
    assert_eq!(b.object().await.unwrap().metadata.uid, uid, "same object");
    // After the start too (a retry after a lost reply arrives late).
    a.wait_started(MIN).await.unwrap();
    sb.start(start()).await.unwrap();
    let out = b.output(None, MIN).await.unwrap();
    assert_eq!(out.stdout, b"started\n", "ran once");
    // The same id for something else is refused, not a second process.
    let e = sb
        .start(Start::new(pod(), ["sh", "-c", "echo other"]).id("rs-idem"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "IdInUse", "{e}");
    assert_eq!(
        sb.list(None)
            .await
            .unwrap()
            .iter()
            .filter(|o| o.metadata.name.as_deref() == Some("rs-idem"))
            .count(),
        1
    );
    a.delete().await.unwrap();
}

#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn output_of_a_process_over_the_retention_is_truncated() {
    let sb = sandbox().await;
    // 70 MiB through the agent's 64 MiB retention.
    let p = sb
        .start(
            Start::new(
                pod(),
                [
                    "sh",
                    "-c",
                    "head -c 73400320 /dev/zero | tr '\\000' a; echo END",
                ],
            )
            .id("rs-huge"),
        )
        .await
        .unwrap();
    let out = p
        .output(Some(1 << 20), Some(Duration::from_secs(180)))
        .await
        .unwrap();
    assert!(out.truncated);
    assert_eq!(out.stdout.len(), 1 << 20, "kept up to max_bytes");
    assert_eq!(out.exit.code, 0);
    p.delete().await.unwrap();
}

#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn errors_carry_the_status_code() {
    let sb = sandbox().await;
    let p = sb
        .start(
            Start::new(pod(), ["true"])
                .container("nope")
                .id("rs-nocontainer"),
        )
        .await
        .unwrap();
    let e = p.wait(MIN).await.unwrap_err();
    assert_eq!(e.process_code(), Some(ErrorCode::ContainerNotFound), "{e}");
    assert_eq!(e.code(), "ContainerNotFound");
    // Its output: there is none, and the error says why (not the API's 400).
    let e2 = p.output(None, MIN).await.unwrap_err();
    assert_eq!(e2.code(), "ContainerNotFound", "{e2}");
    p.delete().await.unwrap();

    let p = sb
        .start(
            Start::new(pod(), ["ls"])
                .cwd("/no/such/dir")
                .id("rs-badcwd"),
        )
        .await
        .unwrap();
    let e = p.wait(MIN).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Process {
                code: ErrorCode::InvalidProcessCwd,
                ..
            }
        ),
        "{e}"
    );
    p.delete().await.unwrap();

    // A user the container (root here) cannot hand out: root under runAsNonRoot.
    let p = sb
        .start(
            Start::new(pod(), ["id", "-u"])
                .security_context(SecurityContext {
                    run_as_non_root: Some(true),
                    ..Default::default()
                })
                .id("rs-nonroot"),
        )
        .await
        .unwrap();
    let e = p.wait(MIN).await.unwrap_err();
    assert_eq!(e.process_code(), Some(ErrorCode::UserNotPermitted), "{e}");
    assert_eq!(
        p.output(None, MIN).await.unwrap_err().code(),
        "UserNotPermitted"
    );
    p.delete().await.unwrap();
    // One it can: uid 1000.
    let p = sb
        .start(
            Start::new(pod(), ["id", "-u"])
                .user(1000, Some(1000))
                .id("rs-as1000"),
        )
        .await
        .unwrap();
    assert_eq!(p.output(None, MIN).await.unwrap().stdout, b"1000\n");
    p.delete().await.unwrap();

    // A bad value never leaves the client: the field is named.
    let e = sb
        .start(Start::new(pod(), ["x"]).timeout(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "InvalidArgument");
    assert!(e.to_string().starts_with("timeout:"), "{e}");
}

#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn stdin_goes_in_once_and_closes() {
    let sb = sandbox().await;
    let p = sb
        .start(
            Start::new(pod(), ["sh", "-c", "wc -c; exit 3"])
                .stdin(true)
                .id("rs-stdin"),
        )
        .await
        .unwrap();
    p.wait_started(MIN).await.unwrap();
    let sent = p.send_stdin(&vec![b'x'; 300_000]).await.unwrap();
    assert_eq!(sent, 300_000);
    p.close_stdin().await.unwrap();
    let out = p.output(None, MIN).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "300000");
    assert_eq!(out.exit.code, 3);
    p.delete().await.unwrap();
}

/// issue 35: `start(pod, [...], stdin)` then at once `send_stdin` waits for the start (no 400
/// "has not started a process"), and the output is complete.
#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn stdin_right_after_the_start_waits_for_it() {
    let sb = sandbox().await;
    let p = sb
        .start(
            Start::new(pod(), ["cat"])
                .stdin(true)
                .id("rs-stdin-at-once"),
        )
        .await
        .unwrap();
    assert_eq!(p.send_stdin(b"abc\n").await.unwrap(), 4);
    p.close_stdin().await.unwrap();
    let out = p.output(None, MIN).await.unwrap();
    assert_eq!(out.stdout, b"abc\n");
    assert_eq!(out.exit.code, 0);
    p.delete().await.unwrap();
}

/// Every call that needs a started process says why there is none: the start's own error
/// (a missing pod: `PodNotFound` when its wait runs out; a missing container: at once).
#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn calls_on_a_process_that_cannot_start_raise_the_start_error() {
    let sb = sandbox().await;
    let short = Some(Duration::from_secs(3));
    let p = sb
        .start(
            Start::new("no-such-pod", ["cat"])
                .stdin(true)
                .id("rs-no-pod"),
        )
        .await
        .unwrap()
        .with_start_timeout(short);
    let first_log = async {
        let mut s = Box::pin(p.logs(LogOptions::default()));
        s.next().await.expect("an item").map(|_| ())
    };
    for (call, got) in [
        ("send_stdin", p.send_stdin(b"abc\n").await.map(|_| ())),
        ("signal", p.signal(15).await.map(|_| ())),
        ("logs", first_log.await),
        (
            "wait_for_port",
            p.wait_for_port(
                80,
                PortCheck {
                    timeout: short,
                    ..Default::default()
                },
            )
            .await,
        ),
    ] {
        let e = got.unwrap_err();
        assert_eq!(e.code(), "PodNotFound", "{call}: {e}");
        assert!(e.is_timeout(), "{call}: {e}");
        let said = e.to_string();
        assert!(
            said.contains("phase Pending") && said.contains("no-such-pod"),
            "{call}: {said}"
        );
    }
    // A wait for the end that runs out says what it waits for too.
    let e = p.wait(Some(Duration::from_secs(2))).await.unwrap_err();
    assert_eq!(e.code(), "Timeout");
    assert!(e.to_string().contains("PodNotFound"), "{e}");
    p.delete().await.unwrap();

    let p = sb
        .start(
            Start::new(pod(), ["cat"])
                .stdin(true)
                .container("nope")
                .id("rs-no-container"),
        )
        .await
        .unwrap();
    assert_eq!(
        p.send_stdin(b"x").await.unwrap_err().process_code(),
        Some(ErrorCode::ContainerNotFound)
    );
    assert_eq!(
        p.signal(9).await.unwrap_err().process_code(),
        Some(ErrorCode::ContainerNotFound)
    );
    assert_eq!(
        p.close_stdin().await.unwrap_err().process_code(),
        Some(ErrorCode::ContainerNotFound)
    );
    p.delete().await.unwrap();
}

/// A writer to a process that does not read is told (once), and goes on waiting.
#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn a_stdin_writer_is_told_when_the_process_does_not_read() {
    let sb = sandbox().await;
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let t2 = told.clone();
    let p = sb
        .start(Start::new(pod(), ["sleep", "60"]).stdin(true).id("rs-deaf"))
        .await
        .unwrap()
        .on_stdin_stall(Duration::from_secs(2), move |s| {
            t2.lock().unwrap().push(s.pending)
        });
    // More than the pipe holds (1 MiB): the rest waits for a reader that never comes.
    let big = vec![0u8; 4 << 20];
    let r = tokio::time::timeout(Duration::from_secs(8), p.send_stdin(&big)).await;
    assert!(r.is_err(), "the write ended although nothing reads: {r:?}");
    let told = told.lock().unwrap().clone();
    assert_eq!(told.len(), 1, "told once: {told:?}");
    assert!(told[0] > 0, "{told:?}");
    p.kill(Some(9)).await.unwrap();
    p.delete().await.unwrap();
}

/// The output of the previous run of a restarting process, as text.
async fn read_previous(p: &sandbox_client::Process) -> String {
    let mut s = Box::pin(p.logs(LogOptions {
        previous: true,
        ..Default::default()
    }));
    let mut out = Vec::new();
    while let Some(ev) = s.next().await {
        match ev.unwrap() {
            LogEvent::Data { data, .. } => out.extend_from_slice(&data),
            LogEvent::Truncated { .. } => panic!("unexpected gap"),
            LogEvent::End { .. } => break,
        }
    }
    String::from_utf8(out).unwrap()
}

#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn a_failing_process_restarts_and_its_previous_run_is_read() {
    let sb = sandbox().await;
    let p = sb
        .start(
            Start::new(pod(), ["sh", "-c", "echo run-$$; exit 3"])
                .id("rs-restart")
                .restart_policy(RestartPolicy::OnFailure),
        )
        .await
        .unwrap();
    // The first restart comes after a back-off of 10 s.
    let restarted =
        |o: &sandbox_client::Object| o.status.as_ref().is_some_and(|s| s.restart_count >= 1);
    let o = p
        .until(Some(Duration::from_secs(90)), "restart", restarted)
        .await
        .unwrap();
    assert!(
        !sandbox_client::is_final(&o),
        "a restarting process is not final"
    );
    let last = sandbox_client::last_exit_of(&o).expect("lastExit after a restart");
    assert_eq!(
        (last.code, last.end_reason),
        (3, Some(sandbox_client::EndReason::Exited))
    );
    let previous = read_previous(&p).await;
    assert!(
        previous.starts_with("run-") && previous.lines().count() == 1,
        "{previous:?}"
    );
    // The whole ledger holds every run, the previous one among them.
    let mut s = Box::pin(p.logs(LogOptions::default()));
    let mut all = Vec::new();
    while let Some(Ok(LogEvent::Data { data, .. })) = s.next().await {
        all.extend_from_slice(&data);
    }
    let all = String::from_utf8(all).unwrap();
    assert!(all.lines().any(|l| l == previous.trim_end()), "{all:?}");
    // Ended output cannot be followed: refused before any request.
    let mut s = Box::pin(p.logs(LogOptions {
        previous: true,
        follow: true,
        ..Default::default()
    }));
    let e = s.next().await.unwrap().unwrap_err();
    assert_eq!(e.code(), "InvalidArgument", "{e}");
    // A stop ends it for good, also during a back-off; the count is kept.
    p.kill(None).await.unwrap();
    let o = p.until(MIN, "end", sandbox_client::is_final).await.unwrap();
    assert!(o.status.unwrap().restart_count >= 1);
    // With stdin: the API's rule, before any request.
    let e = sb
        .start(
            Start::new(pod(), ["cat"])
                .stdin(true)
                .restart_policy(RestartPolicy::Always),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "InvalidArgument", "{e}");
    p.delete().await.unwrap();
}

/// The same handle API through the other door: Processes served from the nodes (no etcd write
/// per command): start by id (once), wait with the exit code, output by stream, stdin, a stop
/// (no spec.stop to set: the signal subresource's stop), list and reattach.
#[tokio::test]
#[ignore = "needs the test cluster (e2e/suites/clients)"]
async fn the_process_door_has_the_same_handle() {
    let sb = sandbox().await.with_door(sandbox_client::Door::Process);
    let start = || Start::new(pod(), ["sh", "-c", "echo out; echo err >&2; exit 7"]).id("rs-door");
    let p = sb.start(start()).await.unwrap();
    let again = sb.start(start()).await.unwrap();
    assert_eq!(
        again.object().await.unwrap().metadata.uid,
        p.object().await.unwrap().metadata.uid
    );
    let e = sb
        .start(Start::new(pod(), ["true"]).id("rs-door"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "IdInUse", "{e}");
    let exit = p.wait(MIN).await.unwrap();
    assert_eq!((exit.code, exit.signal), (7, None));
    let out = p.output(None, MIN).await.unwrap();
    assert_eq!(
        (out.stdout.as_slice(), out.stderr.as_slice()),
        (&b"out\n"[..], &b"err\n"[..])
    );
    let listed = sb.list(None).await.unwrap();
    assert!(listed
        .iter()
        .any(|o| o.metadata.name.as_deref() == Some("rs-door")));
    // Not a SandboxProcess: the other door does not see it.
    assert!(sandbox().await.get("rs-door").await.unwrap().is_none());
    // stdin in, closed; read back.
    let cat = sb
        .start(Start::new(pod(), ["cat"]).stdin(true).id("rs-door-cat"))
        .await
        .unwrap();
    cat.send_stdin(b"typed\n").await.unwrap();
    cat.close_stdin().await.unwrap();
    assert_eq!(cat.wait(MIN).await.unwrap().code, 0);
    assert_eq!(cat.output(None, MIN).await.unwrap().stdout, b"typed\n");
    // A stop: its stop signal (TERM), as for a SandboxProcess.
    let sleeper = sb
        .start(Start::new(pod(), ["sleep", "300"]).id("rs-door-stop"))
        .await
        .unwrap();
    sleeper.wait_started(MIN).await.unwrap();
    let reattached = sb.get("rs-door-stop").await.unwrap().expect("found by id");
    assert!(matches!(
        reattached.kill(None).await.unwrap(),
        sandbox_client::Killed::Stopping { signal: 15, .. }
    ));
    let exit = sleeper.wait(MIN).await.unwrap();
    assert_eq!(exit.signal, Some(15), "{exit:?}");
    for p in [p, cat, sleeper] {
        p.delete().await.unwrap();
    }
    assert!(sb.get("rs-door").await.unwrap().is_none());
}
