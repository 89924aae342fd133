//! The HTTP client of the agent API: start, get, list, stop/signal, logs, forget, watch, with the
//! operator's bearer token and typed errors.
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use sandbox_api::validate::Valid;
use sandbox_api::wire::{
    writer_label, ApiError, ErrorCode, LogQuery, ProcessRecord, SignalRequest, StartRequest,
    StdinState, StdinWriter, TerminalScreen, TerminalSize,
};

/// Longest wait for an answer to begin: connection, TLS handshake and the response's head (a
/// start waits for runc and has its own, longer, bound).
const RESPONSE_HEAD: Duration = Duration::from_secs(15);
const START_TIMEOUT: Duration = Duration::from_secs(60);

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
///
/// With TLS (every real install), an agent is addressed as `https://<node>.agent.<ns>.svc`: the
/// name is pinned to the agent pod's IP here (no DNS record exists), and the handshake must show
/// a certificate for exactly that name from our CA before a request, and so the token, is sent.
/// Our own client certificate goes with it. Plain HTTP is only for host-run tests
/// (`--agent-url`).
#[derive(Clone)]
pub struct AgentClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AgentClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentClient")
            .field("token_file", &self.inner.token_file)
            .field("tls_namespace", &self.inner.tls_namespace)
            .finish_non_exhaustive()
    }
}

struct Inner {
    /// `None` until the trust material is loaded (TLS): requests fail as unreachable meanwhile.
    http: RwLock<Option<reqwest::Client>>,
    token_file: PathBuf,
    /// The agents' namespace when TLS is on.
    tls_namespace: Option<String>,
    pins: Arc<Pins>,
    /// Since when agents can be asked at all (the trust material first loaded).
    usable_since: Mutex<Option<std::time::Instant>>,
}

/// Agent names → pod IPs, for the resolver: set by whoever picked the agent pod for a node.
#[derive(Default)]
struct Pins(Mutex<HashMap<String, IpAddr>>);

impl Resolve for Pins {
    fn resolve(&self, name: Name) -> Resolving {
        let found = self.0.lock().unwrap().get(name.as_str()).copied();
        let name = name.as_str().to_string();
        Box::pin(async move {
            match found {
                // The port is replaced by the URL's.
                Some(ip) => Ok(Box::new(std::iter::once(SocketAddr::new(ip, 0))) as Addrs),
                None => Err(format!("no agent pod known for {name}").into()),
            }
        })
    }
}

/// Backstop for an agent that sends no watch heartbeats (older): the kernel's probes end a
/// connection to a vanished peer (idle 30 s, then its probes) instead of never.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

