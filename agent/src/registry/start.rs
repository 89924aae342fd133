//! One start per exec id: the request checked, room on the node, the container found and its
//! runtime judged, the process dir published atomically, the supervisor spawned and its first
//! report awaited.
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use sandbox_wire::wire::{Phase, ProcessRecord, StartRequest, WatchEvent};
use sandbox_wire::wire_rules::Valid;
use tokio::io::unix::AsyncFd;
use tokio::sync::broadcast;
use tracing::info;

use super::Registry;
use crate::error::AgentError;
use crate::runtime::exec_spec;
use crate::runtime::version::{self, Verdict};
use crate::spawn;
use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::launch::LaunchSpec;
use sandbox_node_protocol::record;

/// How long a start waits for the supervisor to report Running or Error.
const START_WAIT: Duration = Duration::from_secs(30);
/// Free bytes in the state dir below which a start waits (429) rather than begins.
const MIN_FREE_TO_START: u64 = 1 << 20;
// Output never takes the room a start was promised (ledger::OUTPUT_FLOOR).
const _: () = assert!(sandbox_node_protocol::ledger::OUTPUT_FLOOR >= 2 * MIN_FREE_TO_START);

impl Registry {
    /// Refuses to launch with a runtime known to let a process reach the host (see
    /// `runtime::version`). The verdict is kept until the binary changes.
    async fn check_runtime(self: &Arc<Self>, binary: &str) -> Result<(), AgentError> {
        if self.cfg.allow_vulnerable_runtime {
            return Ok(());
        }
        let (spawn_cfg, bin) = (self.cfg.spawn.clone(), binary.to_string());
        let cached = self.runtime_verdicts.lock().unwrap().get(binary).cloned();
        let judged = tokio::task::spawn_blocking(move || -> std::io::Result<_> {
            let id = spawn::runtime_file_id(&spawn_cfg, &bin)?;
            match cached {
                Some((seen, v)) if seen == id => Ok((id, v, false)),
                _ => Ok((
                    id,
                    version::judge(&spawn::runtime_version(&spawn_cfg, &bin)?),
                    true,
                )),
            }
        })
        .await
        .map_err(|e| AgentError::Internal(e.to_string()))?
        // Not a verdict on the runtime (it could not be asked): the operator tries again.
        .map_err(|e| {
            AgentError::OperationInterrupted(format!("checking the runtime {binary}: {e}"))
        })?;
        let (id, verdict, fresh) = judged;
        if fresh {
            info!(runtime = %binary, verdict = %verdict, "runtime version judged");
            self.runtime_verdicts
                .lock()
                .unwrap()
                .insert(binary.to_string(), (id, verdict.clone()));
        }
        match verdict {
            Verdict::Supported => Ok(()),
            Verdict::Refused(why) => Err(AgentError::RuntimeUnsupported(format!(
                "the runtime {binary}: {why}"
            ))),
        }
    }

    /// Starts the process, or returns the existing one for this exec id (idempotent).
    pub async fn start(self: &Arc<Self>, req: StartRequest) -> Result<ProcessRecord, AgentError> {
        let id = ExecId::parse(&req.exec_id)?;
        let req = sandbox_wire::wire_rules::start(req)?;
        let _one_at_a_time = self.ops.lock(id.as_str()).await;
        if self.cfg.layout.proc_dir(&id).exists() {
            return self.wait_started(&id).await;
        }
        self.check_process_cap()?;
        self.check_free_space()?;
        let (process, launch) = self.prepare(req).await?;
        if !self.publish(&id, &process, &launch)? {
            return self.wait_started(&id).await;
        }
        let mut rx = self.subscribe();
        let exits = self.spawn_supervisor(&id, &launch).await?;
        if self.supervisor_ended_first(&id, &mut rx, &exits).await {
            self.judge_early_end(&id).await;
        } else if let Some(fd) = exits {
            self.clone().watch_exit(id.clone(), fd);
        }
        self.record_now(&id)
    }

