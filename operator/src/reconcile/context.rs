//! What every part of a reconcile shares: the [`Context`] (clients, caches, the agent registry,
//! settings, memory per object) and the timing constants of the controller.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::Store;
use kube::Client;

use crate::agent::Agents;
use crate::metrics::Metrics;
use crate::reconcile::memo::Memo;

pub use sandbox_api::crd::FINALIZER;
/// Field manager of the status written with server-side apply.
pub const FIELD_MANAGER: &str = "sandbox-operator";
/// The output summary in the status is refreshed at most this often while the process runs:
/// each refresh is an etcd write (docs/concepts/writes.md).
pub const OUTPUT_REFRESH: Duration = Duration::from_secs(30);
/// A delete whose process cannot be stopped (agent unreachable, node still there) is let go
/// after this long, so objects never hang in deletion.
pub const CLEANUP_GIVE_UP: Duration = Duration::from_secs(120);
/// While a deleted object's process is stopping: the fallback recheck (the agent watch usually
/// brings the object back sooner, when the record turns final).
pub(crate) const CLEANUP_RECHECK: Duration = Duration::from_secs(2);
/// The longest any reconcile waits before it looks again by itself.
pub const MAX_REQUEUE: Duration = Duration::from_secs(3600);

/// A Pending object is looked at again at least this often (the pod and agent watches cover the
/// rest).
pub(crate) const PENDING_RECHECK: Duration = Duration::from_secs(30);

/// When to look again for a TTL `left` away. Clamped: kube-runtime's delay queue panics beyond
/// ~795 days (kube-rs issue 1772; clamped there too since 5.0, but not ours to rely on).
pub(crate) fn ttl_requeue(left: Duration) -> Action {
    Action::requeue(left.saturating_add(Duration::from_secs(1)).min(MAX_REQUEUE))
}

pub struct Settings {
    /// How long an agent may be unreachable before the status says so.
    pub agent_grace: Duration,
    /// Reconciles running at once.
    pub concurrency: u16,
    /// How often the agents' processes are compared with the objects (orphans).
    pub orphan_sweep: Duration,
    /// `reportingInstance` of Events.
    pub instance: String,
}

pub struct Context {
    pub client: Client,
    pub pods: Store<Pod>,
    /// The pod cache has its first list (crate::listed: any number of reconciles wait on it).
    pub pods_listed: crate::listed::Listed,
    pub agents: Arc<Agents>,
    /// Who publishes the Events. A [`Recorder`](kube::runtime::events::Recorder) is made per Event: its cache (kept for series of
    /// repeated identical Events) would hold every Event sent in the last 6 minutes — 10,000
    /// with 5,000 short processes — and our Events are transitions, which hardly ever repeat.
    pub reporter: Reporter,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
    /// What is remembered about each object between reconciles.
    pub(crate) memo: Memo,
    /// Objects gone without our finalizer, whose process is stopped and forgotten by
    /// `reconcile::deleted`: from the watch's DELETED events, and from a reconcile whose write
    /// found its object gone (deleted while its start was under way).
    pub(crate) deleted: tokio::sync::mpsc::UnboundedSender<Arc<sandbox_api::crd::SandboxProcess>>,
}

pub(crate) fn now() -> Time {
    Time(Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status;
    use sandbox_api::crd::{Phase, SandboxProcessStatus};

    /// A TTL of years (an object written before the schema bound, or at the bound: 68 years)
    /// requeues within the hour, never beyond what the delay queue can hold.
    #[test]
    fn ttl_requeues_are_clamped() {
        let years = status::ttl_remaining(
            &serde_json::from_value(serde_json::json!({
                "podName": "p", "command": ["x"], "ttlSecondsAfterFinished": i64::MAX
            }))
            .unwrap(),
            &SandboxProcessStatus {
                phase: Some(Phase::Exited),
                finished_at: Some(Time(k8s_openapi::jiff::Timestamp::now())),
                ..Default::default()
            },
            &Time(k8s_openapi::jiff::Timestamp::now()),
        )
        .unwrap();
        assert!(years > Duration::from_secs(86400 * 365 * 1000));
        assert_eq!(ttl_requeue(years), Action::requeue(MAX_REQUEUE));
        assert_eq!(ttl_requeue(Duration::MAX), Action::requeue(MAX_REQUEUE));
        assert_eq!(
            ttl_requeue(Duration::from_secs(9)),
            Action::requeue(Duration::from_secs(10))
        );
    }
}
