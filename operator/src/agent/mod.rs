//! Talking to the node agents: the HTTP client ([`client`]), where each node's agent is
//! ([`discovery`]), and one `/v1/watch` stream per agent whose changes trigger reconciles
//! ([`watch`]; no per-object polling). [`Agents`] is the operator's one registry of them, shared
//! by the controller and the subresource API.
pub mod client;
pub mod discovery;
pub mod trust;
mod watch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::Store;
use tokio::sync::mpsc;

use crate::listed::Listed;

pub use client::{AgentClient, AgentError};
pub use discovery::AGENT_SELECTOR;
use watch::AgentState;
pub use watch::{Anywhere, Cached};

/// Where each node's agent is (one watch of the agent pods, on every replica), each agent's
/// reachability, and the watch caches (filled while this replica leads).
pub struct Agents {
    pub client: AgentClient,
    /// `--agent-url`: one agent for every node (host-run tests, single node).
    fixed_url: Option<String>,
    /// Agent pods (operator namespace, [`AGENT_SELECTOR`]) and whether they are listed; unused
    /// with a fixed URL.
    pods: Option<(Store<Pod>, Listed)>,
    port: u16,
    state: Mutex<HashMap<String, AgentState>>,
    /// Since when a node has had no agent pod.
    missing: Mutex<HashMap<String, Time>>,
    /// Exec ids whose record changed.
    notify: mpsc::UnboundedSender<String>,
    /// Since when this replica leads (monotonic, and wall clock to compare with objects'
    /// creation): objects created later cannot have been started by an earlier leader.
    leading: Mutex<Option<(std::time::Instant, Timestamp)>>,
    /// Where the records of `processes` objects go (the process API's table), set once.
    sink: OnceLock<Arc<dyn ObjectSink>>,
}

/// The seam to the process API (`aggregated::processes`): every record of a `processes` object
/// the watches see, and every such process forgotten. Those records never reach the controller.
pub trait ObjectSink: Send + Sync {
    /// `digest`: the record's [`ProcessRecord::digest`](sandbox_api::wire::ProcessRecord::digest),
    /// taken by the watch already (each is a serialization of the record).
    fn upsert(&self, agent: &str, record: &sandbox_api::wire::ProcessRecord, digest: u64);
    fn removed(&self, exec_id: &str);
}

fn now() -> Time {
    Time(Timestamp::now())
}

impl Agents {
    pub fn new(
        client: AgentClient,
        fixed_url: Option<String>,
        pods: Option<(Store<Pod>, Listed)>,
        port: u16,
        notify: mpsc::UnboundedSender<String>,
    ) -> Arc<Agents> {
        Arc::new(Agents {
            client,
            fixed_url: fixed_url.map(|u| u.trim_end_matches('/').to_string()),
            pods,
            port,
            state: Mutex::new(HashMap::new()),
            missing: Mutex::new(HashMap::new()),
            notify,
            leading: Mutex::new(None),
            sink: OnceLock::new(),
        })
    }

    /// Sends the records of `processes` objects to `sink` from now on (once).
    pub fn set_sink(&self, sink: Arc<dyn ObjectSink>) {
        let _ = self.sink.set(sink);
    }

    /// This replica leads from now on (it leads once: losing the lease ends the process).
    pub fn begin_leading(&self) {
        *self.leading.lock().unwrap() = Some((std::time::Instant::now(), Timestamp::now()));
    }

