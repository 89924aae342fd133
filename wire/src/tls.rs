//! The mutual-TLS server configuration both servers use: a certificate and key (PEM), and a
//! client certificate required on every connection, chained to a CA bundle (PEM).
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("{what}: {message}")]
    Pem { what: &'static str, message: String },
    #[error("client CA bundle: {0}")]
    ClientCa(String),
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// Serve `cert_pem`/`key_pem`; require a client certificate chained to `client_ca_pem` (with the
/// client-auth usage when it has usages). HTTP/2 and HTTP/1.1 by ALPN.
pub fn mutual_server_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca_pem: &str,
) -> Result<rustls::ServerConfig, TlsConfigError> {
    let pem = |what: &'static str| {
        move |e: rustls::pki_types::pem::Error| TlsConfigError::Pem {
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
        let c = c.map_err(|e| TlsConfigError::ClientCa(e.to_string()))?;
        roots
            .add(c)
            .map_err(|e| TlsConfigError::ClientCa(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(TlsConfigError::ClientCa(
            "no certificate in the bundle".into(),
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TlsConfigError::ClientCa(e.to_string()))?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}
