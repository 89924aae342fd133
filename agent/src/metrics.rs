//! The agent's Prometheus metrics, served on their own listener (`--metrics-listen`): aggregates
//! only — no process ids, commands, environment or output — so they need no token, unlike the
//! node-root-equivalent API.
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use sandbox_wire::wire::{Phase, ProcessRecord};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

pub struct Metrics {
    registry: Registry,
    start_seconds: Histogram,
    errors: Family<CodeLabels, Counter>,
    processes: Family<PhaseLabels, Gauge>,
    output_bytes: Gauge,
    dropped_bytes: Gauge,
    lost: Counter,
    state_available: Gauge,
    state_capacity: Gauge,
    cert_expiry: Gauge,
    heap: sandbox_memory::HeapGauge,
}

/// What the node tells at scrape time, beside the records.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeFacts {
    /// Processes recorded Lost since this agent started.
    pub lost: u64,
    /// The state dir's filesystem: bytes available to the agent, and its size.
    pub state_dir: Option<(u64, u64)>,
    /// When the agent's serving certificate expires (unix seconds), with TLS on.
    pub cert_expiry: Option<i64>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("sandbox_agent");
        let start_seconds = Histogram::new(exponential_buckets(0.002, 2.0, 14));
        let errors = Family::<CodeLabels, Counter>::default();
        let processes = Family::<PhaseLabels, Gauge>::default();
        let output_bytes = Gauge::default();
        let dropped_bytes = Gauge::default();
        let (lost, cert_expiry) = (Counter::default(), Gauge::default());
        let (state_available, state_capacity) = (Gauge::default(), Gauge::default());
        registry.register(
            "start_duration_seconds",
            "Start requests answered with a record: to the process running, or failing to (a repeated start of a known process answers at once)",
            start_seconds.clone(),
        );
        registry.register(
            "errors",
            "API requests answered with an error, by error code",
            errors.clone(),
        );
        registry.register(
            "processes",
            "Processes this agent has a record of, by phase",
            processes.clone(),
        );
        registry.register(
            "output_bytes",
            "Output written by the processes this agent has a record of (kept or not)",
            output_bytes.clone(),
        );
        registry.register(
            "output_dropped_bytes",
            "Output of those processes that could not be kept (retention, budget, full disk)",
            dropped_bytes.clone(),
        );
        registry.register(
            "processes_lost",
            "Processes found without their supervisor and recorded Lost (exit code unknown)",
            lost.clone(),
        );
        registry.register(
            "state_dir_available_bytes",
            "Bytes available on the state dir's filesystem (output, records); starts wait below 1 MiB",
            state_available.clone(),
        );
        registry.register(
            "state_dir_capacity_bytes",
            "Size of the state dir's filesystem",
            state_capacity.clone(),
        );
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "When the agent's serving certificate expires (renewed at 2/3 of its validity)",
            cert_expiry.clone(),
        );
        let heap = sandbox_memory::HeapGauge::register(&mut registry);
        Metrics {
            registry,
            start_seconds,
            errors,
            processes,
            output_bytes,
            dropped_bytes,
            lost,
            state_available,
            state_capacity,
            cert_expiry,
            heap,
        }
    }

    pub fn started(&self, took: Duration) {
        self.start_seconds.observe(took.as_secs_f64());
    }

    pub fn error(&self, code: &str) {
        self.errors
            .get_or_create(&CodeLabels { code: code.into() })
            .inc();
    }

    /// The text exposition, with the gauges taken from `records` and the node now.
    pub fn encode(&self, records: &[ProcessRecord], node: NodeFacts) -> String {
        // The counter is the registry's: it only moves on.
        let seen = self.lost.get();
        if node.lost > seen {
            self.lost.inc_by(node.lost - seen);
        }
        let clamp = |v: u64| v.min(i64::MAX as u64) as i64;
        if let Some((available, capacity)) = node.state_dir {
            self.state_available.set(clamp(available));
            self.state_capacity.set(clamp(capacity));
        }
        if let Some(t) = node.cert_expiry {
            self.cert_expiry.set(t);
        }
        let phases = [Phase::Starting, Phase::Running, Phase::Exited, Phase::Error];
        for p in phases {
            let n = records.iter().filter(|r| r.phase == p).count();
            self.processes
                .get_or_create(&PhaseLabels {
                    phase: format!("{p:?}"),
                })
                .set(n as i64);
        }
        let sum = |f: fn(&ProcessRecord) -> u64| {
            records
                .iter()
                .map(f)
                .fold(0u64, u64::saturating_add)
                .min(i64::MAX as u64) as i64
        };
        self.output_bytes.set(sum(|r| {
            r.output.stdout_bytes.saturating_add(r.output.stderr_bytes)
        }));
        self.dropped_bytes.set(sum(|r| r.output.dropped_bytes));
        self.heap.update();
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_follow_the_records_and_errors_count_by_code() {
        let m = Metrics::new();
        let mut a = ProcessRecord::starting("a", "p", "c", "");
        a.phase = Phase::Running;
        a.output.stdout_bytes = 10;
        a.output.stderr_bytes = 5;
        let mut b = ProcessRecord::starting("b", "p", "c", "");
        b.phase = Phase::Exited;
        b.output.dropped_bytes = 7;
        m.started(Duration::from_millis(20));
        m.error("InvalidRequest");
        m.error("InvalidRequest");
        let node = NodeFacts {
            lost: 2,
            state_dir: Some((1 << 30, 4 << 30)),
            cert_expiry: Some(1_900_000_000),
        };
        let text = m.encode(&[a, b], node);
        for want in [
            "sandbox_agent_processes{phase=\"Running\"} 1",
            "sandbox_agent_processes{phase=\"Exited\"} 1",
            "sandbox_agent_processes{phase=\"Starting\"} 0",
            "sandbox_agent_output_bytes 15",
            "sandbox_agent_output_dropped_bytes 7",
            "sandbox_agent_errors_total{code=\"InvalidRequest\"} 2",
            "sandbox_agent_start_duration_seconds_count 1",
            "sandbox_agent_processes_lost_total 2",
            "sandbox_agent_state_dir_available_bytes 1073741824",
            "sandbox_agent_state_dir_capacity_bytes 4294967296",
            "sandbox_agent_certificate_expiry_timestamp_seconds 1900000000",
        ] {
            assert!(text.contains(want), "{want} not in:\n{text}");
        }
        assert!(!text.contains("\"a\""), "no process ids");
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        assert!(text.contains("sandbox_agent_heap_bytes{state=\"in_use\"}"));
        let again = m.encode(&[], NodeFacts::default());
        assert!(again.contains("sandbox_agent_processes{phase=\"Running\"} 0"));
        assert!(
            again.contains("sandbox_agent_processes_lost_total 2"),
            "never back"
        );
    }
}
