//! e2e/suite's assertions: the operator and agent installed by the chart (e2e/suite deploys
//! them first), driven as a user would. Each test has its own namespace and pods.
use std::time::Duration;

use anyhow::{ensure, Result};
use sandbox_e2e::manifests::{pod, sbp, sh};
use sandbox_e2e::{cond, field, fields::cond_message, with_ns, TestNs};
use serde_json::json;

/// Waits for Ready=True and checks what comes with it: Running, Reconciling False/Ready, and a
/// readyAt later than startedAt (each server here listens only seconds after its start).
async fn ready(t: &TestNs, name: &str) -> Result<()> {
    let o = t
        .until(name, 60, "be Ready", |o| cond(o, "Ready") == "True/Ready")
        .await?;
    assert_eq!(field(&o, "/status/phase"), "Running");
    assert_eq!(cond(&o, "Reconciling"), "False/Ready");
    let (started, ready_at) = (
        o.status.as_ref().and_then(|s| s.started_at.clone()),
        o.status.as_ref().and_then(|s| s.ready_at.clone()),
    );
    let (Some(started), Some(ready_at)) = (started, ready_at) else {
        anyhow::bail!("{name}: no startedAt or readyAt");
    };
    ensure!(
        ready_at.0 > started.0,
        "readyAt {ready_at:?} not after startedAt {started:?}"
    );
    Ok(())
}

