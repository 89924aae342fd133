//! The write plan: what a reconcile does with the status it computed (docs/writes.md).
use std::time::Duration;

use sandbox_api::crd::{condition, SandboxProcessStatus};

use super::{is_final, is_started, LAUNCHING};

/// What becomes of a computed status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// The object already shows it: no write.
    Nothing,
    /// The first status saying the process started, held back: while the agent still launches
    /// it (at most [`LAUNCH_HOLD`]), then once for [`START_SETTLE`] after it runs. A process that
    /// ends meanwhile gets its final status as its only status write. Look again `after` this
    /// (the agent's watch brings news sooner); `settling`: held while the process runs.
    Hold { after: Duration, settling: bool },
    /// One status write.
    Status,
}

/// How long a started process's first status waits for its end once it runs. A `true` started
/// 20 at once on the test cluster had its final record reach the operator 10-230 ms after its
/// Running one (the supervisor's reap, final record, the agent's watch): this covers that,
/// with a margin.
pub const START_SETTLE: Duration = Duration::from_millis(300);
/// How long a launch (the runtime's exec) may keep the first started status back: a slower one
/// is shown (Running, `Ready=False Starting`) rather than nothing.
pub const LAUNCH_HOLD: Duration = Duration::from_secs(2);

/// A first started status held back so far: for how long, and whether while the process ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub for_: Duration,
    pub running: bool,
}

/// `stored`: the object's status; `next`: the computed one; `held`: how the first started
/// status was held back so far (`None`: not). A long process's Running status is late by its
/// launch and one settle time, never more.
pub fn plan(
    stored: &SandboxProcessStatus,
    next: &SandboxProcessStatus,
    held: Option<Held>,
) -> Write {
    if next == stored {
        return Write::Nothing;
    }
    if is_started(stored) || !is_started(next) || is_final(next) {
        return Write::Status;
    }
    if next.phase.is_none() {
        // Taken as started but nothing learned (the agent briefly unreachable): nothing to show.
        return Write::Hold {
            after: START_SETTLE,
            settling: false,
        };
    }
    let launching = next
        .condition(condition::READY)
        .is_some_and(|c| c.reason == LAUNCHING);
    let for_ = held.map_or(Duration::ZERO, |h| h.for_);
    match held {
        _ if launching && for_ < LAUNCH_HOLD => Write::Hold {
            after: LAUNCH_HOLD - for_,
            settling: false,
        },
        _ if launching => Write::Status,
        // Looked at again early (another change came): the settle time still runs out first.
        Some(Held { running: true, .. }) if for_ < START_SETTLE => Write::Hold {
            after: START_SETTLE - for_,
            settling: true,
        },
        Some(Held { running: true, .. }) => Write::Status,
        _ => Write::Hold {
            after: START_SETTLE,
            settling: true,
        },
    }
}

/// The status to write while the output is not due (`full`: the one with it, when it is held
/// back): the one without — unless that is written anyway, when the latest output and usage ride
/// along at no extra write.
pub fn with_output(
    stored: &SandboxProcessStatus,
    plain: SandboxProcessStatus,
    full: Option<SandboxProcessStatus>,
) -> SandboxProcessStatus {
    match full {
        Some(full) if plain != *stored => full,
        _ => plain,
    }
}

/// Whether writing `next` over `prev` refreshes what is written at most every `OUTPUT_REFRESH`
/// (output, usage, the process count, stdin's count): the refresh interval counts from such a
/// write.
pub fn refreshes(prev: &SandboxProcessStatus, next: &SandboxProcessStatus) -> bool {
    next.output != prev.output
        || next.usage != prev.usage
        || next.processes != prev.processes
        || next.stdin != prev.stdin
}

#[cfg(test)]
mod tests {
    use sandbox_api::crd::Phase;

    use super::*;

    /// The first started status, by what the look learned and how long it was held so far.
    #[test]
    fn the_first_started_status_is_held_until_there_is_something_to_show() {
        let started = |phase| SandboxProcessStatus {
            pod_uid: Some("pod-1".into()),
            phase,
            ..Default::default()
        };
        let held = |ms, running| {
            Some(Held {
                for_: Duration::from_millis(ms),
                running,
            })
        };
        let hold = |ms, settling| Write::Hold {
            after: Duration::from_millis(ms),
            settling,
        };
        let none = SandboxProcessStatus::default();
        let cases = [
            (started(None), held(1000, true), hold(300, false)),
            (started(Some(Phase::Running)), None, hold(300, true)),
            (
                started(Some(Phase::Running)),
                held(100, true),
                hold(200, true),
            ),
            (
                started(Some(Phase::Running)),
                held(300, true),
                Write::Status,
            ),
            (started(Some(Phase::Exited)), None, Write::Status),
            (none.clone(), None, Write::Nothing),
        ];
        for (next, so_far, want) in cases {
            assert_eq!(plan(&none, &next, so_far), want, "{next:?} {so_far:?}");
        }
    }
}
