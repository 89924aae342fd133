//! The connection under an attach, and the task that keeps one: frames out and in, the stdin
//! bytes not yet known to be taken, and attaching again from where both streams are.
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::{Sink, SinkExt, StreamExt};
use sandbox_api::channel::{read_status, Frame, STDIN};
use sandbox_api::cursor::Cursor;
use sandbox_api::wire::{StdinState, TerminalSize, LOG_SILENCE_LIMIT, MAX_STDIN_WRITE};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::{AttachEvent, Cmd, Out, RECONNECT_FOR};
use crate::error::{Error, Result};
use crate::logs;
use crate::process::Process;

type WsSink = Pin<Box<dyn Sink<Message, Error = WsError> + Send>>;
type WsStream = BoxStream<'static, std::result::Result<Message, WsError>>;

/// Sent but not known to be taken, at most: past it the input waits for the process to take
/// some (asking where stdin is), so a process that does not read holds the writer back.
const MAX_UNACKED: usize = 8 << 20;
/// How often the bytes not known to be taken are checked while there are some.
const ACK_EVERY: Duration = Duration::from_secs(1);

/// The cursor `n` output bytes after `since` (the beginning when `None`).
pub fn cursor_after(since: Option<&str>, n: u64) -> String {
    let base = since
        .and_then(|c| Cursor::parse(c).ok())
        .unwrap_or_default();
    base.plus(n).render()
}

/// Where an attach reads from and who it writes as, for each of its connections.
pub struct At {
    /// The cursor it started after (`None`: the beginning, or a terminal's screen).
    pub since: Option<String>,
    /// A terminal attached from its screen, until the server names the cursor after it.
    pub screen: bool,
    /// A shared terminal's writer (stdin offsets are its own).
    pub writer: Option<String>,
}

/// One WebSocket.
pub struct Link {
    sink: WsSink,
    stream: WsStream,
}

impl Link {
    /// Attaches `received` output bytes after where `at` started (a terminal's screen: a
    /// redraw) and (with stdin) from stdin offset `stdin`.
    pub async fn open(p: &Process, at: &At, received: u64, stdin: Option<u64>) -> Result<Link> {
        let mut q = format!(
            "stdin={}&stdout=true&stderr=true&cursors=true",
            stdin.is_some()
        );
        let since = (!at.screen && (at.since.is_some() || received > 0))
            .then(|| cursor_after(at.since.as_deref(), received));
        if let Some(c) = since.filter(|c| !c.is_empty()) {
            q.push_str(&format!("&since={}", logs::encode(&c)));
        }
        if let Some(n) = stdin {
            q.push_str(&format!("&stdinOffset={n}"));
        }
        if let (Some(w), Some(_)) = (&at.writer, stdin) {
            q.push_str(&format!("&writer={w}"));
        }
        let req = http::Request::get(format!("{}?{q}", p.url("attach")))
            .body(Vec::new())
            .map_err(|e| Error::invalid("name", e.to_string()))?;
        let (sink, stream) = p.client.connect(req).await?.into_stream().split();
        Ok(Link {
            sink: Box::pin(sink),
            stream: stream.boxed(),
        })
    }

    async fn send(&mut self, f: Frame<'_>) -> bool {
        self.sink
            .send(Message::Binary(f.encode().into()))
            .await
            .is_ok()
    }
}

/// What one message from the server means to the task.
enum Heard {
    Event(AttachEvent),
    /// The connection broke (or the server said to attach again).
    Broken(String),
    /// A refusal attaching again cannot mend.
    Fatal(Error),
    /// The output that follows starts after this log cursor (after a terminal's screen).
    Cursor(String),
    /// The user closed the connection.
    Detached,
    Nothing,
}

