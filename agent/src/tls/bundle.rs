//! The CA bundle callers' client certificates must chain to: the `ca.crt` of a ConfigMap the
//! operator's leader keeps, watched (one watch per agent, not a poll: it reaches every agent
//! within moments of a CA rollover, well inside the operator's publish delay).
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use tracing::{info, warn};

use super::api::ApiClient;

/// What one watch line says about the ConfigMap: its bundle, when it has one.
pub fn bundle_of(line: &[u8]) -> Option<String> {
    let ev: serde_json::Value = serde_json::from_slice(line).ok()?;
    if !matches!(ev["type"].as_str(), Some("ADDED" | "MODIFIED")) {
        return None;
    }
    ev["object"]["data"]["ca.crt"]
        .as_str()
        .filter(|b| b.contains("BEGIN CERTIFICATE"))
        .map(str::to_string)
}

/// Keeps the bundle in `tx`, forever. A deleted ConfigMap keeps the last bundle (the CAs did
/// not stop being ours); a broken watch is re-made.
pub async fn keep(
    api: ApiClient,
    namespace: String,
    name: String,
    tx: watch::Sender<Option<String>>,
) {
    let url = format!(
        "{}/api/v1/namespaces/{namespace}/configmaps?fieldSelector=metadata.name%3D{name}&watch=true&timeoutSeconds=600",
        api.url
    );
    let mut said = false;
    loop {
        let resp = match api.token() {
            Ok(t) => api.http.get(&url).bearer_auth(t).send().await,
            Err(e) => {
                warn!(error = %e, "watching the client CA bundle");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
        };
        match resp {
            Ok(r) if r.status().is_success() => {
                let mut body = r.bytes_stream();
                let mut buf = Vec::new();
                while let Some(Ok(chunk)) = body.next().await {
                    buf.extend_from_slice(&chunk);
                    while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = buf.drain(..=i).collect();
                        if let Some(b) = bundle_of(&line) {
                            if tx.borrow().as_deref() != Some(b.as_str()) {
                                info!(configmap = %name, "client CA bundle loaded");
                                let _ = tx.send(Some(b));
                            }
                        }
                    }
                    // One ConfigMap: a line longer than this is not ours to hold.
                    if buf.len() > 4 << 20 {
                        break;
                    }
                }
            }
            Ok(r) if !said => {
                warn!(status = %r.status(), configmap = %name, "watching the client CA bundle; retrying");
                said = true;
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "watching the client CA bundle; retrying"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_lines_carry_the_bundle() {
        let pem = "-----BEGIN CERTIFICATE-----\\nA\\n-----END CERTIFICATE-----\\n";
        let line = |t: &str| {
            format!(r#"{{"type":"{t}","object":{{"data":{{"ca.crt":"{pem}"}}}}}}"#).into_bytes()
        };
        assert!(bundle_of(&line("ADDED")).unwrap().starts_with("-----BEGIN"));
        assert!(bundle_of(&line("MODIFIED")).is_some());
        assert_eq!(bundle_of(&line("DELETED")), None);
        assert_eq!(
            bundle_of(br#"{"type":"ADDED","object":{"data":{"ca.crt":""}}}"#),
            None
        );
        assert_eq!(bundle_of(b"not json"), None);
    }
}
