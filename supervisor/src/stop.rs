//! Stopping and signalling: the stop sequence (signal, then SIGKILL after the grace), the timeout,
//! signals to the tree, and ending what is left of a lost supervisor's tree. The requests come
//! through the control socket (control.rs).
use std::time::{Duration, Instant};

use super::{after, Result, Supervisor};
use crate::cgroup::ProcessCgroup;
use sandbox_node_protocol::control::valid_signal;
use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::layout::Layout;
use sandbox_node_protocol::record;

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
        let _ = self.request_stop(sig, grace);
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

    /// A requested stop is remembered in the record, so the end reads Stopped.
    pub(super) fn request_stop(
        &mut self,
        signal: i32,
        grace_seconds: u64,
    ) -> std::result::Result<(), String> {
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
    pub(super) fn deliver_signal(&mut self, signal: i32) -> std::result::Result<(), String> {
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
