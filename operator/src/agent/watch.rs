//! One `/v1/watch` stream per agent, kept forever, whose events fill a cache of records and
//! trigger the reconcile of the objects whose record changed; reachability per agent.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use sandbox_api::wire::{ProcessRecord, WatchEvent};
use tracing::{debug, info, warn};

use super::client::{error_chain, AgentError};
use super::{now, Agents};
use sandbox_memory::ShrinkSparse;

/// How long a watch stream may stay silent once the agent has said it sends heartbeats every
/// `interval_ms`: three intervals, at least 5 s (a slow agent is not a gone one). Agents send one
/// heartbeat first on every stream, so the deadline holds from the connect on.
fn silence_limit(interval_ms: u64) -> Duration {
    Duration::from_millis(interval_ms.saturating_mul(3)).max(Duration::from_secs(5))
}

/// What the watch cache says about one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cached {
    Record(Box<ProcessRecord>),
    /// The agent's watch is synced and has no such process.
    Absent,
    /// The watch is not synced: ask the agent.
    Unknown,
}

/// A record, and the pass of the watch that last sent it ([`Pass`]).
struct Kept {
    pass: u64,
    record: Box<ProcessRecord>,
}

/// A record of a `processes` object, as the watch remembers it: the process API's table keeps
/// the process, so this is only what tells a record sent again unchanged (a resync) from a
/// change, and the pass that last sent it. The whole record was ~2 KB a process here, on top
/// of the table's copy.
struct Seen {
    pass: u64,
    digest: u64,
}

/// One stretch of a watch stream, from its start or a `synced` to the next `synced`: what it
/// did not send again is gone at that `synced`. Records carry the number of the pass that last
/// sent them, rather than the pass a set of every id it sent (~100 B per process).
pub(super) struct Pass {
    number: u64,
    synced: bool,
}

impl Pass {
    pub(super) fn new() -> Pass {
        // Unique across watches and reconnects: a record marked by an earlier pass never
        // counts as sent by this one. 0 is no pass (a record from a direct call).
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Pass {
            number: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            synced: false,
        }
    }
}

#[derive(Default)]
pub(super) struct AgentState {
    /// Boxed: a record is ~0.5 KB inline, which an unboxed table would hold per slot, used or not.
    records: HashMap<String, Kept>,
    /// The records of `processes` objects, which go to the sink ([`Agents::set_sink`]).
    objects: HashMap<String, Seen>,
    /// Processes whose final status is written ([`Agents::release`]): their records are not
    /// kept, also when the watch sends them again. With the pass that last sent each.
    released: HashMap<String, u64>,
    synced: bool,
    unreachable_since: Option<Time>,
    last_error: String,
    task: Option<tokio::task::JoinHandle<()>>,
    /// When its watch began (see [`waited_for`]).
    watching_since: Option<Instant>,
    /// Its watch has synced once since we started: `records` holds what it held then, also
    /// while it is unreachable now.
    ever_synced: bool,
}

/// Whether a start waits for an agent's watch before judging where its process already is: an
/// agent never synced since we started is waited for up to [`SYNC_WAIT`] from when we could
/// first ask it (its watch began, our trust material loaded), whether its watch failed meanwhile
/// or is only slow: a watch refused or dropped at first is as likely a new replica not yet let in
/// (its network policy, its certificate) as a down node.
fn waited_for(
    ever_synced: bool,
    watching_since: Option<Instant>,
    usable: Instant,
    now: Instant,
) -> bool {
    if ever_synced {
        return false;
    }
    let began = watching_since.map_or(now, |t| t.max(usable));
    now.saturating_duration_since(began) < SYNC_WAIT
}

/// How long a start of an object older than our leadership waits for an agent's watch to sync
/// (or for our trust material) before judging without it ([`Agents::held_anywhere`]): a new
/// leader's first list of every agent takes well under this. The bound this leaves
/// (docs/architecture.md, "a process starts in one pod only, once"): an agent unreachable for all
/// of it, holding a start whose leader went before any status, is taken to be down, and a pod
/// re-created on another node could then start the process again. Taking an agent for down after
/// 10 s started a process twice in CI twice (2026-12-05, 2026-12-06).
const SYNC_WAIT: Duration = Duration::from_secs(60);

