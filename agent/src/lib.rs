//! Node agent: starts processes inside pod containers with the container's own security context,
//! supervises each with a `sandbox-supervisor` that outlives the agent, and serves their state and
//! output to the operator.
//!
//! Three folders, by who runs the code:
//! - [`daemon`]: the `sandbox-agent serve` process (HTTP API, authentication, mutual TLS, the
//!   API server client, the registry of processes, container lookup, spawning supervisors, the
//!   output budget, follows, metrics).
//! - [`supervisor`]: the per-process `sandbox-supervisor` (no async runtime; small footprint),
//!   with the process tree's cgroup, which only it touches.
//! - [`shared`]: what both use: the on-disk layout and records, the output ledger, the
//!   supervisor's launch spec and control messages, readiness, wait statuses, `/proc`, errors.
//!
//! `shared` imports neither of the others, and the daemon and the supervisor do not import each
//! other: what they agree on (launch spec, control messages, layout, records) lives in `shared`.
pub mod daemon;
pub mod shared;
pub mod supervisor;

pub use shared::error::AgentError;
