//! The fixture of the end-to-end tests: each test runs in a temporary namespace of the running
//! test cluster ([`with_ns`]), applies manifests as a user would, waits on watches through
//! `sandbox-client` (no jsonpath polling), and reaches the cluster's fault hooks
//! (`e2e/cluster node stop`, agent deletes, SIGSTOP of the controller manager) as commands.
//!
//! The tests are `#[ignore]`d: `cargo test --workspace` builds them without a cluster, and the
//! bash suite that builds and deploys what they test runs them with `--ignored` (e2e/README.md).
pub mod attach;
pub mod cmd;
pub mod events;
pub mod fields;
pub mod follow;
pub mod host;
pub mod impersonate;
pub mod manifests;
pub mod metrics;
pub mod nodes;
pub mod ns;
pub mod pods;
pub mod processes;
pub mod release;
pub mod tenants;
pub mod upgrade;
pub mod wait;

pub use fields::{cond, field, is_final};
pub use ns::{with_ns, TestNs};

/// The image every test pod runs (built by e2e/images, imported into containerd).
pub const WORKLOAD_IMAGE: &str = "localhost/sandbox-workload:e2e";

/// What the bash wrapper passes down, with a message that says how to run the test instead.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: this test needs what its bash suite sets up; run the suite (e2e/README.md, \"One test alone\")")
    })
}

/// Node 1: the machine's own host (lib/common.sh NODE_NAME), where host-side checks look.
pub fn node1() -> String {
    std::env::var("SPO_NODE1").unwrap_or_else(|_| "spo-e2e".into())
}

/// The repository's root (for the fault hooks under e2e/, the chart). From the run's own
/// CARGO_MANIFEST_DIR (cargo sets it when it runs a test): the compile-time one is where the
/// binary was first built, and a target dir shared by several clones (CI's cache) may hold a
/// binary built from another clone, whose scripts and chart differ.
pub fn repo_root() -> std::path::PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    dir.join("../..")
}
