//! `POST …/resize`: a new window size for the terminal of a `spec.tty` process. Needs what a
//! write to its stdin needs: `update` on the object and `create pods/exec` on its pod.
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::{Extension, Json};
use sandbox_api::wire::{TerminalSize, MAX_TERMINAL_COLS, MAX_TERMINAL_ROWS};
use serde::Deserialize;
use tracing::info;

use super::authorization::{authorized_process, caller, Needs};
use super::error::{agent_error_for, Result, SubresourceError};
use super::locate::Door;
use super::server::Server;
use super::tls::Peer;

/// A resize shapes the terminal's input, as stdin does: the same rights.
pub(super) const NEEDS: Needs = Needs {
    verb: "update",
    exec: Some("resizing the terminal of"),
};

/// Wider than the bounds, so that a size out of them is refused naming its field rather than
/// as a JSON type error.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeBody {
    rows: i64,
    cols: i64,
}

impl ResizeBody {
    fn size(&self) -> Result<TerminalSize> {
        let field = |name: &str, v: i64, max: u16| {
            u16::try_from(v)
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| SubresourceError::BadRequest(format!("{name}: {v} is not 1-{max}")))
        };
        Ok(TerminalSize {
            rows: field("rows", self.rows, MAX_TERMINAL_ROWS)?,
            cols: field("cols", self.cols, MAX_TERMINAL_COLS)?,
        })
    }
}

pub async fn resize(
    State(server): State<Arc<Server>>,
    Extension(peer): Extension<Peer>,
    Extension(door): Extension<Door>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: std::result::Result<Json<ResizeBody>, JsonRejection>,
) -> Result<Json<TerminalSize>> {
    let user = caller(&server, &peer, &headers)?;
    let Json(b) = body.map_err(|e| SubresourceError::BadRequest(e.body_text()))?;
    let size = b.size()?;
    let at = authorized_process(&server, &user, door, &namespace, &name, NEEDS).await?;
    if !at.tty {
        return Err(no_terminal(door, &name));
    }
    let size = server
        .agents
        .client
        .resize(&at.agent, &at.exec_id, size)
        .await
        .map_err(|e| agent_error_for(e, door.singular(), &name))?;
    info!(%namespace, %name, user = %user.username, rows = size.rows, cols = size.cols, "terminal resized");
    Ok(Json(size))
}

/// A process without a terminal has no size to change.
fn no_terminal(door: Door, name: &str) -> SubresourceError {
    SubresourceError::Conflict(format!(
        "TerminalUnavailable: {} \"{name}\" was created without spec.tty",
        door.singular()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_bounds_only() {
        let size = |rows, cols| ResizeBody { rows, cols }.size();
        assert_eq!(
            size(50, 120).unwrap(),
            TerminalSize {
                rows: 50,
                cols: 120
            }
        );
        assert_eq!(
            size(1000, 10000).unwrap(),
            TerminalSize {
                rows: 1000,
                cols: 10000
            }
        );
        for (rows, cols, field) in [
            (0, 80, "rows: 0 "),
            (1001, 80, "rows: 1001 "),
            (-1, 80, "rows: -1 "),
            (24, 0, "cols: 0 "),
            (24, 10001, "cols: 10001 "),
            (24, 70000, "cols: 70000 "),
        ] {
            match size(rows, cols) {
                Err(SubresourceError::BadRequest(m)) => assert!(m.starts_with(field), "{m}"),
                other => panic!("{rows}x{cols}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_body_is_rows_and_cols_only() {
        let parse = |s: &str| serde_json::from_str::<ResizeBody>(s);
        assert!(parse(r#"{"rows": 30, "cols": 100}"#).is_ok());
        assert!(parse(r#"{"rows": 30}"#).is_err());
        assert!(parse(r#"{"rows": 30, "cols": 100, "x": 1}"#).is_err());
    }

    #[test]
    fn without_a_terminal_the_refusal_names_spec_tty() {
        match no_terminal(Door::SandboxProcess, "p") {
            SubresourceError::Conflict(m) => {
                assert!(m.starts_with("TerminalUnavailable: "), "{m}");
                assert!(m.contains("spec.tty"), "{m}");
            }
            other => panic!("{other:?}"),
        }
    }
}
