//! The node agent and the operator e2e/suites/operator runs on this host instead of the chart's
//! release: their endpoints (from the suite's environment) and the suite's hooks that restart
//! them (e2e/suites/lib/operator-hooks.sh), for the tests of tests/operator*.rs.
use std::time::Duration;

use anyhow::{Context, Result};

use crate::{cmd, env, metrics};

/// The host-run agent's API and the operator's metrics endpoint.
pub struct Host {
    agent_url: String,
    token: String,
    metrics_url: String,
    http: reqwest::Client,
}

impl Host {
    /// From what e2e/suites/operator exports (SPO_AGENT_URL, SPO_AGENT_TOKEN_FILE,
    /// SPO_OPERATOR_METRICS_URL).
    pub fn from_env() -> Result<Host> {
        let token_file = env("SPO_AGENT_TOKEN_FILE");
        let token = std::fs::read_to_string(&token_file)
            .with_context(|| format!("reading the agent token {token_file}"))?;
        Ok(Host {
            agent_url: env("SPO_AGENT_URL"),
            token: token.trim().to_string(),
            metrics_url: env("SPO_OPERATOR_METRICS_URL"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()?,
        })
    }

    /// The HTTP status of the agent's record of the process with this exec id (the object's
    /// UID): 404 once the agent forgot it.
    pub async fn agent_process_status(&self, uid: &str) -> Result<u16> {
        let url = format!("{}/v1/processes/{uid}", self.agent_url);
        let r = self
            .http
            .get(&url)
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        Ok(r.status().as_u16())
    }

    /// The operator's metrics, as text.
    pub async fn metrics(&self) -> Result<String> {
        let url = format!("{}/metrics", self.metrics_url);
        let r = self.http.get(&url).send().await?.error_for_status()?;
        r.text().await.with_context(|| format!("GET {url}"))
    }

    /// One sample of the operator's metrics (0 when it has none yet).
    pub async fn metric(&self, sample: &str) -> Result<f64> {
        Ok(metrics::value(&self.metrics().await?, sample).unwrap_or(0.0))
    }
}

/// `e2e/suites/lib/operator-hooks.sh ARGS` (start-operator, restart-operator, ...); must succeed.
pub async fn hook(args: &[&str]) -> Result<String> {
    let script = crate::repo_root().join("e2e/suites/lib/operator-hooks.sh");
    cmd::ok(script.to_str().context("repository path")?, args).await
}
