//! The operator↔agent wire, on its own so that the node's crates build without the Kubernetes
//! types: the agent API's request and record types ([`wire`]), the start request's rules, the
//! one validator the agent's door and the operator share ([`wire_rules`]), log cursors
//! ([`cursor`]), the names both sides check ([`names`]) and the mutual-TLS server
//! configuration ([`tls`]). `sandbox-api` re-exports each module under the same name, and its CRD
//! types use these only where a field is the same on both sides (each such use says so).
pub mod cursor;
pub mod names;
#[cfg(feature = "tls")]
pub mod tls;
pub mod wire;
pub mod wire_rules;
