//! The process's stdin (`stdin: true`): the supervisor holds the pipe's write end for the
//! process's whole life, so input survives agent restarts and client reconnects. Writes are
//! exactly-once and ordered by byte offset: one is accepted only at the current end; a retry of
//! accepted bytes is acknowledged without writing them again, if they are the same bytes; a gap or
//! an overlap is refused with the current end. A write over accepted bytes that differ (a second
//! writer at the same offset, a retry with other content) is refused as `StdinConflict`, never
//! acknowledged: the supervisor keeps the last [`KEPT`] bytes taken to compare with, which holds
//! any retry of a writer's last write and any write racing it (older bytes, which only a late
//! retry of a call resumed part-way reaches, are placed by offset alone). The pipe is non-blocking: what the
//! process does not read yet is not taken (the acknowledged offset says how much was), so memory
//! never grows with unread input. All of this lives in the supervisor, which outlives agent
//! restarts.
use std::collections::VecDeque;
use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::unistd::pipe2;
use sandbox_wire::wire::{ErrorCode, StdinState, MAX_STDIN_WRITE};

use super::Supervisor;
use sandbox_node_protocol::control::ControlReply;

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

/// How many of the last bytes taken are kept: one whole write, the most a retry can repeat.
pub(super) const KEPT: usize = MAX_STDIN_WRITE;

/// The last bytes taken (at most [`KEPT`]), ending at the accepted end.
#[derive(Default)]
pub(super) struct Taken(VecDeque<u8>);

impl Taken {
    pub(super) fn push(&mut self, data: &[u8]) {
        let data = &data[data.len().saturating_sub(KEPT)..];
        let over = (self.0.len() + data.len()).saturating_sub(KEPT);
        self.0.drain(..over);
        self.0.extend(data);
    }

    /// Whether `data` at `offset` equals the bytes taken there, where it overlaps those kept
    /// (`end`: the accepted end).
    pub(super) fn same(&self, end: u64, offset: u64, data: &[u8]) -> bool {
        let kept_from = end - self.0.len() as u64;
        let (from, to) = (offset.max(kept_from), end.min(offset + data.len() as u64));
        if from >= to {
            return true;
        }
        let kept = self
            .0
            .range((from - kept_from) as usize..(to - kept_from) as usize);
        kept.eq(data[(from - offset) as usize..(to - offset) as usize].iter())
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
        ..Default::default()
    }
}

impl Supervisor {
    /// One write (then EOF when `close`), answered with the accepted end. `by` names the writer
    /// (a label): a write refused over another writer's bytes names that writer.
    pub(super) fn write_stdin(
        &mut self,
        offset: u64,
        data: &[u8],
        close: bool,
        by: Option<&str>,
    ) -> ControlReply {
        let Some(mut at) = self.rec.stdin else {
            return refused(
                ErrorCode::StdinUnavailable,
                "the process was started without stdin (spec.stdin)".into(),
                StdinState::default(),
            );
        };
        let place = place(at.bytes, offset, data.len() as u64);
        if place != Place::Append && !self.stdin_taken.same(at.bytes, offset, data) {
            let m = format!(
                "a write of {} bytes at offset {offset} differs from the bytes stdin accepted \
                 there (another writer at the same offset, or a retry with other content); \
                 stdin has accepted {} bytes{}",
                data.len(),
                at.bytes,
                self.other_writer(by)
            );
            return refused(ErrorCode::StdinConflict, m, at);
        }
        match place {
            Place::Taken if !close || at.closed => return ControlReply::with_stdin(at),
            Place::Taken => {}
            Place::Wrong => {
                let m = format!(
                    "a write of {} bytes at offset {offset}: stdin has accepted {} bytes; write \
                     from offset {}{}",
                    data.len(),
                    at.bytes,
                    at.bytes,
                    self.other_writer(by)
                );
                return refused(ErrorCode::StdinOffsetMismatch, m, at);
            }
            Place::Append => match self.take(at, data) {
                Ok(n) => {
                    at.bytes += n as u64;
                    if n > 0 {
                        self.last_by = by.map(str::to_string);
                    }
                }
                Err(r) => return r,
            },
        }
        self.accepted(
            at,
            close && at.bytes == offset.saturating_add(data.len() as u64),
        )
    }

