//! Waits on watches (through sandbox-client), bounded, with the object's status in the error.
use std::time::Duration;

use anyhow::{anyhow, Result};
use sandbox_api::crd::SandboxProcess;

use crate::fields::field;
use crate::ns::TestNs;

impl TestNs {
    /// Waits up to `secs` until `pred` holds for SandboxProcess `name`; the object then.
    pub async fn until(
        &self,
        name: &str,
        secs: u64,
        what: &'static str,
        pred: impl Fn(&SandboxProcess) -> bool + Send + 'static,
    ) -> Result<SandboxProcess> {
        let p = self.sandbox.process(name);
        match p.until(Some(Duration::from_secs(secs)), what, pred).await {
            Ok(o) => Ok(o),
            Err(e) => {
                let now = p
                    .object()
                    .await
                    .map(|o| serde_yaml_ng::to_string(&o.status).unwrap_or_default());
                Err(anyhow!(
                    "{name}: waiting to {what}: {e}\nstatus now:\n{}",
                    now.unwrap_or_else(|e| e.to_string())
                ))
            }
        }
    }

    /// Waits until the field at `pointer` reads `want` (as [`field`] prints it).
    pub async fn until_field(
        &self,
        name: &str,
        pointer: &str,
        want: &str,
        secs: u64,
    ) -> Result<SandboxProcess> {
        let (p, w) = (pointer.to_string(), want.to_string());
        self.until(name, secs, "have the field's value", move |o| {
            field(o, &p) == w
        })
        .await
        .map_err(|e| anyhow!("{pointer} != {want:?}: {e:#}"))
    }

    /// The object as it is now.
    pub async fn get(&self, name: &str) -> Result<SandboxProcess> {
        Ok(self.sbps().get(name).await?)
    }
}

impl TestNs {
    /// Waits until condition `type_` has status True, as `kubectl wait --for=condition=TYPE`.
    pub async fn until_true(&self, name: &str, type_: &str, secs: u64) -> Result<SandboxProcess> {
        let t = type_.to_string();
        self.until(name, secs, "have the condition True", move |o| {
            crate::cond(o, &t).starts_with("True/")
        })
        .await
        .map_err(|e| anyhow!("condition {type_}: {e:#}"))
    }
}
