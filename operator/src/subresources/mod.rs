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
//! - `POST …/sandboxprocesses/NAME/probe` `{"tcpSocket": {"port": N}}` or `{"httpGet": {...}}`
//!   → `{"ready": R, "message": M}`: one port check from inside the pod's network namespace
//!   (clients' `waitForPort`). Needs `get` on the object and `create pods/exec` on its pod.
//!
//! Users reach it only through the API server (`kubectl get --raw`, `kubectl sandbox logs`), which
//! authenticates them and checks RBAC on `sandboxprocesses/log` (verb `get`) or
//! `sandboxprocesses/signal` (`create`) in `subresources.sandbox.dev`. We then check, with a
//! SubjectAccessReview for the same user, `get` (log) or `update` (signal) on the SandboxProcess
//! itself: whoever cannot read the object cannot read its output; a signal also needs `create
//! pods/exec` on the process's pod, like `stop` (the admission policy) and `kubectl exec`. The agent API stays private
//! to the operator. Why this transport: docs/logs.md.
pub mod frontproxy;
pub mod relay;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use sandbox_api::crd::{SandboxProcess, SandboxProcessStatus, GROUP};
use sandbox_api::wire::{ErrorCode, LogQuery, LogStream, StdinState, MAX_STDIN_WRITE};
use serde::Deserialize;
use serde_json::json;
use tracing::info;

use crate::agent::discovery::agent_ip_for_node;
use crate::agent::{AgentClient, AgentError};
use frontproxy::{RequestHeaderConfig, UserInfo};
use tls::Peer;

pub const API_GROUP: &str = "subresources.sandbox.dev";
pub const API_VERSION: &str = "v1alpha1";

/// Errors of the extension API, answered as a Kubernetes `Status` (what kubectl prints).
#[derive(Debug, thiserror::Error)]
pub enum SubresourceError {
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    TooManyRequests(String),
    #[error("{0}")]
    Gone(String),
    #[error("{0}")]
    Internal(String),
}

impl SubresourceError {
    fn status(&self) -> (StatusCode, &'static str) {
        match self {
            SubresourceError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            SubresourceError::Forbidden(_) => (StatusCode::FORBIDDEN, "Forbidden"),
            SubresourceError::NotFound(_) => (StatusCode::NOT_FOUND, "NotFound"),
            SubresourceError::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
            SubresourceError::Conflict(_) => (StatusCode::CONFLICT, "Conflict"),
            SubresourceError::Unavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable")
            }
            SubresourceError::TooManyRequests(_) => {
                (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests")
            }
            SubresourceError::Gone(_) => (StatusCode::GONE, "Gone"),
            SubresourceError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
        }
    }
}

impl IntoResponse for SubresourceError {
    fn into_response(self) -> Response {
        let (code, reason) = self.status();
        let body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": reason,
            "code": code.as_u16(),
        });
        (code, Json(body)).into_response()
    }
}

type Result<T, E = SubresourceError> = std::result::Result<T, E>;

pub struct Server {
    pub client: Client,
    pub agents: AgentClient,
    /// Kept current by `certs::reload`.
    pub request_headers: tokio::sync::watch::Receiver<RequestHeaderConfig>,
    /// Namespace of the agent pods.
    pub namespace: String,
    pub agent_port: u16,
    /// `--agent-url`: one agent for every node.
    pub agent_url: Option<String>,
    /// Labels of this release's agent pods (`--agent-selector`).
    pub agent_selector: String,
}

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

pub fn router(server: Arc<Server>) -> Router {
    let base = format!("/apis/{API_GROUP}/{API_VERSION}");
    Router::new()
        .route("/apis", get(group_list))
        .route(&format!("/apis/{API_GROUP}"), get(group))
        .route(&base, get(resource_list))
        .route(
            &format!("{base}/namespaces/{{namespace}}/sandboxprocesses/{{name}}/log"),
            get(log),
        )
        .route(
            &format!("{base}/namespaces/{{namespace}}/sandboxprocesses/{{name}}/signal"),
            post(signal),
        )
        .route(
            &format!("{base}/namespaces/{{namespace}}/sandboxprocesses/{{name}}/probe"),
            post(probe),
        )
        .route(
            &format!("{base}/namespaces/{{namespace}}/sandboxprocesses/{{name}}/stdin"),
            post(stdin)
                .get(stdin_state)
                .layer(axum::extract::DefaultBodyLimit::max(MAX_STDIN_WRITE)),
        )
        .fallback(|| async {
            SubresourceError::NotFound("the server could not find the requested resource".into())
        })
        .with_state(server)
}