    fn leading(&self) -> Option<(std::time::Instant, Timestamp)> {
        *self.leading.lock().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;
    use sandbox_api::wire::Phase;
    use sandbox_api::wire::{ProcessRecord, WatchEvent};
    use std::collections::HashSet;

    use super::watch::Pass;
    use std::time::Duration;

    fn agents(pods: Vec<Pod>) -> (Arc<Agents>, mpsc::UnboundedReceiver<String>) {
        let mut w: Writer<Pod> = Writer::default();
        w.apply_watcher_event(&watcher::Event::Init);
        for p in pods {
            w.apply_watcher_event(&watcher::Event::InitApply(p));
        }
        w.apply_watcher_event(&watcher::Event::InitDone);
        let (tx, rx) = mpsc::unbounded_channel();
        let client = AgentClient::plain("/nonexistent".into()).unwrap();
        let pods = Some((w.as_reader(), Listed::already()));
        (Agents::new(client, None, pods, 9443, tx), rx)
    }

    /// Agents whose pods' watch has not listed them yet (a new leader's first moments).
    fn unlisted_agents() -> Arc<Agents> {
        let w: Writer<Pod> = Writer::default();
        let (tx, _rx) = mpsc::unbounded_channel();
        let client = AgentClient::plain("/nonexistent".into()).unwrap();
        Agents::new(
            client,
            None,
            Some((w.as_reader(), Listed::new().1)),
            9443,
            tx,
        )
    }

    fn agent_pod(name: &str, node: &str, phase: &str, ip: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "sandbox-system"},
            "spec": {"nodeName": node, "containers": [{"name": "agent"}]},
            "status": {"phase": phase, "podIP": ip}
        }))
        .unwrap()
    }

    fn upsert(id: &str, revision: u64) -> WatchEvent {
        WatchEvent::Upsert {
            record: Box::new(rec(id, revision)),
        }
    }

    fn rec(id: &str, revision: u64) -> ProcessRecord {
        ProcessRecord {
            phase: Phase::Running,
            revision,
            ..ProcessRecord::starting(id, "p", "c", "")
        }
    }

    #[tokio::test]
    async fn silence_replaces_an_older_outage_but_not_a_newer_one() {
        let (a, _rx) = agents(vec![]);
        let url = "https://10.0.0.5:9443";
        let t = |s: i64| Time(Timestamp::from_second(s).unwrap());
        // A call failed long ago; the watch heard the agent since: the silence counts from then.
        a.mark_unreachable_since(url, "old call failed", t(1_000));
        assert_eq!(a.mark_unreachable_since(url, "silent", t(5_000)), t(5_000));
        // An outage already counted from a later moment stays.
        assert_eq!(a.mark_unreachable_since(url, "silent", t(4_000)), t(5_000));
        // Every failure after it is the same outage: its start does not move (the grace runs).
        assert_eq!(a.mark_unreachable(url, "connect failed"), t(5_000));
        assert_eq!(a.mark_unreachable(url, "watch failed again"), t(5_000));
        a.mark_reachable(url);
        assert_eq!(a.unreachable_since(url), None);
    }

    /// The node and pod of the record an agent holds for `id`.
    fn held_where(a: &Agents, id: &str) -> Option<(String, String)> {
        match a.held_anywhere(id, None) {
            Anywhere::Held { node, record } => Some((node.unwrap_or_default(), record.pod_uid)),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_process_held_by_any_agent_is_found_once_watches_synced() {
        let (a, _rx) = agents(vec![
            agent_pod("a1", "n1", "Running", Some("10.0.0.5")),
            agent_pod("a3", "n3", "Running", Some("10.0.0.7")),
        ]);
        let (u1, u3) = ("http://10.0.0.5:9443", "http://10.0.0.7:9443");
        // Found, not watched yet: a new leader waits for it.
        assert_eq!(a.held_anywhere("x", None), Anywhere::NotYetKnown);
        let mut pass1 = Pass::new();
        let mut pass3 = Pass::new();
        a.apply(u1, WatchEvent::Synced, &mut pass1);
        assert_eq!(
            a.held_anywhere("x", None),
            Anywhere::NotYetKnown,
            "n3 not synced"
        );
        // n3 holds x (an earlier leader's start), in pod "p".
        a.apply(u3, upsert("x", 1), &mut pass3);
        assert_eq!(held_where(&a, "x"), Some(("n3".into(), "p".into())));
        a.apply(u3, WatchEvent::Synced, &mut pass3);
        assert_eq!(held_where(&a, "x"), Some(("n3".into(), "p".into())));
        assert_eq!(a.held_anywhere("y", None), Anywhere::Nowhere);
        // A final, reported process is released: its object's status says where it ran.
        a.release("x");
        assert_eq!(a.held_anywhere("x", None), Anywhere::Nowhere);
        // An agent that went unreachable after its sync: what it held then still answers.
        a.apply(u3, upsert("z", 1), &mut pass3);
        a.mark_unreachable(u3, "connect failed");
        assert!(matches!(a.held_anywhere("z", None), Anywhere::Held { .. }));
        assert_eq!(a.held_anywhere("w", None), Anywhere::Nowhere);
        // One whose watch failed before any sync (our own TLS not loaded yet, say) is waited for
        // (for how long: `waited_for`).
        let (a, _rx) = agents(vec![agent_pod("a1", "n1", "Running", Some("10.0.0.5"))]);
        a.mark_unreachable(u1, "connect failed");
        assert_eq!(a.held_anywhere("x", None), Anywhere::NotYetKnown);
        // The agent pods not listed yet (a new leader's first moments): nothing is known.
        let a = unlisted_agents();
        assert_eq!(a.held_anywhere("x", None), Anywhere::NotYetKnown);
        // Without our TLS material no agent can be asked: waited for in our first minute of
        // leading, then not (the failed start says why in the status).
        let (tx, _rx) = mpsc::unbounded_channel();
        let client = AgentClient::tls("/nonexistent".into(), "ns".into());
        let a = Agents::new(client, Some("https://a:1".into()), None, 9443, tx);
        assert_eq!(a.held_anywhere("x", None), Anywhere::Nowhere);
        a.begin_leading();
        assert_eq!(a.held_anywhere("x", None), Anywhere::NotYetKnown);
    }

    /// An object created after this replica began leading was never seen by an earlier leader:
    /// nothing to look for, no agent to wait on. One created before (or within the margin) is.
    #[tokio::test]
    async fn objects_born_under_this_leader_are_not_looked_for() {
        let (a, _rx) = agents(vec![agent_pod("a1", "n1", "Running", Some("10.0.0.5"))]);
        a.begin_leading();
        let at = |d: i64| {
            let now = Timestamp::now().as_second();
            Time(Timestamp::from_second(now + d).unwrap())
        };
        // n1 not watched yet.
        assert_eq!(
            a.held_anywhere("x", Some(&at(-3600))),
            Anywhere::NotYetKnown
        );
        assert_eq!(a.held_anywhere("x", Some(&at(1))), Anywhere::NotYetKnown);
        assert_eq!(a.held_anywhere("x", Some(&at(6))), Anywhere::Nowhere);
    }

    #[tokio::test]
    async fn agent_pods_are_found_by_node() {
        let (a, _rx) = agents(vec![
            agent_pod("a1", "n1", "Running", Some("10.0.0.5")),
            agent_pod("a2", "n2", "Pending", None),
            agent_pod("a3", "n3", "Running", Some("fd00::7")),
        ]);
        assert_eq!(
            a.url_for_node("n1").as_deref(),
            Some("http://10.0.0.5:9443")
        );
        assert_eq!(
            a.url_for_node("n3").as_deref(),
            Some("http://[fd00::7]:9443")
        );
        assert_eq!(a.url_for_node("n2"), None);
        assert_eq!(a.url_for_node("n4"), None);
        // A node without an agent is remembered since the first look.
        let since = a.missing_since("n2");
        assert_eq!(a.missing_since("n2"), since);
        assert_eq!(
            a.urls(),
            HashSet::from([
                "http://10.0.0.5:9443".to_string(),
                "http://[fd00::7]:9443".to_string()
            ])
        );
    }

    /// The lookup the subresource API makes keeps no books: only the controller's lookups
    /// start a node's grace period.
    #[tokio::test]
    async fn agent_url_is_a_pure_lookup() {
        let (a, _rx) = agents(vec![agent_pod("a1", "n1", "Running", Some("10.0.0.5"))]);
        assert_eq!(a.agent_url("n1").as_deref(), Some("http://10.0.0.5:9443"));
        assert_eq!(a.agent_url("n2"), None);
        assert!(a.missing.lock().unwrap().is_empty());
        assert_eq!(a.url_for_node("n2"), None);
        assert!(a.missing.lock().unwrap().contains_key("n2"));
        assert!(a.listed_within(Duration::from_millis(10)).await);
        // Not listed yet (the watch's first list not in): not listed, after the wait.
        let a = unlisted_agents();
        assert!(!a.listed_within(Duration::from_millis(10)).await);
        assert_eq!(a.agent_url("n1"), None);
    }

    #[tokio::test]
    async fn fixed_url_serves_every_node() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let client = AgentClient::plain("/nonexistent".into()).unwrap();
        let a = Agents::new(client, Some("http://127.0.0.1:1/".into()), None, 9443, tx);
        assert_eq!(a.url_for_node("any").as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(a.agent_url("any").as_deref(), Some("http://127.0.0.1:1"));
        assert!(a.listed_within(Duration::ZERO).await);
    }

    /// What a sink heard: "+ID" upserted, "-ID" removed.
    #[derive(Default)]
    struct Sink(Mutex<Vec<String>>);
    impl ObjectSink for Sink {
        fn upsert(&self, _agent: &str, r: &ProcessRecord, _digest: u64) {
            self.0.lock().unwrap().push(format!("+{}", r.exec_id));
        }
        fn removed(&self, id: &str) {
            self.0.lock().unwrap().push(format!("-{id}"));
        }
    }

    impl Sink {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    /// A record of a `processes` object.
    fn object_record(id: &str, revision: u64) -> ProcessRecord {
        let mut r = rec(id, revision);
        r.object = Some(Box::new(sandbox_api::wire::ProcessObject {
            namespace: "ns".into(),
            name: format!("p-{id}"),
            creation_timestamp: "2026-12-06T10:00:00Z".into(),
            labels: Default::default(),
            annotations: Default::default(),
            pod_name: "pod".into(),
            node_name: "n".into(),
            spec: serde_json::json!({}),
        }));
        r
    }

    fn sent(r: &ProcessRecord) -> WatchEvent {
        WatchEvent::Upsert {
            record: Box::new(r.clone()),
        }
    }

    /// Records of `processes` objects go to the sink, never to the controller; a replica that
    /// does not lead tells the controller nothing.
    #[tokio::test]
    async fn object_records_go_to_the_sink_and_standbys_notify_nothing() {
        let (a, mut rx) = agents(vec![]);
        let sink = Arc::new(Sink::default());
        a.set_sink(sink.clone());
        let url = "http://a:1";
        let mut pass = Pass::new();
        let mut obj = object_record("o", 1);
        a.apply(url, sent(&obj), &mut pass);
        a.apply(url, upsert("x", 1), &mut pass);
        a.apply(url, WatchEvent::Synced, &mut pass);
        assert!(rx.try_recv().is_err(), "a standby notified the controller");
        a.begin_leading();
        a.apply(url, upsert("x", 2), &mut pass);
        obj.revision = 2;
        a.apply(url, sent(&obj), &mut pass);
        assert_eq!(
            a.last_known(url, "o"),
            None,
            "the table keeps it, not the watch"
        );
        a.apply(
            url,
            WatchEvent::Deleted {
                exec_id: "o".into(),
            },
            &mut pass,
        );
        assert_eq!(rx.try_recv().ok().as_deref(), Some("x"));
        assert!(
            rx.try_recv().is_err(),
            "the controller heard of a processes record"
        );
        assert_eq!(sink.take(), ["+o", "+o", "-o"]);
        assert!(a.synced_once(url));
    }

    /// The watch keeps a digest of each object's record, not the record: one sent again
    /// unchanged is not passed on, except in a stream's first listing (what the table showed
    /// while the agent was unreachable is corrected by it); one a listing no longer sends is
    /// removed at its `synced`.
    #[tokio::test]
    async fn object_records_are_passed_on_when_changed_or_listed_anew() {
        let (a, _rx) = agents(vec![]);
        let sink = Arc::new(Sink::default());
        a.set_sink(sink.clone());
        let url = "http://a:1";
        let (o, p) = (object_record("o", 1), object_record("p", 1));
        let mut pass = Pass::new();
        for ev in [sent(&o), sent(&p), WatchEvent::Synced, sent(&o)] {
            a.apply(url, ev, &mut pass);
        }
        assert_eq!(sink.take(), ["+o", "+p"], "a resend of the same record");
        // The stream again (a reconnect): its listing is passed on whole; `p` is not in it.
        let mut pass = Pass::new();
        for ev in [sent(&o), WatchEvent::Synced] {
            a.apply(url, ev, &mut pass);
        }
        assert_eq!(sink.take(), ["+o", "-p"]);
        // Changed: passed on.
        a.apply(url, sent(&object_record("o", 2)), &mut pass);
        assert_eq!(sink.take(), ["+o"]);
    }

    #[tokio::test]
    async fn watch_events_fill_the_cache_and_notify() {
        let (a, mut rx) = agents(vec![]);
        a.begin_leading();
        let url = "http://a:1";
        let mut pass = Pass::new();
        assert_eq!(a.cached(url, "x"), Cached::Unknown);
        a.apply(url, upsert("x", 1), &mut pass);
        a.apply(url, upsert("y", 1), &mut pass);
        // Not synced yet: the cache is not an authority.
        assert_eq!(a.cached(url, "x"), Cached::Unknown);
        a.apply(url, WatchEvent::Synced, &mut pass);
        assert!(matches!(a.cached(url, "x"), Cached::Record(r) if r.revision == 1));
        assert_eq!(a.cached(url, "z"), Cached::Absent);
        // Unchanged upserts do not notify; changes and deletions do.
        a.apply(url, upsert("x", 1), &mut pass);
        a.apply(url, upsert("x", 2), &mut pass);
        a.apply(
            url,
            WatchEvent::Deleted {
                exec_id: "y".into(),
            },
            &mut pass,
        );
        let mut notified = Vec::new();
        while let Ok(id) = rx.try_recv() {
            notified.push(id);
        }
        assert_eq!(notified, ["x", "y", "x", "y"]);
        assert_eq!(a.cached(url, "y"), Cached::Absent);
        a.apply(url, WatchEvent::Synced, &mut pass);
        assert!(matches!(a.cached(url, "x"), Cached::Record(_)));
        // A full resend (after the agent found us lagging) that no longer lists x drops it.
        a.apply(url, upsert("v", 1), &mut pass);
        a.apply(url, WatchEvent::Synced, &mut pass);
        assert_eq!(a.cached(url, "x"), Cached::Absent);
        assert!(matches!(a.cached(url, "v"), Cached::Record(_)));
        // A direct answer never overrides a newer watched record.
        a.remember(url, &rec("w", 5));
        a.remember(url, &rec("w", 3));
        assert!(matches!(a.cached(url, "w"), Cached::Record(r) if r.revision == 5));
    }

    #[tokio::test]
    async fn released_records_are_not_kept() {
        let (a, mut rx) = agents(vec![]);
        let url = "http://a:1";
        let mut pass = Pass::new();
        a.apply(url, upsert("x", 1), &mut pass);
        a.apply(url, upsert("y", 1), &mut pass);
        a.apply(url, WatchEvent::Synced, &mut pass);
        while rx.try_recv().is_ok() {}
        a.release("x");
        assert_eq!(a.cached(url, "x"), Cached::Absent);
        assert!(matches!(a.cached(url, "y"), Cached::Record(_)));
        // Sent again (a resync after a reconnect) or answered directly: still not kept, and no
        // reconcile is triggered for it.
        a.apply(url, upsert("x", 1), &mut pass);
        a.apply(url, upsert("y", 1), &mut pass);
        a.apply(url, WatchEvent::Synced, &mut pass);
        a.remember(url, &rec("x", 2));
        assert_eq!(a.cached(url, "x"), Cached::Absent);
        assert!(rx.try_recv().is_err());
        // Forgotten by the agent: the id is free again.
        a.apply(
            url,
            WatchEvent::Deleted {
                exec_id: "x".into(),
            },
            &mut pass,
        );
        a.apply(url, upsert("x", 3), &mut pass);
        assert!(matches!(a.cached(url, "x"), Cached::Record(r) if r.revision == 3));
        // A resync that no longer lists a released id drops it from the released set too.
        a.release("y");
        a.apply(url, upsert("x", 3), &mut pass);
        a.apply(url, WatchEvent::Synced, &mut pass);
        a.apply(url, upsert("y", 1), &mut pass);
        assert!(matches!(a.cached(url, "y"), Cached::Record(_)));
    }
}
