//! `POST …/probe`: one port check from inside the process's pod.
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::{Extension, Json};

use super::authorization::{authorized_process, caller, Needs};
use super::error::{agent_error_for, Result, SubresourceError};
use super::locate::Door;
use super::server::Server;
use super::tls::Peer;

/// Dialling inside the pod is what exec could do, not what reading the object allows.
pub(super) const NEEDS: Needs = Needs {
    verb: "get",
    exec: Some("checking a port of"),
};

/// One port check inside the process's pod (`{"tcpSocket": {"port": N}}` or `{"httpGet":
/// {"port": N, "path": "/", "status": {"min": 200, "max": 399}}}`), for clients' `waitForPort`:
/// the agent dials from the pod's network namespace. Needs `get` on the object and `create
/// pods/exec` on its pod (dialling inside the pod is what exec could do, not what reading the
/// object allows).
pub async fn probe(
    State(server): State<Arc<Server>>,
    Extension(peer): Extension<Peer>,
    Extension(door): Extension<Door>,
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
    let at = authorized_process(&server, &user, door, &namespace, &name, NEEDS).await?;
    let r = server
        .agents
        .client
        .probe(&at.agent, &at.exec_id, &p)
        .await
        .map_err(|e| agent_error_for(e, door.singular(), &name))?;
    Ok(Json(r))
}
