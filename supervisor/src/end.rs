//! The end of supervision: why the process ended (never an invented exit code), the final
//! record, durable, and what is cleaned up after it.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sandbox_wire::wire::{ApiError, EndReason, ErrorCode, ExitStatus, Phase};

use super::record_file::reserve_path;
use super::{Result, Supervisor};
use crate::cgroup::ProcessCgroup;
use sandbox_node_protocol::clock::{now_nanos, rfc3339};
use sandbox_node_protocol::procfs;

/// What was seen about an end, beside the exit itself, to name its reason.
struct EndFacts {
    timed_out: bool,
    stop_requested: bool,
    signal: Option<i32>,
    oom: bool,
    container_gone: bool,
}

/// The reason users see: what we did first, then what the kernel or the container did.
fn end_reason(f: &EndFacts) -> EndReason {
    if f.timed_out {
        EndReason::TimedOut
    } else if f.stop_requested {
        EndReason::Stopped
    } else if f.signal == Some(libc::SIGKILL) && f.oom {
        EndReason::OOMKilled
    } else if f.container_gone {
        EndReason::ContainerExited
    } else if f.signal.is_some() {
        EndReason::Signaled
    } else {
        EndReason::Exited
    }
}

impl Supervisor {
    /// The process could not be started: the record ends in Error, and nothing of it is left.
    pub(super) fn fail(&mut self, code: ErrorCode, message: String) -> Result<()> {
        if let Some(cg) = self.cgroup.take() {
            let _ = cg.kill_all();
            cg.remove();
            let _ = std::fs::remove_file(self.layout.cgroup(&self.id));
        }
        self.rec.phase = Phase::Error;
        self.rec.error = Some(ApiError { code, message });
        self.rec.finished_at = Some(rfc3339(now_nanos()));
        self.save(true)?;
        let _ = std::fs::remove_file(reserve_path(&self.layout, &self.id));
        Ok(())
    }

    /// The tree has ended and its output is drained: how this run ended. Its cgroup (and
    /// readiness) are done with; the record is not written yet.
    pub(super) fn end_run(&mut self) -> (ExitStatus, EndReason) {
        self.probe_cancel.store(true, Ordering::Relaxed);
        let end = self.exit.expect("end of a run after its exit");
        let (code, signal) = (end.code(), end.signal());
        let container_gone = signal == Some(libc::SIGKILL)
            && !self.stop_requested
            && !self.timed_out
            && self.container_ended();
        let oom = self.oom_killed();
        self.release_cgroup();
        self.rec.root_exited = false;
        let reason = end_reason(&EndFacts {
            timed_out: self.timed_out,
            stop_requested: self.stop_requested,
            signal,
            oom,
            container_gone,
        });
        let exit = ExitStatus {
            code,
            signal,
            timed_out: self.timed_out,
        };
        (exit, reason)
    }

    /// The process has ended for good: the final record. `exit`: how the run in progress ended;
    /// `None` when none was (an end during a restart's back-off: the last run's end stays in
    /// `lastExit`, and is not passed off as this end's).
    pub(super) fn finish(&mut self, exit: Option<ExitStatus>, reason: EndReason) -> Result<()> {
        self.rec.phase = Phase::Exited;
        self.rec.exit = exit;
        self.rec.end_reason = Some(reason);
        self.rec.backoff_until = None;
        self.rec.finished_at = Some(rfc3339(now_nanos()));
        self.save(true)?;
        let _ = std::fs::remove_file(reserve_path(&self.layout, &self.id));
        let _ = std::fs::remove_file(self.layout.control(&self.id));
        Ok(())
    }

    /// A container stop SIGKILLs every process in it; the init may die a moment after ours.
    pub(super) fn container_ended(&self) -> bool {
        let until = Instant::now() + Duration::from_millis(500);
        loop {
            if !procfs::alive(self.spec.container_pid, self.spec.container_start) {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A SIGKILL is an OOM kill when the container's or the tree's own OOM count went up.
    fn oom_killed(&self) -> bool {
        let container_oom = match (self.oom_before, procfs::oom_kills(self.spec.container_pid)) {
            (Some(a), Some(b)) => b > a,
            _ => false,
        };
        // The tree's own cgroup starts at 0 OOM kills: any is its own limit being hit.
        let tree_oom = self
            .cgroup
            .as_ref()
            .and_then(ProcessCgroup::oom_kills)
            .is_some_and(|n| n > 0);
        container_oom || tree_oom
    }

    /// The tree's last usage goes into the record before its cgroup goes.
    fn release_cgroup(&mut self) {
        if let Some(cg) = self.cgroup.take() {
            self.rec.usage = Some(cg.usage());
            self.rec.processes = Some(0);
            let left = cg.remove();
            if !left.is_empty() {
                say!("supervisor: cgroups not removed: {left:?}");
            }
            let _ = std::fs::remove_file(self.layout.cgroup(&self.id));
        }
        self.cgroup_events = None;
    }
}
