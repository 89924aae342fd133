//! The agent's own calls to the API server (certificate requests, the bundle ConfigMap), with
//! the pod's ServiceAccount token, re-read per call (the kubelet rotates it).
use std::time::Duration;

use super::TlsError;
use crate::auth::ApiAccess;

#[derive(Clone)]
pub struct ApiClient {
    pub url: String,
    token_file: String,
    pub http: reqwest::Client,
}

impl ApiClient {
    /// No overall timeout (watches last); each call sets its own.
    pub fn new(access: &ApiAccess) -> Result<ApiClient, TlsError> {
        let ca = std::fs::read(&access.ca_file)
            .map_err(|e| TlsError::Io(format!("reading API CA {}", access.ca_file), e))?;
        let ca = reqwest::Certificate::from_pem(&ca)
            .map_err(|e| TlsError::Api(format!("service account CA: {e}")))?;
        let http = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| TlsError::Api(e.to_string()))?;
        Ok(ApiClient {
            url: access.url.clone(),
            token_file: access.token_file.clone(),
            http,
        })
    }

    pub fn token(&self) -> Result<String, TlsError> {
        std::fs::read_to_string(&self.token_file)
            .map(|t| t.trim().to_string())
            .map_err(|e| TlsError::Io(format!("reading {}", self.token_file), e))
    }

    /// A JSON answer, or the API server's message with the status.
    pub async fn json(&self, req: reqwest::RequestBuilder) -> Result<serde_json::Value, TlsError> {
        let resp = req
            .bearer_auth(self.token()?)
            .send()
            .await
            .map_err(|e| TlsError::Api(e.to_string()))?;
        let status = resp.status();
        let body: serde_json::Value = resp
            .json()
            .await
            .map_err(|e| TlsError::Api(format!("HTTP {status}: {e}")))?;
        if !status.is_success() {
            return Err(TlsError::Api(format!(
                "HTTP {status}: {}",
                body["message"].as_str().unwrap_or("")
            )));
        }
        Ok(body)
    }
}
