//! The heap the operator holds per SandboxProcess besides its cached copy (cache_heap.rs), each
//! structure driven through the code the operator runs, counted by a counting global allocator
//! (its own test binary, one test, a current-thread runtime, so nothing else allocates meanwhile).
//! `cargo test -p sandbox-operator --test perobj_heap -- --nocapture` prints bytes per object.
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::{reflector, watcher};
use sandbox_api::crd::SandboxProcess;
use sandbox_api::wire::{self, ProcessRecord, WatchEvent};
use sandbox_operator::agent::{AgentClient, Agents, Cached};
use sandbox_operator::reconcile::memo::Memo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

mod common;
use common::live;

const N: usize = 2_000;

/// Heap per object since `before`.
fn per_object(before: isize) -> isize {
    (live() - before) / N as isize
}

fn uid(i: usize) -> String {
    format!("62e083ae-0199-4553-8a1e-948d5244{i:04x}")
}

/// What the controller keys an object by (name, namespace, uid, resourceVersion); the rest of a
/// cached object is cache_heap's.
fn object(i: usize) -> SandboxProcess {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "sandbox.dev/v1alpha1", "kind": "SandboxProcess",
        "metadata": {"name": format!("p-{i:05}"), "namespace": "spo-bench", "uid": uid(i),
            "resourceVersion": format!("{}", 100_000 + i)},
        "spec": {"command": ["true"], "podName": "bench-3"},
    }))
    .unwrap()
}

/// The memo of N objects started at once, then all final: (while running, after).
fn memo_burst() -> (isize, isize) {
    let uids: Vec<String> = (0..N).map(uid).collect();
    let m = Memo::default();
    let before = live();
    for u in &uids {
        m.start_sent(
            u,
            "156960e2-4b5e-49a5-81e2-04a139ba57f5",
            ("spo-bench", "s0-00001"),
        );
        m.start_written(u);
        m.output_written(u);
    }
    let running = per_object(before);
    for u in &uids {
        m.ended(u);
        m.judge_copy(u, true, true);
    }
    assert!(m.is_empty());
    (running, per_object(before))
}

/// kube-runtime's controller (scheduler, runner) with N objects triggered at once, each
/// requeued in 300 s (a Running object's look-again), then all triggered again and final:
/// (running, after all final). The store is filled before counting.
async fn controller_heap() -> (isize, isize) {
    let objects: Vec<SandboxProcess> = (0..N).map(object).collect();
    let (store, mut writer) = reflector::store::<SandboxProcess>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in &objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(o.clone()));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<SandboxProcess, watcher::Error>>();
    let ended = Arc::new(AtomicBool::new(false));
    let before = live();
    let results = Controller::for_stream(rx, store)
        .with_config(controller::Config::default().concurrency(16))
        .run(
            |_, ended: Arc<AtomicBool>| async move {
                Ok::<_, Infallible>(if ended.load(Ordering::Relaxed) {
                    Action::await_change()
                } else {
                    Action::requeue(Duration::from_secs(300))
                })
            },
            |_, _, _| Action::await_change(),
            ended.clone(),
        );
    let mut results = Box::pin(results);
    let mut pass = async |tx: &futures::channel::mpsc::UnboundedSender<_>| {
        for o in &objects {
            tx.unbounded_send(Ok(o.clone())).unwrap();
        }
        for _ in 0..N {
            results.next().await.unwrap().unwrap();
        }
        // Let the requeues reach the scheduler.
        tokio::time::timeout(Duration::from_millis(200), results.next())
            .await
            .ok();
    };
    pass(&tx).await;
    let running = per_object(before);
    ended.store(true, Ordering::Relaxed);
    pass(&tx).await;
    (running, per_object(before))
}