fn hear(m: Option<std::result::Result<Message, WsError>>) -> Heard {
    let b = match m {
        Some(Ok(Message::Binary(b))) => b,
        Some(Ok(Message::Close(_))) | None => return Heard::Broken("closed".into()),
        Some(Ok(_)) => return Heard::Nothing,
        Some(Err(e)) => return Heard::Broken(e.to_string()),
    };
    match Frame::decode(&b) {
        Ok(Frame::Stdout(d)) => Heard::Event(AttachEvent::Stdout(d.to_vec())),
        Ok(Frame::Stderr(d)) => Heard::Event(AttachEvent::Stderr(d.to_vec())),
        Ok(Frame::Status(s)) => match read_status(s) {
            Ok(code) => Heard::Event(AttachEvent::Exit(code)),
            Err(f) if f.is_transient() => Heard::Broken(f.message),
            Err(f) => Heard::Fatal(Error::Api {
                code: 409,
                reason: f.reason,
                message: f.message,
            }),
        },
        Ok(Frame::Cursor(c)) => Heard::Cursor(String::from_utf8_lossy(c).into_owned()),
        Ok(_) => Heard::Nothing,
        Err(e) => Heard::Fatal(Error::Transport(format!("attach: {e}"))),
    }
}

/// The task between the two halves and the connection.
pub struct Task {
    p: Process,
    at: At,
    /// Output bytes passed on.
    received: u64,
    /// With stdin: the offset of `unacked[0]`.
    base: Option<u64>,
    unacked: Vec<u8>,
    closing: bool,
    size: Option<TerminalSize>,
    /// Since when stdin has taken nothing while bytes wait, and whether the user was told.
    stalled: (Instant, bool),
}

impl Task {
    pub fn new(p: Process, at: At, base: Option<u64>) -> Task {
        Task {
            p,
            at,
            received: 0,
            base,
            unacked: Vec::new(),
            closing: false,
            size: None,
            stalled: (Instant::now(), false),
        }
    }

    pub async fn run(
        mut self,
        mut link: Link,
        mut cmds: mpsc::Receiver<Cmd>,
        events: mpsc::Sender<Result<Out>>,
    ) {
        let mut input_open = true;
        let mut tick = tokio::time::interval(ACK_EVERY);
        // Where stdin is, asked beside the stream: past half the window, or each tick.
        let mut asking: Option<futures::future::BoxFuture<'static, Result<StdinState>>> = None;
        // The server pings after LOG_KEEPALIVE of silence: hearing nothing for
        // LOG_SILENCE_LIMIT means a connection dead without FIN or RST, not an idle process.
        let mut heard_at = tokio::time::Instant::now();
        loop {
            let heard = tokio::select! {
                c = cmds.recv(), if input_open && self.unacked.len() < MAX_UNACKED => match c {
                    Some(c) => self.command(&mut link, c).await,
                    None => {
                        input_open = false; // detached: read on until the exit
                        Heard::Nothing
                    }
                },
                m = link.stream.next() => {
                    heard_at = tokio::time::Instant::now();
                    hear(m)
                }
                _ = tokio::time::sleep_until(heard_at + LOG_SILENCE_LIMIT) => {
                    heard_at = tokio::time::Instant::now();
                    Heard::Broken("nothing heard from the server".into())
                }
                _ = events.closed() => return,
                _ = tick.tick(), if !self.unacked.is_empty() && asking.is_none() => {
                    asking = Some(self.ask());
                    Heard::Nothing
                }
                st = async { asking.as_mut().expect("guarded").await }, if asking.is_some() => {
                    asking = None;
                    if let Ok(st) = st {
                        self.taken(st.bytes);
                    }
                    Heard::Nothing
                }
            };
            if asking.is_none() && self.base.is_some() && self.unacked.len() >= MAX_UNACKED / 2 {
                asking = Some(self.ask());
            }
            match heard {
                Heard::Nothing => {}
                // From here the output is log bytes after this cursor: a reconnect goes on from
                // the exact byte instead of drawing the screen again.
                Heard::Cursor(c) => {
                    (self.at.since, self.at.screen, self.received) = (Some(c.clone()), false, 0);
                    if events.send(Ok(Out::Cursor(c))).await.is_err() {
                        return;
                    }
                }
                Heard::Detached => return,
                Heard::Event(ev) => {
                    let exit = matches!(ev, AttachEvent::Exit(_));
                    if let AttachEvent::Stdout(d) | AttachEvent::Stderr(d) = &ev {
                        self.received += d.len() as u64;
                    }
                    if events.send(Ok(Out::Event(ev))).await.is_err() || exit {
                        return;
                    }
                }
                Heard::Fatal(e) => {
                    let _ = events.send(Err(e)).await;
                    return;
                }
                Heard::Broken(why) => match self.reconnect(&why).await {
                    Ok(l) => link = l,
                    Err(e) => {
                        let _ = events.send(Err(e)).await;
                        return;
                    }
                },
            }
        }
    }

