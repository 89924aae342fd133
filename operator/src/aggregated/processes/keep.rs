//! What the table keeps, round by round: a process of a deleted namespace is stopped and
//! forgotten, an ended process is forgotten on its node once its
//! `ttlSecondsAfterFinished` (default `--processes-ttl-seconds`) has passed, and a process whose
//! agent has not answered for the agent grace period shows it (`ProcessLost`, as a
//! SandboxProcess does), until the agent answers again. Every replica keeps its table; a forget
//! sent twice (two replicas) is one.
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use tracing::{info, warn};

use super::store::Entry;
use super::Api;
use crate::status::AgentView;

/// How often the keeper looks.
const ROUND: Duration = Duration::from_secs(5);

/// Agents asked for a record a round, at most ([`round`]'s "answering again").
const ASK_PER_ROUND: usize = 16;

/// The longest a forget may take (stopping nothing: the process has ended).
const FORGET_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether an ended process's time is up: `ttl` seconds after its end.
pub fn expired(e: &Entry, default_ttl: u64, now: Timestamp) -> bool {
    if !e.kept.ended {
        return false;
    }
    let ttl = e.kept.ttl.map_or(default_ttl as i64, |t| t.max(0));
    // An end without a time (never started): counted from the last transition.
    let Some(end) = e.kept.end.as_ref() else {
        return false;
    };
    now.as_second().saturating_sub(end.0.as_second()) >= ttl
}