/// A final record as an agent sends it (empty output tail).
fn record(i: usize) -> ProcessRecord {
    ProcessRecord {
        phase: wire::Phase::Exited,
        pid: Some(49),
        host_pid: Some(123_456),
        started_at: Some("2026-12-05T10:00:01.123456Z".into()),
        finished_at: Some("2026-12-05T10:00:01.234567Z".into()),
        exit: Some(wire::ExitStatus {
            code: 0,
            signal: None,
            timed_out: false,
        }),
        revision: 4,
        ..ProcessRecord::starting(
            &uid(i),
            "156960e2-4b5e-49a5-81e2-04a139ba57f5",
            "main",
            "containerd://23d745860acc3cd787a12508ccdd8ab7f4cdf56f12b03cc403a8cc39f5ebc964",
        )
    }
}

/// One agent (a local HTTP server) whose `/v1/watch` sends `synced`, then on `go` N final
/// records (as each process ends), and then keeps the stream open.
async fn agent(listener: tokio::net::TcpListener, go: tokio::sync::oneshot::Receiver<()>) {
    let (mut sock, _) = listener.accept().await.unwrap();
    let mut req = [0u8; 4096];
    let _ = sock.read(&mut req).await.unwrap();
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\nconnection: close\r\n\r\n";
    sock.write_all(head.as_bytes()).await.unwrap();
    sock.write_all(b"{\"type\":\"synced\"}\n").await.unwrap();
    go.await.unwrap();
    for i in 0..N {
        let ev = WatchEvent::Upsert {
            record: Box::new(record(i)),
        };
        let line = serde_json::to_string(&ev).unwrap() + "\n";
        sock.write_all(line.as_bytes()).await.unwrap();
    }
    std::future::pending::<()>().await;
}

/// The agent watch cache (`Agents`, over a real watch stream): N final records, then all
/// released as their final statuses are written: (records, after release).
async fn agent_watch_heap() -> (isize, isize) {
    let token = std::env::temp_dir().join(format!("perobj-token-{}", std::process::id()));
    std::fs::write(&token, "t").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (go, wait) = tokio::sync::oneshot::channel();
    tokio::spawn(agent(listener, wait));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let client = AgentClient::plain(token.clone()).unwrap();
    let agents = Agents::new(client, Some(url.clone()), None, 0, tx);
    // The controller hears of changes only while this replica leads.
    agents.begin_leading();
    tokio::spawn(agents.clone().run_watches());
    while agents.cached(&url, "x") != Cached::Absent {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = live();
    go.send(()).unwrap();
    for _ in 0..N {
        rx.recv().await.unwrap();
    }
    let last = uid(N - 1);
    while agents.cached(&url, &last) == Cached::Absent {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let records = per_object(before);
    for i in 0..N {
        agents.release(&uid(i));
    }
    let _ = std::fs::remove_file(token);
    (records, per_object(before))
}

/// A `HashSet<String>` of N object UIDs: about what `released` holds (and a watch's `seen` set
/// held, before records carried the pass that sent them).
fn uid_set() -> isize {
    let before = live();
    let s: std::collections::HashSet<String> = (0..N).map(uid).collect();
    let per = per_object(before);
    drop(s);
    per
}

#[test]
fn heap_per_object_besides_the_cached_copy() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (memo_running, memo_final) = memo_burst();
    let (ctl_running, ctl_final) = rt.block_on(controller_heap());
    let (records, released) = rt.block_on(agent_watch_heap());
    let set = uid_set();
    println!("bytes of heap per object, N = {N}:");
    println!("  memo, started at once:                 {memo_running}");
    println!("  memo, all final (capacity kept):       {memo_final}");
    println!("  controller, all requeued in 300 s:     {ctl_running}");
    println!("  controller, all final (capacity kept): {ctl_final}");
    println!("  agent watch cache, final records:      {records}");
    println!("  agent watch, all released:             {released}");
    println!("  (one HashSet<String> of UIDs:          {set})");
    // A burst's tables are given back once their objects are final (memo.rs, ShrinkSparse):
    // 313 and 1,436 bytes before; 307 with the watch's `seen` set.
    assert!(memo_final < 64, "memo: {memo_final} bytes per final object");
    assert!(
        released < 280,
        "agent watch: {released} bytes per final object"
    );
}
