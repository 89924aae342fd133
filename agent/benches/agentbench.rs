//! Agent benchmarks on real runc containers, each side by side with its baseline in one run:
//!
//!   cargo bench -p sandbox-agent --bench agentbench            (as root; needs runc, busybox-static)
//!   AGENTBENCH_PROCS=1000 AGENTBENCH_ROUNDS=40 ... to change sizes
//!
//! 1. start → running: agent API call vs bare `runc exec -d` of the same argv, and the part of it
//!    that is the process's own cgroup (mkdir in every hierarchy + `runc exec --cgroup`).
//! 2. exit → record visible to a /v1/watch client, from the moment the process exits (pidfd).
//! 3. log capture from a fast writer vs a raw pipe → file copy of the same bytes.
//! 4. supervisor RSS/PSS with N concurrent sleeping processes, all supervised without error.
//! 5. stop of a 100-process tree until its cgroup is empty: agent stop (TERM to every member of
//!    the cgroup) vs `kill(-pgid, TERM)` of the same bare tree.
//! 6. agent CPU over 5 s with 200 idle log follows on one quiet process vs none.
#[path = "../tests/common/mod.rs"]
mod common;

use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use sandbox_wire::wire::Phase;
use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn p90(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[(v.len() * 9 / 10).min(v.len() - 1)]
}

/// What every part of the bench shares: one runc root, one container, one agent.
struct Bench {
    base: std::path::PathBuf,
    runc_root: std::path::PathBuf,
    ctr: Container,
    agent: Agent,
    rounds: usize,
    procs: usize,
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a test list
    }
    require_root();
    let base = base_dir("bench");
    let runc_root = base.join(uniq("runc"));
    let b = Bench {
        ctr: Container::start(&base, &runc_root, 0),
        agent: Agent::launch(&base, &runc_root, &[]),
        rounds: env_usize("AGENTBENCH_ROUNDS", 30),
        procs: env_usize("AGENTBENCH_PROCS", 1000),
        base,
        runc_root,
    };
    println!("# agentbench: rounds={} procs={}", b.rounds, b.procs);
    let bench_cgroups = start_to_running(&b).await;
    exit_to_record(&b).await;
    log_capture(&b).await;
    let (_ctr3, ids, start_all) = start_many(&b).await;
    supervisor_memory(&b, &ids, start_all).await;
    stop_all(&b, &ids).await;
    for cg in &bench_cgroups {
        cg.remove();
    }
    let ctr5 = tree_stop(&b).await;
    idle_follows(&b, &ctr5).await;
}

/// Part 1: start → running: the agent vs bare `runc exec -d`, and the own-cgroup part of it. The
/// bare cgroups are returned for removal once every process in them has ended.
async fn start_to_running(b: &Bench) -> Vec<sandbox_supervisor::cgroup::ProcessCgroup> {
    let Bench {
        base,
        runc_root,
        ctr,
        agent,
        rounds,
        ..
    } = b;
    let rounds = *rounds;
    let spec = base.join("bare-process.json");
    let mut process: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ctr.bundle.join("config.json")).unwrap()).unwrap();
    process["process"]["args"] = json!(["sleep", "30"]);
    std::fs::write(&spec, serde_json::to_vec(&process["process"]).unwrap()).unwrap();
    let (mut bare, mut via_agent, mut bare_cg) = (Vec::new(), Vec::new(), Vec::new());
    let mut started = Vec::new();
    let dirs = sandbox_supervisor::cgroup::container_dirs(
        runc_root.to_str().unwrap(),
        &ctr.id,
        ctr.init_pid(),
    )
    .unwrap();
    let mut bench_cgroups = Vec::new();
    for i in 0..rounds {
        let pidf = base.join(format!("bare-cg-{i}.pid"));
        let t = Instant::now();
        let cg = sandbox_supervisor::cgroup::ProcessCgroup::create(&dirs, &format!("bench-{i}"))
            .unwrap();
        let st = bare_exec(runc_root, &ctr.id, &spec, &pidf, Some(&cg.name));
        bare_cg.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(st.success());
        bench_cgroups.push(cg);

        let pidf = base.join(format!("bare-{i}.pid"));
        let t = Instant::now();
        let st = bare_exec(runc_root, &ctr.id, &spec, &pidf, None);
        bare.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(st.success());
        let q = req(ctr, &["sleep", "30"]);
        let t = Instant::now();
        let r = agent.start(&q).await.unwrap();
        via_agent.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(r.phase, Phase::Running);
        started.push(r.exec_id);
    }
    let (mb, ma, mc) = (
        median(&mut bare),
        median(&mut via_agent),
        median(&mut bare_cg),
    );
    println!("| start → running (median of {rounds}) | bare runc exec -d {mb:.1} ms | agent {ma:.1} ms | overhead {:.1} ms ({:.2}×) |", ma - mb, ma / mb);
    println!("| own cgroup at start (median of {rounds}) | bare runc exec -d {mb:.1} ms | mkdir + runc exec -d --cgroup {mc:.1} ms | cgroup part {:.1} ms |", mc - mb);
    for cg in &bench_cgroups {
        let _ = cg.kill_all();
    }
    for id in &started {
        let _ = agent
            .post(&format!("/v1/processes/{id}/signal"), &json!({"signal": 9}))
            .await;
    }

    bench_cgroups
}