    /// A node-wide cap on supervised processes (each holds a supervisor and a cgroup): a start
    /// beyond it is refused for now, and the operator keeps it Pending until there is room.
    fn check_process_cap(&self) -> Result<(), AgentError> {
        let running = self
            .records
            .lock()
            .unwrap()
            .values()
            .filter(|r| !r.is_final())
            .count();
        if running >= self.cfg.max_processes {
            return Err(AgentError::TooManyRequests(format!(
                "this node's agent supervises {running} processes, its cap (--max-processes); the start waits for room"
            )));
        }
        Ok(())
    }

    /// A process needs a little room of its own (specs, record, its first output): on a
    /// state dir that others filled, the start waits for room instead of failing later.
    fn check_free_space(&self) -> Result<(), AgentError> {
        if let Some(free) = free_bytes(self.cfg.layout.root()) {
            if free < MIN_FREE_TO_START {
                return Err(AgentError::TooManyRequests(format!(
                    "the agent's state directory has {free} bytes free, under the {MIN_FREE_TO_START} a start needs; the start waits for room"
                )));
            }
        }
        Ok(())
    }

    /// Everything the supervisor will need, decided before anything is written: the container,
    /// its runtime (judged), and the exec'd process built from the container's own and checked
    /// inside its root.
    async fn prepare(
        self: &Arc<Self>,
        req: Valid<StartRequest>,
    ) -> Result<(serde_json::Value, LaunchSpec), AgentError> {
        let info = self.cfg.lookup.find(&req.pod_uid, &req.container).await?;
        let runtime_binary = info
            .runtime_binary
            .clone()
            .unwrap_or_else(|| self.cfg.runtime_binary.clone());
        self.check_runtime(&runtime_binary).await?;
        let mut process = exec_spec::build_process(&info.spec, &req)?;
        let root = std::path::PathBuf::from(format!("{}/{}/root", self.cfg.proc_root, info.pid));
        {
            let (root, process_) = (root.clone(), process.clone());
            let cwd =
                tokio::task::spawn_blocking(move || exec_spec::precheck_in_root(&root, &process_))
                    .await
                    .map_err(|e| AgentError::Internal(e.to_string()))??;
            process["cwd"] = cwd.into();
        }
        let launch = LaunchSpec {
            request: req.into_inner(),
            container_id: info.id.clone(),
            container_pid: info.pid,
            container_start: sandbox_node_protocol::procfs::start_time(info.pid),
            runtime_binary,
            runtime_root: info
                .runtime_root
                .clone()
                .unwrap_or_else(|| self.cfg.default_runtime_root.clone()),
            retention_bytes: self.cfg.retention_bytes,
            runtime_timeout_ms: self.cfg.runtime_timeout_ms,
            backoff: self.cfg.backoff,
        };
        Ok((process, launch))
    }

    /// The process dir appears complete or not at all (written aside, then renamed): its
    /// existence is the cross-restart idempotency point — once there, this id never spawns again.
    /// `Ok(false)`: another start published it first.
    fn publish(
        &self,
        id: &ExecId,
        process: &serde_json::Value,
        launch: &LaunchSpec,
    ) -> Result<bool, AgentError> {
        let proc_dir = self.cfg.layout.proc_dir(id);
        let staging = self.cfg.layout.procs_dir().join(format!(".new-{id}"));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir(&staging).map_err(io_or_full("creating process dir"))?;
        record::write_json(&staging.join("process.json"), process, false)
            .map_err(io_or_full("writing process spec"))?;
        record::write_json(&staging.join("launch.json"), launch, false)
            .map_err(io_or_full("writing launch spec"))?;
        if let Err(e) = std::fs::rename(&staging, &proc_dir) {
            let _ = std::fs::remove_dir_all(&staging);
            if proc_dir.exists() {
                return Ok(false);
            }
            return Err(io_or_full("publishing process dir")(e));
        }
        Ok(true)
    }