/// Objects created this long after our leadership began were never seen by an earlier leader
/// (a margin for the creation time's whole seconds and the clocks' skew).
const BORN_MARGIN_SECONDS: i64 = 5;

/// Whether any agent holds a process of an exec id, from the watch caches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Anywhere {
    /// An agent holds its record: a start was sent before, perhaps to a pod since replaced,
    /// whatever the object's status says yet (a leader that went before writing it). With the
    /// agent's node (`None`: one agent URL serves every node).
    Held {
        node: Option<String>,
        record: Box<ProcessRecord>,
    },
    /// No cache holds one, but an agent's watch began moments ago and has not synced: it may.
    NotYetKnown,
    /// No agent whose watch is synced holds one (an agent down, or not synced long after its
    /// watch began, is not waited for).
    Nowhere,
}

impl Agents {
    pub fn cached(&self, url: &str, id: &str) -> Cached {
        let state = self.state.lock().unwrap();
        match state.get(url) {
            Some(s) if s.synced => match s.records.get(id) {
                Some(k) => Cached::Record(k.record.clone()),
                None => Cached::Absent,
            },
            _ => Cached::Unknown,
        }
    }

    /// Whether the watch of `url` has synced since we started: its records are known (what a
    /// create must see before it can tell a repeated create from a new one).
    pub fn synced_once(&self, url: &str) -> bool {
        let state = self.state.lock().unwrap();
        state.get(url).is_some_and(|s| s.ever_synced)
    }

    /// Whether every agent's records are known here: each watch synced once, or waited for as
    /// long as a start waits ([`SYNC_WAIT`]: an agent down since before we started is not waited
    /// on forever). Before, a list would leave out what an agent holds.
    pub fn all_known(&self) -> bool {
        let now = Instant::now();
        let Some(usable) = self.client.usable_since() else {
            return false;
        };
        if !self.agents_listed() {
            return false;
        }
        let serving = self.serving();
        let state = self.state.lock().unwrap();
        serving.iter().all(|(_, url)| {
            state
                .get(url)
                .is_some_and(|s| !waited_for(s.ever_synced, s.watching_since, usable, now))
        })
    }

    /// The last record the watch of `url` kept of `id`, synced or not (what a process whose
    /// agent went silent last showed).
    pub fn last_known(&self, url: &str, id: &str) -> Option<Box<ProcessRecord>> {
        let state = self.state.lock().unwrap();
        state.get(url)?.records.get(id).map(|k| k.record.clone())
    }

    /// Looks for exec id `id` in every agent's watch cache (the agents' pods as now known), for
    /// an object created at `created`: one created after our leadership began cannot have been
    /// started by an earlier leader, and is not looked for (nor waited on).
    pub fn held_anywhere(&self, id: &str, created: Option<&Time>) -> Anywhere {
        let leading = self.leading();
        if let (Some(c), Some((_, wall))) = (created, leading) {
            if c.0.as_second() >= wall.as_second().saturating_add(BORN_MARGIN_SECONDS) {
                return Anywhere::Nowhere;
            }
        }
        let now = Instant::now();
        let Some(usable) = self.client.usable_since() else {
            // No agent can be asked, nor any start sent: waited for a while, then the attempt
            // puts the reason in the status (waiting on would leave the object without any).
            let waited = leading.map_or(SYNC_WAIT, |(t, _)| now.saturating_duration_since(t));
            return if waited < SYNC_WAIT {
                Anywhere::NotYetKnown
            } else {
                Anywhere::Nowhere
            };
        };
        if !self.agents_listed() {
            return Anywhere::NotYetKnown;
        }
        let serving = self.serving();
        let state = self.state.lock().unwrap();
        let mut unsure = false;
        for (node, url) in serving {
            let Some(s) = state.get(&url) else {
                unsure = true; // found, not watched yet (the watches are set up every 2 s)
                continue;
            };
            if let Some(k) = s.records.get(id) {
                return Anywhere::Held {
                    node,
                    record: k.record.clone(),
                };
            }
            unsure |= waited_for(s.ever_synced, s.watching_since, usable, now);
        }
        if unsure {
            Anywhere::NotYetKnown
        } else {
            Anywhere::Nowhere
        }
    }

