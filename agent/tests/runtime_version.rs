//! Asking the runtime its version while the agent reaps every exited child of its own (as it
//! does for supervisors): the answer must not depend on who collects the exit status. (The
//! first version waited for the child and failed with ECHILD when the reaper had been faster:
//! found by e2e/suites/suite, where a start then failed.)
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sandbox_agent::spawn::{reap_exited, runtime_version, HostNamespace, SpawnConfig};

#[test]
fn the_version_is_read_whoever_reaps_the_child() {
    let runc = std::env::var("RUNC").unwrap_or_else(|_| "/usr/sbin/runc".into());
    let cfg = SpawnConfig {
        supervisor_bin: "/nonexistent".into(),
        namespace: HostNamespace::Own,
        cgroup: None,
        cgroup_root: None,
        limits: Default::default(),
    };
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
    for i in 0..30 {
        let out = runtime_version(&cfg, &runc).unwrap_or_else(|e| panic!("round {i}: {e}"));
        assert!(out.starts_with("runc version"), "round {i}: {out:?}");
    }
    stop.store(true, Ordering::Relaxed);
    reaper.join().unwrap();
}
