//! Requests to a process that runs: a signal, a stop sequence, and forgetting it (stop, wait for
//! its end, delete everything).
use std::time::Duration;

use sandbox_wire::wire::{ProcessRecord, SignalRequest, WatchEvent};

use super::{Registry, MAX_SECONDS};
use crate::control_client;
use crate::error::AgentError;
use sandbox_node_protocol::control::{valid_signal, Control};
use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::launch::LaunchSpec;
use sandbox_node_protocol::record;

impl Registry {
    pub async fn signal(&self, id: &str, req: SignalRequest) -> Result<ProcessRecord, AgentError> {
        let rec = self.get(id)?;
        let id = ExecId::parse(id)?;
        let control = if req.stop {
            let launch: LaunchSpec = record::read_json(&self.cfg.layout.launch(&id))
                .map_err(AgentError::io("reading launch spec"))?;
            let signal = req.signal.unwrap_or(launch.request.stop_signal);
            if !valid_signal(signal) {
                return Err(AgentError::InvalidRequest(format!(
                    "signal {signal}: must be 1-64"
                )));
            }
            let grace_seconds = req.grace_seconds.unwrap_or(launch.request.grace_seconds);
            if grace_seconds > MAX_SECONDS {
                return Err(AgentError::InvalidRequest(format!(
                    "graceSeconds {grace_seconds}: must be at most {MAX_SECONDS}"
                )));
            }
            Control::Stop {
                signal,
                grace_seconds,
            }
        } else {
            let signal = req.signal.ok_or_else(|| {
                AgentError::InvalidRequest("signal: required unless stop is true".into())
            })?;
            if !valid_signal(signal) {
                return Err(AgentError::InvalidRequest(format!(
                    "signal {signal}: must be 1-64"
                )));
            }
            Control::Signal { signal }
        };
        if rec.is_final() {
            return Ok(rec); // stopping or signalling an ended process succeeds, changes nothing
        }
        control_client::send(&self.cfg.layout.control(&id), &control).await?;
        self.record_now(&id)
    }

    /// Stops the process if it runs (stop sequence), waits for its end, then deletes everything.
    pub async fn forget(&self, id: &str) -> Result<(), AgentError> {
        // Not while its object is being changed ([`Registry::set_object`]): that would store its
        // record again after it was forgotten.
        let _one_at_a_time = self.ops.lock(id).await;
        let rec = self.get(id)?;
        let id = ExecId::parse(id)?;
        if !rec.is_final() {
            let launch: Option<LaunchSpec> = record::read_json(&self.cfg.layout.launch(&id)).ok();
            let (signal, grace) = launch
                .map(|l| (l.request.stop_signal, l.request.grace_seconds))
                .unwrap_or((15, 5));
            let _ = control_client::send(
                &self.cfg.layout.control(&id),
                &Control::Stop {
                    signal,
                    grace_seconds: grace,
                },
            )
            .await;
            // Saturating: a record written before the bound existed may carry any grace.
            let wait = Duration::from_secs(grace.min(MAX_SECONDS).saturating_add(10));
            let deadline = tokio::time::Instant::now() + wait;
            while !self.get(id.as_str()).map(|r| r.is_final()).unwrap_or(true) {
                if tokio::time::Instant::now() >= deadline {
                    return Err(AgentError::OperationInterrupted(
                        "the process did not end after SIGKILL".into(),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let _ = std::fs::remove_file(self.cfg.layout.record(&id));
        let _ = std::fs::remove_dir_all(self.cfg.layout.proc_dir(&id));
        self.records.lock().unwrap().remove(id.as_str());
        self.objects.lock().unwrap().remove(id.as_str());
        let _ = self.tx.send(WatchEvent::Deleted {
            exec_id: id.to_string(),
        });
        Ok(())
    }
}
