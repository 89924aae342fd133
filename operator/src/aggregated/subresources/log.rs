//! `GET …/log`: the process's output as NDJSON `LogEvent`s, followed as long as asked
//! ([`relay`](super::relay) keeps a follow alive across agent reconnects).
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::Response;
use axum::Extension;
use sandbox_api::wire::{LogQuery, LogStream};
use serde::Deserialize;

use super::authorization::{authorized_process, caller, Needs};
use super::error::{agent_error_for, Result, SubresourceError};
use super::locate::Door;
use super::relay;
use super::server::Server;
use super::tls::Peer;

/// Reading the output is reading the object.
pub(super) const NEEDS: Needs = Needs {
    verb: "get",
    exec: None,
};

/// Query parameters, taken as text so that a bad value is refused naming its parameter.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogParams {
    follow: Option<String>,
    since: Option<String>,
    stream: Option<String>,
    max_bytes: Option<String>,
    previous: Option<String>,
}

/// `true`/`false` (and `1`/`0`, or the bare name) of a parameter, or an error naming it.
fn flag(name: &str, v: Option<&str>) -> Result<bool> {
    match v {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") | Some("") => Ok(true),
        Some(other) => Err(SubresourceError::BadRequest(format!(
            "{name}: {other:?} is not true or false"
        ))),
    }
}

impl LogParams {
    fn query(self) -> Result<LogQuery> {
        let follow = flag("follow", self.follow.as_deref())?;
        let previous = flag("previous", self.previous.as_deref())?;
        let since = self.since.filter(|s| !s.is_empty());
        let max_bytes = match self.max_bytes.as_deref() {
            None => None,
            Some(v) => Some(v.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                SubresourceError::BadRequest(format!("maxBytes: {v:?} is not a positive integer"))
            })?),
        };
        let q = LogQuery {
            since,
            follow,
            max_bytes,
            stream: parse_stream(self.stream.as_deref())?,
            previous,
        };
        q.check().map_err(SubresourceError::BadRequest)?;
        Ok(q)
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

pub async fn log(
    State(server): State<Arc<Server>>,
    Extension(peer): Extension<Peer>,
    Extension(door): Extension<Door>,
    Path((namespace, name)): Path<(String, String)>,
    params: std::result::Result<Query<LogParams>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response> {
    let user = caller(&server, &peer, &headers)?;
    let Query(p) = params.map_err(|e| SubresourceError::BadRequest(e.body_text()))?;
    let query = p.query()?;
    let at = authorized_process(&server, &user, door, &namespace, &name, NEEDS).await?;
    let resp = server
        .agents
        .client
        .logs(&at.agent, &at.exec_id, &query)
        .await
        .map_err(|e| agent_error_for(e, door.singular(), &name))?;
    let body = relay::body(
        server.agents.client.clone(),
        at.agent,
        at.exec_id,
        query,
        resp,
    );
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .expect("static headers are valid"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
