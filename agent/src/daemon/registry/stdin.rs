//! Writing a running process's stdin (`stdin: true`): forwarded to its supervisor, which holds
//! the pipe and decides by offset (exactly once, in order; see `supervisor::stdin`). Resizing
//! its terminal (`tty`), which the supervisor holds too.
use base64::Engine;
use sandbox_api::wire::{ProcessRecord, StdinState, TerminalSize, MAX_STDIN_WRITE};

use super::Registry;
use crate::daemon::control_client;
use crate::shared::control::{is_unknown_op, Control, ControlReply};
use crate::shared::error::AgentError;
use crate::shared::exec_id::ExecId;

impl Registry {
    /// Writes `data` at byte `offset` (then EOF when `close`); the answer is stdin's state after
    /// it: `bytes` is where the next write starts (less than `offset + data.len()` when the
    /// process has not read enough yet: the rest is to be sent again from there).
    pub async fn stdin(
        &self,
        id: &str,
        offset: u64,
        data: &[u8],
        close: bool,
    ) -> Result<StdinState, AgentError> {
        if data.len() > MAX_STDIN_WRITE {
            return Err(AgentError::InvalidRequest(format!(
                "stdin write of {} bytes: at most {MAX_STDIN_WRITE} per write",
                data.len()
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
        let req = Control::StdinBytes {
            offset,
            len: data.len(),
            close,
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
        match reply {
            Some(reply) => reply
                .stdin
                .ok_or_else(|| AgentError::Internal("supervisor reply without stdin".into())),
            None => Err(AgentError::StdinUnavailable(format!(
                "the process has ended (stdin took {} bytes)",
                state.bytes
            ))),
        }
    }

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
