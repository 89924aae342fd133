//! A process's output read plainly through the API server (`sandboxprocesses/log`), as curl or a
//! script would: one request, its NDJSON events as they come, no resume. sandbox-client resumes
//! a silent or cut connection by cursor itself, so tests of what the *server* does on such a
//! connection read with this instead.
use std::pin::Pin;

use anyhow::{bail, Context, Result};
use base64::Engine;
use futures::io::{AsyncBufRead, AsyncBufReadExt, Lines};
use futures::StreamExt;
use kube::Client;
use serde_json::Value;

/// The log subresource's path of a SandboxProcess (`?QUERY` appended when not empty).
pub fn log_path(ns: &str, name: &str, query: &str) -> String {
    let q = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!(
        "/apis/subresources.sandbox.dev/v1alpha1/namespaces/{ns}/sandboxprocesses/{name}/log{q}"
    )
}

/// GET of a path through the API server; the body as text.
pub async fn get_text(client: &Client, path: &str) -> Result<String> {
    let req = http::Request::get(path).body(Vec::new())?;
    client
        .request_text(req)
        .await
        .with_context(|| format!("GET {path}"))
}

/// One open `follow=true` read.
pub struct Follow {
    lines: Lines<Pin<Box<dyn AsyncBufRead + Send>>>,
}

/// What a follow carried so far.
#[derive(Debug, Default)]
pub struct Seen {
    pub data: Vec<u8>,
    /// The `end` event, once it came.
    pub end: Option<Value>,
}

impl Follow {
    /// Opens a follow of NS/NAME; returns once the server answered 200.
    pub async fn open(client: &Client, ns: &str, name: &str) -> Result<Follow> {
        Follow::open_query(client, ns, name, "follow=true").await
    }

    /// Opens a read of NS/NAME with this query (e.g. `follow=true&since=CURSOR`).
    pub async fn open_query(client: &Client, ns: &str, name: &str, query: &str) -> Result<Follow> {
        let path = log_path(ns, name, query);
        let req = http::Request::get(&path).body(Vec::new())?;
        let body = client
            .request_stream(req)
            .await
            .with_context(|| format!("GET {path}"))?;
        let boxed: Pin<Box<dyn AsyncBufRead + Send>> = Box::pin(body);
        Ok(Follow {
            lines: boxed.lines(),
        })
    }

    /// The next event (keepalive lines skipped); `None` when the server closed the stream.
    pub async fn next(&mut self) -> Result<Option<Value>> {
        while let Some(line) = self.lines.next().await {
            let line = line.context("reading the follow")?;
            if line.trim().is_empty() {
                continue; // a keepalive
            }
            return Ok(Some(serde_json::from_str(&line).context("an event")?));
        }
        Ok(None)
    }

    /// Reads events into `seen` (watchers see each step) until the `end` event or the stream
    /// closes without one.
    pub async fn read_to_end(&mut self, seen: &tokio::sync::watch::Sender<Seen>) -> Result<()> {
        while let Some(ev) = self.next().await? {
            match ev["type"].as_str() {
                Some("data") => {
                    let bytes = decode(&ev)?;
                    seen.send_modify(|s| s.data.extend(bytes));
                }
                Some("end") => {
                    seen.send_modify(|s| s.end = Some(ev));
                    return Ok(());
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// A data event's bytes.
pub fn decode(ev: &Value) -> Result<Vec<u8>> {
    let Some(b64) = ev["data"].as_str() else {
        bail!("a data event without data: {ev}");
    };
    Ok(base64::engine::general_purpose::STANDARD.decode(b64)?)
}
