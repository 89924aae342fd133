//! Readiness: started means ready unless a probe is configured; a network probe runs on its own
//! thread and reports through a pipe, a logMatch is fed by the output (see `output`).
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::unistd::pipe2;
use sandbox_wire::wire::ProbeKind;

use super::{after, Result, Supervisor};
use sandbox_node_protocol::clock::{now_nanos, rfc3339};
use sandbox_node_protocol::readiness;

impl Supervisor {
    /// Readiness is judged from the moment the process runs.
    pub(super) fn start_readiness(&mut self, now: Instant) -> Result<()> {
        let Some(r) = self.spec.request.readiness.clone() else {
            // No readiness configured: started means ready.
            self.rec.ready = true;
            self.rec.ready_at = self.rec.started_at.clone();
            return Ok(());
        };
        self.readiness_deadline = r.timeout_seconds.and_then(|t| after(now, t));
        if !matches!(r.probe, ProbeKind::LogMatch { .. }) {
            let (pr, pw) = pipe2(OFlag::O_CLOEXEC)?;
            let netns = format!("/proc/{}/ns/net", self.spec.container_pid);
            readiness::spawn_net_prober(
                netns.into(),
                r.probe.clone(),
                Duration::from_millis(r.period_millis.max(10)),
                self.readiness_deadline,
                self.probe_cancel.clone(),
                pw,
            )?;
            self.probe_pipe = Some(pr);
        }
        Ok(())
    }

    pub(super) fn mark_ready(&mut self) -> std::io::Result<()> {
        self.rec.ready = true;
        self.rec.ready_at = Some(rfc3339(now_nanos()));
        self.save(false)
    }

    /// The network prober's one verdict (ready or timed out); the pipe is done after it.
    pub(super) fn on_probe_result(&mut self) -> std::io::Result<()> {
        let mut b = [0u8; 1];
        let got = self
            .probe_pipe
            .as_ref()
            .map(|p| nix::unistd::read(p, &mut b));
        self.probe_pipe = None;
        if let Some(Ok(1)) = got {
            if b[0] == readiness::READY && self.exit.is_none() {
                self.mark_ready()?;
            } else if b[0] == readiness::TIMED_OUT {
                self.rec.readiness_timed_out = true;
                self.save(false)?;
            }
        }
        Ok(())
    }

    /// A logMatch still waiting for its line.
    pub(super) fn awaiting_log_match(&self) -> bool {
        self.matcher.is_some() && !self.rec.ready && !self.rec.readiness_timed_out
    }

    /// A logMatch has no thread to time it out: the loop does, at its deadline.
    pub(super) fn check_readiness_deadline(&mut self, now: Instant) -> std::io::Result<()> {
        if self.awaiting_log_match() && self.readiness_deadline.is_some_and(|t| now >= t) {
            self.rec.readiness_timed_out = true;
            self.save(false)?;
        }
        Ok(())
    }
}
