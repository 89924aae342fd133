//! e2e/suites/nodes' three nodes (`e2e/cluster up --nodes 3`): their names, their agents' ledgers as the
//! host sees them, pods pinned to one node, processes that wait for a file to end (released
//! through the cluster or, for a node nothing reaches, from the host), and a status read as one
//! row "phase code error endReason" as the bash suite read it.
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::Api;
use regex_lite::Regex;
use sandbox_api::crd::SandboxProcess;
use serde_json::{json, Value};

use crate::manifests::{sbp, sh};
use crate::{cmd, field, node1, TestNs, WORKLOAD_IMAGE};

/// The chart's `operator.agentGraceSeconds`.
pub const GRACE: u64 = 30;

/// Node K's name (1: the machine's own host).
pub fn node_name(k: u8) -> String {
    if k == 1 {
        node1()
    } else {
        format!("spo-e2e-{k}")
    }
}

/// Node K's agent state dir as the host sees it (lib/nodes.sh: node K's /var/lib is its own).
fn agent_dir(k: u8) -> PathBuf {
    if k == 1 {
        PathBuf::from("/var/lib/sandbox-agent")
    } else {
        PathBuf::from(format!(
            "/var/lib/spo-e2e/nodes/n{k}/dirs/var/lib/sandbox-agent"
        ))
    }
}

/// Whether node K's agent has a ledger record of process `id` (the object's UID).
pub fn has_record(k: u8, id: &str) -> bool {
    agent_dir(k).join(format!("records/{id}.json")).exists()
}

/// The nodes (1..=3) whose agents have a record of process `id`.
pub fn records_of(id: &str) -> Vec<u8> {
    (1..=3).filter(|k| has_record(*k, id)).collect()
}

/// A sleeping pod on node K, placed by nodeName or (with `affinity`) by node affinity.
pub fn node_pod(name: &str, k: u8, affinity: bool) -> Value {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": WORKLOAD_IMAGE, "imagePullPolicy": "Never",
            "command": ["sleep", "100000"]}],
    });
    if affinity {
        let term = json!({"matchFields": [{"key": "metadata.name", "operator": "In",
            "values": [node_name(k)]}]});
        spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [term]}}});
    } else {
        spec["nodeName"] = json!(node_name(k));
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"e2e": "nodes"}}, "spec": spec})
}

/// A process that waits for /tmp/go-NAME in its pod, then exits with `code`.
pub fn waiter(name: &str, pod: &str, code: i32) -> Value {
    let script = format!("while [ ! -f /tmp/go-{name} ]; do sleep 0.2; done; exit {code}");
    sbp(name, pod, sh(&script, Value::Null))
}

/// "phase code error endReason" of a SandboxProcess ('' for what is absent).
pub fn row(o: &SandboxProcess) -> String {
    [
        "/status/phase",
        "/status/exit/code",
        "/status/error/code",
        "/status/endReason",
    ]
    .map(|p| field(o, p))
    .join(" ")
}

/// The pid file of a cluster component on the host (lib/common.sh PIDS).
fn component_pid(name: &str) -> Result<u32> {
    let f = format!("/run/spo-e2e/pids/{name}.pid");
    let text = std::fs::read_to_string(&f).with_context(|| f.clone())?;
    let pid: u32 = text.split_whitespace().next().context("empty")?.parse()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if !String::from_utf8_lossy(&cmdline).contains(name) {
        bail!("{f}: pid {pid} is not {name}");
    }
    Ok(pid)
}

/// kube-controller-manager stopped (SIGSTOP) while this lives, resumed when dropped: it runs
/// without leader election here, so a few seconds' pause loses nothing.
pub struct HeldControllers(u32);

impl HeldControllers {
    pub fn hold() -> Result<HeldControllers> {
        let pid = component_pid("kube-controller-manager")?;
        signal("-STOP", pid)?;
        Ok(HeldControllers(pid))
    }
}

impl Drop for HeldControllers {
    fn drop(&mut self) {
        let _ = signal("-CONT", self.0);
    }
}

fn signal(sig: &str, pid: u32) -> Result<()> {
    let st = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()?;
    anyhow::ensure!(st.success(), "kill {sig} {pid}: {st}");
    Ok(())
}

/// Waits until no process on this machine has `word` in its command line.
pub async fn gone_on_host(word: &str, secs: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let out = cmd::run("pgrep", &["-f", "--", word], None, Duration::from_secs(10)).await?;
        if !out.success() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("a process with '{word}' still runs after {secs} s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The holder of the operator's Lease ('' when none).
pub async fn lease_holder(client: &kube::Client) -> Result<String> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let l = api.get("sandboxprocesses.sandbox.dev").await?;
    Ok(l.spec.and_then(|s| s.holder_identity).unwrap_or_default())
}

impl TestNs {
    /// Lets waiter `name` end, through the API server and the pod's kubelet.
    pub async fn go(&self, name: &str, pod: &str) -> Result<()> {
        self.in_pod(pod, &["touch", &format!("/tmp/go-{name}")])
            .await?;
        Ok(())
    }

    /// The same without the cluster: through the pod's main process seen from the host (for a
    /// node that nothing can reach).
    pub async fn go_host(&self, name: &str, pod: &str) -> Result<()> {
        let p = self.api::<Pod>().get(pod).await?;
        let cid = p
            .status
            .and_then(|s| s.container_statuses)
            .and_then(|c| c.into_iter().next())
            .and_then(|c| c.container_id)
            .context("no container id")?;
        let cid = cid.trim_start_matches("containerd://");
        let dirs = cmd::ok(
            "find",
            &["/sys/fs/cgroup/pids/spo-e2e", "-type", "d", "-name", cid],
        )
        .await?;
        let procs = dirs
            .lines()
            .find_map(|d| std::fs::read_to_string(format!("{d}/cgroup.procs")).ok())
            .unwrap_or_default();
        let Some(pid) = procs.lines().next() else {
            bail!("no process of pod {pod} (container {cid}) on this host");
        };
        std::fs::write(format!("/proc/{pid}/root/tmp/go-{name}"), "")
            .with_context(|| format!("touching go-{name} in pod {pod} from the host"))
    }

    /// Waits up to `secs` until the row of `name` matches `re` (anchored).
    pub async fn until_row(&self, name: &str, re: &str, secs: u64) -> Result<SandboxProcess> {
        let r = Regex::new(&format!("^(?:{re})$"))?;
        self.until(name, secs, "have its row", move |o| r.is_match(&row(o)))
            .await
            .with_context(|| format!("{name}: expected a row matching '{re}'"))
    }

    /// Seconds until the first of `names` says ProcessLost (within GRACE + 30 s).
    pub async fn first_lost(&self, names: &[&str]) -> Result<f64> {
        let t0 = Instant::now();
        let waits = names.iter().map(|n| {
            Box::pin(self.until(n, GRACE + 30, "say ProcessLost", |o| {
                field(o, "/status/error/code") == "ProcessLost"
            }))
        });
        futures::future::select_ok(waits)
            .await
            .map(|_| t0.elapsed().as_secs_f64())
    }

    /// Deletes a pod at once (grace 0, as `kubectl delete --force --grace-period=0`).
    pub async fn delete_pod_now(&self, name: &str) -> Result<()> {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        self.api::<Pod>().delete(name, &dp).await?;
        Ok(())
    }
}
