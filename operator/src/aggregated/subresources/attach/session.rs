//! One attach connection: output relayed from the agent as stdout/stderr frames, stdin frames
//! written by offset (exactly once, with the pipe's back-pressure: no frame is read while a
//! write waits), resizes, and the exit code as the final status. The connection holds nothing
//! the process needs: when it ends, the process runs on, stdin stays open, and a client
//! attaches again from its cursor and stdin offset.
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket};
use base64::Engine;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use sandbox_api::channel::{exit_status, failure, Frame, STDIN};
use sandbox_api::cursor::Cursor;
use sandbox_api::wire::{
    log_line_is_keepalive, writer_id_from, ErrorCode, LogEvent, LogQuery, LogStream, ProcessRecord,
    StdinState, StdinWriter, TerminalSize, LOG_KEEPALIVE, MAX_STDIN_WRITE,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::{debug, info};

use super::super::error::SubresourceError;
use super::super::locate::Located;
use super::super::relay;
use super::order::{Next, Ordered};
use crate::agent::{AgentClient, AgentError};

#[derive(Debug)]
pub struct Options {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    /// What the client asked (`None`: whatever the process has).
    pub tty: Option<bool>,
    /// Output after this cursor; `None`: a terminal's current screen, else all that is kept.
    pub since: Option<Cursor>,
    pub stdin_offset: Option<u64>,
    /// A shared terminal's writer the client keeps across reconnects.
    pub writer: Option<String>,
    /// Tell the client the cursor the output starts after (after a screen).
    pub cursors: bool,
}

pub struct Session {
    agents: AgentClient,
    at: Located,
    name: String,
    opts: Options,
    v5: bool,
    /// Who writes stdin: on a terminal, a writer of its own (offsets count its bytes, so
    /// attachers share the terminal); the requester, named when another writer collides.
    who: StdinWriter,
}

impl Session {
    pub fn new(
        agents: AgentClient,
        at: Located,
        name: String,
        opts: Options,
        user: String,
        v5: bool,
    ) -> Result<Session, SubresourceError> {
        let id = match (&opts.writer, at.tty) {
            (_, false) => String::new(),
            (Some(w), true) => w.clone(),
            (None, true) => {
                let mut raw = [0u8; 12];
                getrandom::fill(&mut raw)
                    .map_err(|e| SubresourceError::Internal(format!("attach: a writer id: {e}")))?;
                writer_id_from(raw)
            }
        };
        Ok(Session {
            agents,
            at,
            name,
            opts,
            v5,
            who: StdinWriter { id, by: user },
        })
    }
}

/// Why a session ended before the process did: the final status says it.
struct Ended(Value);

type Out = mpsc::Sender<Message>;

pub async fn run(socket: WebSocket, s: Session) {
    let (sink, stream) = socket.split();
    let (tx, rx) = mpsc::channel::<Message>(16);
    let writer = tokio::spawn(write(sink, rx));
    let end = tokio::select! {
        e = output(&s, &tx) => e,
        e = input(&s, stream) => e,
    };
    if let Some(Ended(status)) = end {
        let frame = Frame::Status(&serde_json::to_vec(&status).expect("a status is JSON")).encode();
        let _ = tx.send(Message::Binary(frame.into())).await;
    }
    let _ = tx.send(Message::Close(None)).await;
    drop(tx);
    let _ = writer.await;
    debug!(name = %s.name, "attach session ended");
}

/// Everything to the client goes through here, with a ping after `LOG_KEEPALIVE` of silence so
/// that every hop (the API server's proxy included) sees a live connection.
async fn write(mut sink: SplitSink<WebSocket, Message>, mut rx: mpsc::Receiver<Message>) {
    loop {
        let m = match tokio::time::timeout(LOG_KEEPALIVE, rx.recv()).await {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(_) => Message::Ping(Bytes::from_static(b"keepalive")),
        };
        let close = matches!(m, Message::Close(_));
        if sink.send(m).await.is_err() || close {
            break;
        }
    }
    let _ = sink.close().await;
}

fn agent_failure(e: AgentError) -> Ended {
    Ended(failure(
        "ServiceUnavailable",
        &format!("{e}; attach again to resume"),
    ))
}

/// The output from the cursor asked, then the exit. `Some`: the status to end with; `None`: the
/// client went away.
async fn output(s: &Session, tx: &Out) -> Option<Ended> {
    let stream = match (s.opts.stdout, s.opts.stderr || s.at.tty) {
        (true, true) => LogStream::Both,
        (true, false) => LogStream::Stdout,
        (false, true) => LogStream::Stderr,
        (false, false) => return std::future::pending().await,
    };
    let since = match &s.opts.since {
        Some(c) => c.clone(),
        None if s.at.tty => match screen(s, tx).await {
            Ok(c) if s.opts.cursors => {
                let frame = Frame::Cursor(c.render().as_bytes()).encode();
                if tx.send(Message::Binary(frame.into())).await.is_err() {
                    return None;
                }
                c
            }
            Ok(c) => c,
            Err(()) => return None,
        },
        None => Cursor::default(),
    };
    let query = LogQuery {
        since: since.agent.clone(),
        follow: true,
        stream: Some(stream),
        ..Default::default()
    };
    let (url, id) = (&s.at.agent, &s.at.exec_id);
    let first = match s.agents.logs(url, id, &query).await {
        Ok(r) => r,
        Err(e) => return Some(agent_failure(e)),
    };
    let mut lines = relay::lines(s.agents.clone(), url.clone(), id.clone(), query, first);
    let mut skip = since.skip;
    while let Some(line) = lines.recv().await {
        let line = match line {
            Ok(_) if tx.is_closed() => return None,
            Ok(l) if log_line_is_keepalive(&l) => continue,
            Ok(l) => l,
            Err(e) => {
                return Some(Ended(failure(
                    "ServiceUnavailable",
                    &format!("{e}; attach again to resume"),
                )))
            }
        };
        let event: LogEvent = match serde_json::from_slice(&line) {
            Ok(e) => e,
            Err(e) => {
                return Some(Ended(failure(
                    "InternalError",
                    &format!("a log event: {e}"),
                )))
            }
        };
        match event {
            LogEvent::Data { stream, data, .. } => {
                let mut bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .unwrap_or_default();
                // A cursor `C+n` resumes n bytes after C: drop them, across events.
                let drop = skip.min(bytes.len() as u64) as usize;
                skip -= drop as u64;
                bytes.drain(..drop);
                if bytes.is_empty() {
                    continue;
                }
                let frame = match stream {
                    LogStream::Stderr => Frame::Stderr(&bytes),
                    _ => Frame::Stdout(&bytes),
                };
                if tx
                    .send(Message::Binary(frame.encode().into()))
                    .await
                    .is_err()
                {
                    return None;
                }
            }
            LogEvent::End {
                record: Some(r), ..
            } => return Some(Ended(end_status(&r))),
            LogEvent::End { record: None, .. } | LogEvent::More { .. } => {
                return Some(Ended(failure(
                    "ServiceUnavailable",
                    "the output ended early; attach again to resume",
                )))
            }
            LogEvent::Truncated { .. } => {}
        }
    }
    Some(Ended(failure(
        "ServiceUnavailable",
        "the node's agent ended the output; attach again to resume",
    )))
}

/// A terminal attached without a cursor starts from what it shows now (one redraw, no query
/// from its history), then its output after that: the cursor to follow from. A process whose
/// supervisor keeps no screen (older, or ended) is attached from the beginning, as before.
/// `Err`: the client went away.
async fn screen(s: &Session, tx: &Out) -> Result<Cursor, ()> {
    let shot = match s.agents.screen(&s.at.agent, &s.at.exec_id).await {
        Ok(shot) => shot,
        Err(e) => {
            debug!(name = %s.name, error = %e, "attach: no screen; from the beginning");
            return Ok(Cursor::default());
        }
    };
    let redraw = base64::engine::general_purpose::STANDARD
        .decode(&shot.data)
        .unwrap_or_default();
    if !redraw.is_empty() {
        let frame = Frame::Stdout(&redraw).encode();
        tx.send(Message::Binary(frame.into()))
            .await
            .map_err(|_| ())?;
    }
    Ok(Cursor::of_agent(shot.cursor))
}

/// The exit code as kubectl reads it, or why there is none. A final record without an exit is
/// an end too (a failed start of a later run; a stop or the container's end during a restart's
/// back-off): `Gone`, which clients do not retry, since attaching again replays the same end.
fn end_status(r: &ProcessRecord) -> Value {
    match (&r.exit, &r.error) {
        (Some(exit), _) => exit_status(exit.code),
        (None, Some(e)) => failure("Gone", &format!("{}: {}", e.code, e.message)),
        (None, None) => failure("Gone", &ended_without_exit(r)),
    }
}

fn ended_without_exit(r: &ProcessRecord) -> String {
    let why = r
        .end_reason
        .map_or_else(String::new, |e| format!(" ({e:?})"));
    match &r.last_exit {
        Some(l) => format!(
            "the process ended{why} while no run was in progress; its last run exited with code {}",
            l.exit.code
        ),
        None => format!("the process ended{why} without an exit code"),
    }
}

/// A write to the agent in flight; it owns the stdin state and gives it back.
type Inflight<'a> = futures::future::BoxFuture<'a, (Stdin<'a>, Result<(), Ended>)>;

/// Frames from the client until it closes. `Some`: the status to end with.
/// `None`: the client went away (the process runs on).
///
/// Stdin is pipelined: while one write is with the agent, the frames that arrive meanwhile are
/// gathered (up to one write's size: the pipe's back-pressure reaches the client past that) and
/// go as the next write, so a fast writer pays one round trip per batch and never waits idle.
async fn input(s: &Session, mut stream: SplitStream<WebSocket>) -> Option<Ended> {
    // A terminal's writer starts at its own 0 (or where its client says it is).
    let offset = match s.at.tty {
        true => Some(s.opts.stdin_offset.unwrap_or(0)),
        false => s.opts.stdin_offset,
    };
    let mut idle = Some(Stdin {
        s,
        offset,
        closed: false,
    });
    let mut inflight: Option<Inflight<'_>> = None;
    // `close`: the client ended stdin (bytes after it are dropped); `eof_sent`: the agent has it.
    let mut queue = Ordered::default();
    let (mut close, mut eof_sent, mut gone) = (false, false, false);
    loop {
        if let Some(st) = idle.take() {
            match queue.next(MAX_STDIN_WRITE) {
                Next::Resize(size) => {
                    resize(s, size).await;
                    idle = Some(st);
                    continue;
                }
                Next::Bytes(data) => {
                    // EOF goes with the last bytes: after everything sent before it.
                    let eof = close && queue.is_empty();
                    eof_sent |= eof;
                    inflight = Some(Box::pin(write_owned(st, data, eof)));
                }
                Next::Nothing if close && !eof_sent => {
                    eof_sent = true;
                    inflight = Some(Box::pin(write_owned(st, Vec::new(), true)));
                }
                Next::Nothing => idle = Some(st),
            }
        }
        if gone && inflight.is_none() {
            return None;
        }
        let reading = !gone && queue.waiting_bytes() < MAX_STDIN_WRITE;
        tokio::select! {
            (st, r) = async { inflight.as_mut().expect("guarded").await }, if inflight.is_some() => {
                inflight = None;
                if let Err(e) = r {
                    return Some(e);
                }
                idle = Some(st);
            }
            m = stream.next(), if reading => {
                let data = match m {
                    Some(Ok(Message::Binary(b))) => b,
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                        // What arrived before is still written: the client sent it.
                        gone = true;
                        continue;
                    }
                    Some(Ok(_)) => continue,
                };
                if let Err(e) = frame(s, &data, &mut queue, &mut close) {
                    return Some(e);
                }
            }
        }
    }
}

async fn write_owned(
    mut st: Stdin<'_>,
    data: Vec<u8>,
    close: bool,
) -> (Stdin<'_>, Result<(), Ended>) {
    let r = st.write(&data, close).await;
    (st, r)
}

/// One frame from the client: stdin bytes and resizes join the queue in their order, a close of
/// stdin sets `close`.
fn frame(s: &Session, data: &[u8], queue: &mut Ordered, close: &mut bool) -> Result<(), Ended> {
    match Frame::decode(data) {
        Ok(Frame::Stdin(b)) if s.opts.stdin => {
            if !*close {
                queue.push_bytes(b)
            }
        }
        // v4 has no close channel: its clients end stdin with a one-shot `close` write.
        Ok(Frame::Close(STDIN)) if s.opts.stdin && s.v5 => *close = true,
        Ok(Frame::Resize(size)) if s.at.tty => queue.push_resize(size),
        Ok(Frame::Resize(_)) => {}
        Ok(f) => {
            let m = format!("attach: {f:?} was not expected (stdin={})", s.opts.stdin);
            return Err(Ended(failure("BadRequest", &m)));
        }
        Err(e) => return Err(Ended(failure("BadRequest", &format!("attach: {e}")))),
    }
    Ok(())
}

/// A resize, when the keys sent before it have been written.
async fn resize(s: &Session, size: TerminalSize) {
    if let Err(e) = s.agents.resize(&s.at.agent, &s.at.exec_id, size).await {
        info!(name = %s.name, error = %e, "attach: resize");
    }
}

/// Stdin by offset: each batch is written at the offset after the last one the supervisor
/// took; what the pipe has no room for is sent again after a pause (back-pressure).
struct Stdin<'a> {
    s: &'a Session,
    offset: Option<u64>,
    /// Stdin was found closed (or the process ended): nothing more is written.
    closed: bool,
}