fn group_json() -> serde_json::Value {
    let gv = format!("{API_GROUP}/{API_VERSION}");
    json!({
        "name": API_GROUP,
        "versions": [{"groupVersion": gv, "version": API_VERSION}],
        "preferredVersion": {"groupVersion": gv, "version": API_VERSION},
    })
}

async fn group_list() -> Json<serde_json::Value> {
    Json(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group_json()]}))
}

async fn group() -> Json<serde_json::Value> {
    let mut g = group_json();
    g["kind"] = "APIGroup".into();
    g["apiVersion"] = "v1".into();
    Json(g)
}

async fn resource_list() -> Json<serde_json::Value> {
    Json(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{API_GROUP}/{API_VERSION}"),
        "resources": [
            {"name": "sandboxprocesses/log", "singularName": "", "namespaced": true,
             "kind": "SandboxProcessLog", "verbs": ["get"]},
            {"name": "sandboxprocesses/signal", "singularName": "", "namespaced": true,
             "kind": "SandboxProcessSignal", "verbs": ["create"]},
            {"name": "sandboxprocesses/stdin", "singularName": "", "namespaced": true,
             "kind": "SandboxProcessStdin", "verbs": ["create", "get"]},
            {"name": "sandboxprocesses/probe", "singularName": "", "namespaced": true,
             "kind": "SandboxProcessProbe", "verbs": ["create"]},
        ],
    }))
}

/// The user the API server's front proxy vouches for.
fn caller(server: &Server, peer: &Peer, headers: &HeaderMap) -> Result<UserInfo> {
    let request_headers = server.request_headers.borrow().clone();
    if !request_headers.allows(peer.common_name.as_deref()) {
        return Err(SubresourceError::Unauthorized(format!(
            "client certificate {:?} is not an allowed request-header proxy",
            peer.common_name.as_deref().unwrap_or("")
        )));
    }
    request_headers
        .user(headers)
        .ok_or_else(|| SubresourceError::Unauthorized("no user in the request headers".into()))
}

/// Whether the caller may do what `attrs` says (a SubjectAccessReview for the same user).
async fn allowed(server: &Server, user: &UserInfo, attrs: ResourceAttributes) -> Result<bool> {
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.username.clone()),
            uid: user.uid.clone(),
            groups: Some(user.groups.clone()),
            extra: Some(user.extra.clone()),
            resource_attributes: Some(attrs),
            ..Default::default()
        },
        ..Default::default()
    };
    let review = Api::<SubjectAccessReview>::all(server.client.clone())
        .create(&PostParams::default(), &sar)
        .await
        .map_err(|e| SubresourceError::Internal(format!("SubjectAccessReview: {e}")))?;
    Ok(review.status.is_some_and(|s| s.allowed))
}

/// The right `kubectl exec` needs on the process's pod: a signal can do what `stop` can (end
/// the process), and changing `stop` needs it (the admission policy), so a signal does too.
async fn authorize_exec(
    server: &Server,
    user: &UserInfo,
    namespace: &str,
    pod: &str,
    what: &str,
) -> Result<()> {
    let attrs = ResourceAttributes {
        group: Some(String::new()),
        resource: Some("pods".into()),
        subresource: Some("exec".into()),
        verb: Some("create".into()),
        namespace: Some(namespace.into()),
        name: Some(pod.into()),
        ..Default::default()
    };
    if allowed(server, user, attrs).await? {
        Ok(())
    } else {
        Err(SubresourceError::Forbidden(format!(
            "pods \"{pod}\" is forbidden: User \"{}\" cannot create resource \"pods/exec\" in the namespace \"{namespace}\": {what} a SandboxProcess needs the same permission as kubectl exec on its pod",
            user.username
        )))
    }
}

