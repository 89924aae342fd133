//! The process tree: its root's exit (we are its subreaper), its cgroup's membership (the tree
//! has ended when the root has exited and the cgroup is empty) and its usage.
use std::time::Instant;

use super::{Supervisor, USAGE_REFRESH};
use crate::cgroup::ProcessCgroup;
use sandbox_node_protocol::wait;

/// Reads a kernfs file from its start through this descriptor: its next change wakes `poll`.
pub(super) fn rearm(f: &std::fs::File) {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 256];
    let _ = f.read_at(&mut buf, 0);
}

impl Supervisor {
    /// The root has exited and its cgroup is empty: nothing of the process is left.
    pub(super) fn tree_done(&self) -> bool {
        self.exit.is_some() && self.emptied_at.is_some()
    }

    /// Re-reads the cgroup's membership once the root has exited.
    pub(super) fn check_tree(&mut self) -> std::io::Result<()> {
        if self.exit.is_none() || self.emptied_at.is_some() {
            return Ok(());
        }
        let empty = self.cgroup.as_ref().is_none_or(ProcessCgroup::is_empty);
        if empty {
            self.emptied_at = Some(Instant::now());
        } else if !self.rec.root_exited {
            self.rec.root_exited = true;
            self.rec.processes = self.cgroup.as_ref().map(|c| c.members().len() as u32);
            self.save(false)?;
        }
        Ok(())
    }

    /// Usage and process count, at most every [`USAGE_REFRESH`].
    pub(super) fn refresh_usage(&mut self, now: Instant) -> std::io::Result<()> {
        let Some(cg) = &self.cgroup else {
            return Ok(());
        };
        if self.usage_at.is_some_and(|t| now < t + USAGE_REFRESH) {
            return Ok(());
        }
        self.usage_at = Some(now);
        let usage = Some(cg.usage());
        let processes = Some(cg.members().len() as u32);
        if usage != self.rec.usage || processes != self.rec.processes {
            self.rec.usage = usage;
            self.rec.processes = processes;
            self.save(false)?;
        }
        Ok(())
    }

    /// Collects ended children: the root's end is kept, the rest are orphans we adopted.
    pub(super) fn reap(&mut self) {
        // Also collects the group's orphans adopted by us as the subreaper.
        while let Ok(Some((pid, end))) = wait::reap_any() {
            if Some(pid) == self.host_pid && self.exit.is_none() {
                self.exit = Some(end);
                if self.stopping || self.timed_out {
                    // Root gone during a stop: finish the rest of the tree now.
                    let _ = self.signal_tree(libc::SIGKILL);
                }
            }
        }
    }
}
