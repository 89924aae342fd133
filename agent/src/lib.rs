//! Node agent: starts processes inside pod containers with the container's own security context,
//! supervises each with a `sandbox-supervisor` that outlives the agent, and serves their state and
//! output to the operator.
//!
//! Where things live:
//! - [`exec_id`]: the idempotency key and its validation.
//! - [`layout`]: the on-disk state directory (one place for every path).
//! - [`record`]: atomic reads/writes of process records.
//! - [`ledger`]: the output ledger (framed, segmented, capped) and its cursor reader.
//! - [`runtime`]: finding a container (CRI or a runc state dir) and building the exec spec.
//! - [`metrics`]: Prometheus metrics (aggregates only) on their own listener.
//! - [`cgroup`]: the process tree's own cgroup (membership, kill, limits, usage).
//! - [`supervisor`]: the per-process supervisor (no async runtime; small footprint), one file per
//!   concern: launch, event loop, output, readiness, tree, stop, record file, end.
//! - [`signals`]: signal dispositions reset below the C library, for the runtime's child.
//! - [`wait`]: how a child ended (exit code or any signal 1–64), from the raw wait status.
//! - [`readiness`]: tcpSocket / httpGet probes inside the pod's network namespace, logMatch.
//! - [`budget`]: the node's output budget and the retention of finished output.
//! - [`follow`]: log follows woken by the ledger (inotify), with caps.
//! - [`registry`], [`spawn`], [`control`], [`server`], [`auth`], [`tls`], [`api_server`]: the
//!   agent daemon.
pub mod api_server;
pub mod auth;
pub mod budget;
pub mod cgroup;
pub mod clock;
pub mod control;
pub mod error;
pub mod exec_id;
pub mod follow;
pub mod layout;
pub mod ledger;
pub mod metrics;
pub mod procfs;
pub mod readiness;
pub mod record;
pub mod registry;
pub mod runtime;
pub mod server;
pub mod signals;
pub mod spawn;
pub mod supervisor;
pub mod tls;
pub mod wait;

pub use error::AgentError;
