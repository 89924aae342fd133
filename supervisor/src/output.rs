//! The process's output: read from its pipes into the ledger, counted, kept as the record's
//! tail, and fed to a logMatch readiness probe.
use std::time::Instant;

use nix::errno::Errno;

use super::{Supervisor, READ_BUF, TAIL_BYTES};
use sandbox_node_protocol::clock::now_nanos;
use sandbox_node_protocol::ledger::{Pos, Stream};

/// Pipe index 0 is stdout, 1 is stderr (the order of `Supervisor::out`).
fn stream_of(idx: usize) -> Stream {
    if idx == 0 {
        Stream::Stdout
    } else {
        Stream::Stderr
    }
}

impl Supervisor {
    /// Reads a pipe that poll said is ready.
    pub(super) fn read_stream(&mut self, idx: usize, buf: &mut [u8]) -> std::io::Result<()> {
        // A full buffer means more is waiting: keep reading (bounded, so control requests
        // and the other stream still get their turn) instead of going back to poll.
        for _ in 0..8 {
            let Some(fd) = self.out[idx].as_ref() else {
                break;
            };
            match nix::unistd::read(fd, buf) {
                Ok(0) => self.on_eof(idx)?,
                Ok(n) => {
                    self.on_output(idx, &buf[..n])?;
                    if n == buf.len() {
                        continue;
                    }
                }
                Err(Errno::EAGAIN) | Err(Errno::EINTR) => {}
                Err(_) => self.on_eof(idx)?,
            }
            break;
        }
        Ok(())
    }

    fn on_output(&mut self, idx: usize, data: &[u8]) -> std::io::Result<()> {
        let stream = stream_of(idx);
        let hit = match self.matcher.as_mut() {
            Some(m) if !self.rec.ready && !self.rec.readiness_timed_out => m.feed(stream, data),
            _ => None,
        };
        let Some(hit) = hit else {
            return self.append_output(stream, data);
        };
        // Cut the output after the matched line so a cursor can point just past it.
        self.append_output(stream, &data[..hit.end])?;
        let after = self.ledger.end_pos();
        self.mark_ready_on(hit.line, after)?;
        if hit.end < data.len() {
            self.append_output(stream, &data[hit.end..])?;
        }
        Ok(())
    }

    fn append_output(&mut self, stream: Stream, data: &[u8]) -> std::io::Result<()> {
        // Output that cannot be stored is counted as lost (a gap readers see), never the end of
        // supervision.
        if let Err(e) = self.ledger.append(stream, now_nanos(), data) {
            self.write_failed("output", &e);
        }
        // A terminal's output is its only stream: the screen sees exactly what the ledger has.
        self.screen.feed(data);
        match stream {
            Stream::Stdout => self.rec.output.stdout_bytes += data.len() as u64,
            Stream::Stderr => self.rec.output.stderr_bytes += data.len() as u64,
        }
        let keep = &data[data.len().saturating_sub(TAIL_BYTES)..];
        let overflow = (self.tail.len() + keep.len()).saturating_sub(TAIL_BYTES);
        self.tail.drain(..overflow);
        self.tail.extend(keep);
        self.mark_dirty();
        Ok(())
    }

    /// The record changed: it is refreshed within the flush period.
    pub(super) fn mark_dirty(&mut self) {
        if self.dirty_since.is_none() {
            self.dirty_since = Some(Instant::now());
        }
    }

    /// The logMatch hit is recorded with a cursor just past the matched line.
    fn mark_ready_on(&mut self, line: String, after: Pos) -> std::io::Result<()> {
        self.rec.log_match = Some(sandbox_wire::wire::LogMatchHit {
            line,
            cursor: sandbox_node_protocol::ledger::encode_cursor(self.id.as_str(), after),
        });
        self.mark_ready()
    }

    /// A stream closed: a last line without a newline is complete now (logMatch).
    fn on_eof(&mut self, idx: usize) -> std::io::Result<()> {
        self.out[idx] = None;
        let stream = stream_of(idx);
        if !self.rec.ready && !self.rec.readiness_timed_out {
            if let Some(line) = self.matcher.as_mut().and_then(|m| m.eof(stream)) {
                let after = self.ledger.end_pos();
                self.mark_ready_on(line, after)?;
            }
        }
        Ok(())
    }

    /// Reads what is available on both pipes without blocking (used on spawn failure).
    pub(super) fn drain_available(&mut self) {
        let mut buf = vec![0u8; READ_BUF];
        for idx in 0..2 {
            while let Some(fd) = self.out[idx].as_ref() {
                match nix::unistd::read(fd, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let _ = self.on_output(idx, &buf[..n]);
                    }
                }
            }
        }
    }
}
