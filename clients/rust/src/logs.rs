//! A process's output through `sandboxprocesses/log` (group `subresources.sandbox.dev`): events
//! with cursors, resumed by cursor after a cut connection, read on after a byte limit.
//!
//! Cursors are opaque. Most are the agent's (just after an event); one that points inside an
//! event (after a [`crate::Process::wait_for_log`] match that was followed by more bytes in the
//! same read, or a [`LogOptions::limit_bytes`] cut) is `<cursor>+<n>`, whose rules are
//! `sandbox_api::cursor`'s: the library reads from the start cursor and drops those `n` bytes.
use std::pin::Pin;
use std::time::Duration;

use base64::Engine;
use futures::io::{AsyncBufRead, AsyncBufReadExt, Lines};
use futures::TryStreamExt;
use kube::Client;
use sandbox_api::wire::{self, ProcessRecord};

use crate::error::{Error, Result};
use sandbox_api::cursor::Cursor;

/// Which output: `Stdout`, `Stderr` or `Both`.
pub use sandbox_api::wire::LogStream;

/// How to read output.
#[derive(Clone, Debug, Default)]
pub struct LogOptions {
    /// Keep reading until the process ends (and its output is drained).
    pub follow: bool,
    /// Start after this cursor (from an event, [`crate::LogMatch`], or `status.logMatch`):
    /// no repeat, no gap. `None`: from the oldest retained byte.
    pub after: Option<String>,
    /// Which output (default both, in the order it was written).
    pub stream: LogStream,
    /// Stop after this many bytes of output (the last event is cut; its cursor points just
    /// after the last byte delivered).
    pub limit_bytes: Option<u64>,
    /// The output of the previous run of a restarting process only (`spec.restartPolicy`;
    /// `kubectl logs --previous`): it has ended, so not with `follow` or `after`.
    pub previous: bool,
}

/// One event of a process's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEvent {
    /// Output bytes of one stream, in the order written.
    Data {
        stream: LogStream,
        data: Vec<u8>,
        /// Unix time in nanoseconds when the node read the bytes.
        time_nanos: u64,
        /// Resume here to read what comes after these bytes.
        cursor: String,
    },
    /// Output dropped by the node's retention cap before it was read.
    Truncated { dropped_bytes: u64, cursor: String },
    /// The end of this read. `record` is set when the process has ended and all its output was
    /// read; without it (a read without follow, or a byte limit) more may come.
    End {
        cursor: String,
        record: Option<Box<ProcessRecord>>,
    },
}

/// An event as the reader sees it, with the position before it (for cursors inside it).
#[derive(Debug)]
pub(crate) enum Read {
    Data {
        stream: LogStream,
        data: Vec<u8>,
        time_nanos: u64,
        /// Just before `data[0]`.
        start: Cursor,
        cursor: String,
    },
    Truncated {
        dropped_bytes: u64,
        cursor: String,
    },
    End {
        cursor: Cursor,
        record: Option<Box<ProcessRecord>>,
    },
}

type EventLines = Lines<Pin<Box<dyn AsyncBufRead + Send>>>;

/// Reads one process's output across connections.
pub(crate) struct Reader {
    client: Client,
    /// The process's path (its door's), up to its name.
    base: String,
    name: String,
    follow: bool,
    stream: LogStream,
    /// Where the next event starts.
    pos: Cursor,
    /// Output bytes still to deliver (`limit_bytes`).
    budget: Option<u64>,
    lines: Option<EventLines>,
    /// The server sends both streams and we filter (see `connect`).
    filter_here: bool,
    broken: u32,
    unavailable: u32,
    done: bool,
    /// Silence after which a connection is taken for dead (`wire::LOG_SILENCE_LIMIT`).
    silence: Duration,
    /// The previous run's output: one read, never resumed (the API takes no `since` with it).
    previous: bool,
}

impl Reader {
    pub fn new(
        client: Client,
        door: crate::Door,
        namespace: &str,
        name: &str,
        o: &LogOptions,
    ) -> Result<Reader> {
        let pos = match &o.after {
            Some(c) => Cursor::parse(c).map_err(|m| Error::invalid("after", m))?,
            None => Cursor::default(),
        };
        if o.limit_bytes == Some(0) {
            return Err(Error::invalid("limit_bytes", "must be at least 1"));
        }
        if o.previous && (o.follow || o.after.is_some()) {
            return Err(Error::invalid(
                "previous",
                "not with follow or after (the previous run's output has ended)",
            ));
        }
        Ok(Reader {
            client,
            base: door.path(namespace, name),
            name: name.into(),
            follow: o.follow,
            stream: o.stream,
            pos,
            budget: o.limit_bytes,
            lines: None,
            filter_here: false,
            broken: 0,
            unavailable: 0,
            done: false,
            silence: wire::LOG_SILENCE_LIMIT,
            previous: o.previous,
        })
    }

