//! The process's stdin (`stdin: true`): the supervisor holds the pipe's write end for the
//! process's whole life, so input survives agent restarts and client reconnects. Writes are
//! exactly-once and ordered by byte offset: one is accepted only at the current end; a retry of
//! accepted bytes is acknowledged without writing them again; a gap or an overlap is refused with
//! the current end. The pipe is non-blocking: what the process does not read yet is not taken
//! (the acknowledged offset says how much was), so memory never grows with unread input.
use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::unistd::pipe2;
use sandbox_api::wire::{ErrorCode, StdinState};

use super::{stop::ControlReply, Supervisor};

/// What to do with a write of `len` bytes at `offset` when `accepted` bytes have been taken.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Place {
    /// At the end: write it.
    Append,
    /// Wholly taken before (a retry): acknowledge, write nothing.
    Taken,
    /// A gap or a partial overlap: refuse, naming the end.
    Wrong,
}

pub(super) fn place(accepted: u64, offset: u64, len: u64) -> Place {
    if offset == accepted {
        Place::Append
    } else if offset < accepted && offset.saturating_add(len) <= accepted {
        Place::Taken
    } else {
        Place::Wrong
    }
}

/// The pipe: the read end for the runtime (the process's fd 0), the write end kept here.
pub(super) fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = pipe2(OFlag::O_CLOEXEC)?;
    // More slack for bursts; best effort (capped by /proc/sys/fs/pipe-max-size).
    let _ = fcntl(&w, FcntlArg::F_SETPIPE_SZ(1 << 20));
    fcntl(&w, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok((r, w))
}

fn refused(code: ErrorCode, message: String, at: StdinState) -> ControlReply {
    ControlReply {
        ok: false,
        error: Some(message),
        code: Some(code),
        stdin: Some(at),
    }
}

impl Supervisor {
    /// One write (then EOF when `close`), answered with the accepted end.
    pub(super) fn write_stdin(&mut self, offset: u64, data: &[u8], close: bool) -> ControlReply {
        let Some(mut at) = self.rec.stdin else {
            return refused(
                ErrorCode::StdinUnavailable,
                "the process was started without stdin (spec.stdin)".into(),
                StdinState::default(),
            );
        };
        match place(at.bytes, offset, data.len() as u64) {
            Place::Taken if !close || at.closed => return ControlReply::with_stdin(at),
            Place::Taken => {}
            Place::Wrong => {
                return refused(
                    ErrorCode::StdinOffsetMismatch,
                    format!(
                        "a write of {} bytes at offset {offset}: stdin has accepted {} bytes; \
                         write from offset {}",
                        data.len(),
                        at.bytes,
                        at.bytes
                    ),
                    at,
                )
            }
            Place::Append if data.is_empty() => {}
            Place::Append => {
                let Some(w) = self.stdin.as_ref().filter(|_| !at.closed) else {
                    return refused(ErrorCode::StdinUnavailable, "stdin is closed".into(), at);
                };
                match nix::unistd::write(w, data) {
                    Ok(n) => at.bytes += n as u64,
                    // The process is not reading: nothing taken now; the caller retries.
                    Err(Errno::EAGAIN) => {}
                    Err(Errno::EPIPE) => {
                        self.close_stdin();
                        return refused(
                            ErrorCode::StdinUnavailable,
                            "the process closed its stdin".into(),
                            self.rec.stdin.unwrap_or(at),
                        );
                    }
                    Err(e) => {
                        return refused(
                            ErrorCode::StdinUnavailable,
                            format!("writing stdin: {e}"),
                            at,
                        )
                    }
                }
            }
        }
        let changed = self.rec.stdin != Some(at);
        self.rec.stdin = Some(at);
        // EOF only once everything sent is taken.
        if close && at.bytes == offset.saturating_add(data.len() as u64) {
            self.close_stdin();
        }
        // The record says what was taken before the answer does (an agent that restarts reads
        // it there); a refresh, not a durable write: the supervisor itself holds the truth.
        if changed {
            let _ = self.save(false);
        }
        ControlReply::with_stdin(self.rec.stdin.unwrap_or(at))
    }

    /// EOF for the process; idempotent.
    pub(super) fn close_stdin(&mut self) {
        self.stdin = None;
        if let Some(s) = self.rec.stdin.as_mut() {
            if !s.closed {
                s.closed = true;
                let _ = self.save(false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_placed_by_offset() {
        assert_eq!(place(0, 0, 10), Place::Append);
        assert_eq!(place(10, 10, 0), Place::Append);
        // A retry of what was taken, whole or a prefix of it.
        assert_eq!(place(10, 0, 10), Place::Taken);
        assert_eq!(place(10, 4, 6), Place::Taken);
        // Partly taken, a gap, an offset beyond everything.
        assert_eq!(place(10, 5, 10), Place::Wrong);
        assert_eq!(place(10, 11, 1), Place::Wrong);
        assert_eq!(place(10, u64::MAX, 1), Place::Wrong);
        assert_eq!(place(10, 9, u64::MAX), Place::Wrong);
    }
}
