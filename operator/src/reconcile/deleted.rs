//! Objects gone without our finalizer holding them (a process final in its first status never
//! has one; a running one may be deleted before it is added, or have it removed by hand): the
//! watch's DELETED event is the one news of it, and the process is stopped and forgotten as a
//! finalizer's cleanup would (`cleanup`), a few at a time. One missed while no watch ran (no
//! operator up, a relist) is the sweep's (`controller::sweep_orphans`).
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use sandbox_api::crd::SandboxProcess;
use tokio::sync::mpsc;
use tracing::{debug, warn, Instrument};

use crate::reconcile::cleanup::cleanup;
use crate::reconcile::context::{Context, CLEANUP_GIVE_UP};
use crate::reconcile::finalizer;

/// How often a stopping process is looked at again (no reconcile brings this one back).
const RECHECK: Duration = Duration::from_millis(500);

/// Whether a deleted object's process is ours to stop here: not when our finalizer was on it
/// (its removal, after the cleanup, is what deleted it).
pub fn needs_cleanup(obj: &SandboxProcess) -> bool {
    !finalizer::held(obj)
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
            if !needs_cleanup(&obj) {
                return;
            }
            let span = tracing::info_span!("deleted", object = %format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()));
            forget(obj, &ctx).instrument(span).await
        }
    })
    .await
}

/// The cleanup of a deletion, looked at again until done; bounded by its give-up time.
async fn forget(obj: Arc<SandboxProcess>, ctx: &Context) {
    let mut obj = (*obj).clone();
    // The give-up time counts from the deletion (the event's copy may not carry its time).
    obj.metadata
        .deletion_timestamp
        .get_or_insert_with(|| Time(k8s_openapi::jiff::Timestamp::now()));
    let obj = Arc::new(obj);
    let deadline = tokio::time::Instant::now() + CLEANUP_GIVE_UP + Duration::from_secs(10);
    loop {
        match cleanup(obj.clone(), ctx).await {
            Ok(None) => return debug!("deleted object's process stopped and forgotten"),
            Ok(Some(_)) => {}
            Err(e) => warn!(error = %e, "cleanup of a deleted object"),
        }
        if tokio::time::Instant::now() >= deadline {
            return warn!("deleted object's process not forgotten in time; left to the sweep");
        }
        tokio::time::sleep(RECHECK).await;
    }
}
