//! The relay of a log read from the node's agent to the API server, which notices a silent
//! agent connection. Both ends send an empty line after `LOG_KEEPALIVE` of silence, so a hop
//! that carries nothing for `LOG_SILENCE_LIMIT` is dead (a peer gone without FIN or RST, a
//! dropped NAT entry) rather than idle. A silent agent connection is replaced by a new one from
//! the last cursor relayed, so the reader sees neither a gap nor a repeat; with `maxBytes` (whose
//! remaining budget only the reader knows) the response ends with `more` at that cursor instead,
//! which every reader already follows. Towards the API server the relay sends its own
//! keepalives, also while it reconnects, so the next hop's reader can tell idle from dead too.
use std::time::Duration;

use axum::body::{Body, Bytes};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt, TryStreamExt};
use sandbox_api::wire::{
    log_line_is_keepalive, LogEvent, LogQuery, LOG_KEEPALIVE, LOG_SILENCE_LIMIT,
};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};
use tracing::{info, warn};

use crate::agent::AgentClient;

/// The agent's response body, chunk by chunk.
pub type Chunks = BoxStream<'static, Result<Bytes, String>>;
/// Opens a read at the agent for a query.
pub type Connect = Box<dyn Fn(LogQuery) -> BoxFuture<'static, Result<Chunks, String>> + Send>;

/// Longest event line accepted from an agent (one pipe read of output, base64, is far less).
const MAX_LINE: usize = 16 << 20;

#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub keepalive: Duration,
    pub silence: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            keepalive: LOG_KEEPALIVE,
            silence: LOG_SILENCE_LIMIT,
        }
    }
}

