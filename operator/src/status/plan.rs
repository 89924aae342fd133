//! The write plan: what a reconcile does with the status it computed (docs/writes.md).
use sandbox_api::crd::SandboxProcessStatus;

use super::{is_final, is_started};

/// What becomes of a computed status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// The object already shows it: no write.
    Nothing,
    /// The first status saying the process runs, held back once for `START_SETTLE`: a process
    /// that ends meanwhile gets its final status as its only status write.
    Hold,
    /// One status write.
    Status,
}

/// `stored`: the object's status; `next`: the computed one; `held`: the first Running status
/// was held back already (it is held at most once, so a long process's Running is late by one
/// settle time, never more).
pub fn plan(stored: &SandboxProcessStatus, next: &SandboxProcessStatus, held: bool) -> Write {
    if next == stored {
        Write::Nothing
    } else if !held && !is_started(stored) && is_started(next) && !is_final(next) {
        Write::Hold
    } else {
        Write::Status
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
