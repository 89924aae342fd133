//! Client side of a supervisor's control socket.
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::error::AgentError;
use sandbox_node_protocol::control::{Control, ControlReply};
use sandbox_wire::wire::ErrorCode;

const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends one request; `Ok(false)` when the socket is gone (the supervisor has finished).
pub async fn send(sock: &Path, req: &Control) -> Result<bool, AgentError> {
    Ok(request(sock, req).await?.is_some())
}

/// Sends one request and returns the supervisor's reply (`None`: the supervisor has finished);
/// a refusal is the error it names.
pub async fn request(sock: &Path, req: &Control) -> Result<Option<ControlReply>, AgentError> {
    request_with(sock, req, &[]).await
}

/// [`request`] with `payload` sent raw after the request line (`Control::StdinBytes`). The
/// reply is read while the bytes go: a supervisor that refuses the line (an older one, which
/// does not know the op) answers and hangs up without reading them, and that answer counts.
pub async fn request_with(
    sock: &Path,
    req: &Control,
    payload: &[u8],
) -> Result<Option<ControlReply>, AgentError> {
    let fut = async {
        // A gone process dir (long path, reached through it) reads like a gone socket.
        let conn = match sandbox_node_protocol::layout::SocketPath::new(sock) {
            Ok(at) => UnixStream::connect(at.path()).await,
            Err(e) => Err(e),
        };
        let conn = match conn {
            Ok(c) => c,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) =>
            {
                return Ok(None)
            }
            Err(e) => {
                return Err(AgentError::io(format!("connecting to {}", sock.display()))(
                    e,
                ))
            }
        };
        let mut line = serde_json::to_vec(req).map_err(|e| AgentError::Internal(e.to_string()))?;
        line.push(b'\n');
        let (rd, mut wr) = conn.into_split();
        let send = async {
            wr.write_all(&line).await?;
            wr.write_all(payload).await
        };
        let (mut reply, mut rd) = (String::new(), BufReader::new(rd));
        let (sent, read) = tokio::join!(send, rd.read_line(&mut reply));
        read.map_err(AgentError::io("reading control reply"))?;
        if reply.is_empty() {
            // Supervisor exited while we talked to it: the record tells the outcome.
            sent.map_err(AgentError::io("writing control request"))?;
            return Ok(None);
        }
        decode(&reply)
    };
    tokio::time::timeout(CONTROL_TIMEOUT, fut)
        .await
        .map_err(|_| {
            AgentError::OperationInterrupted(format!(
                "supervisor at {} did not answer",
                sock.display()
            ))
        })?
}

/// The supervisor's reply line: the reply, or the error its refusal names.
fn decode(reply: &str) -> Result<Option<ControlReply>, AgentError> {
    let reply: ControlReply = serde_json::from_str(reply)
        .map_err(|e| AgentError::Internal(format!("control reply: {e}")))?;
    if reply.ok {
        return Ok(Some(reply));
    }
    let message = reply.error.unwrap_or_default();
    Err(match reply.code {
        Some(ErrorCode::StdinOffsetMismatch) => AgentError::StdinOffsetMismatch(message),
        Some(ErrorCode::StdinUnavailable) => AgentError::StdinUnavailable(message),
        Some(ErrorCode::StdinConflict) => AgentError::StdinConflict(message),
        _ => AgentError::InvalidRequest(message),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use tokio::net::UnixListener;

    /// The supervisor's control requests as a binary older than `stdinBytes` knew them.
    #[derive(Deserialize)]
    #[serde(tag = "op", rename_all = "camelCase")]
    #[allow(dead_code)]
    enum Older {
        Stop { signal: i32 },
        Signal { signal: i32 },
        Stdin { offset: u64, data: String },
        Resize { rows: u16, cols: u16 },
    }

    /// A supervisor of that age: reads the line, refuses it as it would, hangs up without
    /// reading the bytes after it.
    async fn older_supervisor(listener: UnixListener) {
        let (conn, _) = listener.accept().await.unwrap();
        let (rd, mut wr) = conn.into_split();
        let mut line = String::new();
        BufReader::new(rd).read_line(&mut line).await.unwrap();
        let e = serde_json::from_str::<Older>(&line).err().expect("refused");
        let reply = ControlReply::of(Err(format!("bad control request: {e}")));
        let mut body = serde_json::to_vec(&reply).unwrap();
        body.push(b'\n');
        wr.write_all(&body).await.unwrap();
    }

    #[tokio::test]
    async fn an_older_supervisor_refuses_raw_stdin_as_an_unknown_op_without_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("control.sock");
        let server = tokio::spawn(older_supervisor(UnixListener::bind(&sock).unwrap()));
        // More than a socket buffer holds: the write cannot finish before the refusal.
        let payload = vec![7u8; sandbox_wire::wire::MAX_STDIN_WRITE];
        let req = Control::StdinBytes {
            offset: 0,
            len: payload.len(),
            close: false,
            by: None,
        };
        let r = request_with(&sock, &req, &payload).await;
        server.await.unwrap();
        match r {
            Err(AgentError::InvalidRequest(m)) => {
                assert!(sandbox_node_protocol::control::is_unknown_op(&m), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }
}
