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

    fn event(&mut self, ev: &LogEvent, line: &str) -> Result<(), CliError> {
        if self.json {
            let mut out = std::io::stdout().lock();
            match ev {
                // Decoded for readability; bytes that are not UTF-8 become U+FFFD, so
                // scripts that need exact bytes use the raw output instead.
                LogEvent::Data {
                    stream,
                    data,
                    ts_nanos,
                    cursor,
                } => {
                    let bytes = decode(data)?;
                    let v = serde_json::json!({
                        "type": "data",
                        "stream": match stream { LogStream::Stderr => "stderr", _ => "stdout" },
                        "data": String::from_utf8_lossy(&bytes),
                        "time": time(*ts_nanos),
                        "cursor": cursor,
                    });
                    writeln!(out, "{v}")?;
                }
                _ => writeln!(out, "{line}")?,
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
        r.event(&ev, &line)?;
        match ev {
            LogEvent::Data { cursor, .. } | LogEvent::Truncated { cursor, .. } => {
                ended.cursor = Some(cursor)
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

/// Prints output; a follow that loses its connection (an operator rollout, say) resumes from the
/// last cursor, so nothing is repeated or skipped.
pub async fn print(
    client: &Client,
    namespace: &str,
    name: &str,
    o: &Options,
) -> Result<Ended, CliError> {
    let mut o = o.clone();
    let mut retries = 0;
    loop {
        match stream_once(client, namespace, name, &o).await {
            Ok(e) if e.complete || !o.follow => return Ok(e),
            Ok(e) => {
                o.since = e.cursor.clone();
            }
            Err(CliError::StreamBroken(_)) if o.follow && retries < 5 => retries += 1,
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
    fn timestamps_are_rfc3339() {
        assert_eq!(
            time(1_700_000_000_123_456_789),
            "2023-11-14T22:13:20.123456789Z"
        );
    }
}
