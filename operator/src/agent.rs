//! Talking to the node agents: the HTTP client, where each node's agent is, and one `/v1/watch`
//! stream per agent whose changes trigger reconciles (no per-object polling).
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::Store;
use sandbox_api::wire::{
    ApiError, ErrorCode, LogQuery, ProcessRecord, SignalRequest, StartRequest, WatchEvent,
};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

/// Labels of the agent pods (in the operator's namespace).
pub const AGENT_SELECTOR: &str =
    "app.kubernetes.io/name=sandbox-process-operator,app.kubernetes.io/component=agent";

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No usable answer: connection failed, timed out, the agent failed internally or refused our
    /// token. The process's state is unknown.
    #[error("agent {url} unreachable: {message}")]
    Unreachable { url: String, message: String },
    /// The agent answered with a definite error about the request or the process.
    #[error("agent {url}: {}: {}", error.code, error.message)]
    Api { url: String, error: ApiError },
}

impl AgentError {
    pub fn api_code(&self) -> Option<ErrorCode> {
        match self {
            AgentError::Api { error, .. } => Some(error.code),
            AgentError::Unreachable { .. } => None,
        }
    }
}

/// HTTP client for the agent API with the operator's bearer token (re-read from its file on every
/// request: projected ServiceAccount tokens are rotated by the kubelet).
#[derive(Clone)]
pub struct AgentClient {
    http: reqwest::Client,
    token_file: PathBuf,
}

