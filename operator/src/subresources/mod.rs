//! An extension API server (Kubernetes API aggregation) for what a CRD cannot serve: the output
//! of a SandboxProcess and one-off signals, as subresources in their own group:
//!
//! - `GET  /apis/subresources.sandbox.dev/v1alpha1/namespaces/NS/sandboxprocesses/NAME/log`
//!   `?follow=true&since=CURSOR&stream=stdout|stderr|both&maxBytes=N` → NDJSON `LogEvent`s
//! - `POST /apis/subresources.sandbox.dev/v1alpha1/namespaces/NS/sandboxprocesses/NAME/signal`
//!   `{"signal": N}` → the agent's `ProcessRecord`
//! - `POST …/sandboxprocesses/NAME/stdin?offset=N&close=true|false`, the bytes as the body
//!   (≤ 1 MiB) → `{"bytes": B, "closed": C}`: stdin took everything before byte B (less than
//!   N + the body's length when the process has not read the rest yet: send it again from B);
//!   a write not at B is refused (409 `StdinOffsetMismatch`), one over taken bytes that differ
//!   from them (409 `StdinConflict`: another writer). `GET …/stdin` → the same state,
//!   where a writer that lost its place resumes. Authorized like `signal`.
//! - `POST …/sandboxprocesses/NAME/resize` `{"rows": R, "cols": C}` → the same: a new window
//!   size for the terminal of a `spec.tty` process (the kernel tells it: SIGWINCH). Authorized
//!   like `stdin`, whose input it shapes.
//! - `POST …/sandboxprocesses/NAME/probe` `{"tcpSocket": {"port": N}}` or `{"httpGet": {...}}`
//!   → `{"ready": R, "message": M}`: one port check from inside the pod's network namespace
//!   (clients' `waitForPort`). Needs `get` on the object and `create pods/exec` on its pod.
//!
//! - `POST /mutate/sandboxprocesses`, on its own port ([`run_webhook`]): the mutating admission
//!   webhook that rewrites a quantity written as a number (`cpu: 1.5`) as its text ([`mutate`]).
//!
//! Users reach it only through the API server (`kubectl get --raw`, `kubectl sandbox logs`), which
//! authenticates them and checks RBAC on `sandboxprocesses/log` (verb `get`) or
//! `sandboxprocesses/signal` (`create`) in `subresources.sandbox.dev`. We then check, with a
//! SubjectAccessReview for the same user, `get` (log) or `update` (signal) on the SandboxProcess
//! itself: whoever cannot read the object cannot read its output; a signal also needs `create
//! pods/exec` on the process's pod, like `stop` (the admission policy) and `kubectl exec`. The agent API stays private
//! to the operator. Why this transport: docs/logs.md.
//!
//! One job per file: the answers to errors ([`error`]), API discovery ([`discovery`]), who calls
//! and what they may do ([`authorization`]), where the process and its agent are ([`locate`]),
//! and one handler per subresource ([`log`], [`signal`], [`stdin`], [`resize`], [`probe`]).
mod attach;
mod authorization;
mod discovery;
mod error;
pub mod frontproxy;
mod locate;
mod log;
pub mod mutate;
mod probe;
pub mod relay;
mod resize;
mod server;
mod signal;
mod stdin;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use sandbox_api::wire::MAX_STDIN_WRITE;
use tracing::info;

pub use discovery::{API_GROUP, API_VERSION};
pub use error::SubresourceError;
pub use server::Server;

pub async fn run(
    server: Server,
    addr: SocketAddr,
    tls: tokio::sync::watch::Receiver<Arc<rustls::ServerConfig>>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    info!(%addr, group = API_GROUP, "serving the subresource API");
    tls::serve(listener, tls, router(Arc::new(server))).await?;
    Ok(())
}

/// The webhook's listener. The API server calls admission webhooks without a client
/// certificate, so it gets its own port: the same serving certificate, no client auth, and the
/// mutate route only (the subresource routes stay behind the front proxy's mutual TLS).
pub async fn run_webhook(
    addr: SocketAddr,
    mut mutual: tokio::sync::watch::Receiver<Arc<rustls::ServerConfig>>,
) -> anyhow::Result<()> {
    let first = tls::without_client_auth(&mutual.borrow_and_update())?;
    let (tx, rx) = tokio::sync::watch::channel(Arc::new(first));
    tokio::spawn(async move {
        while mutual.changed().await.is_ok() {
            let next = tls::without_client_auth(&mutual.borrow_and_update());
            match next {
                Ok(cfg) => drop(tx.send(Arc::new(cfg))),
                Err(e) => tracing::warn!(error = %e, "webhook TLS configuration"),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    info!(%addr, path = mutate::PATH, "serving the quantity webhook");
    let router = Router::new().route(mutate::PATH, post(mutate::mutate));
    tls::serve(listener, rx, router).await?;
    Ok(())
}

pub fn router(server: Arc<Server>) -> Router {
    let base = format!("/apis/{API_GROUP}/{API_VERSION}");
    let process = format!("{base}/namespaces/{{namespace}}/sandboxprocesses/{{name}}");
    Router::new()
        .route("/apis", get(discovery::group_list))
        .route(&format!("/apis/{API_GROUP}"), get(discovery::group))
        .route(&base, get(discovery::resource_list))
        .route(&format!("{process}/log"), get(log::log))
        .route(&format!("{process}/signal"), post(signal::signal))
        .route(&format!("{process}/probe"), post(probe::probe))
        .route(&format!("{process}/resize"), post(resize::resize))
        .route(&format!("{process}/attach"), get(attach::attach))
        .route(
            &format!("{process}/stdin"),
            post(stdin::stdin)
                .get(stdin::stdin_state)
                .layer(axum::extract::DefaultBodyLimit::max(MAX_STDIN_WRITE)),
        )
        .fallback(|| async {
            SubresourceError::NotFound("the server could not find the requested resource".into())
        })
        .with_state(server)
}