    /// One write to a shared terminal by `writer`, at an offset of its own bytes
    /// ([`super::writers`]); answered with that writer's count.
    pub(super) fn write_terminal(
        &mut self,
        writer: &str,
        offset: u64,
        data: &[u8],
        close: bool,
    ) -> ControlReply {
        let (Some(mut at), true) = (self.rec.stdin, self.tty.is_some()) else {
            return refused(
                ErrorCode::StdinUnavailable,
                "the process has no terminal (spec.tty)".into(),
                StdinState::default(),
            );
        };
        let mut mine = StdinState {
            bytes: self.writers.count(writer, offset),
            closed: at.closed,
        };
        match place(mine.bytes, offset, data.len() as u64) {
            Place::Taken if !close || at.closed => return ControlReply::with_stdin(mine),
            Place::Taken => {}
            Place::Wrong => {
                let m = format!(
                    "a write of {} bytes at offset {offset}: this writer's bytes taken are {}; \
                     write from offset {}",
                    data.len(),
                    mine.bytes,
                    mine.bytes
                );
                return refused(ErrorCode::StdinOffsetMismatch, m, mine);
            }
            Place::Append => match self.take(at, data) {
                Ok(n) => {
                    at.bytes += n as u64;
                    mine.bytes += n as u64;
                }
                Err(r) => return r,
            },
        }
        self.writers.set(writer, mine.bytes);
        let end = offset.saturating_add(data.len() as u64);
        let reply = self.accepted(at, close && mine.bytes == end);
        mine.closed = reply.stdin.is_some_and(|s| s.closed);
        ControlReply {
            stdin: Some(mine),
            ..reply
        }
    }

    /// Writes what the input takes of `data` now: the bytes taken (0: it is not reading; the
    /// caller retries), or the refusal.
    fn take(&mut self, at: StdinState, data: &[u8]) -> Result<usize, ControlReply> {
        if data.is_empty() {
            return Ok(0);
        }
        let Some(w) = self.stdin.as_ref().filter(|_| !at.closed) else {
            return Err(refused(
                ErrorCode::StdinUnavailable,
                "stdin is closed".into(),
                at,
            ));
        };
        match nix::unistd::write(w, data) {
            Ok(n) => {
                self.stdin_taken.push(&data[..n]);
                Ok(n)
            }
            Err(Errno::EAGAIN) => Ok(0),
            Err(Errno::EPIPE) => {
                self.close_stdin();
                Err(refused(
                    ErrorCode::StdinUnavailable,
                    "the process closed its stdin".into(),
                    self.rec.stdin.unwrap_or(at),
                ))
            }
            Err(e) => Err(refused(
                ErrorCode::StdinUnavailable,
                format!("writing stdin: {e}"),
                at,
            )),
        }
    }

    /// Stdin is at `at` after a write; EOF when `close` (only once everything sent is taken).
    fn accepted(&mut self, at: StdinState, close: bool) -> ControlReply {
        let changed = self.rec.stdin != Some(at);
        self.rec.stdin = Some(at);
        if close {
            self.close_stdin();
        }
        // The count reaches the record within the flush period, as output counts do: a
        // stream of writes is not a stream of record writes, each a watch event through the
        // agent to the operator. Whoever needs it now asks (`Control::StdinState`); the close
        // is saved at once (`close_stdin`).
        if changed {
            self.mark_dirty();
        }
        ControlReply::with_stdin(self.rec.stdin.unwrap_or(at))
    }

    /// Names the writer of the last bytes taken when it is not `by`, for a refusal.
    fn other_writer(&self, by: Option<&str>) -> String {
        match self.last_by.as_deref() {
            Some(last) if Some(last) != by => {
                format!(" (its last bytes were written by {last:?}: another writer is attached)")
            }
            _ => String::new(),
        }
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
    fn taken_bytes_are_compared_where_a_write_overlaps_them() {
        let mut t = Taken::default();
        t.push(b"hello ");
        t.push(b"world");
        let end = 11;
        assert!(t.same(end, 0, b"hello world"));
        assert!(t.same(end, 6, b"world"));
        assert!(t.same(end, 3, b"lo w"), "any sub-range");
        assert!(!t.same(end, 6, b"WORLD"));
        assert!(!t.same(end, 0, b"hellO"));
        // Past the end only the overlap counts (the rest is the offset check's).
        assert!(t.same(end, 6, b"world and more"));
        assert!(!t.same(end, 6, b"wOrld and more"));
        assert!(t.same(end, end, b"new"));
        // Only the last KEPT bytes are kept: the part of a write older than them is not compared.
        let mut t = Taken::default();
        t.push(&vec![1u8; KEPT]);
        t.push(b"ab");
        let end = KEPT as u64 + 2;
        assert!(t.same(end, 0, &[9, 9]), "older than what is kept");
        assert!(t.same(end, 1, &[9, 1]));
        assert!(!t.same(end, 1, &[9, 9]));
        assert!(t.same(end, end - 2, b"ab"));
        assert!(!t.same(end, end - 2, b"ax"));
        let mut t = Taken::default();
        t.push(&vec![7u8; KEPT + 10]);
        assert_eq!(t.0.len(), KEPT);
    }

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
