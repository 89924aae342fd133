//! Printing output events: raw bytes (kubectl logs), or one JSON event per line with its cursor.
//! Reading, resuming and cursors are the library's (`sandbox_client::Process::logs`).
use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use sandbox_client::{LogEvent, LogOptions, LogStream, Process};

use crate::error::{flag, CliError};

#[derive(Clone, Debug, Default)]
pub struct Options {
    pub follow: bool,
    /// Start after this cursor.
    pub after: Option<String>,
    /// Only output read within this long before now (`kubectl logs --since`).
    pub since: Option<Duration>,
    /// Only the last N lines of what is there now, then (with follow) what comes.
    pub tail: Option<usize>,
    pub limit_bytes: Option<u64>,
    pub stream: LogStream,
    pub timestamps: bool,
    pub json: bool,
    /// stderr output to our stderr (`run --wait`, like `kubectl exec`); otherwise everything goes
    /// to stdout, like `kubectl logs`.
    pub split: bool,
    /// The previous run's output only (`--previous`).
    pub previous: bool,
}

/// Writes events to stdout/stderr, optionally with timestamps at line starts.
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
            writeln!(std::io::stdout().lock(), "{}", json_event(ev))?;
            return Ok(());
        }
        match ev {
            LogEvent::Data {
                stream,
                data,
                time_nanos,
                ..
            } => {
                let i = usize::from(*stream == LogStream::Stderr);
                let mut w: Box<dyn Write> = if i == 1 && self.split {
                    Box::new(std::io::stderr().lock())
                } else {
                    Box::new(std::io::stdout().lock())
                };
                if self.timestamps {
                    let ts = time(*time_nanos);
                    for piece in data.split_inclusive(|b| *b == b'\n') {
                        if self.at_line_start[i] {
                            write!(w, "{ts} ")?;
                        }
                        w.write_all(piece)?;
                        self.at_line_start[i] = piece.ends_with(b"\n");
                    }
                } else {
                    w.write_all(data)?;
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

/// One `-o json` line. `data` events carry the bytes as text in `data` when they are valid
/// UTF-8, else base64 in `dataBase64` (no byte is lost either way).
fn json_event(ev: &LogEvent) -> serde_json::Value {
    match ev {
        LogEvent::Data {
            stream,
            data,
            time_nanos,
            cursor,
        } => {
            let mut v = serde_json::json!({
                "type": "data",
                "stream": match stream { LogStream::Stderr => "stderr", _ => "stdout" },
                "time": time(*time_nanos),
                "cursor": cursor,
            });
            match std::str::from_utf8(data) {
                Ok(text) => v["data"] = text.into(),
                Err(_) => {
                    v["dataBase64"] = base64::engine::general_purpose::STANDARD
                        .encode(data)
                        .into()
                }
            }
            v
        }
        LogEvent::Truncated {
            dropped_bytes,
            cursor,
        } => {
            serde_json::json!({"type": "truncated", "droppedBytes": dropped_bytes, "cursor": cursor})
        }
        LogEvent::End { cursor, record } => {
            let mut v = serde_json::json!({"type": "end", "cursor": cursor});
            if let Some(r) = record {
                v["record"] = serde_json::to_value(r).unwrap_or_default();
            }
            v
        }
    }
}

fn time(ts_nanos: u64) -> String {
    Timestamp::from_nanosecond(i128::from(ts_nanos))
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Keeps the last `n` lines of `events` (a last line without a newline counts); the first kept
/// event is cut to where its lines start.
fn tail(events: Vec<LogEvent>, n: usize) -> Vec<LogEvent> {
    if n == 0 {
        return Vec::new();
    }
    let mut lines = 0usize;
    let mut out = Vec::new();
    let mut first_byte = true;
    for ev in events.into_iter().rev() {
        let LogEvent::Data {
            stream,
            data,
            time_nanos,
            cursor,
        } = ev
        else {
            continue; // a gap notice belongs to output that is not shown
        };
        let mut cut = None;
        for (i, b) in data.iter().enumerate().rev() {
            // A newline that ends the output's last byte does not start a line.
            if *b == b'\n' && !(first_byte && i + 1 == data.len()) {
                lines += 1;
                if lines == n {
                    cut = Some(i + 1);
                    break;
                }
            }
            first_byte = false;
        }
        if data.is_empty() {
            continue;
        }
        first_byte = false;
        match cut {
            Some(at) => {
                if at < data.len() {
                    out.push(LogEvent::Data {
                        stream,
                        data: data[at..].to_vec(),
                        time_nanos,
                        cursor,
                    });
                }
                break;
            }
            None => out.push(LogEvent::Data {
                stream,
                data,
                time_nanos,
                cursor,
            }),
        }
    }
    out.reverse();
    out
}

/// Prints the output as asked; the cursor after the last event.
pub async fn print(p: &Process, o: &Options) -> Result<Option<String>, CliError> {
    let mut r = Renderer::new(o);
    let since = o
        .since
        .map(|d| now_nanos().saturating_sub(d.as_nanos() as u64));
    let shown = |ev: &LogEvent| match (ev, since) {
        (LogEvent::Data { time_nanos, .. }, Some(t)) => *time_nanos >= t,
        _ => true,
    };
    let mut after = o.after.clone();
    // The byte limit counts what is shown: with --since or --tail it is applied here, after
    // them; otherwise the library cuts the read itself (and its cursor points at the cut).
    let here = o.since.is_some() || o.tail.is_some();
    let mut budget = if here { o.limit_bytes } else { None };
    if o.follow {
        // Only a started process has output (a Pending one is waited for, as `-f` alone does).
        p.wait_started(None).await?;
    }
    if let Some(n) = o.tail {
        // What is there now, its last n lines; then, with follow, on from its end.
        let mut events = Vec::new();
        let mut s = Box::pin(p.logs(LogOptions {
            follow: false,
            after: after.clone(),
            stream: o.stream,
            limit_bytes: None,
            previous: o.previous,
        }));
        let mut end = None;
        while let Some(ev) = s.next().await {
            match ev.map_err(|e| flag(e, "--after"))? {
                LogEvent::End { cursor, record } => {
                    end = Some((cursor, record.is_some()));
                }
                ev if shown(&ev) => events.push(ev),
                _ => {}
            }
        }
        for ev in tail(events, n) {
            let ev = limit(ev, &mut budget);
            r.event(&ev)?;
            if budget == Some(0) {
                return Ok(None);
            }
        }
        let Some((cursor, ended)) = end else {
            return Ok(None);
        };
        if !o.follow || ended {
            return Ok(Some(cursor));
        }
        after = Some(cursor);
    }
    let mut s = Box::pin(p.logs(LogOptions {
        follow: o.follow,
        after,
        stream: o.stream,
        limit_bytes: if here { None } else { o.limit_bytes },
        previous: o.previous,
    }));
    let mut last = None;
    while let Some(ev) = s.next().await {
        let ev = ev.map_err(|e| flag(e, "--after"))?;
        if let LogEvent::End { cursor, .. } = &ev {
            last = Some(cursor.clone());
            if !o.json {
                continue;
            }
        }
        if shown(&ev) {
            r.event(&limit(ev, &mut budget))?;
            if budget == Some(0) {
                return Ok(None);
            }
        }
    }
    Ok(last)
}

/// Cuts a data event to the bytes left in `budget`.
fn limit(ev: LogEvent, budget: &mut Option<u64>) -> LogEvent {
    let Some(b) = budget else {
        return ev;
    };
    match ev {
        LogEvent::Data {
            stream,
            mut data,
            time_nanos,
            cursor,
        } => {
            if data.len() as u64 >= *b {
                data.truncate(*b as usize);
                *b = 0;
            } else {
                *b -= data.len() as u64;
            }
            LogEvent::Data {
                stream,
                data,
                time_nanos,
                cursor,
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(s: &str) -> LogEvent {
        LogEvent::Data {
            stream: LogStream::Stdout,
            data: s.as_bytes().to_vec(),
            time_nanos: 0,
            cursor: format!("c-{s}"),
        }
    }

    fn text(evs: &[LogEvent]) -> String {
        evs.iter()
            .map(|e| match e {
                LogEvent::Data { data, .. } => String::from_utf8_lossy(data).into_owned(),
                _ => String::new(),
            })
            .collect()
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let evs = || vec![data("a\nb\n"), data("c\nd"), data("e\n")];
        assert_eq!(text(&tail(evs(), 1)), "de\n");
        assert_eq!(text(&tail(evs(), 2)), "c\nde\n");
        assert_eq!(text(&tail(evs(), 3)), "b\nc\nde\n");
        assert_eq!(text(&tail(evs(), 10)), "a\nb\nc\nde\n");
        assert_eq!(text(&tail(evs(), 0)), "");
        // A last line without a newline is a line.
        assert_eq!(text(&tail(vec![data("x\ny\nz")], 1)), "z");
        assert_eq!(text(&tail(vec![data("x\ny\nz")], 2)), "y\nz");
    }

    #[test]
    fn json_keeps_bytes_that_are_not_utf8() {
        let ev = |bytes: &[u8]| LogEvent::Data {
            stream: LogStream::Stdout,
            data: bytes.to_vec(),
            time_nanos: 0,
            cursor: "c1".into(),
        };
        let v = json_event(&ev(b"h\xc3\xa9llo\n"));
        assert_eq!(v["data"], "h\u{e9}llo\n");
        assert!(v.get("dataBase64").is_none(), "{v}");
        let raw = b"\xff\xfebin\x00";
        let v = json_event(&ev(raw));
        assert!(v.get("data").is_none(), "{v}");
        let back = base64::engine::general_purpose::STANDARD
            .decode(v["dataBase64"].as_str().unwrap())
            .unwrap();
        assert_eq!(back, raw, "every byte kept");
        assert_eq!(
            json_event(&LogEvent::Truncated {
                dropped_bytes: 3,
                cursor: "c".into()
            }),
            serde_json::json!({"type": "truncated", "droppedBytes": 3, "cursor": "c"})
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
