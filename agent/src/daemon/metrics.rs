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
use sandbox_api::wire::{Phase, ProcessRecord};

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
        Metrics {
            registry,
            start_seconds,
            errors,
            processes,
            output_bytes,
            dropped_bytes,
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

    /// The text exposition, with the gauges taken from `records` now.
    pub fn encode(&self, records: &[ProcessRecord]) -> String {
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
        let text = m.encode(&[a, b]);
        for want in [
            "sandbox_agent_processes{phase=\"Running\"} 1",
            "sandbox_agent_processes{phase=\"Exited\"} 1",
            "sandbox_agent_processes{phase=\"Starting\"} 0",
            "sandbox_agent_output_bytes 15",
            "sandbox_agent_output_dropped_bytes 7",
            "sandbox_agent_errors_total{code=\"InvalidRequest\"} 2",
            "sandbox_agent_start_duration_seconds_count 1",
        ] {
            assert!(text.contains(want), "{want} not in:\n{text}");
        }
        assert!(!text.contains("\"a\""), "no process ids");
        assert!(m
            .encode(&[])
            .contains("sandbox_agent_processes{phase=\"Running\"} 0"));
    }
}
