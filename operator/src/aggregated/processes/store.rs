//! The replica's table of `processes`: every record an agent's watch sent that carries a
//! `processes` object, rendered once per change into the object clients read, with this
//! replica's resourceVersion, and a window of the latest changes for watches to resume from.
//! Filled by the agents' watches through [`crate::agent::ObjectSink`]; nothing of it is in etcd.
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use sandbox_api::crd::SandboxProcessStatus;
use sandbox_api::wire::ProcessRecord;
use tokio::sync::broadcast;

use super::object::{self, Columns};
use super::version::{Versions, WINDOW};
use crate::agent::ObjectSink;
use crate::status::AgentView;

/// One process as served.
#[derive(Debug)]
pub struct Entry {
    pub exec_id: String,
    /// The agent (URL) whose watch sent it.
    pub agent: String,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub rv: u64,
    /// The record's revision (the supervisor's count of its writes): an older one is stale.
    pub revision: u64,
    /// When `status.output` was last refreshed: at most every [`OUTPUT_REFRESH`] while running.
    pub output_at: std::time::Instant,
    /// What the table and the field selectors read.
    pub columns: Columns,
    /// The spec as created (JSON), to tell a repeated create from another one.
    pub spec: serde_json::Value,
    pub status: SandboxProcessStatus,
    /// The whole object, as JSON, with `metadata.resourceVersion` = `rv`.
    pub json: Arc<str>,
}

impl Entry {
    /// A record standing for the process when its agent's watch no longer holds one (its agent
    /// gone): what the status needs when it says the agent is unreachable.
    pub fn stand_in(&self) -> Option<ProcessRecord> {
        let object = sandbox_api::wire::ProcessObject {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            creation_timestamp: self.columns.created.clone(),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            pod_name: self.columns.pod.clone(),
            node_name: self.columns.node.clone(),
            spec: self.spec.clone(),
        };
        let s = &self.status;
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
        let Some(obj) = rec.object.as_deref() else {
            return;
        };
        let mut inner = self.inner.lock().unwrap();
        if inner.tombstoned.contains(&rec.exec_id) {
            return;
        }
        let prev = inner.by_id.get(&rec.exec_id).cloned();
        if prev.as_ref().is_some_and(|p| p.revision > rec.revision) {
            return; // a start's answer that the watch has already overtaken
        }
        let output_due = prev
            .as_ref()
            .is_none_or(|p| rec.is_final() || p.output_at.elapsed() >= OUTPUT_REFRESH);
        let prev_status = prev.as_ref().map(|e| &e.status);
        let Some(rendered) = object::render(rec, obj, prev_status, view, output_due, now()) else {
            return;
        };
        if let Some(p) = &prev {
            // The same object again (a resync, another replica's copy of a start): no change.
            let same_meta = p.labels == obj.labels && p.annotations == obj.annotations;
            if p.status == rendered.status && p.agent == agent && same_meta {
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
            annotations: obj.annotations.clone(),
            rv,
            revision: rec.revision,
            output_at: match &prev {
                Some(p) if !output_due => p.output_at,
                _ => std::time::Instant::now(),
            },
            json: object::to_json(rec, obj, &rendered.status, rv).into(),
            columns: rendered.columns,
            spec: obj.spec.clone(),
            status: rendered.status,
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
            .filter(|e| !e.status.is_final())
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
            tty: e.spec.get("tty").and_then(|t| t.as_bool()) == Some(true),
        })
    }
}

impl ObjectSink for Store {
    fn upsert(&self, agent: &str, record: &ProcessRecord) {
        Store::upsert(self, agent, record)
    }

    fn removed(&self, exec_id: &str) {
        Store::remove(self, exec_id)
    }
}

#[cfg(test)]
mod tests;