    /// The supervisor owns the process from here; its pidfd (when it could be opened) tells
    /// when it ends.
    async fn spawn_supervisor(
        &self,
        id: &ExecId,
        launch: &LaunchSpec,
    ) -> Result<Option<AsyncFd<OwnedFd>>, AgentError> {
        let pid = spawn::spawn_supervisor(&self.cfg.spawn, &self.cfg.layout, id).map_err(|e| {
            AgentError::ProcessSpawnFailed {
                argv0: launch.request.command[0].clone(),
                reason: format!("starting supervisor: {e}"),
            }
        });
        let spawned = match pid {
            Ok(s) => s,
            Err(e) => {
                self.mark_lost(id, &e.to_string()).await;
                return Err(e);
            }
        };
        info!(exec_id = %id, supervisor = spawned.pid, container = %launch.container_id, "supervisor started");
        // Opened before any reap could free its pid (spawn::spawn_supervisor).
        Ok(spawned
            .exits
            // SAFETY: the OwnedFd moves into the AsyncFd and stays open, unchanged, for its whole
            // lifetime.
            .and_then(|fd| unsafe { AsyncFd::register(fd) }.ok()))
    }

    /// A start answers with the first non-Starting record; `true` when the supervisor ended
    /// before one (or could not be watched).
    async fn supervisor_ended_first(
        &self,
        id: &ExecId,
        rx: &mut broadcast::Receiver<WatchEvent>,
        exits: &Option<AsyncFd<OwnedFd>>,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + START_WAIT;
        let mut exited = exits.is_none();
        while !exited {
            if let Ok(rec) = self.get(id.as_str()) {
                if rec.phase != Phase::Starting {
                    break;
                }
            }
            let died = async {
                match exits {
                    Some(fd) => {
                        let _ = fd.readable().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = tokio::time::timeout_at(deadline, rx.recv()) => match r {
                    Err(_) | Ok(Err(broadcast::error::RecvError::Closed)) => break,
                    Ok(_) => {}
                },
                _ = died => exited = true,
            }
        }
        exited
    }

    /// A supervisor that ends before its process has a final record (it could not bind
    /// its socket, open its ledger, ...): an Error saying why, not a start that vanishes.
    async fn judge_early_end(&self, id: &ExecId) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        match record::read_record(&self.cfg.layout.record(id)) {
            Ok(rec) if rec.is_final() => self.upsert(rec),
            _ => {
                let why = match last_line(&self.cfg.layout.proc_dir(id).join("supervisor.log")) {
                    Some(line) => {
                        format!("the supervisor ended before the process did: {line}")
                    }
                    // Its log had no room either: say so, the likely cause.
                    None => match free_bytes(self.cfg.layout.root()) {
                        Some(free) if free < MIN_FREE_TO_START => format!(
                            "the supervisor ended before the process did (the agent's state directory has {free} bytes free)"
                        ),
                        _ => "the supervisor ended before the process did".to_string(),
                    },
                };
                self.mark_lost(id, &why).await;
            }
        }
    }

    /// For a repeated start: the existing process, once it has left Starting (bounded wait).
    async fn wait_started(&self, id: &ExecId) -> Result<ProcessRecord, AgentError> {
        let deadline = tokio::time::Instant::now() + START_WAIT;
        loop {
            if let Ok(rec) = self.record_now(id) {
                if rec.phase != Phase::Starting || tokio::time::Instant::now() >= deadline {
                    return Ok(rec);
                }
            } else if tokio::time::Instant::now() >= deadline {
                return Err(AgentError::OperationInterrupted(
                    "the process is still being created".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// An I/O error of a start; a full state-dir filesystem is not an error of the process but a
/// wait for room (429: the operator keeps the object Pending and asks again).
fn io_or_full(context: &'static str) -> impl FnOnce(std::io::Error) -> AgentError {
    move |e| match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => AgentError::TooManyRequests(format!(
            "{context}: the agent's state directory has no room ({e}); the start waits for room"
        )),
        _ => AgentError::io(context)(e),
    }
}

/// Bytes free to us on the filesystem of `dir`.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    Some(st.blocks_available().saturating_mul(st.fragment_size()))
}

/// The last non-empty line of a (small, agent-owned) log, bounded.
fn last_line(path: &std::path::Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(4096))).ok()?;
    let mut buf = Vec::new();
    f.take(4096).read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    Some(line.chars().take(512).collect())
}
