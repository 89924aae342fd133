//! Readiness probes. tcpSocket and httpGet run on a thread that has joined the pod's network
//! namespace, so a listener bound only to 127.0.0.1 inside the pod counts (kubelet probes, which
//! dial the pod IP from the host, miss those). logMatch runs on the supervisor's output path.
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sched::{setns, CloneFlags};
use sandbox_wire::wire::{LogStream, ProbeKind, StatusRange};

use crate::ledger::Stream;

const DIAL_TIMEOUT: Duration = Duration::from_secs(1);

fn addrs(port: u16) -> [SocketAddr; 2] {
    [
        SocketAddr::from(([127, 0, 0, 1], port)),
        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port)),
    ]
}

/// Why a port check did not pass, classified here once for tcpSocket and httpGet: whether
/// anything accepted the connection is the first thing a user needs to know.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PortFailure {
    #[error("nothing accepted a connection on port {0}")]
    NotAccepted(u16),
    #[error("port {0} accepted the connection but sent no HTTP status line")]
    NoHttpAnswer(u16),
}

pub fn tcp_check(port: u16) -> Result<(), PortFailure> {
    match addrs(port)
        .iter()
        .any(|a| TcpStream::connect_timeout(a, DIAL_TIMEOUT).is_ok())
    {
        true => Ok(()),
        false => Err(PortFailure::NotAccepted(port)),
    }
}

pub fn tcp_probe(port: u16) -> bool {
    tcp_check(port).is_ok()
}

/// Most time one address may take, dial included: a server that trickles its answer a byte at
/// a time cannot hold a probe thread longer than this.
const HTTP_BUDGET: Duration = Duration::from_secs(2);

/// Status code of `GET path` on localhost:port, if the server answered with an HTTP status line.
pub fn http_status(port: u16, path: &str) -> Result<u16, PortFailure> {
    let mut accepted = false;
    for addr in addrs(port) {
        let until = Instant::now() + HTTP_BUDGET;
        let Ok(mut s) = TcpStream::connect_timeout(&addr, DIAL_TIMEOUT) else {
            continue;
        };
        accepted = true;
        let left = || until.saturating_duration_since(Instant::now());
        let _ = s.set_read_timeout(Some(left().max(Duration::from_millis(1))));
        let _ = s.set_write_timeout(Some(left().max(Duration::from_millis(1))));
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: localhost:{port}\r\nUser-Agent: sandbox-agent-probe/1\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        if s.write_all(req.as_bytes()).is_err() {
            continue;
        }
        let mut buf = [0u8; 64];
        let mut n = 0;
        while n < buf.len() {
            if left().is_zero() {
                break;
            }
            let _ = s.set_read_timeout(Some(left().max(Duration::from_millis(1))));
            match s.read(&mut buf[n..]) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
            if buf[..n].windows(2).any(|w| w == b"\r\n") {
                break;
            }
        }
        let line = String::from_utf8_lossy(&buf[..n]);
        let mut parts = line.split_whitespace();
        if parts.next().is_some_and(|v| v.starts_with("HTTP/")) {
            if let Some(code) = parts.next().and_then(|c| c.parse().ok()) {
                return Ok(code);
            }
        }
    }
    Err(match accepted {
        true => PortFailure::NoHttpAnswer(port),
        false => PortFailure::NotAccepted(port),
    })
}

pub fn http_probe(port: u16, path: &str, range: &StatusRange) -> bool {
    http_status(port, path).is_ok_and(|c| c >= range.min && c <= range.max)
}

/// Outcome sent from a probe thread to the supervisor loop (one byte on a pipe).
pub const READY: u8 = b'R';
pub const TIMED_OUT: u8 = b'T';

