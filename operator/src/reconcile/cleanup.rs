//! Deletion of an object: its process stopped and forgotten by the agent before the finalizer
//! goes; let go at once when the pod or node is gone (nothing left to stop), and after
//! [`CLEANUP_GIVE_UP`] in any case.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use sandbox_api::crd::{Phase, SandboxProcess, SandboxProcessStatus};
use sandbox_api::wire::ErrorCode;
use tracing::{info, warn};

use crate::agent::Cached;
use crate::pod::target_pod_name;
use crate::reconcile::context::{Context, CLEANUP_GIVE_UP, CLEANUP_RECHECK};
use crate::reconcile::error::Error;
use crate::status;

/// What the deletion waits for.
struct Deletion<'a> {
    obj: &'a SandboxProcess,
    ctx: &'a Context,
    uid: String,
    /// The pod the process ran in is gone or replaced: nothing left to stop.
    pod_gone: bool,
    /// How long ago the object was deleted.
    deleting_for: Duration,
}

/// `None` when the process is stopped and forgotten (or there is nothing left to wait for): the
/// finalizer may go. `Some(action)`: the stop is under way; come back.
pub async fn cleanup(obj: Arc<SandboxProcess>, ctx: &Context) -> Result<Option<Action>, Error> {
    let uid = obj.uid().ok_or(Error::Incomplete("uid"))?;
    let ns = obj.namespace().ok_or(Error::Incomplete("namespace"))?;
    let prev = obj.status.clone().unwrap_or_default();
    let pod = ctx
        .pods
        .get(&ObjectRef::<Pod>::new(&target_pod_name(&obj)).within(&ns));
    let pod_uid = pod.as_ref().and_then(|p| p.metadata.uid.clone());
    let node = prev.node_name.clone().or_else(|| {
        pod.as_ref()
            .and_then(|p| p.spec.as_ref()?.node_name.clone())
    });
    let d = Deletion {
        obj: &obj,
        ctx,
        uid,
        pod_gone: pod_uid.is_none() || (prev.pod_uid.is_some() && pod_uid != prev.pod_uid),
        deleting_for: deleting_for(&obj),
    };
    let Some(node) = node else {
        return d.done("never scheduled: nothing to stop");
    };
    let Some(url) = ctx.agents.url_for_node(&node) else {
        if d.pod_gone || d.node_gone(&node).await? || d.deleting_for > CLEANUP_GIVE_UP {
            return d.done("no agent on the node and nothing to wait for");
        }
        return Err(Error::Cleanup(format!(
            "no agent pod on node {node}; retrying before giving up"
        )));
    };
    // A reconcile worker never waits out a grace period: the stop is begun (idempotent on the
    // agent) and the object comes back when the record turns final (the agent watch) or at the
    // next requeue; only an ended process is forgotten, which is quick.
    let cached = ctx.agents.cached(&url, &d.uid);
    let ended = match &cached {
        Cached::Record(r) => r.is_final(),
        Cached::Absent => true,
        Cached::Unknown => status::is_final(&prev),
    };
    if !ended && !d.pod_gone {
        if let Some(step) = d.stop(&url, &node).await? {
            return step;
        }
    }
    // Told once: a deletion looked at again (others' finalizers hold the object, or the watch's
    // DELETED event after a reconcile did it) finds nothing left on the agent.
    let note = deletion_note(&prev).filter(|_| !matches!(cached, Cached::Absent));
    d.forget(&url, &node, ended, note).await
}

/// The one Event a deletion publishes: the stop of a process the status last showed running
/// (the object goes, and its status with it). A final object's deletion writes nothing beyond
/// the user's DELETE (and the finalizer's removal, if it had one; docs/concepts/writes.md).
fn deletion_note(prev: &SandboxProcessStatus) -> Option<status::Note> {
    (prev.phase == Some(Phase::Running)).then(|| status::Note {
        warning: false,
        reason: "Stopped",
        message: "the object was deleted: process stopped and forgotten".into(),
    })
}