    /// Remembers a record from a direct call, unless the watch already has a newer one.
    pub fn remember(&self, url: &str, rec: &ProcessRecord) {
        let mut state = self.state.lock().unwrap();
        let s = state.entry(url.to_string()).or_default();
        if s.released.contains_key(&rec.exec_id) {
            return;
        }
        match s.records.get_mut(&rec.exec_id) {
            Some(old) if old.record.revision > rec.revision => {}
            Some(old) => *old.record = rec.clone(),
            None => {
                let kept = Kept {
                    pass: 0,
                    record: Box::new(rec.clone()),
                };
                s.records.insert(rec.exec_id.clone(), kept);
            }
        }
    }

    /// Drops the record of a process whose final status has been written: a final status is
    /// never recomputed, so nothing reads the record again (it holds up to 2 KiB of output).
    /// Until the agent forgets the process, the watch's copies of it are not kept either.
    pub fn release(&self, id: &str) {
        let mut state = self.state.lock().unwrap();
        for s in state.values_mut() {
            if let Some(k) = s.records.remove(id) {
                s.released.insert(id.to_string(), k.pass);
                s.records.shrink_if_sparse();
            }
        }
    }

    pub fn mark_reachable(&self, url: &str) {
        let mut state = self.state.lock().unwrap();
        let s = state.entry(url.to_string()).or_default();
        s.unreachable_since = None;
    }

    pub fn unreachable_since(&self, url: &str) -> Option<Time> {
        let state = self.state.lock().unwrap();
        state.get(url).and_then(|s| s.unreachable_since.clone())
    }

    /// Records a failed call; returns since when the agent has been unreachable.
    pub fn mark_unreachable(&self, url: &str, message: &str) -> Time {
        let mut state = self.state.lock().unwrap();
        let s = state.entry(url.to_string()).or_default();
        s.last_error = message.to_string();
        // The outage's start stays put while it lasts: every later failure is the same outage.
        s.unreachable_since.get_or_insert_with(now).clone()
    }

    /// As [`Self::mark_unreachable`], for an agent silent since `since` (the last byte heard on
    /// its watch stream). An older mark (a call that failed before) is replaced: the stream heard
    /// the agent after it, so that outage had ended and must not shorten `agentGraceSeconds`.
    pub(super) fn mark_unreachable_since(&self, url: &str, message: &str, since: Time) -> Time {
        let mut state = self.state.lock().unwrap();
        let s = state.entry(url.to_string()).or_default();
        s.last_error = message.to_string();
        match &s.unreachable_since {
            Some(old) if old.0 >= since.0 => {}
            _ => s.unreachable_since = Some(since),
        }
        s.unreachable_since.clone().unwrap()
    }

