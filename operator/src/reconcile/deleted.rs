//! Objects gone without our finalizer holding them (a process final in its first status never
//! has one; a running one may be deleted before it is added, or have it removed by hand): the
//! watch's DELETED event is the one news of it, and the process is stopped and forgotten as a
//! finalizer's cleanup would (`cleanup`), a few at a time. One missed while no watch ran (no
//! operator up, a relist) is the sweep's (`controller::sweep_orphans`).
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::ResourceExt;
use sandbox_api::crd::SandboxProcess;
use tokio::sync::mpsc;
use tracing::{debug, warn, Instrument};

use crate::reconcile::cleanup::cleanup;
use crate::reconcile::context::{Context, CLEANUP_GIVE_UP};
use crate::reconcile::finalizer;
use crate::status::{self, LAUNCH_HOLD};

/// How often a stopping process is looked at again (no reconcile brings this one back).
const RECHECK: Duration = Duration::from_millis(500);

/// Whether a deleted object's process is ours to stop here: not when our finalizer was on it
/// (its removal, after the cleanup, is what deleted it). Asked of the watch's DELETED events
/// before anything is built; an object whose status write found it gone never had it.
pub fn needs_cleanup(meta: &ObjectMeta) -> bool {
    !finalizer::held(meta)
}

/// The object as the deletion worker takes it: its give-up time counts from now, when its
/// deletion was learned (a DELETED event's copy may carry no `deletionTimestamp`).
pub fn stamped(obj: Arc<SandboxProcess>) -> Arc<SandboxProcess> {
    if obj.metadata.deletion_timestamp.is_some() {
        return obj;
    }
    // A settled entry's object is built for this call: taken, not copied.
    let mut obj = Arc::unwrap_or_clone(obj);
    obj.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    Arc::new(obj)
}

/// Runs until `gone` closes: each deleted object's cleanup, `concurrency` at a time.
pub async fn run(
    gone: mpsc::UnboundedReceiver<Arc<SandboxProcess>>,
    ctx: Arc<Context>,
    concurrency: usize,
) {
    let gone = futures::stream::unfold(gone, |mut rx| async { rx.recv().await.map(|e| (e, rx)) });
    gone.for_each_concurrent(concurrency.max(1), |obj| {
        let ctx = ctx.clone();
        async move {
            let span = tracing::info_span!("deleted", object = %format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()));
            forget(obj, ctx).instrument(span).await
        }
    })
    .await
}

/// The cleanup of a deletion. A start sent for a process not shown final may still be under
/// way on its agent (the DELETED event can come before the agent holds it): looked at once more,
/// off the worker's slots, once such a launch has had time to register. (A start sent after the
/// event is the reconcile's: its status write finds the object gone, `apply::gone_meanwhile`.)
async fn forget(obj: Arc<SandboxProcess>, ctx: Arc<Context>) {
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let final_ = obj.status.as_ref().is_some_and(status::is_final);
    let starting = !final_ && ctx.memo.start_sent_for(&uid).is_some();
    if stop_and_forget(&obj, &ctx).await && starting {
        let span = tracing::Span::current();
        tokio::spawn(
            async move {
                tokio::time::sleep(LAUNCH_HOLD + Duration::from_secs(1)).await;
                stop_and_forget(&obj, &ctx).await;
            }
            .instrument(span),
        );
    }
}

/// Stops and forgets, looked at again while the stop runs (bounded by the give-up time, after
/// which `cleanup` forgets anyway); `true` once done. An agent that cannot be asked (three
/// failures) leaves it to the orphan sweep rather than hold a slot other deletions wait for.
async fn stop_and_forget(obj: &Arc<SandboxProcess>, ctx: &Context) -> bool {
    let deadline = tokio::time::Instant::now() + CLEANUP_GIVE_UP + Duration::from_secs(10);
    let mut failures = 0;
    loop {
        match cleanup(obj.clone(), ctx).await {
            Ok(None) => {
                debug!("deleted object's process stopped and forgotten");
                return true;
            }
            Ok(Some(_)) if tokio::time::Instant::now() >= deadline => {
                warn!("deleted object's process not forgotten in time; left to the orphan sweep");
                return false;
            }
            Ok(Some(_)) => {}
            Err(e) if failures >= 2 => {
                warn!(error = %e, "cleanup of a deleted object; left to the orphan sweep");
                return false;
            }
            Err(e) => {
                failures += 1;
                debug!(error = %e, "cleanup of a deleted object; trying again");
            }
        }
        tokio::time::sleep(RECHECK).await;
    }
}
