//! The write plan: what a reconcile does with the status it computed (docs/concepts/writes.md).
use std::time::Duration;

use sandbox_api::crd::{condition, SandboxProcessStatus};

use super::{is_final, is_started, LAUNCHING};

/// What becomes of a computed status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// The object already shows it: no write.
    Nothing,
    /// The first status saying the process started, held back while the agent still launches it
    /// (at most [`LAUNCH_HOLD`]): a process that ends meanwhile gets its final status as its only
    /// status write. Look again `after` this (the agent's watch brings news sooner).
    Hold { after: Duration },
    /// One status write.
    Status,
}

/// How long a launch (the runtime's exec) may keep the first started status back: a slower one
/// is shown (Running, `Ready=False Starting`) rather than nothing.
pub const LAUNCH_HOLD: Duration = Duration::from_secs(2);
/// A process taken as started of which nothing is known yet (its agent briefly unreachable):
/// looked at again this soon.
const UNKNOWN_RECHECK: Duration = Duration::from_millis(300);

/// `stored`: the object's status; `next`: the computed one; `held`: how long the first started
/// status was held back so far (`None`: not). A process the agent says runs is shown Running at
/// once: the wait of a user for Running is not traded for a write. A short one is not shown
/// Running because the supervisor reports a process whose tree already ended once, final
/// (docs/concepts/writes.md).
pub fn plan(
    stored: &SandboxProcessStatus,
    next: &SandboxProcessStatus,
    held: Option<Duration>,
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
            after: UNKNOWN_RECHECK,
        };
    }
    let launching = next
        .condition(condition::READY)
        .is_some_and(|c| c.reason == LAUNCHING);
    match held.unwrap_or(Duration::ZERO) {
        for_ if launching && for_ < LAUNCH_HOLD => Write::Hold {
            after: LAUNCH_HOLD - for_,
        },
        _ => Write::Status,
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

    /// The first started status, by what the look learned and how long it was held so far:
    /// Running at once; held only while launching (bounded) or while nothing is known.
    #[test]
    fn the_first_started_status_is_held_only_while_there_is_nothing_to_show() {
        let started = |phase| SandboxProcessStatus {
            pod_uid: Some("pod-1".into()),
            phase,
            ..Default::default()
        };
        let launching = || {
            let mut s = started(Some(Phase::Running));
            s.conditions = vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: condition::READY.into(),
                status: "False".into(),
                reason: LAUNCHING.into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            }];
            s
        };
        let ms = |ms| Some(Duration::from_millis(ms));
        let hold = |ms| Write::Hold {
            after: Duration::from_millis(ms),
        };
        let none = SandboxProcessStatus::default();
        let cases = [
            (started(None), ms(1000), hold(300)),
            (started(Some(Phase::Running)), None, Write::Status),
            (launching(), None, hold(2000)),
            (launching(), ms(1500), hold(500)),
            (launching(), ms(2000), Write::Status),
            (started(Some(Phase::Exited)), None, Write::Status),
            (none.clone(), None, Write::Nothing),
        ];
        for (next, so_far, want) in cases {
            assert_eq!(plan(&none, &next, so_far), want, "{next:?} {so_far:?}");
        }
    }
}
