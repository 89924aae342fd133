//! What a reconcile does to a process, each at most once: look it up at its node's agent, stop it
//! (once: the agent records that a stop was asked for), start it (once per object: the agent is
//! idempotent by exec id). The agent is reached through [`ProcessApi`], so these decisions have
//! table tests without a cluster; the result is an [`AgentView`] for `status::compute`.
use std::time::Duration;

use futures::future::BoxFuture;
use sandbox_api::validate::Valid;
use sandbox_api::wire::{ErrorCode, ProcessRecord, StartRequest};
use tracing::{info, warn};

use crate::agent::{AgentClient, AgentError, Agents, Cached};
use crate::reconcile::memo::Memo;
use crate::status::AgentView;

/// The agent calls a reconcile makes.
pub trait ProcessApi: Send + Sync {
    fn start<'a>(
        &'a self,
        url: &'a str,
        req: &'a Valid<StartRequest>,
    ) -> BoxFuture<'a, Result<ProcessRecord, AgentError>>;
    fn get<'a>(
        &'a self,
        url: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<ProcessRecord>, AgentError>>;
    fn stop<'a>(
        &'a self,
        url: &'a str,
        id: &'a str,
        grace_seconds: u64,
    ) -> BoxFuture<'a, Result<ProcessRecord, AgentError>>;
}

impl ProcessApi for AgentClient {
    fn start<'a>(
        &'a self,
        url: &'a str,
        req: &'a Valid<StartRequest>,
    ) -> BoxFuture<'a, Result<ProcessRecord, AgentError>> {
        Box::pin(AgentClient::start(self, url, req))
    }
    fn get<'a>(
        &'a self,
        url: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<ProcessRecord>, AgentError>> {
        Box::pin(AgentClient::get(self, url, id))
    }
    fn stop<'a>(
        &'a self,
        url: &'a str,
        id: &'a str,
        grace_seconds: u64,
    ) -> BoxFuture<'a, Result<ProcessRecord, AgentError>> {
        Box::pin(AgentClient::stop(self, url, id, grace_seconds))
    }
}

/// Who acts: the agents' whereabouts and caches, the calls, and the per-object memo.
pub struct Actor<'a> {
    pub agents: &'a Agents,
    pub api: &'a dyn ProcessApi,
    pub memo: &'a Memo,
    /// How long a container the pod says runs may be missing at the runtime before that is final.
    pub agent_grace: Duration,
}

