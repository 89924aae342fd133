//! Upgrade and rollback of a running installation (issue 32, `rust_tests upgrade` from
//! e2e/suites/upgrade, which has installed the release named in e2e/release/upgrade-from): a mixed workload on
//! the old release, then `helm upgrade` to this tree and `helm rollback`, with clients looping
//! on starts and log reads and a follow resuming by cursor throughout. What must hold across
//! both: every process runs exactly once, no running process is restarted, every exit code is
//! exact, the follow has no gap or repeat, objects the old release wrote reconcile under the new.
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use kube::api::{Patch, PatchParams};
use kube::Client;
use sandbox_api::crd::{Phase, SandboxProcess};
use sandbox_e2e::follow::{decode, Follow};
use sandbox_e2e::manifests::{pod, sbp, sh};
use sandbox_e2e::upgrade::{failures, helm, longest_outage, looping, Attempt};
use sandbox_e2e::{cmd, env, field, follow, with_ns, TestNs};
use serde_json::json;
use tokio::sync::{watch, Mutex};

/// The subresource API's group version.
const PREFIX: &str = "/apis/subresources.sandbox.dev/v1alpha1";
const TICKER: &str =
    "i=0; while [ ! -e /tmp/stop-ticker ]; do i=$((i+1)); echo tick $i; sleep 0.2; done; exit 3";
/// Enters its stop grace on SIGTERM and leaves it 30 s later with code 5.
const GRACE: &str = "trap 't=1' TERM; t=0; while [ $t = 0 ]; do sleep 0.2; done; echo term; \
    n=0; while [ $n -lt 150 ]; do sleep 0.2; n=$((n+1)); done; exit 5";
const NEW_RUN: &str = "echo new-run; while [ ! -e /tmp/stop-new-run ]; do sleep 0.2; done; exit 9";
const READY_LATER: &str =
    "while [ ! -e /tmp/go-ready ]; do sleep 0.2; done; echo READY; exec sleep 100000";

fn phase(o: &SandboxProcess) -> Option<Phase> {
    o.status.as_ref().and_then(|s| s.phase)
}

/// The exit code a short process of this index ends with.
fn code_of(i: u32) -> u32 {
    (i * 37 + 11) % 256
}

/// What the follow of the ticker read, across reconnects.
#[derive(Default)]
struct Followed {
    data: Vec<u8>,
    reconnects: u32,
    ended: bool,
}

/// A client writing numbered lines to `echo`'s stdin, each write at its byte offset (as
/// `kubectl sandbox attach` writes): a retry of a write that was taken is acknowledged, not
/// written again, so the process reads every line once.
#[derive(Default)]
struct StdinWriter {
    url: String,
    sent: Vec<u8>,
    /// The offset the process has taken up to (the last answer's `bytes`).
    taken: usize,
    lines: u32,
}

impl StdinWriter {
    fn new(ns: &str) -> StdinWriter {
        let url = format!("{PREFIX}/namespaces/{ns}/sandboxprocesses/echo/stdin");
        StdinWriter {
            url,
            ..StdinWriter::default()
        }
    }

    /// One write: the next line, or what of the last the process has not taken yet.
    async fn attempt(&mut self, client: &Client) -> Result<()> {
        if self.taken == self.sent.len() {
            self.lines += 1;
            self.sent.extend(format!("line {}\n", self.lines).bytes());
        }
        let req = http::Request::post(format!("{}?offset={}", self.url, self.taken))
            .header("content-type", "application/octet-stream")
            .body(self.sent[self.taken..].to_vec())?;
        let answer = client.request_text(req).await;
        if let Err(kube::Error::Api(e)) = &answer {
            if e.code == 409 {
                // Lost its place: resume where the process is.
                let state = client
                    .request_text(http::Request::get(self.url.clone()).body(Vec::new())?)
                    .await?;
                self.taken = taken(&state)?;
            }
        }
        self.taken = taken(&answer?)?;
        Ok(())
    }
}

/// The `bytes` of a stdin answer.
fn taken(answer: &str) -> Result<usize> {
    let v: serde_json::Value = serde_json::from_str(answer).context("a stdin answer")?;
    let n = v["bytes"]
        .as_u64()
        .context("no bytes in the stdin answer")?;
    Ok(n as usize)
}

