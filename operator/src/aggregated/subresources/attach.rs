//! `GET …/attach` upgraded to a WebSocket speaking Kubernetes' remote-command protocol
//! (`v5.channel.k8s.io`, `v4.channel.k8s.io`: [`sandbox_api::channel`]): the process's stdin,
//! its output from a cursor, terminal resizes and, at the end, its exit code, on one
//! connection through the API server's aggregation proxy (docs/guides/stdin.md). Authorized like a
//! stdin write: `update` on the object and `create pods/exec` on its pod.
mod order;
mod session;

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::Response;
use axum::Extension;
use sandbox_api::channel::PROTOCOLS;
use sandbox_api::cursor::Cursor;
use sandbox_api::wire::{writer_id_ok, writer_label, MAX_STDIN_WRITE, MAX_WRITER_ID};
use serde::Deserialize;

use super::authorization::{authorized_process, caller, Needs};
use super::error::{Result, SubresourceError};
use super::locate::Door;
use super::locate::Located;
use super::server::Server;
use super::tls::Peer;

/// Attaching is what `kubectl attach` is to a pod: the rights of a stdin write.
pub(super) const NEEDS: Needs = Needs {
    verb: "update",
    exec: Some("attaching to"),
};

/// Query parameters as `kubectl attach` names them, and where to resume: `since` (an output
/// cursor: what follows it is sent) and `stdinOffset` (the offset of the first stdin byte this
/// connection sends; without it, stdin's current end).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AttachParams {
    stdin: Option<String>,
    stdout: Option<String>,
    stderr: Option<String>,
    tty: Option<String>,
    since: Option<String>,
    stdin_offset: Option<String>,
    /// A shared terminal's writer, kept by a client across its reconnects (`tty`): its stdin
    /// offsets count its own bytes. Without it, each connection is a writer of its own.
    writer: Option<String>,
    /// Our clients ask for the cursor the output starts after, when it is not theirs (a
    /// terminal's screen comes first): channel 9 ([`sandbox_api::channel::CURSOR`]).
    cursors: Option<String>,
    /// Sent by pod-minded clients; a process has one container.
    container: Option<String>,
}

fn flag(name: &str, v: Option<&str>, default: bool) -> Result<bool> {
    match v {
        None => Ok(default),
        Some("true") | Some("1") | Some("") => Ok(true),
        Some("false") | Some("0") => Ok(false),
        Some(other) => Err(SubresourceError::BadRequest(format!(
            "{name}: {other:?} is not true or false"
        ))),
    }
}

impl AttachParams {
    fn options(self) -> Result<session::Options> {
        // Pod-minded clients name a container; a process has exactly one.
        drop(self.container);
        let since = match self.since.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => Some(
                Cursor::parse(s)
                    .map_err(|e| SubresourceError::BadRequest(format!("since: {e}")))?,
            ),
        };
        let writer = match self.writer.filter(|w| !w.is_empty()) {
            Some(w) if !writer_id_ok(&w) => {
                return Err(SubresourceError::BadRequest(format!(
                    "writer: {:?} is not 1-{MAX_WRITER_ID} of A-Z a-z 0-9 - _",
                    writer_label(&w)
                )))
            }
            w => w,
        };
        let stdin_offset = match self.stdin_offset.as_deref() {
            None => None,
            Some(v) => Some(v.parse::<u64>().map_err(|_| {
                SubresourceError::BadRequest(format!("stdinOffset: {v:?} is not a byte offset"))
            })?),
        };
        Ok(session::Options {
            stdin: flag("stdin", self.stdin.as_deref(), false)?,
            stdout: flag("stdout", self.stdout.as_deref(), true)?,
            stderr: flag("stderr", self.stderr.as_deref(), true)?,
            tty: self
                .tty
                .as_deref()
                .map(|v| flag("tty", Some(v), false))
                .transpose()?,
            since,
            stdin_offset,
            writer,
            cursors: flag("cursors", self.cursors.as_deref(), false)?,
        })
    }
}

/// The first protocol of ours the client offers, or a refusal that names them.
fn protocol(headers: &HeaderMap) -> Result<&'static str> {
    let offered: Vec<&str> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    offered
        .iter()
        .find_map(|o| PROTOCOLS.iter().find(|p| *p == o).copied())
        .ok_or_else(|| {
            SubresourceError::BadRequest(format!(
                "attach: Sec-WebSocket-Protocol offers none of {} (offered: {offered:?})",
                PROTOCOLS.join(", ")
            ))
        })
}

