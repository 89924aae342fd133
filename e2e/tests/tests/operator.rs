//! e2e/suites/operator's assertions: the user-facing contract of the operator and agent that e2e/suites/operator
//! runs on this host (not the chart's release; the agent against node 1's containerd, so every
//! pod is on node 1). The operator acts on every namespace: each test has its own and its pods.
//! Tests that restart the operator or need it to themselves are in operator_faults.rs.
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use sandbox_e2e::cmd::{self, Out};
use sandbox_e2e::host::Host;
use sandbox_e2e::manifests::{pod, sbp, sh};
use sandbox_e2e::{cond, field, is_final, with_ns, TestNs};
use serde_json::{json, Value};

/// Whether a process whose argv contains `needle` runs in the pod.
async fn runs(t: &TestNs, pod: &str, needle: &str) -> Result<bool> {
    Ok(t.pod_args(pod).await?.iter().any(|a| a.contains(needle)))
}

/// No process whose argv contains `needle` is left in the pod.
async fn none_left(t: &TestNs, pod: &str, needle: &str) -> Result<()> {
    let args = t.pod_args(pod).await?;
    ensure!(
        !args.iter().any(|a| a.contains(needle)),
        "still running: {args:?}"
    );
    Ok(())
}

/// `spec.stop: true`, as a user sets it.
async fn stop(t: &TestNs, name: &str) -> Result<()> {
    let patch = r#"{"spec":{"stop":true}}"#;
    t.kubectl(&["patch", "sbp", name, "--type=merge", "-p", patch])
        .await?;
    Ok(())
}

