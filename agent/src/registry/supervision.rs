//! Supervisors watched through pidfds, across agent restarts: a supervisor that ends without a
//! final record leaves a `ProcessLost` record (and what is left of its tree is killed).
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use sandbox_wire::wire::{ApiError, EndReason, ErrorCode, Phase, ProcessRecord};
use tokio::io::unix::AsyncFd;
use tracing::warn;

use super::Registry;
use crate::spawn;
use sandbox_node_protocol::clock::now_rfc3339;
use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::launch::LaunchSpec;
use sandbox_node_protocol::launch::SupervisorIdentity;
use sandbox_node_protocol::record;

impl Registry {
    /// Resumes watching a process whose supervisor may still run (after an agent restart).
    pub(super) async fn reattach(self: Arc<Self>, id: ExecId) {
        let ident: Option<SupervisorIdentity> =
            record::read_json(&self.cfg.layout.supervisor(&id)).ok();
        if let Ok(rec) = record::read_record(&self.cfg.layout.record(&id)) {
            self.upsert(rec);
        }
        match ident {
            Some(ident) if ident.alive() => self.watch_supervisor(id, ident),
            _ => {
                // Started before a crash but never got a supervisor, or it died unrecorded.
                self.mark_lost(&id, "supervisor not running and no exit record")
                    .await;
            }
        }
    }

    /// Waits for the supervisor to exit (pidfd), then checks that it left a final record.
    fn watch_supervisor(self: Arc<Self>, id: ExecId, ident: SupervisorIdentity) {
        match sandbox_node_protocol::wait::pidfd_open(ident.pid) {
            Ok(fd) if ident.alive() => {
                // SAFETY: the OwnedFd moves into the AsyncFd and stays open, unchanged, for its
                // whole lifetime.
                if let Ok(afd) = unsafe { AsyncFd::register(fd) } {
                    return self.watch_exit(id, afd);
                }
                self.judge_after_exit(id);
            }
            // Already gone (or pid reused: identity check failed).
            _ => self.judge_after_exit(id),
        }
    }

    pub(super) fn watch_exit(self: Arc<Self>, id: ExecId, exits: AsyncFd<OwnedFd>) {
        tokio::spawn(async move {
            let _ = exits.readable().await;
            drop(exits);
            self.judge(id).await;
        });
    }

    fn judge_after_exit(self: Arc<Self>, id: ExecId) {
        tokio::spawn(async move { self.judge(id).await });
    }

    /// After the supervisor's end: its final record, or the process is lost.
    async fn judge(&self, id: ExecId) {
        // Let inotify deliver the final write before judging.
        tokio::time::sleep(Duration::from_millis(50)).await;
        match record::read_record(&self.cfg.layout.record(&id)) {
            Ok(rec) if rec.is_final() => self.upsert(rec),
            _ => {
                self.mark_lost(&id, "supervisor exited without an exit record")
                    .await
            }
        }
    }

    pub(super) async fn mark_lost(&self, id: &ExecId, why: &str) {
        let path = self.cfg.layout.record(id);
        let mut rec = match record::read_record(&path) {
            Ok(r) if r.is_final() => {
                self.upsert(r);
                return;
            }
            Ok(r) => r,
            Err(_) => match record::read_json::<LaunchSpec>(&self.cfg.layout.launch(id)) {
                Ok(l) => skeleton(&l),
                Err(_) => return, // not ours / half-created dir with nothing to report
            },
        };
        warn!(exec_id = %id, why, "process lost");
        // Nothing may run on unsupervised: what is left of the tree is killed, and said so.
        let mut why = why.to_string();
        if self.cfg.layout.cgroup(id).exists() {
            match spawn::spawn_tree_reaper(&self.cfg.spawn, &self.cfg.layout, id) {
                Ok(_) => why.push_str("; what was left of its process tree was killed"),
                Err(e) => warn!(exec_id = %id, error = %e, "ending the lost process tree"),
            }
        }
        rec.phase = Phase::Error;
        rec.end_reason = Some(EndReason::Lost);
        rec.error = Some(ApiError {
            code: ErrorCode::ProcessLost,
            message: format!("{why}; the exit code is unknown"),
        });
        rec.finished_at = Some(now_rfc3339());
        rec.revision += 1;
        if let Err(e) = record::write_json(&path, &rec, true) {
            warn!(exec_id = %id, error = %e, "writing lost record");
        }
        self.lost.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.upsert(rec);
    }
}

/// A process lost before its supervisor wrote any record still gets one, from its launch spec.
fn skeleton(l: &LaunchSpec) -> ProcessRecord {
    let r = &l.request;
    ProcessRecord {
        object: r.object.clone(),
        ..ProcessRecord::starting(&r.exec_id, &r.pod_uid, &r.container, &l.container_id)
    }
}
