//! The heap as a Prometheus gauge, `<prefix>_heap_bytes{state="in_use"|"free"}`: the same name,
//! help and labels in the operator's metrics and the node agent's.
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HeapLabels {
    state: &'static str,
}

/// Registered once; [`HeapGauge::update`] at each scrape.
#[derive(Clone, Debug, Default)]
pub struct HeapGauge(Family<HeapLabels, Gauge>);

impl HeapGauge {
    /// A gauge registered as `heap_bytes` in `registry` (under its prefix).
    pub fn register(registry: &mut Registry) -> HeapGauge {
        let g = HeapGauge::default();
        registry.register(
            "heap_bytes",
            "The allocator's heap at the scrape: bytes in use (state=in_use) and in free chunks \
             it keeps (state=free; the periodic trim has given the whole free pages among them \
             back, so RSS is less than their sum)",
            g.0.clone(),
        );
        g
    }

    /// Reads the heap now (nothing with an allocator that does not say).
    pub fn update(&self) {
        if let Some(h) = crate::heap() {
            for (state, bytes) in [("in_use", h.in_use), ("free", h.free)] {
                let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
                self.0.get_or_create(&HeapLabels { state }).set(bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The heap as the allocator counts it: what is in use grows with what is held.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_heap_in_use_and_free_is_shown() {
        let mut registry = Registry::with_prefix("x");
        let g = HeapGauge::register(&mut registry);
        let encode = || {
            g.update();
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
            out
        };
        let in_use = |text: &str| -> i64 {
            let line = text
                .lines()
                .find(|l| l.starts_with("x_heap_bytes{state=\"in_use\"}"))
                .unwrap_or_else(|| panic!("{text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        let before = in_use(&encode());
        let held = vec![1u8; 32 << 20];
        let after = in_use(&encode());
        // Other tests allocate and free meanwhile: most of the 32 MiB, not all of it exactly.
        assert!(after - before >= 24 << 20, "{before} → {after}");
        assert!(encode().contains("x_heap_bytes{state=\"free\"}"));
        drop(held);
    }
}
