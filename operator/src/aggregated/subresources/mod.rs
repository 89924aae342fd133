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
//! - The same subresources of a `processes` object, under
//!   `/apis/processes.sandbox.dev/v1alpha1/namespaces/NS/processes/NAME/…` ([`Door::Process`]):
//!   RBAC on `processes` in `processes.sandbox.dev` where the above checks `sandboxprocesses`.
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
pub(crate) mod authorization;
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
mod table;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use sandbox_api::wire::MAX_STDIN_WRITE;
use tracing::info;

pub use discovery::{API_GROUP, API_VERSION, PROCESSES_GROUP};
pub use error::{agent_error, agent_error_for, Result, SubresourceError};
pub use locate::Door;
pub use server::Server;
pub use table::{Located, ProcessTable};

/// Serves the subresources and `more` (the other groups of this server) on one listener.
pub async fn run(
    server: Arc<Server>,
    more: Router,
    addr: SocketAddr,
    tls: tokio::sync::watch::Receiver<Arc<rustls::ServerConfig>>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    info!(%addr, group = API_GROUP, "serving the subresource API");
    tls::serve(listener, tls, more.merge(router(server))).await?;
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
    let sandbox_process = format!("{base}/namespaces/{{namespace}}/sandboxprocesses/{{name}}");
    let process = format!(
        "/apis/{PROCESSES_GROUP}/{API_VERSION}/namespaces/{{namespace}}/processes/{{name}}"
    );
    Router::new()
        .route("/apis", get(discovery::group_list))
        .route(&format!("/apis/{API_GROUP}"), get(discovery::group))
        .route(&base, get(discovery::resource_list))
        .merge(subresources(&sandbox_process, Door::SandboxProcess))
        .merge(subresources(&process, Door::Process))
        .fallback(|| async {
            SubresourceError::NotFound("the server could not find the requested resource".into())
        })
        .with_state(server)
}

/// The subresources of one process at `process` (a path), through `door`: the same handlers
/// for a SandboxProcess and for a Process.
fn subresources(process: &str, door: Door) -> Router<Arc<Server>> {
    Router::new()
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
        .layer(axum::Extension(door))
}

/// What each subresource request needs of its caller beyond RBAC on the subresource itself, as
/// the handlers check it; docs/logs.md's rights table is held to it (tested below).
#[cfg(test)]
const RIGHTS: [(&str, &str, authorization::Needs); 7] = [
    ("GET", "log", log::NEEDS),
    ("POST", "signal", signal::NEEDS),
    ("POST", "stdin", stdin::WRITE_NEEDS),
    ("GET", "stdin", stdin::READ_NEEDS),
    ("GET", "attach", attach::NEEDS),
    ("POST", "resize", resize::NEEDS),
    ("POST", "probe", probe::NEEDS),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/logs.md's table says, for every request, exactly the rights the code checks: the
    /// verb on the object, and `create pods/exec` on its pod where (and only where) it is
    /// checked. A new subresource without its row, or a row that says less, fails here.
    #[test]
    fn the_documented_rights_are_the_checked_ones() {
        let doc = include_str!("../../../../docs/logs.md");
        let rows: Vec<(&str, &str, &str)> = doc
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("| `")?;
                let (method, rest) = rest.split_once(' ')?;
                let sub = rest.split("sandboxprocesses/NAME/").nth(1)?;
                let sub = sub.split(['?', '`', ' ']).next()?;
                let checked = l.rsplit('|').nth(1)?;
                Some((method, sub, checked))
            })
            .collect();
        for (method, sub, needs) in RIGHTS {
            let row = rows
                .iter()
                .find(|(m, s, _)| *m == method && *s == sub)
                .unwrap_or_else(|| panic!("docs/logs.md has no row for {method} …/{sub}"));
            let checked = row.2;
            assert!(
                checked.contains(&format!("`{}`", needs.verb)),
                "{method} …/{sub}: the docs say {checked:?}, the code checks `{}`",
                needs.verb
            );
            assert_eq!(
                checked.contains("pods/exec"),
                needs.exec.is_some(),
                "{method} …/{sub}: the docs say {checked:?} about pods/exec"
            );
        }
        assert_eq!(
            rows.len(),
            RIGHTS.len(),
            "a row for a request the code does not serve"
        );
    }
}
