//! What the controller's cache holds of each SandboxProcess. A live object is held whole; a
//! settled one (final, its status current: `status::settled`) only as what its reconcile reads,
//! because nothing recomputes or writes its status again and most objects of a busy cluster are
//! final. The typed object is ~1 KB before any string is stored; a settled entry about half that
//! (docs/benchmarks.md, "Operator memory"). A new generation arrives whole from the watch and is
//! live again.
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use sandbox_api::crd::{
    EndReason, ErrorCode, ExitStatus, Phase, ProcessError, RestartPolicy, SandboxProcess,
    SandboxProcessSpec, SandboxProcessStatus,
};
use serde::{Deserialize, Deserializer};

use crate::reconcile::watched::{resource_of, Meta, UnknownSpec};
use crate::status;

/// One cached SandboxProcess, as the watch delivered it (see the module's comment).
#[derive(Clone, Debug)]
pub enum Entry {
    Live(Arc<SandboxProcess>),
    Settled(Box<Settled>),
}

/// What a settled object's reconcile reads (deletion, the TTL, the finalizer): its metadata, the
/// spec fields a stop and the TTL use, and `status::kept_when_settled` of its status, unpacked
/// (the typed status is 440 bytes even nearly empty; `object` rebuilds it, and
/// cache::tests pins the two to be equal).
#[derive(Clone, Debug)]
pub struct Settled {
    metadata: ObjectMeta,
    pod_name: String,
    stop: bool,
    stop_signal: i32,
    termination_grace_period_seconds: i64,
    ttl_seconds_after_finished: Option<i64>,
    observed_generation: Option<i64>,
    phase: Option<Phase>,
    status_pod_name: Option<String>,
    node_name: Option<String>,
    pod_uid: Option<String>,
    finished_at: Option<Time>,
    exit: Option<ExitStatus>,
    end_reason: Option<EndReason>,
    error: Option<ErrorCode>,
}

impl Entry {
    /// The cache's entry for an object: settled if its status is.
    fn new(mut o: SandboxProcess) -> Entry {
        match o.status.take() {
            Some(s) if status::settled(&s, o.metadata.generation) => {
                Entry::Settled(Box::new(Settled::new(o.metadata, &o.spec, &s)))
            }
            s => {
                o.status = s;
                Entry::Live(Arc::new(o))
            }
        }
    }

    /// The object for a reconcile: the live one, or a settled one rebuilt from what was kept
    /// (its status and spec otherwise empty; nothing on a settled object's path reads them).
    pub fn object(&self) -> Arc<SandboxProcess> {
        match self {
            Entry::Live(o) => o.clone(),
            Entry::Settled(s) => Arc::new(s.object()),
        }
    }

    pub fn phase(&self) -> Option<Phase> {
        match self {
            Entry::Live(o) => o.status.as_ref().and_then(|s| s.phase),
            Entry::Settled(s) => s.phase,
        }
    }
}

impl Settled {
    fn new(metadata: ObjectMeta, spec: &SandboxProcessSpec, s: &SandboxProcessStatus) -> Settled {
        let kept = status::kept_when_settled(s);
        Settled {
            metadata,
            pod_name: spec.pod_name.clone(),
            stop: spec.stop,
            stop_signal: spec.stop_signal,
            termination_grace_period_seconds: spec.termination_grace_period_seconds,
            ttl_seconds_after_finished: spec.ttl_seconds_after_finished,
            observed_generation: kept.observed_generation,
            phase: kept.phase,
            status_pod_name: kept.pod_name,
            node_name: kept.node_name,
            pod_uid: kept.pod_uid,
            finished_at: kept.finished_at,
            exit: kept.exit,
            end_reason: kept.end_reason,
            error: kept.error.map(|e| e.code),
        }
    }

    fn object(&self) -> SandboxProcess {
        let s = self.clone();
        SandboxProcess {
            metadata: s.metadata,
            spec: SandboxProcessSpec {
                pod_name: s.pod_name,
                pod_selector: None,
                container: None,
                command: Vec::new(),
                working_dir: None,
                env: Vec::new(),
                security_context: None,
                timeout_seconds: None,
                readiness: None,
                stop: s.stop,
                stdin: false,
                tty: false,
                terminal: None,
                restart_policy: RestartPolicy::Never,
                stop_signal: s.stop_signal,
                termination_grace_period_seconds: s.termination_grace_period_seconds,
                ttl_seconds_after_finished: s.ttl_seconds_after_finished,
                start_deadline_seconds: None,
                resources: None,
            },
            status: Some(SandboxProcessStatus {
                observed_generation: s.observed_generation,
                phase: s.phase,
                pod_name: s.status_pod_name,
                node_name: s.node_name,
                pod_uid: s.pod_uid,
                finished_at: s.finished_at,
                exit: s.exit,
                end_reason: s.end_reason,
                error: s.error.map(|code| ProcessError {
                    code,
                    message: String::new(),
                }),
                ..Default::default()
            }),
        }
    }
}

/// Read from the watch without what nothing here reads (crate::reconcile::watched).
impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Entry, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: Meta<UnknownSpec>,
            spec: SandboxProcessSpec,
            status: Option<SandboxProcessStatus>,
        }
        let w = Wire::deserialize(d)?;
        Ok(Entry::new(SandboxProcess {
            metadata: w.metadata.into(),
            spec: w.spec,
            status: w.status,
        }))
    }
}

/// The API resource is SandboxProcess's: the watch and the controller's references use it.
impl Resource for Entry {
    resource_of!(SandboxProcess);

    fn meta(&self) -> &ObjectMeta {
        match self {
            Entry::Live(o) => &o.metadata,
            Entry::Settled(s) => &s.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Entry::Live(o) => &mut Arc::make_mut(o).metadata,
            Entry::Settled(s) => &mut s.metadata,
        }
    }
}

/// The per-phase gauge counts the objects in the controller's cache.
impl crate::metrics::Phases for kube::runtime::reflector::Store<Entry> {
    fn each_phase(&self, f: &mut dyn FnMut(Option<sandbox_api::crd::Phase>)) {
        for o in self.state() {
            f(o.phase());
        }
    }
}

#[cfg(test)]
mod tests;
