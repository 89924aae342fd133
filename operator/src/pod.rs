//! What a process needs to know about its pod: the target container (explicit, else the
//! `kubectl.kubernetes.io/default-container` annotation when it names one of the pod's
//! containers, else the first container, as kubectl does), whether it runs, and where.
use k8s_openapi::api::core::v1::Pod;
use sandbox_api::crd::SandboxProcess;

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

/// The pod a `podSelector` picks among `pods` of namespace `ns`: one selected whose target
/// container runs and is ready and that can take a process now; the oldest (creation time, then
/// name), so every replica of the operator picks the same one.
pub fn choose<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    ns: &str,
    selector: &sandbox_api::crd::PodSelector,
    container: Option<&str>,
) -> Option<String> {
    let empty = std::collections::BTreeMap::new();
    pods.into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
        .filter(|p| selector.matches(p.metadata.labels.as_ref().unwrap_or(&empty)))
        .filter(|p| {
            let f = facts(p, container);
            let ContainerFacts::Found { name, .. } = &f.container else {
                return false;
            };
            can_start(&f)
                && p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|cs| cs.iter().find(|c| &c.name == name))
                    .is_some_and(|c| c.ready)
        })
        .min_by(|a, b| {
            let key = |p: &Pod| {
                (
                    p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    p.metadata.name.clone(),
                )
            };
            key(a).cmp(&key(b))
        })
        .and_then(|p| p.metadata.name.clone())
}

/// Whether a process can be started in the pod now.
pub fn can_start(p: &PodFacts) -> bool {
    p.phase == PodPhase::Running
        && !p.terminating
        && p.node_name.is_some()
        && matches!(p.container, ContainerFacts::Found { running: true, .. })
}

/// The pod an object targets: `spec.podName`, or the one its selector chose ("" before that).
pub(crate) fn target_pod_name(o: &SandboxProcess) -> String {
    if o.spec.pod_name.is_empty() {
        o.status
            .as_ref()
            .and_then(|s| s.pod_name.clone())
            .unwrap_or_default()
    } else {
        o.spec.pod_name.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(name: &str, created: &str, app: &str, ready: bool) -> Pod {
        pod(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name,
                         "creationTimestamp": created, "labels": {"app": app}},
            "spec": {"nodeName": "n1", "containers": [{"name": "main"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "main", "ready": ready, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"running": {}}}]}
        }))
    }

    #[test]
    fn a_selector_picks_the_oldest_ready_match() {
        let sel: sandbox_api::crd::PodSelector =
            serde_json::from_value(serde_json::json!({"matchLabels": {"app": "web"}})).unwrap();
        let pods = [
            replica("web-c", "2026-01-01T00:00:03Z", "web", true),
            replica("web-a", "2026-01-01T00:00:01Z", "web", false),
            replica("db-0", "2026-01-01T00:00:00Z", "db", true),
            replica("web-b", "2026-01-01T00:00:02Z", "web", true),
            replica("web-0", "2026-01-01T00:00:02Z", "web", true),
        ];
        assert_eq!(choose(&pods, "ns", &sel, None).as_deref(), Some("web-0"));
        assert_eq!(choose(&pods, "other", &sel, None), None);
        assert_eq!(
            choose(&pods[..3], "ns", &sel, None).as_deref(),
            Some("web-c")
        );
        let sel: sandbox_api::crd::PodSelector = serde_json::from_value(serde_json::json!(
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}
        ))
        .unwrap();
        assert_eq!(choose(&pods, "ns", &sel, None).as_deref(), Some("db-0"));
    }

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
