//! Runs after the first (`restartPolicy`): whether a run's end calls for another, the back-off
//! before it (waited out here, so it survives agent and operator restarts), and the state a new
//! run starts from. The output of every run is in the one ledger; the record keeps where the
//! previous run's output lies (`logs --previous`) and how it ended (`lastExit`).
use std::os::fd::AsFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use sandbox_wire::wire::{EndReason, ExitStatus, Phase, RestartPolicy, RunEnd};

use super::{start, Result, Supervisor};
use sandbox_node_protocol::clock::{now_nanos, rfc3339};
use sandbox_node_protocol::ledger::encode_cursor;
use sandbox_node_protocol::procfs;
use sandbox_node_protocol::record;

/// Whether a run that ended so is followed by another: never after a requested stop or when the
/// container (or the supervisor's hold on the process) is gone; otherwise as the policy says,
/// `OnFailure` counting a timeout or a signal as a failure.
pub(super) fn restarts(
    policy: RestartPolicy,
    exit: &ExitStatus,
    reason: EndReason,
    stop_requested: bool,
) -> bool {
    if stop_requested || matches!(reason, EndReason::ContainerExited | EndReason::Lost) {
        return false;
    }
    match policy {
        RestartPolicy::Never => false,
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => exit.code != 0 || exit.signal.is_some() || exit.timed_out,
    }
}

impl Supervisor {
    pub(super) fn restarts_after(&self, exit: &ExitStatus, reason: EndReason) -> bool {
        restarts(
            self.spec.request.restart_policy,
            exit,
            reason,
            self.stop_requested,
        )
    }

    /// The run has ended and another follows: the record says how it ended and when the next
    /// starts (phase stays Running); returns when that is.
    pub(super) fn begin_backoff(&mut self, exit: ExitStatus, reason: EndReason) -> Result<Instant> {
        let b = self.spec.backoff;
        let ran = self.run_started.map(|t| t.elapsed()).unwrap_or_default();
        if ran.as_millis() >= u128::from(b.reset_after_ms) {
            self.restarts_since_reset = 0;
        }
        let delay = b.delay(self.restarts_since_reset);
        let now = now_nanos();
        let eid = self.id.as_str();
        self.rec.last_exit = Some(RunEnd {
            exit,
            end_reason: reason,
            started_at: self.rec.started_at.take(),
            finished_at: rfc3339(now),
            output_from: encode_cursor(eid, self.run_from),
            output_until: encode_cursor(eid, self.ledger.end_pos()),
        });
        let until_nanos = now.saturating_add(u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX));
        self.rec.backoff_until = Some(rfc3339(until_nanos));
        self.rec.phase = Phase::Running;
        self.rec.ready = false;
        self.rec.readiness_timed_out = false;
        self.rec.ready_at = None;
        self.rec.log_match = None;
        self.rec.pid = None;
        self.rec.host_pid = None;
        self.backing_off = true;
        self.save(false)?;
        Ok(Instant::now() + delay)
    }

    /// Serves stops and signals until `until`. `None`: the next run starts now; `Some(reason)`:
    /// the process has ended for good (a stop was asked for, or the container is gone).
    pub(super) fn wait_out_backoff(&mut self, until: Instant) -> Result<Option<EndReason>> {
        loop {
            if self.stop_requested {
                return Ok(Some(EndReason::Stopped));
            }
            let now = Instant::now();
            if now >= until {
                if !procfs::alive(self.spec.container_pid, self.spec.container_start) {
                    return Ok(Some(EndReason::ContainerExited));
                }
                return Ok(None);
            }
            let ms = (until - now).as_millis().min(60_000) as u32 + 1;
            let mut fds = [
                PollFd::new(self.sigfd.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.control.as_fd(), PollFlags::POLLIN),
            ];
            match poll(
                &mut fds,
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
            ) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            let hit = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            let (signal, control) = (hit(&fds[0]), hit(&fds[1]));
            if signal {
                self.on_signals();
            }
            if control {
                while let Ok((conn, _)) = self.control.accept() {
                    self.handle_control(conn);
                }
            }
        }
    }

    /// The state the next run starts from: only the count, the last exit, the tail and the
    /// output counters carry over.
    pub(super) fn next_run(&mut self) -> Result<()> {
        self.backing_off = false;
        self.restarts_since_reset = self.restarts_since_reset.saturating_add(1);
        self.rec.restart_count = self.rec.restart_count.saturating_add(1);
        self.rec.backoff_until = None;
        self.rec.processes = None;
        self.run_from = self.ledger.end_pos();
        self.host_pid = None;
        self.exit = None;
        self.emptied_at = None;
        self.usage_at = None;
        self.timeout_at = None;
        self.kill_at = None;
        self.stopping = false;
        self.timed_out = false;
        self.out = [None, None];
        self.readiness_deadline = None;
        self.probe_pipe = None;
        self.probe_cancel = Arc::new(AtomicBool::new(false));
        self.matcher = start::log_matcher(&self.spec)?;
        self.oom_before = procfs::oom_kills(self.spec.container_pid);
        // runc reads the process (its env included) from this file; it goes again once read.
        if let Some(spec) = &self.process_spec {
            record::write_private(&self.layout.process_spec(&self.id), spec)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(code: i32, signal: Option<i32>, timed_out: bool) -> ExitStatus {
        ExitStatus {
            code,
            signal,
            timed_out,
        }
    }

    #[test]
    fn which_ends_restart() {
        use EndReason::*;
        use RestartPolicy::*;
        let ok = exit(0, None, false);
        let three = exit(3, None, false);
        let killed = exit(137, Some(9), false);
        let timed_out = exit(0, None, true);
        let cases = [
            // (policy, exit, reason, stop requested, restarts)
            (Never, &three, Exited, false, false),
            (OnFailure, &three, Exited, false, true),
            (OnFailure, &ok, Exited, false, false),
            (OnFailure, &killed, Signaled, false, true),
            (OnFailure, &killed, OOMKilled, false, true),
            (OnFailure, &timed_out, TimedOut, false, true),
            (Always, &ok, Exited, false, true),
            (Always, &ok, Stopped, true, false),
            (OnFailure, &killed, Stopped, true, false),
            (Always, &killed, ContainerExited, false, false),
            (Always, &three, Lost, false, false),
        ];
        for (policy, e, reason, stop, want) in cases {
            assert_eq!(
                restarts(policy, e, reason, stop),
                want,
                "{policy:?} {e:?} {reason:?} stop={stop}"
            );
        }
    }
}
