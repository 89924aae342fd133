//! The handle of one started process: its SandboxProcess object, by name. The handle's calls
//! are grouped by job: waits (`wait`), output (`output`), signals (`control`), stdin (`stdin`),
//! the terminal (`terminal`).
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use sandbox_api::crd::{SandboxProcess, SandboxProcessStatus};

use crate::door::Door;
use crate::error::{Error, Result};
use crate::stdin::{StallHook, StdinStall};

mod attach;
mod control;
mod output;
mod stdin;
mod terminal;
mod wait;

pub use attach::{AttachEvent, AttachInput, AttachOptions, AttachOutput};
pub use control::Killed;
pub use output::{LogMatch, Output};

/// A process started through a SandboxProcess (or a Process, [`Door::Process`]). Cheap to
/// clone; holds no connection. Dropping it does nothing to the process: [`crate::Sandbox::get`]
/// with its name reattaches.
#[derive(Clone)]
pub struct Process {
    pub(crate) client: Client,
    pub(crate) door: Door,
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// Seen started once: calls that need a start do not ask again (a start is for good).
    pub(crate) started: Arc<AtomicBool>,
    /// How long a call without a timeout of its own waits for the start.
    pub(crate) start_timeout: Option<Duration>,
    /// Told when stdin has not taken a byte for a while.
    pub(crate) stdin_stall: Option<StallHook>,
}

/// How long a call without a timeout of its own (stdin, signal, logs) waits for the process to
/// start, by default ([`Process::with_start_timeout`]).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish()
    }
}

impl Process {
    /// The object's name (the id to reattach with).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// How long calls without a timeout of their own (stdin, signal, logs) wait for the process
    /// to start (default [`START_TIMEOUT`]; `None`: for ever). Not started by then:
    /// [`Error::NotStarted`], whose code says why (`PodNotFound`, ...).
    pub fn with_start_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Calls `hook` when a stdin write has waited `after` without the process taking a byte
    /// (it is not reading its stdin); the write goes on waiting. Once per stall.
    pub fn on_stdin_stall(
        mut self,
        after: Duration,
        hook: impl Fn(&StdinStall) + Send + Sync + 'static,
    ) -> Self {
        self.stdin_stall = Some(StallHook {
            after,
            hook: Arc::new(hook),
        });
        self
    }

    /// The door it was started through.
    pub fn door(&self) -> Door {
        self.door
    }

    pub(crate) fn url(&self, sub: &str) -> String {
        format!("{}/{sub}", self.door.path(&self.namespace, &self.name))
    }

    /// The object as it is now (a Process read as the SandboxProcess it mirrors).
    pub async fn object(&self) -> Result<SandboxProcess> {
        self.door
            .get(&self.client, &self.namespace, &self.name)
            .await?
            .ok_or_else(|| Error::NotFound(self.name.clone()))
    }

    /// Its status as it is now.
    pub async fn status(&self) -> Result<SandboxProcessStatus> {
        Ok(self.object().await?.status.unwrap_or_default())
    }

    /// Deletes the object (a running process is stopped first, by the operator or, for a
    /// Process, by its node's agent).
    pub async fn delete(&self) -> Result<()> {
        self.door
            .delete(&self.client, &self.namespace, &self.name)
            .await
    }
}
