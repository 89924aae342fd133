//! The replica's table of `processes`: every record an agent's watch sent that carries a
//! `processes` object, rendered once per change into the object clients read, with this
//! replica's resourceVersion, and a window of the latest changes for watches to resume from.
//! Filled by the agents' watches through [`crate::agent::ObjectSink`]; nothing of it is in etcd.
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use sandbox_api::crd::SandboxProcessStatus;
use sandbox_api::wire::ProcessRecord;
use tokio::sync::broadcast;

use super::object::{self, Columns};
use super::version::{Versions, WINDOW};
use crate::agent::ObjectSink;
use crate::status::AgentView;

/// One process as served: its object as JSON, and only what the table, the selectors and the
/// keeper read on every round besides it. The spec, the status and the annotations are read
/// from the JSON when needed (a create, a patch, a delete, a change of the record): keeping them
/// parsed too held ~2 KB more per process, the most of the operator's memory at 20,000.
#[derive(Debug)]
pub struct Entry {
    pub exec_id: String,
    /// The agent (URL) whose watch sent it.
    pub agent: String,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub rv: u64,
    /// The record's revision (the supervisor's count of its writes): an older one is stale.
    pub revision: u64,
    /// When `status.output` was last refreshed: at most every [`OUTPUT_REFRESH`] while running.
    pub output_at: std::time::Instant,
    /// What the table and the field selectors read.
    pub columns: Columns,
    pub kept: Kept,
    /// When its record last spoke (a put without a view of its agent): a view of its agent as
    /// unreachable since earlier is stale (a keeper's round that raced the agent's relisting).
    pub heard: Option<Timestamp>,
    /// Shown with its agent unreachable (a keeper's view), not as its record says.
    pub unreachable: bool,
    /// A hash of the record it was rendered from: the same record again, its agent answering,
    /// is no change, found without reading the JSON back.
    pub digest: u64,
    /// The whole object, as JSON, with `metadata.resourceVersion` = `rv`.
    pub json: Arc<str>,
}

/// What is read of a process's spec and status without its JSON: by the keeper's rounds, the
/// per-namespace bound, a delete and the subresources.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kept {
    /// Its status is final (it ended, or cannot start).
    pub ended: bool,
    /// Its status carries an error (its agent unreachable, a start that failed).
    pub erred: bool,
    /// When it ended: `finishedAt`, or for an end without one (never started) the last
    /// transition of its conditions.
    pub end: Option<Time>,
    /// `spec.ttlSecondsAfterFinished`.
    pub ttl: Option<i64>,
    /// `spec.terminationGracePeriodSeconds` (5 when not set, as the CRD's default).
    pub grace: u64,
    /// `spec.tty`.
    pub tty: bool,
}

impl Kept {
    pub(super) fn of(spec: &serde_json::Value, status: &SandboxProcessStatus) -> Kept {
        Kept {
            ended: status.is_final(),
            erred: status.error.is_some(),
            end: status.finished_at.clone().or_else(|| {
                status
                    .conditions
                    .iter()
                    .map(|c| &c.last_transition_time)
                    .max_by_key(|t| t.0)
                    .cloned()
            }),
            ttl: spec.get("ttlSecondsAfterFinished").and_then(|t| t.as_i64()),
            grace: spec
                .get("terminationGracePeriodSeconds")
                .and_then(|g| g.as_u64())
                .unwrap_or(5),
            tty: spec.get("tty").and_then(|t| t.as_bool()) == Some(true),
        }
    }
}

/// The parts of the kept JSON read back.
#[derive(serde::Deserialize)]
struct Parsed {
    metadata: ParsedMeta,
    #[serde(default)]
    spec: serde_json::Value,
    #[serde(default)]
    status: SandboxProcessStatus,
}

#[derive(serde::Deserialize)]
struct ParsedMeta {
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

impl Entry {
    /// Written by `object::to_json` from these same types, so it reads back; were it ever not
    /// to, the process reads as one with an empty spec and status (no panic under the lock).
    fn parsed(&self) -> Option<Parsed> {
        serde_json::from_str(&self.json)
            .inspect_err(|e| tracing::error!(exec_id = %self.exec_id, "a kept process object does not read back: {e}"))
            .ok()
    }