/// `WORD 1` … `WORD N`, each once and in order; N. For the ticker: it never restarted and
/// nothing was lost or repeated.
fn numbered_in_order(data: &[u8], word: &str) -> Result<u32> {
    let text = String::from_utf8_lossy(data);
    let mut n = 0;
    for line in text.lines() {
        let want = format!("{word} {}", n + 1);
        ensure!(
            line == want,
            "after {word} {n} came {line:?} (want {want:?})"
        );
        n += 1;
    }
    Ok(n)
}

/// Follows `name` to its end, resuming after every cut from the last cursor it was given.
async fn follow_resuming(
    client: Client,
    ns: String,
    name: &'static str,
    seen: Arc<Mutex<Followed>>,
) -> Result<()> {
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!("follow=true&since={}", sandbox_client::percent_encode(c)),
            None => "follow=true".to_string(),
        };
        if let Ok(mut f) = Follow::open_query(&client, &ns, name, &query).await {
            while let Ok(Some(ev)) = f.next().await {
                if let Some(c) = ev["cursor"].as_str() {
                    cursor = Some(c.to_string());
                }
                match ev["type"].as_str() {
                    Some("data") => seen.lock().await.data.extend(decode(&ev)?),
                    Some("truncated") => anyhow::bail!("the follow lost output: {ev}"),
                    Some("end") if !ev["record"].is_null() => {
                        seen.lock().await.ended = true;
                        return Ok(());
                    }
                    _ => {}
                }
            }
        }
        seen.lock().await.reconnects += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One start as a client makes it: a short process applied, and final with its exit code
/// within the attempt's bound.
async fn start_one(t: &TestNs, prefix: &str, i: u32) -> Result<()> {
    let name = format!("{prefix}-{i:03}");
    let script = format!("echo {name} >> /tmp/runs; exit {}", code_of(i));
    t.apply_sbp(sbp(&name, "w", sh(&script, json!({})))).await?;
    let o = t
        .until(&name, 30, "end", |o| phase(o) == Some(Phase::Exited))
        .await?;
    let code = field(&o, "/status/exit/code");
    ensure!(code == code_of(i).to_string(), "{name}: exit code {code}");
    Ok(())
}

/// One log read through the API server: `ended`'s whole output.
async fn read_one(t: &TestNs) -> Result<()> {
    let path = follow::log_path(&t.name, "ended", "");
    let text = follow::get_text(&t.client, &path).await?;
    ensure!(
        text.contains("ZW5kZWQtb3V0cHV0Cg=="),
        "the read said: {text:.300}"
    );
    Ok(())
}

/// What the looping clients saw while the release changed.
struct Clients {
    starts: Vec<Attempt>,
    reads: Vec<Attempt>,
    /// Empty when the old release has no stdin.
    stdin: Vec<Attempt>,
    end: Instant,
}