/// Part 2: exit → record visible through the API (watch stream), measured from the exit itself.
async fn exit_to_record(b: &Bench) {
    let Bench {
        ctr, agent, rounds, ..
    } = b;
    let rounds = *rounds;
    let resp = agent.watch().await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    tokio::spawn(async move {
        let mut body = resp.bytes_stream();
        let mut buf = Vec::new();
        while let Some(Ok(chunk)) = body.next().await {
            let now = Instant::now();
            buf.extend_from_slice(&chunk);
            while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let v: serde_json::Value = serde_json::from_slice(&line).unwrap_or_default();
                if v["record"]["phase"] == "Exited" {
                    let _ = tx.send((
                        v["record"]["execId"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        now,
                    ));
                }
            }
        }
    });
    let mut lat = Vec::new();
    for _ in 0..rounds {
        let r = agent.start(&req(ctr, &["sleep", "0.3"])).await.unwrap();
        let fd = pidfd(r.host_pid.unwrap());
        let exited = tokio::task::spawn_blocking(move || {
            let mut p = [libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
                events: libc::POLLIN,
                revents: 0,
            }];
            // SAFETY: p is a valid pollfd array for the duration of the call.
            unsafe { libc::poll(p.as_mut_ptr(), 1, 10_000) };
            Instant::now()
        })
        .await
        .unwrap();
        loop {
            let (id, seen) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .unwrap()
                .unwrap();
            if id == r.exec_id {
                lat.push(seen.saturating_duration_since(exited).as_secs_f64() * 1e3);
                break;
            }
        }
    }
    let (m, p) = (median(&mut lat.clone()), p90(&mut lat));
    println!(
        "| exit → record seen by a watcher (median of {rounds}) | {m:.2} ms | p90 {p:.2} ms |"
    );
}

