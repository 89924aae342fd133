//! The agent↔supervisor protocol, and what else the node agent's daemon (`sandbox-agent`) and its
//! supervisors (`sandbox-supervisor`) both use; depends on neither (Cargo keeps it so).
//!
//! - [`exec_id`]: the idempotency key and its validation.
//! - [`layout`]: the on-disk state directory (one place for every path).
//! - [`record`]: atomic reads/writes of process records.
//! - [`ledger`]: the output ledger (framed, segmented, capped) and its cursor reader.
//! - [`launch`]: what the agent hands a supervisor and what the supervisor publishes back;
//!   [`control`]: the messages on a supervisor's control socket.
//! - [`readiness`]: tcpSocket / httpGet probes inside the pod's network namespace, logMatch.
//! - [`wait`]: how a child ended (exit code or any signal 1–64), from the raw wait status;
//!   [`signals`]: signal dispositions reset below the C library (the supervisor's, for the
//!   runtime's child; beside `wait`, whose tests use it).
//! - [`procfs`]: `/proc` reads (start times, liveness); [`clock`]: RFC 3339 timestamps.
pub mod clock;
pub mod control;
pub mod exec_id;
pub mod launch;
pub mod layout;
pub mod ledger;
pub mod procfs;
pub mod readiness;
pub mod record;
pub mod signals;
pub mod wait;
