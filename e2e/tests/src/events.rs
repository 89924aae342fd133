//! The Events of an object, as `kubectl get events --field-selector involvedObject.name=NAME`
//! lists them. The operator publishes them right after a status write, so a test waits for them
//! (bounded polling: an Event watch would not be simpler).
use std::time::Duration;

use anyhow::{ensure, Result};
use k8s_openapi::api::core::v1::Event;
use kube::api::ListParams;

use crate::ns::TestNs;

impl TestNs {
    /// The reasons of the Events of object `name` here, oldest first.
    pub async fn event_reasons(&self, name: &str) -> Result<Vec<String>> {
        let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
        let list = self.api::<Event>().list(&lp).await?;
        Ok(list.items.into_iter().filter_map(|e| e.reason).collect())
    }

    /// Waits up to `secs` until the Events of `name` include every one of `reasons`.
    pub async fn until_events(&self, name: &str, reasons: &[&str], secs: u64) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let got = self.event_reasons(name).await?;
            if reasons.iter().all(|r| got.iter().any(|g| g == r)) {
                return Ok(());
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "{name}: Events {got:?} after {secs} s, expected {reasons:?} among them"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
