//! Process handles over `SandboxProcess` objects (`sandbox.dev/v1alpha1`), on kube-rs.
//!
//! The API people know from hosted sandboxes — `start` → handle; `wait`, `wait_for_log`,
//! `wait_for_port`, `logs` with cursors, `output`, `kill`, stdin — where every process is a
//! Kubernetes object: it survives this program, its operator and its node agent restarting, and
//! any client can reattach to it by name ([`Sandbox::get`]). Starting is server-side apply under
//! a name fixed before the request, so a retry (or a caller-given [`Start::id`]) never starts a
//! second process. Waits are watches, not polling. Output, signals, stdin and port checks go
//! through the operator's subresource API (`subresources.sandbox.dev`), under the caller's RBAC.
//!
//! ```no_run
//! use std::time::Duration;
//! use sandbox_client::{LogOptions, LogStream, Sandbox, Start};
//!
//! # async fn demo() -> Result<(), sandbox_client::Error> {
//! let sandbox = Sandbox::try_default().await?; // kubeconfig / in-cluster, its namespace
//! let server = sandbox
//!     .start(Start::new("web-0", ["python3", "-m", "http.server", "8000"]).id("dev-server"))
//!     .await?;
//! let seen = server
//!     .wait_for_log("Serving HTTP", LogStream::Both, None, Some(Duration::from_secs(30)))
//!     .await?;
//! server.wait_for_port(8000, Default::default()).await?;
//! // Everything after the matched line, no repeat, no gap.
//! let _rest = server.logs(LogOptions { after: Some(seen.cursor), ..Default::default() });
//! server.kill(Some(15)).await?;
//! let exit = server.wait(None).await?;
//! assert_eq!(exit.code, 128 + 15);
//! # Ok(()) }
//! ```
//!
//! The same handle reaches Processes served from the nodes (`processes.sandbox.dev`, no etcd
//! write per command) through [`Sandbox::with_door`] with [`Door::Process`]: a start is a create
//! (the same id and spec again is the same process), a stop goes through the `signal`
//! subresource, objects read as SandboxProcesses.
//!
//! A process that could not run is an [`Error::Process`] carrying `status.error.code`:
//!
//! ```no_run
//! # async fn demo(sandbox: sandbox_client::Sandbox) {
//! use sandbox_client::{ErrorCode, Start};
//! let p = sandbox.start(Start::new("web-0", ["ls"]).cwd("/no/such/dir")).await.unwrap();
//! let err = p.wait(None).await.unwrap_err();
//! assert_eq!(err.process_code(), Some(ErrorCode::InvalidProcessCwd));
//! # }
//! ```
#[cfg(test)]
mod conformance;
mod door;
mod error;
mod logs;
mod port;
mod process;
pub mod signal;
mod start;
mod started;
mod state;
mod stdin;

use std::time::Duration;

use kube::api::{ListParams, Patch, PatchParams};
use kube::Client;
use sandbox_api::crd::SandboxProcess;

pub use door::Door;
pub use error::{Error, Result};
pub use logs::{encode as percent_encode, LogEvent, LogOptions, LogStream};
pub use port::PortCheck;
pub use process::{
    AttachEvent, AttachInput, AttachOptions, AttachOutput, Killed, LogMatch, Output, Process,
    START_TIMEOUT,
};
pub use sandbox_api::crd::SecurityContextSpec as SecurityContext;
pub use sandbox_api::crd::{
    EndReason, ErrorCode, LastExitStatus, Phase, RestartPolicy, SandboxProcess as Object,
};
pub use sandbox_api::wire::{ProcessRecord, StdinState};
pub use start::Start;
pub use started::{describe, start_state, StartState};
pub use state::{
    already_ended, exit_of, is_final, is_ready, is_started, last_exit_of, never_started,
    ready_outcome, Exit,
};
pub use stdin::StdinStall;

/// The field manager of our server-side applies.
pub const FIELD_MANAGER: &str = "sandbox-client";

/// SandboxProcesses of one namespace, through one Kubernetes client.
#[derive(Clone)]
pub struct Sandbox {
    client: Client,
    namespace: String,
    field_manager: String,
    door: Door,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("namespace", &self.namespace)
            .field("door", &self.door)
            .finish()
    }
}

impl Sandbox {
    /// Processes in `namespace`, through `client`.
    pub fn new(client: Client, namespace: impl Into<String>) -> Self {
        Sandbox {
            client,
            namespace: namespace.into(),
            field_manager: FIELD_MANAGER.into(),
            door: Door::SandboxProcess,
        }
    }

    /// The same client, starting and finding processes through `door`: [`Door::Process`] for
    /// commands served from the nodes (no etcd write per command).
    pub fn with_door(mut self, door: Door) -> Self {
        self.door = door;
        self
    }