/// Part 3: Log capture throughput: the same writer, agent ledger vs raw pipe → file on the host.
async fn log_capture(b: &Bench) {
    let Bench {
        base,
        runc_root,
        agent,
        ..
    } = b;
    let mib = env_usize("AGENTBENCH_MIB", 256);
    let dd = format!("dd if=/dev/zero bs=65536 count={} 2>/dev/null", mib * 16);
    let raw_file = base.join("raw.out");
    let ctr2 = Container::start(base, runc_root, 0);
    let (mut raws, mut caps) = (Vec::new(), Vec::new());
    // Alternate the two, flushing dirty pages first, so neither pays for the other's writeback.
    for _ in 0..3 {
        let _ = Command::new("sync").status();
        let t = Instant::now();
        let st = Command::new("/bin/busybox")
            .args([
                "sh",
                "-c",
                &format!("{dd} | busybox cat > {}", raw_file.display()),
            ])
            .status()
            .unwrap();
        raws.push(mib as f64 / t.elapsed().as_secs_f64());
        assert!(st.success());
        assert_eq!(
            std::fs::metadata(&raw_file).unwrap().len(),
            (mib as u64) << 20
        );
        let _ = std::fs::remove_file(&raw_file);
        let _ = Command::new("sync").status();
        let t = Instant::now();
        let r = agent.start(&req(&ctr2, &["sh", "-c", &dd])).await.unwrap();
        let done = agent.wait_final(&r.exec_id, Duration::from_secs(600)).await;
        caps.push(mib as f64 / t.elapsed().as_secs_f64());
        assert_eq!(
            done.output.stdout_bytes,
            (mib as u64) << 20,
            "every byte captured"
        );
        let _ = agent
            .client
            .delete(agent.url(&format!("/v1/processes/{}", r.exec_id)))
            .bearer_auth(TOKEN)
            .send()
            .await;
    }
    let (rr, ar) = (median(&mut raws), median(&mut caps));
    println!("| log capture, {mib} MiB from dd (median of 3) | raw pipe→file {rr:.0} MiB/s | agent ledger {ar:.0} MiB/s | {:.0}% of raw |", 100.0 * ar / rr);
}

/// Part 4: Many concurrent sleeping processes, started 8 at a time in a container of their own
/// (which must outlive them: its drop ends them), their exec ids and the time it took (s).
async fn start_many(b: &Bench) -> (Container, Vec<String>, f64) {
    let Bench {
        base,
        runc_root,
        agent,
        procs,
        ..
    } = b;
    let procs = *procs;
    let ctr3 = Container::start(base, runc_root, 0);
    let t = Instant::now();
    let mut ids = Vec::new();
    let mut batch = Vec::new();
    for _ in 0..procs {
        let (c, url, q) = (
            agent.client.clone(),
            agent.url("/v1/processes"),
            req(&ctr3, &["sleep", "600"]),
        );
        batch.push(tokio::spawn(async move {
            let r = c
                .post(url)
                .bearer_auth(TOKEN)
                .json(&q)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let v: serde_json::Value = r.json().await.unwrap();
            (status, v)
        }));
        if batch.len() == 8 {
            for b in batch.drain(..) {
                let (s, v) = b.await.unwrap();
                assert_eq!((s, v["phase"].as_str()), (200, Some("Running")), "{v}");
                ids.push(v["execId"].as_str().unwrap().to_string());
            }
        }
    }
    for b in batch.drain(..) {
        let (s, v) = b.await.unwrap();
        assert_eq!((s, v["phase"].as_str()), (200, Some("Running")), "{v}");
        ids.push(v["execId"].as_str().unwrap().to_string());
    }
    (ctr3, ids, t.elapsed().as_secs_f64())
}

