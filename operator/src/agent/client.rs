//! The HTTP client of the agent API: start, get, list, stop/signal, logs, forget, watch, with the
//! operator's bearer token and typed errors.
use std::path::PathBuf;
use std::time::Duration;

use sandbox_api::validate::Valid;
use sandbox_api::wire::{
    ApiError, ErrorCode, LogQuery, ProcessRecord, SignalRequest, StartRequest,
};

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
    /// Only a request that passed `validate::start` is sent: the agent's door would refuse others.
    pub async fn start(
        &self,
        url: &str,
        req: &Valid<StartRequest>,
    ) -> Result<ProcessRecord, AgentError> {
        let r = self
            .http
            .post(format!("{url}/v1/processes"))
            .timeout(Duration::from_secs(60))
            .json(&**req);
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

    pub(super) async fn watch(&self, url: &str) -> Result<reqwest::Response, AgentError> {
        // No overall timeout: the stream lasts as long as the connection.
        let r = self.http.get(format!("{url}/v1/watch"));
        self.send(url, r).await
    }
}

pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
