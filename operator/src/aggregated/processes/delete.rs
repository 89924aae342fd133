//! `delete`: the process stopped (its stop signal, SIGKILL after its grace period) and forgotten
//! on its node; an ended one forgotten at once. Answers the object as last seen, as the API
//! server answers a delete that took effect.
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;
use tracing::info;

use super::object::json_answer;
use super::read::not_found;
use super::store::Entry;
use super::Api;
use crate::aggregated::subresources::authorization::caller;
use crate::aggregated::subresources::tls::Peer;
use crate::aggregated::subresources::{agent_error_for, Result, SubresourceError};

/// Beyond the grace period, what a stop and a forget may take on a loaded node.
const FORGET_MARGIN: Duration = Duration::from_secs(20);

/// The query of a delete, as the API server passes it on.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteQuery {
    dry_run: Option<String>,
}

pub async fn delete(
    State(api): State<Arc<Api>>,
    Extension(peer): Extension<Peer>,
    Path((namespace, name)): Path<(String, String)>,
    Query(q): Query<DeleteQuery>,
    headers: HeaderMap,
) -> Result<Response> {
    let user = caller(&api.server, &peer, &headers)?;
    if q.dry_run.is_some() {
        // A dry run must not stop anything: refused rather than done for real.
        return Err(SubresourceError::BadRequest(
            "dryRun: not supported by processes (a delete stops the process)".into(),
        ));
    }
    api.server.all_known().await?;
    let e = api
        .store
        .get(&namespace, &name)
        .ok_or_else(|| not_found(&name))?;
    let grace = e.kept.grace;
    let timeout = Duration::from_secs(grace.min(3600)) + FORGET_MARGIN;
    if node_gone(&api, &e).await {
        // Nothing left to stop: its node is no longer in the cluster (as a SandboxProcess's).
        api.store.remove(&e.exec_id);
        info!(%namespace, %name, user = %user.username, node = %e.columns.node, "process deleted; its node is gone");
        return Ok(json_answer(axum::http::StatusCode::OK, e.json.to_string()));
    }
    api.server
        .agents
        .client
        .forget(&e.agent, &e.exec_id, timeout)
        .await
        .map_err(|err| agent_error_for(err, "process", &name))?;
    api.store.remove(&e.exec_id);
    info!(%namespace, %name, user = %user.username, "process deleted");
    Ok(json_answer(axum::http::StatusCode::OK, e.json.to_string()))
}

/// Whether no agent serves the process's node and the node object is gone too.
async fn node_gone(api: &Api, e: &Entry) -> bool {
    if api.server.agents.urls().contains(&e.agent) {
        return false;
    }
    let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(api.server.client.clone());
    matches!(nodes.get_opt(&e.columns.node).await, Ok(None))
}
