//! The SandboxProcess operator: the controller ([`controller`]), the pure status computation
//! ([`status`]), the agent client and watches ([`agent`]), leader election ([`lease`]), what is remembered per object ([`memo`]), giving freed memory back ([`memtrim`]), metrics
//! ([`metrics`]) and the CRD generator ([`crdgen`]).
pub mod act;
pub mod agent;
pub mod apply;
pub mod cache;
pub mod certs;
pub mod cleanup;
pub mod context;
pub mod controller;
pub mod crdgen;
pub mod envfrom;
pub mod error;
pub mod lease;
pub mod memo;
pub mod memtrim;
pub mod metrics;
pub mod pki;
pub mod pod;
pub mod selftest;
pub mod status;
pub mod subresources;
pub mod watched;
pub mod writer;