    /// The spec as created (JSON), to tell a repeated create from another one.
    pub fn spec(&self) -> serde_json::Value {
        self.parsed().map(|p| p.spec).unwrap_or_default()
    }

    pub fn status(&self) -> SandboxProcessStatus {
        self.parsed().map(|p| p.status).unwrap_or_default()
    }

    pub fn annotations(&self) -> BTreeMap<String, String> {
        self.parsed()
            .map(|p| p.metadata.annotations)
            .unwrap_or_default()
    }

    /// A record standing for the process when its agent's watch no longer holds one (its agent
    /// gone, or the record not kept there): what the status needs when it says the agent is
    /// unreachable.
    pub fn stand_in(&self) -> Option<ProcessRecord> {
        let Parsed {
            metadata,
            spec,
            status: s,
        } = self.parsed()?;
        let object = sandbox_api::wire::ProcessObject {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            creation_timestamp: self.columns.created.clone(),
            labels: self.labels.clone(),
            annotations: metadata.annotations,
            pod_name: self.columns.pod.clone(),
            node_name: self.columns.node.clone(),
            spec,
        };
        let pod_uid = s.pod_uid.clone().unwrap_or_default();
        let container = s.container_name.clone().unwrap_or_default();
        Some(ProcessRecord {
            object: Some(Box::new(object)),
            revision: self.revision,
            ..ProcessRecord::starting(&self.exec_id, &pod_uid, &container, "")
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Added,
    Modified,
    Deleted,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Added => "ADDED",
            Kind::Modified => "MODIFIED",
            Kind::Deleted => "DELETED",
        }
    }
}

/// One change, as watches send it (a deletion carries the last state, at the deletion's rv).
#[derive(Clone, Debug)]
pub struct Change {
    pub rv: u64,
    pub kind: Kind,
    pub entry: Arc<Entry>,
}

struct Inner {
    versions: Versions,
    by_id: HashMap<String, Arc<Entry>>,
    by_key: BTreeMap<(String, String), String>,
    window: VecDeque<Change>,
    /// Exec ids forgotten here (a delete, a TTL), oldest first: a record of one that arrives
    /// later (the watch's last upsert, sent before the agent forgot it) does not bring it back.
    tombstones: VecDeque<String>,
    tombstoned: std::collections::HashSet<String>,
}

/// How many forgotten exec ids are remembered ([`Inner::tombstones`]): far more than the
/// records a watch can have in flight.
const TOMBSTONES: usize = 4096;

/// A running process's output summary changes with every byte it writes: shown at most this
/// often (as a SandboxProcess's, whose every refresh is a write), and at its end. Each change is
/// a watch event and a copy in the window.
pub const OUTPUT_REFRESH: std::time::Duration = std::time::Duration::from_secs(30);

pub struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Change>,
}

/// What a list or a watch from a resourceVersion gets.
pub enum Since {
    /// Every change after the rv, oldest first, and the receiver of those that follow.
    Changes(Vec<Change>, broadcast::Receiver<Change>),
    /// The rv is not one this replica can resume from (410 Gone: relist).
    Expired,
}

impl Store {
    pub fn new(epoch_ms: u64) -> Arc<Store> {
        let (tx, _) = broadcast::channel(WINDOW);
        Arc::new(Store {
            inner: Mutex::new(Inner {
                versions: Versions::new(epoch_ms),
                by_id: HashMap::new(),
                by_key: BTreeMap::new(),
                window: VecDeque::new(),
                tombstones: VecDeque::new(),
                tombstoned: Default::default(),
            }),
            tx,
        })
    }

