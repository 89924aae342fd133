//! Prometheus metrics (prometheus-client) and the HTTP endpoint serving them with health checks.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::{text::encode, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use sandbox_api::crd::Phase;

/// Where the per-phase gauge reads the objects from at each scrape (the reconcile wing hands in
/// its cache: metrics sit below the wings and know no object type).
pub trait Phases: Send + Sync {
    fn each_phase(&self, f: &mut dyn FnMut(Option<Phase>));
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertificateLabels {
    pub certificate: String,
}

pub struct Metrics {
    registry: Registry,
    reconciles: Counter,
    errors: Family<ErrorLabels, Counter>,
    duration: Histogram,
    processes: Family<PhaseLabels, Gauge>,
    status_writes: Counter,
    status_write_failures: Family<ErrorLabels, Counter>,
    status_writes_withheld: Counter,
    leader: Gauge,
    heap: sandbox_memory::HeapGauge,
    certificate_expiry: Family<CertificateLabels, Gauge>,
    /// The objects `processes` counts by phase at each scrape (the controller's cache, once it
    /// runs). Counted from the cache rather than remembered per object: a map of each object's
    /// last phase held ~100 B of heap per object (tests/perobj_heap.rs).
    objects: Mutex<Option<Arc<dyn Phases>>>,
    pub ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("sandbox_operator");
        let reconciles = Counter::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let processes = Family::<PhaseLabels, Gauge>::default();
        let status_writes = Counter::default();
        let status_write_failures = Family::<ErrorLabels, Counter>::default();
        let status_writes_withheld = Counter::default();
        let leader = Gauge::default();
        let certificate_expiry = Family::<CertificateLabels, Gauge>::default();
        registry.register("reconciles", "Reconciliations run", reconciles.clone());
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "When a certificate this replica serves expires (certificate=serving: the subresource \
             API's and the webhook's)",
            certificate_expiry.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciliations that failed, by error",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of reconciliations",
            duration.clone(),
        );
        registry.register(
            "processes",
            "SandboxProcess objects by phase",
            processes.clone(),
        );
        registry.register(
            "status_writes",
            "Status patches sent (a reconcile that changes nothing writes nothing)",
            status_writes.clone(),
        );
        registry.register(
            "status_write_failures",
            "Status patches that failed, by error (timeout: no answer within 10 s)",
            status_write_failures.clone(),
        );
        registry.register(
            "status_writes_withheld",
            "Statuses the API server refused for their content, written again without the \
             output tail, logMatch line and non-ASCII message text",
            status_writes_withheld.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader lease",
            leader.clone(),
        );
        let heap = sandbox_memory::HeapGauge::register(&mut registry);
        for p in Phase::ALL {
            processes
                .get_or_create(&PhaseLabels {
                    phase: p.as_str().into(),
                })
                .set(0);
        }
        Metrics {
            registry,
            reconciles,
            errors,
            duration,
            processes,
            status_writes,
            status_write_failures,
            status_writes_withheld,
            leader,
            heap,
            certificate_expiry,
            objects: Mutex::new(None),
            ready: AtomicBool::new(false),
        }
    }

    /// Counts a reconcile and measures it until the returned guard drops.
    pub fn reconcile(&self) -> ReconcileTimer<'_> {
        self.reconciles.inc();
        ReconcileTimer {
            metrics: self,
            start: Instant::now(),
        }
    }

    pub fn error(&self, label: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                error: label.into(),
            })
            .inc();
    }

    pub fn status_written(&self) {
        self.status_writes.inc();
    }

    pub fn status_withheld(&self) {
        self.status_writes_withheld.inc();
    }

    pub fn status_write_failed(&self, label: &str) {
        self.status_write_failures
            .get_or_create(&ErrorLabels {
                error: label.into(),
            })
            .inc();
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// When the `certificate` served now expires (unix seconds); unreadable: 0, which an
    /// expiry alert takes as expired.
    pub fn certificate_expires(&self, certificate: &str, not_after: Option<i64>) {
        self.certificate_expiry
            .get_or_create(&CertificateLabels {
                certificate: certificate.into(),
            })
            .set(not_after.unwrap_or(0));
    }

    /// Counts `objects` by phase from now on (in every scrape).
    pub fn count_phases_of(&self, objects: Arc<dyn Phases>) {
        *self.objects.lock().unwrap() = Some(objects);
    }

    fn count_phases(&self) {
        let Some(objects) = self.objects.lock().unwrap().clone() else {
            return;
        };
        let mut counts = [0i64; Phase::ALL.len()];
        objects.each_phase(&mut |phase| {
            if let Some(i) = Phase::ALL.iter().position(|p| Some(*p) == phase) {
                counts[i] += 1;
            }
        });
        for (p, n) in Phase::ALL.iter().zip(counts) {
            self.processes
                .get_or_create(&PhaseLabels {
                    phase: p.as_str().into(),
                })
                .set(n);
        }
    }

    pub fn encode(&self) -> String {
        self.count_phases();
        self.heap.update();
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .duration
            .observe(self.start.elapsed().as_secs_f64());
    }
}

/// Serves `/metrics`, `/healthz` (the process runs) and `/readyz` (leader and controller running).
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> anyhow::Result<()> {
    let app = Router::new()
        .route(
            "/metrics",
            get(|State(m): State<Arc<Metrics>>| async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    m.encode(),
                )
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(m): State<Arc<Metrics>>| async move {
                if m.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ok").into_response()
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not leading").into_response()
                }
            }),
        )
        .with_state(metrics);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciles_errors_and_durations_are_exported() {
        let m = Metrics::new();
        drop(m.reconcile());
        m.error("agent");
        m.certificate_expires("serving", Some(1_900_000_000));
        let text = m.encode();
        assert!(
            text.contains(
                "sandbox_operator_certificate_expiry_timestamp_seconds{certificate=\"serving\"} 1900000000"
            ),
            "{text}"
        );
        assert!(
            text.contains("sandbox_operator_reconciles_total 1"),
            "{text}"
        );
        assert!(
            text.contains("sandbox_operator_reconcile_errors_total{error=\"agent\"} 1"),
            "{text}"
        );
        assert!(text.contains("sandbox_operator_reconcile_duration_seconds_count 1"));
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        assert!(text.contains("sandbox_operator_heap_bytes{state=\"in_use\"}"));
    }
}