pub async fn attach(
    State(server): State<Arc<Server>>,
    Extension(peer): Extension<Peer>,
    Extension(door): Extension<Door>,
    Path((namespace, name)): Path<(String, String)>,
    params: std::result::Result<Query<AttachParams>, QueryRejection>,
    headers: HeaderMap,
    upgrade: std::result::Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response> {
    let user = caller(&server, &peer, &headers)?;
    let Query(p) = params.map_err(|e| SubresourceError::BadRequest(e.body_text()))?;
    let opts = p.options()?;
    let upgrade = upgrade.map_err(|e| {
        SubresourceError::BadRequest(format!(
            "attach: a WebSocket upgrade is required ({}; protocols {})",
            e.body_text(),
            PROTOCOLS.join(", ")
        ))
    })?;
    let proto = protocol(&headers)?;
    let at = authorized_process(&server, &user, door, &namespace, &name, NEEDS).await?;
    if opts.stdin {
        stdin_open(&server, door, &at, &name).await?;
    }
    if opts.tty == Some(true) && !at.tty {
        return Err(SubresourceError::Conflict(format!(
            "TerminalUnavailable: {} \"{name}\" runs without a terminal (spec.tty)",
            door.singular()
        )));
    }
    let s = session::Session::new(
        server.agents.client.clone(),
        at,
        name,
        opts,
        user.username,
        proto == sandbox_api::channel::V5,
    )?;
    Ok(upgrade
        .protocols([proto])
        .max_message_size(MAX_STDIN_WRITE + 1)
        .on_upgrade(move |socket| session::run(socket, s)))
}

/// An attach that would write stdin is refused up front when stdin was closed (EOF sent) and the
/// process runs on: its keys would go nowhere. An ended process is attached to (its output and
/// exit follow); a record that cannot be read now is no reason to refuse.
async fn stdin_open(server: &Server, door: Door, at: &Located, name: &str) -> Result<()> {
    match server.agents.client.get(&at.agent, &at.exec_id).await {
        Ok(Some(rec)) if !rec.is_final() && rec.stdin.is_some_and(|s| s.closed) => {
            Err(SubresourceError::Conflict(format!(
                "StdinUnavailable: the stdin of {} \"{name}\" is closed (EOF was \
                 sent); attach without stdin to read its output",
                door.singular()
            )))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_refused_by_name() {
        let o = AttachParams {
            stdin: Some("true".into()),
            since: Some("c9+12".into()),
            stdin_offset: Some("42".into()),
            ..Default::default()
        }
        .options()
        .unwrap();
        assert!(o.stdin && o.stdout && o.stderr && o.tty.is_none());
        assert_eq!(o.since.map(|c| c.skip), Some(12));
        assert_eq!(o.stdin_offset, Some(42));
        let o = AttachParams {
            writer: Some("w-1".into()),
            ..Default::default()
        };
        assert_eq!(o.options().unwrap().writer.as_deref(), Some("w-1"));
        for (p, field) in [
            (
                AttachParams {
                    stdin: Some("yes".into()),
                    ..Default::default()
                },
                "stdin:",
            ),
            (
                AttachParams {
                    tty: Some("2".into()),
                    ..Default::default()
                },
                "tty:",
            ),
            (
                AttachParams {
                    stdin_offset: Some("-1".into()),
                    ..Default::default()
                },
                "stdinOffset:",
            ),
            (
                AttachParams {
                    writer: Some("a b".into()),
                    ..Default::default()
                },
                "writer:",
            ),
        ] {
            let e = p.options().unwrap_err().to_string();
            assert!(e.starts_with(field), "{e}");
        }
    }

    #[test]
    fn the_protocol_is_the_clients_first_of_ours() {
        let mut h = HeaderMap::new();
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "base64.channel.k8s.io, v4.channel.k8s.io, v5.channel.k8s.io"
                .parse()
                .unwrap(),
        );
        assert_eq!(protocol(&h).unwrap(), "v4.channel.k8s.io");
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "channel.k8s.io".parse().unwrap(),
        );
        assert!(protocol(&h)
            .unwrap_err()
            .to_string()
            .contains("v5.channel.k8s.io"));
    }
}
