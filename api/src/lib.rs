#[cfg(feature = "crd")]
pub mod admission;
pub mod apply;
pub mod channel;
#[cfg(feature = "crd")]
pub mod convert;
#[cfg(feature = "crd")]
pub mod crd;
#[cfg(feature = "crd")]
pub mod process;
#[cfg(feature = "crd")]
pub mod quantity;
#[cfg(feature = "crd")]
pub mod spec_fields;
#[cfg(feature = "crd")]
pub mod spec_rules;
pub mod validate;
// The operator↔agent wire lives in `sandbox-wire` (the node's crates use it without the CRD
// types); its modules are re-exported here under their own names.
#[cfg(feature = "tls")]
pub use sandbox_wire::tls;
pub use sandbox_wire::{cursor, names, wire, wire_rules};