    fn url(&self) -> String {
        let server_stream = if self.filter_here {
            LogStream::Both
        } else {
            self.stream
        };
        let mut q = vec![format!("stream={}", stream_name(server_stream))];
        if self.follow {
            q.push("follow=true".into());
        }
        if self.previous {
            q.push("previous=true".into());
        }
        if let Some(c) = &self.pos.agent {
            q.push(format!("since={}", encode(c)));
        }
        // A previous read's byte limit is applied here: the server's would end the response
        // with a `more` to read on from, which needs `since`.
        if let Some(b) = self.budget.filter(|_| !self.previous) {
            // At least the bytes to drop plus one: the server always sends one whole event.
            q.push(format!(
                "maxBytes={}",
                b.saturating_add(self.pos.skip).max(1)
            ));
        }
        format!("{}/log?{}", self.base, q.join("&"))
    }

    async fn connect(&mut self) -> Result<()> {
        // Positions count every event of both streams (a `+n` cursor is "n bytes into the next
        // event after the cursor, whatever its stream"), so a filtered read asks for both and
        // filters here: a server-side filter would hide the events a position must step over.
        self.filter_here = self.stream != LogStream::Both;
        let req = http::Request::get(self.url())
            .body(Vec::new())
            .map_err(|e| Error::invalid("name", e.to_string()))?;
        let body = self.client.request_stream(req).await?;
        let boxed: Pin<Box<dyn AsyncBufRead + Send>> = Box::pin(body);
        self.lines = Some(boxed.lines());
        Ok(())
    }

