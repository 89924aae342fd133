//! TLS for the extension API server: our serving certificate, and a client certificate required
//! on every connection, chained to the API server's request-header CA. Only the API server's
//! aggregation layer holds such a certificate, so nobody else can assert an identity to us.
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {message}")]
    Pem { path: String, message: String },
    #[error("request-header CA: {0}")]
    ClientCa(String),
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The common name of the peer's certificate, for the allowed-names check.
#[derive(Clone, Debug)]
pub struct Peer {
    pub common_name: Option<String>,
}

/// The TLS configuration for a serving certificate and key (PEM) and the request-header CA.
pub fn server_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca_pem: &str,
) -> Result<rustls::ServerConfig, TlsError> {
    let pem_err = |what: &str, e: rustls::pki_types::pem::Error| TlsError::Pem {
        path: what.to_string(),
        message: e.to_string(),
    };
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err("serving certificate", e))?;
    let key =
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| pem_err("serving key", e))?;
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

pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// Connections served at once; more are closed at accept (the API server's aggregator retries).
pub const MAX_CONNECTIONS: usize = 1024;
/// A client that has not finished its TLS handshake by then is dropped (idle sockets hold
/// nothing).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Request headers must arrive within this (HTTP/1; HTTP/2 keeps its own keep-alive).
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Accepts TLS connections forever, serving `router` on each with the peer's identity attached.
/// An accept error (descriptors exhausted, a reset in the backlog) is logged and waited out,
/// never the end of the server: the operator would exit with it.
/// The configuration is taken per connection from `cfg`, so a renewed certificate serves new
/// connections while open ones keep theirs.
pub async fn serve(
    listener: TcpListener,
    cfg: watch::Receiver<Arc<rustls::ServerConfig>>,
    router: Router,
) -> std::io::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (tcp, remote) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "accepting a subresource connection; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!(%remote, "connection cap reached; closing");
            continue; // dropping `tcp` closes it
        };
        let acceptor = TlsAcceptor::from(cfg.borrow().clone());
        let router = router.clone();
        tokio::spawn(async move {
            connection(acceptor, router, tcp, remote).await;
            drop(slot);
        });
    }
}

async fn connection(
    acceptor: TlsAcceptor,
    router: Router,
    tcp: tokio::net::TcpStream,
    remote: SocketAddr,
) {
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            debug!(%remote, error = %e, "TLS handshake");
            return;
        }
        Err(_) => {
            debug!(%remote, "TLS handshake timed out");
            return;
        }
    };
    let common_name = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| common_name(c));
    let svc = TowerToHyperService::new(router.layer(axum::Extension(Peer { common_name })));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    if let Err(e) = builder.serve_connection(TokioIo::new(tls), svc).await {
        debug!(%remote, error = %e, "connection");
    }
}
