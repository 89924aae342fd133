//! The heap the agent holds per record, counted by a counting global allocator (its own test
//! binary, one test, a current-thread runtime, so nothing else allocates meanwhile), through the
//! code the agent runs: records written by "supervisors" into the state dir and taken in by the
//! registry's watch of it, then forgotten as the operator forgets them, in waves. What is held
//! must follow the records present, not the history: after each wave is forgotten the heap
//! returns to where it was. `cargo test -p sandbox-agent --test record_heap -- --nocapture`
//! prints bytes per record.
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sandbox_agent::registry::{Config, Registry};
use sandbox_agent::runtime::{runc_state::RuncStateLookup, Lookup};
use sandbox_agent::spawn::{HostNamespace, SpawnConfig};
use sandbox_memory::counting::{live, Counting};
use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::layout::Layout;
use sandbox_node_protocol::record;
use sandbox_wire::wire::{EndReason, ExitStatus, Phase, ProcessObject, ProcessRecord};

#[global_allocator]
static GLOBAL: Counting = Counting;

const N: usize = 4_000;
const WAVES: usize = 3;

fn config(state: &Path) -> Config {
    Config {
        layout: Layout::new(state),
        lookup: Lookup::RuncState(RuncStateLookup {
            root: state.join("runc"),
        }),
        spawn: SpawnConfig {
            supervisor_bin: "/nonexistent".into(),
            namespace: HostNamespace::Own,
            cgroup: None,
            cgroup_root: None,
            limits: Default::default(),
        },
        runtime_binary: "/nonexistent".into(),
        default_runtime_root: state.join("runc").display().to_string(),
        retention_bytes: 64 << 20,
        runtime_timeout_ms: 60_000,
        backoff: Default::default(),
        proc_root: "/proc".into(),
        budget: sandbox_agent::budget::Budget {
            max_bytes: 1 << 30,
            finished_ttl: Duration::from_secs(3600),
        },
        budget_sweep: Duration::from_secs(3600),
        max_processes: 10_000,
        max_follows_per_process: 8,
        max_follows: 64,
        allow_vulnerable_runtime: true,
    }
}

/// The record a supervisor leaves for a `true` that ended: what every field holds in practice.
fn ended(wave: usize, i: usize) -> ProcessRecord {
    let id = format!("62e083ae-0199-4553-8a1e-{wave:02x}{i:010x}");
    let container_id = "9c91c57dc398c76f60471b9a7cf7cc8d91401f0cd08392bba844a2cb860872de";
    let mut r = ProcessRecord::starting(
        &id,
        "0d3f1e52-8b7a-4c55-9a41-3f0e5a2b7c19",
        "main",
        container_id,
    );
    r.phase = Phase::Exited;
    r.pid = Some(7);
    r.host_pid = Some(400_000 + i as i32);
    r.started_at = Some("2026-12-07T01:02:03.123456789Z".into());
    r.finished_at = Some("2026-12-07T01:02:03.133456789Z".into());
    r.exit = Some(ExitStatus {
        code: 0,
        signal: None,
        timed_out: false,
    });
    r.end_reason = Some(EndReason::Exited);
    r.output.stdout_bytes = 5;
    r.output.tail = "done\n".into();
    r.root_exited = true;
    r.revision = 3;
    r
}

/// The same, of a `processes` object: the record carries the object (what the operator's
/// create sends: its metadata and the spec as the user wrote it).
fn ended_object(wave: usize, i: usize) -> ProcessRecord {
    let mut r = ended(wave, i);
    r.object = Some(Box::new(ProcessObject {
        namespace: "spo-procbench".into(),
        name: format!("p-{i:06}"),
        creation_timestamp: "2026-12-07T01:02:03Z".into(),
        labels: Default::default(),
        annotations: Default::default(),
        pod_name: "bench".into(),
        node_name: "spo-e2e".into(),
        spec: serde_json::json!({"podName": "bench", "command": ["true"]}),
    }));
    r
}

/// Writes one wave's records as supervisors do (the proc dir, then the record), and waits for
/// the registry to hold them all.
async fn wave(reg: &Registry, layout: &Layout, w: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(N);
    for i in 0..N {
        // Odd waves: records of `processes` objects.
        let rec = if w % 2 == 1 {
            ended_object(w, i)
        } else {
            ended(w, i)
        };
        let id = ExecId::parse(&rec.exec_id).unwrap();
        std::fs::create_dir_all(layout.proc_dir(&id)).unwrap();
        record::write_json(&layout.record(&id), &rec, false).unwrap();
        ids.push(rec.exec_id);
        if i % 256 == 0 {
            tokio::task::yield_now().await; // let the watch take them in as they come
        }
    }
    for _ in 0..1000 {
        if reg.list().len() == N {
            return ids;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the registry holds {} of {N} records", reg.list().len());
}

#[tokio::test(flavor = "current_thread")]
async fn held_per_record_follows_the_records_not_the_history() {
    let dir = std::env::temp_dir().join(format!("spo-record-heap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = config(&dir);
    let layout = cfg.layout.clone();
    let reg: Arc<Registry> = Registry::open(cfg).await.unwrap();
    // Warm: what the first wave's code paths allocate once (the watch's buffers, the tables).
    let ids = wave(&reg, &layout, 99).await;
    for id in &ids {
        reg.forget(id).await.unwrap();
    }
    let base = live();
    let mut after = Vec::new();
    for w in 0..WAVES {
        let ids = wave(&reg, &layout, w).await;
        let held = (live() - base) / N as isize;
        for id in &ids {
            reg.forget(id).await.unwrap();
        }
        let left = live() - base;
        let kind = if w % 2 == 1 {
            "a Process's"
        } else {
            "a SandboxProcess's"
        };
        println!(
            "wave {w} ({kind}): {held} B per record held; {left} B left after all were forgotten"
        );
        assert!(held < 4_096, "wave {w}: {held} B per record");
        after.push(left);
    }
    let _ = std::fs::remove_dir_all(&dir);
    // What stays is the watch's ring of recent events (4,096, bounded: Deleted ones by now), not
    // a trace of each record: flat from wave to wave.
    let (first, last) = (after[0], *after.last().unwrap());
    assert!(first < 1 << 20, "left after a wave: {after:?}");
    assert!(last - first < 4_096, "grew with history: {after:?}");
}