/// `kubectl -n NS ARGS` bounded by `secs`, which must succeed within it (a delete that waits
/// for the finalizer must not hang).
async fn kubectl_within(t: &TestNs, secs: u64, args: &[&str]) -> Result<()> {
    let mut all = vec!["-n", &t.name];
    all.extend_from_slice(args);
    let out = cmd::run("kubectl", &all, None, Duration::from_secs(secs))
        .await
        .with_context(|| format!("kubectl {} did not finish", args.join(" ")))?;
    ensure!(out.success(), "kubectl {}: {}", args.join(" "), out.stderr);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn one_shot_exit_code_end_reason_conditions_and_output() {
    with_ns("op-exit", |t| async move {
        t.pods([pod("target", None)]).await?;
        let script = "echo hello; echo oops >&2; exit 3";
        t.apply_sbp(sbp("exit3", "target", sh(script, Value::Null)))
            .await?;
        let o = t
            .until_field("exit3", "/status/phase", "Exited", 60)
            .await?;
        assert_eq!(field(&o, "/status/exit/code"), "3");
        assert_eq!(field(&o, "/status/endReason"), "Exited");
        assert_eq!(cond(&o, "Succeeded"), "False/NonZeroExit");
        assert_eq!(cond(&o, "Stalled"), "True/NonZeroExit");
        let bytes = (
            field(&o, "/status/output/stdoutBytes"),
            field(&o, "/status/output/stderrBytes"),
        );
        assert_eq!(bytes, ("6".into(), "5".into()));
        let tail = field(&o, "/status/output/tail");
        ensure!(tail.contains("hello"), "tail: {tail:?}");
        assert_eq!(
            field(&o, "/status/observedGeneration"),
            field(&o, "/metadata/generation")
        );
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn kubectl_wait_for_succeeded_then_the_status_and_printer_columns() {
    with_ns("op-wait", |t| async move {
        t.pods([pod("target", None)]).await?;
        t.apply_sbp(sbp("ok", "target", sh("sleep 1; echo done", Value::Null)))
            .await?;
        t.kubectl(&[
            "wait",
            "--for=condition=Succeeded",
            "sbp/ok",
            "--timeout=60s",
        ])
        .await?;
        let o = t.get("ok").await?;
        assert_eq!(cond(&o, "Ready"), "True/Succeeded");
        assert_eq!(field(&o, "/status/exit/code"), "0");
        for f in [
            "startedAt",
            "finishedAt",
            "pid",
            "podUID",
            "containerID",
            "nodeName",
        ] {
            ensure!(
                !field(&o, &format!("/status/{f}")).is_empty(),
                "no status.{f}"
            );
        }
        let table = t.kubectl(&["get", "sbp", "ok"]).await?;
        let header = table.lines().next().unwrap_or_default();
        let want = [
            "NAME", "POD", "PHASE", "READY", "RESTARTS", "EXIT", "REASON", "AGE",
        ];
        ensure!(
            header.split_whitespace().take(want.len()).eq(want),
            "kubectl get sbp:\n{table}"
        );
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn events_started_exited_and_failed() {
    with_ns("op-events", |t| async move {
        t.pods([pod("target", None)]).await?;
        t.apply_sbps([
            sbp("ok", "target", sh("sleep 1; echo done", Value::Null)),
            sbp("exit3", "target", sh("echo oops >&2; exit 3", Value::Null)),
        ])
        .await?;
        for n in ["ok", "exit3"] {
            t.until(n, 60, "end", is_final).await?;
        }
        t.until_events("ok", &["Started", "Exited"], 10).await?;
        t.until_events("exit3", &["Failed"], 10).await
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn timeout_seconds_ends_it_timed_out() {
    with_ns("op-timeout", |t| async move {
        t.pods([pod("target", None)]).await?;
        t.apply_sbp(sbp(
            "slow",
            "target",
            json!({"command": ["sleep", "100"], "timeoutSeconds": 1, "terminationGracePeriodSeconds": 1}),
        ))
        .await?;
        let o = t
            .until_field("slow", "/status/endReason", "TimedOut", 30)
            .await?;
        assert_eq!(field(&o, "/status/exit/timedOut"), "true");
        assert_eq!(cond(&o, "Stalled"), "True/TimedOut");
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn stop_true_stops_the_process_group_once() {
    with_ns("op-stop", |t| async move {
        t.pods([pod("target", None)]).await?;
        t.apply_sbp(sbp(
            "stopme",
            "target",
            json!({"command": ["sleep", "1001"]}),
        ))
        .await?;
        t.until_field("stopme", "/status/phase", "Running", 60)
            .await?;
        assert_eq!(cond(&t.get("stopme").await?, "Ready"), "True/Ready");
        stop(&t, "stopme").await?;
        let o = t
            .until_field("stopme", "/status/endReason", "Stopped", 30)
            .await?;
        assert_eq!(field(&o, "/status/exit/signal"), "15");
        assert_eq!(cond(&o, "Ready"), "True/Stopped");
        assert_eq!(cond(&o, "Succeeded"), "False/Stopped");
        none_left(&t, "target", "sleep 1001").await?;
        Ok(())
    })
    .await;
}

/// Real-time signals (34-64) were once reaped and lost: the object stayed Running forever.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn real_time_signals_kill_and_stop_and_the_objects_delete_at_once() {
    with_ns("op-rtsig", |t| async move {
        t.pods([pod("target", None)]).await?;
        t.apply_sbps([
            sbp(
                "rt34",
                "target",
                sh("echo before; kill -34 $$; sleep 100", Value::Null),
            ),
            sbp(
                "rt64",
                "target",
                json!({"command": ["sleep", "1003"], "stopSignal": 64}),
            ),
        ])
        .await?;
        let exit = |o: &_| {
            let f = |p| field(o, p);
            format!(
                "{}/{}/{}",
                f("/status/exit/code"),
                f("/status/exit/signal"),
                f("/status/endReason")
            )
        };
        let o = t.until_field("rt34", "/status/phase", "Exited", 30).await?;
        assert_eq!(exit(&o), "162/34/Signaled");
        assert_eq!(field(&o, "/status/output/tail"), "before\n");
        t.until_field("rt64", "/status/phase", "Running", 60)
            .await?;
        stop(&t, "rt64").await?;
        let o = t.until_field("rt64", "/status/phase", "Exited", 30).await?;
        assert_eq!(exit(&o), "192/64/Stopped");
        none_left(&t, "target", "sleep 1003").await?;
        kubectl_within(&t, 30, &["delete", "sbp", "rt34", "rt64"]).await
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn delete_while_running_stops_and_forgets_the_process() {
    with_ns("op-delete", |t| async move {
        let host = Host::from_env()?;
        t.pods([pod("target", None)]).await?;
        t.apply_sbp(sbp(
            "delme",
            "target",
            json!({"command": ["sleep", "1002"]}),
        ))
        .await?;
        let o = t
            .until_field("delme", "/status/phase", "Running", 60)
            .await?;
        ensure!(runs(&t, "target", "sleep 1002").await?, "not running");
        let uid = field(&o, "/metadata/uid");
        kubectl_within(&t, 60, &["delete", "sbp", "delme"]).await?;
        none_left(&t, "target", "sleep 1002").await?;
        // The agent forgot it.
        assert_eq!(host.agent_process_status(&uid).await?, 404);
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn pod_replaced_under_a_running_process_is_a_stale_handle() {
    with_ns("op-replaced", |t| async move {
        t.pods([pod("victim", None)]).await?;
        t.apply_sbp(sbp(
            "stale",
            "victim",
            json!({"command": ["sleep", "1003"]}),
        ))
        .await?;
        t.until_field("stale", "/status/phase", "Running", 60)
            .await?;
        t.kubectl(&["delete", "pod", "victim", "--wait=true", "--timeout=60s"])
            .await?;
        t.apply_pod(pod("victim", None)).await?;
        // Within 5 s of the pod being gone.
        let o = t
            .until_field("stale", "/status/error/code", "StaleProcessHandle", 5)
            .await?;
        let reason = field(&o, "/status/endReason");
        ensure!(
            reason == "PodReplaced" || reason == "PodDeleted",
            "endReason {reason}"
        );
        assert_eq!(field(&o, "/status/phase"), "Error");
        assert_eq!(cond(&o, "Stalled"), "True/StaleProcessHandle");
        // An exit, if any, is the real one: the container's end killed the process.
        let exit = format!(
            "{}/{}",
            field(&o, "/status/exit/code"),
            field(&o, "/status/exit/signal")
        );
        ensure!(exit == "/" || exit == "137/9", "exit {exit}");
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn applied_before_its_pod_waits_pod_not_found_then_runs() {
    with_ns("op-early", |t| async move {
        t.apply_sbp(sbp("early", "late", sh("echo early", Value::Null)))
            .await?;
        t.until_field("early", "/status/phase", "Pending", 60)
            .await?;
        assert_eq!(
            cond(&t.get("early").await?, "Reconciling"),
            "True/PodNotFound"
        );
        t.apply_pod(pod("late", None)).await?;
        let o = t
            .until_field("early", "/status/phase", "Exited", 90)
            .await?;
        assert_eq!(field(&o, "/status/exit/code"), "0");
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn container_not_in_the_pod_is_container_not_found() {
    with_ns("op-nocontainer", |t| async move {
        t.pods([pod("target", None)]).await?;
        t.apply_sbp(sbp(
            "nocontainer",
            "target",
            json!({"container": "nope", "command": ["true"]}),
        ))
        .await?;
        let o = t
            .until_field("nocontainer", "/status/error/code", "ContainerNotFound", 60)
            .await?;
        assert_eq!(field(&o, "/status/phase"), "Error");
        Ok(())
    })
    .await;
}

/// A pod whose RuntimeClass handler is not runc-compatible (e2e-foreign: its own shim type, see
/// e2e/cluster) gets a final RuntimeUnsupported naming the handler, and nothing runs in it.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn runtime_class_the_agent_cannot_exec_into_is_runtime_unsupported() {
    with_ns("op-foreign", |t| async move {
        let class = "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: e2e-foreign}\nhandler: e2e-foreign\n";
        let out = cmd::kubectl_stdin(&["apply", "-f", "-"], class).await?;
        ensure!(out.success(), "RuntimeClass e2e-foreign: {}", out.stderr);
        let mut p = pod("foreign", None);
        p["spec"]["runtimeClassName"] = json!("e2e-foreign");
        t.apply_pod(p).await?;
        if t.kubectl(&["wait", "--for=condition=Ready", "pod/foreign", "--timeout=60s"])
            .await
            .is_err()
        {
            let described = t.kubectl(&["describe", "pod", "foreign"]).await?;
            let tail: Vec<_> = described.lines().rev().take(5).collect();
            bail!("a pod of RuntimeClass e2e-foreign does not run (cluster started before the handler was configured? e2e/cluster down && up)\n{tail:?}");
        }
        t.apply_sbp(sbp("foreignproc", "foreign", sh("touch /tmp/ran; exit 3", Value::Null)))
            .await?;
        let o = t
            .until_field("foreignproc", "/status/error/code", "RuntimeUnsupported", 30)
            .await?;
        assert_eq!(field(&o, "/status/phase"), "Error");
        let message = field(&o, "/status/error/message");
        ensure!(
            message.contains("\"e2e-foreign\""),
            "the message does not name the handler: {message}"
        );
        // `test -e` answers 1: the exec works, the file is not there.
        let probe = ["-n", &t.name, "exec", "foreign", "-c", "main", "--", "test", "-e", "/tmp/ran"];
        let Out { code, stderr, .. } =
            cmd::run("kubectl", &probe, None, Duration::from_secs(30)).await?;
        ensure!(code == Some(1), "the process ran, or the pod cannot be exec'd into ({code:?}): {stderr}");
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn start_deadline_passed_before_the_start_is_start_deadline_exceeded() {
    with_ns("op-deadline", |t| async move {
        // The pod never comes: a final Error when the deadline passes, counted from the creation.
        t.apply_sbp(sbp(
            "deadline",
            "never-there",
            json!({"command": ["true"], "startDeadlineSeconds": 3}),
        ))
        .await?;
        let o = t
            .until_field(
                "deadline",
                "/status/error/code",
                "StartDeadlineExceeded",
                15,
            )
            .await?;
        assert_eq!(field(&o, "/status/phase"), "Error");
        assert_eq!(cond(&o, "Stalled"), "True/StartDeadlineExceeded");
        assert_eq!(field(&o, "/status/startedAt"), "", "it started");
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn pod_replaced_before_the_start_is_not_the_target() {
    with_ns("op-pinned", |t| async move {
        // First seen: a pod whose container cannot run yet (its image is not there); replaced
        // under the same name by a pod that runs: the process must not start in the new pod.
        let mut first = pod("pinned", None);
        first["spec"]["terminationGracePeriodSeconds"] = json!(0);
        first["spec"]["containers"][0]["image"] = json!("localhost/does-not-exist:e2e");
        t.apply_pod(first).await?;
        let uid = t.api::<Pod>().get("pinned").await?.metadata.uid;
        let uid = uid.context("the pod has no uid")?;
        t.apply_sbp(sbp("pin", "pinned", sh("echo ran", Value::Null)))
            .await?;
        let o = t
            .until_field("pin", "/status/targetPodUID", &uid, 60)
            .await?;
        assert_eq!(field(&o, "/status/phase"), "Pending");
        t.kubectl(&["delete", "pod", "pinned", "--wait=true", "--timeout=60s"])
            .await?;
        t.apply_pod(pod("pinned", None)).await?;
        let o = t
            .until_field("pin", "/status/error/code", "StaleProcessHandle", 60)
            .await?;
        assert_eq!(
            field(&o, "/status/startedAt"),
            "",
            "it started in the new pod"
        );
        let message = field(&o, "/status/error/message");
        ensure!(
            message.contains("replaced before the process started"),
            "{message}"
        );
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn object_gone_without_its_finalizer_has_its_orphan_stopped_and_forgotten() {
    with_ns("op-orphan", |t| async move {
        // The object vanishes without its finalizer running (removed by hand): the operator's
        // sweep stops and forgets the process it left on the agent.
        let host = Host::from_env()?;
        t.pods([pod("target", None)]).await?;
        t.apply_sbp(sbp("orphan", "target", sh("exec sleep 301", Value::Null)))
            .await?;
        let o = t
            .until_field("orphan", "/status/phase", "Running", 60)
            .await?;
        let uid = field(&o, "/metadata/uid");
        t.kubectl(&[
            "patch",
            "sbp",
            "orphan",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ])
        .await?;
        t.kubectl(&["delete", "sbp", "orphan", "--wait=true", "--timeout=30s"])
            .await?;
        // The agent's records have no watch: polled, bounded.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut code = host.agent_process_status(&uid).await?;
        while code != 404 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_secs(1)).await;
            code = host.agent_process_status(&uid).await?;
        }
        ensure!(code == 404, "the agent still holds {uid} (HTTP {code})");
        let args = t.pod_args("target").await?;
        ensure!(
            !args.iter().any(|a| a == "sleep 301"),
            "the process still runs in the pod: {args:?}"
        );
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn ttl_seconds_after_finished_deletes_the_object() {
    with_ns("op-ttl", |t| async move {
        t.pods([pod("target", None)]).await?;
        t.apply_sbp(sbp(
            "ttl",
            "target",
            json!({"command": ["true"], "ttlSecondsAfterFinished": 1}),
        ))
        .await?;
        let gone = t
            .sandbox
            .process("ttl")
            .until(Some(Duration::from_secs(60)), "be deleted", |_| false)
            .await;
        match gone {
            Err(sandbox_client::Error::NotFound(_)) => Ok(()),
            other => bail!("not deleted within 60 s: {other:?}"),
        }
    })
    .await;
}

/// Every class of Unicode scalar values (and bytes that are not UTF-8) in stdout, stderr, a
/// logMatch line and argv[0] (e2e/tools/hostile_bytes.py): each object is final within 5 s of its
/// end, the tail and the line byte for byte (lossy UTF-8). Before the apply bodies were escaped
/// for the API server's YAML decoder, hb-out stayed Running forever ("control characters are not
/// allowed").
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn every_unicode_class_in_output_log_match_and_argv0_arrives_byte_for_byte() {
    with_ns("op-hostile", |t| async move {
        let hb = sandbox_e2e::repo_root().join("e2e/tools/hostile_bytes.py");
        let hb = hb.to_str().context("repository path")?.to_string();
        t.pods([pod("target", None)]).await?;
        let manifests = cmd::ok("python3", &[&hb, "manifests", "target"]).await?;
        t.kubectl_apply(&manifests).await?;
        // hb-match runs 1 s after its line, the others end at once; each has 5 s more to be final.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(6);
        let mut bad = Vec::new();
        for name in ["hb-out", "hb-argv", "hb-match"] {
            let waited = tokio::time::timeout_at(deadline, t.until(name, 6, "end", is_final)).await;
            if !matches!(waited, Ok(Ok(_))) {
                bad.push(format!("{name} not final 6 s after the apply"));
                continue;
            }
            let json = t.kubectl(&["get", "sbp", name, "-o", "json"]).await?;
            let out = cmd::run(
                "python3",
                &[&hb, "check", name],
                Some(json.as_bytes()),
                Duration::from_secs(30),
            )
            .await?;
            if !out.success() {
                bad.push(format!("{name}: {}{}", out.stdout, out.stderr));
            }
        }
        ensure!(bad.is_empty(), "{}", bad.join("\n"));
        Ok(())
    })
    .await;
}

/// A SandboxProcess as a user writes it: NAME on POD with these spec lines (YAML, as written).
fn sbp_yaml(name: &str, pod: &str, lines: &[&str]) -> String {
    let mut y = format!("---\napiVersion: sandbox.dev/v1alpha1\nkind: SandboxProcess\nmetadata: {{name: {name}}}\nspec:\n  podName: {pod}\n");
    for l in lines {
        y.push_str(&format!("  {l}\n"));
    }
    y
}

/// `kubectl apply` of `yaml` must be refused with an error matching `pattern` (a regex).
async fn refused(t: &TestNs, yaml: &str, pattern: &str) -> Result<()> {
    let out = cmd::kubectl_stdin(&["-n", &t.name, "apply", "-f", "-"], yaml).await?;
    ensure!(!out.success(), "accepted:\n{yaml}");
    let said = format!("{}{}", out.stdout, out.stderr);
    let re = regex_lite::Regex::new(pattern)?;
    ensure!(
        re.is_match(&said),
        "error does not match '{pattern}': {said}"
    );
    Ok(())
}

/// `rejected` of the bash suite: a SandboxProcess on pod `target` with these spec lines.
async fn rejected(t: &TestNs, pattern: &str, lines: &[&str]) -> Result<()> {
    refused(t, &sbp_yaml("bad", "target", lines), pattern).await
}

/// A merge patch of sbp/NAME must be refused naming `what`.
async fn patch_refused(t: &TestNs, name: &str, patch: &str, what: &str) -> Result<()> {
    let args = [
        "-n",
        &t.name,
        "patch",
        "sbp",
        name,
        "--type=merge",
        "-p",
        patch,
    ];
    let out = cmd::run("kubectl", &args, None, Duration::from_secs(60)).await?;
    ensure!(!out.success(), "accepted: {patch}");
    ensure!(out.stderr.contains(what), "{}", out.stderr);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn invalid_manifests_are_rejected_at_apply_naming_the_field() {
    with_ns("op-invalid", |t| async move {
        let x = r#"command: ["x"]"#;
        rejected(&t, "spec.command", &["command: []"]).await?;
        rejected(&t, "spec.command.*must not be empty", &[r#"command: [""]"#]).await?;
        rejected(&t, "spec.readiness.tcpSocket.port", &[x, "readiness: {tcpSocket: {port: 70000}}"]).await?;
        rejected(&t, "spec.readiness.*exactly one", &[x, "readiness: {tcpSocket: {port: 80}, httpGet: {port: 80}}"]).await?;
        rejected(&t, "spec.workingDir.*absolute", &[x, "workingDir: tmp"]).await?;
        rejected(&t, "spec.timeoutSeconds", &[x, "timeoutSeconds: 0"]).await?;
        rejected(&t, "spec.stopSignal", &[x, "stopSignal: 65"]).await?;
        // durations are bounded (int32): these once overflowed the supervisor and crashed the agent
        rejected(&t, "spec.timeoutSeconds", &[x, "timeoutSeconds: 9223372036854775807"]).await?;
        rejected(&t, "spec.terminationGracePeriodSeconds", &[x, "terminationGracePeriodSeconds: 9223372036854775807"]).await?;
        rejected(&t, "spec.ttlSecondsAfterFinished", &[x, "ttlSecondsAfterFinished: 100000000000"]).await?;
        // Limits that can never start: refused at apply with the agent's bounds, naming the field.
        for v in [r#""-1""#, "0", r#""1Ki""#, r#""3Mi""#, r#""1e20""#, "4194303"] {
            let limits = format!("resources: {{limits: {{memory: {v}}}}}");
            rejected(&t, "spec.resources.limits.memory.*must be a quantity of 4Mi", &[x, &limits]).await?;
        }
        for v in ["0", r#""5m""#, r#""1e20""#, r#""-1""#] {
            let limits = format!("resources: {{limits: {{cpu: {v}}}}}");
            rejected(&t, "spec.resources.limits.cpu.*must be a quantity of 10m", &[x, &limits]).await?;
        }
        // at the bounds: accepted (a dry run: nothing to start)
        let at_bound = sbp_yaml("atbound", "target", &[x, "resources: {limits: {cpu: 10m, memory: 4Mi, pids: 1}}"]);
        let out = cmd::kubectl_stdin(&["-n", &t.name, "apply", "--dry-run=server", "-f", "-"], &at_bound).await?;
        ensure!(out.success(), "at the bounds refused: {}", out.stderr);
        // Names no pod can have: refused at apply, not left waiting as PodNotFound.
        for v in ["other-ns/pod", "Web", "a_b"] {
            refused(&t, &sbp_yaml("badp", v, &[x]), "spec.podName.*must be a DNS-1123 subdomain").await?;
        }
        rejected(&t, "spec.container.*must be a DNS-1123 label", &["container: App", x]).await?;
        let secret_ref = "env: [{name: A, valueFrom: {secretKeyRef: {name: other/s, key: k}}}]";
        rejected(&t, "valueFrom name must be a DNS-1123 subdomain", &[x, secret_ref]).await?;
        let selector = "---\napiVersion: sandbox.dev/v1alpha1\nkind: SandboxProcess\nmetadata: {name: badsel}\nspec:\n  podSelector: {matchLabels: {app: \"a b\"}}\n  command: [x]\n";
        refused(&t, selector, "spec.podSelector.matchLabels.app").await?;
        // Immutability: everything but stop and ttlSecondsAfterFinished (the API server's rules:
        // the object's pod need not exist).
        t.apply_sbp(sbp("ok", "target", sh("sleep 1; echo done", Value::Null))).await?;
        patch_refused(&t, "ok", r#"{"spec":{"command":["echo","changed"]}}"#, "command is immutable").await?;
        patch_refused(&t, "ok", r#"{"spec":{"container":"other"}}"#, "container is immutable").await?;
        t.kubectl(&["patch", "sbp", "ok", "--type=merge", "-p", r#"{"spec":{"ttlSecondsAfterFinished":3600}}"#])
            .await?;
        Ok(())
    })
    .await;
}
