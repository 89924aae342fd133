//! Stdin through the handle: its state, exactly-once writes by offset, close, and a pump.
use sandbox_api::wire::StdinState;

use super::Process;
use crate::error::Result;

impl Process {
    /// Where its stdin is: the bytes taken (the offset of the next write), closed or not.
    pub async fn stdin_state(&self) -> Result<StdinState> {
        self.ensure_started("stdin_state", self.start_timeout)
            .await?;
        crate::stdin::state(&self.client, &self.url("stdin")).await
    }

    /// Where `writer` is on the process's shared terminal: the bytes of its own taken (asked
    /// with an empty write at `at`, which takes nothing and names the count).
    pub(crate) async fn stdin_state_of(&self, writer: &str, at: u64) -> Result<StdinState> {
        crate::stdin::state_of(&self.client, &self.url("stdin"), writer, at).await
    }

    /// Appends `data` to its stdin, exactly once (a lost reply is retried by offset), waiting
    /// while the process does not read; the offset after it. Needs `spec.stdin`.
    pub async fn send_stdin(&self, data: &[u8]) -> Result<u64> {
        let at = self.stdin_state().await?.bytes;
        self.send_stdin_at(at, data).await
    }

    /// Like [`Process::send_stdin`], with the offset `data` starts at given by the caller: a
    /// retry of a call that failed part-way sends the same bytes at the same offset, and stdin
    /// takes only what it has not taken yet (exactly once across calls, not only within one).
    pub async fn send_stdin_at(&self, offset: u64, data: &[u8]) -> Result<u64> {
        self.ensure_started("send_stdin", self.start_timeout)
            .await?;
        let w = self.stdin_writer();
        let mut at = offset;
        // In writes the subresource takes (at most 1 MiB each).
        for piece in data.chunks(crate::stdin::CHUNK) {
            at = w.send(at, piece, false).await?;
        }
        Ok(at)
    }

    /// Closes its stdin (EOF).
    pub async fn close_stdin(&self) -> Result<()> {
        let at = self.stdin_state().await?;
        if !at.closed {
            self.stdin_writer().send(at.bytes, &[], true).await?;
        }
        Ok(())
    }

    /// Copies `input` to its stdin from where it is now, exactly once, and closes it at the
    /// end of `input`; the bytes sent.
    pub async fn pump_stdin(&self, input: impl tokio::io::AsyncRead + Unpin) -> Result<u64> {
        self.ensure_started("pump_stdin", self.start_timeout)
            .await?;
        self.stdin_writer().pump(input).await
    }

    fn stdin_writer(&self) -> crate::stdin::Writer<'_> {
        crate::stdin::Writer {
            client: &self.client,
            url: self.url("stdin"),
            name: &self.name,
            stall: self.stdin_stall.as_ref(),
        }
    }
}
