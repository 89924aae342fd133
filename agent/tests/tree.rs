//! A process is its whole tree: its own cgroup under the container's, Running until the last
//! member ends, the whole tree ended by stop/timeout/a lost supervisor, per-process limits and
//! usage. Real runc containers (hybrid cgroups on the test machine).
mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use sandbox_wire::wire::{EndReason, ErrorCode, Phase, ResourceLimits};
use serde_json::json;

const T: Duration = Duration::from_secs(30);

fn fx_mem(memory: Option<u64>) -> Fx {
    Fx::edited("tree", 0, memory, &[], |_| {})
}

fn fx() -> Fx {
    fx_mem(None)
}

/// Every process in the container's cgroup tree except its init (what `ps` in the pod would
/// show besides the main process).
fn container_extra_procs(c: &Container) -> Vec<i32> {
    let init = c.init_pid();
    let mut out = Vec::new();
    let root = PathBuf::from("/sys/fs/cgroup/pids/spo-agent-test").join(&c.id);
    let mut dirs = vec![root];
    while let Some(d) = dirs.pop() {
        if let Ok(t) = std::fs::read_to_string(d.join("cgroup.procs")) {
            out.extend(t.lines().filter_map(|l| l.parse::<i32>().ok()));
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            dirs.extend(rd.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()));
        }
    }
    out.retain(|p| *p != init);
    out
}

fn process_cgroups(c: &Container, id: &str) -> Vec<PathBuf> {
    ["pids", "memory", "cpu", "unified", "freezer"]
        .iter()
        .map(|h| {
            PathBuf::from(format!("/sys/fs/cgroup/{h}/spo-agent-test"))
                .join(&c.id)
                .join(format!("sandbox-{id}"))
        })
        .filter(|p| p.exists())
        .collect()
}

#[tokio::test]
async fn running_until_the_last_member_ends_with_the_roots_code() {
    let f = fx();
    let t0 = Instant::now();
    let r = f
        .agent
        .start(&req(&f.ctr, &["sh", "-c", "sleep 3 & exit 7"]))
        .await
        .unwrap();
    assert!(
        !process_cgroups(&f.ctr, &r.exec_id).is_empty(),
        "the process has its own cgroup under the container's"
    );
    let mid = f
        .agent
        .wait_for(&r.exec_id, T, "root exited", |r| r.root_exited)
        .await;
    assert_eq!(mid.phase, Phase::Running, "{mid:?}");
    assert_eq!(mid.processes, Some(1), "the sleep is still there: {mid:?}");
    assert!(mid.exit.is_none(), "no exit before the tree ends: {mid:?}");
    let r = f.agent.wait_final(&r.exec_id, T).await;
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(2500),
        "ended after {waited:?}"
    );
    // Seen when the last member ends (the kernel wakes the supervisor), not at a later refresh.
    assert!(
        waited < Duration::from_millis(4500),
        "ended after {waited:?}"
    );
    let exit = r.exit.clone().unwrap();
    assert_eq!((exit.code, exit.signal), (7, None), "{r:?}");
    assert_eq!(r.end_reason, Some(EndReason::Exited));
    assert!(!r.root_exited && r.processes == Some(0), "{r:?}");
    assert!(
        process_cgroups(&f.ctr, &r.exec_id).is_empty(),
        "the cgroup is removed at the end"
    );
}