/// Runs a network probe every `period` inside the network namespace at `netns` until it passes,
/// `deadline` passes, or `cancel` is set; reports once on `notify`.
pub fn spawn_net_prober(
    netns: PathBuf,
    probe: ProbeKind,
    period: Duration,
    deadline: Option<Instant>,
    cancel: Arc<AtomicBool>,
    notify: OwnedFd,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    // Opened before the thread starts so a vanished namespace is reported by the caller.
    let ns = File::open(&netns)?;
    std::thread::Builder::new()
        .name("probe".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            let mut notify = File::from(notify);
            // Only this thread changes namespace; the supervisor's other work stays on the host side.
            if let Err(e) = setns(&ns, CloneFlags::CLONE_NEWNET) {
                // Not eprintln!: it panics when stderr (the log on a full state dir) fails.
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "readiness: joining {}: {e}",
                    netns.display()
                );
                return;
            }
            loop {
                if cancel.load(Ordering::Relaxed) {
                    return;
                }
                let ok = match &probe {
                    ProbeKind::TcpSocket { port } => tcp_probe(*port),
                    ProbeKind::HttpGet { port, path, status } => http_probe(*port, path, status),
                    ProbeKind::LogMatch { .. } => return,
                };
                if ok {
                    let _ = notify.write_all(&[READY]);
                    return;
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    let _ = notify.write_all(&[TIMED_OUT]);
                    return;
                }
                std::thread::sleep(period);
            }
        })
}

/// Line-oriented regex matcher over the selected output stream(s). Only complete lines are
/// matched: a line counts once its newline arrives, or, for a last line without one, once its
/// stream is closed (end of file). A partial line is never matched while more of it may come
/// (`printf 'port=80'; sleep 2; printf '80\n'` must not match `^port=80$`).
pub struct LogMatcher {
    re: regex_lite::Regex,
    stream: LogStream,
    partial: [Vec<u8>; 2],
}

/// Longest unterminated line kept for matching; bounds memory for output without newlines.
const MAX_PARTIAL: usize = 64 * 1024;

impl LogMatcher {
    pub fn new(pattern: &str, stream: LogStream) -> Result<Self, regex_lite::Error> {
        Ok(LogMatcher {
            re: regex_lite::Regex::new(pattern)?,
            stream,
            partial: [Vec::new(), Vec::new()],
        })
    }

    fn wanted(&self, stream: Stream) -> bool {
        match self.stream {
            LogStream::Both => true,
            LogStream::Stdout => stream == Stream::Stdout,
            LogStream::Stderr => stream == Stream::Stderr,
        }
    }

    /// Feeds output; `Some` once a complete line matches: the line and where in `data` it
    /// ends (just after its newline), so the output can be cut there for a resumable cursor.
    pub fn feed(&mut self, stream: Stream, data: &[u8]) -> Option<LineMatch> {
        if !self.wanted(stream) {
            return None;
        }
        let buf = &mut self.partial[stream as usize - 1];
        let mut at = 0;
        while let Some(nl) = data[at..].iter().position(|&b| b == b'\n') {
            buf.extend_from_slice(&data[at..at + nl]);
            at += nl + 1;
            let line = String::from_utf8_lossy(buf).into_owned();
            buf.clear();
            if self.re.is_match(&line) {
                return Some(LineMatch {
                    line: shorten(line),
                    end: at,
                });
            }
        }
        buf.extend_from_slice(&data[at..]);
        if buf.len() > MAX_PARTIAL {
            let cut = buf.len() - MAX_PARTIAL;
            buf.drain(..cut);
        }
        None
    }

    /// The stream was closed: its last line, if it had no newline, is complete now.
    pub fn eof(&mut self, stream: Stream) -> Option<String> {
        if !self.wanted(stream) {
            return None;
        }
        let buf = std::mem::take(&mut self.partial[stream as usize - 1]);
        let line = String::from_utf8_lossy(&buf).into_owned();
        (!buf.is_empty() && self.re.is_match(&line)).then(|| shorten(line))
    }
}

/// A `logMatch` hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineMatch {
    /// The matched line (without its newline), at most [`MATCHED_LINE_MAX`] bytes.
    pub line: String,
    /// Index in the fed chunk just after the line's newline.
    pub end: usize,
}

