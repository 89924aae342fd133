//! How the agent reaches the API server (TokenReview, its certificate requests, the CA-bundle
//! watch): one `kube::Client`, authenticated with the pod's ServiceAccount token.
use std::time::Duration;

use rustls::pki_types::{pem::PemObject, CertificateDer};

use crate::error::AgentError;

const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

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

    /// A client trusting only `ca_file`. kube re-reads the token file and the CA file about once
    /// a minute (the kubelet rotates both). No overall timeout (watches last); each call sets its
    /// own, and no retries inside the client: each caller keeps its own policy.
    pub fn client(&self) -> Result<kube::Client, AgentError> {
        let bad = |what: &str, e: String| AgentError::Internal(format!("{what}: {e}"));
        let pem = std::fs::read(&self.ca_file)
            .map_err(|e| bad(&format!("reading API CA {}", self.ca_file), e.to_string()))?;
        let roots = CertificateDer::pem_slice_iter(&pem)
            .map(|c| c.map(|c| c.to_vec()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad("service account CA", e.to_string()))?;
        let url = self.url.parse().map_err(|e: http::uri::InvalidUri| {
            bad(&format!("API server {}", self.url), e.to_string())
        })?;
        let mut cfg = kube::Config::new(url);
        cfg.root_cert = Some(roots);
        cfg.root_cert_file = Some(self.ca_file.clone().into());
        cfg.auth_info.token_file = Some(self.token_file.clone());
        cfg.connect_timeout = Some(Duration::from_secs(5));
        cfg.default_retry = false;
        kube::Client::try_from(cfg).map_err(|e| bad("API client", e.to_string()))
    }
}
