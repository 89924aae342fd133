//! Two tenants of a shared cluster (e2e/suites/hostile): a hostile one — a ServiceAccount with only the
//! `edit` ClusterRole in its own namespace, acting through [`TestNs::as_user`] as `kubectl --as`
//! did — and another tenant whose ordinary processes must keep running whatever the first does.
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};

use crate::manifests::{pod, sbp, sh};
use crate::{field, release, with_ns, TestNs};

/// The other tenant's pod, where its ordinary processes run.
pub const NEIGHBOUR: &str = "neighbour";

pub struct Tenants {
    /// The hostile tenant's namespace, as the cluster's admin (to look, never to act).
    pub admin: TestNs,
    /// The same namespace as the tenant's ServiceAccount: every hostile act goes through it.
    pub tenant: TestNs,
    /// Another tenant's namespace, with the pod [`NEIGHBOUR`].
    pub other: TestNs,
    restarts_before: String,
    runs: AtomicUsize,
}

/// Runs `test` with two fresh tenants; `pods` (from [`pod`]) are made in the hostile tenant's
/// namespace. Both namespaces are deleted afterwards, as [`with_ns`] does.
pub async fn with_tenants<F, Fut>(prefix: &str, pods: Vec<Value>, test: F)
where
    F: FnOnce(Tenants) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let other_prefix = format!("{prefix}-other");
    with_ns(prefix, move |t| async move {
        with_ns(&other_prefix, move |o| async move {
            test(Tenants::new(t, o, pods).await?).await
        })
        .await;
        Ok(())
    })
    .await;
}

impl Tenants {
    async fn new(admin: TestNs, other: TestNs, pods: Vec<Value>) -> Result<Tenants> {
        admin
            .kubectl(&["create", "serviceaccount", "tenant"])
            .await?;
        let sa = format!("{}:tenant", admin.name);
        let bind = ["create", "rolebinding", "tenant-edit", "--clusterrole=edit"];
        admin
            .kubectl(&[&bind[..], &["--serviceaccount", &sa]].concat())
            .await?;
        tokio::try_join!(admin.pods(pods), other.pods([pod(NEIGHBOUR, None)]))?;
        let tenant = admin
            .as_user(&format!("system:serviceaccount:{sa}"))
            .await?;
        let t = Tenants {
            restarts_before: release::restarts(&admin.client).await?,
            admin,
            tenant,
            other,
            runs: AtomicUsize::new(0),
        };
        // The first use of the neighbour's container by the agent is not what is measured.
        let _ = t.ordinary_ms().await;
        Ok(t)
    }

    /// The tenant applies a SandboxProcess (server-side apply, as `kubectl apply` would).
    pub async fn apply(&self, o: Value) -> Result<()> {
        self.tenant.apply_sbp(o).await
    }

    /// The tenant's apply that must be refused; the refusal as text.
    pub async fn refused(&self, o: Value) -> Result<String> {
        let name = field(&o, "/metadata/name");
        match self.apply(o).await {
            Ok(()) => anyhow::bail!("{name} was accepted"),
            Err(e) => Ok(format!("{e:?}")),
        }
    }

    /// Milliseconds from applying the other tenant's `exit 4` process to its Exited/4 (watched,
    /// not polled); an error after 5 s.
    pub async fn ordinary_ms(&self) -> Result<u128> {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        let name = format!("ordinary-{n}");
        let t0 = Instant::now();
        self.other
            .apply_sbp(sbp(&name, NEIGHBOUR, sh("exit 4", json!({}))))
            .await?;
        let o = self
            .other
            .until_field(&name, "/status/phase", "Exited", 5)
            .await?;
        let ms = t0.elapsed().as_millis();
        ensure!(
            field(&o, "/status/exit/code") == "4",
            "{name}: exit {}",
            field(&o, "/status/exit")
        );
        Ok(ms)
    }

    /// The median of `n` ordinary runs one after the other (one run is noisy on 2 cores).
    pub async fn median_ms(&self, n: usize) -> Result<u128> {
        let mut all = Vec::with_capacity(n);
        for _ in 0..n {
            all.push(self.ordinary_ms().await?);
        }
        all.sort_unstable();
        Ok(all[(n - 1) / 2])
    }

    /// After (or during) CASE: the other tenant's fresh process ends with its exact code within
    /// 5 s and no operator or agent restarted. Given `idle` (ms, a median of 5) and a ratio, the
    /// median of 5 runs must be within ratio × idle + 100 ms of timing noise.
    pub async fn others_fine(&self, case: &str, idle: Option<(u128, f64)>) -> Result<()> {
        let n = if idle.is_some() { 5 } else { 1 };
        let ms = self.median_ms(n).await.with_context(|| {
            format!("the other tenant's process did not end within 5 s after: {case}")
        })?;
        let now = release::restarts(&self.admin.client).await?;
        ensure!(
            now == self.restarts_before,
            "restarts changed: {} → {now}",
            self.restarts_before
        );
        let of = if n > 1 { " (median of 5)" } else { "" };
        println!("note: {case}: another tenant's process: apply → Exited/4 in {ms} ms{of}");
        if let Some((idle, ratio)) = idle {
            println!("note: idle: {idle} ms (median of 5)");
            ensure!(
                ms as f64 <= idle as f64 * ratio + 100.0,
                "{ms} ms is over {ratio}× the idle {idle} ms"
            );
        }
        Ok(())
    }

    /// Live processes in the tenant's POD besides its main `sleep 100000` (and the `ps`).
    /// Zombies (`[name]`: no cmdline) are not counted: the pod's pid 1 is a `sleep` that never
    /// reaps, so a killed shell's orphans stay zombies there, as after `kubectl exec` + kill;
    /// they hold no resources.
    pub async fn extra_procs(&self, pod: &str) -> Result<(usize, String)> {
        let ps = self.admin.in_pod(pod, &["ps", "-o", "pid,args"]).await?;
        let n = ps
            .lines()
            .skip(1)
            .filter_map(|l| l.trim_start().split_once(' ').map(|(_, a)| a.trim_start()))
            .filter(|a| {
                *a != "sleep 100000"
                    && !a.starts_with("ps ")
                    && !(a.starts_with('[') && a.ends_with(']'))
            })
            .count();
        Ok((n, ps))
    }
}
