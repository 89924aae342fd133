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
use super::error::{agent_error_for, Result, SubresourceError};
use super::locate::Door;
use super::server::Server;
use super::tls::Peer;

/// A signal can do what `stop` can: end the process.
pub(super) const NEEDS: Needs = Needs {
    verb: "update",
    exec: Some("signalling"),
};

/// `{"signal": N}`; or, for a Process (which has no `spec.stop` to set), `{"stop": true}`: its
/// stop signal, SIGKILL after its grace period.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalBody {
    signal: Option<i32>,
    #[serde(default)]
    stop: bool,
}

/// What a signal request asks, checked.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    Signal(i32),
    Stop,
}

fn ask(b: &SignalBody, door: Door) -> Result<Ask> {
    match (b.signal, b.stop) {
        (Some(_), true) => Err(SubresourceError::BadRequest(
            "signal and stop: give one (stop sends the process's own stop signal)".into(),
        )),
        (None, true) if door == Door::SandboxProcess => Err(SubresourceError::BadRequest(
            "stop: set spec.stop on a SandboxProcess (kubectl sandbox kill)".into(),
        )),
        (None, true) => Ok(Ask::Stop),
        (Some(n), false) if (1..=64).contains(&n) => Ok(Ask::Signal(n)),
        (Some(n), false) => Err(SubresourceError::BadRequest(format!(
            "signal: {n} is not a signal number (1-64)"
        ))),
        (None, false) => Err(SubresourceError::BadRequest(
            "signal: required (a number, 1-64)".into(),
        )),
    }
}

pub async fn signal(
    State(server): State<Arc<Server>>,
    Extension(peer): Extension<Peer>,
    Extension(door): Extension<Door>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: std::result::Result<Json<SignalBody>, JsonRejection>,
) -> Result<Response> {
    let user = caller(&server, &peer, &headers)?;
    let Json(b) = body.map_err(|e| SubresourceError::BadRequest(e.body_text()))?;
    let ask = ask(&b, door)?;
    let at = authorized_process(&server, &user, door, &namespace, &name, NEEDS).await?;
    let client = &server.agents.client;
    let sent = match ask {
        Ask::Signal(n) => client.signal(&at.agent, &at.exec_id, n).await,
        Ask::Stop => client.stop_as_started(&at.agent, &at.exec_id).await,
    };
    let mut rec = sent.map_err(|e| agent_error_for(e, door.singular(), &name))?;
    rec.withhold_node();
    info!(%namespace, %name, user = %user.username, ?ask, "signal sent");
    Ok(Json(rec).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_or_a_process_stop_and_nothing_else() {
        let body = |v: serde_json::Value| -> SignalBody { serde_json::from_value(v).unwrap() };
        let p = Door::Process;
        let s = Door::SandboxProcess;
        assert_eq!(
            ask(&body(serde_json::json!({"signal": 9})), s).unwrap(),
            Ask::Signal(9)
        );
        assert_eq!(
            ask(&body(serde_json::json!({"stop": true})), p).unwrap(),
            Ask::Stop
        );
        let refused = [
            (serde_json::json!({"stop": true}), s, "spec.stop"),
            (
                serde_json::json!({"signal": 9, "stop": true}),
                p,
                "give one",
            ),
            (serde_json::json!({"signal": 0}), p, "1-64"),
            (serde_json::json!({"signal": 65}), s, "1-64"),
            (serde_json::json!({}), p, "required"),
        ];
        for (v, door, want) in refused {
            let e = ask(&body(v.clone()), door).unwrap_err().to_string();
            assert!(e.contains(want), "{v}: {e}");
        }
    }
}