/// Starts, log reads and (with `stdin`) stdin writes looping while `during` runs (and at least
/// `min_starts` starts); what they saw, and what `during` returned.
async fn with_clients<F, Fut, T>(
    t: &TestNs,
    prefix: &'static str,
    min_starts: u32,
    stdin: Option<Arc<Mutex<StdinWriter>>>,
    during: F,
) -> Result<(T, Clients)>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let (stop, rx) = watch::channel(false);
    let (ts, tr, client) = (t.clone(), t.clone(), t.client.clone());
    let (every, limit) = (Duration::from_millis(300), Duration::from_secs(10));
    let starts = tokio::spawn(looping(rx.clone(), every, limit, min_starts, move |i| {
        let t = ts.clone();
        async move { start_one(&t, prefix, i).await }
    }));
    let reads = tokio::spawn(looping(rx.clone(), every, limit, 0, move |_| {
        let t = tr.clone();
        async move { read_one(&t).await }
    }));
    let writes = stdin.map(|w| {
        tokio::spawn(looping(rx, every, limit, 0, move |_| {
            let (w, client) = (w.clone(), client.clone());
            async move { w.lock().await.attempt(&client).await }
        }))
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let out = during().await;
    // Clients go on a while after the pods are ready: a late failure counts too.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let _ = stop.send(true);
    let clients = Clients {
        starts: starts.await?,
        reads: reads.await?,
        stdin: match writes {
            Some(w) => w.await?,
            None => Vec::new(),
        },
        end: Instant::now(),
    };
    Ok((out?, clients))
}

/// Every short process of `prefix` final with its code, and run once (its line in /tmp/runs).
async fn exactly_once(t: &TestNs, prefix: &str, n: usize) -> Result<()> {
    for i in 0..n as u32 {
        let name = format!("{prefix}-{i:03}");
        let o = t
            .until(&name, 120, "end", |o| phase(o) == Some(Phase::Exited))
            .await?;
        let code = field(&o, "/status/exit/code");
        ensure!(code == code_of(i).to_string(), "{name}: exit code {code}");
    }
    let runs = t.in_pod("w", &["cat", "/tmp/runs"]).await?;
    for i in 0..n as u32 {
        let name = format!("{prefix}-{i:03}");
        let times = runs.lines().filter(|l| *l == name).count();
        ensure!(times == 1, "{name} ran {times} times");
    }
    Ok(())
}

fn note_clients(what: &str, c: &Clients) {
    for (op, a) in [
        ("start", &c.starts),
        ("log read", &c.reads),
        ("stdin write", &c.stdin),
    ] {
        if a.is_empty() {
            continue;
        }
        let (n, why) = failures(a);
        println!(
            "note: {what}: {op}s: {} attempts, {n} failed, longest failing {:.1} s{}",
            a.len(),
            longest_outage(a, c.end).as_secs_f64(),
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({})", why.join("; "))
            }
        );
    }
}

/// The process's pid and start time, as its status says: a restart changes them.
fn identity(o: &SandboxProcess) -> String {
    format!(
        "{} {}",
        field(o, "/status/pid"),
        field(o, "/status/startedAt")
    )
}

/// The old release's workload: running, waiting for readiness, ended, and one in a long stop
/// grace (asked to stop now), with `stdin` one reading its stdin; the ticker's identity.
async fn old_workload(t: &TestNs, stdin: bool) -> Result<String> {
    t.pods([pod("w", None)]).await?;
    let grace = json!({"terminationGracePeriodSeconds": 300});
    let ready = json!({"readiness": {"logMatch": {"pattern": "READY"}}});
    t.apply_sbps([
        sbp("ticker", "w", sh(TICKER, json!({}))),
        sbp("grace", "w", sh(GRACE, grace)),
        sbp("ready-later", "w", sh(READY_LATER, ready)),
        sbp("ended", "w", sh("echo ended-output; exit 7", json!({}))),
    ])
    .await?;
    for name in ["ticker", "grace", "ready-later"] {
        t.until(name, 60, "run", |o| phase(o) == Some(Phase::Running))
            .await?;
    }
    t.until_field("ended", "/status/exit/code", "7", 60).await?;
    if stdin {
        t.apply_sbp(sbp("echo", "w", json!({"command": ["cat"], "stdin": true})))
            .await?;
        t.until("echo", 60, "run", |o| phase(o) == Some(Phase::Running))
            .await?;
    }
    let ticker = t.get("ticker").await?;
    t.sbps()
        .patch(
            "grace",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"stop": true}})),
        )
        .await?;
    Ok(identity(&ticker))
}

/// What must hold after each of the upgrade and the rollback.
async fn still_whole(t: &TestNs, ticker: &str, seen: &Arc<Mutex<Followed>>) -> Result<()> {
    let now = t.get("ticker").await?;
    ensure!(
        phase(&now) == Some(Phase::Running) && identity(&now) == ticker,
        "the ticker: {:?} {} (was Running {ticker})",
        phase(&now),
        identity(&now)
    );
    t.until_field("ended", "/status/exit/code", "7", 60).await?;
    read_one(t).await.context("reading ended's output")?;
    let before = numbered_in_order(&seen.lock().await.data, "tick")?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = numbered_in_order(&seen.lock().await.data, "tick")?;
    ensure!(after > before, "the follow stopped at tick {after}");
    Ok(())
}