/// Part 4: The supervisors' memory with all of them running.
async fn supervisor_memory(b: &Bench, ids: &[String], start_all: f64) {
    let Bench { agent, procs, .. } = b;
    let procs = *procs;
    let (mut rss, mut pss) = (Vec::new(), Vec::new());
    for id in ids {
        let v: serde_json::Value = serde_json::from_slice(
            &std::fs::read(agent.state.join("procs").join(id).join("supervisor.json")).unwrap(),
        )
        .unwrap();
        let pid = v["pid"].as_i64().unwrap();
        let (r, p) = mem_kib(pid);
        rss.push(r as f64 / 1024.0);
        pss.push(p as f64 / 1024.0);
    }
    if let Some(id) = ids.first() {
        let v: serde_json::Value = serde_json::from_slice(
            &std::fs::read(agent.state.join("procs").join(id).join("supervisor.json")).unwrap(),
        )
        .unwrap();
        let rollup = std::fs::read_to_string(format!("/proc/{}/smaps_rollup", v["pid"])).unwrap();
        let pick: Vec<&str> = rollup
            .lines()
            .filter(|l| l.starts_with("Rss") || l.starts_with("Pss_") || l.starts_with("Anonymous"))
            .collect();
        println!(
            "# one supervisor: {}",
            pick.join(", ")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        );
        if std::env::var("AGENTBENCH_SMAPS").is_ok() {
            let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", v["pid"])).unwrap();
            let mut name = String::new();
            for l in smaps.lines() {
                if l.contains('-') && l.split_whitespace().count() >= 5 && !l.ends_with("kB") {
                    name = l.to_string();
                } else if let Some(r) = l.strip_prefix("Rss:") {
                    if r.trim() != "0 kB" {
                        println!("#   {} {}", r.trim(), name);
                    }
                }
            }
        }
    }
    let (_, list) = agent.get("/v1/processes").await;
    let running = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["phase"] == "Running")
        .count();
    assert!(running >= procs, "all supervised: {running}/{procs}");
    let agent_rss = mem_kib(agent.pid() as i64).0 as f64 / 1024.0;
    println!(
        "| {procs} concurrent sleeping processes | started in {start_all:.1} s, {running} Running | supervisor RSS median {:.2} MiB, max {:.2} MiB | PSS median {:.2} MiB | agent RSS {agent_rss:.1} MiB |",
        median(&mut rss.clone()),
        rss.iter().cloned().fold(0.0, f64::max),
        median(&mut pss),
    );
}

/// Part 4: Stop them all through the API and check each ended as Stopped.
async fn stop_all(b: &Bench, ids: &[String]) {
    let Bench { agent, procs, .. } = b;
    let procs = *procs;
    let mut stopped = 0;
    for chunk in ids.chunks(16) {
        let mut hs = Vec::new();
        for id in chunk {
            let (c, url) = (
                agent.client.clone(),
                agent.url(&format!("/v1/processes/{id}/signal")),
            );
            hs.push(tokio::spawn(async move {
                c.post(url)
                    .bearer_auth(TOKEN)
                    .json(&json!({"stop": true, "graceSeconds": 1}))
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            }));
        }
        for h in hs {
            assert_eq!(h.await.unwrap(), 200);
        }
    }
    for id in ids {
        let r = agent.wait_final(id, Duration::from_secs(120)).await;
        if r.end_reason == Some(sandbox_wire::wire::EndReason::Stopped) {
            stopped += 1;
        }
    }
    println!("| stop all {procs} | {stopped} ended Stopped |");
    assert_eq!(stopped, procs);
}

