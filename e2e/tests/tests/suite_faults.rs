//! e2e/suites/suite's assertions that restart or delete the release's shared components (the agent pod,
//! the operator pod), compete for its Lease, or need the node alone for their time bound; run one
//! at a time (`rust_tests suite_faults 1`) after tests/suite.rs.
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use sandbox_api::crd::SandboxProcess;
use sandbox_e2e::manifests::{pod, sbp, sh};
use sandbox_e2e::{cmd, cond, field, metrics, release, with_ns};
use serde_json::{json, Value};

/// `CODE/SIGNAL/ENDREASON` of an ended process.
fn exit_of(o: &SandboxProcess) -> String {
    format!(
        "{}/{}/{}",
        field(o, "/status/exit/code"),
        field(o, "/status/exit/signal"),
        field(o, "/status/endReason")
    )
}

/// Seconds since the epoch of an RFC 3339 time as the API server writes it.
fn epoch(rfc3339: &str) -> Result<i64> {
    let t: k8s_openapi::jiff::Timestamp = rfc3339
        .parse()
        .with_context(|| format!("time {rfc3339:?}"))?;
    Ok(t.as_second())
}

/// Five processes, each with its own ending: some end while no agent runs, some after the new one
/// is up, one by a signal. Their exit codes and output must be exact.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn agent_pod_deleted_while_5_processes_run_every_exit_and_output_exact() {
    with_ns("suitef-agent", |t| async move {
        t.pods([pod("work", None)]).await?;
        for i in 1..=5 {
            let end = if i == 5 { "kill -9 $$".to_string() } else { format!("exit {}", i + 10) };
            let script = format!("echo out-{i}-a; sleep {}; echo err-{i} >&2; sleep 1; echo out-{i}-b; {end}", i * 3);
            t.apply_sbp(sbp(&format!("ag{i}"), "work", sh(&script, json!({})))).await?;
        }
        for i in 1..=5 {
            t.until_field(&format!("ag{i}"), "/status/phase", "Running", 60).await?;
        }
        let t0 = Instant::now();
        let t0_wall = k8s_openapi::jiff::Timestamp::now().as_second();
        release::replace_agents(&t.client).await?;
        let rolled = t0.elapsed().as_secs();
        let up = agent_ready_at(&release::node1_agent(&t.client).await?)?;
        let (mut down, mut ends) = (0, String::new());
        for i in 1..=5 {
            let o = t.until_field(&format!("ag{i}"), "/status/phase", "Exited", 90).await?;
            let want = if i == 5 { "137/9/Signaled".to_string() } else { format!("{}//Exited", i + 10) };
            assert_eq!(exit_of(&o), want, "ag{i}");
            let bytes = format!("{}/{}", field(&o, "/status/output/stdoutBytes"), field(&o, "/status/output/stderrBytes"));
            assert_eq!(bytes, "16/6", "ag{i}");
            assert_eq!(field(&o, "/status/output/tail"), format!("out-{i}-a\nerr-{i}\nout-{i}-b\n"), "ag{i}");
            // how many ended while no agent was Ready (the rest after the new one was up)
            let f = epoch(&field(&o, "/status/finishedAt"))?;
            ends.push_str(&format!(" +{}", f - t0_wall));
            if f < up {
                down += 1;
            }
        }
        println!("note: agent pod deleted; the new one Ready +{} s (rollout done +{rolled} s); processes ended at{ends} s; {down} of 5 before the new agent was Ready", up - t0_wall);
        Ok(())
    })
    .await;
}

/// When the agent pod's Ready condition last changed, in seconds since the epoch.
fn agent_ready_at(agent: &k8s_openapi::api::core::v1::Pod) -> Result<i64> {
    let c = agent
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .context("the agent pod has no Ready condition")?;
    ensure!(c.status == "True", "node 1's agent is not Ready");
    Ok(c.last_transition_time
        .as_ref()
        .context("Ready without a time")?
        .0
        .as_second())
}