/// The chart told by lookup whether the old agents speak plain HTTP: then it rendered the
/// crossing (agents all at once, the operator replaced), else the configured strategies.
async fn crossing_rendered(r: &Release) -> Result<()> {
    let manifest = cmd::ok("helm", &["get", "manifest", &r.name, "--namespace", &r.ns]).await?;
    for want in ["maxUnavailable: 100%", "type: Recreate"] {
        ensure!(
            manifest.contains(want) == r.crossing,
            "from {} (plain-HTTP agents: {}), the upgraded manifest has {want:?}: {}",
            r.from,
            r.crossing,
            manifest.contains(want)
        );
    }
    Ok(())
}

/// The release under test and where its chart is (from e2e/suites/upgrade).
struct Release {
    name: String,
    ns: String,
    chart: String,
    values: String,
    from: String,
    /// Its agents speak plain HTTP (before agent mutual TLS).
    crossing: bool,
    /// It has stdin (`spec.stdin`).
    stdin: bool,
}

/// What runs across both: the ticker (its identity), its follow, the stdin writer if any.
struct Workload {
    ticker: String,
    seen: Arc<Mutex<Followed>>,
    stdin: Option<Arc<Mutex<StdinWriter>>>,
}

/// `helm upgrade` to this tree under looping clients, and what must hold after it.
async fn upgrade(t: &TestNs, r: &Release, w: &Workload) -> Result<()> {
    let (ticker, seen) = (&w.ticker, &w.seen);
    let mut args = vec!["upgrade", &r.name, &r.chart, "--namespace", &r.ns];
    args.extend(r.values.split_whitespace());
    args.extend(["--wait", "--timeout", "5m"]);
    // The issue's 100 starts during the upgrade across the transport change; 20 otherwise.
    let min = if r.crossing { 100 } else { 20 };
    let (took, c) = with_clients(t, "u", min, w.stdin.clone(), || helm(&args)).await?;
    println!(
        "note: helm upgrade from {}: all pods ready {:.1} s after it began",
        r.from,
        took.as_secs_f64()
    );
    note_clients("upgrade", &c);
    crossing_rendered(r).await?;
    still_whole(t, ticker, seen)
        .await
        .context("after the upgrade")?;
    exactly_once(t, "u", c.starts.len()).await?;
    t.until_field("grace", "/status/exit/code", "5", 90).await?;
    // An object the old release wrote, reconciled by the new one (a field only it writes).
    t.until("ticker", 60, "be reconciled by the new operator", |o| {
        !field(o, "/status/targetPodUID").is_empty()
    })
    .await?;
    t.in_pod("w", &["touch", "/tmp/go-ready"]).await?;
    t.until_true("ready-later", "Ready", 60).await?;
    Ok(())
}

/// `helm rollback` to the old release's revision under looping clients, with a process started
/// under the new release running across it; what must hold after it.
async fn rollback(t: &TestNs, r: &Release, w: &Workload) -> Result<()> {
    let (ticker, seen) = (&w.ticker, &w.seen);
    t.apply_sbp(sbp("new-run", "w", sh(NEW_RUN, json!({}))))
        .await?;
    t.until("new-run", 60, "run", |o| phase(o) == Some(Phase::Running))
        .await?;
    let rb = [
        "rollback",
        &r.name,
        "1",
        "--namespace",
        &r.ns,
        "--wait",
        "--timeout",
        "5m",
    ];
    let (took, c) = with_clients(t, "r", 20, w.stdin.clone(), || helm(&rb)).await?;
    println!(
        "note: helm rollback to {}: all pods ready {:.1} s after it began",
        r.from,
        took.as_secs_f64()
    );
    note_clients("rollback", &c);
    still_whole(t, ticker, seen)
        .await
        .context("after the rollback")?;
    exactly_once(t, "r", c.starts.len()).await?;
    t.in_pod("w", &["touch", "/tmp/stop-new-run"]).await?;
    t.until_field("new-run", "/status/exit/code", "9", 60)
        .await?;
    let path = follow::log_path(&t.name, "new-run", "");
    let log = follow::get_text(&t.client, &path).await;
    println!(
        "note: after the rollback, the output of a process started under the new release: {}",
        match &log {
            Ok(text) if text.contains("bmV3LXJ1bgo=") => "readable".to_string(),
            Ok(text) => format!("not there ({text:.200})"),
            Err(e) => format!("unreadable ({e:#})"),
        }
    );
    Ok(())
}

