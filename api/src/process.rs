//! `processes.sandbox.dev/v1alpha1` kind `Process` as a typed resource for kube-rs clients: a
//! SandboxProcess spec and status, served from the nodes by the operator (docs/concepts/processes.md),
//! never a CRD (the operator publishes its OpenAPI), so no schema is derived here.
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use crate::crd::{SandboxProcess, SandboxProcessSpec, SandboxProcessStatus};

/// The spec of a Process: a SandboxProcess's, field for field.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "processes.sandbox.dev",
    version = "v1alpha1",
    kind = "Process",
    plural = "processes",
    shortname = "proc",
    namespaced,
    status = "SandboxProcessStatus",
    schema = "disabled",
    doc = "A process run inside a pod's container, served from its node (never stored in etcd)."
)]
pub struct ProcessSpec {
    #[serde(flatten)]
    pub spec: SandboxProcessSpec,
}

/// A Process read as the SandboxProcess it mirrors (metadata, spec and status as they are), so
/// the status rules (`is_final`, `exit_of`, ...) read both.
impl From<Process> for SandboxProcess {
    fn from(p: Process) -> SandboxProcess {
        let mut o = SandboxProcess::new("", p.spec.spec);
        o.metadata = p.metadata;
        o.status = p.status;
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    /// A served object reads into the spec and status a SandboxProcess has.
    #[test]
    fn a_served_process_reads_as_its_sandbox_process() {
        let served = serde_json::json!({
            "apiVersion": "processes.sandbox.dev/v1alpha1", "kind": "Process",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
            "spec": {"podName": "work", "command": ["sh", "-c", "exit 3"], "stdin": true},
            "status": {"phase": "Exited", "exit": {"code": 3}},
        });
        let p: Process = serde_json::from_value(served).unwrap();
        assert_eq!(Process::plural(&()), "processes");
        let o = SandboxProcess::from(p);
        assert_eq!(o.metadata.name.as_deref(), Some("p"));
        assert_eq!(o.spec.command, ["sh", "-c", "exit 3"]);
        assert!(o.spec.stdin);
        let status = o.status.unwrap();
        assert_eq!(status.exit.map(|e| e.code), Some(3));
    }
}
