//! Who may call the agent. The API can run anything as anyone inside any container on the node,
//! so it is node-root equivalent: every request needs a bearer token.
//!
//! - `TokenReview`: a projected ServiceAccount token with a dedicated audience, checked by the
//!   API server (TokenReview) and pinned to one ServiceAccount (the operator's). Tokens of other
//!   audiences (e.g. a pod's default API token) are refused, so a stolen in-cluster token of
//!   another workload does not work here. Positive results are cached briefly by token hash.
//! - `Static`: one shared secret from a file, for tests and clusterless use.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::error::AgentError;

const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const CACHE_TTL: Duration = Duration::from_secs(60);

pub enum Auth {
    Static { token: String },
    TokenReview(TokenReviewer),
}

pub struct TokenReviewer {
    pub audience: String,
    /// `system:serviceaccount:<namespace>:<name>`
    pub allowed_user: String,
    api: String,
    /// Credentials for the TokenReview call itself (re-read: kubelet rotates projected tokens).
    own_token: String,
    client: reqwest::Client,
    cache: Mutex<HashMap<[u8; 32], Instant>>,
}

/// Where the API server is and how the agent authenticates to it.
pub struct ApiAccess {
    pub url: String,
    pub ca_file: String,
    pub token_file: String,
}

impl ApiAccess {
    /// The pod's own: the `kubernetes` Service and the mounted ServiceAccount.
    pub fn in_cluster() -> Result<Self, AgentError> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| {
            AgentError::Internal(
                "KUBERNETES_SERVICE_HOST not set: not running in a pod (see --api-server)".into(),
            )
        })?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        Ok(ApiAccess {
            url: format!("https://{host}:{port}"),
            ca_file: format!("{SA_DIR}/ca.crt"),
            token_file: format!("{SA_DIR}/token"),
        })
    }
}

impl TokenReviewer {
    pub fn new(
        access: ApiAccess,
        audience: String,
        allowed_user: String,
    ) -> Result<Self, AgentError> {
        if !allowed_user.starts_with("system:serviceaccount:")
            || allowed_user.split(':').count() != 4
        {
            return Err(AgentError::InvalidRequest(format!(
                "--allowed-user {allowed_user:?}: must be system:serviceaccount:<namespace>:<name>"
            )));
        }
        let ca = std::fs::read(&access.ca_file)
            .map_err(AgentError::io(format!("reading API CA {}", access.ca_file)))?;
        let ca = reqwest::Certificate::from_pem(&ca)
            .map_err(|e| AgentError::Internal(format!("service account CA: {e}")))?;
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| AgentError::Internal(e.to_string()))?;
        Ok(TokenReviewer {
            audience,
            allowed_user,
            api: access.url,
            own_token: access.token_file,
            client,
            cache: Mutex::new(HashMap::new()),
        })
    }

    async fn review(&self, token: &str) -> Result<(), AgentError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(t) = self.cache.lock().unwrap().get(&key) {
            if t.elapsed() < CACHE_TTL {
                return Ok(());
            }
        }
        // The agent's own token (rotated by kubelet) authorizes the TokenReview call.
        let own = std::fs::read_to_string(&self.own_token)
            .map_err(AgentError::io("reading own token"))?;
        let body = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [self.audience]},
        });
        let resp = self
            .client
            .post(format!(
                "{}/apis/authentication.k8s.io/v1/tokenreviews",
                self.api
            ))
            .bearer_auth(own.trim())
            .json(&body)
            .send()
            .await
            .map_err(|e| AgentError::OperationInterrupted(format!("TokenReview: {e}")))?;
        if !resp.status().is_success() {
            return Err(AgentError::OperationInterrupted(format!(
                "TokenReview: HTTP {}",
                resp.status()
            )));
        }
        let review: serde_json::Value = resp
            .json()
            .await
            .map_err(|e| AgentError::OperationInterrupted(format!("TokenReview: {e}")))?;
        let st = &review["status"];
        if st["authenticated"].as_bool() != Some(true) {
            return Err(AgentError::Unauthorized(format!(
                "token not authenticated for audience {}: {}",
                self.audience,
                st["error"].as_str().unwrap_or("")
            )));
        }
        let user = st["user"]["username"].as_str().unwrap_or("");
        if user != self.allowed_user {
            return Err(AgentError::Unauthorized(format!(
                "{user} is not {}",
                self.allowed_user
            )));
        }
        let auds: Vec<&str> = st["audiences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str())
            .collect();
        if !auds.contains(&self.audience.as_str()) {
            return Err(AgentError::Unauthorized(format!(
                "token audiences {auds:?} lack {}",
                self.audience
            )));
        }
        let mut cache = self.cache.lock().unwrap();
        cache.retain(|_, t| t.elapsed() < CACHE_TTL);
        cache.insert(key, Instant::now());
        Ok(())
    }
}

impl Auth {
    pub async fn check(&self, authorization: Option<&str>) -> Result<(), AgentError> {
        let token = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| AgentError::Unauthorized("missing bearer token".into()))?;
        match self {
            Auth::Static { token: want } => {
                // Compare digests so timing does not leak the secret's prefix.
                let (a, b) = (
                    Sha256::digest(token.as_bytes()),
                    Sha256::digest(want.as_bytes()),
                );
                if a == b {
                    Ok(())
                } else {
                    Err(AgentError::Unauthorized("wrong token".into()))
                }
            }
            Auth::TokenReview(r) => r.review(token).await,
        }
    }
}
