//! `wait_for_port`: a port check the caller asks for after the start (not declared in the spec).
//!
//! Each check is one `POST sandboxprocesses/NAME/probe` on the subresource API: the node's agent
//! dials the port once from inside the pod's network namespace (so a server bound to 127.0.0.1
//! in the pod counts, as for `readiness.tcpSocket`), and answers whether it took the connection
//! (or, for an HTTP check, answered with a status in the range). A client-side dial cannot see
//! the pod's loopback, and exec'ing a probe tool needs one in the image: hence the agent call.
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use crate::error::{Error, Result};
use crate::process::Process;
use crate::state::{exit_of, is_final};

/// How [`Process::wait_for_port`] checks the port.
#[derive(Clone, Debug)]
pub struct PortCheck {
    /// `Some(path)`: an HTTP GET of the path must answer with a status in `status`; `None`: a
    /// TCP connection must be accepted.
    pub http_path: Option<String>,
    /// Accepted HTTP statuses (inclusive; default 200–399).
    pub status: (u16, u16),
    /// Time between checks (default 500 ms).
    pub interval: Duration,
    /// Give up after this long (the process is not touched). `None`: wait for ever.
    pub timeout: Option<Duration>,
}

impl Default for PortCheck {
    fn default() -> Self {
        PortCheck {
            http_path: None,
            status: (200, 399),
            interval: Duration::from_millis(500),
            timeout: None,
        }
    }
}

/// The agent's answer to one check.
#[derive(Debug, Deserialize)]
struct ProbeResult {
    ready: bool,
    #[serde(default)]
    message: String,
}

impl PortCheck {
    fn body(&self, port: u16) -> Result<serde_json::Value> {
        if port == 0 {
            return Err(Error::invalid("port", "must be 1-65535"));
        }
        if self.interval < Duration::from_millis(10) {
            return Err(Error::invalid("interval", "must be at least 10ms"));
        }
        Ok(match &self.http_path {
            None => json!({"tcpSocket": {"port": port}}),
            Some(path) => {
                let (min, max) = self.status;
                if !(100..=599).contains(&min) || !(100..=599).contains(&max) || min > max {
                    return Err(Error::invalid(
                        "status",
                        format!("{min}-{max} is not a range within 100-599"),
                    ));
                }
                json!({"httpGet": {"port": port, "path": path,
                                   "status": {"min": min, "max": max}}})
            }
        })
    }
}

impl Process {
    /// Waits until `port` takes connections inside the process's pod (or answers HTTP, with
    /// [`PortCheck::http_path`]). The process ending first is [`Error::ExitedBeforeReady`];
    /// one that could not start is [`Error::Process`].
    pub async fn wait_for_port(&self, port: u16, check: PortCheck) -> Result<()> {
        let body = check.body(port)?;
        let begun = std::time::Instant::now();
        self.ensure_started("wait_for_port", check.timeout).await?;
        let fut = async {
            let ended = self.until(None, "end", is_final);
            tokio::pin!(ended);
            let mut last = String::new();
            loop {
                tokio::select! {
                    o = &mut ended => {
                        let o = o?;
                        return Err(match exit_of(&o) {
                            Err(e @ Error::Process { .. }) => e,
                            Ok(exit) => Error::ExitedBeforeReady {
                                name: self.name.clone(),
                                message: format!("it exited with code {} before port {port} was ready{}", exit.code,
                                    if last.is_empty() { String::new() } else { format!(" (last check: {last})") }),
                            },
                            Err(e) => e,
                        });
                    }
                    r = self.probe(&body) => match r {
                        Ok(p) if p.ready => return Ok(()),
                        Ok(p) => last = p.message,
                        // The process ended between two checks (the watch says how), or the
                        // agent could not check: shown with a timeout's error.
                        Err(e @ Error::Api { code: 409, .. }) => last = e.to_string(),
                        Err(e) if e.is_transient() => last = e.to_string(),
                        Err(e) => return Err(e),
                    },
                }
                tokio::select! {
                    o = &mut ended => {
                        let o = o?;
                        return Err(match exit_of(&o) {
                            Err(e @ Error::Process { .. }) => e,
                            _ => Error::ExitedBeforeReady {
                                name: self.name.clone(),
                                message: format!("it ended before port {port} was ready"),
                            },
                        });
                    }
                    _ = tokio::time::sleep(check.interval) => {}
                }
            }
        };
        self.within("listen on the port", check.timeout, begun, Box::pin(fut))
            .await
    }

    async fn probe(&self, body: &serde_json::Value) -> Result<ProbeResult> {
        let req = http::Request::post(self.url("probe"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(body).expect("json"))
            .map_err(|e| Error::invalid("name", e.to_string()))?;
        Ok(self.client.request(req).await?)
    }
}