#[tokio::test]
async fn stop_ends_a_daemonized_tree() {
    let f = fx();
    // setsid + double fork: the daemon leaves the session and the process group.
    let r = f
        .agent
        .start(&req(
            &f.ctr,
            &[
                "sh",
                "-c",
                "setsid sh -c '(sleep 300 &); sleep 300' </dev/null >/dev/null 2>&1 & sleep 300",
            ],
        ))
        .await
        .unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while container_extra_procs(&f.ctr).len() < 3 {
        assert!(
            Instant::now() < until,
            "{:?}",
            container_extra_procs(&f.ctr)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t0 = Instant::now();
    let (s, _) = f
        .agent
        .signal(&r.exec_id, json!({"stop": true, "graceSeconds": 5}))
        .await;
    assert_eq!(s, 200);
    let r = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(r.end_reason, Some(EndReason::Stopped), "{r:?}");
    assert_eq!(r.exit.unwrap().signal, Some(15));
    assert!(t0.elapsed() < Duration::from_secs(3), "TERM was enough");
    assert_eq!(container_extra_procs(&f.ctr), Vec::<i32>::new());
}

#[tokio::test]
async fn timeout_ends_a_daemonized_grandchild() {
    let f = fx();
    let mut q = req(
        &f.ctr,
        &[
            "sh",
            "-c",
            "setsid sh -c 'trap \"\" TERM; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & exit 0",
        ],
    );
    q.timeout_seconds = Some(2);
    q.grace_seconds = 1;
    let r = f.agent.start(&q).await.unwrap();
    let r = f.agent.wait_final(&r.exec_id, T).await;
    let exit = r.exit.clone().unwrap();
    assert!(exit.timed_out, "{r:?}");
    assert_eq!(r.end_reason, Some(EndReason::TimedOut));
    assert_eq!(exit.code, 0, "the root's own code: {r:?}");
    assert_eq!(container_extra_procs(&f.ctr), Vec::<i32>::new());
}

#[tokio::test]
async fn forget_while_a_tree_runs_leaves_nothing() {
    let f = fx();
    let r = f
        .agent
        .start(&req(
            &f.ctr,
            &[
                "sh",
                "-c",
                "setsid sleep 300 </dev/null >/dev/null 2>&1 & exit 0",
            ],
        ))
        .await
        .unwrap();
    f.agent
        .wait_for(&r.exec_id, T, "root exited", |r| r.root_exited)
        .await;
    let resp = f
        .agent
        .client
        .delete(f.agent.url(&format!("/v1/processes/{}", r.exec_id)))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    assert_eq!(container_extra_procs(&f.ctr), Vec::<i32>::new());
}

#[tokio::test]
async fn memory_limit_kills_only_the_tree() {
    let f = fx();
    let other = f
        .agent
        .start(&req(&f.ctr, &["sleep", "300"]))
        .await
        .unwrap();
    let mut q = req(
        &f.ctr,
        &["dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1"],
    );
    q.resources = Some(ResourceLimits {
        memory_bytes: Some(32 << 20),
        ..Default::default()
    });
    let r = f.agent.start(&q).await.unwrap();
    let r = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(r.end_reason, Some(EndReason::OOMKilled), "{r:?}");
    assert_eq!(r.exit.unwrap().signal, Some(9));
    let peak = r.usage.unwrap().memory_peak_bytes;
    assert!(
        peak > 16 << 20 && peak <= 32 << 20,
        "peak {peak} near the 32 MiB limit"
    );
    assert_eq!(f.agent.record(&other.exec_id).await.phase, Phase::Running);
    assert!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(f.ctr.init_pid()), None).is_ok());
}