pub async fn run(api: Arc<Api>, default_ttl: u64, grace: Duration) {
    // The namespaces (metadata only): a process of a deleted namespace goes with it, as its
    // SandboxProcesses do (the namespace controller deletes what it lists, and a list can come
    // before a replica knows every node).
    let (namespaces, writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    let events = watcher(
        kube::Api::<PartialObjectMeta<Namespace>>::all(api.server.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .applied_objects();
    tokio::spawn(events.for_each(|_| futures::future::ready(())));
    let busy: Busy = Default::default();
    let mut missing = Missing::default();
    loop {
        tokio::time::sleep(ROUND).await;
        missing.update(&api.server.agents.urls());
        round(&api, &namespaces, &busy, &mut missing, default_ttl, grace).await;
    }
}

/// Agents (URLs) the table has processes of but no agent pod serves any more (a node gone,
/// the DaemonSet's pod not back), since when: their processes show it after the grace period.
#[derive(Default)]
struct Missing {
    urls: std::collections::HashMap<String, Time>,
    served: std::collections::HashSet<String>,
}

impl Missing {
    fn update(&mut self, served: &std::collections::HashSet<String>) {
        self.urls.retain(|u, _| !served.contains(u));
        self.served = served.clone();
    }

    /// Since when `url` has had no agent (first seen missing now), or `None` while served.
    fn since(&mut self, url: &str) -> Option<Time> {
        if self.served.contains(url) {
            return None;
        }
        Some(
            self.urls
                .entry(url.to_string())
                .or_insert_with(|| Time(Timestamp::now()))
                .clone(),
        )
    }
}

/// Exec ids a forget is under way for: each runs on its own (a stop can take its grace period),
/// so no tenant's slow stop holds up another's TTL or a lost agent's status.
type Busy = Arc<std::sync::Mutex<std::collections::HashSet<String>>>;

/// Whether the process's namespace is gone or going: the cache says so (once listed), and the
/// API server confirms it (a cache behind, its watch restarting, must not stop anything).
async fn namespace_gone(
    api: &Api,
    namespaces: &Store<PartialObjectMeta<Namespace>>,
    ns: &str,
) -> bool {
    if namespaces.state().is_empty() {
        return false;
    }
    let cached_gone = namespaces
        .get(&ObjectRef::new(ns))
        .is_none_or(|n| n.metadata.deletion_timestamp.is_some());
    if !cached_gone {
        return false;
    }
    let confirmed = kube::Api::<PartialObjectMeta<Namespace>>::all(api.server.client.clone())
        .get_opt(ns)
        .await;
    matches!(confirmed, Ok(None))
        || matches!(confirmed, Ok(Some(n)) if n.metadata.deletion_timestamp.is_some())
}

/// Forgets the process on its node in a task of its own (one at a time per process).
fn forget(api: &Arc<Api>, busy: &Busy, e: Arc<Entry>, timeout: Duration, why: &'static str) {
    if !busy.lock().unwrap().insert(e.exec_id.clone()) {
        return;
    }
    let (api, busy) = (api.clone(), busy.clone());
    tokio::spawn(async move {
        let agents = &api.server.agents;
        match agents.client.forget(&e.agent, &e.exec_id, timeout).await {
            Ok(()) => {
                api.store.remove(&e.exec_id);
                info!(namespace = %e.namespace, name = %e.name, "process forgotten: {why}");
            }
            Err(err) => {
                warn!(namespace = %e.namespace, name = %e.name, error = %err, "forgetting a process ({why})")
            }
        }
        busy.lock().unwrap().remove(&e.exec_id);
    });
}

async fn round(
    api: &Arc<Api>,
    namespaces: &Store<PartialObjectMeta<Namespace>>,
    busy: &Busy,
    missing: &mut Missing,
    default_ttl: u64,
    grace: Duration,
) {
    let now = Timestamp::now();
    let agents = &api.server.agents;
    // One answer per namespace a round (a deleted namespace may hold many processes).
    let mut gone: std::collections::HashMap<String, bool> = Default::default();
    let mut asked = 0;
    for e in api.store.entries() {
        let down = agents
            .unreachable_since(&e.agent)
            .or_else(|| missing.since(&e.agent));
        let ns_gone = match gone.get(&e.namespace) {
            Some(g) => *g,
            None => {
                let g = namespace_gone(api, namespaces, &e.namespace).await;
                gone.insert(e.namespace.clone(), g);
                g
            }
        };
        if down.is_none() && ns_gone {
            // Stopped with its grace period, as a delete.
            let timeout = FORGET_TIMEOUT + Duration::from_secs(60);
            forget(api, busy, e, timeout, "its namespace is deleted");
            continue;
        }
        if down.is_none() && expired(&e, default_ttl, now) {
            forget(
                api,
                busy,
                e,
                FORGET_TIMEOUT,
                "its ttlSecondsAfterFinished passed",
            );
            continue;
        }
        match down {
            Some(since) if elapsed(&since, now) >= grace && !e.kept.ended => {
                // The view says it all; the stand-in carries the object and the pod it is in.
                let Some(rec) = e.stand_in() else {
                    continue;
                };
                let view = AgentView::Unreachable {
                    since,
                    message: "its watch stream is down".into(),
                };
                api.store.put(&e.agent, &rec, Some(&view));
            }
            // Answering again: the record speaks. The watch's relisting, when the agent's stream
            // comes back, has done so already; this is for a stream that never broke (the
            // agent's pod missing from a listing for a while), a few a round.
            None if e.unreachable && !e.kept.ended && asked < ASK_PER_ROUND => {
                let now_e = api.store.get(&e.namespace, &e.name);
                if now_e.is_none_or(|n| n.exec_id != e.exec_id || !n.unreachable) {
                    continue;
                }
                asked += 1;
                let ask = agents.client.get(&e.agent, &e.exec_id);
                if let Ok(Ok(Some(rec))) = tokio::time::timeout(FORGET_TIMEOUT, ask).await {
                    api.store.put(&e.agent, &rec, None);
                }
            }
            _ => {}
        }
    }
}

fn elapsed(since: &Time, now: Timestamp) -> Duration {
    Duration::from_secs(now.as_second().saturating_sub(since.0.as_second()).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregated::processes::store::Kept;
    use sandbox_api::crd::{Phase, SandboxProcessStatus};
    use serde_json::json;

    fn entry(ttl: Option<i64>, phase: Phase, finished: Option<&str>) -> Entry {
        let mut spec = json!({"podName": "p", "command": ["true"]});
        if let Some(t) = ttl {
            spec["ttlSecondsAfterFinished"] = t.into();
        }
        Entry {
            exec_id: "u".into(),
            agent: "a".into(),
            namespace: "ns".into(),
            name: "n".into(),
            labels: Default::default(),
            rv: 1,
            revision: 1,
            output_at: std::time::Instant::now(),
            columns: Default::default(),
            kept: Kept::of(
                &spec,
                &SandboxProcessStatus {
                    phase: Some(phase),
                    finished_at: finished.map(|f| Time(f.parse().unwrap())),
                    ..Default::default()
                },
            ),
            heard: None,
            unreachable: false,
            digest: 0,
            json: "{}".into(),
        }
    }

    #[test]
    fn an_ended_process_is_kept_for_its_ttl() {
        let now: Timestamp = "2026-12-06T12:00:00Z".parse().unwrap();
        let cases = [
            (
                None,
                Phase::Exited,
                Some("2026-12-06T11:00:00Z"),
                true,
                "default ttl (3600) reached",
            ),
            (
                None,
                Phase::Exited,
                Some("2026-12-06T11:00:01Z"),
                false,
                "default ttl not reached",
            ),
            (
                Some(0),
                Phase::Exited,
                Some("2026-12-06T12:00:00Z"),
                true,
                "ttl 0: at once",
            ),
            (
                Some(60),
                Phase::Exited,
                Some("2026-12-06T11:58:59Z"),
                true,
                "its own ttl",
            ),
            (
                Some(60),
                Phase::Exited,
                Some("2026-12-06T11:59:30Z"),
                false,
                "its own ttl, not yet",
            ),
            (Some(0), Phase::Running, None, false, "running: never"),
            (Some(0), Phase::Exited, None, false, "no end time known yet"),
        ];
        for (ttl, phase, finished, want, why) in cases {
            assert_eq!(
                expired(&entry(ttl, phase, finished), 3600, now),
                want,
                "{why}"
            );
        }
    }
}
