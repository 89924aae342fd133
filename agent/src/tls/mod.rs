//! The agent API over mutual TLS. The agent's serving certificate names its node
//! (`<node>.agent.<namespace>.svc`) and comes from the operator's signer by a
//! CertificateSigningRequest made with the agent pod's own, pod-bound token ([`identity`]); the
//! operator verifies that name on every connection before it sends its token. Callers must
//! present a client certificate chained to the operator's CA bundle ([`bundle`], a ConfigMap the
//! operator's leader keeps): anything else, plain HTTP included, fails the handshake, before
//! any request (and any TokenReview) is made.
pub mod bundle;
pub mod identity;
mod serve;

pub use serve::serve;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("API server: {0}")]
    Api(String),
    #[error("certificate request {name} refused: {reason}")]
    Refused { name: String, reason: String },
    #[error(transparent)]
    Config(#[from] sandbox_wire::tls::TlsConfigError),
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
    Ok(sandbox_wire::tls::mutual_server_config(
        cert_pem,
        key_pem,
        client_ca_pem,
    )?)
}
