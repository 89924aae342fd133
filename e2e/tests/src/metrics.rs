//! Reading a Prometheus text exposition (the operator's `/metrics`) as the bash suites' awk did.

/// The value of the sample whose name (with labels, if any) is exactly `sample`.
pub fn value(text: &str, sample: &str) -> Option<f64> {
    samples(text)
        .find(|(name, _)| *name == sample)
        .map(|(_, v)| v)
}

/// The sum of every sample of a metric (all its label sets): lines starting with `metric`.
pub fn sum(text: &str, metric: &str) -> f64 {
    samples(text)
        .filter(|(name, _)| name.starts_with(metric))
        .map(|(_, v)| v)
        .sum()
}

/// (name with labels, value) of every sample line; comments skipped.
fn samples(text: &str) -> impl Iterator<Item = (&str, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next()?;
            Some((name, parts.next()?.parse().ok()?))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP sandbox_operator_status_writes Status writes.\n\
        # TYPE sandbox_operator_status_writes counter\n\
        sandbox_operator_status_writes_total 12\n\
        sandbox_operator_status_write_failures_total{kind=\"kube\"} 2\n\
        sandbox_operator_status_write_failures_total{kind=\"timeout\"} 1\n\
        sandbox_operator_status_writes_withheld_total 0\n";

    #[test]
    fn samples_read_as_awk_read_them() {
        assert_eq!(
            value(TEXT, "sandbox_operator_status_writes_total"),
            Some(12.0)
        );
        assert_eq!(
            value(TEXT, "sandbox_operator_status_writes_withheld_total"),
            Some(0.0)
        );
        assert_eq!(value(TEXT, "sandbox_operator_status_writes"), None);
        assert_eq!(
            sum(TEXT, "sandbox_operator_status_write_failures_total"),
            3.0
        );
        assert_eq!(sum(TEXT, "nothing_total"), 0.0);
    }
}
