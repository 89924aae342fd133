//! The TLS accept loop: the configuration is taken per connection, so a renewed certificate or
//! bundle serves new connections while open ones (log follows, the operator's watch) keep theirs.
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

/// Connections at once; more are closed at accept.
const MAX_CONNECTIONS: usize = 8192;
/// A peer that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `router` until `shutdown` turns true, then lets open requests finish (their streams
/// end with the same signal) for up to `drain`.
pub async fn serve(
    listener: TcpListener,
    mut cfg: watch::Receiver<Option<Arc<rustls::ServerConfig>>>,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) -> std::io::Result<()> {
    // Nothing is accepted before there is a certificate and a bundle (connections wait in the
    // backlog; the readiness probe says not ready meanwhile).
    tokio::select! {
        r = cfg.wait_for(Option::is_some) => { if r.is_err() { return Ok(()); } }
        _ = shutdown.wait_for(|s| *s) => return Ok(()),
    }
    info!("TLS ready: serving the agent API");
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (tcp, remote) = tokio::select! {
            a = listener.accept() => match a {
                Ok(c) => c,
                Err(e) => {
                    warn!(error = %e, "accepting a connection; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.wait_for(|s| *s) => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!(%remote, "connection cap reached; closing");
            continue;
        };
        // Small writes (a log line, a stdin answer) go out at once, not after the peer's
        // delayed ACK (Nagle's algorithm), as axum::serve does for plain HTTP.
        let _ = tcp.set_nodelay(true);
        let Some(config) = cfg.borrow().clone() else {
            continue;
        };
        let acceptor = TlsAcceptor::from(config);
        let router = router.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => {
                    debug!(%remote, error = %e, "TLS handshake refused");
                    return;
                }
                Err(_) => return,
            };
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(tls), TowerToHyperService::new(router))
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                debug!(%remote, error = %e, "connection");
            }
            drop(slot);
        });
    }
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        warn!("connections still open after the drain period; stopping anyway");
    }
    Ok(())
}
