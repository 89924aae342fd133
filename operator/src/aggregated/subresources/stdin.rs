//! `POST …/stdin`: a write to the process's stdin, exactly once by offset; `GET …/stdin`: where
//! the next write starts (the module `subresources` describes the protocol).
use std::sync::Arc;

use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::{Extension, Json};
use sandbox_api::wire::{
    writer_id_ok, writer_label, StdinState, StdinWriter, MAX_STDIN_WRITE, MAX_WRITER_ID,
};
use serde::Deserialize;

use super::authorization::{authorized_process, caller, Needs};
use super::error::{agent_error_for, Result, SubresourceError};
use super::locate::Door;
use super::server::Server;
use super::tls::Peer;

/// Where stdin is: reading the object.
pub(super) const READ_NEEDS: Needs = Needs {
    verb: "get",
    exec: None,
};

/// A write needs the rights of a signal.
pub(super) const WRITE_NEEDS: Needs = Needs {
    verb: "update",
    exec: Some("writing the stdin of"),
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdinParams {
    offset: Option<String>,
    close: Option<String>,
    /// A shared terminal's writer (`tty` processes): `offset` counts its own bytes.
    writer: Option<String>,
}

impl StdinParams {
    fn parse(self) -> Result<(u64, bool, String)> {
        let writer = self.writer.unwrap_or_default();
        if !writer.is_empty() && !writer_id_ok(&writer) {
            return Err(SubresourceError::BadRequest(format!(
                "writer: {:?} is not 1-{MAX_WRITER_ID} of A-Z a-z 0-9 - _",
                writer_label(&writer)
            )));
        }
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
        Ok((offset, close, writer))
    }
}

/// A write to the process's stdin (exactly once by offset; see the doc of `subresources`). The same
/// rights as a signal: `update` on the object and `create pods/exec` on its pod.
pub async fn stdin(
    State(server): State<Arc<Server>>,
    Extension(peer): Extension<Peer>,
    Extension(door): Extension<Door>,
    Path((namespace, name)): Path<(String, String)>,
    params: std::result::Result<Query<StdinParams>, QueryRejection>,
    headers: HeaderMap,
    body: std::result::Result<axum::body::Bytes, BytesRejection>,
) -> Result<Json<StdinState>> {
    let user = caller(&server, &peer, &headers)?;
    let Query(p) = params.map_err(|e| SubresourceError::BadRequest(e.body_text()))?;
    let body = body.map_err(|e| {
        SubresourceError::BadRequest(format!(
            "body: {} (at most {MAX_STDIN_WRITE} bytes per write; send more as further writes)",
            e.body_text()
        ))
    })?;
    let (offset, close, writer) = p.parse()?;
    let at = authorized_process(&server, &user, door, &namespace, &name, WRITE_NEEDS).await?;
    if !writer.is_empty() && !at.tty {
        return Err(SubresourceError::Conflict(format!(
            "TerminalUnavailable: {} \"{name}\" runs without a terminal (spec.tty): \
             writer is for a shared terminal",
            door.singular()
        )));
    }
    let who = StdinWriter {
        id: writer,
        by: user.username,
    };
    let state = server
        .agents
        .client
        .stdin(&at.agent, &at.exec_id, offset, body, close, &who)
        .await
        .map_err(|e| agent_error_for(e, door.singular(), &name))?;
    Ok(Json(state))
}

/// Where stdin is: the offset the next write starts at, and whether it is closed.
pub async fn stdin_state(
    State(server): State<Arc<Server>>,
    Extension(peer): Extension<Peer>,
    Extension(door): Extension<Door>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<StdinState>> {
    let user = caller(&server, &peer, &headers)?;
    let at = authorized_process(&server, &user, door, &namespace, &name, READ_NEEDS).await?;
    let rec = server
        .agents
        .client
        .get(&at.agent, &at.exec_id)
        .await
        .map_err(|e| agent_error_for(e, door.singular(), &name))?
        .ok_or_else(|| {
            SubresourceError::NotFound(format!(
                "the agent holds no process for {} \"{name}\"",
                door.singular()
            ))
        })?;
    rec.stdin.map(Json).ok_or_else(|| {
        SubresourceError::Conflict(format!(
            "StdinUnavailable: {} \"{name}\" was created without spec.stdin",
            door.singular()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdin_parameters() {
        let pw = |o: Option<&str>, c: Option<&str>, w: Option<&str>| {
            StdinParams {
                offset: o.map(String::from),
                close: c.map(String::from),
                writer: w.map(String::from),
            }
            .parse()
        };
        let p = |o, c| pw(o, c, None);
        assert_eq!(p(Some("0"), None).unwrap(), (0, false, String::new()));
        assert_eq!(
            p(Some("42"), Some("true")).unwrap(),
            (42, true, String::new())
        );
        assert_eq!(pw(Some("1"), None, Some("w-1")).unwrap().2, "w-1");
        for bad in [
            p(None, None),
            p(Some("-1"), None),
            p(Some("1"), Some("yes")),
            pw(Some("1"), None, Some("a/b")),
        ] {
            assert!(
                matches!(bad, Err(SubresourceError::BadRequest(_))),
                "{bad:?}"
            );
        }
    }
}
