//! The `processes` resource (served from the nodes, not a CRD): its API as a dynamic resource,
//! the objects tests create, and waits on its watch.
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::{json, Value};

use crate::ns::TestNs;

pub const GROUP: &str = "processes.sandbox.dev";

/// `processes.sandbox.dev/v1alpha1`, kind `Process`, plural `processes`.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, "v1alpha1", "Process"),
        "processes",
    )
}

/// A Process NAME on POD with these spec fields.
pub fn process(name: &str, pod: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["podName"] = json!(pod);
    json!({
        "apiVersion": format!("{GROUP}/v1alpha1"),
        "kind": "Process",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// A field of an object (its metadata too) as text ('' when absent).
pub fn text(o: &DynamicObject, pointer: &str) -> String {
    let whole = serde_json::to_value(o).unwrap_or_default();
    match whole.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

impl TestNs {
    pub fn procs(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.name, &resource())
    }

    /// Creates a Process; the object the server answered with.
    pub async fn create_proc(&self, o: Value) -> Result<DynamicObject> {
        let o: DynamicObject = serde_json::from_value(o)?;
        self.procs()
            .create(&PostParams::default(), &o)
            .await
            .with_context(|| format!("creating process {}", o.metadata.name.unwrap_or_default()))
    }

    /// Waits (on a watch of the one object) until `pred` holds; the object then.
    pub async fn until_proc(
        &self,
        name: &str,
        secs: u64,
        what: &str,
        pred: impl Fn(&DynamicObject) -> bool,
    ) -> Result<DynamicObject> {
        let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
        // Retried with backoff within the bound: an operator replica going (a failover, a
        // rollout) answers 503 for a moment, as for any aggregated API.
        let stream = watcher(self.procs(), cfg)
            .default_backoff()
            .applied_objects();
        let found = tokio::time::timeout(Duration::from_secs(secs), async {
            let mut stream = std::pin::pin!(stream);
            while let Some(o) = stream.next().await {
                match o {
                    Ok(o) if pred(&o) => return Ok::<_, anyhow::Error>(o),
                    Ok(_) => {}
                    Err(e) => eprintln!("watch of process {name}: {e}; retrying"),
                }
            }
            anyhow::bail!("the watch ended")
        })
        .await;
        match found {
            Ok(r) => r,
            Err(_) => {
                let now = self.procs().get_opt(name).await.ok().flatten();
                anyhow::bail!(
                    "process {name} did not {what} within {secs}s; it is {:?}",
                    now.map(|o| o.data)
                )
            }
        }
    }

    /// Waits until the process is gone (a watch's DELETED, or not there at all).
    pub async fn until_proc_gone(&self, name: &str, secs: u64) -> Result<()> {
        let api = self.procs();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            if api.get_opt(name).await?.is_none() {
                return Ok(());
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "process {name} still there after {secs}s"
            );
            let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let mut events = std::pin::pin!(watcher(api.clone(), cfg));
            let _ = tokio::time::timeout_at(deadline, async {
                while let Some(Ok(ev)) = events.next().await {
                    if matches!(ev, watcher::Event::Delete(_)) {
                        return;
                    }
                }
            })
            .await;
        }
    }
}