/// Longest matched line kept in the record and status.
pub const MATCHED_LINE_MAX: usize = 256;

fn shorten(mut line: String) -> String {
    if line.len() > MATCHED_LINE_MAX {
        let mut cut = MATCHED_LINE_MAX;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn log_matcher_lines_streams_and_partials() {
        let mut m = LogMatcher::new("ready on [0-9]+", LogStream::Stderr).unwrap();
        assert!(
            m.feed(Stream::Stdout, b"ready on 80\n").is_none(),
            "stdout ignored"
        );
        assert!(m.feed(Stream::Stderr, b"starting\nready o").is_none());
        assert_eq!(
            m.feed(Stream::Stderr, b"n 8080\nmore\n"),
            Some(LineMatch {
                line: "ready on 8080".into(),
                end: 7
            }),
            "the line, and where it ends in this chunk"
        );
        let mut m = LogMatcher::new("x", LogStream::Both).unwrap();
        let long = format!("{}\n", "é".repeat(300));
        let hit = m.feed(Stream::Stdout, format!("{long}x").as_bytes());
        assert!(
            hit.is_none(),
            "no x in the first line; the second is not complete"
        );
        assert_eq!(m.eof(Stream::Stdout).as_deref(), Some("x"));
        let mut m = LogMatcher::new("é", LogStream::Both).unwrap();
        let hit = m.feed(Stream::Stdout, long.as_bytes()).unwrap();
        assert_eq!(
            (hit.line.len(), hit.end),
            (256, 601),
            "cut at a character boundary"
        );
    }

    #[test]
    fn log_matcher_waits_for_the_end_of_a_line() {
        // `printf 'port=80'; sleep 2; printf '80\n'`: the line is port=8080.
        let mut m = LogMatcher::new("^port=80$", LogStream::Both).unwrap();
        assert!(
            m.feed(Stream::Stdout, b"port=80").is_none(),
            "partial line matched"
        );
        assert!(m.feed(Stream::Stdout, b"80\n").is_none());
        assert!(m.eof(Stream::Stdout).is_none());
        // A last line without a newline counts once its stream is closed.
        let mut m = LogMatcher::new("^go$", LogStream::Both).unwrap();
        assert!(m.feed(Stream::Stdout, b"go").is_none());
        assert!(m.eof(Stream::Stderr).is_none(), "the other stream's end");
        assert_eq!(m.eof(Stream::Stdout).as_deref(), Some("go"));
        let mut m = LogMatcher::new("^go$", LogStream::Stderr).unwrap();
        assert!(m.feed(Stream::Stdout, b"go").is_none());
        assert!(m.eof(Stream::Stdout).is_none(), "stream not selected");
    }

    #[test]
    fn tcp_and_http_probes_against_real_listeners() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in l.incoming().take(2) {
                let mut s = s.unwrap();
                let mut b = [0u8; 512];
                let _ = s.read(&mut b);
                let _ = s.write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n");
            }
        });
        assert!(tcp_probe(port));
        assert_eq!(http_status(port, "/healthz"), Ok(204));
        assert!(!http_probe(port, "/", &StatusRange { min: 200, max: 203 }));
        drop(TcpListener::bind("127.0.0.1:0").unwrap());
    }

    /// A listener that is gone is told apart from a server that says nothing, for both kinds.
    #[test]
    fn port_failures_say_whether_anything_accepted() {
        let gone = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = gone.local_addr().unwrap().port();
        drop(gone);
        assert_eq!(tcp_check(port), Err(PortFailure::NotAccepted(port)));
        let e = http_status(port, "/").unwrap_err();
        assert_eq!(e, PortFailure::NotAccepted(port));
        assert_eq!(
            e.to_string(),
            format!("nothing accepted a connection on port {port}")
        );
        let mute = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = mute.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in mute.incoming().take(1) {
                drop(s); // accepted, closed without a word
            }
        });
        assert_eq!(http_status(port, "/"), Err(PortFailure::NoHttpAnswer(port)));
    }
}
