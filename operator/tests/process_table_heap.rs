//! The heap one ended `true` process holds in the `processes` table of a replica (issue 48: the
//! operator's RSS with 20,000 processes listed ≤ 64 MiB), counted by a counting global allocator
//! (its own test binary, one test). Each process as the agents' watch sends it: once running,
//! once exited; the table keeps its object as JSON and the window of latest changes.
//! Before the table read the spec and status from that JSON on demand, a process held ~5.4 KB
//! here (its JSON, its status and spec parsed, and the window's copies).

use sandbox_api::wire::{Phase, ProcessRecord};
use sandbox_operator::aggregated::processes::store::Store;

mod common;
use common::live;

/// A record of a `kubectl sandbox exec`-like process, in the wire form an agent's watch sends.
fn record(i: usize, phase: Phase) -> ProcessRecord {
    let mut r = serde_json::json!({
        "execId": format!("8d3c5a2e-6f1b-4c1e-9a7d-{i:012x}"),
        "podUid": "156960e2-4b5e-49a5-81e2-04a139ba57f5",
        "container": "sandbox",
        "containerId": "23d745860acc3cd787a12508ccdd8ab7f4cdf56f12b03cc403a8cc39f5ebc964",
        "phase": "Running", "pid": 100 + i, "hostPid": 40_000 + i,
        "startedAt": "2026-12-06T10:00:01Z", "revision": 2,
        "object": {
            "namespace": "spo-procbench", "name": format!("p-{i:06}"),
            "creationTimestamp": "2026-12-06T10:00:00Z", "podName": "bench", "nodeName": "spo-e2e",
            "spec": {"podName": "bench", "command": ["true"]},
        },
    });
    if phase == Phase::Exited {
        let end = serde_json::json!({
            "phase": "Exited", "revision": 3, "finishedAt": "2026-12-06T10:00:01Z",
            "exit": {"code": 0, "timedOut": false}, "endReason": "Exited",
        });
        for (k, v) in end.as_object().unwrap() {
            r[k] = v.clone();
        }
    }
    serde_json::from_value(r).expect("a record in its wire form")
}

#[test]
fn an_ended_process_in_the_table_holds_under_3_kib_of_heap() {
    // More than the window (4,096 changes), so its share per process is what it is at scale.
    const N: usize = 10_000;
    let running: Vec<ProcessRecord> = (0..N).map(|i| record(i, Phase::Running)).collect();
    let exited: Vec<ProcessRecord> = (0..N).map(|i| record(i, Phase::Exited)).collect();
    let store = Store::new(1_000);
    let before = live();
    for (r, e) in running.iter().zip(&exited) {
        store.upsert("https://10.0.0.1:9443", r);
        store.upsert("https://10.0.0.1:9443", e);
    }
    let per_process = (live() - before) / N as isize;
    let (items, _) = store.list();
    assert_eq!(items.len(), N);
    assert!(items.iter().all(|e| e.kept.ended));
    drop(items);
    println!("heap per ended process in the table: {per_process} bytes");
    assert!(
        per_process < 3 * 1024,
        "{per_process} bytes of heap per process in the table"
    );
}
