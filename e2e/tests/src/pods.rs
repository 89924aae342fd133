//! Pods as a test sees them: applied without waiting (a pod that is to come later, or never be
//! Ready), and the processes running in one.
use anyhow::{Context, Result};
use kube::api::{Patch, PatchParams};
use serde_json::Value;

use crate::manifests::MANAGER;
use crate::ns::TestNs;

impl TestNs {
    /// Applies a pod (from [`crate::manifests::pod`]) without waiting for it.
    pub async fn apply_pod(&self, p: Value) -> Result<String> {
        let name = p["metadata"]["name"]
            .as_str()
            .context("metadata.name")?
            .to_string();
        let api = self.api::<k8s_openapi::api::core::v1::Pod>();
        api.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(p),
        )
        .await
        .with_context(|| format!("creating pod {name}"))?;
        Ok(name)
    }

    /// The argv of every process in the pod's main container, as busybox `ps -o args` shows it.
    pub async fn pod_args(&self, pod: &str) -> Result<Vec<String>> {
        let ps = self.in_pod(pod, &["ps", "-o", "args"]).await?;
        Ok(ps.lines().skip(1).map(|l| l.trim().to_string()).collect())
    }
}

/// A process of a pod as busybox `ps -o pid,pgid,stat,args` shows it.
#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: u32,
    pub pgid: u32,
    pub stat: String,
    pub args: String,
}

impl Proc {
    /// A zombie (STAT Z): dead, waiting for the pod's pid 1 to reap it.
    pub fn zombie(&self) -> bool {
        self.stat.starts_with('Z')
    }
}

impl TestNs {
    /// Processes in the pod whose argv (as busybox ps shows it) starts with `prefix`.
    pub async fn count_procs(&self, pod: &str, prefix: &str) -> Result<usize> {
        Ok(self
            .pod_args(pod)
            .await?
            .iter()
            .filter(|a| a.starts_with(prefix))
            .count())
    }

    /// The pod's processes besides its main process (pid 1) and this very `ps`.
    pub async fn leftovers(&self, pod: &str) -> Result<Vec<Proc>> {
        let ps = self
            .in_pod(pod, &["ps", "-o", "pid,pgid,stat,args"])
            .await?;
        let mut all = Vec::new();
        for l in ps.lines().skip(1) {
            let mut f = l.split_whitespace();
            let (Some(pid), Some(pgid), Some(stat)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let args = f.collect::<Vec<_>>().join(" ");
            let p = Proc {
                pid: pid.parse().context("ps pid")?,
                pgid: pgid.parse().context("ps pgid")?,
                stat: stat.to_string(),
                args,
            };
            if p.pid != 1 && !p.args.starts_with("ps -o") {
                all.push(p);
            }
        }
        Ok(all)
    }

    /// Fails, listing them, if any process besides the main one is alive in the pod. Zombies are
    /// dead: a daemon's orphans belong to the pod's pid 1 (the agent's supervisor is outside the
    /// pod's pid namespace), and this pod's `sleep` never reaps them; they are counted in a note.
    pub async fn nothing_left(&self, pod: &str) -> Result<()> {
        let all = self.leftovers(pod).await?;
        let live: Vec<&Proc> = all.iter().filter(|p| !p.zombie()).collect();
        anyhow::ensure!(live.is_empty(), "alive in pod {pod}: {live:?}");
        if !all.is_empty() {
            let z: Vec<String> = all
                .iter()
                .map(|p| format!("{} {}", p.pid, p.args))
                .collect();
            println!(
                "note: pod {pod}: nothing alive; {} zombie(s) for its pid 1 to reap: {}",
                all.len(),
                z.join(", ")
            );
        }
        Ok(())
    }

    /// Waits up to 30 s until `n` processes besides the main one are alive in the pod, in
    /// `groups` process groups (a setsid'd daemon has its own).
    pub async fn daemon_up(&self, pod: &str, n: usize, groups: usize) -> Result<()> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let live: Vec<Proc> = self
                .leftovers(pod)
                .await?
                .into_iter()
                .filter(|p| !p.zombie())
                .collect();
            let pgids: std::collections::BTreeSet<u32> = live.iter().map(|p| p.pgid).collect();
            if live.len() >= n && pgids.len() >= groups {
                return Ok(());
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the daemon did not start in pod {pod}: {live:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
    }
}