/// Part 5: Stop of a 100-process tree until its cgroup is empty: agent stop vs kill(-pgid).
async fn tree_stop(b: &Bench) -> Container {
    let Bench {
        base,
        runc_root,
        agent,
        ..
    } = b;
    let tree = "i=0; while [ $i -lt 100 ]; do sleep 300 & i=$((i+1)); done; wait";
    let ctr5 = Container::start(base, runc_root, 0);
    let dirs5 = sandbox_supervisor::cgroup::container_dirs(
        runc_root.to_str().unwrap(),
        &ctr5.id,
        ctr5.init_pid(),
    )
    .unwrap();
    let (mut killpg, mut via_stop, mut to_record) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..5 {
        // Baseline: the bare tree in a cgroup of its own, ended by signalling its process group.
        let cg =
            sandbox_supervisor::cgroup::ProcessCgroup::create(&dirs5, &format!("bench-tree-{i}"))
                .unwrap();
        let pidf = base.join(format!("tree-{i}.pid"));
        let st = Command::new(runc())
            .arg("--root")
            .arg(runc_root)
            .args(["exec", "-d", "--cgroup", &cg.name, "--pid-file"])
            .arg(&pidf)
            .arg(&ctr5.id)
            .args(["sh", "-c", tree])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
        wait_members(|| cg.members().len(), 101);
        let pgid: i32 = std::fs::read_to_string(&pidf)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let t = Instant::now();
        // SAFETY: kill(2) of the tree's process group (pgid > 1, read from runc's pid file).
        assert_eq!(unsafe { libc::kill(-pgid, libc::SIGTERM) }, 0);
        while !cg.is_empty() {
            std::thread::sleep(Duration::from_micros(200));
        }
        killpg.push(t.elapsed().as_secs_f64() * 1e3);
        cg.remove();

        let r = agent.start(&req(&ctr5, &["sh", "-c", tree])).await.unwrap();
        let events = dirs5[""]
            .join(format!("sandbox-{}", r.exec_id))
            .join("cgroup.events");
        let procs_file = events.with_file_name("cgroup.procs");
        let count = || {
            std::fs::read_to_string(&procs_file)
                .map(|t| t.lines().count())
                .unwrap_or(0)
        };
        wait_members(count, 101);
        let t = Instant::now();
        let (s, _) = agent
            .signal(&r.exec_id, json!({"stop": true, "graceSeconds": 5}))
            .await;
        assert_eq!(s, 200);
        while std::fs::read_to_string(&events).is_ok_and(|e| e.contains("populated 1")) {
            std::thread::sleep(Duration::from_micros(200));
        }
        via_stop.push(t.elapsed().as_secs_f64() * 1e3);
        let done = agent.wait_final(&r.exec_id, Duration::from_secs(30)).await;
        to_record.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(
            done.end_reason,
            Some(sandbox_wire::wire::EndReason::Stopped)
        );
    }
    println!(
        "| stop of a 100-process tree → cgroup empty (median of 5) | kill(-pgid, TERM) {:.1} ms | agent stop {:.1} ms | final record {:.1} ms |",
        median(&mut killpg),
        median(&mut via_stop),
        median(&mut to_record)
    );

    ctr5
}

/// Part 6: Agent CPU with 200 idle follows on one quiet process vs none.
async fn idle_follows(b: &Bench, ctr5: &Container) {
    let agent = &b.agent;
    let quiet = agent.start(&req(ctr5, &["sleep", "600"])).await.unwrap();
    let hz = 100.0; // USER_HZ
    let t = cpu_ticks(agent.pid());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let none = (cpu_ticks(agent.pid()) - t) as f64 / hz / 5.0 * 100.0;
    let mut held = Vec::new();
    for _ in 0..200 {
        let r = agent
            .client
            .get(agent.url(&format!("/v1/processes/{}/logs?follow=true", quiet.exec_id)))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        held.push(r);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = cpu_ticks(agent.pid());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let with = (cpu_ticks(agent.pid()) - t) as f64 / hz / 5.0 * 100.0;
    println!("| agent CPU over 5 s, one quiet process | no follows {none:.1} % | 200 idle follows {with:.1} % |");
    drop(held);
}

/// `runc exec -d` of a process spec, optionally into a sub-cgroup, as the bench's baseline.
fn bare_exec(
    runc_root: &std::path::Path,
    id: &str,
    spec: &std::path::Path,
    pid_file: &std::path::Path,
    cgroup: Option<&str>,
) -> std::process::ExitStatus {
    let mut cmd = Command::new(runc());
    cmd.arg("--root").arg(runc_root).args(["exec", "-d"]);
    if let Some(c) = cgroup {
        cmd.args(["--cgroup", c]);
    }
    cmd.arg("--pid-file")
        .arg(pid_file)
        .arg("--process")
        .arg(spec)
        .arg(id)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
}

fn wait_members(count: impl Fn() -> usize, n: usize) {
    let until = Instant::now() + Duration::from_secs(30);
    while count() < n {
        assert!(
            Instant::now() < until,
            "tree of {n} not started: {}",
            count()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn pidfd(pid: i32) -> OwnedFd {
    sandbox_node_protocol::wait::pidfd_open(pid).unwrap_or_else(|e| panic!("pidfd_open {pid}: {e}"))
}

fn mem_kib(pid: i64) -> (u64, u64) {
    let mut s = String::new();
    std::fs::File::open(format!("/proc/{pid}/smaps_rollup"))
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    let field = |name: &str| {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (field("Rss:"), field("Pss:"))
}
