//! Writing a process's stdin through `sandboxprocesses/stdin`: each write names the byte offset
//! it starts at, the subresource answers with how much stdin has taken, so a write lost with its
//! connection is sent again without duplicating a byte (the agent acknowledges a repeat without
//! writing it twice). Plain requests rather than an upgraded stream: they pass the API server's
//! aggregation proxy like any other call, need no session, and resume on any operator replica.
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use sandbox_api::wire::StdinState;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::{Error, Result};

/// Bytes per write: big enough for throughput, small enough to be quick to repeat.
pub(crate) const CHUNK: usize = 256 << 10;
/// Transient failures (an operator rollout, a lost connection) retried per write.
const RETRIES: u32 = 20;

pub(crate) async fn state(client: &Client, url: &str) -> Result<StdinState> {
    let req = http::Request::get(url)
        .body(Vec::new())
        .map_err(|e| Error::invalid("name", e.to_string()))?;
    Ok(client.request(req).await?)
}

/// A shared terminal's writer's own count: an empty write at `at` (where its unacknowledged
/// bytes start, so at or behind its count) takes nothing and answers it.
pub(crate) async fn state_of(
    client: &Client,
    url: &str,
    writer: &str,
    at: u64,
) -> Result<StdinState> {
    let req = http::Request::post(format!("{url}?offset={at}&writer={writer}"))
        .header("content-type", "application/octet-stream")
        .body(Vec::new())
        .expect("static request parts");
    Ok(client.request(req).await?)
}

async fn write(
    client: &Client,
    url: &str,
    offset: u64,
    data: &[u8],
    close: bool,
) -> Result<StdinState, kube::Error> {
    let req = http::Request::post(format!("{url}?offset={offset}&close={close}"))
        .header("content-type", "application/octet-stream")
        .body(data.to_vec())
        .expect("static request parts");
    client.request(req).await
}

/// Whether a failed write may be retried (it may or may not have been taken: the offset makes
/// the retry safe).
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 429 | 500 | 502 | 503 | 504),
        _ => true,
    }
}

/// What a stdin writer is told while the process does not read ([`crate::Process::on_stdin_stall`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StdinStall {
    /// Bytes this write still has to hand over.
    pub pending: u64,
    /// How long stdin has taken nothing.
    pub waited: Duration,
}

/// A stall callback and after how long without progress it is called.
#[derive(Clone)]
pub(crate) struct StallHook {
    pub after: Duration,
    pub hook: Arc<dyn Fn(&StdinStall) + Send + Sync>,
}

/// Notices a write that makes no progress: calls the hook once per stall.
struct Stall<'a> {
    hook: Option<&'a StallHook>,
    since: Instant,
    told: bool,
}

impl<'a> Stall<'a> {
    fn new(hook: Option<&'a StallHook>) -> Self {
        Stall {
            hook,
            since: Instant::now(),
            told: false,
        }
    }

    fn progress(&mut self) {
        (self.since, self.told) = (Instant::now(), false);
    }

    fn idle(&mut self, pending: u64) {
        let Some(h) = self.hook else { return };
        let waited = self.since.elapsed();
        if !self.told && waited >= h.after {
            self.told = true;
            (h.hook)(&StdinStall { pending, waited });
        }
    }
}

/// One process's stdin, for writes.
pub(crate) struct Writer<'a> {
    pub client: &'a Client,
    pub url: String,
    pub name: &'a str,
    pub stall: Option<&'a StallHook>,
}

