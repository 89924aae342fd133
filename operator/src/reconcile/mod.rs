//! The reconcile wing: the controller ([`controller`]) and what one reconcile does to one
//! SandboxProcess: read the object as cached ([`cache`], [`watched`]) and its pod ([`pod`],
//! [`crate::envfrom`], on the floor: the process API reads them too), decide ([`apply`], [`cleanup`]), act on its node's agent once ([`act`], with
//! what is remembered per object in [`memo`]), compute the status, pure ([`crate::status`], on the floor: the process API computes it too), and write
//! it ([`writer`]). [`context`] is what every reconcile shares; [`error`] its one error type.
//! Below it: [`crate::agent`] (the nodes) and the floor.
pub mod act;
pub mod apply;
pub mod cache;
pub mod cleanup;
pub mod context;
pub mod controller;
pub mod deleted;
pub mod error;
pub mod finalizer;
pub mod memo;
pub mod watched;
pub mod writer;
