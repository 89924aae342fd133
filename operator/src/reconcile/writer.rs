//! The status writer: one server-side-apply patch with a timeout, counted in metrics, then the
//! Events for the transitions.
use std::hash::{Hash, Hasher};
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Resource, ResourceExt};
use sandbox_api::crd::{self, SandboxProcess, SandboxProcessStatus};
use tracing::{debug, info, warn};

use crate::reconcile::context::{Context, FIELD_MANAGER};
use crate::reconcile::error::Error;
use crate::status;

/// How long one status write may take before the reconcile gives up and retries with backoff.
const STATUS_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Writes `next` when it differs from `prev` and publishes the transitions' Events. A status the
/// API server refused for its content before is written withheld at once.
pub async fn write(
    ctx: &Context,
    api: &Api<SandboxProcess>,
    obj: &SandboxProcess,
    prev: &SandboxProcessStatus,
    next: &SandboxProcessStatus,
) -> Result<(), Error> {
    let uid = obj.uid().unwrap_or_default();
    write_changed(ctx, api, obj, prev, next).await?;
    if status::refreshes(prev, next) {
        // Usage or the process count alone is a refresh too, or a busy process without output
        // would have its usage written at every sample.
        ctx.memo.output_written(&uid);
    }
    for note in status::transitions(prev, next) {
        publish(ctx, obj, note).await;
    }
    Ok(())
}

/// Writes `next` unless the object already shows it (or, for a status refused before, its
/// withheld form).
pub async fn write_changed(
    ctx: &Context,
    api: &Api<SandboxProcess>,
    obj: &SandboxProcess,
    prev: &SandboxProcessStatus,
    next: &SandboxProcessStatus,
) -> Result<(), Error> {
    let uid = obj.uid().unwrap_or_default();
    if ctx.memo.was_refused(&uid, digest(next)) {
        let w = status::withheld(next, "refused before");
        if w != *prev {
            send(ctx, api, &obj.name_any(), &w).await?;
        }
        return Ok(());
    }
    if next == prev {
        return Ok(());
    }
    match send(ctx, api, &obj.name_any(), next).await {
        Err(Error::Kube(kube::Error::Api(refusal))) if status::refuses_content(refusal.code) => {
            let why = format!("{} {}: {}", refusal.code, refusal.reason, refusal.message);
            let why = status::printable(&why, 300);
            warn!(refusal = %why, "the API server refused the status; writing it withheld");
            ctx.memo.refused(&uid, digest(next));
            ctx.metrics.status_withheld();
            send(ctx, api, &obj.name_any(), &status::withheld(next, &why)).await?;
            let message = format!("The API server refused this status for its content ({why}): the output tail and logMatch line are withheld, messages kept as printable ASCII");
            let note = status::Note {
                warning: true,
                reason: "StatusWithheld",
                message,
            };
            publish(ctx, obj, note).await;
            Ok(())
        }
        r => r,
    }
}

/// A digest of a status, to know it again.
fn digest(s: &SandboxProcessStatus) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(s).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// One server-side apply of `status`, with a timeout, counted in metrics.
async fn send(
    ctx: &Context,
    api: &Api<SandboxProcess>,
    name: &str,
    status: &SandboxProcessStatus,
) -> Result<(), Error> {
    let patch = serde_json::json!({
        "apiVersion": crd::API_VERSION,
        "kind": crd::KIND,
        "status": status,
    });
    // Escaped for the API server's YAML decoder: any byte of output reaches the status as it is.
    let body = sandbox_api::apply::body(&patch).map_err(kube::Error::SerdeError)?;
    // A wedged API server must not hold a reconcile worker: the write is retried with backoff.
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let patch = Patch::Apply(&body);
    let write = api.patch_status(name, &params, &patch);
    match tokio::time::timeout(STATUS_WRITE_TIMEOUT, write).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            ctx.metrics.status_write_failed("kube");
            return Err(e.into());
        }
        Err(_) => {
            ctx.metrics.status_write_failed("timeout");
            return Err(Error::StatusWriteTimeout(STATUS_WRITE_TIMEOUT));
        }
    }
    ctx.metrics.status_written();
    debug!(phase = ?status.phase, "status written");
    Ok(())
}

pub async fn publish(ctx: &Context, obj: &SandboxProcess, note: status::Note) {
    let action = if note.reason == "Started" {
        "Start"
    } else {
        "Observe"
    };
    let ev = Event {
        type_: if note.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: note.reason.into(),
        note: Some(truncate(&note.message, 1000)),
        action: action.into(),
        secondary: None,
    };
    info!(reason = note.reason, message = %note.message, "event");
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    if let Err(e) = recorder.publish(&ev, &obj.object_ref(&())).await {
        warn!(error = %e, reason = note.reason, "publishing an event");
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s[..cut].to_string()
}
