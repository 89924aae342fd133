//! Signals: a stop through `spec.stop` (a Process's through its signal subresource, `{"stop":
//! true}`), or one signal through the subresource.
use kube::api::{Patch, PatchParams};
use sandbox_api::wire::ProcessRecord;

use super::Process;
use crate::door::Door;
use crate::error::{Error, Result};
use crate::state::already_ended;

/// What [`Process::kill`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Killed {
    /// `spec.stop` was set (a Process: its stop asked for): the stop signal now, SIGKILL after
    /// the grace period.
    Stopping { signal: i32, grace_seconds: i64 },
    /// The one signal was delivered to the process group.
    Signalled(i32),
    /// The process had already ended; nothing was sent. Says how it ended.
    AlreadyEnded(String),
}

impl Process {
    /// `None`: stop it (`spec.stop`: its stop signal, SIGKILL after the grace period).
    /// `Some(n)`: send signal n once to its process group. An ended process is left alone.
    pub async fn kill(&self, signal: Option<i32>) -> Result<Killed> {
        let current = self.object().await?;
        if let Some(said) = already_ended(&current) {
            return Ok(Killed::AlreadyEnded(said));
        }
        match signal {
            None if self.door == Door::Process => {
                // No spec.stop to set: the stop sequence through the signal subresource.
                self.ensure_started("kill", self.start_timeout).await?;
                let req = http::Request::post(self.url("signal"))
                    .header("content-type", "application/json")
                    .body(br#"{"stop": true}"#.to_vec())
                    .map_err(|e| Error::invalid("name", e.to_string()))?;
                let _: ProcessRecord = self.client.request(req).await?;
                Ok(Killed::Stopping {
                    signal: current.spec.stop_signal,
                    grace_seconds: current.spec.termination_grace_period_seconds,
                })
            }
            None => {
                let patch = serde_json::json!({"spec": {"stop": true}});
                let o = Door::sandbox_processes(&self.client, &self.namespace)
                    .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                Ok(Killed::Stopping {
                    signal: o.spec.stop_signal,
                    grace_seconds: o.spec.termination_grace_period_seconds,
                })
            }
            Some(sig) => {
                self.signal(sig).await?;
                Ok(Killed::Signalled(sig))
            }
        }
    }

    /// Sends signal `sig` (1–64) once to the process group; the agent's record after it.
    pub async fn signal(&self, sig: i32) -> Result<ProcessRecord> {
        if !(1..=64).contains(&sig) {
            return Err(Error::invalid("signal", format!("{sig} is not 1-64")));
        }
        self.ensure_started("signal", self.start_timeout).await?;
        let body = serde_json::to_vec(&serde_json::json!({"signal": sig})).expect("json");
        let req = http::Request::post(self.url("signal"))
            .header("content-type", "application/json")
            .body(body)
            .map_err(|e| Error::invalid("name", e.to_string()))?;
        Ok(self.client.request(req).await?)
    }
}