impl Writer<'_> {
    fn conflict(&self, at: u64, start: u64, end: u64, how: &str) -> Error {
        Error::Api {
            code: 409,
            reason: "Conflict".into(),
            message: format!(
                "StdinOffsetMismatch: stdin of sandboxprocess {} is at byte {at}, {how} this write ({start}..{end}): another writer?",
                self.name
            ),
        }
    }

    /// Sends `data`, which starts at byte `offset` of the process's input, until stdin has
    /// taken all of it (then EOF when `close`); the end offset.
    pub async fn send(&self, mut offset: u64, data: &[u8], close: bool) -> Result<u64> {
        let (client, url) = (self.client, self.url.as_str());
        let start = offset;
        let end = start + data.len() as u64;
        let (mut failures, mut idle) = (0u32, Duration::from_millis(5));
        let mut stall = Stall::new(self.stall);
        loop {
            let rest = &data[(offset - start) as usize..];
            match write(client, url, offset, rest, close).await {
                // Beyond what we sent: another writer.
                Ok(s) if s.bytes > end => return Err(self.conflict(s.bytes, start, end, "beyond")),
                Ok(s) if s.bytes == end && (!close || s.closed) => return Ok(s.bytes),
                Ok(s) if s.bytes > offset => {
                    offset = s.bytes;
                    idle = Duration::from_millis(5);
                    stall.progress();
                }
                // The process is not reading yet: wait for it (what a pipe does to a writer).
                Ok(_) => {
                    stall.idle(end - offset);
                    tokio::time::sleep(idle).await;
                    idle = (idle * 2).min(Duration::from_millis(200));
                }
                Err(kube::Error::Api(s))
                    if s.code == 409 && s.message.contains("StdinOffsetMismatch") =>
                {
                    // Our view of the offset is behind what was taken (a reply lost): ask.
                    let now = state(client, url).await?;
                    if now.bytes < start || now.bytes > end {
                        return Err(self.conflict(now.bytes, start, end, "outside"));
                    }
                    offset = now.bytes;
                    if offset == end && (!close || now.closed) {
                        return Ok(end);
                    }
                }
                // Bytes over what stdin took there differ (another writer): its own code.
                Err(kube::Error::Api(s))
                    if s.code == 409 && s.message.contains("StdinConflict") =>
                {
                    return Err(Error::Api {
                        code: 409,
                        reason: "StdinConflict".into(),
                        message: s.message,
                    });
                }
                Err(e) if transient(&e) && failures < RETRIES => {
                    failures += 1;
                    tokio::time::sleep(Duration::from_millis(250 * u64::from(failures.min(8))))
                        .await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Copies `input` to the process's stdin from where it is now, in order, exactly once, and
    /// closes it at the end of `input`; the bytes sent.
    pub async fn pump(&self, mut input: impl AsyncRead + Unpin) -> Result<u64> {
        let begin = state(self.client, &self.url).await?;
        if begin.closed {
            return Err(Error::Api {
                code: 409,
                reason: "Conflict".into(),
                message: format!(
                    "StdinUnavailable: stdin of sandboxprocess {} is closed",
                    self.name
                ),
            });
        }
        let mut offset = begin.bytes;
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = input.read(&mut buf).await.map_err(|e| {
                Error::Transport(format!(
                    "reading the input for sandboxprocess {}: {e}",
                    self.name
                ))
            })?;
            if n == 0 {
                self.send(offset, &[], true).await?;
                return Ok(offset - begin.bytes);
            }
            offset = self.send(offset, &buf[..n], false).await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_stall_is_told_once_until_stdin_moves_again() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let hook = StallHook {
            after: Duration::from_millis(30),
            hook: Arc::new(move |s: &StdinStall| s2.lock().unwrap().push(s.pending)),
        };
        let mut stall = Stall::new(Some(&hook));
        stall.idle(4);
        assert!(seen.lock().unwrap().is_empty(), "not before `after`");
        std::thread::sleep(Duration::from_millis(40));
        stall.idle(4);
        stall.idle(4);
        assert_eq!(*seen.lock().unwrap(), vec![4], "once per stall");
        stall.progress();
        stall.idle(2);
        assert_eq!(
            seen.lock().unwrap().len(),
            1,
            "progress starts the clock again"
        );
        std::thread::sleep(Duration::from_millis(40));
        stall.idle(2);
        assert_eq!(*seen.lock().unwrap(), vec![4, 2]);
        Stall::new(None).idle(1); // no hook: nothing to tell
    }
}
