//! The node agent daemon (`sandbox-agent serve`): starts processes inside pod containers with
//! the container's own security context, each under a `sandbox-supervisor` (crate
//! `sandbox-supervisor`) that outlives the agent, and serves their state and output to the
//! operator. What it and the supervisors agree on is `sandbox-node-protocol`; what it and the
//! operator agree on, `sandbox-wire`. Cargo keeps the three apart: neither binary links the other.
//!
//! - [`server`]: the HTTP API; [`auth`]: bearer tokens (TokenReview); [`tls`]: mutual TLS (its
//!   certificate by CSR, the callers' CA bundle); [`api_server`]: the `kube::Client` they use.
//! - [`registry`]: start once per exec id, supervision, stop; records, watch, caps.
//! - [`runtime`]: finding a container (CRI or a runc state dir) and building the exec spec.
//! - [`spawn`]: supervisors outside the agent's cgroup, in the host mount namespace;
//!   [`control_client`]: requests to a supervisor's control socket.
//! - [`budget`]: the node's output budget and the retention of finished output.
//! - [`follow`]: log follows woken by the ledger (inotify), with caps.
//! - [`metrics`]: Prometheus metrics (aggregates only) on their own listener; [`error`]: the
//!   agent's errors, as its API answers them.
pub mod api_server;
pub mod auth;
pub mod budget;
pub mod control_client;
pub mod error;
pub mod follow;
pub mod metrics;
pub mod registry;
pub mod runtime;
pub mod server;
pub mod spawn;
pub mod tls;
