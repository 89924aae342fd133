//! Waiting on the object: a watch until a condition holds (re-watched when cut), and the waits
//! built on it (exit, start, readiness).
use std::time::{Duration, Instant};

use kube::runtime::wait::await_condition;
use sandbox_api::crd::SandboxProcess;

use super::Process;
use crate::door::Door;
use crate::error::{Error, Result};
use crate::state::{exit_of, is_final, is_ready, ready_outcome, Exit};

impl Process {
    /// Waits (on a watch) until `cond` holds, for any condition a caller (or a test) needs
    /// beyond the ones named here; `what` names it in a timeout. `None` waits for ever. A
    /// deleted object ends the wait with [`Error::NotFound`].
    pub async fn until(
        &self,
        timeout: Option<Duration>,
        what: &'static str,
        cond: impl Fn(&SandboxProcess) -> bool + Send + 'static,
    ) -> Result<SandboxProcess> {
        let cond = std::sync::Arc::new(cond);
        let watched = async {
            let mut failures = 0u32;
            loop {
                match self.watch_once(cond.clone()).await {
                    Ok(got) => return Ok(got),
                    // The watch ended on an error (expired, cut, the API server restarting):
                    // watch again, as kubectl wait does; the timeout bounds it.
                    Err(_) if failures < 60 => {
                        failures += 1;
                        tokio::time::sleep(Duration::from_millis(
                            250 * u64::from(failures.min(20)),
                        ))
                        .await;
                    }
                    Err(e) => return Err(self.door.watch_failed(&self.name, e)),
                }
            }
        };
        self.within(what, timeout, Instant::now(), watched)
            .await?
            .ok_or_else(|| Error::NotFound(self.name.clone()))
    }

    /// One watch until `cond` holds or the object is gone (`None`), through the handle's door.
    async fn watch_once<F>(
        &self,
        cond: std::sync::Arc<F>,
    ) -> std::result::Result<Option<SandboxProcess>, kube::runtime::wait::Error>
    where
        F: Fn(&SandboxProcess) -> bool + Send + 'static,
    {
        // Boxed: a watcher's state is large, and waits nest (wait_for_port holds one while it
        // checks); on the stack it overflowed a 2 MiB thread in debug builds. A deleted object
        // also ends the wait; the caller reports it.
        match self.door {
            Door::SandboxProcess => {
                let api = Door::sandbox_processes(&self.client, &self.namespace);
                let c = move |o: Option<&SandboxProcess>| o.is_none_or(|o| cond(o));
                Box::pin(await_condition(api, &self.name, c)).await
            }
            Door::Process => {
                let api = Door::served(&self.client, &self.namespace);
                let c = move |o: Option<&sandbox_api::process::Process>| {
                    o.is_none_or(|o| cond(&SandboxProcess::from(o.clone())))
                };
                let got = Box::pin(await_condition(api, &self.name, c)).await?;
                Ok(got.map(SandboxProcess::from))
            }
        }
    }

    /// Waits until the process has ended; how. Phase `Error` (could not run, lost, stale
    /// handle) is [`Error::Process`] with its code. A timeout ends only this wait.
    pub async fn wait(&self, timeout: Option<Duration>) -> Result<Exit> {
        let o = self.until(timeout, "exit", is_final).await?;
        exit_of(&o)
    }

    /// Waits until the process was started (it has output then); one that could not start is
    /// [`Error::Process`] with its `status.error` code (or [`Error::EndedWithoutExit`]: stopped
    /// first). At the timeout: [`Error::NotStarted`], which says why it waits.
    pub async fn wait_started(&self, timeout: Option<Duration>) -> Result<()> {
        self.ensure_started("wait_started", timeout).await
    }

    /// Waits until the process is ready (its declared readiness passed; without one, once it
    /// started). Ending first is [`Error::ExitedBeforeReady`] or [`Error::Process`].
    pub async fn wait_ready(&self, timeout: Option<Duration>) -> Result<()> {
        let o = self
            .until(timeout, "be ready", |o| is_ready(o) || is_final(o))
            .await?;
        ready_outcome(&o)
    }
}