    /// The next event; `None` after the end.
    pub async fn next(&mut self) -> Result<Option<Read>> {
        loop {
            if self.done {
                return Ok(None);
            }
            if self.lines.is_none() {
                match self.connect().await {
                    Ok(()) => {}
                    // A follow outlives a moment without an agent (it restarts, a rollout): the
                    // subresource says 503 then; a plain read fails at once, like kubectl logs.
                    Err(e) if e.is_transient() && self.follow && self.unavailable < 60 => {
                        self.unavailable += 1;
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            // Servers send an empty line after LOG_KEEPALIVE of silence: hearing nothing for
            // LOG_SILENCE_LIMIT means the connection is dead (a peer gone without FIN or RST),
            // not the process idle. Read again from the cursor; not counted as a failure (a
            // server without keepalives makes an idle follow reconnect now and then, no more).
            let next = self.lines.as_mut().expect("connected").try_next();
            let cut = match tokio::time::timeout(self.silence, next).await {
                Ok(Ok(Some(l))) => Ok(l),
                // Cut without an End.
                Ok(Ok(None)) => {
                    Err("the connection ended before the end of the output".to_string())
                }
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) if self.follow => {
                    self.lines = None;
                    continue;
                }
                Err(_) => Err(format!("nothing heard for {:?}", self.silence)),
            };
            let line = match cut {
                Ok(l) => l,
                Err(message) => {
                    // A follow resumes from the last cursor; a plain read reports the cut.
                    self.lines = None;
                    if self.follow && self.broken < 5 {
                        self.broken += 1;
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                    return Err(Error::StreamBroken {
                        name: self.name.clone(),
                        message,
                    });
                }
            };
            if wire::log_line_is_keepalive(line.as_bytes()) {
                continue;
            }
            // Progress: each outage gets its own retries.
            self.broken = 0;
            self.unavailable = 0;
            let ev: wire::LogEvent = serde_json::from_str(&line)
                .map_err(|e| Error::Transport(format!("bad log event {:?}: {e}", clip(&line))))?;
            if let Some(r) = self.take(ev)? {
                return Ok(Some(r));
            }
        }
    }

    /// Applies one wire event to the position; what to hand out, if anything.
    fn take(&mut self, ev: wire::LogEvent) -> Result<Option<Read>> {
        match ev {
            wire::LogEvent::Data {
                stream,
                data,
                ts_nanos,
                cursor,
            } => self.take_data(stream, &data, ts_nanos, cursor),
            wire::LogEvent::Truncated {
                dropped_bytes,
                cursor,
            } => {
                self.pos = Cursor::of_agent(cursor.clone());
                Ok(Some(Read::Truncated {
                    dropped_bytes,
                    cursor,
                }))
            }
            wire::LogEvent::More { .. } if self.previous => Err(Error::StreamBroken {
                name: self.name.clone(),
                message: "the previous run's output was cut (a read with previous cannot \
                          resume)"
                    .into(),
            }),
            wire::LogEvent::More { cursor } => {
                // A byte limit of this connection: read on at once from its cursor.
                self.pos = Cursor::of_agent(cursor);
                self.lines = None;
                Ok(None)
            }
            wire::LogEvent::End { cursor, record } => {
                self.pos = Cursor::of_agent(cursor);
                self.lines = None;
                self.done = true;
                Ok(Some(Read::End {
                    cursor: self.pos.clone(),
                    record,
                }))
            }
        }
    }

    /// A data event: the skip of a cursor inside it dropped, the other stream's filtered out,
    /// and the byte limit applied (a cut event's cursor points inside it).
    fn take_data(
        &mut self,
        stream: LogStream,
        data: &str,
        time_nanos: u64,
        cursor: String,
    ) -> Result<Option<Read>> {
        let mut bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| Error::Transport(format!("bad data in the log stream: {e}")))?;
        // Just before the first byte handed out (the skip included).
        let start = self.pos.clone();
        let skip = usize::try_from(self.pos.skip).unwrap_or(usize::MAX);
        if skip > 0 {
            if skip > bytes.len() {
                return Err(Error::invalid(
                    "after",
                    format!("{} points past its event", self.pos.render()),
                ));
            }
            bytes.drain(..skip);
        }
        let next = Cursor::of_agent(cursor.clone());
        let wanted = self.stream == LogStream::Both || self.stream == stream;
        if !wanted || bytes.is_empty() {
            self.pos = next;
            return Ok(None);
        }
        let mut cursor = cursor;
        self.pos = next;
        if let Some(b) = self.budget {
            if (bytes.len() as u64) >= b {
                let cut = b as usize;
                if cut < bytes.len() {
                    let after = start.plus(cut as u64);
                    bytes.truncate(cut);
                    cursor = after.render();
                    self.pos = after;
                }
                self.budget = Some(0);
                self.done_after_limit();
            } else {
                self.budget = Some(b - bytes.len() as u64);
            }
        }
        Ok(Some(Read::Data {
            stream,
            data: bytes,
            time_nanos,
            start,
            cursor,
        }))
    }

    /// After the byte limit: one more `End` (without a record), then nothing.
    fn done_after_limit(&mut self) {
        self.lines = None;
        self.follow = false;
    }

    /// Whether the byte limit was reached (the next call ends the read).
    pub fn limit_reached(&self) -> bool {
        self.budget == Some(0)
    }

    /// The position after everything handed out so far.
    pub fn position(&self) -> String {
        self.pos.render()
    }
}

/// Public events over a [`Reader`]; ends with one `End`.
pub(crate) async fn next_public(r: &mut Reader) -> Result<Option<LogEvent>> {
    if r.limit_reached() && !r.done {
        r.done = true;
        return Ok(Some(LogEvent::End {
            cursor: r.position(),
            record: None,
        }));
    }
    Ok(r.next().await?.map(|ev| match ev {
        Read::Data {
            stream,
            data,
            time_nanos,
            cursor,
            ..
        } => LogEvent::Data {
            stream,
            data,
            time_nanos,
            cursor,
        },
        Read::Truncated {
            dropped_bytes,
            cursor,
        } => LogEvent::Truncated {
            dropped_bytes,
            cursor,
        },
        Read::End { cursor, record } => LogEvent::End {
            cursor: cursor.render(),
            record,
        },
    }))
}

pub(crate) fn stream_name(s: LogStream) -> &'static str {
    match s {
        LogStream::Stdout => "stdout",
        LogStream::Stderr => "stderr",
        LogStream::Both => "both",
    }
}

fn clip(s: &str) -> &str {
    match s.char_indices().nth(120) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Percent-encodes everything outside the URL-safe set (for a path segment or a query value,
/// e.g. a cursor in `since=`).
pub fn encode(s: &str) -> String {
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

/// Complete lines of one stream's output, as `logMatch` readiness sees them: a line counts once
/// its newline arrives (or, for a last line without one, at the end of the output); a `\r`
/// before the newline stays part of the line, as there.
#[derive(Default)]
pub(crate) struct Lines2 {
    partial: [Vec<u8>; 2],
}

/// Most bytes of one line kept for matching: its last 64 KiB, as `readiness.logMatch` keeps.
const MAX_LINE: usize = 64 << 10;

fn keep_last(buf: &mut Vec<u8>) {
    if buf.len() > MAX_LINE {
        let cut = buf.len() - MAX_LINE;
        buf.drain(..cut);
    }
}

impl Lines2 {
    /// Feeds one event's bytes; calls `f(line, end)` for each complete line, `end` being the
    /// offset in `data` just after its newline. Stops at the first `true`.
    pub fn feed(
        &mut self,
        stream: LogStream,
        data: &[u8],
        mut f: impl FnMut(&[u8]) -> bool,
    ) -> Option<usize> {
        let buf = &mut self.partial[usize::from(stream == LogStream::Stderr)];
        let mut from = 0;
        for (i, b) in data.iter().enumerate() {
            if *b != b'\n' {
                continue;
            }
            buf.extend_from_slice(&data[from..i]);
            keep_last(buf);
            let line = std::mem::take(buf);
            if f(&line) {
                return Some(i + 1);
            }
            from = i + 1;
        }
        buf.extend_from_slice(&data[from..]);
        keep_last(buf);
        None
    }

    /// Output was dropped (a retention gap): a partial line before it is not completed by
    /// what follows the gap.
    pub fn gap(&mut self) {
        self.partial = Default::default();
    }

    /// The output ended: the last lines without a newline are complete.
    pub fn finish(&mut self, mut f: impl FnMut(LogStream, &[u8]) -> bool) -> bool {
        for (i, s) in [LogStream::Stdout, LogStream::Stderr]
            .into_iter()
            .enumerate()
        {
            let line = std::mem::take(&mut self.partial[i]);
            if !line.is_empty() && f(s, &line) {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that answers the first log request with one event and then goes silent without
    /// closing (a peer gone without FIN or RST), and the next with the rest. Request lines out.
    async fn silent_then_rest() -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let data = |d: &str, c: &str| {
            format!(
                r#"{{"type":"data","stream":"Stdout","data":"{d}","tsNanos":1,"cursor":"{c}"}}"#
            )
        };
        let bodies = [
            vec![data("YQ==", "c1"), String::new()], // "a", then a keepalive, then silence
            vec![
                data("Yg==", "c2"),
                r#"{"type":"end","cursor":"c3"}"#.to_string(),
            ],
        ];
        tokio::spawn(async move {
            let mut held = Vec::new();
            for (i, lines) in bodies.into_iter().enumerate() {
                let (mut s, _) = l.accept().await.unwrap();
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let mut b = [0u8; 1];
                    s.read_exact(&mut b).await.unwrap();
                    head.push(b[0]);
                }
                let _ = tx.send(
                    String::from_utf8_lossy(&head)
                        .lines()
                        .next()
                        .unwrap()
                        .into(),
                );
                let mut out = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\n\
                               transfer-encoding: chunked\r\n\r\n"
                    .to_string();
                for l in lines {
                    out += &format!("{:x}\r\n{l}\n\r\n", l.len() + 1);
                }
                if i == 1 {
                    out += "0\r\n\r\n";
                }
                s.write_all(out.as_bytes()).await.unwrap();
                held.push(s); // never closed: silent, not cut
            }
            std::future::pending::<()>().await;
        });
        (url, rx)
    }

    #[tokio::test]
    async fn a_silent_connection_is_read_again_from_the_cursor() {
        let (url, mut asked) = silent_then_rest().await;
        let cfg = kube::Config::new(url.parse().unwrap());
        let client = Client::try_from(cfg).unwrap();
        let o = LogOptions {
            follow: true,
            ..Default::default()
        };
        let mut r = Reader::new(client, crate::Door::SandboxProcess, "ns", "p", &o).unwrap();
        r.silence = Duration::from_millis(500);
        let mut got = Vec::new();
        let t0 = std::time::Instant::now();
        while let Some(ev) = tokio::time::timeout(Duration::from_secs(10), r.next())
            .await
            .expect("the reader hung on a silent connection")
            .unwrap()
        {
            match ev {
                Read::Data { data, cursor, .. } => got.push((data, cursor)),
                Read::End { cursor, .. } => got.push((b"<end>".to_vec(), cursor.render())),
                other => panic!("{other:?}"),
            }
        }
        // Each byte once, in order: no gap, no repeat.
        assert_eq!(
            got,
            [
                (b"a".to_vec(), "c1".to_string()),
                (b"b".to_vec(), "c2".to_string()),
                (b"<end>".to_vec(), "c3".to_string())
            ]
        );
        assert!(t0.elapsed() >= Duration::from_millis(500));
        assert!(!asked.recv().await.unwrap().contains("since="));
        assert!(asked.recv().await.unwrap().contains("since=c1"));
    }

    #[test]
    fn lines_split_at_newlines_only() {
        let mut l = Lines2::default();
        let mut seen = vec![];
        assert_eq!(
            l.feed(LogStream::Stdout, b"par", |x| {
                seen.push(x.to_vec());
                false
            }),
            None
        );
        assert!(seen.is_empty(), "a partial line is not matched");
        let hit = l.feed(LogStream::Stdout, b"tial\r\nnext\nrest", |x| x == b"next");
        assert_eq!(hit, Some(11), "just after the matched line's newline");
        let mut l = Lines2::default();
        assert_eq!(
            l.feed(LogStream::Stdout, b"crlf\r\n", |x| x == b"crlf\r"),
            Some(6),
            "\\r kept"
        );
        // Streams are kept apart.
        let mut l = Lines2::default();
        l.feed(LogStream::Stdout, b"ab", |_| false);
        assert_eq!(l.feed(LogStream::Stderr, b"cd\n", |x| x == b"cd"), Some(3));
        assert!(l.finish(|s, x| s == LogStream::Stdout && x == b"ab"));
    }

    /// clients/conformance/restart.json `logs`: the query of a read with `previous` (or the
    /// option refused, before any request).
    #[tokio::test]
    async fn conformance_previous() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../conformance/restart.json"))
                .expect("restart.json is JSON");
        let client =
            Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        for case in crate::conformance::cases(&doc, "logs", 6) {
            let o = LogOptions {
                follow: case["follow"].as_bool().unwrap_or(false),
                after: case["after"].as_str().map(Into::into),
                limit_bytes: case["limitBytes"].as_u64(),
                previous: case["previous"].as_bool().unwrap(),
                ..Default::default()
            };
            match (
                Reader::new(client.clone(), crate::Door::SandboxProcess, "ns", "p", &o),
                case["error"].as_str(),
            ) {
                (Ok(r), None) => {
                    let url = r.url();
                    let mut got: Vec<(String, String)> = url
                        .split_once('?')
                        .map(|(_, q)| q)
                        .unwrap_or_default()
                        .split('&')
                        .map(|kv| kv.split_once('=').expect("k=v"))
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect();
                    let mut want: Vec<(String, String)> =
                        serde_json::from_value(case["query"].clone()).expect("query pairs");
                    got.sort();
                    want.sort();
                    assert_eq!(got, want, "{case}");
                }
                (Err(Error::InvalidArgument { field, .. }), Some(want)) => {
                    assert_eq!(field, want, "{case}")
                }
                (other, _) => panic!("{case}: {:?}", other.map(|r| r.url())),
            }
        }
    }

    /// clients/conformance/cursor.json: the same cursor forms the Python client's tests run.
    const CURSORS: &str = include_str!("../../conformance/cursor.json");

    #[tokio::test]
    async fn conformance_cursor() {
        let doc: serde_json::Value = serde_json::from_str(CURSORS).expect("cursor.json is JSON");
        for case in crate::conformance::cases(&doc, "parse", 8) {
            let s = case["cursor"].as_str().expect("cursor");
            let got = Cursor::parse(s);
            if case["error"].as_bool() == Some(true) {
                assert!(got.is_err(), "{s:?}: {got:?}");
                continue;
            }
            let c = got.unwrap_or_else(|e| panic!("{s:?}: {e}"));
            assert_eq!(c.agent.as_deref(), case["agent"].as_str(), "{s:?}: agent");
            assert_eq!(Some(c.skip), case["skip"].as_u64(), "{s:?}: skip");
            assert_eq!(Some(c.render().as_str()), case["render"].as_str(), "{s:?}");
        }
        for case in crate::conformance::cases(&doc, "plus", 2) {
            let c = Cursor::parse(case["cursor"].as_str().unwrap()).unwrap();
            let n = case["plus"].as_u64().expect("plus");
            assert_eq!(
                Some(c.plus(n).render().as_str()),
                case["render"].as_str(),
                "{case}"
            );
        }
        // The reader refuses a cursor that is none, naming the option.
        let bad = LogOptions {
            after: Some(String::new()),
            ..Default::default()
        };
        let e = Reader::new(
            Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap(),
            crate::Door::SandboxProcess,
            "n",
            "p",
            &bad,
        );
        assert_eq!(
            e.err().map(|e| e.code().to_string()).as_deref(),
            Some("InvalidArgument")
        );
    }
}
