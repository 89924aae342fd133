//! `delete`: the process stopped (its stop signal, SIGKILL after its grace period) and forgotten
//! on its node; an ended one forgotten at once. Answers the object as last seen, as the API
//! server answers a delete that took effect.
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use tracing::info;

use super::read::not_found;
use super::{known, Api};
use crate::aggregated::subresources::authorization::caller;
use crate::aggregated::subresources::tls::Peer;
use crate::aggregated::subresources::{agent_error_for, Result};

/// Beyond the grace period, what a stop and a forget may take on a loaded node.
const FORGET_MARGIN: Duration = Duration::from_secs(20);

pub async fn delete(
    State(api): State<Arc<Api>>,
    Extension(peer): Extension<Peer>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response> {
    let user = caller(&api.server, &peer, &headers)?;
    known(&api).await?;
    let e = api
        .store
        .get(&namespace, &name)
        .ok_or_else(|| not_found(&name))?;
    let grace = e
        .spec
        .get("terminationGracePeriodSeconds")
        .and_then(|g| g.as_u64())
        .unwrap_or(5);
    let timeout = Duration::from_secs(grace.min(3600)) + FORGET_MARGIN;
    api.server
        .agents
        .client
        .forget(&e.agent, &e.exec_id, timeout)
        .await
        .map_err(|err| agent_error_for(err, "process", &name))?;
    api.store.remove(&e.exec_id);
    info!(%namespace, %name, user = %user.username, "process deleted");
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        e.json.to_string(),
    )
        .into_response())
}