/// RBAC on the SandboxProcess itself, for the caller.
async fn authorize(
    server: &Server,
    user: &UserInfo,
    verb: &str,
    namespace: &str,
    name: &str,
) -> Result<()> {
    let attrs = ResourceAttributes {
        group: Some(GROUP.into()),
        resource: Some("sandboxprocesses".into()),
        verb: Some(verb.into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        ..Default::default()
    };
    if allowed(server, user, attrs).await? {
        Ok(())
    } else {
        Err(SubresourceError::Forbidden(format!(
            "sandboxprocesses.{GROUP} \"{name}\" is forbidden: User \"{}\" cannot {verb} resource \"sandboxprocesses\" in API group \"{GROUP}\" in the namespace \"{namespace}\"",
            user.username
        )))
    }
}

/// Why there is no process to read or signal: not started yet, or never started (the object's
/// `status.error`, which names the cause). `None` once the process was started.
fn not_started(name: &str, status: &SandboxProcessStatus) -> Option<SubresourceError> {
    if status.pod_uid.is_some() && status.node_name.is_some() {
        return None;
    }
    let phase = status.phase.map(|p| p.to_string());
    Some(SubresourceError::BadRequest(match &status.error {
        Some(e) => format!(
            "sandboxprocess \"{name}\" could not start a process (phase {}): {}: {}",
            phase.as_deref().unwrap_or("unset"),
            e.code.as_str(),
            e.message
        ),
        None => format!(
            "sandboxprocess \"{name}\" has not started a process (phase {})",
            phase.as_deref().unwrap_or("unset")
        ),
    }))
}

/// The agent serving the object's node, the process's exec id, and its pod's name.
async fn locate(server: &Server, namespace: &str, name: &str) -> Result<(String, String, String)> {
    let sbp = Api::<SandboxProcess>::namespaced(server.client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| SubresourceError::Internal(format!("reading the SandboxProcess: {e}")))?
        .ok_or_else(|| {
            SubresourceError::NotFound(format!("sandboxprocesses.{GROUP} \"{name}\" not found"))
        })?;
    let status = sbp.status.clone().unwrap_or_default();
    if let Some(e) = not_started(name, &status) {
        return Err(e);
    }
    let node = status.node_name.clone().unwrap_or_default();
    let uid = sbp.metadata.uid.clone().unwrap_or_default();
    let url = agent_url(server, &node).await?;
    // The pod named, or the one the selector chose (recorded before the start).
    let pod = status.pod_name.clone().unwrap_or(sbp.spec.pod_name);
    Ok((url, uid, pod))
}

async fn agent_url(server: &Server, node: &str) -> Result<String> {
    if let Some(u) = &server.agent_url {
        return Ok(u.trim_end_matches('/').to_string());
    }
    let mut lp = ListParams::default()
        .labels(&server.agent_selector)
        .fields(&format!("spec.nodeName={node}"));
    if server.agents.pins_node_identity() {
        // From the API server's cache as it is: a consistent list waits until the cache has
        // seen the latest etcd revision, up to 100 ms after any write in the cluster (its
        // progress-request period) — measured as +90 ms on every stdin write, whose own status
        // update is such a write. A stale address only fails the pinned handshake (503; the
        // clients retry).
        lp = lp.match_any();
    }
    let pods = Api::<Pod>::namespaced(server.client.clone(), &server.namespace)
        .list(&lp)
        .await
        .map_err(|e| SubresourceError::Internal(format!("listing agent pods: {e}")))?;
    agent_ip_for_node(&pods.items, node)
        .map(|ip| server.agents.url_for(node, &ip, server.agent_port))
        .ok_or_else(|| SubresourceError::Unavailable(format!("no running agent on node {node}")))
}

fn agent_error(e: AgentError, name: &str) -> SubresourceError {
    match e {
        AgentError::Api { error, .. } if error.code == ErrorCode::ProcessNotFound => {
            SubresourceError::NotFound(format!(
                "the agent holds no process for sandboxprocess \"{name}\" (its output is gone)"
            ))
        }
        AgentError::Api { error, .. } if error.code == ErrorCode::InvalidRequest => {
            SubresourceError::BadRequest(error.message)
        }
        AgentError::Api { error, .. } if error.code == ErrorCode::TooManyRequests => {
            SubresourceError::TooManyRequests(error.message)
        }
        AgentError::Api { error, .. } if error.code == ErrorCode::OutputFreed => {
            SubresourceError::Gone(error.message)
        }
        AgentError::Api { error, .. } => {
            SubresourceError::Conflict(format!("{}: {}", error.code, error.message))
        }
        e @ AgentError::Unreachable { .. } => SubresourceError::Unavailable(e.to_string()),
    }
}

/// Query parameters, taken as text so that a bad value is refused naming its parameter.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LogParams {
    follow: Option<String>,
    since: Option<String>,
    stream: Option<String>,
    max_bytes: Option<String>,
}

