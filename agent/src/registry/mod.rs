//! The agent's view of all processes on the node: records loaded from the state dir, kept current
//! by inotify on the records directory, supervisors watched through pidfds (a supervisor that
//! vanishes without a final record becomes `ProcessLost`), and a broadcast of every change.
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbox_api::wire::{
    ApiError, EndReason, ErrorCode, Phase, ProcessRecord, SignalRequest, StartRequest, WatchEvent,
};
use tokio::io::unix::AsyncFd;
use tokio::sync::broadcast;
use tracing::{info, warn};

use crate::clock::now_rfc3339;
use crate::control;
use crate::error::AgentError;
use crate::exec_id::ExecId;
use crate::follow::Follows;
use crate::layout::Layout;
use crate::record;
use crate::runtime::version::{self, Verdict};
use crate::runtime::{exec_spec, LaunchSpec, Lookup};
use crate::spawn::{self, SpawnConfig};
use crate::supervisor::{valid_signal, Control, SupervisorIdentity};

/// How long a start waits for the supervisor to report Running or Error.
/// The API's bound on every duration ([`sandbox_api::wire::MAX_SECONDS`]), enforced again at the
/// agent's door: the agent serves whoever holds the operator's token, not only the API server.
const MAX_SECONDS: u64 = sandbox_api::wire::MAX_SECONDS as u64;
const START_WAIT: Duration = Duration::from_secs(30);
/// Free bytes in the state dir below which a start waits (429) rather than begins.
const MIN_FREE_TO_START: u64 = 1 << 20;

pub struct Config {
    pub layout: Layout,
    pub lookup: Lookup,
    pub spawn: SpawnConfig,
    pub runtime_binary: String,
    /// Used when the lookup does not say where the container's runtime state lives.
    pub default_runtime_root: String,
    pub retention_bytes: u64,
    /// Prefix under which container roots are visible (`/proc`; with hostPID the host's).
    pub proc_root: String,
    /// The node's output budget and the retention of finished output.
    pub budget: crate::budget::Budget,
    pub budget_sweep: Duration,
    /// Most processes supervised at once on this node.
    pub max_processes: usize,
    /// Most log follows open at once on one process, and on this agent.
    pub max_follows_per_process: usize,
    pub max_follows: usize,
    /// Skip the runtime version check (a build patched in a way `runtime::version` cannot tell).
    pub allow_vulnerable_runtime: bool,
}

pub struct Registry {
    cfg: Config,
    records: Mutex<BTreeMap<String, ProcessRecord>>,
    tx: broadcast::Sender<WatchEvent>,
    start_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    follows: Arc<Follows>,
    /// Each runtime binary judged, and the verdict (judged again when the file changes).
    runtime_verdicts: Mutex<HashMap<String, (spawn::FileId, Verdict)>>,
}