/// The root has exited (code 5) and its child runs on when the agent goes; the child ends only
/// when the test says so (a file in the pod), after the new agent is up.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn agent_pod_deleted_while_a_root_exited_5_and_its_child_runs_then_exited_5() {
    with_ns("suitef-agtree", |t| async move {
        t.pods([pod("work", None)]).await?;
        let script = "(while [ ! -e /tmp/agtree-go ]; do sleep 0.2; done) & exit 5";
        t.apply_sbp(sbp("agtree", "work", sh(script, json!({}))))
            .await?;
        let running = |o: &SandboxProcess| {
            field(o, "/status/phase") == "Running" && field(o, "/status/rootExited") == "true"
        };
        t.until("agtree", 60, "run on with its root exited", running)
            .await?;
        release::replace_agents(&t.client).await?;
        // The new agent found it: still Running, root exited, its child alive.
        t.until("agtree", 30, "run on with its root exited", running)
            .await?;
        assert_eq!(t.count_procs("work", "sh -c (while").await?, 1);
        t.in_pod("work", &["touch", "/tmp/agtree-go"]).await?;
        let o = t
            .until_field("agtree", "/status/phase", "Exited", 60)
            .await?;
        assert_eq!(exit_of(&o), "5//Exited");
        assert_eq!(t.count_procs("work", "sh -c (while").await?, 0);
        Ok(())
    })
    .await;
}