    pub fn door(&self) -> Door {
        self.door
    }

    /// From the environment, like kubectl: `$KUBECONFIG` / `~/.kube/config` (its current
    /// context's namespace), else in-cluster. kube's default retry is off: a wait or a read
    /// retries itself (by cursor or offset) where a retry is safe, and an error is seen at once.
    pub async fn try_default() -> Result<Self> {
        let mut config = kube::Config::infer()
            .await
            .map_err(|e| Error::Transport(format!("kubeconfig: {e}")))?;
        config.default_retry = false;
        let namespace = config.default_namespace.clone();
        let client = Client::try_from(config).map_err(|e| Error::Transport(e.to_string()))?;
        Ok(Sandbox::new(client, namespace))
    }

    /// The same client, in another namespace.
    pub fn in_namespace(&self, namespace: impl Into<String>) -> Self {
        Sandbox {
            namespace: namespace.into(),
            ..self.clone()
        }
    }

    /// The field manager for applies (default [`FIELD_MANAGER`]).
    pub fn with_field_manager(mut self, manager: impl Into<String>) -> Self {
        self.field_manager = manager.into();
        self
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Starts a process (creates its SandboxProcess by server-side apply) and returns its
    /// handle at once; the operator starts it on the pod's node. With the same
    /// [`Start::id`] and options again: the same process (no second start). The same id with
    /// other options, or taken by another manager: [`Error::IdInUse`].
    pub async fn start(&self, start: Start) -> Result<Process> {
        let name = start.name()?;
        let manifest = start.manifest(&self.namespace, &name)?;
        // Escaped for the API server's YAML decoder: argv and env may hold any character.
        let body = sandbox_api::apply::body(&manifest).map_err(kube::Error::SerdeError)?;
        let params = PatchParams::apply(&self.field_manager);
        let api = Door::sandbox_processes(&self.client, &self.namespace);
        let mut failures = 0u32;
        loop {
            let sent = match self.door {
                Door::SandboxProcess => api
                    .patch(&name, &params, &Patch::Apply(&body))
                    .await
                    .map(|_| ()),
                Door::Process => {
                    Door::create_served(&self.client, &self.namespace, manifest.clone()).await
                }
            };
            match sent {
                Ok(_) => return Ok(self.process(&name)),
                Err(e) => match Error::from(e) {
                    // A retry is safe: the name was fixed before the first attempt.
                    e if e.is_transient() && failures < 5 => {
                        failures += 1;
                        tokio::time::sleep(Duration::from_millis(200 * u64::from(failures))).await;
                    }
                    // A Process's create also answers 409 for other refusals (no pod matches
                    // the selector, the agent's refusals): only AlreadyExists is the name.
                    Error::Api {
                        code: 409,
                        message,
                        reason,
                    } if self.door == Door::SandboxProcess || reason == "AlreadyExists" => {
                        return Err(Error::IdInUse { name, message })
                    }
                    Error::Api {
                        code: 422, message, ..
                    } if message.contains("immutable") => {
                        return Err(Error::IdInUse { name, message })
                    }
                    e => return Err(e),
                },
            }
        }
    }

    /// A handle by name, without a request (it may not exist: its calls say so).
    pub fn process(&self, name: &str) -> Process {
        Process {
            client: self.client.clone(),
            door: self.door,
            namespace: self.namespace.clone(),
            name: name.into(),
            started: Default::default(),
            start_timeout: Some(START_TIMEOUT),
            stdin_stall: None,
        }
    }

    /// Reattaches to a process by name (its id); `None` if there is no such object.
    pub async fn get(&self, name: &str) -> Result<Option<Process>> {
        let found = self.door.get(&self.client, &self.namespace, name).await?;
        Ok(found.map(|_| self.process(name)))
    }

    /// The namespace's SandboxProcesses (their status says how each is), optionally by label
    /// selector; through [`Door::Process`], its Processes, read as SandboxProcesses.
    pub async fn list(&self, selector: Option<&str>) -> Result<Vec<SandboxProcess>> {
        let lp = list_params(selector);
        self.door
            .list(&self.client, Some(&self.namespace), &lp)
            .await
    }

    /// Every namespace's SandboxProcesses, or Processes (needs cluster-wide list).
    pub async fn list_all_namespaces(&self, selector: Option<&str>) -> Result<Vec<SandboxProcess>> {
        self.door
            .list(&self.client, None, &list_params(selector))
            .await
    }
}

fn list_params(selector: Option<&str>) -> ListParams {
    match selector {
        Some(s) => ListParams::default().labels(s),
        None => ListParams::default(),
    }
}
