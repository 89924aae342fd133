//! The CA bundle callers' client certificates must chain to: the `ca.crt` of a ConfigMap the
//! operator's leader keeps, watched (one watch per agent, not a poll: it reaches every agent
//! within moments of a CA rollover, well inside the operator's publish delay).
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use tokio::sync::watch;
use tracing::{info, warn};

/// The ConfigMap's bundle, when it has one.
pub fn bundle_of(cm: &ConfigMap) -> Option<String> {
    cm.data
        .as_ref()?
        .get("ca.crt")
        .filter(|b| b.contains("BEGIN CERTIFICATE"))
        .cloned()
}

/// Keeps the bundle in `tx`, forever. A deleted ConfigMap keeps the last bundle (the CAs did
/// not stop being ours). The watcher resumes from the last resourceVersion it saw, re-lists
/// when that is too old, and backs off while the API server refuses or is away.
pub async fn keep(configmaps: Api<ConfigMap>, name: String, tx: watch::Sender<Option<String>>) {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut changes = watcher(configmaps, cfg)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(cm) = changes.next().await {
        match cm {
            Ok(cm) => {
                if let Some(b) = bundle_of(&cm) {
                    if tx.borrow().as_deref() != Some(b.as_str()) {
                        info!(configmap = %name, "client CA bundle loaded");
                        let _ = tx.send(Some(b));
                    }
                }
            }
            Err(e) => {
                warn!(error = %e, configmap = %name, "watching the client CA bundle; retrying")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_is_the_ca_crt_key_when_it_holds_certificates() {
        let pem = "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n";
        let cm = |key: &str, value: &str| ConfigMap {
            data: Some([(key.to_string(), value.to_string())].into()),
            ..Default::default()
        };
        assert_eq!(bundle_of(&cm("ca.crt", pem)).as_deref(), Some(pem));
        assert_eq!(bundle_of(&cm("ca.crt", "")), None);
        assert_eq!(bundle_of(&cm("other", pem)), None);
        assert_eq!(bundle_of(&ConfigMap::default()), None);
    }
}
