//! Client side of a supervisor's control socket.
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::shared::control::{Control, ControlReply};
use crate::shared::error::AgentError;
use sandbox_api::wire::ErrorCode;

const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends one request; `Ok(false)` when the socket is gone (the supervisor has finished).
pub async fn send(sock: &Path, req: &Control) -> Result<bool, AgentError> {
    Ok(request(sock, req).await?.is_some())
}

/// Sends one request and returns the supervisor's reply (`None`: the supervisor has finished);
/// a refusal is the error it names.
pub async fn request(sock: &Path, req: &Control) -> Result<Option<ControlReply>, AgentError> {
    let fut = async {
        // A gone process dir (long path, reached through it) reads like a gone socket.
        let conn = match crate::shared::layout::SocketPath::new(sock) {
            Ok(at) => UnixStream::connect(at.path()).await,
            Err(e) => Err(e),
        };
        let mut conn = match conn {
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
        conn.write_all(&line)
            .await
            .map_err(AgentError::io("writing control request"))?;
        let mut reply = String::new();
        BufReader::new(conn)
            .read_line(&mut reply)
            .await
            .map_err(AgentError::io("reading control reply"))?;
        if reply.is_empty() {
            // Supervisor exited while we talked to it: the record tells the outcome.
            return Ok(None);
        }
        let reply: ControlReply = serde_json::from_str(&reply)
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
