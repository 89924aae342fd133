//! The process contract's rules, written once, under one path.
//!
//! The operator checks a SandboxProcess spec with [`spec`] before it asks an agent for anything;
//! the agent checks every start request at its door with [`start`]. The rules live in two
//! files: [`crate::wire_rules`] for the start request (all the agent needs) and
//! [`crate::spec_rules`] for the object; this module only gathers them, so neither depends on
//! the other's side and the CRD types can use the wire rules without a cycle.
pub use crate::names;
#[cfg(feature = "crd")]
pub use crate::spec_rules::{spec, spec_update};
pub use crate::wire_rules::*;
