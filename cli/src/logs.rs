//! Output through `sandboxprocesses/log` (subresources.sandbox.dev), as the agent's NDJSON events.
use std::io::Write;

use base64::Engine;
use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use sandbox_api::wire::{LogEvent, LogStream, ProcessRecord};

use crate::error::CliError;

pub const PATH_PREFIX: &str = "/apis/subresources.sandbox.dev/v1alpha1";

#[derive(Clone, Debug, Default)]
pub struct Options {
    pub follow: bool,
    pub since: Option<String>,
    /// stdout | stderr | both
    pub stream: String,
    pub timestamps: bool,
    pub json: bool,
    /// stderr output to our stderr (`run --wait`, like `kubectl exec`); otherwise everything goes
    /// to stdout, like `kubectl logs`.
    pub split: bool,
}

/// How a log stream ended.
#[derive(Debug, Default)]
pub struct Ended {
    /// Cursor after the last event seen: resume from here.
    pub cursor: Option<String>,
    /// The agent's final record, when the process ended and its output was drained.
    pub record: Option<ProcessRecord>,
    /// The stream carried an End event (otherwise the connection ended early).
    pub complete: bool,
    /// The stream ended with a `more` event (a byte limit): read on from `cursor`.
    pub more: bool,
}

fn url(namespace: &str, name: &str, o: &Options) -> String {
    let mut q = vec![format!("stream={}", o.stream)];
    if o.follow {
        q.push("follow=true".into());
    }
    if let Some(c) = &o.since {
        q.push(format!("since={}", encode(c)));
    }
    format!(
        "{PATH_PREFIX}/namespaces/{}/sandboxprocesses/{}/log?{}",
        encode(namespace),
        encode(name),
        q.join("&")
    )
}

/// Percent-encodes everything outside the URL-safe set (names and cursors are plain, but a
/// typo should fail in the server's validation, not produce a different URL).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Writes raw output to stdout/stderr, optionally with timestamps at line starts.
#[derive(Default)]
struct Renderer {
    timestamps: bool,
    json: bool,
    split: bool,
    at_line_start: [bool; 2],
}

impl Renderer {
    fn new(o: &Options) -> Self {
        Renderer {
            timestamps: o.timestamps,
            json: o.json,
            split: o.split,
            at_line_start: [true, true],
        }
    }

    fn event(&mut self, ev: &LogEvent) -> Result<(), CliError> {
        if self.json {
            if let Some(v) = json_event(ev)? {
                writeln!(std::io::stdout().lock(), "{v}")?;
            }
            return Ok(());
        }
        match ev {
            LogEvent::Data {
                stream,
                data,
                ts_nanos,
                ..
            } => {
                let bytes = decode(data)?;
                let i = usize::from(*stream == LogStream::Stderr);
                let mut w: Box<dyn Write> = if i == 1 && self.split {
                    Box::new(std::io::stderr().lock())
                } else {
                    Box::new(std::io::stdout().lock())
                };
                if self.timestamps {
                    let ts = time(*ts_nanos);
                    for piece in bytes.split_inclusive(|b| *b == b'\n') {
                        if self.at_line_start[i] {
                            write!(w, "{ts} ")?;
                        }
                        w.write_all(piece)?;
                        self.at_line_start[i] = piece.ends_with(b"\n");
                    }
                } else {
                    w.write_all(&bytes)?;
                }
                w.flush()?;
            }
            LogEvent::More { .. } => {}
            LogEvent::Truncated { dropped_bytes, .. } => {
                eprintln!(
                    "kubectl-sandbox: [{dropped_bytes} bytes of output dropped here: over the agent's retention cap]"
                );
            }
            LogEvent::End { .. } => {}
        }
        Ok(())
    }
}

/// One `-o json` line for an event. `data` events carry the bytes as text in `data` when they are
/// valid UTF-8, else base64 in `dataBase64` (no byte is lost either way); `truncated` and `end`
/// are the API's events as they come.
fn json_event(ev: &LogEvent) -> Result<Option<serde_json::Value>, CliError> {
    let v = match ev {
        LogEvent::Data {
            stream,
            data,
            ts_nanos,
            cursor,
        } => {
            let mut v = serde_json::json!({
                "type": "data",
                "stream": match stream { LogStream::Stderr => "stderr", _ => "stdout" },
                "time": time(*ts_nanos),
                "cursor": cursor,
            });
            match String::from_utf8(decode(data)?) {
                Ok(text) => v["data"] = text.into(),
                Err(_) => v["dataBase64"] = data.clone().into(),
            }
            v
        }
        // The plugin reads on by itself after a `more`.
        LogEvent::More { .. } => return Ok(None),
        other => serde_json::to_value(other).map_err(|e| CliError::Api(e.to_string()))?,
    };
    Ok(Some(v))
}

fn decode(data: &str) -> Result<Vec<u8>, CliError> {
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| CliError::Api(format!("bad data in the log stream: {e}")))
}