impl Actor<'_> {
    /// A started process, from the watch cache or (not cached) from its node's agent.
    pub async fn lookup(&self, node: Option<&str>, uid: &str) -> (AgentView, Option<String>) {
        let Some(node) = node else {
            return (AgentView::NotAsked, None);
        };
        let Some(url) = self.agents.url_for_node(node) else {
            return (self.no_agent(node), None);
        };
        let view = match self.agents.cached(&url, uid) {
            Cached::Record(r) => AgentView::Record(r),
            Cached::Absent | Cached::Unknown => match self.api.get(&url, uid).await {
                Ok(Some(r)) => {
                    self.agents.mark_reachable(&url);
                    self.agents.remember(&url, &r);
                    AgentView::Record(Box::new(r))
                }
                Ok(None) => {
                    self.agents.mark_reachable(&url);
                    AgentView::NotFound
                }
                Err(e) => self.unreachable(&url, &e),
            },
        };
        (view, Some(url))
    }

    /// `stop: true` → the stop sequence, once: not for an ended process, nor one whose record
    /// says a stop was already asked for.
    pub async fn stop_once(&self, view: AgentView, url: &str, uid: &str, grace: u64) -> AgentView {
        let AgentView::Record(r) = &view else {
            return view;
        };
        if r.is_final() || r.stop_requested {
            return view;
        }
        info!(grace, "stop requested; stopping the process");
        match self.api.stop(url, uid, grace).await {
            Ok(rec) => {
                self.agents.remember(url, &rec);
                AgentView::Record(Box::new(rec))
            }
            Err(e @ AgentError::Unreachable { .. }) => self.unreachable(url, &e),
            Err(e) => {
                warn!(error = %e, "stopping the process");
                view
            }
        }
    }

    /// Starts the process on `node`'s agent. A refusal is final, except: the node at its process
    /// cap (wait for room), an interrupted start (ask again), and a container the pod says runs
    /// but the runtime does not show yet (ask again within the grace period).
    pub async fn start_once(&self, node: &str, req: &Valid<StartRequest>) -> AgentView {
        let Some(url) = self.agents.url_for_node(node) else {
            return self.no_agent(node);
        };
        info!(node = %node, container = %req.container, "starting the process");
        let error = match self.api.start(&url, req).await {
            Ok(rec) => {
                self.agents.mark_reachable(&url);
                self.agents.remember(&url, &rec);
                return AgentView::Record(Box::new(rec));
            }
            Err(AgentError::Api { error, .. }) if error.code != ErrorCode::OperationInterrupted => {
                error
            }
            Err(e) => return self.unreachable(&url, &e),
        };
        self.agents.mark_reachable(&url);
        let transient = matches!(
            error.code,
            ErrorCode::ContainerNotFound | ErrorCode::ContainerUnavailable
        );
        if error.code == ErrorCode::TooManyRequests {
            // The start deadline bounds the wait.
            AgentView::Retrying {
                reason: "NodeAtCapacity".into(),
                message: error.message,
            }
        } else if transient && self.memo.rejected_since(&req.exec_id).elapsed() < self.agent_grace {
            AgentView::Retrying {
                reason: "ContainerNotReady".into(),
                message: format!("{}: {}; retrying", error.code, error.message),
            }
        } else {
            AgentView::Rejected(error)
        }
    }

    fn no_agent(&self, node: &str) -> AgentView {
        AgentView::Unreachable {
            since: self.agents.missing_since(node),
            message: format!("no agent pod on node {node}"),
        }
    }

    fn unreachable(&self, url: &str, e: &AgentError) -> AgentView {
        let message = match e {
            AgentError::Unreachable { message, .. } => message.clone(),
            AgentError::Api { error, .. } => format!("{}: {}", error.code, error.message),
        };
        AgentView::Unreachable {
            since: self.agents.mark_unreachable(url, &message),
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use sandbox_api::wire::{ApiError, Phase};
    use tokio::sync::mpsc;

    use super::*;

    const URL: &str = "http://agent:9443";

    type Answer = Result<ProcessRecord, AgentError>;

    /// An agent that answers from a script and writes down every call.
    #[derive(Default)]
    struct Scripted {
        start: Mutex<Vec<Result<ProcessRecord, AgentError>>>,
        stop: Mutex<Vec<Result<ProcessRecord, AgentError>>>,
        get: Mutex<Vec<Result<Option<ProcessRecord>, AgentError>>>,
        calls: Mutex<Vec<String>>,
    }

    fn next<T>(q: &Mutex<Vec<T>>) -> T {
        q.lock().unwrap().remove(0)
    }

    impl ProcessApi for Scripted {
        fn start<'a>(
            &'a self,
            url: &'a str,
            req: &'a Valid<StartRequest>,
        ) -> BoxFuture<'a, Result<ProcessRecord, AgentError>> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("start {url} {}", req.exec_id));
            Box::pin(async { next(&self.start) })
        }
        fn get<'a>(
            &'a self,
            _: &'a str,
            id: &'a str,
        ) -> BoxFuture<'a, Result<Option<ProcessRecord>, AgentError>> {
            self.calls.lock().unwrap().push(format!("get {id}"));
            Box::pin(async { next(&self.get) })
        }
        fn stop<'a>(
            &'a self,
            _: &'a str,
            id: &'a str,
            grace: u64,
        ) -> BoxFuture<'a, Result<ProcessRecord, AgentError>> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("stop {id} {grace}"));
            Box::pin(async { next(&self.stop) })
        }
    }

    fn agents() -> std::sync::Arc<Agents> {
        let (tx, _rx) = mpsc::unbounded_channel();
        let client = AgentClient::plain("/nonexistent".into()).unwrap();
        Agents::new(client, Some(URL.into()), None, 9443, tx)
    }

    fn actor<'a>(
        agents: &'a Agents,
        api: &'a Scripted,
        memo: &'a Memo,
        agent_grace: Duration,
    ) -> Actor<'a> {
        Actor {
            agents,
            api,
            memo,
            agent_grace,
        }
    }

    fn record(phase: Phase) -> ProcessRecord {
        let mut r = ProcessRecord::starting("uid-1", "pod", "c", "ctr");
        r.phase = phase;
        r
    }

    fn refused(code: ErrorCode) -> Result<ProcessRecord, AgentError> {
        Err(AgentError::Api {
            url: URL.into(),
            error: ApiError {
                code,
                message: "no".into(),
            },
        })
    }

    fn unreachable() -> AgentError {
        AgentError::Unreachable {
            url: URL.into(),
            message: "connection refused".into(),
        }
    }

    fn request() -> Valid<StartRequest> {
        sandbox_api::validate::start(
            serde_json::from_value(serde_json::json!({
                "execId": "uid-1", "podUid": "pod", "container": "c", "command": ["true"]
            }))
            .unwrap(),
        )
        .unwrap()
    }

    fn kind(v: &AgentView) -> String {
        match v {
            AgentView::NotAsked => "NotAsked".into(),
            AgentView::Record(r) => format!("Record {:?}", r.phase),
            AgentView::NotFound => "NotFound".into(),
            AgentView::Rejected(e) => format!("Rejected {}", e.code),
            AgentView::Retrying { reason, .. } => format!("Retrying {reason}"),
            AgentView::Unreachable { .. } => "Unreachable".into(),
        }
    }

    #[tokio::test]
    async fn start_answers_become_views() {
        let grace = Duration::from_secs(60);
        let cases: Vec<(Result<ProcessRecord, AgentError>, Duration, &str)> = vec![
            (Ok(record(Phase::Running)), grace, "Record Running"),
            (
                refused(ErrorCode::TooManyRequests),
                grace,
                "Retrying NodeAtCapacity",
            ),
            (
                refused(ErrorCode::ContainerNotFound),
                grace,
                "Retrying ContainerNotReady",
            ),
            (
                refused(ErrorCode::ContainerUnavailable),
                grace,
                "Retrying ContainerNotReady",
            ),
            // Past the grace period a missing container is final.
            (
                refused(ErrorCode::ContainerNotFound),
                Duration::ZERO,
                "Rejected ContainerNotFound",
            ),
            (
                refused(ErrorCode::InvalidProcessCwd),
                grace,
                "Rejected InvalidProcessCwd",
            ),
            (
                refused(ErrorCode::RuntimeUnsupported),
                grace,
                "Rejected RuntimeUnsupported",
            ),
            // Interrupted is not a verdict on the process: asked again like an unreachable agent.
            (
                refused(ErrorCode::OperationInterrupted),
                grace,
                "Unreachable",
            ),
            (Err(unreachable()), grace, "Unreachable"),
        ];
        for (answer, agent_grace, want) in cases {
            let api = Scripted::default();
            api.start.lock().unwrap().push(answer);
            let (agents, memo) = (agents(), Memo::default());
            let actor = actor(&agents, &api, &memo, agent_grace);
            let view = actor.start_once("node-1", &request()).await;
            assert_eq!(kind(&view), want);
            assert_eq!(*api.calls.lock().unwrap(), [format!("start {URL} uid-1")]);
            let reachable = agents.unreachable_since(URL).is_none();
            assert_eq!(reachable, want != "Unreachable", "{want}");
        }
    }

    #[tokio::test]
    async fn stop_is_asked_once() {
        let mut asked = record(Phase::Running);
        asked.stop_requested = true;
        let cases: Vec<(ProcessRecord, Option<Answer>, &str)> = vec![
            // Running, never asked: one stop call, its record is the view.
            (
                record(Phase::Running),
                Some(Ok(asked.clone())),
                "Record Running",
            ),
            // Already asked, or already ended: no call.
            (asked.clone(), None, "Record Running"),
            (record(Phase::Exited), None, "Record Exited"),
            (
                record(Phase::Running),
                Some(Err(unreachable())),
                "Unreachable",
            ),
            // Another refusal keeps what was known (asked again next time).
            (
                record(Phase::Running),
                Some(refused(ErrorCode::Internal)),
                "Record Running",
            ),
        ];
        for (rec, answer, want) in cases {
            let api = Scripted::default();
            let called = answer.is_some();
            api.stop.lock().unwrap().extend(answer);
            let (agents, memo) = (agents(), Memo::default());
            let actor = actor(&agents, &api, &memo, Duration::from_secs(60));
            let view = actor
                .stop_once(AgentView::Record(Box::new(rec)), URL, "uid-1", 7)
                .await;
            assert_eq!(kind(&view), want);
            let calls = api.calls.lock().unwrap().clone();
            assert_eq!(
                calls,
                if called {
                    vec!["stop uid-1 7".to_string()]
                } else {
                    vec![]
                }
            );
        }
    }

    /// Until the agent's watch is synced its cache knows nothing: every lookup asks the agent.
    #[tokio::test]
    async fn lookup_asks_the_agent_until_the_watch_is_synced() {
        let api = Scripted::default();
        api.get.lock().unwrap().extend([
            Ok(None),
            Err(unreachable()),
            Ok(Some(record(Phase::Running))),
        ]);
        let (agents, memo) = (agents(), Memo::default());
        let actor = actor(&agents, &api, &memo, Duration::from_secs(60));
        assert_eq!(kind(&actor.lookup(None, "uid-1").await.0), "NotAsked");
        let (view, url) = actor.lookup(Some("node-1"), "uid-1").await;
        assert_eq!(
            (kind(&view), url.as_deref()),
            ("NotFound".into(), Some(URL))
        );
        let view = actor.lookup(Some("node-1"), "uid-1").await.0;
        assert_eq!(kind(&view), "Unreachable");
        assert!(agents.unreachable_since(URL).is_some());
        let view = actor.lookup(Some("node-1"), "uid-1").await.0;
        assert_eq!(kind(&view), "Record Running");
        assert!(
            agents.unreachable_since(URL).is_none(),
            "an answer clears it"
        );
        assert_eq!(api.calls.lock().unwrap().len(), 3);
    }
}
