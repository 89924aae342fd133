//! The supervisor's single-threaded poll loop: output, signals, control requests and probe
//! results wake it; deadlines (timeout, kill, flush, drain, usage, readiness) bound its sleep.
use std::os::fd::AsFd;
use std::time::Instant;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::tree::rearm;
use super::{
    Result, Supervisor, COUNTER_FLUSH, DRAIN_GRACE, MEMBERSHIP_POLL, READ_BUF, USAGE_REFRESH,
};

/// What one poll woke for.
struct Woken {
    out: [bool; 2],
    signal: bool,
    control: bool,
    probe: bool,
}

/// Where each source sits in the poll set (`usize::MAX`: not polled this time).
const OUT: [usize; 2] = [0, 1];
const SIGNAL: usize = 2;
const CONTROL: usize = 3;
const PROBE: usize = 4;
const CGROUP_EVENTS: usize = 5;

impl Supervisor {
    /// Launches the process, supervises it until its tree has ended and its output is drained,
    /// runs it again as its restart policy says, then writes the final record.
    pub(super) fn run(mut self) -> Result<()> {
        let mut buf = vec![0u8; READ_BUF];
        loop {
            if !self.launch()? {
                return Ok(());
            }
            self.supervise_run(&mut buf)?;
            let (exit, reason) = self.end_run();
            if !self.restarts_after(&exit, reason) {
                return self.finish(Some(exit), reason);
            }
            let until = self.begin_backoff(exit, reason)?;
            if let Some(reason) = self.wait_out_backoff(until)? {
                // No run in progress: no exit of its own (docs/guides/restarts.md, "An end during
                // the back-off").
                return self.finish(None, reason);
            }
            self.next_run()?;
        }
    }

    /// One run: until its tree has ended and its output is drained.
    fn supervise_run(&mut self, buf: &mut [u8]) -> Result<()> {
        loop {
            self.check_tree()?;
            if self.tree_done() && self.done_draining() {
                return Ok(());
            }
            let woken = self.wait_for_events()?;
            self.on_wakeup(woken, buf)?;
            self.on_time(Instant::now())?;
        }
    }

    /// Output still held open after the tree ended (passed outside it) is waited for a while
    /// only.
    fn done_draining(&self) -> bool {
        self.out.iter().all(Option::is_none)
            || self.emptied_at.is_some_and(|t| t.elapsed() >= DRAIN_GRACE)
    }

    /// Sleeps in poll until a source is ready or the next deadline comes.
    fn wait_for_events(&self) -> Result<Woken> {
        let timeout = self.poll_timeout(Instant::now());
        let mut fds = Vec::with_capacity(6);
        let mut slots = [usize::MAX; 6];
        for (i, fd) in self.out.iter().enumerate() {
            if let Some(fd) = fd {
                slots[OUT[i]] = fds.len();
                fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
            }
        }
        slots[SIGNAL] = fds.len();
        fds.push(PollFd::new(self.sigfd.as_fd(), PollFlags::POLLIN));
        slots[CONTROL] = fds.len();
        fds.push(PollFd::new(self.control.as_fd(), PollFlags::POLLIN));
        if let Some(p) = &self.probe_pipe {
            slots[PROBE] = fds.len();
            fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
        }
        if let Some(f) = &self.cgroup_events {
            slots[CGROUP_EVENTS] = fds.len();
            fds.push(PollFd::new(f.as_fd(), PollFlags::POLLPRI));
        }
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let hit =
            |slot: usize| slot != usize::MAX && fds[slot].revents().is_some_and(|r| !r.is_empty());
        if hit(slots[CGROUP_EVENTS]) {
            // Re-armed only; membership is re-read at the top of the loop.
            if let Some(f) = &self.cgroup_events {
                rearm(f);
            }
        }
        Ok(Woken {
            out: [hit(slots[OUT[0]]), hit(slots[OUT[1]])],
            signal: hit(slots[SIGNAL]),
            control: hit(slots[CONTROL]),
            probe: hit(slots[PROBE]),
        })
    }

    /// Poll sleeps no longer than the next deadline (at most a minute at a time).
    fn poll_timeout(&self, now: Instant) -> PollTimeout {
        match self.next_deadline() {
            Some(d) if d <= now => PollTimeout::ZERO,
            Some(d) => PollTimeout::try_from((d - now).as_millis().min(60_000) as u32 + 1)
                .unwrap_or(PollTimeout::MAX),
            None => PollTimeout::NONE,
        }
    }

    /// Serves each ready source, output first, in a fixed order.
    fn on_wakeup(&mut self, woken: Woken, buf: &mut [u8]) -> Result<()> {
        for (idx, ready) in woken.out.into_iter().enumerate() {
            if ready {
                self.read_stream(idx, buf)?;
            }
        }
        if woken.signal {
            self.on_signals();
        }
        if woken.control {
            while let Ok((conn, _)) = self.control.accept() {
                self.handle_control(conn);
            }
        }
        if woken.probe {
            self.on_probe_result()?;
        }
        Ok(())
    }

    /// SIGCHLD means children to reap; any other signal asks the supervisor itself to stop.
    pub(super) fn on_signals(&mut self) {
        let mut stop_sig = false;
        while let Ok(Some(info)) = self.sigfd.read_signal() {
            if info.ssi_signo as i32 != libc::SIGCHLD {
                stop_sig = true;
            }
        }
        self.reap();
        if stop_sig {
            self.stop_as_specified();
        }
    }

    /// Acts on whatever deadline has come, whatever woke the loop.
    fn on_time(&mut self, now: Instant) -> Result<()> {
        if !self.tree_done() {
            self.enforce_deadlines(now)?;
            self.refresh_usage(now)?;
        }
        self.check_readiness_deadline(now)?;
        if self.dirty_since.is_some_and(|t| now >= t + COUNTER_FLUSH) {
            self.save(false)?;
        }
        Ok(())
    }

    fn next_deadline(&self) -> Option<Instant> {
        let flush = self.dirty_since.map(|t| t + COUNTER_FLUSH);
        let drain = self.emptied_at.map(|t| t + DRAIN_GRACE);
        let membership = match (&self.exit, &self.emptied_at, &self.cgroup_events) {
            (Some(_), None, None) => Some(Instant::now() + MEMBERSHIP_POLL),
            _ => None,
        };
        let usage = self.usage_at.map(|t| t + USAGE_REFRESH);
        let readiness = if self.awaiting_log_match() {
            self.readiness_deadline
        } else {
            None
        };
        let stop = if !self.tree_done() {
            self.kill_at.or(if self.timed_out {
                None
            } else {
                self.timeout_at
            })
        } else {
            None
        };
        [flush, drain, membership, usage, readiness, stop]
            .into_iter()
            .flatten()
            .min()
    }
}