    async fn command(&mut self, link: &mut Link, c: Cmd) -> Heard {
        let ok = match c {
            Cmd::Stdin(b) => {
                self.unacked.extend_from_slice(&b);
                link.send(Frame::Stdin(&b)).await
            }
            Cmd::Close => {
                self.closing = true;
                link.send(Frame::Close(STDIN)).await
            }
            Cmd::Resize(s) => {
                self.size = Some(s);
                link.send(Frame::Resize(s)).await
            }
            Cmd::Detach => {
                let _ = link.sink.close().await;
                return Heard::Detached;
            }
        };
        if ok {
            Heard::Nothing
        } else {
            Heard::Broken("sending".into())
        }
    }

    /// Forgets the bytes the process has taken (stdin's offset says how many).
    async fn trim(&mut self) {
        if self.base.is_none() {
            return;
        }
        if let Ok(st) = self.ask().await {
            self.taken(st.bytes);
        }
    }

    /// Where stdin is (this writer's own count on a shared terminal), as a future that holds
    /// nothing of the task.
    fn ask(&self) -> futures::future::BoxFuture<'static, Result<StdinState>> {
        let p = self.p.clone();
        match (&self.at.writer, self.base) {
            (Some(w), Some(base)) => {
                let w = w.clone();
                Box::pin(async move { p.stdin_state_of(&w, base).await })
            }
            _ => Box::pin(async move { p.stdin_state().await }),
        }
    }

    /// Stdin has taken `bytes` in all: what is below that is no longer kept.
    fn taken(&mut self, bytes: u64) {
        let Some(base) = self.base else { return };
        let taken = bytes.saturating_sub(base).min(self.unacked.len() as u64);
        self.unacked.drain(..taken as usize);
        self.base = Some(base + taken);
        self.stall_check(taken > 0);
    }

    /// Tells the process's stall hook, once per stall, that stdin takes nothing.
    fn stall_check(&mut self, progress: bool) {
        if progress || self.unacked.is_empty() {
            self.stalled = (Instant::now(), false);
            return;
        }
        let Some(h) = &self.p.stdin_stall else { return };
        let waited = self.stalled.0.elapsed();
        if !self.stalled.1 && waited >= h.after {
            self.stalled.1 = true;
            (h.hook)(&crate::StdinStall {
                pending: self.unacked.len() as u64,
                waited,
            });
        }
    }

    /// Attaches again from where output and stdin are, and sends what stdin has not taken.
    async fn reconnect(&mut self, why: &str) -> Result<Link> {
        let deadline = Instant::now() + RECONNECT_FOR;
        let mut last = Error::Transport(format!("attach: {why}"));
        while Instant::now() < deadline {
            if self.base.is_some() {
                self.trim().await;
            }
            // Stdin closed (the EOF taken): attach for the output alone (an attach with stdin
            // to a closed one is refused).
            let stdin = match self.closing && self.unacked.is_empty() {
                true if self.ask().await.is_ok_and(|s| s.closed) => None,
                _ => self.base,
            };
            match Link::open(&self.p, &self.at, self.received, stdin).await {
                Ok(mut l) => {
                    let mut resent = true;
                    for chunk in self.unacked.chunks(MAX_STDIN_WRITE) {
                        resent = resent && l.send(Frame::Stdin(chunk)).await;
                    }
                    resent = resent
                        && (!self.closing || stdin.is_none() || l.send(Frame::Close(STDIN)).await)
                        && match self.size {
                            Some(s) => l.send(Frame::Resize(s)).await,
                            None => true,
                        };
                    if resent {
                        return Ok(l);
                    }
                }
                Err(e) if e.is_transient() => last = e,
                Err(e) => return Err(e),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(last)
    }
}
