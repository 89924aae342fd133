//! The agent's view of all processes on the node: records loaded from the state dir, kept current
//! by inotify on the records directory, supervisors watched through pidfds (a supervisor that
//! vanishes without a final record becomes `ProcessLost`), and a broadcast of every change.
//!
//! Where each part lives: [`start`](self::start) (one start per exec id, and what it checks
//! first), [`supervision`](self::supervision) (supervisors watched, lost processes),
//! [`stop`](self::stop) (signals, stops, forgetting a process).
mod locks;
mod object;
mod probe;
mod start;
mod stdin;
pub use stdin::Who;
mod stop;
mod supervision;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbox_wire::wire::{ProcessRecord, WatchEvent};
use tokio::sync::broadcast;
use tracing::{info, warn};

use crate::error::AgentError;
use crate::follow::Follows;
use crate::runtime::version::Verdict;
use crate::runtime::Lookup;
use crate::spawn::{self, SpawnConfig};
use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::layout::Layout;
use sandbox_node_protocol::record;

/// The API's bound on every duration ([`sandbox_wire::wire::MAX_SECONDS`]), enforced again at the
/// agent's door: the agent serves whoever holds the operator's token, not only the API server.
const MAX_SECONDS: u64 = sandbox_wire::wire::MAX_SECONDS as u64;

pub struct Config {
    pub layout: Layout,
    pub lookup: Lookup,
    pub spawn: SpawnConfig,
    pub runtime_binary: String,
    /// Used when the lookup does not say where the container's runtime state lives.
    pub default_runtime_root: String,
    pub retention_bytes: u64,
    /// The bound on one `runc exec` (LaunchSpec::runtime_timeout_ms).
    pub runtime_timeout_ms: u64,
    /// The back-off between runs of a restarting process.
    pub backoff: sandbox_node_protocol::launch::Backoff,
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
    /// One start, forget or object change at a time per process.
    ops: locks::KeyedLocks,
    follows: Arc<Follows>,
    /// Each runtime binary judged, and the verdict (judged again when the file changes).
    runtime_verdicts: Mutex<HashMap<String, (spawn::FileId, Verdict)>>,
    /// Processes recorded Lost since this agent started (a metric).
    lost: std::sync::atomic::AtomicU64,
    /// `processes` objects changed after their start ([`object`](self::object)), by exec id.
    objects: Mutex<HashMap<String, Box<sandbox_wire::wire::ProcessObject>>>,
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
            ops: Default::default(),
            runtime_verdicts: Mutex::new(HashMap::new()),
            lost: Default::default(),
            objects: Default::default(),
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
            reg.load_object(&id);
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

    /// Processes recorded Lost since this agent started.
    pub fn lost(&self) -> u64 {
        self.lost.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn layout(&self) -> &Layout {
        &self.cfg.layout
    }

    pub fn follows(&self) -> &Arc<Follows> {
        &self.follows
    }

    /// Stores `rec` if newer than what we have, and tells watchers.
    fn upsert(&self, mut rec: ProcessRecord) {
        let mut map = self.records.lock().unwrap();
        // Under the records' lock: a changed object stored meanwhile is laid over this one.
        self.lay_object_over(&mut rec);
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

    fn record_now(&self, id: &ExecId) -> Result<ProcessRecord, AgentError> {
        if let Ok(rec) = record::read_record(&self.cfg.layout.record(id)) {
            self.upsert(rec);
        }
        self.get(id.as_str())
    }
}
