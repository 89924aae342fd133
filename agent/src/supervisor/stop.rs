//! Stopping and signalling: control requests from the agent, the stop sequence (signal, then
//! SIGKILL after the grace), the timeout, and ending what is left of a lost supervisor's tree.
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use base64::Engine;

use super::{after, Result, Supervisor};
use crate::shared::control::{valid_signal, Control, ControlReply};
use crate::shared::exec_id::ExecId;
use crate::shared::layout::Layout;
use crate::shared::record;
use crate::supervisor::cgroup::ProcessCgroup;

/// A bad signal number is the requester's mistake, told back, never passed to kill(2).
fn checked_signal(signal: i32) -> std::result::Result<(), String> {
    if valid_signal(signal) {
        Ok(())
    } else {
        Err(format!("signal {signal}: must be 1-64"))
    }
}

/// Kills every member of a lost supervisor's cgroup and removes it.
pub(super) fn end_tree(layout: &Layout, id: &ExecId) -> Result<()> {
    let path = layout.cgroup(id);
    let cg: ProcessCgroup = record::read_json(&path)?;
    let until = Instant::now() + Duration::from_secs(10);
    while !cg.is_empty() && Instant::now() < until {
        cg.kill_all()?;
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = cg.remove();
    if !left.is_empty() {
        return Err(format!("not removed: {left:?}").into());
    }
    std::fs::remove_file(&path)?;
    Ok(())
}

impl Supervisor {
    fn pgid(&self) -> Option<i32> {
        // runc exec calls setsid: the process leads its own group. Never signal group 0 or 1.
        self.host_pid.filter(|&p| p > 1)
    }

    fn kill_group(&self, sig: i32) -> std::io::Result<()> {
        let Some(pg) = self.pgid() else { return Ok(()) };
        // SAFETY: kill(2) with a negative pid signals a process group; pg > 1 is checked above.
        if unsafe { libc::kill(-pg, sig) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            Ok(())
        } else {
            Err(e)
        }
    }

    /// `sig` to every process of the tree (its cgroup); SIGKILL ends the whole cgroup at once.
    pub(super) fn signal_tree(&self, sig: i32) -> std::io::Result<()> {
        match &self.cgroup {
            Some(cg) if sig == libc::SIGKILL => cg.kill_all(),
            Some(cg) => {
                cg.signal_all(sig);
                Ok(())
            }
            None => self.kill_group(sig),
        }
    }

    fn begin_stop(&mut self, signal: i32, grace: u64) -> std::io::Result<()> {
        if self.tree_done() || self.stopping {
            return Ok(()); // idempotent: already ended or already stopping
        }
        self.signal_tree(signal)?;
        // A grace too long to represent is "never": the stop signal stands alone, as asked.
        self.kill_at = after(Instant::now(), grace);
        self.stopping = true;
        if grace == 0 {
            self.signal_tree(libc::SIGKILL)?;
        }
        Ok(())
    }

    /// Someone asked the supervisor itself to stop (SIGTERM, SIGINT, SIGHUP): the process is
    /// stopped properly, as its spec says, rather than left behind.
    pub(super) fn stop_as_specified(&mut self) {
        let (sig, grace) = (
            self.spec.request.stop_signal,
            self.spec.request.grace_seconds,
        );
        let _ = self.apply(Control::Stop {
            signal: sig,
            grace_seconds: grace,
        });
    }

    /// The timeout begins the stop sequence; a stop's grace ends with SIGKILL.
    pub(super) fn enforce_deadlines(&mut self, now: Instant) -> std::io::Result<()> {
        if !self.timed_out && !self.stopping && self.timeout_at.is_some_and(|t| now >= t) {
            self.timed_out = true;
            let (sig, grace) = (
                self.spec.request.stop_signal,
                self.spec.request.grace_seconds,
            );
            self.begin_stop(sig, grace)?;
        } else if self.kill_at.is_some_and(|t| now >= t) {
            self.signal_tree(libc::SIGKILL)?;
            self.kill_at = after(now, 3600);
        }
        Ok(())
    }

    /// Serves one request from the agent (one line in, with `stdinBytes` its bytes after it;
    /// one line out).
    pub(super) fn handle_control(&mut self, mut conn: UnixStream) {
        let _ = conn.set_nonblocking(false);
        let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
        let mut line = String::new();
        let mut r = BufReader::new(&conn);
        let reply = match r.read_line(&mut line) {
            Ok(_) => match serde_json::from_str::<Control>(&line) {
                Ok(Control::StdinBytes {
                    offset,
                    len,
                    close,
                    by,
                }) => match payload(&mut r, len) {
                    Ok(bytes) => self.write_stdin(offset, &bytes, close, by.as_deref()),
                    Err(e) => ControlReply::of(Err(e)),
                },
                Ok(Control::TerminalBytes {
                    writer,
                    offset,
                    len,
                    close,
                }) => match payload(&mut r, len) {
                    Ok(bytes) => self.write_terminal(&writer, offset, &bytes, close),
                    Err(e) => ControlReply::of(Err(e)),
                },
                Ok(c) => self.apply(c),
                Err(e) => ControlReply::of(Err(format!("bad control request: {e}"))),
            },
            Err(e) => ControlReply::of(Err(format!("reading control request: {e}"))),
        };
        let mut body = serde_json::to_vec(&reply).unwrap_or_default();
        body.push(b'\n');
        let _ = conn.write_all(&body);
    }

    fn apply(&mut self, c: Control) -> ControlReply {
        match c {
            Control::Stop {
                signal,
                grace_seconds,
            } => ControlReply::of(self.request_stop(signal, grace_seconds)),
            Control::Signal { signal } => ControlReply::of(self.deliver_signal(signal)),
            Control::Stdin {
                offset,
                data,
                close,
            } => match base64::engine::general_purpose::STANDARD.decode(data) {
                Ok(bytes) => self.write_stdin(offset, &bytes, close, None),
                Err(e) => ControlReply::of(Err(format!("stdin data: {e}"))),
            },
            Control::Resize { rows, cols } => {
                ControlReply::of(self.resize(sandbox_api::wire::TerminalSize { rows, cols }))
            }
            Control::StdinState => match self.rec.stdin {
                Some(at) => ControlReply::with_stdin(at),
                None => ControlReply::of(Ok(())),
            },
            Control::Screen => match self.screen_now() {
                Ok(screen) => ControlReply {
                    ok: true,
                    screen: Some(screen),
                    ..Default::default()
                },
                Err(e) => ControlReply::of(Err(e)),
            },
            // Read with their bytes by `handle_control`.
            Control::StdinBytes { .. } | Control::TerminalBytes { .. } => {
                ControlReply::of(Err("a write without its bytes".into()))
            }
        }
    }

    /// A requested stop is remembered in the record, so the end reads Stopped.
    fn request_stop(&mut self, signal: i32, grace_seconds: u64) -> std::result::Result<(), String> {
        checked_signal(signal)?;
        // A stop ends the input too (EOF), as the process may be waiting for it.
        self.close_stdin();
        // Between runs there is no tree, but a stop ends the process for good.
        if (!self.tree_done() || self.backing_off) && !self.stop_requested {
            self.stop_requested = true;
            self.rec.stop_requested = true;
            self.save(false).map_err(|e| e.to_string())?;
        }
        self.begin_stop(signal, grace_seconds)
            .map_err(|e| e.to_string())
    }

    /// A signal goes where a shell would send it, and nowhere once the tree has ended.
    fn deliver_signal(&mut self, signal: i32) -> std::result::Result<(), String> {
        checked_signal(signal)?;
        if self.tree_done() {
            return Ok(());
        }
        // While the root runs, its process group (as a shell would); after, its leftovers.
        if self.exit.is_none() {
            self.kill_group(signal).map_err(|e| e.to_string())
        } else {
            self.signal_tree(signal).map_err(|e| e.to_string())
        }
    }
}

/// The raw bytes of a `stdinBytes` request, after its line (bounded as a `stdin` write is).
fn payload(r: &mut impl std::io::Read, len: usize) -> std::result::Result<Vec<u8>, String> {
    if len > sandbox_api::wire::MAX_STDIN_WRITE {
        return Err(format!(
            "stdin write of {len} bytes: at most {} per write",
            sandbox_api::wire::MAX_STDIN_WRITE
        ));
    }
    let mut bytes = vec![0; len];
    r.read_exact(&mut bytes)
        .map_err(|e| format!("reading {len} stdin bytes: {e}"))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_wire_format() {
        let c: Control =
            serde_json::from_str(r#"{"op":"stop","signal":15,"graceSeconds":2}"#).unwrap();
        assert!(matches!(
            c,
            Control::Stop {
                signal: 15,
                grace_seconds: 2
            }
        ));
    }
}