/// Processes in the pod whose argv (as busybox ps shows it) starts with `prefix`.
async fn count_procs(t: &TestNs, pod: &str, prefix: &str) -> Result<usize> {
    let ps = t.in_pod(pod, &["ps", "-o", "pid,args"]).await?;
    Ok(ps
        .lines()
        .skip(1)
        .filter(|l| {
            l.trim_start()
                .split_once(' ')
                .is_some_and(|(_, args)| args.trim_start().starts_with(prefix))
        })
        .count())
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suite"]
async fn readiness_http_get_on_a_loopback_listener_then_ready() {
    with_ns("suite-http", |t| async move {
        t.pods([pod("work", None)]).await?;
        let script = "mkdir -p /tmp/www && echo ok > /tmp/www/index.html && sleep 2 && exec httpd -f -p 127.0.0.1:18080 -h /tmp/www";
        t.apply_sbp(sbp("http", "work", sh(script, json!({
            "readiness": {"httpGet": {"port": 18080, "path": "/index.html"}, "periodMillis": 200}
        })))).await?;
        ready(&t, "http").await?;
        // It really serves, on 127.0.0.1 of the pod only.
        let got = t.in_pod("work", &["wget", "-q", "-O", "-", "http://127.0.0.1:18080/index.html"]).await?;
        assert_eq!(got, "ok\n");
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suite"]
async fn readiness_tcp_socket_then_ready() {
    with_ns("suite-tcp", |t| async move {
        t.pods([pod("work", None)]).await?;
        t.apply_sbp(sbp(
            "tcp",
            "work",
            sh(
                "sleep 2; exec nc -ll -p 18081 -e cat",
                json!({
                    "readiness": {"tcpSocket": {"port": 18081}, "periodMillis": 200}
                }),
            ),
        ))
        .await?;
        ready(&t, "tcp").await
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suite"]
async fn readiness_log_match_on_stderr_then_ready_and_in_the_tail() {
    with_ns("suite-logmatch", |t| async move {
        t.pods([pod("work", None)]).await?;
        let script = "echo starting; sleep 2; echo listening on port 7000 >&2; exec sleep 100000";
        t.apply_sbp(sbp("logmatch", "work", sh(script, json!({
            "readiness": {"logMatch": {"pattern": "listening on port [0-9]+", "stream": "Stderr"}, "periodMillis": 200}
        })))).await?;
        ready(&t, "logmatch").await?;
        // The matched line reaches the output tail (refreshed at most every 5 s while running).
        t.until("logmatch", 15, "show the line in its tail", |o| {
            field(o, "/status/output/tail").contains("listening on port 7000")
        })
        .await?;
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suite"]
async fn readiness_timeout_is_stalled_and_the_process_runs_on() {
    with_ns("suite-rtimeout", |t| async move {
        t.pods([pod("work", None)]).await?;
        t.apply_sbps([
            // nothing listens on 18099
            sbp("never", "work", json!({"command": ["sleep", "100001"],
                "readiness": {"tcpSocket": {"port": 18099}, "periodMillis": 200, "timeoutSeconds": 3}})),
            // httpd answers 404 for a missing file: never a status in the range
            sbp("http404", "work", sh("exec httpd -f -p 127.0.0.1:18082 -h /tmp", json!({
                "readiness": {"httpGet": {"port": 18082, "path": "/missing"}, "periodMillis": 200, "timeoutSeconds": 3}}))),
        ]).await?;
        for n in ["never", "http404"] {
            let o = t.until(n, 60, "time out", |o| cond(o, "Ready") == "False/ReadinessTimeout").await?;
            assert_eq!(cond(&o, "Stalled"), "True/ReadinessTimeout", "{n}");
            assert_eq!(field(&o, "/status/phase"), "Running", "{n}");
            assert_eq!(field(&o, "/status/readyAt"), "", "{n}");
        }
        // `kubectl wait --for=condition=Ready` does not succeed on it.
        let waited = t.kubectl(&["wait", "--for=condition=Ready", "sbp/never", "--timeout=2s"]).await;
        ensure!(waited.is_err(), "kubectl wait --for=condition=Ready succeeded");
        // The processes keep running.
        assert_eq!(count_procs(&t, "work", "sleep 100001").await?, 1);
        assert_eq!(count_procs(&t, "work", "httpd -f -p 127.0.0.1:18082").await?, 1);
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suite"]
async fn exit_0_before_ever_ready_is_stalled_succeeded_and_not_ready() {
    with_ns("suite-early", |t| async move {
        t.pods([pod("work", None)]).await?;
        // A "server" that never listens (nothing on 18098) and exits 0 after 1 s.
        t.apply_sbp(sbp(
            "earlyexit",
            "work",
            sh(
                "sleep 1; exit 0",
                json!({
            "readiness": {"tcpSocket": {"port": 18098}, "periodMillis": 200}}),
            ),
        ))
        .await?;
        let o = t
            .until_field("earlyexit", "/status/phase", "Exited", 60)
            .await?;
        // Phase and conditions come in one status write: these are the final ones.
        assert_eq!(field(&o, "/status/exit/code"), "0");
        assert_eq!(field(&o, "/status/endReason"), "Exited");
        assert_eq!(field(&o, "/status/readyAt"), "");
        assert_eq!(cond(&o, "Ready"), "False/ExitedBeforeReady");
        assert_eq!(cond(&o, "Stalled"), "True/ExitedBeforeReady");
        assert_eq!(cond(&o, "Reconciling"), "False/ExitedBeforeReady");
        assert_eq!(
            cond(&o, "Succeeded"),
            "True/Succeeded",
            "Succeeded follows the exit code"
        );
        assert_eq!(
            cond_message(&o, "Ready"),
            "exited with code 0 before it was ever ready"
        );
        // kubectl wait: Ready fails; Succeeded and Stalled succeed.
        let ready = t
            .kubectl(&[
                "wait",
                "--for=condition=Ready",
                "sbp/earlyexit",
                "--timeout=3s",
            ])
            .await;
        ensure!(
            ready.is_err(),
            "kubectl wait --for=condition=Ready succeeded"
        );
        t.kubectl(&[
            "wait",
            "--for=condition=Succeeded",
            "sbp/earlyexit",
            "--timeout=5s",
        ])
        .await?;
        t.kubectl(&[
            "wait",
            "--for=condition=Stalled",
            "sbp/earlyexit",
            "--timeout=5s",
        ])
        .await?;
        // A Warning Event says so (published right after the status write).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let msgs = t
                .kubectl(&[
                    "get",
                    "events",
                    "--field-selector",
                    "involvedObject.name=earlyexit,reason=ExitedBeforeReady,type=Warning",
                    "-o",
                    "jsonpath={.items[*].message}",
                ])
                .await?;
            if msgs.contains("before it was ever ready") {
                return Ok(());
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "no Warning Event ExitedBeforeReady"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suite"]
async fn stop_true_ends_readiness_processes() {
    with_ns("suite-stop", |t| async move {
        t.pods([pod("work", None)]).await?;
        t.apply_sbps([
            sbp("srv", "work", sh("sleep 2; exec nc -ll -p 18081 -e cat", json!({
                "readiness": {"tcpSocket": {"port": 18081}, "periodMillis": 200}}))),
            sbp("never", "work", json!({"command": ["sleep", "100001"],
                "readiness": {"tcpSocket": {"port": 18099}, "periodMillis": 200, "timeoutSeconds": 3}})),
        ]).await?;
        ready(&t, "srv").await?;
        t.until_field("never", "/status/phase", "Running", 60).await?;
        for n in ["srv", "never"] {
            t.kubectl(&["patch", "sbp", n, "--type=merge", "-p", r#"{"spec":{"stop":true}}"#]).await?;
        }
        for n in ["srv", "never"] {
            t.until_field(n, "/status/endReason", "Stopped", 30).await?;
        }
        assert_eq!(count_procs(&t, "work", "sleep 100001").await?, 0);
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suite"]
async fn env_and_working_dir_reach_the_process_verbatim() {
    with_ns("suite-env", |t| async move {
        t.pods([pod("work", None)]).await?;
        t.in_pod("work", &["mkdir", "-p", "/tmp/work dir"]).await?;
        let script = r#"pwd; echo "A=$A"; echo "SPACED=$SPACED"; echo "OVERRIDDEN=$OVERRIDDEN"; echo "FROM_POD=$FROM_POD"; echo "EMPTY=[$EMPTY]"; echo "${EMPTY+empty-set}""#;
        t.apply_sbp(sbp("envwd", "work", sh(script, json!({
            "workingDir": "/tmp/work dir",
            "env": [{"name": "A", "value": "1"}, {"name": "SPACED", "value": "a b  $HOME \"q\""},
                    {"name": "OVERRIDDEN", "value": "sbp-value"}, {"name": "EMPTY", "value": ""}],
        })))).await?;
        let o = t.until("envwd", 60, "succeed", |o| cond(o, "Succeeded") == "True/Succeeded").await?;
        let want = "/tmp/work dir\nA=1\nSPACED=a b  $HOME \"q\"\nOVERRIDDEN=sbp-value\nFROM_POD=pod-value\nEMPTY=[]\nempty-set\n";
        assert_eq!(field(&o, "/status/output/tail"), want);
        assert_eq!(field(&o, "/status/output/stdoutBytes"), want.len().to_string());
        // Without workingDir: the container's (/ for this image).
        t.apply_sbp(sbp("nowd", "work", json!({"command": ["pwd"]}))).await?;
        let o = t.until("nowd", 60, "succeed", |o| cond(o, "Succeeded") == "True/Succeeded").await?;
        assert_eq!((field(&o, "/status/output/tail"), field(&o, "/status/output/stdoutBytes")), ("/\n".into(), "2".into()));
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suite"]
async fn working_dir_that_does_not_exist_is_invalid_process_cwd() {
    with_ns("suite-badwd", |t| async move {
        t.pods([pod("work", None)]).await?;
        t.apply_sbp(sbp(
            "badwd",
            "work",
            json!({"command": ["pwd"], "workingDir": "/does/not/exist"}),
        ))
        .await?;
        let o = t.until_field("badwd", "/status/phase", "Error", 60).await?;
        assert_eq!(field(&o, "/status/error/code"), "InvalidProcessCwd");
        Ok(())
    })
    .await;
}