    /// Keeps one watch stream per agent, forever.
    pub async fn run_watches(self: Arc<Self>) {
        loop {
            let desired = self.urls();
            {
                let mut state = self.state.lock().unwrap();
                state.retain(|url, s| {
                    let keep = desired.contains(url);
                    if !keep {
                        if let Some(t) = s.task.take() {
                            t.abort();
                        }
                        info!(agent = %url, "agent gone; watch stopped");
                    }
                    keep
                });
                for url in &desired {
                    let s = state.entry(url.clone()).or_default();
                    if s.task.is_none() {
                        info!(agent = %url, "watching agent");
                        s.task = Some(tokio::spawn(self.clone().watch_loop(url.clone())));
                        s.watching_since = Some(Instant::now());
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    async fn watch_loop(self: Arc<Self>, url: String) {
        let mut backoff = Duration::from_millis(250);
        loop {
            let r = self.watch_once(&url).await;
            match r {
                Ok(()) => {
                    debug!(agent = %url, "watch stream ended");
                    backoff = Duration::from_millis(250);
                }
                Err(e) => {
                    let msg = e.to_string();
                    let was_down = self.unreachable_since(&url).is_some();
                    let since = self.mark_unreachable(&url, &msg);
                    // Once per outage at warn level; the retries at debug.
                    if was_down {
                        debug!(agent = %url, error = %msg, "agent watch failed again");
                    } else {
                        warn!(agent = %url, error = %msg, since = %since.0, "agent watch failed");
                    }
                }
            }
            let ids: Vec<String> = {
                let mut state = self.state.lock().unwrap();
                let s = state.entry(url.clone()).or_default();
                s.synced = false;
                s.records.keys().cloned().collect()
            };
            // Let the processes of this agent look again (their state is now unknown).
            self.notify_changed(ids);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }

    async fn watch_once(&self, url: &str) -> Result<(), AgentError> {
        let resp = self.client.watch(url).await?;
        let mut body = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        let mut pass = Pass::new();
        // Armed by the first heartbeat (an agent without them is read without a deadline): a
        // partitioned or powered-off node sends no reset, so only silence tells.
        let mut silence: Option<Duration> = None;
        let mut last_heard = now();
        loop {
            let next = match silence {
                Some(limit) => match tokio::time::timeout(limit, body.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let message = format!(
                            "no event or heartbeat on the watch stream for {}s",
                            limit.as_secs()
                        );
                        let since = self.mark_unreachable_since(url, &message, last_heard);
                        // watch_loop sees the agent as down already and would log at debug.
                        warn!(agent = %url, error = %message, since = %since.0, "agent watch silent; agent unreachable");
                        return Err(AgentError::Unreachable {
                            url: url.into(),
                            message,
                        });
                    }
                },
                None => body.next().await,
            };
            let Some(chunk) = next else { break };
            let chunk = chunk.map_err(|e| AgentError::Unreachable {
                url: url.into(),
                message: error_chain(&e),
            })?;
            last_heard = now();
            buf.extend_from_slice(&chunk);
            while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let ev: WatchEvent = match serde_json::from_slice(&line) {
                    Ok(ev) => ev,
                    Err(e) => {
                        warn!(agent = %url, error = %e, "undecodable watch event");
                        continue;
                    }
                };
                if let WatchEvent::Heartbeat { interval_ms } = ev {
                    silence = Some(silence_limit(interval_ms));
                    continue;
                }
                self.apply(url, ev, &mut pass);
            }
        }
        Ok(())
    }

    pub(super) fn apply(&self, url: &str, ev: WatchEvent, pass: &mut Pass) {
        let mut changed = Vec::new();
        // Records of `processes` objects: to the sink, never to the controller.
        let mut objects: Vec<(Box<ProcessRecord>, u64)> = Vec::new();
        let mut objects_gone: Vec<String> = Vec::new();
        // Outside the lock, which the controller's lookups share.
        let digest = match &ev {
            WatchEvent::Upsert { record } if record.object.is_some() => record.digest(),
            _ => 0,
        };
        {
            let mut state = self.state.lock().unwrap();
            let s = state.entry(url.to_string()).or_default();
            match ev {
                WatchEvent::Upsert { record } if record.object.is_some() => {
                    let seen = Seen {
                        pass: pass.number,
                        digest,
                    };
                    // A stream's first listing goes to the sink whole: while the agent was
                    // unreachable, the table showed its processes so, and their records, sent
                    // again unchanged, are what say otherwise now.
                    match s.objects.insert(record.exec_id.clone(), seen) {
                        Some(old) if old.digest == digest && pass.synced => {}
                        _ => objects.push((record, digest)),
                    }
                }
                WatchEvent::Upsert { record } => {
                    let id = &record.exec_id;
                    if let Some(sent_in) = s.released.get_mut(id) {
                        // Final and reported: nothing to keep or to look at.
                        *sent_in = pass.number;
                    } else {
                        match s.records.get_mut(id) {
                            Some(k) if k.record == record => k.pass = pass.number,
                            _ => {
                                changed.push(id.clone());
                                let kept = Kept {
                                    pass: pass.number,
                                    record,
                                };
                                s.records.insert(kept.record.exec_id.clone(), kept);
                            }
                        }
                    }
                }
                WatchEvent::Deleted { exec_id } => {
                    s.released.remove(&exec_id);
                    s.released.shrink_if_sparse();
                    if s.objects.remove(&exec_id).is_some() {
                        s.objects.shrink_if_sparse();
                        objects_gone.push(exec_id);
                    } else if s.records.remove(&exec_id).is_some() {
                        s.records.shrink_if_sparse();
                        changed.push(exec_id);
                    }
                }
                WatchEvent::Heartbeat { .. } => {}
                WatchEvent::Synced => {
                    // A resync after a lag also ends with `synced`: drop what was not resent
                    // since the previous `synced`. (A record upserted after that `synced` and
                    // forgotten during the lag stays cached; only our own DELETE forgets, after
                    // which nothing looks at that record again.)
                    let gone: Vec<String> = s
                        .records
                        .iter()
                        .filter(|(_, k)| k.pass != pass.number)
                        .map(|(id, _)| id.clone())
                        .collect();
                    for id in gone {
                        s.records.remove(&id);
                        changed.push(id);
                    }
                    let this = pass.number;
                    s.objects.retain(|id, seen| {
                        let sent = seen.pass == this;
                        if !sent {
                            objects_gone.push(id.clone());
                        }
                        sent
                    });
                    s.objects.shrink_if_sparse();
                    s.released.retain(|_, sent_in| *sent_in == this);
                    s.records.shrink_if_sparse();
                    s.released.shrink_if_sparse();
                    if !pass.synced {
                        info!(agent = %url, processes = s.records.len() + s.objects.len(), "agent watch synced");
                    }
                    *pass = Pass {
                        synced: true,
                        ..Pass::new()
                    };
                    s.synced = true;
                    s.ever_synced = true;
                    s.unreachable_since = None;
                }
            }
        }
        if let Some(sink) = self.sink.get() {
            for (r, digest) in objects {
                sink.upsert(url, &r, digest);
            }
            for id in objects_gone {
                sink.removed(&id);
            }
        }
        self.notify_changed(changed);
    }

    /// Tells the controller, while this replica leads (standing by, nothing reads them).
    fn notify_changed(&self, ids: Vec<String>) {
        if self.leading().is_none() {
            return;
        }
        for id in ids {
            let _ = self.notify.send(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_never_synced_are_waited_for_a_while_from_when_they_could_be_asked() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        // Synced once: its records (kept while it is down) are the answer; never waited for.
        assert!(!waited_for(true, Some(t0), t0, s(1)));
        // Its watch began 3 s ago, failing or not: waited for, up to a minute.
        assert!(waited_for(false, Some(t0), t0, s(3)));
        assert!(waited_for(false, Some(t0), t0, s(59)));
        assert!(!waited_for(false, Some(t0), t0, s(60)));
        // Our TLS loaded late (its watch failing until then): counted from that moment.
        assert!(waited_for(false, Some(t0), s(12), s(71)));
        assert!(!waited_for(false, Some(t0), s(12), s(72)));
        // Found but not watched yet.
        assert!(waited_for(false, None, t0, s(60)));
    }

    #[test]
    fn silence_is_three_heartbeats_and_at_least_five_seconds() {
        assert_eq!(silence_limit(5_000), Duration::from_secs(15));
        assert_eq!(silence_limit(100), Duration::from_secs(5));
        assert_eq!(silence_limit(u64::MAX), Duration::from_millis(u64::MAX));
    }

    #[test]
    fn heartbeats_are_decoded_and_older_events_unchanged() {
        let ev: WatchEvent =
            serde_json::from_str(r#"{"type":"heartbeat","intervalMs":5000}"#).unwrap();
        assert_eq!(ev, WatchEvent::Heartbeat { interval_ms: 5000 });
        let ev: WatchEvent = serde_json::from_str(r#"{"type":"synced"}"#).unwrap();
        assert_eq!(ev, WatchEvent::Synced);
    }
}
