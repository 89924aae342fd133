//! `restartPolicy` against real runc containers: runs follow each other with a growing back-off,
//! the record counts them and keeps the previous run's end and output span, a stop ends a
//! back-off at once, an agent restart during a back-off neither skips nor doubles a run, and a
//! crash loop costs the node nothing that grows with the number of runs.
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use sandbox_wire::wire::{EndReason, ProcessRecord, RestartPolicy, StartRequest};
use serde_json::json;

const T: Duration = Duration::from_secs(30);

/// Each run prints `run N` (N counted in a file of the container) and exits with `code`.
fn counting(c: &Container, code: i32, policy: RestartPolicy) -> StartRequest {
    let counter = format!("/tmp/{}", uniq("runs"));
    let script = format!(
        "n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; \
         echo run $n; exit {code}"
    );
    StartRequest {
        restart_policy: policy,
        ..req(c, &["sh", "-c", &script])
    }
}

fn backoff(initial_ms: u64, max_ms: u64) -> Vec<String> {
    vec![
        format!("--restart-backoff-initial-ms={initial_ms}"),
        format!("--restart-backoff-max-ms={max_ms}"),
    ]
}

fn fx(name: &str, args: &[String]) -> Fx {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Fx::new(name, 0, &args)
}

/// Polls the record until `f`, noting every run's start time on the way.
async fn until(
    f: &Fx,
    id: &str,
    starts: &mut BTreeSet<String>,
    what: &str,
    mut ok: impl FnMut(&ProcessRecord) -> bool,
) -> ProcessRecord {
    let deadline = Instant::now() + T;
    loop {
        let r = f.agent.record(id).await;
        starts.extend(r.started_at.clone());
        starts.extend(r.last_exit.as_ref().and_then(|l| l.started_at.clone()));
        if ok(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "{what} not reached: {r:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Nanoseconds since the epoch of the supervisor's RFC 3339 UTC times
/// (`YYYY-MM-DDTHH:MM:SS[.fraction]Z`).
fn nanos(t: &str) -> i64 {
    let (date, clock) = t.trim_end_matches('Z').split_once('T').expect("a time");
    let d: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, "0"));
    let c: Vec<i64> = hms.split(':').map(|x| x.parse().unwrap()).collect();
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let (era, yoe) = (y.div_euclid(400), y.rem_euclid(400));
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let days = era * 146_097 + (yoe * 365 + yoe / 4 - yoe / 100 + doy) - 719_468;
    let frac_ns: i64 = format!("{frac:0<9}")[..9].parse().unwrap();
    (days * 86_400 + c[0] * 3600 + c[1] * 60 + c[2]) * 1_000_000_000 + frac_ns
}

#[test]
fn rfc3339_times_read_back() {
    assert_eq!(nanos("1970-01-01T00:00:01Z"), 1_000_000_000);
    assert_eq!(nanos("2026-12-04T18:37:00.5Z"), 1_796_409_420_500_000_000);
}

#[tokio::test]
async fn on_failure_runs_again_with_a_growing_back_off_until_stopped() {
    let f = fx("rp-onfailure", &backoff(300, 5000));
    let q = counting(&f.ctr, 3, RestartPolicy::OnFailure);
    let id = q.exec_id.clone();
    f.agent.start(&q).await.expect("started");
    let mut starts = BTreeSet::new();
    let r = until(&f, &id, &mut starts, "3 restarts, backing off", |r| {
        r.restart_count == 3 && r.backoff_until.is_some()
    })
    .await;
    // Running while it waits, not ready, with the previous run's end.
    assert_eq!(r.phase, sandbox_wire::wire::Phase::Running);
    assert!(!r.ready && r.exit.is_none(), "{r:?}");
    let last = r.last_exit.clone().expect("lastExit");
    assert_eq!((last.exit.code, last.end_reason), (3, EndReason::Exited));
    // Four runs; each gap between starts is longer than the one before (300, 600, 1200 ms).
    let at: Vec<i64> = starts.iter().map(|s| nanos(s)).collect();
    assert_eq!(at.len(), 4, "{starts:?}");
    let gaps: Vec<i64> = at.windows(2).map(|w| (w[1] - w[0]) / 1_000_000).collect();
    for (gap, backoff) in gaps.iter().zip([300, 600, 1200]) {
        assert!(*gap >= backoff && *gap < backoff + 1500, "gaps {gaps:?} ms");
    }
    println!("gaps between runs: {gaps:?} ms");
    // `previous` is the run that just ended; the whole log has every run, once.
    let prev = text(&f.agent.logs(&id, "previous=true").await, None);
    assert_eq!(prev, "run 4\n");
    let all = text(&f.agent.logs(&id, "").await, None);
    assert_eq!(all, "run 1\nrun 2\nrun 3\nrun 4\n");
    // A stop ends the back-off at once, for good: no run was in progress, so no exit of its
    // own; the last run's end stays in lastExit.
    let asked = Instant::now();
    let (s, v) = f.agent.signal(&id, json!({"stop": true})).await;
    assert_eq!(s, 200, "{v}");
    let done = f.agent.wait_final(&id, Duration::from_secs(5)).await;
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(done.end_reason, Some(EndReason::Stopped));
    assert_eq!(done.exit, None, "{done:?}");
    assert_eq!(done.last_exit.map(|l| l.exit.code), Some(3));
    assert_eq!(done.restart_count, 3);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let all = text(&f.agent.logs(&id, "").await, None);
    assert_eq!(all, "run 1\nrun 2\nrun 3\nrun 4\n", "no run after the stop");
}

#[tokio::test]
async fn on_failure_ends_on_success_always_does_not_and_each_run_has_its_timeout() {
    let f = fx("rp-policies", &backoff(100, 200));
    // OnFailure: a run that exits 0 is the last.
    let q = counting(&f.ctr, 0, RestartPolicy::OnFailure);
    f.agent.start(&q).await.expect("started");
    let done = f.agent.wait_final(&q.exec_id, T).await;
    assert_eq!(done.exit.map(|e| e.code), Some(0));
    assert_eq!((done.restart_count, done.last_exit), (0, None));
    // Always: exit 0 runs again, while the current run is the one `previous` is before.
    let q = counting(&f.ctr, 0, RestartPolicy::Always);
    f.agent.start(&q).await.expect("started");
    let mut starts = BTreeSet::new();
    until(&f, &q.exec_id, &mut starts, "2 restarts", |r| {
        r.restart_count >= 2
    })
    .await;
    let (s, v) = f.agent.signal(&q.exec_id, json!({"stop": true})).await;
    assert_eq!(s, 200, "{v}");
    let done = f.agent.wait_final(&q.exec_id, T).await;
    assert_eq!(done.end_reason, Some(EndReason::Stopped));
    // timeoutSeconds bounds each run: a run that times out is a failure, and runs again.
    let q = StartRequest {
        restart_policy: RestartPolicy::OnFailure,
        timeout_seconds: Some(1),
        grace_seconds: 0,
        ..req(&f.ctr, &["sleep", "100"])
    };
    f.agent.start(&q).await.expect("started");
    let r = until(
        &f,
        &q.exec_id,
        &mut starts,
        "a restart after a timeout",
        |r| r.restart_count >= 1,
    )
    .await;
    let last = r.last_exit.expect("lastExit");
    assert_eq!(last.end_reason, EndReason::TimedOut);
    assert!(last.exit.timed_out, "{last:?}");
    f.agent.signal(&q.exec_id, json!({"stop": true})).await;
    f.agent.wait_final(&q.exec_id, T).await;
}

#[tokio::test]
async fn an_agent_restart_during_a_back_off_neither_skips_nor_doubles_a_run() {
    let mut f = fx("rp-agent", &backoff(2000, 2000));
    let q = counting(&f.ctr, 1, RestartPolicy::OnFailure);
    let id = q.exec_id.clone();
    f.agent.start(&q).await.expect("started");
    let mut starts = BTreeSet::new();
    until(&f, &id, &mut starts, "the first back-off", |r| {
        r.backoff_until.is_some()
    })
    .await;
    f.agent.kill9();
    f.agent.spawn();
    let r = until(&f, &id, &mut starts, "the second back-off", |r| {
        r.restart_count == 1 && r.backoff_until.is_some()
    })
    .await;
    assert_eq!(r.last_exit.map(|l| l.exit.code), Some(1));
    let all = text(&f.agent.logs(&id, "").await, None);
    assert_eq!(all, "run 1\nrun 2\n");
    f.agent.signal(&id, json!({"stop": true})).await;
    let done = f.agent.wait_final(&id, T).await;
    assert_eq!(done.restart_count, 1);
}

/// VmRSS of a process, in KiB.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn dir_bytes(d: &std::path::Path) -> u64 {
    std::fs::read_dir(d)
        .map(|it| {
            it.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// 1,000 runs of `false` without a back-off: the supervisor's memory and the ledger do not
/// grow with the runs, and every run is counted.
#[tokio::test]
async fn a_crash_loop_of_a_thousand_runs_costs_nothing_that_grows() {
    let f = fx("rp-loop", &backoff(0, 0));
    let q = StartRequest {
        restart_policy: RestartPolicy::Always,
        ..req(&f.ctr, &["false"])
    };
    let id = q.exec_id.clone();
    f.agent.start(&q).await.expect("started");
    let ident: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            f.agent
                .state
                .join("procs")
                .join(&id)
                .join("supervisor.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let sup = ident["pid"].as_i64().unwrap() as i32;
    let began = Instant::now();
    let mut starts = BTreeSet::new();
    until(&f, &id, &mut starts, "10 restarts", |r| {
        r.restart_count >= 10
    })
    .await;
    let rss_10 = rss_kib(sup);
    let deadline = Instant::now() + Duration::from_secs(600);
    let r = loop {
        let r = f.agent.record(&id).await;
        if r.restart_count >= 1000 {
            break r;
        }
        assert!(Instant::now() < deadline, "1000 restarts: {r:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let took = began.elapsed();
    let rss_1000 = rss_kib(sup);
    let ledger = dir_bytes(&f.agent.state.join("procs").join(&id).join("log"));
    let record = std::fs::metadata(f.agent.state.join("records").join(format!("{id}.json")))
        .unwrap()
        .len();
    println!(
        "crash loop: {} restarts in {:.1} s ({:.1} ms each); supervisor RSS {rss_10} KiB after \
         10, {rss_1000} KiB after 1000; ledger {ledger} bytes; record {record} bytes",
        r.restart_count,
        took.as_secs_f64(),
        took.as_secs_f64() * 1000.0 / r.restart_count as f64
    );
    assert!(
        rss_1000 <= rss_10 + 256,
        "RSS grew: {rss_10} → {rss_1000} KiB"
    );
    assert!(ledger < 4096, "the ledger grew: {ledger} bytes");
    assert!(record < 4096, "the record grew: {record} bytes");
    let (s, v) = f.agent.signal(&id, json!({"stop": true})).await;
    assert_eq!(s, 200, "{v}");
    let done = f.agent.wait_final(&id, T).await;
    assert_eq!(done.end_reason, Some(EndReason::Stopped));
    // No cgroup of a run is left behind.
    let (_, list) = f.agent.get(&format!("/v1/processes/{id}")).await;
    assert_eq!(list["phase"], "Exited");
}

/// Readiness is judged anew for each run: ready in a run, not ready while the next waits, ready
/// again when it runs (a logMatch that every run prints).
#[tokio::test]
async fn each_run_is_judged_ready_anew() {
    let f = fx("rp-ready", &backoff(700, 700));
    let mut q = req(
        &f.ctr,
        &["sh", "-c", "sleep 0.3; echo up; sleep 0.7; exit 1"],
    );
    q.restart_policy = RestartPolicy::OnFailure;
    q.readiness =
        Some(serde_json::from_value(json!({"probe": {"logMatch": {"pattern": "^up$"}}})).unwrap());
    let id = q.exec_id.clone();
    f.agent.start(&q).await.expect("started");
    let mut seen = Vec::new();
    let mut starts = BTreeSet::new();
    until(&f, &id, &mut starts, "ready in the second run", |r| {
        let state = (r.restart_count, r.ready, r.backoff_until.is_some());
        if seen.last() != Some(&state) {
            seen.push(state);
        }
        r.restart_count == 1 && r.ready
    })
    .await;
    f.agent.signal(&id, json!({"stop": true})).await;
    f.agent.wait_final(&id, T).await;
    // (restarts, ready, backing off), in the order seen: the first run not ready then ready,
    // not ready during the back-off, then the second run's own verdict.
    let order: Vec<_> = seen
        .iter()
        .filter(|s| s.0 == 0)
        .map(|s| (s.1, s.2))
        .collect();
    assert_eq!(
        order,
        [(false, false), (true, false), (false, true)],
        "{seen:?}"
    );
    assert_eq!(seen.last(), Some(&(1, true, false)), "{seen:?}");
    assert!(
        seen.contains(&(1, false, false)),
        "not ready before its match: {seen:?}"
    );
}
