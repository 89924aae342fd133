//! Every replica's TLS towards the agents: which CAs it trusts for agent certificates (the
//! bundle in the serving Secret's `ca.crt`, the previous CA included during a rollover) and its
//! own client certificate, issued in memory from the CA (never stored) and renewed at 2/3 of
//! its validity. Re-read while it runs; a change rebuilds the client for new connections.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tracing::{info, warn};

use super::AgentClient;
use crate::pki::authority::{self, KeyCert};
use crate::pki::{agent_bundle, key_cert, overlap, split_pem, text};

/// How often the two Secrets are read.
const POLL: Duration = Duration::from_secs(5);

/// Where the material is.
#[derive(Clone, Debug)]
pub struct Trust {
    pub namespace: String,
    pub ca_secret: String,
    pub serving_secret: String,
    /// `external` mode: the agents' bundle ConfigMap, whose CAs (every CA seen until it expires)
    /// are trusted too, and which a new CA must have settled in before our client certificate
    /// moves to it (cert-manager moves the serving certificate only at its own renewal).
    pub external_bundle: Option<String>,
    /// Our client certificate's common name.
    pub identity: String,
    pub validity: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Material {
    bundle: String,
    client: KeyCert,
}

/// Keeps `agents` supplied, forever.
pub async fn keep(client: Client, t: Trust, agents: AgentClient) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &t.namespace);
    let cms: Api<ConfigMap> = Api::namespaced(client, &t.namespace);
    let mut current: Option<Material> = None;
    let mut said = false;
    loop {
        match next(&secrets, &cms, &t, current.as_ref()).await {
            Ok(Some(m)) => match client_config(&m.bundle, &m.client)
                .and_then(|cfg| agents.set_tls(cfg))
            {
                Ok(()) => {
                    info!(
                        client_expires = authority::not_after(&m.client.cert),
                        "agent TLS: trust bundle or client certificate loaded"
                    );
                    current = Some(m);
                }
                Err(e) => warn!(error = %e, "agent TLS material not usable; keeping the current"),
            },
            Ok(None) => {}
            Err(e) if current.is_none() && !said => {
                info!(reason = %e, "agent TLS not ready yet; agents are unreachable until it is");
                said = true;
            }
            Err(e) => warn!(error = %e, "re-reading the agent TLS material; keeping the current"),
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn next(
    secrets: &Api<Secret>,
    cms: &Api<ConfigMap>,
    t: &Trust,
    current: Option<&Material>,
) -> anyhow::Result<Option<Material>> {
    let get = |name: String| async move {
        secrets
            .get_opt(&name)
            .await?
            .ok_or_else(|| anyhow::anyhow!("Secret {name} does not exist (yet)"))
    };
    let serving = get(t.serving_secret.clone()).await?;
    let bundle = text(&serving, "ca.crt")
        .filter(|b| b.contains("BEGIN CERTIFICATE"))
        .ok_or_else(|| anyhow::anyhow!("Secret {} has no ca.crt (yet)", t.serving_secret))?;
    let ca_secret = get(t.ca_secret.clone()).await?;
    let ca = key_cert(&ca_secret, "tls.crt", "tls.key")
        .ok_or_else(|| anyhow::anyhow!("Secret {} has no tls.crt/tls.key (yet)", t.ca_secret))?;
    let serving_leaf = text(&serving, "tls.crt").unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let (bundle, settled) = match &t.external_bundle {
        None => (bundle, false),
        Some(name) => {
            let (published, at) = agent_bundle(cms.get_opt(name).await?.as_ref());
            let all = overlap::union(&split_pem(&bundle), &published, now).concat();
            (all, overlap::settled(&published, at, &ca.cert, now))
        }
    };
    let client = match current.map(|c| &c.client) {
        Some(c) if keep_client(&c.cert, &ca.cert, &serving_leaf, &bundle, settled, now) => {
            c.clone()
        }
        _ => authority::issue_client(&ca, &t.identity, t.validity, now)?,
    };
    let next = Material { bundle, client };
    Ok((current != Some(&next)).then_some(next))
}

/// Pure: whether our client certificate stays. It moves to a new CA only once the serving
/// certificate has (the leader's sign that the new bundle has had time to reach the agents) or,
/// in external mode, once the CA has `settled` in the agents' bundle.
fn keep_client(
    client: &str,
    ca: &str,
    serving_leaf: &str,
    bundle: &str,
    settled: bool,
    now: i64,
) -> bool {
    let trusted = split_pem(bundle)
        .iter()
        .any(|c| authority::issued_by(client, c));
    if !trusted || authority::due(client, now) {
        return false;
    }
    authority::issued_by(client, ca) || !(settled || authority::issued_by(serving_leaf, ca))
}

/// Trust exactly `bundle` for agent certificates; present `client`.
pub fn client_config(bundle: &str, client: &KeyCert) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        roots.add(c?)?;
    }
    let chain =
        CertificateDer::pem_slice_iter(client.cert.as_bytes()).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(client.key.as_bytes())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn the_client_certificate_follows_the_serving_certificate_to_a_new_ca() {
        let t0 = 1_000_000;
        let ca0 = authority::new_ca("ca", 60 * MIN, t0).unwrap();
        let ca1 = authority::new_ca("ca", 60 * MIN, t0).unwrap();
        let leaf0 = authority::issue(&ca0, &["s".into()], 10 * MIN, t0)
            .unwrap()
            .cert;
        let leaf1 = authority::issue(&ca1, &["s".into()], 10 * MIN, t0)
            .unwrap()
            .cert;
        let c0 = authority::issue_client(&ca0, "op", 9 * MIN, t0)
            .unwrap()
            .cert;
        let both = format!("{}{}", ca1.cert, ca0.cert);
        assert!(keep_client(
            &c0,
            &ca0.cert,
            &leaf0,
            &ca0.cert,
            false,
            t0 + 60
        ));
        // A new CA, the serving certificate still on the old one: stay.
        assert!(keep_client(&c0, &ca1.cert, &leaf0, &both, false, t0 + 60));
        // External mode: the new CA settled in the agents' bundle: move, the serving
        // certificate may stay on the old CA for weeks.
        assert!(!keep_client(&c0, &ca1.cert, &leaf0, &both, true, t0 + 60));
        // The serving certificate moved: move too.
        assert!(!keep_client(&c0, &ca1.cert, &leaf1, &both, false, t0 + 60));
        // Due (2/3 of 10 minutes from t0-60), or its CA no longer trusted: renew.
        assert!(!keep_client(
            &c0,
            &ca0.cert,
            &leaf0,
            &ca0.cert,
            false,
            t0 + 400
        ));
        assert!(!keep_client(
            &c0,
            &ca1.cert,
            &leaf0,
            &ca1.cert,
            false,
            t0 + 60
        ));
        let cfg = client_config(
            &both,
            &authority::issue_client(&ca1, "op", 9 * MIN, t0).unwrap(),
        );
        assert!(cfg.is_ok(), "{:?}", cfg.err());
    }

    /// A TLS server on 127.0.0.1 with a certificate for `dns` from `ca`, requiring a client
    /// certificate from `ca`. It answers one request with an empty process list and reports
    /// every byte it decrypted (nothing, when the handshake fails).
    async fn agent_at(ca: &KeyCert, dns: &str) -> (u16, tokio::sync::oneshot::Receiver<Vec<u8>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let leaf = authority::issue(ca, &[dns.to_string()], 10 * MIN, now).unwrap();
        let cfg = sandbox_api::tls::mutual_server_config(&leaf.cert, &leaf.key, &ca.cert).unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            if let Ok(mut tls) = acceptor.accept(tcp).await {
                let mut buf = [0u8; 4096];
                if let Ok(n) = tls.read(&mut buf).await {
                    got.extend_from_slice(&buf[..n]);
                }
                let body = br#"{"items":[]}"#;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(head.as_bytes()).await;
                let _ = tls.write_all(body).await;
                let _ = tls.flush().await;
            }
            let _ = tx.send(got);
        });
        (port, rx)
    }

    /// The token goes only to the agent whose certificate names the node asked for.
    #[tokio::test]
    async fn the_token_goes_only_to_the_nodes_agent() {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let ca = authority::new_ca("ca", 60 * MIN, now).unwrap();
        let token = std::env::temp_dir().join(format!("spo-trust-test-{}", std::process::id()));
        std::fs::write(&token, "the-operator-token").unwrap();
        let agents = AgentClient::tls(token.clone(), "ns".into());
        // Nothing loaded yet: refused without a connection.
        assert!(agents
            .list(&agents.url_for("n1", "127.0.0.1", 1))
            .await
            .is_err());
        let mine = authority::issue_client(&ca, "op", 10 * MIN, now).unwrap();
        agents
            .set_tls(client_config(&ca.cert, &mine).unwrap())
            .unwrap();

        // Another node's agent (a valid certificate of ours, the wrong name): no request.
        let (port, got) = agent_at(&ca, "n2.agent.ns.svc").await;
        let e = agents
            .list(&agents.url_for("n1", "127.0.0.1", port))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("unreachable"), "{e}");
        assert!(
            got.await.unwrap().is_empty(),
            "bytes reached the wrong agent"
        );

        // A certificate from another CA for the right name: no request either.
        let other = authority::new_ca("ca", 60 * MIN, now).unwrap();
        let (port, got) = agent_at(&other, "n1.agent.ns.svc").await;
        assert!(agents
            .list(&agents.url_for("n1", "127.0.0.1", port))
            .await
            .is_err());
        assert!(got.await.unwrap().is_empty());

        // The node's agent: the request, with the token.
        let (port, got) = agent_at(&ca, "n1.agent.ns.svc").await;
        let items = agents
            .list(&agents.url_for("n1", "127.0.0.1", port))
            .await
            .unwrap();
        assert!(items.is_empty());
        let req = String::from_utf8(got.await.unwrap()).unwrap();
        assert!(req.contains("Bearer the-operator-token"), "{req}");
        let _ = std::fs::remove_file(token);
    }
}
