//! The objects tests apply: SandboxProcesses (server-side apply, as the plugin and clients do)
//! and workload pods pinned to node 1 (the node whose host a test may inspect).
use anyhow::{Context, Result};
use kube::api::{Patch, PatchParams};
use serde_json::{json, Value};

use crate::ns::TestNs;
use crate::{node1, WORKLOAD_IMAGE};

/// The field manager of the tests' applies.
pub const MANAGER: &str = "e2e";

/// A SandboxProcess NAME on POD with these spec fields (`podName` added; '' for none, e.g.
/// with a `podSelector` in `spec`).
pub fn sbp(name: &str, pod: &str, spec: Value) -> Value {
    let mut spec = spec;
    if !pod.is_empty() {
        spec["podName"] = json!(pod);
    }
    json!({
        "apiVersion": "sandbox.dev/v1alpha1",
        "kind": "SandboxProcess",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// `command: [sh, -c, SCRIPT]` with the other fields of `spec`.
pub fn sh(script: &str, spec: Value) -> Value {
    let mut spec = if spec.is_null() { json!({}) } else { spec };
    spec["command"] = json!(["sh", "-c", script]);
    spec
}

/// A sleeping pod of the workload image on node 1, with two env values the tests overlay, and
/// a memory limit if given.
pub fn pod(name: &str, memory_limit: Option<&str>) -> Value {
    let mut container = json!({
        "name": "main",
        "image": WORKLOAD_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sleep", "100000"],
        "env": [{"name": "FROM_POD", "value": "pod-value"}, {"name": "OVERRIDDEN", "value": "pod-value"}],
    });
    if let Some(m) = memory_limit {
        container["resources"] = json!({"limits": {"memory": m}});
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node1()},
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    })
}

impl TestNs {
    /// Server-side applies a SandboxProcess (from [`sbp`]).
    pub async fn apply_sbp(&self, o: Value) -> Result<()> {
        let name = o["metadata"]["name"]
            .as_str()
            .context("metadata.name")?
            .to_string();
        self.sbps()
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(o),
            )
            .await
            .with_context(|| format!("applying sandboxprocess {name}"))?;
        Ok(())
    }

    /// Creates a SandboxProcess (from [`sbp`]) by POST, as `kubectl apply` does for a new
    /// object: a user with `create` but no `patch` may do it.
    pub async fn create_sbp(&self, o: Value) -> Result<()> {
        let name = o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let o: sandbox_api::crd::SandboxProcess = serde_json::from_value(o)?;
        self.sbps()
            .create(&kube::api::PostParams::default(), &o)
            .await
            .with_context(|| format!("creating sandboxprocess {name}"))?;
        Ok(())
    }

    /// Applies every SandboxProcess of `objects`, in order.
    pub async fn apply_sbps(&self, objects: impl IntoIterator<Item = Value>) -> Result<()> {
        for o in objects {
            self.apply_sbp(o).await?;
        }
        Ok(())
    }

    /// Creates these pods (from [`pod`]) and waits until all are Ready.
    pub async fn pods(&self, pods: impl IntoIterator<Item = Value>) -> Result<()> {
        let mut names = Vec::new();
        for p in pods {
            names.push(self.apply_pod(p).await?);
        }
        for name in names {
            self.kubectl(&[
                "wait",
                "--for=condition=Ready",
                &format!("pod/{name}"),
                "--timeout=180s",
            ])
            .await?;
        }
        Ok(())
    }
}
