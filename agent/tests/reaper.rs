//! The agent reaps every exited child of its own (its supervisors) every 500 ms; nothing else it
//! starts may depend on who collects an exit status. Each test runs a reaper in a tight loop.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sandbox_agent::spawn::{
    reap_exited, runtime_version, spawn_supervisor, HostNamespace, SpawnConfig,
};
use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::layout::Layout;

/// Supervisors (here `bin`) started on this host, in the agent's own cgroup.
fn host(bin: &str) -> SpawnConfig {
    SpawnConfig {
        supervisor_bin: bin.into(),
        namespace: HostNamespace::Own,
        cgroup: None,
        cgroup_root: None,
        limits: Default::default(),
    }
}

/// Runs `f` while another thread reaps this process's children as fast as it can.
fn with_reaper<T>(f: impl FnOnce() -> T) -> T {
    let stop = Arc::new(AtomicBool::new(false));
    let reaper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                reap_exited();
                std::thread::yield_now();
            }
        })
    };
    let out = f();
    stop.store(true, Ordering::Relaxed);
    reaper.join().unwrap();
    out
}

/// Asking the runtime its version: the answer must not depend on who collects the exit status.
/// (The first version waited for the child and failed with ECHILD when the reaper had been
/// faster: found by e2e/suites/suite, where a start then failed.)
#[test]
fn the_version_is_read_whoever_reaps_the_child() {
    let runc = std::env::var("RUNC").unwrap_or_else(|_| "/usr/sbin/runc".into());
    let cfg = host("/nonexistent");
    with_reaper(|| {
        for i in 0..30 {
            let out = runtime_version(&cfg, &runc).unwrap_or_else(|e| panic!("round {i}: {e}"));
            assert!(out.starts_with("runc version"), "round {i}: {out:?}");
        }
    });
}

/// A supervisor's pidfd is opened before the reaper can collect it, even when it ends at once:
/// otherwise its pid is free and, after the node's pids wrapped, may name another process by the
/// time pidfd_open runs (the start then waits on, and judges the supervisor by, a stranger's
/// exit). Every "supervisor" here is `true`; without the lock about 110 of 500 were reaped first.
#[test]
fn a_supervisor_that_ends_at_once_is_watched_by_its_own_pidfd() {
    let dir = std::env::temp_dir().join(format!("spo-spawn-reap-{}", std::process::id()));
    let layout = Layout::new(&dir);
    layout.ensure().unwrap();
    let cfg = host("/bin/true");
    let unwatched = with_reaper(|| {
        (0..500)
            .filter(|i| {
                let id = ExecId::parse(&format!("reap-{i}")).unwrap();
                std::fs::create_dir_all(layout.proc_dir(&id)).unwrap();
                spawn_supervisor(&cfg, &layout, &id)
                    .unwrap()
                    .exits
                    .is_none()
            })
            .count()
    });
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        unwatched, 0,
        "supervisors reaped before their pidfd was open"
    );
}