impl Stdin<'_> {
    async fn state(&self) -> Result<StdinState, Ended> {
        let rec = self
            .s
            .agents
            .get(&self.s.at.agent, &self.s.at.exec_id)
            .await
            .map_err(agent_failure)?;
        rec.and_then(|r| r.stdin).ok_or_else(|| {
            Ended(failure(
                "Conflict",
                "StdinUnavailable: the process has no stdin",
            ))
        })
    }

    async fn write(&mut self, data: &[u8], close: bool) -> Result<(), Ended> {
        if self.closed {
            return Ok(());
        }
        let start = match self.offset {
            Some(o) => o,
            None => self.state().await?.bytes,
        };
        let end = start + data.len() as u64;
        let (mut at, mut pause) = (start, Duration::from_millis(2));
        loop {
            let from = (at - start) as usize;
            let body = Bytes::copy_from_slice(&data[from..]);
            let r = self
                .s
                .agents
                .stdin(
                    &self.s.at.agent,
                    &self.s.at.exec_id,
                    at,
                    body,
                    close,
                    &self.s.who,
                )
                .await;
            match r {
                Ok(st) if st.bytes >= end => {
                    self.offset = Some(end);
                    return Ok(());
                }
                Ok(st) => {
                    // The pipe is full. A reader that took some drains it in moments: look again
                    // at once; only one that took nothing earns a growing pause.
                    pause = if st.bytes > at {
                        Duration::from_micros(500)
                    } else {
                        (pause * 2).min(Duration::from_millis(100))
                    };
                    at = st.bytes.max(at);
                    tokio::time::sleep(pause).await;
                }
                Err(e) if e.api_code() == Some(ErrorCode::StdinUnavailable) => {
                    // Ended, or closed meanwhile (the process closed it, or another writer sent
                    // EOF): the output goes on and says how it ends; input after it is moot, as
                    // `kubectl exec -i` drops input a process no longer reads. Nothing more is
                    // sent, so no later write or EOF lands past stdin's end.
                    self.closed = true;
                    return Ok(());
                }
                // A terminal writer's offsets are its own: nobody else moves them.
                Err(AgentError::Api { error, .. })
                    if error.code == ErrorCode::StdinOffsetMismatch
                        && !self.s.who.id.is_empty() =>
                {
                    let m = format!("{}: {}", error.code, error.message);
                    return Err(Ended(failure("Conflict", &m)));
                }
                Err(e) if e.api_code() == Some(ErrorCode::StdinOffsetMismatch) => {
                    at = self.overlap(data, start, at).await?;
                }
                Err(AgentError::Api { error, .. }) => {
                    let m = format!("{}: {}", error.code, error.message);
                    return Err(Ended(failure("Conflict", &m)));
                }
                Err(e) => return Err(agent_failure(e)),
            }
        }
    }

    /// A write from `at` straddled stdin's end: an earlier connection of the same client (cut,
    /// its last write landing after this one asked where stdin was) took part of these bytes.
    /// That part is sent again as a retry, which the supervisor acknowledges only if the bytes
    /// are the same (else `StdinConflict`); the rest goes on from the end. A gap is refused.
    async fn overlap(&self, data: &[u8], start: u64, at: u64) -> Result<u64, Ended> {
        let end_now = self.state().await?.bytes;
        let upto = end_now.min(start + data.len() as u64);
        if upto <= at {
            let m = format!(
                "StdinOffsetMismatch: stdin is at byte {end_now}, this attach writes from {at}"
            );
            return Err(Ended(failure("Conflict", &m)));
        }
        let part = Bytes::copy_from_slice(&data[(at - start) as usize..(upto - start) as usize]);
        let (url, id) = (&self.s.at.agent, &self.s.at.exec_id);
        match self
            .s
            .agents
            .stdin(url, id, at, part, false, &self.s.who)
            .await
        {
            Ok(_) => Ok(upto),
            Err(AgentError::Api { error, .. }) => {
                let m = format!("{}: {}", error.code, error.message);
                Err(Ended(failure("Conflict", &m)))
            }
            Err(e) => Err(agent_failure(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use sandbox_api::channel::read_status;
    use sandbox_api::wire::{EndReason, ExitStatus, Phase, RunEnd};

    use super::*;

    /// An end with an exit gives its code; one without (a stop during a restart's back-off, a
    /// later run that could not start) is final for both clients: attaching again would replay it.
    #[test]
    fn every_end_is_final_for_the_clients() {
        let exit = |code| ExitStatus {
            code,
            signal: None,
            timed_out: false,
        };
        let mut r = ProcessRecord {
            phase: Phase::Exited,
            exit: Some(exit(3)),
            end_reason: Some(EndReason::Exited),
            ..ProcessRecord::starting("x", "p", "c", "")
        };
        let status = |r: &ProcessRecord| read_status(&serde_json::to_vec(&end_status(r)).unwrap());
        assert_eq!(status(&r), Ok(3));
        r.exit = None;
        r.end_reason = Some(EndReason::Stopped);
        r.last_exit = Some(RunEnd {
            exit: exit(3),
            end_reason: EndReason::Exited,
            started_at: None,
            finished_at: "2027-01-01T00:00:00Z".into(),
            output_from: "c0.0.0".into(),
            output_until: "c1.1.0".into(),
        });
        let f = status(&r).unwrap_err();
        assert!(!f.is_transient(), "{f:?}");
        assert!(
            f.message.contains("Stopped") && f.message.contains("code 3"),
            "{f:?}"
        );
        r.phase = Phase::Error;
        r.error = Some(sandbox_api::wire::ApiError {
            code: sandbox_api::wire::ErrorCode::ProcessSpawnFailed,
            message: "exec: not found".into(),
        });
        assert!(!status(&r).unwrap_err().is_transient());
    }
}
