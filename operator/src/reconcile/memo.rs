//! What the controller remembers about each object between reconciles, in one place so it is
//! cleared together. Keyed by object uid.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sandbox_memory::ShrinkSparse;

#[derive(Default)]
struct Entry {
    /// When the output summary was last written into the status.
    output_written: Option<Instant>,
    /// When the agent first refused to start the process.
    rejected_since: Option<Instant>,
    /// Consecutive failed reconciles, for the retry backoff.
    failures: u32,
    /// We wrote a final status that the cache may not show yet.
    final_written: bool,
    /// We wrote a status saying the process started, which the cache may not show yet.
    start_written: bool,
    /// A process whose first started status is held back (`status::plan`): the next look reads
    /// the agent's record on its node instead of starting again, and writes what it finds.
    held_start: Option<HeldStart>,
    /// The pod (uid) the first start request was sent for. The object is bound to it from that
    /// moment, before any status saying so can be read back: a copy from the cache that predates
    /// our writes, with the pod meanwhile re-created under its name on another node, must never
    /// start the process a second time there.
    start_sent_for: Option<String>,
    /// The object's namespace and name, from the first start request on: an agent names a
    /// process only by uid, and finding a uid in the cache is a scan of every object.
    object: Option<(String, String)>,
    /// Digest of the last status the API server refused for its content: the same status is
    /// written withheld at once rather than refused again.
    refused: Option<u64>,
}

struct HeldStart {
    node: String,
    since: Instant,
}

/// What a reconcile may do with its copy of the object.
#[derive(Debug, PartialEq, Eq)]
pub enum CachedCopy {
    /// Act on it.
    Current,
    /// It predates a final status we wrote: neither start nor overwrite; look again later.
    PredatesOurFinal,
    /// It predates the status saying we started the process: neither start nor overwrite.
    PredatesOurStart,
}

#[derive(Default)]
pub struct Memo {
    entries: Mutex<HashMap<String, Entry>>,
}

impl Memo {
    fn with<T>(&self, uid: &str, f: impl FnOnce(&mut Entry) -> T) -> T {
        f(self
            .entries
            .lock()
            .unwrap()
            .entry(uid.to_string())
            .or_default())
    }

    /// How long until the output summary is due again (None: due now).
    pub fn output_due(&self, uid: &str, every: Duration) -> Option<Duration> {
        let e = self.entries.lock().unwrap();
        e.get(uid)
            .and_then(|e| e.output_written)
            .and_then(|t| every.checked_sub(t.elapsed()))
    }

    pub fn output_written(&self, uid: &str) {
        self.with(uid, |e| e.output_written = Some(Instant::now()));
    }

    /// When the agent first refused this object's start (now, if this is the first time).
    pub fn rejected_since(&self, uid: &str) -> Instant {
        self.with(uid, |e| *e.rejected_since.get_or_insert_with(Instant::now))
    }

    /// Counts a failed reconcile; returns how many in a row.
    pub fn failed(&self, uid: &str) -> u32 {
        self.with(uid, |e| {
            e.failures = e.failures.saturating_add(1);
            e.failures
        })
    }

    pub fn succeeded(&self, uid: &str) {
        if let Some(e) = self.entries.lock().unwrap().get_mut(uid) {
            e.failures = 0;
        }
    }

    /// Judges a reconcile's copy: whether it predates a final or started status we wrote. Once a
    /// copy shows a final status the memo of it is dropped (the cache has caught up).
    pub fn judge_copy(&self, uid: &str, copy_is_final: bool, copy_is_started: bool) -> CachedCopy {
        let mut all = self.entries.lock().unwrap();
        let Some(e) = all.get_mut(uid) else {
            return CachedCopy::Current;
        };
        if copy_is_final {
            // Nothing else is needed for a final object.
            all.remove(uid);
            all.shrink_if_sparse();
            CachedCopy::Current
        } else if e.final_written {
            CachedCopy::PredatesOurFinal
        } else if e.start_written && !copy_is_started {
            CachedCopy::PredatesOurStart
        } else {
            CachedCopy::Current
        }
    }

    /// The first started status of a process started on `node` is held back (its launch is
    /// under way).
    pub fn hold_start(&self, uid: &str, node: &str) {
        self.with(uid, |e| {
            e.held_start.get_or_insert_with(|| HeldStart {
                node: node.to_string(),
                since: Instant::now(),
            });
        });
    }

    /// The node of a process whose first started status is held back, and how long it has been.
    pub fn held_start(&self, uid: &str) -> Option<(String, Duration)> {
        let e = self.entries.lock().unwrap();
        let h = e.get(uid)?.held_start.as_ref()?;
        Some((h.node.clone(), h.since.elapsed()))
    }

    /// A status saying the process started was written.
    pub fn start_written(&self, uid: &str) {
        self.with(uid, |e| e.start_written = true);
    }

    /// A start request is sent for pod `pod_uid` on behalf of object `(namespace, name)`;
    /// returns the pod the object is bound to (the first one a start was sent for).
    pub fn start_sent(&self, uid: &str, pod_uid: &str, object: (&str, &str)) -> String {
        self.with(uid, |e| {
            e.object
                .get_or_insert_with(|| (object.0.to_string(), object.1.to_string()));
            e.start_sent_for
                .get_or_insert_with(|| pod_uid.to_string())
                .clone()
        })
    }