/// The response body relaying `first` (the agent's answer to `query`), with reconnects.
pub fn body(
    agents: AgentClient,
    url: String,
    id: String,
    query: LogQuery,
    first: reqwest::Response,
) -> Body {
    let mut rx = lines(agents, url, id, query, first);
    Body::from_stream(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

/// The relayed lines (events and keepalives, each ending in a newline) of the agent's answer
/// `first` to `query`, with reconnects; an error breaks the read.
pub fn lines(
    agents: AgentClient,
    url: String,
    id: String,
    query: LogQuery,
    first: reqwest::Response,
) -> mpsc::Receiver<Result<Bytes, std::io::Error>> {
    let connect: Connect = Box::new(move |q: LogQuery| {
        let (agents, url, id) = (agents.clone(), url.clone(), id.clone());
        async move {
            let resp = agents
                .logs(&url, &id, &q)
                .await
                .map_err(|e| e.to_string())?;
            Ok(chunks(resp))
        }
        .boxed()
    });
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(run(connect, query, chunks(first), Timing::default(), tx));
    rx
}

fn chunks(resp: reqwest::Response) -> Chunks {
    resp.bytes_stream()
        .map_err(|e| crate::agent::client::error_chain(&e))
        .boxed()
}

/// Complete lines out of chunks.
#[derive(Default)]
struct Lines(Vec<u8>);

impl Lines {
    fn feed(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        self.0.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(i) = self.0.iter().position(|b| *b == b'\n') {
            let rest = self.0.split_off(i + 1);
            let mut line = std::mem::replace(&mut self.0, rest);
            line.pop();
            out.push(line);
        }
        if self.0.len() > MAX_LINE {
            return Err(format!(
                "an event longer than {MAX_LINE} bytes from the agent"
            ));
        }
        Ok(out)
    }
}

/// What the relay knows of the read: where the reader is, and whether output reached it.
struct Position {
    query: LogQuery,
    data_relayed: bool,
}

/// What an agent line is to the relay.
#[derive(Debug, PartialEq)]
enum Line {
    Keepalive,
    /// An event to relay; `last`: the response ends with it.
    Event {
        last: bool,
    },
}

/// What to do about a silent agent connection.
#[derive(Debug, PartialEq)]
enum Silence {
    /// Read again from the agent with this query (the reader has everything before it).
    Reconnect(LogQuery),
    /// End the response with this line (`more`): the reader reads on with its own budget.
    ReadOn(Vec<u8>),
}

#[derive(Deserialize)]
struct Head {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    cursor: Option<String>,
}

impl Position {
    fn note(&mut self, line: &[u8]) -> Result<Line, String> {
        if log_line_is_keepalive(line) {
            return Ok(Line::Keepalive);
        }
        let head: Head = serde_json::from_slice(line).map_err(|e| {
            let shown = String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
            format!("the agent sent a line that is not a log event ({e}): {shown:?}")
        })?;
        if head.cursor.is_some() {
            self.query.since = head.cursor;
        }
        self.data_relayed |= head.kind == "data";
        Ok(Line::Event {
            last: head.kind == "end" || head.kind == "more",
        })
    }

    fn on_silence(&self) -> Silence {
        match (&self.query.since, self.query.max_bytes) {
            (Some(cursor), Some(_)) if self.data_relayed => {
                let more = LogEvent::More {
                    cursor: cursor.clone(),
                };
                let mut l = serde_json::to_vec(&more).expect("an event is JSON");
                l.push(b'\n');
                Silence::ReadOn(l)
            }
            _ => Silence::Reconnect(self.query.clone()),
        }
    }
}

type Out = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// Relays until the agent's last event, the reader's departure or an error (which breaks the
/// response: the reader resumes from its cursor, as after any cut).
pub async fn run(connect: Connect, query: LogQuery, first: Chunks, t: Timing, tx: Out) {
    if let Err(e) = relay(connect, query, first, t, &tx).await {
        warn!(error = %e, "log relay ended");
        let _ = tx.send(Err(std::io::Error::other(e))).await;
    }
}

async fn relay(
    connect: Connect,
    query: LogQuery,
    first: Chunks,
    t: Timing,
    tx: &Out,
) -> Result<(), String> {
    let mut pos = Position {
        query,
        data_relayed: false,
    };
    let mut agent = Some(first);
    let mut opening: Option<BoxFuture<'static, Result<Chunks, String>>> = None;
    let mut lines = Lines::default();
    let (mut heard, mut said) = (Instant::now(), Instant::now());
    loop {
        tokio::select! {
            c = async { agent.as_mut().expect("reading").next().await }, if agent.is_some() => {
                let chunk = match c {
                    Some(c) => c.map_err(|e| format!("reading from the agent: {e}"))?,
                    // Ended without its last event (the agent stopped): so does ours.
                    None => return Ok(()),
                };
                heard = Instant::now();
                for line in lines.feed(&chunk)? {
                    let Line::Event { last } = pos.note(&line)? else { continue };
                    let mut l = line;
                    l.push(b'\n');
                    if tx.send(Ok(Bytes::from(l))).await.is_err() {
                        return Ok(()); // the reader went away
                    }
                    said = Instant::now();
                    if last {
                        return Ok(());
                    }
                }
            }
            _ = sleep_until(heard + t.silence), if agent.is_some() => {
                agent = None;
                lines = Lines::default();
                match pos.on_silence() {
                    Silence::ReadOn(l) => {
                        info!("agent log connection silent; the reader reads on from its cursor");
                        let _ = tx.send(Ok(Bytes::from(l))).await;
                        return Ok(());
                    }
                    Silence::Reconnect(q) => {
                        info!("agent log connection silent; reading again from the last cursor");
                        opening = Some(connect(q));
                    }
                }
            }
            c = async { opening.as_mut().expect("opening").await }, if opening.is_some() => {
                opening = None;
                agent = Some(c.map_err(|e| format!("reading again after a silent connection: {e}"))?);
                heard = Instant::now();
            }
            _ = sleep_until(said + t.keepalive) => {
                if tx.send(Ok(Bytes::from_static(b"\n"))).await.is_err() {
                    return Ok(());
                }
                said = Instant::now();
            }
            _ = tx.closed() => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
