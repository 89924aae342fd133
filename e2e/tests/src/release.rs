//! The chart's release the suites deploy (e2e/deploy: namespace `sandbox-system`): its operator
//! and agent pods as a test inspects them, and their processes on node 1's host.
use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::cmd;

/// The release's namespace and its pods' label.
pub const NAMESPACE: &str = "sandbox-system";
pub const SELECTOR: &str = "app.kubernetes.io/name=sandbox-process-operator";

/// The release's pods of one component (`operator`, `agent`), or all with `None`.
pub async fn pods(client: &Client, component: Option<&str>) -> Result<Vec<Pod>> {
    let sel = match component {
        Some(c) => format!("{SELECTOR},app.kubernetes.io/component={c}"),
        None => SELECTOR.to_string(),
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    Ok(api.list(&ListParams::default().labels(&sel)).await?.items)
}

/// Every operator and agent pod as `name=restartCount`, sorted: any restart or replacement
/// changes it.
pub async fn restarts(client: &Client) -> Result<String> {
    let mut all: Vec<String> = pods(client, None)
        .await?
        .iter()
        .map(|p| {
            let n = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .map_or(0, |c| c.restart_count);
            format!("{}={n}", p.name_any())
        })
        .collect();
    all.sort();
    Ok(all.join(" "))
}

/// The first pod of a component, with the container port named `name` (e.g. `api`).
pub async fn pod_port(client: &Client, component: &str, name: &str) -> Result<(Pod, i32)> {
    let Some(pod) = pods(client, Some(component)).await?.into_iter().next() else {
        bail!("no {component} pod in {NAMESPACE}");
    };
    let port = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.ports.as_ref())
        .and_then(|ps| ps.iter().find(|p| p.name.as_deref() == Some(name)))
        .map(|p| p.container_port)
        .with_context(|| format!("{component} pod: no port named {name}"))?;
    Ok((pod, port))
}

/// The host pid of the release's operator process: a `sandbox-operator` in its pod's cgroup
/// (not any other process of that name, e.g. one e2e/suites/operator runs on the host).
pub async fn operator_pid(client: &Client) -> Result<u32> {
    let (pod, _) = pod_port(client, "operator", "api").await?;
    let uid = pod.uid().context("operator pod uid")?;
    let systemd_uid = uid.replace('-', "_");
    for pid in pgrep(&["sandbox-operator"]).await? {
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if cg.contains(&uid) || cg.contains(&systemd_uid) {
            return Ok(pid);
        }
    }
    bail!("no sandbox-operator process in the cgroup of pod {uid}")
}

/// The host pid of node 1's agent daemon (the oldest `sandbox-agent serve`).
pub async fn agent_pid() -> Result<u32> {
    pgrep(&["-o", "sandbox-agent serve"])
        .await?
        .into_iter()
        .next()
        .context("no `sandbox-agent serve` process on this host")
}

/// CPU ticks (user + system) a host process has used so far (100 ticks = 1 CPU-second).
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("/proc/{pid}/stat"))?;
    // Fields after the command (which may hold spaces): state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(") ").context("stat format")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let (u, s) = (f.get(11), f.get(12));
    Ok(u.context("utime")?.parse::<u64>()? + s.context("stime")?.parse::<u64>()?)
}

/// `pgrep -f ARGS...`: the matching pids (none is not an error).
async fn pgrep(args: &[&str]) -> Result<Vec<u32>> {
    let mut all = vec!["-f"];
    all.extend_from_slice(args);
    let out = cmd::run("pgrep", &all, None, std::time::Duration::from_secs(10)).await?;
    Ok(out
        .stdout
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect())
}

/// The release's name (the chart's fullname) and its DaemonSet and Deployment.
pub const RELEASE: &str = "sandbox-process-operator";

/// The UIDs of a component's pods, sorted: a replaced pod changes them.
pub async fn pod_uids(client: &Client, component: &str) -> Result<Vec<String>> {
    let mut uids: Vec<String> = pods(client, Some(component))
        .await?
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    uids.sort();
    Ok(uids)
}

/// The operator holding the cluster's one leader Lease, as NAMESPACE/POD.
pub async fn lease_holder() -> Result<String> {
    cmd::kubectl(&[
        "-n",
        "kube-system",
        "get",
        "lease",
        "sandboxprocesses.sandbox.dev",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
    .await
}

/// Node 1's agent pod (the one that runs the tests' processes: their pods are pinned there).
pub async fn node1_agent(client: &Client) -> Result<Pod> {
    let node = crate::node1();
    pods(client, Some("agent"))
        .await?
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .with_context(|| format!("no agent pod on {node}"))
}

/// Deletes the operator pod(s) without waiting (the Deployment makes new ones).
pub async fn delete_operator_pods() -> Result<()> {
    let sel = format!("{SELECTOR},app.kubernetes.io/component=operator");
    cmd::kubectl(&["-n", NAMESPACE, "delete", "pod", "-l", &sel, "--wait=false"])
        .await
        .context("deleting the operator pod")?;
    Ok(())
}

/// Deletes the agent pods (waiting until they are gone) and waits until the DaemonSet has
/// recreated them; fails unless the pods are new ones.
pub async fn replace_agents(client: &Client) -> Result<()> {
    let before = pod_uids(client, "agent").await?;
    let sel = format!("{SELECTOR},app.kubernetes.io/component=agent");
    cmd::kubectl(&[
        "-n",
        NAMESPACE,
        "delete",
        "pod",
        "-l",
        &sel,
        "--wait=true",
        "--timeout=60s",
    ])
    .await
    .context("deleting the agent pod")?;
    let ds = format!("ds/{RELEASE}-agent");
    cmd::kubectl(&["-n", NAMESPACE, "rollout", "status", &ds, "--timeout=120s"])
        .await
        .context("the DaemonSet did not recreate the agent")?;
    let after = pod_uids(client, "agent").await?;
    if after.is_empty() || after == before {
        bail!("agent pod not replaced: {before:?} / {after:?}");
    }
    Ok(())
}
