//! The aggregated wing: the extension API server the API server proxies to
//! (`subresources.sandbox.dev`: [`subresources`]; `processes.sandbox.dev`: [`processes`]) and its
//! certificates ([`certs`]). What it
//! serves comes from the node agents, through [`crate::agent::Agents`]; it never imports the
//! reconcile wing.
pub mod certs;
pub mod processes;
pub mod subresources;
