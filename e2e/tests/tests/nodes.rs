//! e2e/suites/nodes' checks that fault nothing, side by side on the 3-node cluster (`rust_tests nodes`):
//! one agent per node, routing of 30 processes over the nodes, the chart's NetworkPolicy, and
//! pods moved to another node while their starts are in flight. The faults are in
//! tests/nodes_faults.rs.
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use futures::future::join_all;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use sandbox_e2e::manifests::{sbp, sh};
use sandbox_e2e::nodes::{node_name, node_pod, records_of, row};
use sandbox_e2e::{cmd, field, release, with_ns, TestNs};
use serde_json::{json, Value};

/// Whether the pod's Ready condition is True.
fn ready(p: &Pod) -> String {
    let cs = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    let c = cs.and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    c.map_or_else(String::new, |c| c.status.clone())
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/nodes"]
async fn three_nodes_ready_with_one_agent_each() {
    with_ns("nodes-agents", |t| async move {
        println!("{}", cmd::kubectl(&["get", "nodes", "-o", "wide"]).await?);
        let nodes: Api<Node> = Api::all(t.client.clone());
        let agents = release::pods(&t.client, Some("agent")).await?;
        let mut bad = Vec::new();
        for k in 1..=3 {
            let n = node_name(k);
            let node = nodes.get(&n).await?;
            let conds = node.status.and_then(|s| s.conditions).unwrap_or_default();
            let r = conds
                .iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.status.clone());
            if r.as_deref() != Some("True") {
                bad.push(format!("node {n}: Ready {r:?}"));
            }
            let on: Vec<String> = agents
                .iter()
                .filter(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(n.as_str())
                })
                .map(ready)
                .collect();
            if on != ["True"] {
                bad.push(format!("agents on {n}: Ready {on:?}, expected one True"));
            }
        }
        ensure!(bad.is_empty(), "{}", bad.join("\n"));
        Ok(())
    })
    .await;
}

/// The pods of the routing check: rK-a by nodeName, rK-b by node affinity, on each node K.
fn routing_pods() -> Vec<Value> {
    let mut pods = Vec::new();
    for k in 1..=3 {
        pods.push(node_pod(&format!("r{k}-a"), k, false));
        pods.push(node_pod(&format!("r{k}-b"), k, true));
    }
    pods
}

