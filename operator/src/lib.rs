//! The SandboxProcess operator, in three wings over a shared floor. Wings import each other only
//! downward, through a named seam (`.ci/modcycles.py` checks it):
//!
//! - [`reconcile`]: the controller that takes each SandboxProcess to its node and writes what
//!   happened into its status. Reaches the nodes through [`agent::Agents`].
//! - [`aggregated`]: the extension API server (subresources, certificates; the home of the
//!   APIs served from the nodes). Reaches the nodes through [`agent::Agents`] too.
//! - [`agent`]: the node agents: their client, whereabouts, watches and trust. The seam both
//!   wings above use.
//!
//! The floor, below every wing: certificates and keys ([`pki`]), metrics ([`metrics`]), leader
//! election ([`lease`]), the CRD generator ([`crdgen`]),
//! the start-up self test ([`selftest`]) and the status of a process, pure ([`status`]: a
//! SandboxProcess's and a `Process`'s alike). Freed memory is given back by `sandbox_memory`, shared
//! with the node agent.
pub mod agent;
pub mod aggregated;
pub mod crdgen;
pub mod envfrom;
pub mod lease;
pub mod listed;
pub mod metrics;
pub mod pki;
pub mod pod;
pub mod reconcile;
pub mod selftest;
pub mod status;