fn time(ts_nanos: u64) -> String {
    Timestamp::from_nanosecond(i128::from(ts_nanos))
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Streams output once (one request), printing as it comes.
pub async fn stream_once(
    client: &Client,
    namespace: &str,
    name: &str,
    o: &Options,
) -> Result<Ended, CliError> {
    let req = http_get(&url(namespace, name, o))?;
    let reader = client.request_stream(req).await?;
    let mut lines = reader.lines();
    let mut r = Renderer::new(o);
    let mut ended = Ended {
        cursor: o.since.clone(),
        ..Default::default()
    };
    while let Some(line) = lines
        .try_next()
        .await
        .map_err(|e| CliError::StreamBroken(e.to_string()))?
    {
        if line.is_empty() {
            continue;
        }
        let ev: LogEvent = serde_json::from_str(&line)
            .map_err(|e| CliError::Api(format!("bad log event {line:?}: {e}")))?;
        r.event(&ev)?;
        match ev {
            LogEvent::Data { cursor, .. } | LogEvent::Truncated { cursor, .. } => {
                ended.cursor = Some(cursor)
            }
            LogEvent::More { cursor } => {
                ended.cursor = Some(cursor);
                ended.more = true;
                break;
            }
            LogEvent::End { cursor, record } => {
                ended.cursor = Some(cursor);
                ended.record = record.map(|b| *b);
                ended.complete = true;
                break;
            }
        }
    }
    Ok(ended)
}

/// What to do after one read of the stream.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    Done,
    /// Stopped at a byte limit (`more`): read on from its cursor at once.
    ReadOn,
    /// A follow lost its connection: resume from the last cursor after a pause.
    Resume,
}

fn next(e: &Ended, follow: bool) -> Next {
    if e.more {
        Next::ReadOn
    } else if e.complete || !follow {
        Next::Done
    } else {
        Next::Resume
    }
}

/// Prints output; a follow that loses its connection (an operator rollout, say) resumes from the
/// last cursor, so nothing is repeated or skipped.
pub async fn print(
    client: &Client,
    namespace: &str,
    name: &str,
    o: &Options,
) -> Result<Ended, CliError> {
    let mut o = o.clone();
    let (mut retries, mut unavailable) = (0, 0);
    loop {
        match stream_once(client, namespace, name, &o).await {
            Ok(e) => match next(&e, o.follow) {
                Next::Done => return Ok(e),
                Next::ReadOn => {
                    o.since = e.cursor.clone();
                    continue;
                }
                Next::Resume => o.since = e.cursor.clone(),
            },
            Err(CliError::StreamBroken(_)) if o.follow && retries < 5 => retries += 1,
            // A follow outlives a moment without an agent (it restarts, a rollout): the
            // subresource says 503 then; a plain read fails at once, like kubectl logs.
            Err(CliError::Api(m))
                if o.follow && m.ends_with("(ServiceUnavailable)") && unavailable < 60 =>
            {
                unavailable += 1
            }
            Err(e) => return Err(e),
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

fn http_get(url: &str) -> Result<http::Request<Vec<u8>>, CliError> {
    http::Request::get(url)
        .body(Vec::new())
        .map_err(|e| CliError::Usage(format!("bad request URL {url}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let o = Options {
            follow: true,
            since: Some("c00ff".into()),
            stream: "stderr".into(),
            ..Default::default()
        };
        assert_eq!(
            url("ns", "p-1", &o),
            "/apis/subresources.sandbox.dev/v1alpha1/namespaces/ns/sandboxprocesses/p-1/log?stream=stderr&follow=true&since=c00ff"
        );
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn json_keeps_bytes_that_are_not_utf8() {
        let ev = |bytes: &[u8]| LogEvent::Data {
            stream: LogStream::Stdout,
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
            ts_nanos: 0,
            cursor: "c1".into(),
        };
        let v = json_event(&ev(b"h\xc3\xa9llo\n")).unwrap().unwrap();
        assert_eq!(v["data"], "h\u{e9}llo\n");
        assert!(v.get("dataBase64").is_none(), "{v}");
        let raw = b"\xff\xfebin\x00";
        let v = json_event(&ev(raw)).unwrap().unwrap();
        assert!(v.get("data").is_none(), "{v}");
        let back = base64::engine::general_purpose::STANDARD
            .decode(v["dataBase64"].as_str().unwrap())
            .unwrap();
        assert_eq!(back, raw, "every byte kept");
        assert_eq!(
            (v["type"].as_str(), v["cursor"].as_str()),
            (Some("data"), Some("c1"))
        );
    }

    #[test]
    fn a_byte_limit_is_not_the_end() {
        let more = Ended {
            cursor: Some("c9".into()),
            more: true,
            ..Default::default()
        };
        assert_eq!(next(&more, false), Next::ReadOn);
        assert_eq!(next(&more, true), Next::ReadOn);
        let end = Ended {
            complete: true,
            ..Default::default()
        };
        assert_eq!(next(&end, true), Next::Done);
        assert_eq!(next(&Ended::default(), false), Next::Done);
        assert_eq!(
            next(&Ended::default(), true),
            Next::Resume,
            "connection lost"
        );
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(
            time(1_700_000_000_123_456_789),
            "2023-11-14T22:13:20.123456789Z"
        );
    }
}
