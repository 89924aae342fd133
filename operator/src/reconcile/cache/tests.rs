use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::pod::target_pod_name;
use crate::reconcile::watched::LAST_APPLIED;

/// The object as the API server sends it: the whole one, and the cache's entry read from it.
fn object(spec: serde_json::Value, status: serde_json::Value) -> (SandboxProcess, Entry) {
    let json = json!({
        "apiVersion": "sandbox.dev/v1alpha1",
        "kind": "SandboxProcess",
        "metadata": {
            "name": "p", "namespace": "ns", "uid": "u", "generation": 3,
            "finalizers": ["sandbox.dev/process"],
            "deletionTimestamp": "2026-12-05T10:00:09Z",
            "annotations": {LAST_APPLIED: "{}", "team": "a"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:podName": {}}}}],
        },
        "spec": spec,
        "status": status,
    });
    (
        serde_json::from_value(json.clone()).unwrap(),
        serde_json::from_value(json).unwrap(),
    )
}

fn settled_status(phase: &str) -> serde_json::Value {
    json!({"phase": phase, "observedGeneration": 3, "podName": "w-1", "podUID": "pu",
        "targetPodUID": "pu", "containerID": "c", "pid": 7, "nodeName": "n",
        "startedAt": "2026-12-05T10:00:00Z", "finishedAt": "2026-12-05T10:00:01Z",
        "exit": {"code": 3}, "endReason": "Exited",
        "error": {"code": "ProcessLost", "message": "the pod was replaced"},
        "output": {"stdoutBytes": 1, "stderrBytes": 0, "tail": "x"},
        "logMatch": {"line": "l", "cursor": "c"},
        "conditions": [{"type": "Ready", "status": "False", "reason": "Succeeded",
            "message": "m", "observedGeneration": 3,
            "lastTransitionTime": "2026-12-05T10:00:01Z"}]})
}

#[test]
fn entries_drop_managed_fields_and_last_applied() {
    // Final, of an older generation: live, kept whole (it is written again).
    let mut status = settled_status("Exited");
    status["observedGeneration"] = json!(2);
    let (o, e) = object(json!({"podName": "w", "command": ["true"]}), status);
    let Entry::Live(e) = e else {
        panic!("an older generation's status is live")
    };
    assert_eq!(e.metadata.managed_fields, None);
    assert_eq!(
        e.metadata.annotations,
        Some([("team".to_string(), "a".to_string())].into())
    );
    assert_eq!((&e.spec, &e.status), (&o.spec, &o.status));
}

#[test]
fn a_running_object_is_live_and_whole() {
    let (o, e) = object(
        json!({"podName": "w", "command": ["sleep", "9"]}),
        json!({"phase": "Running", "observedGeneration": 3, "podUID": "pu"}),
    );
    assert!(matches!(e, Entry::Live(_)));
    assert_eq!(e.phase(), Some(Phase::Running));
    assert_eq!((&e.object().spec, &e.object().status), (&o.spec, &o.status));
}

/// A settled object's reconcile reads the same from the rebuilt object as from the whole one:
/// what deletion, the TTL and the finalizer use, and a settled, final status.
#[test]
fn a_settled_entry_gives_back_what_its_reconcile_reads() {
    let specs = [
        json!({"podName": "w-1", "command": ["true"], "ttlSecondsAfterFinished": 30,
            "stopSignal": 2, "terminationGracePeriodSeconds": 9}),
        json!({"podSelector": {"matchLabels": {"app": "w"}}, "command": ["true"],
            "env": [{"name": "A", "value": "b"}], "workingDir": "/tmp", "stop": true}),
    ];
    let now = Time(Timestamp::from_second(1_796_469_610).unwrap());
    for (spec, phase) in specs.into_iter().zip(["Exited", "Error"]) {
        let (whole, e) = object(spec, settled_status(phase));
        let s = whole.status.clone().unwrap();
        assert!(status::settled(&s, Some(3)), "{s:?}");
        assert!(matches!(e, Entry::Settled(_)), "{e:?}");
        assert_eq!(e.phase(), s.phase);
        let rebuilt = e.object();
        let r = rebuilt.status.clone().unwrap();
        assert_eq!(r, status::kept_when_settled(&s));
        assert!(status::settled(&r, rebuilt.metadata.generation));
        assert_eq!(
            (status::is_final(&r), status::is_started(&r)),
            (status::is_final(&s), status::is_started(&s))
        );
        assert_eq!(target_pod_name(&rebuilt), target_pod_name(&whole));
        assert_eq!(
            status::ttl_remaining(&rebuilt.spec, &r, &now),
            status::ttl_remaining(&whole.spec, &s, &now)
        );
        let (a, b) = (&rebuilt.spec, &whole.spec);
        assert_eq!(
            (a.stop, a.stop_signal, a.termination_grace_period_seconds),
            (b.stop, b.stop_signal, b.termination_grace_period_seconds)
        );
        let mut meta = whole.metadata.clone();
        meta.managed_fields = None;
        meta.annotations = Some([("team".to_string(), "a".to_string())].into());
        assert_eq!(rebuilt.metadata, meta);
        assert_eq!(e.meta(), &meta);
    }
}

/// Of `managedFields`, an entry keeps only the spec fields this release does not know (a newer
/// release's, still named there after a rollback pruned them from the object), and none is kept
/// when it knows them all; the status manager's set is skipped unread.
#[test]
fn entries_keep_only_the_spec_fields_this_release_does_not_know() {
    let json = |managed: serde_json::Value| {
        json!({"apiVersion": "sandbox.dev/v1alpha1", "kind": "SandboxProcess",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "managedFields": managed},
            "spec": {"podName": "w", "command": ["true"]}})
    };
    let newer = json!([
        {"manager": "kubectl", "operation": "Apply", "apiVersion": "sandbox.dev/v1alpha1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:podName": {}, "f:command": {},
            "f:securityContext": {".": {}, "f:runAsNonRoot": {}, "f:seccompProfile": {}}}}},
        {"manager": "sandbox-operator", "operation": "Apply", "subresource": "status",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}},
    ]);
    let e: Entry = serde_json::from_value(json(newer)).unwrap();
    let kept = e.meta().managed_fields.clone().expect("one entry kept");
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].manager.as_deref(), Some("kubectl"));
    assert_eq!(
        kept[0].fields_v1.as_ref().unwrap().0,
        json!({"f:spec": {"f:securityContext": {"f:seccompProfile": {}}}})
    );
    assert_eq!(
        sandbox_api::spec_fields::unknown_in(Some(&kept)),
        ["spec.securityContext.seccompProfile"]
    );
    let known = json!([{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:podName": {}}}}]);
    let e: Entry = serde_json::from_value(json(known)).unwrap();
    assert_eq!(e.meta().managed_fields, None);
    let e: Entry = serde_json::from_value(json(serde_json::Value::Null)).unwrap();
    assert_eq!(e.meta().managed_fields, None);
}

#[test]
fn objects_are_counted_by_phase_from_the_cache() {
    use kube::runtime::{reflector, watcher};
    let object = |name: &str, phase: Option<&str>| -> Entry {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"podName": "w", "command": ["true"]},
            "status": phase.map(|p| serde_json::json!({"phase": p})),
        }))
        .unwrap()
    };
    let m = crate::metrics::Metrics::new();
    let (store, mut writer) = reflector::store();
    assert!(m
        .encode()
        .contains("sandbox_operator_processes{phase=\"Running\"} 0"));
    m.count_phases_of(std::sync::Arc::new(store.clone()));
    for o in [
        object("a", Some("Running")),
        object("b", Some("Running")),
        object("c", Some("Exited")),
        object("d", None),
    ] {
        writer.apply_watcher_event(&watcher::Event::Apply(o));
    }
    let text = m.encode();
    for want in [
        "sandbox_operator_processes{phase=\"Running\"} 2",
        "sandbox_operator_processes{phase=\"Exited\"} 1",
        "sandbox_operator_processes{phase=\"Pending\"} 0",
    ] {
        assert!(text.contains(want), "{want} in {text}");
    }
    writer.apply_watcher_event(&watcher::Event::Delete(object("a", Some("Running"))));
    writer.apply_watcher_event(&watcher::Event::Apply(object("b", Some("Exited"))));
    let text = m.encode();
    assert!(
        text.contains("sandbox_operator_processes{phase=\"Running\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("sandbox_operator_processes{phase=\"Exited\"} 2"),
        "{text}"
    );
}