/// What is wrong with route-I (run on pod POD of node K, exit 100 + I); '' when nothing.
async fn route_misses(t: &TestNs, i: i32, k: u8, pod: &str) -> Result<Vec<String>> {
    let name = format!("route-{i}");
    let o = t.until_field(&name, "/status/phase", "Exited", 90).await?;
    let (code, node, out) = (
        field(&o, "/status/exit/code"),
        field(&o, "/status/nodeName"),
        field(&o, "/status/output/tail"),
    );
    let mut bad = Vec::new();
    if code != (100 + i).to_string() {
        bad.push(format!("{name}: exit code {code}, expected {}", 100 + i));
    }
    if node != node_name(k) {
        bad.push(format!(
            "{name}: status.nodeName {node}, expected {}",
            node_name(k)
        ));
    }
    let p = t.api::<Pod>().get(pod).await?;
    if p.spec.and_then(|s| s.node_name).as_deref() != Some(node.as_str()) {
        bad.push(format!("{name}: not the pod's node"));
    }
    // The cgroup it ran in is below its node's kubelet cgroupRoot.
    let root = if k == 1 {
        ":pids:/spo-e2e/kubepods/".to_string()
    } else {
        format!(":pids:/spo-e2e/nodes/n{k}/kubepods/")
    };
    if !out.contains(&root) {
        bad.push(format!("{name} ran in cgroup '{out}', not node {k}'s"));
    }
    // Its ledger record is on its node's agent, and on no other.
    let id = out
        .lines()
        .find_map(|l| l.rsplit_once("/sandbox-").map(|(_, id)| id.to_string()));
    match id.filter(|id| !id.is_empty() && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-')) {
        None => bad.push(format!("{name}: no process id in '{out}'")),
        Some(id) => {
            let on = records_of(&id);
            if on != [k] {
                bad.push(format!(
                    "{name}: records of {id} on nodes {on:?}, expected [{k}]"
                ));
            }
        }
    }
    Ok(bad)
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/nodes"]
async fn thirty_processes_over_3_nodes_each_on_its_pods_node_and_agent_with_exact_codes() {
    with_ns("nodes-routing", |t| async move {
        t.pods(routing_pods()).await?;
        let mut runs = Vec::new();
        let mut i = 0;
        for k in 1..=3u8 {
            for p in ["a", "b"] {
                for _ in 0..5 {
                    i += 1;
                    let script = format!("grep -m1 pids: /proc/self/cgroup; exit {}", 100 + i);
                    let pod = format!("r{k}-{p}");
                    t.apply_sbp(sbp(&format!("route-{i}"), &pod, sh(&script, Value::Null)))
                        .await?;
                    runs.push((i, k, pod));
                }
            }
        }
        let mut bad = Vec::new();
        for (i, k, pod) in &runs {
            match route_misses(&t, *i, *k, pod).await {
                Ok(m) => bad.extend(m),
                Err(e) => bad.push(format!("{e:#}")),
            }
        }
        ensure!(bad.is_empty(), "{}", bad.join("\n"));
        println!(
            "note: 30 processes on 6 pods: nodes 1/2/3 ran 10 each, exact exit codes 101..130"
        );
        Ok(())
    })
    .await;
}

/// `kubectl exec`s of `reach` that failed and were tried again.
static EXEC_RETRIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A TCP connection from the main container of POD in namespace NS to IP:PORT: `Ok(open)`, or
/// why it could not be tried. nc's own exit is read from the output, so that a `kubectl exec`
/// that failed (API server → kubelet, under load) is retried and never counts as a closed port.
async fn reach(ns: &str, pod: &str, ip: &str, port: u16) -> Result<bool, String> {
    let probe = format!("nc -w 2 {ip} {port} </dev/null 2>&1; echo nc-exit=$?");
    let args = [
        "-n", ns, "exec", pod, "-c", "main", "--", "sh", "-c", &probe,
    ];
    let mut why = String::new();
    for _ in 0..3 {
        match cmd::run("kubectl", &args, None, Duration::from_secs(30)).await {
            Ok(o) => match o.stdout.lines().find_map(|l| l.strip_prefix("nc-exit=")) {
                Some(code) => return Ok(code.trim() == "0"),
                None => why = format!("kubectl exec: {} {}", o.stdout.trim(), o.stderr.trim()),
            },
            Err(e) => why = format!("{e:#}"),
        }
        EXEC_RETRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        println!("note: {pod} -> {ip}:{port} not tried, again in 2 s: {why}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Err(why)
}

fn state(open: bool) -> &'static str {
    if open {
        "open"
    } else {
        "closed"
    }
}

/// Every source (namespace, pod) against every agent (node, IP) on PORT; the misses of `want`.
async fn matrix(
    srcs: &[(String, String)],
    agents: &[(String, String)],
    port: u16,
    want: bool,
) -> Vec<String> {
    let pairs: Vec<_> = srcs
        .iter()
        .flat_map(|s| agents.iter().map(move |a| (s, a)))
        .collect();
    // An open port that once failed to answer is asked again for a while (a blip of the
    // network is not the policy); a closed one that answered once is a leak, never retried.
    let got = join_all(pairs.iter().map(|((ns, pod), (_, ip))| async move {
        let got = reach(ns, pod, ip, port).await;
        if want && got != Ok(true) {
            let again = until_reach(ns, pod, ip, port, true, Duration::from_secs(15)).await;
            if again.is_none() {
                println!("note: {pod} -> {ip}:{port} open only when asked again ({got:?})");
                return Ok(true);
            }
        }
        got
    }))
    .await;
    pairs
        .iter()
        .zip(got)
        .filter(|(_, g)| *g != Ok(want))
        .map(|(((_, pod), (node, ip)), g)| {
            let got = g.map_or_else(|e| format!("not tried ({e})"), |o| state(o).into());
            format!(
                "{pod} -> agent on {node} {ip}:{port}: {got}, expected {}",
                state(want)
            )
        })
        .collect()
}

/// `until_reach` for the agent on every node: each node's kube-router enforces the policy for
/// the pods on it and applies a change at its own next sync, so one node that has it says
/// nothing of the others.
async fn until_every(
    ns: &str,
    pod: &str,
    agents: &[(String, String)],
    port: u16,
    want: bool,
) -> Vec<String> {
    join_all(
        agents
            .iter()
            .map(|(_, ip)| until_reach(ns, pod, ip, port, want, Duration::from_secs(60))),
    )
    .await
    .into_iter()
    .flatten()
    .collect()
}

/// Polls (kube-router applies a policy change at its next sync) up to `limit`.
async fn until_reach(
    ns: &str,
    pod: &str,
    ip: &str,
    port: u16,
    want: bool,
    limit: Duration,
) -> Option<String> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let got = reach(ns, pod, ip, port).await;
        if got == Ok(want) {
            return None;
        }
        if tokio::time::Instant::now() > deadline {
            let got = got.map_or_else(|e| format!("not tried ({e})"), |o| state(o).into());
            return Some(format!("{pod} -> {ip}:{port} still {got} after {limit:?}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A pod in another namespace that wears the operator's labels: the policy's podSelector is
/// for the release's namespace only.
fn fake_operator() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "fake-operator", "labels": {"app.kubernetes.io/name": "sandbox-process-operator",
            "app.kubernetes.io/component": "operator"}},
        "spec": {"nodeName": node_name(3), "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": sandbox_e2e::WORKLOAD_IMAGE,
                "imagePullPolicy": "Never", "command": ["sleep", "100000"]}]}})
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/nodes"]
async fn network_policy_only_the_operator_reaches_the_agents_api_port_on_every_node() {
    with_ns("nodes-netpol", |t| async move {
        with_ns("nodes-fake", move |f| async move { netpol(&t, &f).await }).await;
        Ok(())
    })
    .await;
}