impl Registry {
    /// Loads the state dir, reattaches to live supervisors and marks dead ones lost, then starts
    /// watching for changes.
    pub async fn open(cfg: Config) -> Result<Arc<Self>, AgentError> {
        cfg.layout
            .ensure()
            .map_err(AgentError::io("creating state dir"))?;
        let (tx, _) = broadcast::channel(4096);
        let follows = Follows::new(cfg.max_follows_per_process, cfg.max_follows)
            .map_err(AgentError::io("inotify for log follows"))?;
        let reg = Arc::new(Registry {
            follows,
            cfg,
            records: Mutex::new(BTreeMap::new()),
            tx,
            start_locks: Mutex::new(HashMap::new()),
            runtime_verdicts: Mutex::new(HashMap::new()),
        });
        // Watch first so no change between the scan and the watch is missed.
        reg.clone().spawn_watcher()?;
        let procs = std::fs::read_dir(reg.cfg.layout.procs_dir())
            .map_err(AgentError::io("reading procs dir"))?;
        let mut live = 0;
        for entry in procs.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if name.starts_with(".new-") {
                let _ = std::fs::remove_dir_all(entry.path()); // a start interrupted by a crash
                continue;
            }
            let Ok(id) = ExecId::parse(&name) else {
                continue;
            };
            match record::read_record(&reg.cfg.layout.record(&id)) {
                Ok(rec) if rec.is_final() => reg.upsert(rec),
                _ => {
                    live += 1;
                    reg.clone().reattach(id).await;
                }
            }
        }
        info!(
            records = reg.records.lock().unwrap().len(),
            live, "state loaded"
        );
        tokio::spawn(async {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                spawn::reap_exited();
            }
        });
        tokio::spawn(reg.clone().keep_budget());
        Ok(reg)
    }

    /// The node's output budget and the retention of finished output, every sweep.
    async fn keep_budget(self: Arc<Self>) {
        loop {
            tokio::time::sleep(self.cfg.budget_sweep).await;
            let (budget, layout, records) = (
                self.cfg.budget.clone(),
                self.cfg.layout.clone(),
                self.list(),
            );
            let swept = tokio::task::spawn_blocking(move || {
                budget.sweep(&layout, &records, std::time::SystemTime::now())
            })
            .await;
            let Ok(swept) = swept else { continue };
            if swept.trimmed > 0 {
                info!(
                    segments = swept.trimmed,
                    held = swept.held,
                    "output budget: trimmed running ledgers"
                );
            }
            for (id, why) in swept.freed {
                info!(exec_id = %id, why, "output freed");
                let Ok(eid) = ExecId::parse(&id) else {
                    continue;
                };
                let path = self.cfg.layout.record(&eid);
                if let Ok(mut rec) = record::read_record(&path) {
                    rec.output.dropped_bytes = rec.output.stdout_bytes + rec.output.stderr_bytes;
                    rec.revision += 1;
                    if record::write_json(&path, &rec, false).is_ok() {
                        self.upsert(rec);
                    }
                }
            }
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<WatchEvent> {
        self.tx.subscribe()
    }

    pub fn list(&self) -> Vec<ProcessRecord> {
        self.records.lock().unwrap().values().cloned().collect()
    }

    pub fn get(&self, id: &str) -> Result<ProcessRecord, AgentError> {
        self.records
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .ok_or_else(|| AgentError::ProcessNotFound(id.to_string()))
    }

    pub fn layout(&self) -> &Layout {
        &self.cfg.layout
    }

    pub fn follows(&self) -> &Arc<Follows> {
        &self.follows
    }

    /// Stores `rec` if newer than what we have, and tells watchers.
    fn upsert(&self, rec: ProcessRecord) {
        let mut map = self.records.lock().unwrap();
        if let Some(old) = map.get(&rec.exec_id) {
            // A lost-marking by the agent carries the supervisor's last revision + 1; older
            // supervisor writes arriving late must not undo a final record.
            if old.revision > rec.revision || (old.is_final() && !rec.is_final()) || old == &rec {
                return;
            }
        }
        map.insert(rec.exec_id.clone(), rec.clone());
        drop(map);
        if rec.is_final() {
            // Followers read once more after the final record: the output is complete then.
            if let Ok(id) = ExecId::parse(&rec.exec_id) {
                self.follows.wake(&self.cfg.layout.ledger(&id));
            }
        }
        let _ = self.tx.send(WatchEvent::Upsert {
            record: Box::new(rec),
        });
    }

    fn spawn_watcher(self: Arc<Self>) -> Result<(), AgentError> {
        use inotify::{Inotify, WatchMask};
        let ino = Inotify::init().map_err(AgentError::io("inotify init"))?;
        ino.watches()
            .add(
                self.cfg.layout.records_dir(),
                WatchMask::MOVED_TO | WatchMask::CLOSE_WRITE | WatchMask::DELETE,
            )
            .map_err(AgentError::io("watching records dir"))?;
        let mut stream = ino
            .into_event_stream(vec![0u8; 64 * 1024])
            .map_err(AgentError::io("inotify stream"))?;
        tokio::spawn(async move {
            use futures::StreamExt;
            while let Some(ev) = stream.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        warn!(error = %e, "inotify");
                        continue;
                    }
                };
                let Some(name) = ev.name.as_ref().and_then(|n| n.to_str()) else {
                    continue;
                };
                if name.starts_with('.') {
                    continue;
                }
                let Some(id) = name.strip_suffix(".json") else {
                    continue;
                };
                let Ok(id) = ExecId::parse(id) else { continue };
                if ev.mask.contains(inotify::EventMask::DELETE) {
                    continue; // forget() removes from the map itself
                }
                if let Ok(rec) = record::read_record(&self.cfg.layout.record(&id)) {
                    self.upsert(rec);
                }
            }
        });
        Ok(())
    }

    /// Resumes watching a process whose supervisor may still run (after an agent restart).
    async fn reattach(self: Arc<Self>, id: ExecId) {
        let ident: Option<SupervisorIdentity> =
            record::read_json(&self.cfg.layout.supervisor(&id)).ok();
        if let Ok(rec) = record::read_record(&self.cfg.layout.record(&id)) {
            self.upsert(rec);
        }
        match ident {
            Some(ident) if ident.alive() => self.watch_supervisor(id, ident),
            _ => {
                // Started before a crash but never got a supervisor, or it died unrecorded.
                self.mark_lost(&id, "supervisor not running and no exit record")
                    .await;
            }
        }
    }

    /// Waits for the supervisor to exit (pidfd), then checks that it left a final record.
    fn watch_supervisor(self: Arc<Self>, id: ExecId, ident: SupervisorIdentity) {
        match pidfd_open(ident.pid) {
            Ok(fd) if ident.alive() => {
                // SAFETY: the OwnedFd moves into the AsyncFd and stays open, unchanged, for its
                // whole lifetime.
                if let Ok(afd) = unsafe { AsyncFd::register(fd) } {
                    return self.watch_exit(id, afd);
                }
                self.judge_after_exit(id);
            }
            // Already gone (or pid reused: identity check failed).
            _ => self.judge_after_exit(id),
        }
    }

    fn watch_exit(self: Arc<Self>, id: ExecId, exits: AsyncFd<OwnedFd>) {
        tokio::spawn(async move {
            let _ = exits.readable().await;
            drop(exits);
            self.judge(id).await;
        });
    }

    fn judge_after_exit(self: Arc<Self>, id: ExecId) {
        tokio::spawn(async move { self.judge(id).await });
    }

    /// After the supervisor's end: its final record, or the process is lost.
    async fn judge(&self, id: ExecId) {
        // Let inotify deliver the final write before judging.
        tokio::time::sleep(Duration::from_millis(50)).await;
        match record::read_record(&self.cfg.layout.record(&id)) {
            Ok(rec) if rec.is_final() => self.upsert(rec),
            _ => {
                self.mark_lost(&id, "supervisor exited without an exit record")
                    .await
            }
        }
    }

    async fn mark_lost(&self, id: &ExecId, why: &str) {
        let path = self.cfg.layout.record(id);
        let mut rec = match record::read_record(&path) {
            Ok(r) if r.is_final() => {
                self.upsert(r);
                return;
            }
            Ok(r) => r,
            Err(_) => match record::read_json::<LaunchSpec>(&self.cfg.layout.launch(id)) {
                Ok(l) => skeleton(&l),
                Err(_) => return, // not ours / half-created dir with nothing to report
            },
        };
        warn!(exec_id = %id, why, "process lost");
        // Nothing may run on unsupervised: what is left of the tree is killed, and said so.
        let mut why = why.to_string();
        if self.cfg.layout.cgroup(id).exists() {
            match spawn::spawn_tree_reaper(&self.cfg.spawn, &self.cfg.layout, id) {
                Ok(_) => why.push_str("; what was left of its process tree was killed"),
                Err(e) => warn!(exec_id = %id, error = %e, "ending the lost process tree"),
            }
        }
        rec.phase = Phase::Error;
        rec.end_reason = Some(EndReason::Lost);
        rec.error = Some(ApiError {
            code: ErrorCode::ProcessLost,
            message: format!("{why}; the exit code is unknown"),
        });
        rec.finished_at = Some(now_rfc3339());
        rec.revision += 1;
        if let Err(e) = record::write_json(&path, &rec, true) {
            warn!(exec_id = %id, error = %e, "writing lost record");
        }
        self.upsert(rec);
    }

    fn lock_for(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.start_locks
            .lock()
            .unwrap()
            .entry(id.to_string())
            .or_default()
            .clone()
    }

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
        let req = sandbox_api::validate::start(req)?;
        let lock = self.lock_for(id.as_str());
        let _guard = lock.lock().await;
        let proc_dir = self.cfg.layout.proc_dir(&id);
        if proc_dir.exists() {
            return self.wait_started(&id).await;
        }
        // A node-wide cap on supervised processes (each holds a supervisor and a cgroup): a start
        // beyond it is refused for now, and the operator keeps it Pending until there is room.
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
        // A process needs a little room of its own (specs, record, its first output): on a
        // state dir that others filled, the start waits for room instead of failing later.
        if let Ok(st) = nix::sys::statvfs::statvfs(self.cfg.layout.root()) {
            let free = st.blocks_available().saturating_mul(st.fragment_size());
            if free < MIN_FREE_TO_START {
                return Err(AgentError::TooManyRequests(format!(
                    "the agent's state directory has {free} bytes free, under the {MIN_FREE_TO_START} a start needs; the start waits for room"
                )));
            }
        }
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
            container_start: crate::procfs::start_time(info.pid),
            runtime_binary,
            runtime_root: info
                .runtime_root
                .clone()
                .unwrap_or_else(|| self.cfg.default_runtime_root.clone()),
            retention_bytes: self.cfg.retention_bytes,
        };
        // The process dir appears complete or not at all (written aside, then renamed): its
        // existence is the cross-restart idempotency point — once there, this id never spawns again.
        let staging = self.cfg.layout.procs_dir().join(format!(".new-{id}"));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir(&staging).map_err(io_or_full("creating process dir"))?;
        record::write_json(&staging.join("process.json"), &process, false)
            .map_err(io_or_full("writing process spec"))?;
        record::write_json(&staging.join("launch.json"), &launch, false)
            .map_err(io_or_full("writing launch spec"))?;
        if let Err(e) = std::fs::rename(&staging, &proc_dir) {
            let _ = std::fs::remove_dir_all(&staging);
            if proc_dir.exists() {
                return self.wait_started(&id).await;
            }
            return Err(io_or_full("publishing process dir")(e));
        }
        let mut rx = self.subscribe();
        let pid = spawn::spawn_supervisor(&self.cfg.spawn, &self.cfg.layout, &id).map_err(|e| {
            AgentError::ProcessSpawnFailed {
                argv0: launch.request.command[0].clone(),
                reason: format!("starting supervisor: {e}"),
            }
        });
        let pid = match pid {
            Ok(p) => p,
            Err(e) => {
                self.mark_lost(&id, &e.to_string()).await;
                return Err(e);
            }
        };
        info!(exec_id = %id, supervisor = pid, container = %info.id, "supervisor started");
        // The supervisor is our child and cannot have been reaped before its pidfd is open unless
        // it already exited: then the record (or its absence) tells.
        let exits = pidfd_open(pid as i32)
            .ok()
            // SAFETY: the OwnedFd moves into the AsyncFd and stays open, unchanged, for its whole
            // lifetime.
            .and_then(|fd| unsafe { AsyncFd::register(fd) }.ok());
        // Wait for the first non-Starting record, or the supervisor's end before it.
        let deadline = tokio::time::Instant::now() + START_WAIT;
        let mut exited = exits.is_none();
        while !exited {
            if let Ok(rec) = self.get(id.as_str()) {
                if rec.phase != Phase::Starting {
                    break;
                }
            }
            let died = async {
                match &exits {
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
        if exited {
            // A supervisor that ends before its process has a final record (it could not bind
            // its socket, open its ledger, ...): an Error saying why, not a start that vanishes.
            tokio::time::sleep(Duration::from_millis(50)).await;
            match record::read_record(&self.cfg.layout.record(&id)) {
                Ok(rec) if rec.is_final() => self.upsert(rec),
                _ => {
                    let why = match last_line(&self.cfg.layout.proc_dir(&id).join("supervisor.log"))
                    {
                        Some(line) => {
                            format!("the supervisor ended before the process did: {line}")
                        }
                        None => "the supervisor ended before the process did".to_string(),
                    };
                    self.mark_lost(&id, &why).await;
                }
            }
        } else if let Some(fd) = exits {
            self.clone().watch_exit(id.clone(), fd);
        }
        self.record_now(&id)
    }

    fn record_now(&self, id: &ExecId) -> Result<ProcessRecord, AgentError> {
        if let Ok(rec) = record::read_record(&self.cfg.layout.record(id)) {
            self.upsert(rec);
        }
        self.get(id.as_str())
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
                return Err(AgentError::OperationInterrupted(format!(
                    "process {id} is still being created"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

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
        control::send(&self.cfg.layout.control(&id), &control).await?;
        self.record_now(&id)
    }

    /// Stops the process if it runs (stop sequence), waits for its end, then deletes everything.
    pub async fn forget(&self, id: &str) -> Result<(), AgentError> {
        let rec = self.get(id)?;
        let id = ExecId::parse(id)?;
        if !rec.is_final() {
            let launch: Option<LaunchSpec> = record::read_json(&self.cfg.layout.launch(&id)).ok();
            let (signal, grace) = launch
                .map(|l| (l.request.stop_signal, l.request.grace_seconds))
                .unwrap_or((15, 5));
            let _ = control::send(
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
                    return Err(AgentError::OperationInterrupted(format!(
                        "process {id} did not end after SIGKILL"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let _ = std::fs::remove_file(self.cfg.layout.record(&id));
        let _ = std::fs::remove_dir_all(self.cfg.layout.proc_dir(&id));
        self.records.lock().unwrap().remove(id.as_str());
        self.start_locks.lock().unwrap().remove(id.as_str());
        let _ = self.tx.send(WatchEvent::Deleted {
            exec_id: id.to_string(),
        });
        Ok(())
    }
}

fn skeleton(l: &LaunchSpec) -> ProcessRecord {
    let r = &l.request;
    ProcessRecord::starting(&r.exec_id, &r.pod_uid, &r.container, &l.container_id)
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

fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd we then own exclusively.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a freshly returned, valid descriptor not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
