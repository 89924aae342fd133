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
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

/// A serving certificate, key or request-header CA that does not make a TLS configuration.
pub type TlsError = sandbox_api::tls::TlsConfigError;

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
    sandbox_api::tls::mutual_server_config(cert_pem, key_pem, client_ca_pem)
}

/// The same serving certificate (and its renewals: the resolver is shared) without asking for a
/// client certificate: the API server calls admission webhooks without one.
pub fn without_client_auth(
    mutual: &rustls::ServerConfig,
) -> Result<rustls::ServerConfig, TlsError> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(mutual.crypto_provider().clone())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(mutual.cert_resolver.clone());
    cfg.alpn_protocols = mutual.alpn_protocols.clone();
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
/// HTTP/2 pings: how often on a quiet connection, and how long an answer may take.
const H2_PING: Duration = Duration::from_secs(10);
const H2_PING_ANSWER: Duration = Duration::from_secs(20);

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
        // Small writes (a followed log line) go out at once, not after the API server's delayed
        // ACK (Nagle's algorithm).
        let _ = tcp.set_nodelay(true);
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
    // An HTTP/2 connection (the API server's) that answers no ping is closed with its streams:
    // log relays into a silently dead connection end instead of waiting for TCP to give up.
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Some(H2_PING))
        .keep_alive_timeout(H2_PING_ANSWER);
    // With upgrades: `attach` becomes a WebSocket (over HTTP/1.1, as the API server proxies it).
    if let Err(e) = builder
        .serve_connection_with_upgrades(TokioIo::new(tls), svc)
        .await
    {
        debug!(%remote, error = %e, "connection");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::authority;
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, Issuer, KeyPair};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A client certificate from `ca`, as the API server's front proxy holds one.
    fn client_cert(
        ca: &authority::KeyCert,
    ) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let issuer =
            Issuer::from_ca_cert_pem(&ca.cert, KeyPair::from_pem(&ca.key).unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "front-proxy-client");
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = p.signed_by(&key, &issuer).unwrap();
        (
            vec![cert.der().clone()],
            PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
        )
    }

    async fn get(tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> String {
        tls.write_all(b"GET /x HTTP/1.1\r\nHost: api\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tls.read(&mut buf).await.unwrap();
        String::from_utf8_lossy(&buf[..n]).to_string()
    }

    fn peer(tls: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> Vec<u8> {
        tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
    }

    /// A renewed certificate serves new connections; an open connection keeps working on the
    /// one it was made with (what a `kubectl sandbox logs -f` relies on).
    #[tokio::test]
    async fn new_connections_get_the_new_certificate_open_ones_keep_theirs() {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let ca = authority::new_ca("serving-ca", Duration::from_secs(3600), now).unwrap();
        let proxy_ca = authority::new_ca("front-proxy-ca", Duration::from_secs(3600), now).unwrap();
        let names = vec!["api.ns.svc".to_string()];
        let (a, b) = (
            authority::issue(&ca, &names, Duration::from_secs(600), now).unwrap(),
            authority::issue(&ca, &names, Duration::from_secs(600), now).unwrap(),
        );
        let (tx, rx) = watch::channel(Arc::new(
            server_config(&a.cert, &a.key, &proxy_ca.cert).unwrap(),
        ));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/x", axum::routing::get(|| async { "ok" }));
        tokio::spawn(serve(listener, rx, router));

        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.cert.as_bytes()).unwrap())
            .unwrap();
        let (chain, key) = client_cert(&proxy_ca);
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let connect = || async {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let name = ServerName::try_from("api.ns.svc").unwrap();
            connector.connect(name, tcp).await.unwrap()
        };
        let der = |pem: &str| {
            CertificateDer::from_pem_slice(pem.as_bytes())
                .unwrap()
                .to_vec()
        };

        let mut open = connect().await;
        assert!(get(&mut open).await.contains("200 OK"));
        assert_eq!(peer(&open), der(&a.cert));

        tx.send(Arc::new(
            server_config(&b.cert, &b.key, &proxy_ca.cert).unwrap(),
        ))
        .unwrap();
        let fresh = connect().await;
        assert_eq!(
            peer(&fresh),
            der(&b.cert),
            "a new connection gets the new certificate"
        );
        assert!(
            get(&mut open).await.contains("200 OK"),
            "the open connection still serves"
        );
        assert_eq!(peer(&open), der(&a.cert));
    }
}
