//! The agent API over mutual TLS. The agent's serving certificate names its node
//! (`<node>.agent.<namespace>.svc`) and comes from the operator's signer by a
//! CertificateSigningRequest made with the agent pod's own, pod-bound token ([`identity`]); the
//! operator verifies that name on every connection before it sends its token. Callers must
//! present a client certificate chained to the operator's CA bundle ([`bundle`], a ConfigMap the
//! operator's leader keeps): anything else, plain HTTP included, fails the handshake, before
//! any request (and any TokenReview) is made.
pub mod api;
pub mod bundle;
pub mod identity;
mod serve;

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

pub use serve::serve;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("API server: {0}")]
    Api(String),
    #[error("certificate request {name} refused: {reason}")]
    Refused { name: String, reason: String },
    #[error("{what}: {message}")]
    Pem { what: &'static str, message: String },
    #[error("client CA bundle: {0}")]
    ClientCa(String),
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    #[error("generating the key or request: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

/// Our certificate and key (PEM), and a client certificate required from every caller, chained
/// to `client_ca_pem` (a certificate without the client-auth usage, e.g. another agent's serving
/// one, is refused).
pub fn server_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca_pem: &str,
) -> Result<rustls::ServerConfig, TlsError> {
    let pem = |what: &'static str| {
        move |e: rustls::pki_types::pem::Error| TlsError::Pem {
            what,
            message: e.to_string(),
        }
    };
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem("serving certificate"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(pem("serving key"))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(client_ca_pem.as_bytes()) {
        let c = c.map_err(|e| TlsError::ClientCa(e.to_string()))?;
        roots
            .add(c)
            .map_err(|e| TlsError::ClientCa(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(TlsError::ClientCa("no certificate in the bundle".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TlsError::ClientCa(e.to_string()))?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}
