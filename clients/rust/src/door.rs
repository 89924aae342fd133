//! The two doors to a process: a SandboxProcess object, stored in etcd (declared, kept by the
//! controller), or a Process served from the nodes (`processes.sandbox.dev`: no etcd write per
//! command, docs/concepts/processes.md). Both have the same spec, status and subresources, so a handle
//! works the same through either; this file is where they differ: the paths and the objects.
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use sandbox_api::crd::SandboxProcess;
use sandbox_api::process::Process as Served;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::logs::encode;

/// Which door a [`crate::Sandbox`] starts and finds processes through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Door {
    /// `sandbox.dev/v1alpha1` SandboxProcess objects (the default): for GitOps, long-lived
    /// processes, anything declared.
    #[default]
    SandboxProcess,
    /// `processes.sandbox.dev/v1alpha1` Processes, served from the nodes: for commands at a
    /// high rate. Kept until their TTL after the end (the chart's default: 1 h).
    Process,
}

impl Door {
    /// The path of a process's subresources, up to its name (`…/NAME`).
    pub(crate) fn path(self, namespace: &str, name: &str) -> String {
        let (ns, name) = (encode(namespace), encode(name));
        match self {
            Door::SandboxProcess => format!(
                "/apis/subresources.sandbox.dev/v1alpha1/namespaces/{ns}/sandboxprocesses/{name}"
            ),
            Door::Process => {
                format!("/apis/processes.sandbox.dev/v1alpha1/namespaces/{ns}/processes/{name}")
            }
        }
    }

    /// What messages call one.
    pub fn singular(self) -> &'static str {
        match self {
            Door::SandboxProcess => "sandboxprocess",
            Door::Process => "process",
        }
    }

    pub(crate) fn sandbox_processes(client: &Client, namespace: &str) -> Api<SandboxProcess> {
        Api::namespaced(client.clone(), namespace)
    }

    pub(crate) fn served(client: &Client, namespace: &str) -> Api<Served> {
        Api::namespaced(client.clone(), namespace)
    }

    /// The object `namespace/name`, read as a SandboxProcess whichever the door.
    pub(crate) async fn get(
        self,
        client: &Client,
        namespace: &str,
        name: &str,
    ) -> Result<Option<SandboxProcess>> {
        Ok(match self {
            Door::SandboxProcess => {
                Self::sandbox_processes(client, namespace)
                    .get_opt(name)
                    .await?
            }
            Door::Process => Self::served(client, namespace)
                .get_opt(name)
                .await?
                .map(SandboxProcess::from),
        })
    }

    /// The objects of `namespace` (every namespace: `None`), by label selector.
    pub(crate) async fn list(
        self,
        client: &Client,
        namespace: Option<&str>,
        lp: &ListParams,
    ) -> Result<Vec<SandboxProcess>> {
        Ok(match (self, namespace) {
            (Door::SandboxProcess, Some(ns)) => {
                Self::sandbox_processes(client, ns).list(lp).await?.items
            }
            (Door::SandboxProcess, None) => {
                Api::<SandboxProcess>::all(client.clone())
                    .list(lp)
                    .await?
                    .items
            }
            (Door::Process, ns) => {
                let api = match ns {
                    Some(ns) => Self::served(client, ns),
                    None => Api::all(client.clone()),
                };
                let items = api.list(lp).await?.items;
                items.into_iter().map(SandboxProcess::from).collect()
            }
        })
    }

    /// Deletes the object: a running process is stopped first (by the operator, or by its
    /// node's agent). Gone already is done.
    pub(crate) async fn delete(self, client: &Client, namespace: &str, name: &str) -> Result<()> {
        let dp = DeleteParams::default();
        let r = match self {
            Door::SandboxProcess => Self::sandbox_processes(client, namespace)
                .delete(name, &dp)
                .await
                .map(|_| ()),
            Door::Process => Self::served(client, namespace)
                .delete(name, &dp)
                .await
                .map(|_| ()),
        };
        match r {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates a Process from the SandboxProcess `manifest` a [`crate::Start`] made: the same
    /// spec, its own kind. The server answers the same name with the same spec with the process
    /// already there, so a retry never starts a second one; another spec is a 409.
    pub(crate) async fn create_served(
        client: &Client,
        namespace: &str,
        mut manifest: Value,
    ) -> std::result::Result<(), kube::Error> {
        manifest["apiVersion"] = "processes.sandbox.dev/v1alpha1".into();
        manifest["kind"] = "Process".into();
        let p: Served = serde_json::from_value(manifest).map_err(kube::Error::SerdeError)?;
        Self::served(client, namespace)
            .create(&PostParams::default(), &p)
            .await
            .map(|_| ())
    }

    /// Fails with [`Error::Transport`] naming the door when a watch cannot go on.
    pub(crate) fn watch_failed(self, name: &str, e: impl std::fmt::Display) -> Error {
        Error::Transport(format!("watching {} {name}: {e}", self.singular()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_door_has_its_path() {
        assert_eq!(
            Door::SandboxProcess.path("ns", "p"),
            "/apis/subresources.sandbox.dev/v1alpha1/namespaces/ns/sandboxprocesses/p"
        );
        assert_eq!(
            Door::Process.path("ns", "a b"),
            "/apis/processes.sandbox.dev/v1alpha1/namespaces/ns/processes/a%20b"
        );
    }
}