async fn netpol(t: &TestNs, fake: &TestNs) -> Result<()> {
    let pods: Vec<Value> = (1..=3)
        .map(|k| node_pod(&format!("r{k}-a"), k, false))
        .collect();
    tokio::try_join!(t.pods(pods), fake.pods([fake_operator()]))?;
    let agents: Vec<(String, String)> = release::pods(&t.client, Some("agent"))
        .await?
        .iter()
        .map(|p| {
            (
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default(),
                p.status
                    .as_ref()
                    .and_then(|s| s.pod_ip.clone())
                    .unwrap_or_default(),
            )
        })
        .collect();
    ensure!(agents.len() == 3, "agents: {agents:?}");
    let mut srcs: Vec<(String, String)> = (1..=3)
        .map(|k| (t.name.clone(), format!("r{k}-a")))
        .collect();
    srcs.push((fake.name.clone(), "fake-operator".into()));
    let api: Api<NetworkPolicy> = Api::namespaced(t.client.clone(), release::NAMESPACE);
    let lp = ListParams::default().labels(release::SELECTOR);
    let mut pol = api
        .list(&lp)
        .await?
        .items
        .into_iter()
        .next()
        .with_context(|| format!("no NetworkPolicy of the chart in {}", release::NAMESPACE))?;
    let ns = t.name.as_str();
    let mut bad: Vec<String> = Vec::new();
    bad.extend(until_every(ns, "r2-a", &agents, 9443, false).await);
    bad.extend(matrix(&srcs, &agents, 9443, false).await);
    bad.extend(matrix(&srcs, &agents, 9090, true).await);
    // Without the policy the same connections succeed: the closed ports above are its doing.
    let name = pol.name_any();
    api.delete(&name, &Default::default()).await?;
    bad.extend(until_every(ns, "r2-a", &agents, 9443, true).await);
    bad.extend(matrix(&srcs, &agents, 9443, true).await);
    let m = &mut pol.metadata;
    (
        m.resource_version,
        m.uid,
        m.creation_timestamp,
        m.generation,
        m.managed_fields,
    ) = (None, None, None, None, None);
    api.create(&PostParams::default(), &pol)
        .await
        .context("restoring the NetworkPolicy")?;
    bad.extend(until_every(ns, "r2-a", &agents, 9443, false).await);
    bad.extend(matrix(&srcs, &agents, 9443, false).await);
    // The misses last: a CI log is often read from its tail.
    ensure!(
        bad.is_empty(),
        "{}\nmissed:\n{}",
        network_dump().await,
        bad.join("\n")
    );
    println!("note: agents' API port closed to 3 tenant pods (one per node) and a fake operator in another namespace, metrics port open; open with the policy deleted");
    let retried = EXEC_RETRIES.load(std::sync::atomic::Ordering::Relaxed);
    println!("note: {retried} kubectl exec(s) of the probes failed and were tried again");
    Ok(())
}

