//! `POST …/signal`: one signal to the process. Needs `update` on the object and `create
//! pods/exec` on its pod.
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use tracing::info;

use super::authorization::{authorized_process, caller, Needs};
use super::error::{agent_error, Result, SubresourceError};
use super::server::Server;
use super::tls::Peer;

/// A signal can do what `stop` can: end the process.
pub(super) const NEEDS: Needs = Needs {
    verb: "update",
    exec: Some("signalling"),
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalBody {
    signal: i32,
}

pub async fn signal(
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
    let at = authorized_process(&server, &user, &namespace, &name, NEEDS).await?;
    let mut rec = server
        .agents
        .client
        .signal(&at.agent, &at.exec_id, b.signal)
        .await
        .map_err(|e| agent_error(e, &name))?;
    rec.withhold_node();
    info!(%namespace, %name, user = %user.username, signal = b.signal, "signal sent");
    Ok(Json(rec).into_response())
}
