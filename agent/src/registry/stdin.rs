//! Writing a running process's stdin (`stdin: true`): forwarded to its supervisor, which holds
//! the pipe and decides by offset (exactly once, in order; see `supervisor::stdin`). Resizing
//! its terminal (`tty`), which the supervisor holds too.
use base64::Engine;
use sandbox_wire::wire::{
    writer_id_ok, writer_label, ProcessRecord, StdinState, TerminalScreen, TerminalSize,
    MAX_STDIN_WRITE,
};

use super::Registry;
use crate::control_client;
use crate::error::AgentError;
use sandbox_node_protocol::control::{is_unknown_op, Control, ControlReply};
use sandbox_node_protocol::exec_id::ExecId;

/// Who writes: `writer`, a shared terminal's writer (its offsets are its own); `by`, the
/// requester, named when another writer's write collides with these bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Who<'a> {
    pub writer: Option<&'a str>,
    pub by: Option<&'a str>,
}

impl Registry {
    /// Writes `data` at byte `offset` (then EOF when `close`); the answer is stdin's state after
    /// it: `bytes` is where the next write starts (less than `offset + data.len()` when the
    /// process has not read enough yet: the rest is to be sent again from there). With a
    /// `writer`, the process's terminal is shared: offsets and the answer are that writer's.
    pub async fn stdin(
        &self,
        id: &str,
        offset: u64,
        data: &[u8],
        close: bool,
        who: Who<'_>,
    ) -> Result<StdinState, AgentError> {
        if data.len() > MAX_STDIN_WRITE {
            return Err(AgentError::InvalidRequest(format!(
                "stdin write of {} bytes: at most {MAX_STDIN_WRITE} per write",
                data.len()
            )));
        }
        if let Some(w) = who.writer.filter(|w| !writer_id_ok(w)) {
            return Err(AgentError::InvalidRequest(format!(
                "writer: {:?} is not 1-64 of A-Z a-z 0-9 - _",
                writer_label(w)
            )));
        }
        let rec = self.get(id)?;
        let id = ExecId::parse(id)?;
        let Some(state) = rec.stdin else {
            return Err(AgentError::StdinUnavailable(
                "the process was started without stdin (spec.stdin)".into(),
            ));
        };
        if rec.is_final() {
            return Err(AgentError::StdinUnavailable(format!(
                "the process has ended (stdin took {} bytes)",
                state.bytes
            )));
        }
        let sock = self.cfg.layout.control(&id);
        if let Some(writer) = who.writer {
            let req = Control::TerminalBytes {
                writer: writer.to_string(),
                offset,
                len: data.len(),
                close,
            };
            return match control_client::request_with(&sock, &req, data).await {
                Err(AgentError::InvalidRequest(m)) if is_unknown_op(&m) => {
                    Err(AgentError::StdinUnavailable(
                        "the process's supervisor predates shared terminals: attach without \
                         a writer (one attacher at a time)"
                            .into(),
                    ))
                }
                r => stdin_of(r?, state),
            };
        }
        let req = Control::StdinBytes {
            offset,
            len: data.len(),
            close,
            by: who.by.map(writer_label),
        };
        let reply = match control_client::request_with(&sock, &req, data).await {
            Err(AgentError::InvalidRequest(m)) if is_unknown_op(&m) => {
                let req = Control::Stdin {
                    offset,
                    data: base64::engine::general_purpose::STANDARD.encode(data),
                    close,
                };
                control_client::request(&sock, &req).await?
            }
            r => r?,
        };
        stdin_of(reply, state)
    }

    /// What the process's terminal shows now, and the log cursor after it.
    pub async fn screen(&self, id: &str) -> Result<TerminalScreen, AgentError> {
        let rec = self.get(id)?;
        let id = ExecId::parse(id)?;
        let ended = || AgentError::InvalidRequest("the process has ended".into());
        if rec.is_final() {
            return Err(ended());
        }
        match control_client::request(&self.cfg.layout.control(&id), &Control::Screen).await {
            Ok(Some(ControlReply {
                screen: Some(s), ..
            })) => Ok(s),
            Ok(Some(_)) => Err(AgentError::Internal(
                "supervisor reply without a screen".into(),
            )),
            Ok(None) => Err(ended()),
            Err(AgentError::InvalidRequest(m)) if is_unknown_op(&m) => Err(
                AgentError::InvalidRequest("the process's supervisor keeps no screen".into()),
            ),
            Err(e) => Err(e),
        }
    }
}

/// Stdin's state from a supervisor's reply to a write (`None`: it has ended meanwhile).
fn stdin_of(reply: Option<ControlReply>, before: StdinState) -> Result<StdinState, AgentError> {
    match reply {
        Some(reply) => reply
            .stdin
            .ok_or_else(|| AgentError::Internal("supervisor reply without stdin".into())),
        None => Err(AgentError::StdinUnavailable(format!(
            "the process has ended (stdin took {} bytes)",
            before.bytes
        ))),
    }
}

impl Registry {
    /// The record of `id` with stdin's count as its supervisor has it now: writes reach the
    /// record file only within the supervisor's flush period, and a writer resumes from this.
    /// An older supervisor (no `stdinState`) saved each write: its record is exact.
    pub async fn get_live(&self, id: &str) -> Result<ProcessRecord, AgentError> {
        let mut rec = self.get(id)?;
        if rec.stdin.is_none() || rec.is_final() {
            return Ok(rec);
        }
        let sock = self.cfg.layout.control(&ExecId::parse(id)?);
        // Gone meanwhile (its final record follows), older, or not answering (a write would
        // fail the same way): the record stands.
        if let Ok(Some(ControlReply { stdin: Some(s), .. })) =
            control_client::request(&sock, &Control::StdinState).await
        {
            rec.stdin = Some(s);
        }
        Ok(rec)
    }

    /// A new window size for the process's terminal (`tty`); the kernel tells the process
    /// (SIGWINCH).
    pub async fn resize(&self, id: &str, size: TerminalSize) -> Result<(), AgentError> {
        size.check()
            .map_err(|(field, m)| AgentError::InvalidRequest(format!("{field}: {m}")))?;
        let rec = self.get(id)?;
        let id = ExecId::parse(id)?;
        let ended = || AgentError::InvalidRequest("the process has ended".into());
        if rec.is_final() {
            return Err(ended());
        }
        let req = Control::Resize {
            rows: size.rows,
            cols: size.cols,
        };
        match control_client::request(&self.cfg.layout.control(&id), &req).await? {
            Some(_) => Ok(()),
            None => Err(ended()),
        }
    }
}
