//! What a process needs to know about its pod: the target container (explicit, else the
//! `kubectl.kubernetes.io/default-container` annotation when it names one of the pod's
//! containers, else the first container, as kubectl does), whether it runs, and where.
use k8s_openapi::api::core::v1::Pod;

use crate::status::{ContainerFacts, PodFacts, PodPhase};

pub const DEFAULT_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-container";

/// The container a process targets in `pod`.
pub fn target_container(pod: &Pod, explicit: Option<&str>) -> Option<String> {
    if let Some(c) = explicit {
        return Some(c.to_string());
    }
    let containers = &pod.spec.as_ref()?.containers;
    // An annotation naming no container of the pod (a typo, an init container) is ignored.
    if let Some(c) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DEFAULT_CONTAINER_ANNOTATION))
        .filter(|c| containers.iter().any(|k| &k.name == *c))
    {
        return Some(c.clone());
    }
    containers.first().map(|c| c.name.clone())
}

pub fn facts(pod: &Pod, explicit_container: Option<&str>) -> PodFacts {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let name = target_container(pod, explicit_container).unwrap_or_default();
    let in_spec = spec.is_some_and(|s| s.containers.iter().any(|c| c.name == name));
    let container = if in_spec {
        let running = status
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.name == name))
            .and_then(|c| c.state.as_ref())
            .is_some_and(|st| st.running.is_some());
        ContainerFacts::Found { name, running }
    } else if spec.is_some_and(|s| s.init_containers.iter().flatten().any(|c| c.name == name)) {
        ContainerFacts::InitContainer { name }
    } else {
        ContainerFacts::NotInSpec { name }
    };
    PodFacts {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        node_name: spec.and_then(|s| s.node_name.clone()),
        phase: PodPhase::parse(status.and_then(|s| s.phase.as_deref())),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        container,
    }
}

/// Whether a process can be started in the pod now.
pub fn can_start(p: &PodFacts) -> bool {
    p.phase == PodPhase::Running
        && !p.terminating
        && p.node_name.is_some()
        && matches!(p.container, ContainerFacts::Found { running: true, .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    fn web() -> Pod {
        pod(serde_json::json!({
            "metadata": {"name": "web", "uid": "u1"},
            "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
            ]}
        }))
    }

    #[test]
    fn container_defaults_to_annotation_then_first() {
        let mut p = web();
        assert_eq!(target_container(&p, None).as_deref(), Some("a"));
        assert_eq!(target_container(&p, Some("b")).as_deref(), Some("b"));
        p.metadata.annotations = Some(
            [(DEFAULT_CONTAINER_ANNOTATION.to_string(), "b".to_string())]
                .into_iter()
                .collect(),
        );
        assert_eq!(target_container(&p, None).as_deref(), Some("b"));
        // Naming no container of the pod: the first one, as kubectl does.
        for missing in ["nope", "init", ""] {
            p.metadata.annotations = Some(
                [(
                    DEFAULT_CONTAINER_ANNOTATION.to_string(),
                    missing.to_string(),
                )]
                .into_iter()
                .collect(),
            );
            assert_eq!(
                target_container(&p, None).as_deref(),
                Some("a"),
                "{missing:?}"
            );
        }
    }

    #[test]
    fn an_init_container_is_told_apart() {
        let mut p = web();
        p.spec.as_mut().unwrap().init_containers = Some(vec![serde_json::from_value(
            serde_json::json!({"name": "init"}),
        )
        .unwrap()]);
        assert_eq!(
            facts(&p, Some("init")).container,
            ContainerFacts::InitContainer {
                name: "init".into()
            }
        );
        assert_eq!(
            facts(&p, Some("zzz")).container,
            ContainerFacts::NotInSpec { name: "zzz".into() }
        );
    }

    #[test]
    fn facts_of_a_running_pod() {
        let f = facts(&web(), None);
        assert_eq!(f.uid, "u1");
        assert_eq!(f.node_name.as_deref(), Some("n1"));
        assert_eq!(f.phase, PodPhase::Running);
        assert!(can_start(&f));
        let f = facts(&web(), Some("b"));
        assert_eq!(
            f.container,
            ContainerFacts::Found {
                name: "b".into(),
                running: false
            }
        );
        assert!(!can_start(&f));
        let f = facts(&web(), Some("zzz"));
        assert_eq!(
            f.container,
            ContainerFacts::NotInSpec { name: "zzz".into() }
        );
    }

    #[test]
    fn pending_and_terminating_pods_cannot_start() {
        let mut p = web();
        p.status.as_mut().unwrap().phase = Some("Pending".into());
        assert!(!can_start(&facts(&p, None)));
        let mut p = web();
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        let f = facts(&p, None);
        assert!(f.terminating);
        assert!(!can_start(&f));
    }
}
