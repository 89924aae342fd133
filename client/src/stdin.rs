//! Writing a process's stdin through `sandboxprocesses/stdin`: each write names the byte offset
//! it starts at, the subresource answers with how much stdin has taken, so a write lost with its
//! connection is sent again without duplicating a byte (the agent acknowledges a repeat without
//! writing it twice). Plain requests rather than an upgraded stream: they pass the API server's
//! aggregation proxy like any other call, need no session, and resume on any operator replica.
use std::time::Duration;

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

/// Sends `data`, which starts at byte `offset` of the process's input, until stdin has taken
/// all of it (then EOF when `close`); the end offset.
pub(crate) async fn send(
    client: &Client,
    url: &str,
    name: &str,
    mut offset: u64,
    data: &[u8],
    close: bool,
) -> Result<u64> {
    let start = offset;
    let end = start + data.len() as u64;
    let (mut failures, mut idle) = (0u32, Duration::from_millis(5));
    loop {
        let rest = &data[(offset - start) as usize..];
        match write(client, url, offset, rest, close).await {
            Ok(s) if s.bytes > end => {
                // Beyond what we sent: another writer.
                return Err(Error::Api {
                    code: 409,
                    reason: "Conflict".into(),
                    message: format!(
                        "StdinOffsetMismatch: stdin of sandboxprocess {name} is at byte {}, beyond this write ({start}..{end}): another writer?",
                        s.bytes
                    ),
                });
            }
            Ok(s) if s.bytes == end && (!close || s.closed) => return Ok(s.bytes),
            Ok(s) if s.bytes > offset => {
                offset = s.bytes;
                idle = Duration::from_millis(5);
            }
            // The process is not reading yet: wait for it (what a pipe does to a writer).
            Ok(_) => {
                tokio::time::sleep(idle).await;
                idle = (idle * 2).min(Duration::from_millis(200));
            }
            Err(kube::Error::Api(s))
                if s.code == 409 && s.message.contains("StdinOffsetMismatch") =>
            {
                // Our view of the offset is behind what was taken (a reply lost): ask.
                let now = state(client, url).await?;
                if now.bytes < start || now.bytes > end {
                    return Err(Error::Api {
                        code: 409,
                        reason: "Conflict".into(),
                        message: format!(
                            "StdinOffsetMismatch: stdin of sandboxprocess {name} is at byte {}, outside this write ({start}..{end}): another writer?",
                            now.bytes
                        ),
                    });
                }
                offset = now.bytes;
                if offset == end && (!close || now.closed) {
                    return Ok(end);
                }
            }
            // Bytes over what stdin took there differ (another writer): its own code.
            Err(kube::Error::Api(s)) if s.code == 409 && s.message.contains("StdinConflict") => {
                return Err(Error::Api {
                    code: 409,
                    reason: "StdinConflict".into(),
                    message: s.message,
                });
            }
            Err(e) if transient(&e) && failures < RETRIES => {
                failures += 1;
                tokio::time::sleep(Duration::from_millis(250 * u64::from(failures.min(8)))).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Copies `input` to the process's stdin from where it is now, in order, exactly once, and
/// closes it at the end of `input`; the bytes sent.
pub(crate) async fn pump(
    client: &Client,
    url: &str,
    name: &str,
    mut input: impl AsyncRead + Unpin,
) -> Result<u64> {
    let begin = state(client, url).await?;
    if begin.closed {
        return Err(Error::Api {
            code: 409,
            reason: "Conflict".into(),
            message: format!("StdinUnavailable: stdin of sandboxprocess {name} is closed"),
        });
    }
    let mut offset = begin.bytes;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = input.read(&mut buf).await.map_err(|e| {
            Error::Transport(format!("reading the input for sandboxprocess {name}: {e}"))
        })?;
        if n == 0 {
            send(client, url, name, offset, &[], true).await?;
            return Ok(offset - begin.bytes);
        }
        offset = send(client, url, name, offset, &buf[..n], false).await?;
    }
}