/// What each node's network said when connections failed (seen twice, only after the nodes had
/// lived through a whole `.ci/run`: one node's pods reached no other node's agent, on any port,
/// with or without the policy): its routes and the DROP/REJECT rules of its filter table that
/// matched packets.
async fn network_dump() -> String {
    let mut out = vec!["network of each node:".to_string()];
    for k in 1..=3 {
        let ns = format!("--net=/run/netns/spo-n{k}");
        for cmd in [
            &["ip", "route"][..],
            &["ip", "neigh"],
            &["iptables-save", "-c", "-t", "filter"],
        ] {
            let mut args: Vec<&str> = if k == 1 { vec![] } else { vec![&ns, "--"] };
            args.extend_from_slice(cmd);
            let (prog, args) = if k == 1 {
                (args[0], &args[1..])
            } else {
                ("nsenter", &args[..])
            };
            let text = match cmd::run(prog, args, None, Duration::from_secs(10)).await {
                Ok(o) => o.stdout,
                Err(e) => format!("{e:#}"),
            };
            let lines = text.lines().filter(|l| {
                cmd[0] == "ip"
                    || ((l.contains("DROP") || l.contains("REJECT")) && !l.starts_with("[0:0]"))
            });
            out.extend(
                lines
                    .take(12)
                    .map(|l| format!("  node {k} {}: {l}", cmd[..2].join(" "))),
            );
        }
    }
    out.join("\n")
}

/// Applies mv-I on its pod on node 3, then (0.05 × (I-1) s later) re-creates the pod under its
/// name on node 2.
async fn move_mid_start(t: &TestNs, i: u32) -> Result<()> {
    let name = format!("mv-{i}");
    let script = format!("echo run >> /tmp/runs; sleep 1; exit {}", 30 + i);
    t.apply_sbp(sbp(&name, &name, sh(&script, Value::Null)))
        .await?;
    tokio::time::sleep(Duration::from_millis(50 * u64::from(i - 1))).await;
    let _ = t.delete_pod_now(&name).await;
    t.apply_pod(node_pod(&name, 2, false)).await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/nodes"]
async fn pods_recreated_on_another_node_mid_start_never_run_on_both_nodes() {
    with_ns("nodes-moved", |t| async move {
        t.pods((1..=10).map(|i| node_pod(&format!("mv-{i}"), 3, false))).await?;
        for i in 1..=10 {
            move_mid_start(&t, i).await?;
        }
        let (mut ran, mut stale, mut bad) = (0, 0, Vec::new());
        for i in 1..=10 {
            let name = format!("mv-{i}");
            // Stale either after its start (PodReplaced/PodDeleted) or before it: a pod replaced
            // before the agent started it, so no end reason and nothing ran anywhere.
            let re = format!("Exited {}  Exited|Error  StaleProcessHandle (Pod(Replaced|Deleted))?", 30 + i);
            let o = match t.until_row(&name, &re, 90).await {
                Ok(o) => o,
                Err(e) => { bad.push(format!("{e:#}")); continue; }
            };
            let on = records_of(&o.uid().context("uid")?);
            if row(&o).starts_with("Exited") {
                ran += 1;
                // It ran in the pod its status names, on that pod's node, and nowhere else.
                let node = field(&o, "/status/nodeName");
                let k = if node == node_name(2) { 2 } else { 3 };
                if on != [k] {
                    bad.push(format!("{name}: Exited on {node}, ledger records on nodes {on:?}"));
                }
            } else {
                stale += 1;
                let never_started = field(&o, "/status/endReason").is_empty();
                if on.len() > 1 || (never_started && (!on.is_empty() || !field(&o, "/status/startedAt").is_empty())) {
                    bad.push(format!("{name}: '{}', ledger records on nodes {on:?}", row(&o)));
                }
            }
        }
        ensure!(bad.is_empty(), "{}", bad.join("\n"));
        println!("note: 10 pods moved mid-start: {ran} ran once and exited, {stale} stale (PodReplaced/PodDeleted, or replaced before the start); none on both nodes");
        Ok(())
    })
    .await;
}
