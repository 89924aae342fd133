//! Every replica's view of its serving certificate and of the API server's request-header CA,
//! re-read while it runs: a changed one becomes a new TLS configuration for new connections
//! (rustls takes the configuration per handshake; open connections keep theirs).
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::aggregated::subresources::frontproxy::{self, RequestHeaderConfig};
use crate::aggregated::subresources::tls;

/// How often the Secret and the ConfigMap are read (two GETs per replica).
pub const POLL: Duration = Duration::from_secs(5);

/// What the TLS server serves with.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Inputs {
    cert: String,
    key: String,
    headers: RequestHeaderConfig,
}

/// Waits for the first complete configuration, then keeps it current in the background.
/// Returns the TLS configuration and the request-header settings, each as a watch.
/// `served` is told each certificate when it starts being served.
pub async fn serving(
    client: Client,
    namespace: String,
    secret: String,
    served: impl Fn(&str) + Send + 'static,
) -> (
    watch::Receiver<Arc<rustls::ServerConfig>>,
    watch::Receiver<RequestHeaderConfig>,
) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let cms = Api::<ConfigMap>::namespaced(client, frontproxy::CONFIGMAP_NAMESPACE);
    let mut delay = Duration::from_secs(1);
    let (inputs, cfg) = loop {
        match read(&secrets, &secret, &cms).await {
            Ok(i) => match build(&i) {
                Ok(cfg) => break (i, cfg),
                Err(e) => warn!(error = %e, "subresource API not serving yet"),
            },
            Err(e) => warn!(error = %e, "subresource API not serving yet"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
    };
    served(&inputs.cert);
    let (cfg_tx, cfg_rx) = watch::channel(Arc::new(cfg));
    let (hdr_tx, hdr_rx) = watch::channel(inputs.headers.clone());
    tokio::spawn(async move {
        let mut current = inputs;
        loop {
            tokio::time::sleep(POLL).await;
            let next = match read(&secrets, &secret, &cms).await {
                Ok(n) if n != current => n,
                Ok(_) => continue,
                Err(e) => {
                    warn!(error = %e, "re-reading the serving certificate; keeping the current one");
                    continue;
                }
            };
            match build(&next) {
                Ok(cfg) => {
                    info!(
                        "serving certificate or request-header CA changed; new connections use it"
                    );
                    let _ = cfg_tx.send(Arc::new(cfg));
                    let _ = hdr_tx.send(next.headers.clone());
                    served(&next.cert);
                    current = next;
                }
                Err(e) => {
                    warn!(error = %e, "changed certificate not usable; keeping the current one")
                }
            }
        }
    });
    (cfg_rx, hdr_rx)
}

async fn read(secrets: &Api<Secret>, name: &str, cms: &Api<ConfigMap>) -> anyhow::Result<Inputs> {
    let s = secrets
        .get_opt(name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("Secret {name} does not exist (yet)"))?;
    let field = |k: &str| {
        crate::pki::text(&s, k).ok_or_else(|| anyhow::anyhow!("Secret {name} has no {k} (yet)"))
    };
    let (cert, key) = (field("tls.crt")?, field("tls.key")?);
    let cm = cms.get(frontproxy::CONFIGMAP_NAME).await?;
    let headers = RequestHeaderConfig::from_configmap(&cm)?;
    Ok(Inputs { cert, key, headers })
}

fn build(i: &Inputs) -> Result<rustls::ServerConfig, tls::TlsError> {
    tls::server_config(&i.cert, &i.key, &i.headers.client_ca_pem)
}