fn deleting_for(obj: &SandboxProcess) -> Duration {
    obj.metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| {
            let secs = Timestamp::now().as_second().saturating_sub(t.0.as_second());
            Duration::from_secs(secs.max(0) as u64)
        })
        .unwrap_or_default()
}

type Step = Result<Option<Action>, Error>;

impl Deletion<'_> {
    fn done(&self, how: &str) -> Step {
        info!(how, "finalizer removed");
        self.ctx.memo.gone(&self.uid);
        Ok(None)
    }

    async fn node_gone(&self, node: &str) -> Result<bool, Error> {
        let nodes: Api<Node> = Api::all(self.ctx.client.clone());
        Ok(nodes.get_opt(node).await?.is_none())
    }

    /// Begins the stop sequence. `Some(step)`: what this reconcile returns (come back while it
    /// runs, let go, or fail); `None`: go on and forget the process.
    async fn stop(&self, url: &str, node: &str) -> Result<Option<Step>, Error> {
        let agents = &self.ctx.agents;
        let grace = self.obj.spec.termination_grace_period_seconds.max(0) as u64;
        match agents.client.stop(url, &self.uid, grace).await {
            Ok(rec) if !rec.is_final() => {
                agents.remember(url, &rec);
                if self.deleting_for <= CLEANUP_GIVE_UP {
                    return Ok(Some(Ok(Some(Action::requeue(CLEANUP_RECHECK)))));
                }
                warn!("process still running after the give-up time; forgetting it now");
            }
            Ok(rec) => agents.remember(url, &rec),
            Err(e) if e.api_code() == Some(ErrorCode::ProcessNotFound) => {}
            Err(e) => {
                if self.node_gone(node).await? || self.deleting_for > CLEANUP_GIVE_UP {
                    warn!(error = %e, "could not stop the process; letting go");
                    return Ok(Some(self.done("agent unreachable, node gone (or gave up)")));
                }
                return Ok(Some(Err(e.into())));
            }
        }
        Ok(None)
    }

    /// Has the agent forget the process (records and logs), then publishes `note`.
    async fn forget(&self, url: &str, node: &str, ended: bool, note: Option<status::Note>) -> Step {
        let timeout = Duration::from_secs(if self.pod_gone || ended { 5 } else { 20 });
        match self.ctx.agents.client.forget(url, &self.uid, timeout).await {
            Ok(()) => {
                if let Some(note) = note {
                    crate::reconcile::writer::publish(self.ctx, self.obj, note).await;
                }
                self.done("process stopped and forgotten")
            }
            Err(e) => {
                if self.pod_gone
                    || self.node_gone(node).await?
                    || self.deleting_for > CLEANUP_GIVE_UP
                {
                    warn!(error = %e, "could not have the agent forget the process; letting go");
                    return self.done("agent unreachable, pod or node gone (or gave up)");
                }
                Err(e.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The API writes of a deletion beyond the user's DELETE: the finalizer's removal (which
    /// deletes the object), and an Event only for a process still shown running.
    #[test]
    fn deleting_a_final_object_writes_only_the_finalizer_removal() {
        let cases = [
            (Some(Phase::Exited), vec!["finalizer removed"]),
            (Some(Phase::Error), vec!["finalizer removed"]),
            (Some(Phase::Pending), vec!["finalizer removed"]),
            (
                Some(Phase::Running),
                vec!["event Stopped", "finalizer removed"],
            ),
        ];
        for (phase, want) in cases {
            let prev = SandboxProcessStatus {
                phase,
                ..Default::default()
            };
            let mut writes: Vec<String> = deletion_note(&prev)
                .map(|n| format!("event {}", n.reason))
                .into_iter()
                .collect();
            writes.push("finalizer removed".into());
            assert_eq!(writes, want, "{phase:?}");
        }
    }
}