impl LogParams {
    fn query(self) -> Result<LogQuery> {
        let follow = match self.follow.as_deref() {
            None | Some("false") | Some("0") => false,
            Some("true") | Some("1") | Some("") => true,
            Some(other) => {
                return Err(SubresourceError::BadRequest(format!(
                    "follow: {other:?} is not true or false"
                )))
            }
        };
        let max_bytes = match self.max_bytes.as_deref() {
            None => None,
            Some(v) => Some(v.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                SubresourceError::BadRequest(format!("maxBytes: {v:?} is not a positive integer"))
            })?),
        };
        Ok(LogQuery {
            since: self.since.filter(|s| !s.is_empty()),
            follow,
            max_bytes,
            stream: parse_stream(self.stream.as_deref())?,
        })
    }
}

fn parse_stream(s: Option<&str>) -> Result<Option<LogStream>> {
    Ok(match s.map(str::to_ascii_lowercase).as_deref() {
        None => None,
        Some("stdout") => Some(LogStream::Stdout),
        Some("stderr") => Some(LogStream::Stderr),
        Some("both") => Some(LogStream::Both),
        Some(other) => {
            return Err(SubresourceError::BadRequest(format!(
                "stream: {other:?} is not one of stdout, stderr, both"
            )))
        }
    })
}

