//! What e2e/suites/upgrade's test drives: `helm upgrade` and `helm rollback` as a user runs them, and
//! clients that loop on one operation meanwhile, each attempt bounded and timed, so the longest
//! time an operation kept failing can be told (docs/benchmarks.md, "Upgrade and rollback").
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use tokio::sync::watch;

use crate::cmd;

/// One attempt of a looping client: when it began, and whether it worked (why not, if not).
#[derive(Clone, Debug)]
pub struct Attempt {
    pub at: Instant,
    pub error: Option<String>,
}

/// The longest time an operation kept failing: from the start of a failed attempt after a
/// good one (or the first attempt) to the start of the next good attempt (or `end`, if none
/// came). Zero when nothing failed.
pub fn longest_outage(attempts: &[Attempt], end: Instant) -> Duration {
    let mut longest = Duration::ZERO;
    let mut failing_since: Option<Instant> = None;
    for a in attempts {
        match (&a.error, failing_since) {
            (Some(_), None) => failing_since = Some(a.at),
            (None, Some(since)) => {
                longest = longest.max(a.at - since);
                failing_since = None;
            }
            _ => {}
        }
    }
    if let Some(since) = failing_since {
        longest = longest.max(end.saturating_duration_since(since));
    }
    longest
}

/// How many attempts failed, and the first distinct reasons (for a note).
pub fn failures(attempts: &[Attempt]) -> (usize, Vec<String>) {
    let mut reasons: Vec<String> = Vec::new();
    let mut n = 0;
    for e in attempts.iter().filter_map(|a| a.error.as_ref()) {
        n += 1;
        let short: String = e.chars().take(160).collect();
        if reasons.len() < 3 && !reasons.contains(&short) {
            reasons.push(short);
        }
    }
    (n, reasons)
}

/// Runs `op(i)` for i = 0, 1, … every `every` (each attempt bounded by `limit`) until `stop`
/// turns true and at least `min` attempts were made; the attempts.
pub async fn looping<F, Fut>(
    mut stop: watch::Receiver<bool>,
    every: Duration,
    limit: Duration,
    min: u32,
    mut op: F,
) -> Vec<Attempt>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let mut attempts = Vec::new();
    let mut i = 0;
    while !(*stop.borrow_and_update() && i >= min) {
        let at = Instant::now();
        let error = match tokio::time::timeout(limit, op(i)).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("{e:#}")),
            Err(_) => Some(format!("no answer within {limit:?}")),
        };
        attempts.push(Attempt { at, error });
        i += 1;
        let next = at + every;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
    }
    attempts
}

/// `helm ARGS` (bounded by 6 min, helm's own `--timeout 5m` inside it); how long it took.
pub async fn helm(args: &[&str]) -> Result<Duration> {
    let t0 = Instant::now();
    let out = cmd::run("helm", args, None, Duration::from_secs(360)).await?;
    if !out.success() {
        bail!(
            "helm {}: exit {:?}: {}{}",
            args.join(" "),
            out.code,
            out.stdout,
            out.stderr
        );
    }
    Ok(t0.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, secs: u64, ok: bool) -> Attempt {
        Attempt {
            at: t0 + Duration::from_secs(secs),
            error: (!ok).then(|| "refused".to_string()),
        }
    }

    #[test]
    fn the_longest_run_of_failures_counts_to_the_next_good_attempt() {
        let t0 = Instant::now();
        // (attempts as (second, ok), the end's second, the longest outage's seconds)
        type Case = (&'static [(u64, bool)], u64, u64);
        let cases: &[Case] = &[
            (&[], 10, 0),
            (&[(0, true), (1, true)], 10, 0),
            // one failure at 1, good again at 2
            (&[(0, true), (1, false), (2, true)], 10, 1),
            // two runs: 1..4 (3 s) and 6..7 (1 s)
            (
                &[
                    (0, true),
                    (1, false),
                    (2, false),
                    (4, true),
                    (6, false),
                    (7, true),
                ],
                10,
                3,
            ),
            // failing from the first attempt
            (&[(0, false), (5, true)], 10, 5),
            // still failing at the end
            (&[(0, true), (3, false)], 10, 7),
        ];
        for (attempts, end, want) in cases {
            let a: Vec<Attempt> = attempts.iter().map(|&(s, ok)| at(t0, s, ok)).collect();
            let got = longest_outage(&a, t0 + Duration::from_secs(*end));
            assert_eq!(got, Duration::from_secs(*want), "{attempts:?}");
        }
    }
}