    /// Every entry, and the replica's resourceVersion they were taken at.
    pub fn list(&self) -> (Vec<Arc<Entry>>, u64) {
        let inner = self.inner.lock().unwrap();
        let items = inner
            .by_key
            .values()
            .filter_map(|id| inner.by_id.get(id).cloned())
            .collect();
        (items, inner.versions.current())
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Entry>> {
        let inner = self.inner.lock().unwrap();
        let id = inner
            .by_key
            .get(&(namespace.to_string(), name.to_string()))?;
        inner.by_id.get(id).cloned()
    }

    /// The current state, its rv, and the receiver of the changes after it (one lock: nothing
    /// falls between).
    pub fn snapshot(&self) -> (Vec<Arc<Entry>>, u64, broadcast::Receiver<Change>) {
        let inner = self.inner.lock().unwrap();
        let rx = self.tx.subscribe();
        let items = inner
            .by_key
            .values()
            .filter_map(|id| inner.by_id.get(id).cloned())
            .collect();
        (items, inner.versions.current(), rx)
    }

    /// The changes after `rv`, for a watch resumed from it.
    pub fn since(&self, rv: u64) -> Since {
        let inner = self.inner.lock().unwrap();
        let oldest = inner.window.front().map(|c| c.rv);
        if !inner.versions.resumable(rv, oldest) {
            return Since::Expired;
        }
        let rx = self.tx.subscribe();
        let changes = inner.window.iter().filter(|c| c.rv > rv).cloned().collect();
        Since::Changes(changes, rx)
    }

    pub fn current_rv(&self) -> u64 {
        self.inner.lock().unwrap().versions.current()
    }

    fn record_change(inner: &mut Inner, tx: &broadcast::Sender<Change>, change: Change) {
        if inner.window.len() >= WINDOW {
            inner.window.pop_front();
        }
        inner.window.push_back(change.clone());
        let _ = tx.send(change);
    }

    /// A record of a `processes` object, new or changed.
    pub fn upsert(&self, agent: &str, rec: &ProcessRecord) {
        self.put(agent, rec, None)
    }

    /// The process of this record, its agent unreachable (`AgentView::Unreachable`), or
    /// answering again (`None`: the record speaks).
    pub fn put(&self, agent: &str, rec: &ProcessRecord, view: Option<&AgentView>) {
        if rec.object.is_some() {
            self.put_digested(agent, rec, view, rec.digest())
        }
    }

    /// [`Store::put`] with the record's digest taken already (the watch takes it).
    fn put_digested(
        &self,
        agent: &str,
        rec: &ProcessRecord,
        view: Option<&AgentView>,
        digest: u64,
    ) {
        let Some(obj) = rec.object.as_deref() else {
            return;
        };
        let down_since = match view {
            Some(AgentView::Unreachable { since, .. }) => Some(since.0),
            _ => None,
        };
        let mut inner = self.inner.lock().unwrap();
        if inner.tombstoned.contains(&rec.exec_id) {
            return;
        }
        let prev = inner.by_id.get(&rec.exec_id).cloned();
        if prev.as_ref().is_some_and(|p| p.revision > rec.revision) {
            return; // a start's answer that the watch has already overtaken
        }
        if let Some(p) = &prev {
            let heard_since = |t: Timestamp| p.heard.is_some_and(|h| h > t);
            if down_since.is_some_and(heard_since) {
                return; // its record spoke after the agent was last seen down
            }
            let same = view.is_none() && !p.unreachable && p.digest == digest;
            if same && p.agent == agent {
                return; // the same record again (a relisting), as already shown
            }
        }
        let output_due = prev
            .as_ref()
            .is_none_or(|p| rec.is_final() || p.output_at.elapsed() >= OUTPUT_REFRESH);
        let prev_parsed = prev.as_ref().and_then(|e| e.parsed());
        let prev_status = prev_parsed.as_ref().map(|p| &p.status);
        let Some(rendered) = object::render(rec, obj, prev_status, view, output_due, now()) else {
            return;
        };
        if let (Some(p), Some(parsed)) = (&prev, &prev_parsed) {
            // The same object again (a resync, another replica's copy of a start): no change.
            // Compared as written: the kept status is read back from JSON, whose times are
            // whole seconds.
            let same_meta =
                p.labels == obj.labels && parsed.metadata.annotations == obj.annotations;
            let same_status = serde_json::to_value(&parsed.status).ok()
                == serde_json::to_value(&rendered.status).ok();
            if same_status && p.agent == agent && same_meta {
                return;
            }
        }
        let key = (obj.namespace.clone(), obj.name.clone());
        // A name another process holds (two creates racing on two replicas): the first kept.
        if let Some(other) = inner.by_key.get(&key) {
            if other != &rec.exec_id && inner.by_id.contains_key(other) {
                tracing::warn!(namespace = %key.0, name = %key.1, exec_id = %rec.exec_id, holder = %other, "a second process with a name already held; not served");
                return;
            }
        }
        let rv = inner.versions.next();
        let entry = Arc::new(Entry {
            exec_id: rec.exec_id.clone(),
            agent: agent.to_string(),
            namespace: obj.namespace.clone(),
            name: obj.name.clone(),
            labels: obj.labels.clone(),
            rv,
            revision: rec.revision,
            output_at: match &prev {
                Some(p) if !output_due => p.output_at,
                _ => std::time::Instant::now(),
            },
            json: object::to_json(rec, obj, &rendered.status, rv).into(),
            columns: rendered.columns,
            kept: Kept::of(&obj.spec, &rendered.status),
            heard: match down_since {
                None => Some(now().0),
                Some(_) => prev.as_ref().and_then(|p| p.heard),
            },
            unreachable: down_since.is_some(),
            digest,
        });
        inner.by_key.insert(key, rec.exec_id.clone());
        inner.by_id.insert(rec.exec_id.clone(), entry.clone());
        let kind = if prev.is_some() {
            Kind::Modified
        } else {
            Kind::Added
        };
        Self::record_change(&mut inner, &self.tx, Change { rv, kind, entry });
    }

    /// The agent forgot the process (deleted, or expired after its end).
    pub fn remove(&self, exec_id: &str) {
        let mut inner = self.inner.lock().unwrap();
        let Some(old) = inner.by_id.remove(exec_id) else {
            return;
        };
        if inner.tombstones.len() >= TOMBSTONES {
            if let Some(oldest) = inner.tombstones.pop_front() {
                inner.tombstoned.remove(&oldest);
            }
        }
        inner.tombstones.push_back(exec_id.to_string());
        inner.tombstoned.insert(exec_id.to_string());
        let key = (old.namespace.clone(), old.name.clone());
        if inner.by_key.get(&key).map(String::as_str) == Some(exec_id) {
            inner.by_key.remove(&key);
        }
        let rv = inner.versions.next();
        Self::record_change(
            &mut inner,
            &self.tx,
            Change {
                rv,
                kind: Kind::Deleted,
                entry: old,
            },
        );
    }

    /// Every entry, for the keeper's rounds.
    pub fn entries(&self) -> Vec<Arc<Entry>> {
        self.inner.lock().unwrap().by_id.values().cloned().collect()
    }

    /// Live processes in a namespace (the per-namespace bound).
    pub fn live_in(&self, namespace: &str) -> usize {
        let inner = self.inner.lock().unwrap();
        inner
            .by_key
            .range((namespace.to_string(), String::new())..)
            .take_while(|((ns, _), _)| ns == namespace)
            .filter_map(|(_, id)| inner.by_id.get(id))
            .filter(|e| !e.kept.ended)
            .count()
    }
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

impl crate::aggregated::subresources::ProcessTable for Store {
    fn locate(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<crate::aggregated::subresources::Located> {
        let e = self.get(namespace, name)?;
        Some(crate::aggregated::subresources::Located {
            agent: e.agent.clone(),
            exec_id: e.exec_id.clone(),
            pod: e.columns.pod.clone(),
            tty: e.kept.tty,
        })
    }
}

impl ObjectSink for Store {
    fn upsert(&self, agent: &str, record: &ProcessRecord, digest: u64) {
        self.put_digested(agent, record, None, digest)
    }

    fn removed(&self, exec_id: &str) {
        Store::remove(self, exec_id)
    }
}

#[cfg(test)]
mod tests;