/// Waits up to 120 s until the operator pods are all new (none of `before`) and Ready, then up to
/// 60 s until one of them holds the Lease.
async fn new_operator_leads(client: &kube::Client, before: &[String]) -> Result<()> {
    let sel = format!("{},app.kubernetes.io/component=operator", release::SELECTOR);
    let deadline = Instant::now() + Duration::from_secs(120);
    let after = loop {
        let after = release::pod_uids(client, "operator").await?;
        if !after.is_empty() && !after.iter().any(|u| before.contains(u)) {
            let ready = cmd::kubectl(&[
                "-n",
                release::NAMESPACE,
                "wait",
                "--for=condition=Ready",
                "pod",
                "-l",
                &sel,
                "--timeout=1s",
            ])
            .await;
            if ready.is_ok() {
                break after;
            }
        }
        ensure!(Instant::now() < deadline, "no new operator pod Ready");
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let holder = release::lease_holder().await.unwrap_or_default();
        let pod = holder.split_once('/').map_or("", |(_, p)| p);
        let uid = cmd::kubectl(&[
            "-n",
            release::NAMESPACE,
            "get",
            "pod",
            pod,
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .await
        .unwrap_or_default();
        if after.contains(&uid) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "lease holder '{holder}' is not the new pod"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn operator_pod_deleted_mid_run_the_new_one_leads_and_adopts_once() {
    with_ns("suitef-operator", |t| async move {
        t.pods([pod("work", None)]).await?;
        let script = "echo $$ >> /tmp/adopt-pids; echo started; sleep 25; echo finished; exit 6";
        t.apply_sbp(sbp("adopt", "work", sh(script, json!({}))))
            .await?;
        let o = t
            .until_field("adopt", "/status/phase", "Running", 60)
            .await?;
        let (started, pid) = (field(&o, "/status/startedAt"), field(&o, "/status/pid"));
        let before = release::pod_uids(&t.client, "operator").await?;
        let t0 = Instant::now();
        release::delete_operator_pods().await?;
        // Applied while the operator is being replaced: started once, by whichever operator leads.
        let script = "echo $$ >> /tmp/during-pids; sleep 15; exit 2";
        t.apply_sbp(sbp("during", "work", sh(script, json!({}))))
            .await?;
        new_operator_leads(&t.client, &before).await?;
        println!(
            "note: the new operator pod leads {} s after the delete",
            t0.elapsed().as_secs()
        );
        t.until_field("during", "/status/phase", "Running", 60)
            .await?;
        // While both still run: one process each.
        assert_eq!(t.count_procs("work", "sleep 25").await?, 1);
        assert_eq!(t.count_procs("work", "sleep 15").await?, 1);
        let adopt = t
            .until_field("adopt", "/status/phase", "Exited", 60)
            .await?;
        let during = t
            .until_field("during", "/status/phase", "Exited", 60)
            .await?;
        assert_eq!(exit_of(&adopt), "6//Exited");
        assert_eq!(exit_of(&during), "2//Exited");
        // Adopted, not restarted: same start and pid; the pid file has one line.
        assert_eq!(
            (
                field(&adopt, "/status/startedAt"),
                field(&adopt, "/status/pid")
            ),
            (started, pid.clone())
        );
        assert_eq!(field(&adopt, "/status/output/tail"), "started\nfinished\n");
        assert_eq!(
            t.in_pod("work", &["cat", "/tmp/adopt-pids"]).await?,
            format!("{pid}\n")
        );
        assert_eq!(
            t.in_pod("work", &["cat", "/tmp/during-pids"])
                .await?
                .lines()
                .count(),
            1
        );
        Ok(())
    })
    .await;
}

/// The release build of the operator (e2e/deploy builds it into the target dir).
fn operator_binary() -> std::path::PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR").map_or_else(
        |_| sandbox_e2e::repo_root().join("target"),
        std::path::PathBuf::from,
    );
    target.join("x86_64-unknown-linux-gnu/release/sandbox-operator")
}

/// An operator started by hand while the release runs: the defaults a user gets (leader
/// election on, the cluster's one Lease). It stands by: its log names the holder, its metric
/// `sandbox_operator_leader` is 0, it writes no status; a process applied now runs once.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn stray_operator_started_by_hand_stands_by_and_writes_nothing() {
    with_ns("suitef-stray", |t| async move {
        t.pods([pod("work", None)]).await?;
        let dir = std::env::temp_dir().join(format!("spo-stray-{}", t.name));
        std::fs::create_dir_all(&dir)?;
        let (log, token) = (dir.join("log"), dir.join("token"));
        std::fs::write(&token, "")?;
        let mut stray = tokio::process::Command::new(operator_binary())
            .args([
                "--namespace",
                "spo-stray",
                "--identity",
                "stray",
                "--metrics-addr",
                "127.0.0.1:18091",
            ])
            .arg("--agent-token-file")
            .arg(&token)
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(dir.join("stderr"))?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", operator_binary().display()))?;
        let outcome = stands_by(&t, &log, &dir.join("stderr"), &mut stray).await;
        let _ = stray.kill().await;
        let _ = std::fs::remove_dir_all(&dir);
        outcome
    })
    .await;
}

async fn stands_by(
    t: &sandbox_e2e::TestNs,
    log: &std::path::Path,
    err: &std::path::Path,
    stray: &mut tokio::process::Child,
) -> Result<()> {
    let read = || {
        let mut s = std::fs::read_to_string(log).unwrap_or_default();
        s.push_str(&std::fs::read_to_string(err).unwrap_or_default());
        s
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let line = loop {
        if let Some(l) = read().lines().find(|l| l.contains("standing by")) {
            break l.to_string();
        }
        ensure!(
            Instant::now() < deadline,
            "no 'standing by' line:\n{}",
            read()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let holder = release::lease_holder().await?;
    ensure!(
        line.contains(&holder),
        "the line does not name the holder {holder}: {line}"
    );
    ensure!(
        holder.split('/').next() == Some(release::NAMESPACE),
        "lease held by '{holder}', not the release"
    );
    let metrics_text = || async {
        let r = reqwest::get("http://127.0.0.1:18091/metrics")
            .await?
            .error_for_status()?;
        anyhow::Ok(r.text().await?)
    };
    let text = metrics_text().await?;
    ensure!(
        metrics::value(&text, "sandbox_operator_leader") == Some(0.0),
        "metric sandbox_operator_leader is not 0: {:?}",
        metrics::value(&text, "sandbox_operator_leader")
    );
    // A process applied now runs once, through the release, and the stray writes nothing.
    let script = "echo $$ >> /tmp/stray-pids; sleep 3; exit 4";
    t.apply_sbp(sbp("stray", "work", sh(script, json!({}))))
        .await?;
    let o = t
        .until_field("stray", "/status/phase", "Exited", 60)
        .await?;
    assert_eq!(exit_of(&o), "4//Exited");
    assert_eq!(
        t.in_pod("work", &["cat", "/tmp/stray-pids"])
            .await?
            .lines()
            .count(),
        1
    );
    let writes = metrics::sum(
        &metrics_text().await?,
        "sandbox_operator_status_writes_total",
    );
    assert_eq!(writes, 0.0, "status writes by the stray operator");
    if let Some(status) = stray.try_wait()? {
        bail!("the stray operator exited ({status}):\n{}", read());
    }
    println!("note: {line}");
    Ok(())
}

/// How many SandboxProcesses the scale check applies, and its time bound
/// (SPO_SUITE_SCALE, SPO_SUITE_SCALE_SECONDS).
fn scale() -> (usize, u64) {
    let n = |k: &str, d| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    (
        n("SPO_SUITE_SCALE", 200) as usize,
        n("SPO_SUITE_SCALE_SECONDS", 120),
    )
}

const SCALE_PODS: usize = 10;

/// Every one: phase Exited, its own exit code and output, Succeeded iff 0; the wrong ones.
fn scale_wrong(list: &[SandboxProcess]) -> Vec<String> {
    let mut bad = Vec::new();
    for o in list {
        let name = field(o, "/metadata/name");
        let Some(i) = name.strip_prefix('n').and_then(|n| n.parse::<usize>().ok()) else {
            continue;
        };
        let got = (
            field(o, "/status/phase"),
            field(o, "/status/exit/code"),
            field(o, "/status/output/tail"),
            cond(o, "Succeeded")
                .split('/')
                .next()
                .unwrap_or_default()
                .to_string(),
        );
        let want = (
            "Exited".to_string(),
            (i % 7).to_string(),
            format!("n{i}\n"),
            if i % 7 == 0 { "True" } else { "False" }.to_string(),
        );
        if got != want {
            bad.push(format!("{name}: {got:?}, want {want:?}"));
        }
    }
    bad
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn scale_200_over_10_pods_in_one_apply_every_exit_and_output_right_in_time() {
    with_ns("suitef-scale", |t| async move {
        let (n, bound) = scale();
        t.pods((0..SCALE_PODS).map(|i| pod(&format!("s{i}"), None))).await?;
        let docs: Vec<Value> = (0..n)
            .map(|i| sbp(&format!("n{i:03}"), &format!("s{}", i % SCALE_PODS), sh(&format!("echo n{i}; exit {}", i % 7), json!({}))))
            .collect();
        let docs: String = docs.iter().map(|d| format!("---\n{}\n", serde_json::to_string(d).unwrap_or_default())).collect();
        // One kubectl apply, as a user would.
        let t0 = Instant::now();
        t.kubectl_apply(&docs).await.context("apply failed")?;
        let applied = t0.elapsed().as_secs_f64();
        let deadline = t0 + Duration::from_secs(bound);
        let list = loop {
            let list = t.sbps().list(&Default::default()).await?.items;
            let done = list.iter().filter(|o| matches!(field(*o, "/status/phase").as_str(), "Exited" | "Error")).count();
            if list.len() == n && done == n {
                break list;
            }
            ensure!(Instant::now() < deadline, "{} of {n} not finished after {bound} s", n - done);
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let all = t0.elapsed().as_secs_f64();
        let bad = scale_wrong(&list);
        ensure!(bad.is_empty(), "{} wrong:\n{}", bad.len(), bad[..bad.len().min(10)].join("\n"));
        println!("note: {n} SandboxProcesses over {SCALE_PODS} pods: apply {applied:.1} s, all Exited with the right code {all:.1} s after the apply began (bound {bound} s)");
        // Nothing left running in the pods.
        for i in 0..SCALE_PODS {
            assert_eq!(t.count_procs(&format!("s{i}"), "sh -c echo n").await?, 0, "pod s{i}");
        }
        Ok(())
    })
    .await;
}

/// After the faults above (tests run in name order with one thread; this one sorts last): the
/// release is left working.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn the_release_is_still_deployed_agent_and_operator_available() {
    let run = || async {
        let ns = release::NAMESPACE;
        cmd::kubectl(&[
            "-n",
            ns,
            "rollout",
            "status",
            &format!("ds/{}-agent", release::RELEASE),
            "--timeout=60s",
        ])
        .await?;
        cmd::kubectl(&[
            "-n",
            ns,
            "wait",
            "--for=condition=Available",
            &format!("deploy/{}-operator", release::RELEASE),
            "--timeout=60s",
        ])
        .await?;
        let status = cmd::ok(
            "helm",
            &["status", release::RELEASE, "-n", ns, "-o", "json"],
        )
        .await?;
        let v: Value = serde_json::from_str(&status)?;
        ensure!(
            v["info"]["status"] == "deployed",
            "helm status: {}",
            v["info"]["status"]
        );
        anyhow::Ok(())
    };
    if let Err(e) = run().await {
        panic!("{e:#}");
    }
}

/// `restartPolicy: OnFailure` with `exit 3`: runs come back after the kubelet's back-off (10, 20,
/// 40 s), the object stays Running with reason BackOff between them, and the agent pod deleted
/// during the first back-off changes nothing: the restart comes at its time, the count goes on,
/// and no run is skipped or doubled (one line of output per run). `stop` ends it for good.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn a_restart_comes_at_its_time_across_an_agent_pod_deletion() {
    with_ns("suitef-restart", |t| async move {
        t.pods([pod("work", None)]).await?;
        let spec = sh("echo run; exit 3", json!({"restartPolicy": "OnFailure"}));
        t.apply_sbp(sbp("flaky", "work", spec)).await?;
        let o = t.until("flaky", 60, "the first back-off", |o| cond(o, "Ready") == "False/BackOff").await?;
        assert_eq!(field(&o, "/status/phase"), "Running");
        assert_eq!(field(&o, "/status/lastExit/exit/code"), "3");
        release::replace_agents(&t.client).await?;
        // Every run's start, from the status as it moves on (whole seconds).
        let mut starts = std::collections::BTreeSet::new();
        let until = Instant::now() + Duration::from_secs(150);
        let o = loop {
            let o = t.get("flaky").await?;
            for p in ["/status/lastExit/startedAt", "/status/startedAt"] {
                let s = field(&o, p);
                if !s.is_empty() {
                    starts.insert(epoch(&s)?);
                }
            }
            if field(&o, "/status/restartCount") == "3" && cond(&o, "Ready") == "False/BackOff" {
                break o;
            }
            ensure!(Instant::now() < until, "3 restarts: {}", t.statuses().await);
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let at: Vec<i64> = starts.into_iter().collect();
        let gaps: Vec<i64> = at.windows(2).map(|w| w[1] - w[0]).collect();
        ensure!(gaps.len() == 3, "4 runs, starts {at:?}");
        for (gap, backoff) in gaps.iter().zip([10, 20, 40]) {
            ensure!((backoff - 1..=backoff + 4).contains(gap), "gaps {gaps:?} s, expected 10, 20, 40");
        }
        assert_eq!(field(&o, "/status/output/tail"), "run\n".repeat(4), "one line per run");
        assert_eq!(cond(&o, "Reconciling"), "True/BackOff");
        // stop during a back-off: Exited at once, no exit of its own (no run was in progress),
        // the count and the last exit kept.
        t.sbps().patch("flaky", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(json!({"spec": {"stop": true}}))).await?;
        let o = t.until_field("flaky", "/status/phase", "Exited", 15).await?;
        assert_eq!(exit_of(&o), "//Stopped");
        assert_eq!(field(&o, "/status/lastExit/exit/code"), "3");
        assert_eq!(cond(&o, "Succeeded"), "False/Stopped");
        assert_eq!(field(&o, "/status/restartCount"), "3");
        println!("note: restarts after exit 3 came {gaps:?} s apart, the agent pod deleted in the first back-off");
        Ok(())
    })
    .await;
}

/// issue 30: node 1's agent pod deleted while a terminal session and a plain attach stream. Both
/// attach again by themselves: 64 MiB through `sha256sum` are taken exactly once (the digest),
/// and the terminal's 400 numbered lines arrive each once, in order.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn agent_pod_deleted_mid_attach_both_go_on_stdin_once_output_exact() {
    use sandbox_client::{AttachOptions, Start};
    with_ns("suitef-attach", |t| async move {
        t.pods([pod("work", None)]).await?;
        let sum = t
            .sandbox
            .start(Start::new("work", ["sha256sum"]).id("sum").stdin(true))
            .await?;
        let term = t
            .sandbox
            .start(Start::new("work", ["sh", "-i"]).id("term").tty(true))
            .await?;
        let stdin = AttachOptions {
            stdin: true,
            ..Default::default()
        };
        let (mut sum_in, mut sum_out) = sum.attach(stdin.clone()).await?;
        let (mut term_in, mut term_out) = term.attach(stdin).await?;
        let data: Vec<u8> = (0..64u32 << 20)
            .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
            .collect();
        let want = cmd::sha256_of(&data).await?;
        let ticks =
            "i=0; while [ $i -lt 400 ]; do echo tick-$i; i=$((i+1)); sleep 0.05; done; exit 9\n";
        term_in.send(ticks.as_bytes()).await?;
        let feeding = tokio::spawn(async move {
            for chunk in data.chunks(1 << 20) {
                sum_in.send(chunk).await?;
            }
            sum_in.close_stdin().await?;
            anyhow::Ok(sum_in)
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        release::replace_agents(&t.client).await?;
        let _sum_in = feeding.await??;
        let (digest, code) =
            sandbox_e2e::attach::to_exit(&mut sum_out, Duration::from_secs(180)).await?;
        ensure!(code == 0, "sha256sum exited {code}");
        let digest = String::from_utf8_lossy(&digest);
        ensure!(digest.starts_with(&want), "digest {digest:?}, want {want}");
        let (screen, code) =
            sandbox_e2e::attach::to_exit(&mut term_out, Duration::from_secs(120)).await?;
        ensure!(code == 9, "the terminal's shell exited {code}");
        let re = regex_lite::Regex::new(r"tick-([0-9]+)\r\n").expect("regex");
        let seen: Vec<u32> = re
            .captures_iter(&String::from_utf8_lossy(&screen))
            .map(|c| c[1].parse().expect("digits"))
            .collect();
        ensure!(
            seen == (0..400).collect::<Vec<u32>>(),
            "ticks seen: {} ({:?}…)",
            seen.len(),
            &seen[..seen.len().min(20)]
        );
        println!(
            "note: agent replaced mid-attach: 64 MiB digest exact, 400 terminal lines each once"
        );
        Ok(())
    })
    .await;
}