async fn log(
    State(server): State<Arc<Server>>,
    Extension(peer): Extension<Peer>,
    Path((namespace, name)): Path<(String, String)>,
    params: std::result::Result<Query<LogParams>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response> {
    let user = caller(&server, &peer, &headers)?;
    let Query(p) = params.map_err(|e| SubresourceError::BadRequest(e.body_text()))?;
    let query = p.query()?;
    authorize(&server, &user, "get", &namespace, &name).await?;
    let (url, id, _) = locate(&server, &namespace, &name).await?;
    let resp = server
        .agents
        .logs(&url, &id, &query)
        .await
        .map_err(|e| agent_error(e, &name))?;
    let body = relay::body(server.agents.clone(), url, id, query, resp);
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .expect("static headers are valid"))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignalBody {
    signal: i32,
}

async fn signal(
    State(server): State<Arc<Server>>,
    Extension(peer): Extension<Peer>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: std::result::Result<Json<SignalBody>, JsonRejection>,
) -> Result<Response> {
    let user = caller(&server, &peer, &headers)?;
    let Json(b) = body.map_err(|e| SubresourceError::BadRequest(e.body_text()))?;
    if !(1..=64).contains(&b.signal) {
        return Err(SubresourceError::BadRequest(format!(
            "signal: {} is not a signal number (1-64)",
            b.signal
        )));
    }
    authorize(&server, &user, "update", &namespace, &name).await?;
    let (url, id, pod) = locate(&server, &namespace, &name).await?;
    authorize_exec(&server, &user, &namespace, &pod, "signalling").await?;
    let rec = server
        .agents
        .signal(&url, &id, b.signal)
        .await
        .map_err(|e| agent_error(e, &name))?;
    info!(%namespace, %name, user = %user.username, signal = b.signal, "signal sent");
    Ok(Json(rec).into_response())
}

/// One port check inside the process's pod (`{"tcpSocket": {"port": N}}` or `{"httpGet":
/// {"port": N, "path": "/", "status": {"min": 200, "max": 399}}}`), for clients' `waitForPort`:
/// the agent dials from the pod's network namespace. Needs `get` on the object and `create
/// pods/exec` on its pod (dialling inside the pod is what exec could do, not what reading the
/// object allows).
async fn probe(
    State(server): State<Arc<Server>>,
    Extension(peer): Extension<Peer>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<sandbox_api::wire::ProbeResult>> {
    let user = caller(&server, &peer, &headers)?;
    // Any content type (kubectl create --raw sends none): the body is JSON or refused.
    let p: sandbox_api::wire::ProbeKind = serde_json::from_slice(&body).map_err(|e| {
        SubresourceError::BadRequest(format!(
            "body: {e} (one of tcpSocket: {{port}}, httpGet: {{port, path, status}})"
        ))
    })?;
    sandbox_api::validate::port_check("probe", &p)
        .map_err(|v| SubresourceError::BadRequest(v.to_string()))?;
    authorize(&server, &user, "get", &namespace, &name).await?;
    let (url, id, pod) = locate(&server, &namespace, &name).await?;
    authorize_exec(&server, &user, &namespace, &pod, "checking a port of").await?;
    let r = server
        .agents
        .probe(&url, &id, &p)
        .await
        .map_err(|e| agent_error(e, &name))?;
    Ok(Json(r))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StdinParams {
    offset: Option<String>,
    close: Option<String>,
}

impl StdinParams {
    fn parse(self) -> Result<(u64, bool)> {
        let offset = self.offset.as_deref().ok_or_else(|| {
            SubresourceError::BadRequest(
                "offset: required (the bytes of stdin already sent; GET this subresource for it)"
                    .into(),
            )
        })?;
        let offset = offset.parse::<u64>().map_err(|_| {
            SubresourceError::BadRequest(format!("offset: {offset:?} is not a byte offset"))
        })?;
        let close = match self.close.as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(v) => {
                return Err(SubresourceError::BadRequest(format!(
                    "close: {v:?} is not true or false"
                )))
            }
        };
        Ok((offset, close))
    }
}

/// A write to the process's stdin (exactly once by offset; see the module's doc). The same
/// rights as a signal: `update` on the object and `create pods/exec` on its pod.
async fn stdin(
    State(server): State<Arc<Server>>,
    Extension(peer): Extension<Peer>,
    Path((namespace, name)): Path<(String, String)>,
    params: std::result::Result<Query<StdinParams>, QueryRejection>,
    headers: HeaderMap,
    body: std::result::Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<StdinState>> {
    let user = caller(&server, &peer, &headers)?;
    let Query(p) = params.map_err(|e| SubresourceError::BadRequest(e.body_text()))?;
    let body = body.map_err(|e| {
        SubresourceError::BadRequest(format!(
            "body: {} (at most {MAX_STDIN_WRITE} bytes per write; send more as further writes)",
            e.body_text()
        ))
    })?;
    let (offset, close) = p.parse()?;
    authorize(&server, &user, "update", &namespace, &name).await?;
    let (url, id, pod) = locate(&server, &namespace, &name).await?;
    authorize_exec(&server, &user, &namespace, &pod, "writing the stdin of").await?;
    let state = server
        .agents
        .stdin(&url, &id, offset, body, close)
        .await
        .map_err(|e| agent_error(e, &name))?;
    Ok(Json(state))
}

/// Where stdin is: the offset the next write starts at, and whether it is closed.
async fn stdin_state(
    State(server): State<Arc<Server>>,
    Extension(peer): Extension<Peer>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<StdinState>> {
    let user = caller(&server, &peer, &headers)?;
    authorize(&server, &user, "get", &namespace, &name).await?;
    let (url, id, _) = locate(&server, &namespace, &name).await?;
    let rec = server
        .agents
        .get(&url, &id)
        .await
        .map_err(|e| agent_error(e, &name))?
        .ok_or_else(|| {
            SubresourceError::NotFound(format!(
                "the agent holds no process for sandboxprocess \"{name}\""
            ))
        })?;
    rec.stdin.map(Json).ok_or_else(|| {
        SubresourceError::Conflict(format!(
            "StdinUnavailable: sandboxprocess \"{name}\" was created without spec.stdin"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The agent's stdin refusals reach the caller as 409 with their code first.
    #[test]
    fn stdin_refusals_keep_their_code() {
        for code in [ErrorCode::StdinConflict, ErrorCode::StdinOffsetMismatch] {
            let e = AgentError::Api {
                url: "u".into(),
                error: sandbox_api::wire::ApiError {
                    code,
                    message: "m".into(),
                },
            };
            match agent_error(e, "p") {
                SubresourceError::Conflict(m) => assert_eq!(m, format!("{code}: m")),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn stdin_parameters() {
        let p = |o: Option<&str>, c: Option<&str>| {
            StdinParams {
                offset: o.map(String::from),
                close: c.map(String::from),
            }
            .parse()
        };
        assert_eq!(p(Some("0"), None).unwrap(), (0, false));
        assert_eq!(p(Some("42"), Some("true")).unwrap(), (42, true));
        for bad in [
            p(None, None),
            p(Some("-1"), None),
            p(Some("1"), Some("yes")),
        ] {
            assert!(
                matches!(bad, Err(SubresourceError::BadRequest(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn stream_names() {
        assert_eq!(
            parse_stream(Some("stdout")).unwrap(),
            Some(LogStream::Stdout)
        );
        assert_eq!(
            parse_stream(Some("Stderr")).unwrap(),
            Some(LogStream::Stderr)
        );
        assert_eq!(parse_stream(None).unwrap(), None);
        let e = parse_stream(Some("stdin")).unwrap_err();
        assert!(e.to_string().starts_with("stream:"), "{e}");
    }

    #[test]
    fn log_parameters_are_refused_by_name() {
        let p = |follow: &str, max: &str| LogParams {
            follow: Some(follow.into()),
            max_bytes: Some(max.into()),
            ..Default::default()
        };
        let q = p("true", "4096").query().unwrap();
        assert!(q.follow);
        assert_eq!(q.max_bytes, Some(4096));
        let e = p("yes", "1").query().unwrap_err().to_string();
        assert!(e.starts_with("follow:"), "{e}");
        for bad in ["-1", "0", "lots"] {
            let e = p("false", bad).query().unwrap_err().to_string();
            assert!(e.starts_with("maxBytes:"), "{bad}: {e}");
        }
        let q = LogParams::default().query().unwrap();
        assert_eq!(q, LogQuery::default());
    }

    #[test]
    fn a_process_that_never_started_is_named_by_its_error() {
        let st =
            |v: serde_json::Value| -> SandboxProcessStatus { serde_json::from_value(v).unwrap() };
        // Refused by the agent: the pod's node is known, but nothing was started there.
        let e = not_started(
            "p",
            &st(json!({"phase": "Error", "nodeName": "n1",
                "error": {"code": "ProcessSpawnFailed", "message": "exec \"nope\": not found"}})),
        )
        .expect("not started")
        .to_string();
        assert_eq!(
            e,
            "sandboxprocess \"p\" could not start a process (phase Error): ProcessSpawnFailed: exec \"nope\": not found"
        );
        let e = not_started("p", &st(json!({"phase": "Pending", "nodeName": "n1"})))
            .unwrap()
            .to_string();
        assert!(
            e.contains("has not started a process (phase Pending)"),
            "{e}"
        );
        assert!(not_started(
            "p",
            &st(json!({"phase": "Running", "nodeName": "n1", "podUID": "u"}))
        )
        .is_none());
    }

    #[test]
    fn errors_are_kubernetes_statuses() {
        let r = SubresourceError::Forbidden("no".into()).into_response();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
    }
}