/// The ticker ends with its own code; both follows read every tick to its end, in order.
async fn both_follows_whole(
    t: &TestNs,
    follow: tokio::task::JoinHandle<Result<()>>,
    plugin: tokio::process::Child,
    seen: &Arc<Mutex<Followed>>,
) -> Result<()> {
    t.in_pod("w", &["touch", "/tmp/stop-ticker"]).await?;
    t.until_field("ticker", "/status/exit/code", "3", 60)
        .await?;
    tokio::time::timeout(Duration::from_secs(60), follow)
        .await
        .context("the follow did not end with the ticker")???;
    let s = seen.lock().await;
    let n = numbered_in_order(&s.data, "tick")?;
    ensure!(s.ended, "the follow ended without the process's end");
    println!(
        "note: the follow read ticks 1..{n} in order across {} reconnects",
        s.reconnects
    );
    let out = tokio::time::timeout(Duration::from_secs(60), plugin.wait_with_output())
        .await
        .context("kubectl sandbox logs -f did not end with the ticker")??;
    let m = numbered_in_order(&out.stdout, "tick")
        .with_context(|| String::from_utf8_lossy(&out.stderr).into_owned())?;
    ensure!(
        out.status.success() && m == n,
        "kubectl sandbox logs -f: {} after tick {m} of {n}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    println!("note: kubectl sandbox logs -f printed ticks 1..{m} in order and exited 0");
    Ok(())
}

/// Stdin closed after both: the process read every line once, in order, and ends 0.
async fn stdin_whole(t: &TestNs, w: &Mutex<StdinWriter>) -> Result<()> {
    let w = w.lock().await;
    let req = http::Request::post(format!("{}?offset={}&close=true", w.url, w.taken))
        .header("content-type", "application/octet-stream")
        .body(w.sent[w.taken..].to_vec())?;
    t.client.request_text(req).await.context("closing stdin")?;
    t.until_field("echo", "/status/exit/code", "0", 60).await?;
    let text = follow::get_text(&t.client, &follow::log_path(&t.name, "echo", "")).await?;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let ev: serde_json::Value = serde_json::from_str(line)?;
        if ev["type"] == "data" {
            out.extend(decode(&ev)?);
        }
    }
    let n = numbered_in_order(&out, "line")?;
    ensure!(
        n == w.lines,
        "echo printed lines 1..{n} of the {} written",
        w.lines
    );
    println!("note: stdin: lines 1..{n} written by offset across both, each read once, in order");
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster and the old release: run by e2e/suites/upgrade"]
async fn upgrade_and_rollback_lose_nothing() {
    with_ns("upgrade", |t| async move {
        let r = Release {
            name: env("SPO_UPGRADE_RELEASE"),
            ns: env("SPO_UPGRADE_NAMESPACE"),
            chart: env("SPO_UPGRADE_CHART"),
            values: env("SPO_UPGRADE_VALUES"),
            from: env("SPO_UPGRADE_FROM"),
            crossing: env("SPO_UPGRADE_CROSSING") == "1",
            stdin: env("SPO_UPGRADE_STDIN") == "1",
        };
        let ticker = old_workload(&t, r.stdin).await?;
        // `kubectl sandbox logs -f` as a user leaves it open across both.
        let plugin = ["-n", t.name.as_str(), "logs", "-f", "ticker"];
        let plugin_follow = cmd::kubectl_sandbox_child(&plugin).await?;
        let w = Workload {
            ticker,
            seen: Arc::new(Mutex::new(Followed::default())),
            stdin: r
                .stdin
                .then(|| Arc::new(Mutex::new(StdinWriter::new(&t.name)))),
        };
        let follow = tokio::spawn(follow_resuming(
            t.client.clone(),
            t.name.clone(),
            "ticker",
            w.seen.clone(),
        ));
        upgrade(&t, &r, &w).await?;
        rollback(&t, &r, &w).await?;
        if let Some(s) = &w.stdin {
            stdin_whole(&t, s).await?;
        }
        both_follows_whole(&t, follow, plugin_follow, &w.seen).await
    })
    .await;
}