    /// The namespace and name of the object with this uid, if a start was sent for it and the
    /// cache does not show it final yet (the time its agent's record changes).
    pub fn object_of(&self, uid: &str) -> Option<(String, String)> {
        let e = self.entries.lock().unwrap();
        e.get(uid).and_then(|e| e.object.clone())
    }

    /// The pod the first start request was sent for, if any.
    pub fn start_sent_for(&self, uid: &str) -> Option<String> {
        let e = self.entries.lock().unwrap();
        e.get(uid).and_then(|e| e.start_sent_for.clone())
    }

    /// A final status was written: forget what a running object needs, remember the final until
    /// the cache shows it.
    pub fn ended(&self, uid: &str) {
        self.with(uid, |e| {
            *e = Entry {
                final_written: true,
                refused: e.refused,
                object: e.object.take(),
                ..Entry::default()
            }
        });
    }

    /// The API server refused a status with this digest for its content.
    pub fn refused(&self, uid: &str, digest: u64) {
        self.with(uid, |e| e.refused = Some(digest));
    }

    /// Whether the API server refused a status with this digest for its content.
    pub fn was_refused(&self, uid: &str, digest: u64) -> bool {
        let e = self.entries.lock().unwrap();
        e.get(uid).is_some_and(|e| e.refused == Some(digest))
    }

    /// The object is gone: forget everything.
    pub fn gone(&self, uid: &str) {
        let mut all = self.entries.lock().unwrap();
        all.remove(uid);
        all.shrink_if_sparse();
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The race of issue 11 item 6: the final status is written, then a reconcile runs from a
    /// cached copy that predates it (still Running). That copy must not be acted on.
    #[test]
    fn a_copy_older_than_our_final_is_not_acted_on() {
        let m = Memo::default();
        m.output_written("u");
        m.failed("u");
        m.ended("u");
        assert_eq!(
            m.judge_copy("u", false, false),
            CachedCopy::PredatesOurFinal
        );
        assert_eq!(
            m.judge_copy("u", false, false),
            CachedCopy::PredatesOurFinal
        );
        // The cache caught up: from now on copies are current, and nothing is held.
        assert_eq!(m.judge_copy("u", true, true), CachedCopy::Current);
        assert_eq!(m.judge_copy("u", false, false), CachedCopy::Current);
        assert!(m.is_empty());
    }

    /// Issue 16: started in pod A on node 3, then A re-created as B on node 2 under the same
    /// name; a reconcile from a copy that predates our started status must neither start in B
    /// nor overwrite, and the object stays bound to A.
    #[test]
    fn a_copy_older_than_our_start_is_not_acted_on_and_the_first_pod_binds() {
        let m = Memo::default();
        assert_eq!(m.start_sent_for("u"), None);
        assert_eq!(m.start_sent("u", "pod-a", ("ns", "p")), "pod-a");
        assert_eq!(
            m.start_sent("u", "pod-b", ("ns", "p")),
            "pod-a",
            "bound to the first pod"
        );
        assert_eq!(m.start_sent_for("u"), Some("pod-a".into()));
        // Nothing written yet (a start whose outcome is unknown): copies are current.
        assert_eq!(m.judge_copy("u", false, false), CachedCopy::Current);
        m.start_written("u");
        assert_eq!(
            m.judge_copy("u", false, false),
            CachedCopy::PredatesOurStart
        );
        assert_eq!(m.judge_copy("u", false, true), CachedCopy::Current);
        m.ended("u");
        assert_eq!(m.judge_copy("u", false, true), CachedCopy::PredatesOurFinal);
        assert_eq!(m.judge_copy("u", true, true), CachedCopy::Current);
        assert!(m.is_empty());
    }

    #[test]
    fn ending_clears_the_running_state_and_gone_clears_all() {
        let m = Memo::default();
        m.output_written("u");
        let t = m.rejected_since("u");
        assert_eq!(m.rejected_since("u"), t, "the first refusal is kept");
        assert_eq!((m.failed("u"), m.failed("u")), (1, 2));
        m.succeeded("u");
        assert_eq!(m.failed("u"), 1);
        assert_eq!(m.held_start("u"), None);
        m.hold_start("u", "node-1");
        m.hold_start("u", "node-2");
        let (node, _) = m.held_start("u").unwrap();
        assert_eq!(node, "node-1", "the first hold's node");
        m.ended("u");
        assert_eq!(m.held_start("u"), None);
        assert_eq!(m.output_due("u", Duration::from_secs(60)), None);
        assert_eq!(m.failed("u"), 1, "the count starts again after the end");
        m.gone("u");
        assert!(m.is_empty());
        assert_eq!(m.judge_copy("u", false, false), CachedCopy::Current);
        assert!(m.is_empty(), "judging a copy adds nothing");
    }

    #[test]
    fn other_objects_are_untouched() {
        let m = Memo::default();
        m.ended("a");
        assert_eq!(m.judge_copy("b", false, false), CachedCopy::Current);
        assert_eq!(
            m.judge_copy("a", false, false),
            CachedCopy::PredatesOurFinal
        );
    }
}