#[tokio::test]
async fn pids_limit_bounds_a_fork_loop() {
    let f = fx();
    let mut q = req(
        &f.ctr,
        &[
            "sh",
            "-c",
            "n=0; while [ $n -lt 40 ]; do sleep 3 & n=$((n+1)); done; wait; echo done",
        ],
    );
    q.resources = Some(ResourceLimits {
        pids: Some(10),
        ..Default::default()
    });
    let r = f.agent.start(&q).await.unwrap();
    let mut most = 0;
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        most = most.max(
            process_cgroups(&f.ctr, &r.exec_id)
                .iter()
                .find(|p| p.starts_with("/sys/fs/cgroup/pids"))
                .and_then(|p| std::fs::read_to_string(p.join("pids.current")).ok())
                .and_then(|s| s.trim().parse::<u32>().ok())
                .unwrap_or(0),
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!((5..=10).contains(&most), "tasks at most {most}");
    let r = f.agent.wait_final(&r.exec_id, T).await;
    let all = text(&f.agent.logs(&r.exec_id, "").await, None);
    assert!(all.contains("fork"), "the shell saw fork fail: {all}");
}

#[tokio::test]
async fn cpu_limit_caps_a_busy_loop() {
    let f = fx();
    let mut q = req(&f.ctr, &["sh", "-c", "while :; do :; done"]);
    q.timeout_seconds = Some(5);
    q.grace_seconds = 0;
    q.resources = Some(ResourceLimits {
        cpu_millis: Some(200),
        ..Default::default()
    });
    let r = f.agent.start(&q).await.unwrap();
    let r = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(r.end_reason, Some(EndReason::TimedOut));
    let cpu = r.usage.unwrap().cpu_nanos as f64 / 1e9;
    assert!(
        (0.7..=1.3).contains(&cpu),
        "200m over 5 s ≈ 1 CPU second: {cpu}"
    );
}

#[tokio::test]
async fn limits_above_the_containers_are_refused_by_name() {
    let f = fx_mem(Some(32 << 20));
    let mut q = req(&f.ctr, &["true"]);
    q.resources = Some(ResourceLimits {
        memory_bytes: Some(64 << 20),
        ..Default::default()
    });
    let r = match f.agent.start(&q).await {
        Ok(r) => f.agent.wait_final(&r.exec_id, T).await,
        Err(e) => panic!("{e:?}"),
    };
    assert_eq!(r.phase, Phase::Error);
    let e = r.error.unwrap();
    assert_eq!(e.code, ErrorCode::InvalidResourceLimits);
    assert!(
        e.message.contains("resources.limits.memory") && e.message.contains("33554432"),
        "{}",
        e.message
    );
    assert!(process_cgroups(&f.ctr, &r.exec_id).is_empty());
    assert!(r.started_at.is_none(), "nothing ran");
}

#[tokio::test]
async fn agent_killed_while_the_root_is_gone_keeps_the_exact_code() {
    let mut f = fx();
    let r = f
        .agent
        .start(&req(&f.ctr, &["sh", "-c", "sleep 3 & exit 5"]))
        .await
        .unwrap();
    f.agent
        .wait_for(&r.exec_id, T, "root exited", |r| r.root_exited)
        .await;
    f.agent.kill9();
    f.agent.spawn();
    f.agent.client = reqwest::Client::new(); // pooled connections died with the agent
    let r = f.agent.wait_final(&r.exec_id, T).await;
    let exit = r.exit.unwrap();
    assert_eq!((exit.code, exit.signal), (5, None));
    assert_eq!(r.end_reason, Some(EndReason::Exited));
}

#[tokio::test]
async fn a_lost_supervisor_leaves_no_process_behind() {
    let f = fx();
    let r = f
        .agent
        .start(&req(&f.ctr, &["sh", "-c", "sleep 300 & sleep 300"]))
        .await
        .unwrap();
    let sup: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            f.agent
                .state
                .join("procs")
                .join(&r.exec_id)
                .join("supervisor.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let pid = sup["pid"].as_i64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let r = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(r.error.as_ref().unwrap().code, ErrorCode::ProcessLost);
    assert!(
        r.error.unwrap().message.contains("killed"),
        "the record says the tree was ended"
    );
    let until = Instant::now() + Duration::from_secs(10);
    while !container_extra_procs(&f.ctr).is_empty() {
        assert!(
            Instant::now() < until,
            "{:?}",
            container_extra_procs(&f.ctr)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let until = Instant::now() + Duration::from_secs(5);
    while !process_cgroups(&f.ctr, &r.exec_id).is_empty() {
        assert!(Instant::now() < until, "cgroup left behind");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The node layouts this machine does not have, on its real kernel: the same container's
/// cgroups with only the v1 hierarchies (pure v1: membership from `cgroup.procs`, kill by
/// freeze + SIGKILL + thaw), and with only the v2 one (pure v2: `cgroup.events`, `cgroup.kill`;
/// a limit needs a controller the container's cgroup cannot delegate while it holds processes).
#[test]
fn pure_v1_and_pure_v2_layouts_on_this_kernel() {
    use sandbox_supervisor::cgroup::{container_dirs, ProcessCgroup};
    require_root();
    let base = base_dir("tree");
    let runc_root = base.join(uniq("runc"));
    let ctr = Container::start(&base, &runc_root, 0);
    let all = container_dirs(runc_root.to_str().unwrap(), &ctr.id, ctr.init_pid()).unwrap();
    assert!(
        all.contains_key("") && all.contains_key("freezer"),
        "{all:?}"
    );
    // runc joins every hierarchy it knows, so the tree is started on the host: a shell that
    // enters the cgroup's directories itself, then becomes the tree (children inherit them).
    let run_tree = |cg: &ProcessCgroup| {
        let mut cmd = std::process::Command::new("/bin/busybox");
        cmd.args(["sh", "-c"])
            .arg("for f in \"$@\"; do echo $$ > \"$f\"; done; exec /bin/busybox sh -c \"/bin/busybox setsid /bin/busybox sleep 300 & /bin/busybox sleep 300 & trap '' TERM; /bin/busybox sleep 300\"")
            .arg("sh")
            .args(cg.dirs.iter().map(|(_, d)| d.join("cgroup.procs")))
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    for (layout, keep_v2) in [("v1", false), ("v2", true)] {
        let dirs = all
            .iter()
            .filter(|(k, _)| k.is_empty() == keep_v2)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let cg = ProcessCgroup::create(&dirs, &format!("sandbox-{}", uniq(layout))).unwrap();
        assert_eq!(cg.events_file().is_some(), keep_v2, "{layout}");
        assert!(cg.is_empty(), "{layout}: new and empty");
        let mut root = run_tree(&cg);
        let until = Instant::now() + Duration::from_secs(5);
        while cg.members().len() < 3 {
            assert!(Instant::now() < until, "{layout}: {:?}", cg.members());
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!cg.is_empty(), "{layout}");
        let t = Instant::now();
        cg.kill_all().unwrap();
        while !cg.is_empty() {
            assert!(
                t.elapsed() < Duration::from_secs(2),
                "{layout}: {:?}",
                cg.members()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = root.wait();
        if keep_v2 {
            let e = cg
                .apply(&ResourceLimits {
                    memory_bytes: Some(64 << 20),
                    ..Default::default()
                })
                .unwrap_err();
            assert_eq!(e.field, "resources.limits.memory");
            assert!(e.message.contains("memory controller"), "{e}");
        } else {
            cg.apply(&ResourceLimits {
                memory_bytes: Some(64 << 20),
                cpu_millis: Some(500),
                pids: Some(20),
            })
            .unwrap();
            let file = |h: &str, f: &str| {
                let d = &cg.dirs.iter().find(|(k, _)| k == h).unwrap().1;
                std::fs::read_to_string(d.join(f))
                    .unwrap()
                    .trim()
                    .to_string()
            };
            assert_eq!(
                file("memory", "memory.limit_in_bytes"),
                (64u64 << 20).to_string()
            );
            assert_eq!(file("cpu", "cpu.cfs_quota_us"), "50000");
            assert_eq!(file("pids", "pids.max"), "20");
            assert!(
                cg.usage().memory_peak_bytes > 0,
                "{layout}: the tree's use is seen"
            );
        }
        assert_eq!(cg.remove(), Vec::<PathBuf>::new(), "{layout}");
    }
}