impl AgentClient {
    pub fn new(token_file: PathBuf) -> anyhow::Result<AgentClient> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .build()?;
        Ok(AgentClient { http, token_file })
    }

    fn token(&self, url: &str) -> Result<String, AgentError> {
        std::fs::read_to_string(&self.token_file)
            .map(|t| t.trim().to_string())
            .map_err(|e| AgentError::Unreachable {
                url: url.into(),
                message: format!("reading token {}: {e}", self.token_file.display()),
            })
    }

    async fn send(
        &self,
        url: &str,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, AgentError> {
        let unreachable = |message: String| AgentError::Unreachable {
            url: url.into(),
            message,
        };
        let resp = req
            .bearer_auth(self.token(url)?)
            .send()
            .await
            .map_err(|e| unreachable(error_chain(&e)))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let body = resp.bytes().await.unwrap_or_default();
        match serde_json::from_slice::<ApiError>(&body) {
            Ok(error) if !matches!(error.code, ErrorCode::Internal | ErrorCode::Unauthorized) => {
                Err(AgentError::Api {
                    url: url.into(),
                    error,
                })
            }
            Ok(error) => Err(unreachable(format!(
                "HTTP {status}: {}: {}",
                error.code, error.message
            ))),
            Err(_) => Err(unreachable(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ))),
        }
    }

    async fn record(resp: reqwest::Response, url: &str) -> Result<ProcessRecord, AgentError> {
        resp.json().await.map_err(|e| AgentError::Unreachable {
            url: url.into(),
            message: format!("decoding the record: {e}"),
        })
    }

    /// Starts the process (idempotent on `execId`: an existing process is returned).
    pub async fn start(&self, url: &str, req: &StartRequest) -> Result<ProcessRecord, AgentError> {
        let r = self
            .http
            .post(format!("{url}/v1/processes"))
            .timeout(Duration::from_secs(60))
            .json(req);
        let resp = self.send(url, r).await?;
        Self::record(resp, url).await
    }

    /// Every process the agent holds.
    pub async fn list(&self, url: &str) -> Result<Vec<ProcessRecord>, AgentError> {
        let r = self
            .http
            .get(format!("{url}/v1/processes"))
            .timeout(Duration::from_secs(30));
        let resp = self.send(url, r).await?;
        let list: sandbox_api::wire::ProcessList =
            resp.json().await.map_err(|e| AgentError::Unreachable {
                url: url.into(),
                message: format!("decoding the process list: {e}"),
            })?;
        Ok(list.items)
    }

    /// The agent's record; `None` when it has no such process.
    pub async fn get(&self, url: &str, id: &str) -> Result<Option<ProcessRecord>, AgentError> {
        let r = self
            .http
            .get(format!("{url}/v1/processes/{id}"))
            .timeout(Duration::from_secs(10));
        match self.send(url, r).await {
            Ok(resp) => Self::record(resp, url).await.map(Some),
            Err(e) if e.api_code() == Some(ErrorCode::ProcessNotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Stop sequence: the stop signal to the process group, SIGKILL after `grace_seconds`.
    pub async fn stop(
        &self,
        url: &str,
        id: &str,
        grace_seconds: u64,
    ) -> Result<ProcessRecord, AgentError> {
        let req = SignalRequest {
            stop: true,
            signal: None,
            grace_seconds: Some(grace_seconds),
        };
        self.post_signal(url, id, &req).await
    }

    /// One signal to the process group, outside the stop sequence (`kubectl sandbox kill`).
    pub async fn signal(
        &self,
        url: &str,
        id: &str,
        signal: i32,
    ) -> Result<ProcessRecord, AgentError> {
        let req = SignalRequest {
            stop: false,
            signal: Some(signal),
            grace_seconds: None,
        };
        self.post_signal(url, id, &req).await
    }

    async fn post_signal(
        &self,
        url: &str,
        id: &str,
        req: &SignalRequest,
    ) -> Result<ProcessRecord, AgentError> {
        let r = self
            .http
            .post(format!("{url}/v1/processes/{id}/signal"))
            .timeout(Duration::from_secs(10))
            .json(req);
        let resp = self.send(url, r).await?;
        Self::record(resp, url).await
    }

    /// The process's output as the agent's NDJSON stream of `LogEvent`s. No overall timeout: a
    /// follow lasts until the process ends or the caller goes away.
    pub async fn logs(
        &self,
        url: &str,
        id: &str,
        query: &LogQuery,
    ) -> Result<reqwest::Response, AgentError> {
        let r = self
            .http
            .get(format!("{url}/v1/processes/{id}/logs"))
            .query(query);
        self.send(url, r).await
    }

    /// Stops the process if it runs (waiting for it to end) and forgets it. Unknown ids succeed.
    pub async fn forget(&self, url: &str, id: &str, timeout: Duration) -> Result<(), AgentError> {
        let r = self
            .http
            .delete(format!("{url}/v1/processes/{id}"))
            .timeout(timeout);
        match self.send(url, r).await {
            Ok(_) => Ok(()),
            Err(e) if e.api_code() == Some(ErrorCode::ProcessNotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn watch(&self, url: &str) -> Result<reqwest::Response, AgentError> {
        // No overall timeout: the stream lasts as long as the connection.
        let r = self.http.get(format!("{url}/v1/watch"));
        self.send(url, r).await
    }
}

/// The agent API's URL on a pod IP (v4 or v6).
pub fn url_for_ip(ip: &str, port: u16) -> String {
    if ip.contains(':') {
        format!("http://[{ip}]:{port}")
    } else {
        format!("http://{ip}:{port}")
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
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

#[derive(Default)]
struct AgentState {
    records: HashMap<String, ProcessRecord>,
    /// Processes whose final status is written ([`Agents::release`]): their records are not
    /// kept, also when the watch sends them again.
    released: HashSet<String>,
    synced: bool,
    unreachable_since: Option<Time>,
    last_error: String,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// Where each node's agent is, each agent's reachability, and the watch caches.
pub struct Agents {
    pub client: AgentClient,
    /// `--agent-url`: one agent for every node (host-run tests, single node).
    fixed_url: Option<String>,
    /// Agent pods (operator namespace, [`AGENT_SELECTOR`]); unused with a fixed URL.
    pods: Option<Store<Pod>>,
    port: u16,
    state: Mutex<HashMap<String, AgentState>>,
    /// Since when a node has had no agent pod.
    missing: Mutex<HashMap<String, Time>>,
    /// Exec ids whose record changed.
    notify: mpsc::UnboundedSender<String>,
}

fn now() -> Time {
    Time(Timestamp::now())
}

impl Agents {
    pub fn new(
        client: AgentClient,
        fixed_url: Option<String>,
        pods: Option<Store<Pod>>,
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
        })
    }

    /// The agent serving `node`, if one is known.
    pub fn url_for_node(&self, node: &str) -> Option<String> {
        if let Some(u) = &self.fixed_url {
            return Some(u.clone());
        }
        let pods = self.pods.as_ref()?;
        let found = pods
            .find(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
                    && p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some()
            })
            .and_then(|p| p.status.as_ref()?.pod_ip.clone())
            .map(|ip| self.url_for_ip(&ip));
        let mut missing = self.missing.lock().unwrap();
        if found.is_some() {
            missing.remove(node);
        } else {
            missing.entry(node.to_string()).or_insert_with(now);
        }
        found
    }

    fn url_for_ip(&self, ip: &str) -> String {
        url_for_ip(ip, self.port)
    }

    /// Since when `node` has had no agent (for the grace period).
    pub fn missing_since(&self, node: &str) -> Time {
        self.missing
            .lock()
            .unwrap()
            .entry(node.to_string())
            .or_insert_with(now)
            .clone()
    }

    pub fn cached(&self, url: &str, id: &str) -> Cached {
        let state = self.state.lock().unwrap();
        match state.get(url) {
            Some(s) if s.synced => match s.records.get(id) {
                Some(r) => Cached::Record(Box::new(r.clone())),
                None => Cached::Absent,
            },
            _ => Cached::Unknown,
        }
    }

    /// Remembers a record from a direct call, unless the watch already has a newer one.
    pub fn remember(&self, url: &str, rec: &ProcessRecord) {
        let mut state = self.state.lock().unwrap();
        let s = state.entry(url.to_string()).or_default();
        if s.released.contains(&rec.exec_id) {
            return;
        }
        match s.records.get(&rec.exec_id) {
            Some(old) if old.revision > rec.revision => {}
            _ => {
                s.records.insert(rec.exec_id.clone(), rec.clone());
            }
        }
    }

    /// Drops the record of a process whose final status has been written: a final status is
    /// never recomputed, so nothing reads the record again (it holds up to 2 KiB of output).
    /// Until the agent forgets the process, the watch's copies of it are not kept either.
    pub fn release(&self, id: &str) {
        let mut state = self.state.lock().unwrap();
        for s in state.values_mut() {
            if s.records.remove(id).is_some() {
                s.released.insert(id.to_string());
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
        s.unreachable_since.get_or_insert_with(now).clone()
    }

    /// The desired set of agents: the fixed URL, or one per running agent pod.
    /// The URL of every agent pod that runs.
    pub fn urls(&self) -> HashSet<String> {
        self.desired()
    }

    fn desired(&self) -> HashSet<String> {
        if let Some(u) = &self.fixed_url {
            return HashSet::from([u.clone()]);
        }
        let Some(pods) = &self.pods else {
            return HashSet::new();
        };
        pods.state()
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .map(|ip| self.url_for_ip(&ip))
            .collect()
    }

    /// Keeps one watch stream per agent, forever.
    pub async fn run_watches(self: Arc<Self>) {
        loop {
            let desired = self.desired();
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
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    async fn watch_loop(self: Arc<Self>, url: String) {
        let mut backoff = Duration::from_millis(250);
        loop {
            match self.watch_once(&url).await {
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
            for id in ids {
                let _ = self.notify.send(id);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }

    async fn watch_once(&self, url: &str) -> Result<(), AgentError> {
        let resp = self.client.watch(url).await?;
        let mut body = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        // Records seen since (re)connecting, to drop the ones forgotten meanwhile at `synced`.
        let mut seen: HashSet<String> = HashSet::new();
        let mut synced = false;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| AgentError::Unreachable {
                url: url.into(),
                message: error_chain(&e),
            })?;
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
                self.apply(url, ev, &mut seen, &mut synced);
            }
        }
        Ok(())
    }

    fn apply(&self, url: &str, ev: WatchEvent, seen: &mut HashSet<String>, synced: &mut bool) {
        let mut changed = Vec::new();
        {
            let mut state = self.state.lock().unwrap();
            let s = state.entry(url.to_string()).or_default();
            match ev {
                WatchEvent::Upsert { record } => {
                    let id = record.exec_id.clone();
                    seen.insert(id.clone());
                    if s.released.contains(&id) {
                        // Final and reported: nothing to keep or to look at.
                    } else if s.records.get(&id) != Some(&record) {
                        s.records.insert(id.clone(), *record);
                        changed.push(id);
                    }
                }
                WatchEvent::Deleted { exec_id } => {
                    seen.remove(&exec_id);
                    s.released.remove(&exec_id);
                    if s.records.remove(&exec_id).is_some() {
                        changed.push(exec_id);
                    }
                }
                WatchEvent::Synced => {
                    // A resync after a lag also ends with `synced`: drop what was not resent
                    // since the previous `synced`. (A record upserted after that `synced` and
                    // forgotten during the lag stays cached; only our own DELETE forgets, after
                    // which nothing looks at that record again.)
                    let gone: Vec<String> = s
                        .records
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for id in gone {
                        s.records.remove(&id);
                        changed.push(id);
                    }
                    s.released.retain(|id| seen.contains(id));
                    seen.clear();
                    if !*synced {
                        info!(agent = %url, processes = s.records.len(), "agent watch synced");
                    }
                    *synced = true;
                    s.synced = true;
                    s.unreachable_since = None;
                }
            }
        }
        for id in changed {
            let _ = self.notify.send(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;
    use sandbox_api::wire::Phase;

    fn agents(pods: Vec<Pod>) -> (Arc<Agents>, mpsc::UnboundedReceiver<String>) {
        let mut w: Writer<Pod> = Writer::default();
        w.apply_watcher_event(&watcher::Event::Init);
        for p in pods {
            w.apply_watcher_event(&watcher::Event::InitApply(p));
        }
        w.apply_watcher_event(&watcher::Event::InitDone);
        let (tx, rx) = mpsc::unbounded_channel();
        let client = AgentClient::new("/nonexistent".into()).unwrap();
        (Agents::new(client, None, Some(w.as_reader()), 9443, tx), rx)
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
            a.desired(),
            HashSet::from([
                "http://10.0.0.5:9443".to_string(),
                "http://[fd00::7]:9443".to_string()
            ])
        );
    }

    #[tokio::test]
    async fn fixed_url_serves_every_node() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let client = AgentClient::new("/nonexistent".into()).unwrap();
        let a = Agents::new(client, Some("http://127.0.0.1:1/".into()), None, 9443, tx);
        assert_eq!(a.url_for_node("any").as_deref(), Some("http://127.0.0.1:1"));
    }

    #[tokio::test]
    async fn watch_events_fill_the_cache_and_notify() {
        let (a, mut rx) = agents(vec![]);
        let url = "http://a:1";
        let (mut seen, mut synced) = (HashSet::new(), false);
        assert_eq!(a.cached(url, "x"), Cached::Unknown);
        a.apply(url, upsert("x", 1), &mut seen, &mut synced);
        a.apply(url, upsert("y", 1), &mut seen, &mut synced);
        // Not synced yet: the cache is not an authority.
        assert_eq!(a.cached(url, "x"), Cached::Unknown);
        a.apply(url, WatchEvent::Synced, &mut seen, &mut synced);
        assert!(matches!(a.cached(url, "x"), Cached::Record(r) if r.revision == 1));
        assert_eq!(a.cached(url, "z"), Cached::Absent);
        // Unchanged upserts do not notify; changes and deletions do.
        a.apply(url, upsert("x", 1), &mut seen, &mut synced);
        a.apply(url, upsert("x", 2), &mut seen, &mut synced);
        a.apply(
            url,
            WatchEvent::Deleted {
                exec_id: "y".into(),
            },
            &mut seen,
            &mut synced,
        );
        let mut notified = Vec::new();
        while let Ok(id) = rx.try_recv() {
            notified.push(id);
        }
        assert_eq!(notified, ["x", "y", "x", "y"]);
        assert_eq!(a.cached(url, "y"), Cached::Absent);
        a.apply(url, WatchEvent::Synced, &mut seen, &mut synced);
        assert!(matches!(a.cached(url, "x"), Cached::Record(_)));
        // A full resend (after the agent found us lagging) that no longer lists x drops it.
        a.apply(url, upsert("v", 1), &mut seen, &mut synced);
        a.apply(url, WatchEvent::Synced, &mut seen, &mut synced);
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
        let (mut seen, mut synced) = (HashSet::new(), false);
        a.apply(url, upsert("x", 1), &mut seen, &mut synced);
        a.apply(url, upsert("y", 1), &mut seen, &mut synced);
        a.apply(url, WatchEvent::Synced, &mut seen, &mut synced);
        while rx.try_recv().is_ok() {}
        a.release("x");
        assert_eq!(a.cached(url, "x"), Cached::Absent);
        assert!(matches!(a.cached(url, "y"), Cached::Record(_)));
        // Sent again (a resync after a reconnect) or answered directly: still not kept, and no
        // reconcile is triggered for it.
        a.apply(url, upsert("x", 1), &mut seen, &mut synced);
        a.apply(url, upsert("y", 1), &mut seen, &mut synced);
        a.apply(url, WatchEvent::Synced, &mut seen, &mut synced);
        a.remember(url, &rec("x", 2));
        assert_eq!(a.cached(url, "x"), Cached::Absent);
        assert!(rx.try_recv().is_err());
        // Forgotten by the agent: the id is free again.
        a.apply(
            url,
            WatchEvent::Deleted {
                exec_id: "x".into(),
            },
            &mut seen,
            &mut synced,
        );
        a.apply(url, upsert("x", 3), &mut seen, &mut synced);
        assert!(matches!(a.cached(url, "x"), Cached::Record(r) if r.revision == 3));
        // A resync that no longer lists a released id drops it from the released set too.
        a.release("y");
        a.apply(url, upsert("x", 3), &mut seen, &mut synced);
        a.apply(url, WatchEvent::Synced, &mut seen, &mut synced);
        a.apply(url, upsert("y", 1), &mut seen, &mut synced);
        assert!(matches!(a.cached(url, "y"), Cached::Record(_)));
    }
}