impl AgentClient {
    /// Plain HTTP (host-run tests with `--agent-url http://…`).
    pub fn plain(token_file: PathBuf) -> anyhow::Result<AgentClient> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .tcp_keepalive(TCP_KEEPALIVE)
            .build()?;
        Ok(Self::with(Some(http), token_file, None))
    }

    /// TLS to agents of `namespace`; unusable until [`AgentClient::set_tls`].
    pub fn tls(token_file: PathBuf, namespace: String) -> AgentClient {
        Self::with(None, token_file, Some(namespace))
    }

    fn with(
        http: Option<reqwest::Client>,
        token_file: PathBuf,
        tls_namespace: Option<String>,
    ) -> AgentClient {
        let usable_since = Mutex::new(http.as_ref().map(|_| std::time::Instant::now()));
        AgentClient {
            inner: Arc::new(Inner {
                http: RwLock::new(http),
                token_file,
                tls_namespace,
                pins: Arc::default(),
                usable_since,
            }),
        }
    }

    /// Since when agents can be reached (`None`: our trust material is not loaded yet).
    pub fn usable_since(&self) -> Option<std::time::Instant> {
        *self.inner.usable_since.lock().unwrap()
    }

    /// New trust material (CA bundle, our client certificate): new connections use it, open
    /// ones (log follows, watches) keep theirs.
    pub fn set_tls(&self, cfg: rustls::ClientConfig) -> anyhow::Result<()> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .tcp_keepalive(TCP_KEEPALIVE)
            .https_only(true)
            .dns_resolver(self.inner.pins.clone())
            .use_preconfigured_tls(cfg)
            .build()?;
        *self.inner.http.write().unwrap() = Some(http);
        self.inner
            .usable_since
            .lock()
            .unwrap()
            .get_or_insert_with(std::time::Instant::now);
        Ok(())
    }

    /// Agents are reached over mutual TLS, pinned to the node's name: a request sent to a
    /// stale address fails the handshake instead of reaching another pod.
    pub fn pins_node_identity(&self) -> bool {
        self.inner.tls_namespace.is_some()
    }

    /// The URL of the agent pod at `ip` serving `node`.
    pub fn url_for(&self, node: &str, ip: &str, port: u16) -> String {
        match &self.inner.tls_namespace {
            None if ip.contains(':') => format!("http://[{ip}]:{port}"),
            None => format!("http://{ip}:{port}"),
            Some(ns) => {
                let name = crate::pki::agent_dns(node, ns);
                if let Ok(ip) = ip.parse() {
                    self.inner.pins.0.lock().unwrap().insert(name.clone(), ip);
                }
                format!("https://{name}:{port}")
            }
        }
    }

    fn http(&self, url: &str) -> Result<reqwest::Client, AgentError> {
        self.inner
            .http
            .read()
            .unwrap()
            .clone()
            .ok_or_else(|| AgentError::Unreachable {
                url: url.into(),
                message: "the agents' CA bundle and our client certificate are not loaded yet"
                    .into(),
            })
    }

    fn token(&self, url: &str) -> Result<String, AgentError> {
        let file = &self.inner.token_file;
        std::fs::read_to_string(file)
            .map(|t| t.trim().to_string())
            .map_err(|e| AgentError::Unreachable {
                url: url.into(),
                message: format!("reading token {}: {e}", file.display()),
            })
    }

    async fn send(
        &self,
        url: &str,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, AgentError> {
        self.send_bounded(url, req, false).await
    }

    async fn send_bounded(
        &self,
        url: &str,
        req: reqwest::RequestBuilder,
        start: bool,
    ) -> Result<reqwest::Response, AgentError> {
        let unreachable = |message: String| AgentError::Unreachable {
            url: url.into(),
            message,
        };
        // Connection, handshake and the answer's head are bounded whatever the request's own
        // timeout (streams have none): a peer that accepts and then says nothing must not hold a
        // reconcile or a user's request forever.
        let head = if start { START_TIMEOUT } else { RESPONSE_HEAD };
        let resp = tokio::time::timeout(head, req.bearer_auth(self.token(url)?).send())
            .await
            .map_err(|_| unreachable(format!("no answer within {}s", head.as_secs())))?
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
    /// Only a request that passed `validate::start` is sent: the agent's door would refuse others.
    pub async fn start(
        &self,
        url: &str,
        req: &Valid<StartRequest>,
    ) -> Result<ProcessRecord, AgentError> {
        let r = self
            .http(url)?
            .post(format!("{url}/v1/processes"))
            .timeout(START_TIMEOUT)
            .json(&**req);
        let resp = self.send_bounded(url, r, true).await?;
        Self::record(resp, url).await
    }

    /// Every process the agent holds.
    pub async fn list(&self, url: &str) -> Result<Vec<ProcessRecord>, AgentError> {
        let r = self
            .http(url)?
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
            .http(url)?
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
    /// The stop sequence with the process's own stop signal and grace period (as started).
    pub async fn stop_as_started(&self, url: &str, id: &str) -> Result<ProcessRecord, AgentError> {
        let req = SignalRequest {
            stop: true,
            signal: None,
            grace_seconds: None,
        };
        self.post_signal(url, id, &req).await
    }

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
            .http(url)?
            .post(format!("{url}/v1/processes/{id}/signal"))
            .timeout(Duration::from_secs(10))
            .json(req);
        let resp = self.send(url, r).await?;
        Self::record(resp, url).await
    }

    /// New labels and annotations for a `processes` object (its PATCH).
    pub async fn set_object(
        &self,
        url: &str,
        id: &str,
        object: &sandbox_api::wire::ProcessObject,
    ) -> Result<ProcessRecord, AgentError> {
        let r = self
            .http(url)?
            .put(format!("{url}/v1/processes/{id}/object"))
            .timeout(Duration::from_secs(10))
            .json(object);
        let resp = self.send(url, r).await?;
        Self::record(resp, url).await
    }

    /// One port check in the process's pod.
    pub async fn probe(
        &self,
        url: &str,
        id: &str,
        probe: &sandbox_api::wire::ProbeKind,
    ) -> Result<sandbox_api::wire::ProbeResult, AgentError> {
        let r = self
            .http(url)?
            .post(format!("{url}/v1/processes/{id}/probe"))
            // The agent bounds one check to a few seconds (two addresses), and the way there.
            .timeout(Duration::from_secs(10))
            .json(probe);
        let resp = self.send(url, r).await?;
        resp.json().await.map_err(|e| AgentError::Unreachable {
            url: url.into(),
            message: format!("decoding the port check: {e}"),
        })
    }

    /// Writes `data` at byte `offset` of the process's stdin (then EOF when `close`); stdin's
    /// state after it (`bytes` less than the end: the process has not read the rest yet).
    pub async fn stdin(
        &self,
        url: &str,
        id: &str,
        offset: u64,
        data: axum::body::Bytes,
        close: bool,
        who: &StdinWriter,
    ) -> Result<StdinState, AgentError> {
        let mut query = vec![
            ("offset", offset.to_string()),
            ("close", close.to_string()),
            ("by", writer_label(&who.by)),
        ];
        // A writer of its own only on a shared terminal (see `StdinWriter`).
        if !who.id.is_empty() {
            query.push(("writer", who.id.clone()));
        }
        let r = self
            .http(url)?
            .post(format!("{url}/v1/processes/{id}/stdin"))
            .query(&query)
            .timeout(Duration::from_secs(10))
            .body(data);
        let resp = self.send(url, r).await?;
        resp.json().await.map_err(|e| AgentError::Unreachable {
            url: url.into(),
            message: format!("decoding the stdin state: {e}"),
        })
    }

    /// What the process's terminal shows now, and the log cursor after it.
    pub async fn screen(&self, url: &str, id: &str) -> Result<TerminalScreen, AgentError> {
        let r = self
            .http(url)?
            .get(format!("{url}/v1/processes/{id}/screen"))
            .timeout(Duration::from_secs(10));
        let resp = self.send(url, r).await?;
        resp.json().await.map_err(|e| AgentError::Unreachable {
            url: url.into(),
            message: format!("decoding the screen: {e}"),
        })
    }

    /// A new window size for the process's terminal; the size the agent set.
    pub async fn resize(
        &self,
        url: &str,
        id: &str,
        size: TerminalSize,
    ) -> Result<TerminalSize, AgentError> {
        let r = self
            .http(url)?
            .post(format!("{url}/v1/processes/{id}/resize"))
            .timeout(Duration::from_secs(10))
            .json(&size);
        let resp = self.send(url, r).await?;
        resp.json().await.map_err(|e| AgentError::Unreachable {
            url: url.into(),
            message: format!("decoding the terminal size: {e}"),
        })
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
            .http(url)?
            .get(format!("{url}/v1/processes/{id}/logs"))
            .query(query);
        self.send(url, r).await
    }

    /// Stops the process if it runs (waiting for it to end) and forgets it. Unknown ids succeed.
    pub async fn forget(&self, url: &str, id: &str, timeout: Duration) -> Result<(), AgentError> {
        let r = self
            .http(url)?
            .delete(format!("{url}/v1/processes/{id}"))
            .timeout(timeout);
        match self.send(url, r).await {
            Ok(_) => Ok(()),
            Err(e) if e.api_code() == Some(ErrorCode::ProcessNotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn watch(&self, url: &str) -> Result<reqwest::Response, AgentError> {
        // No overall timeout: the stream lasts as long as the connection.
        let r = self.http(url)?.get(format!("{url}/v1/watch"));
        self.send(url, r).await
    }
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
