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
