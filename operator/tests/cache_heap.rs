//! The heap one final SandboxProcess holds in the operator's cache, counted by a counting global
//! allocator (its own test binary, one test, so nothing else allocates meanwhile). Pins the
//! cache's slimming (docs/benchmarks.md, "Operator memory"): a cached object with its
//! managedFields and kubectl's last-applied annotation held ~16 KB; with the conditions of its
//! settled status, 2.3 KB; as the typed object without them, 1.6 KB; as a settled entry
//! (cache::Entry), 1.0 KB.

use kube::runtime::{reflector, watcher};
use sandbox_operator::reconcile::cache::Entry;

mod common;
use common::live;

/// A final object as `kubectl apply` and the operator leave it: the shape of a live one
/// (deploy/argocd's testdata), argv `true` as in e2e/benches/bench.
fn object(i: usize) -> Entry {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "sandbox.dev/v1alpha1", "kind": "SandboxProcess",
        "metadata": {
            "name": format!("p-{i:05}"), "namespace": "spo-bench", "generation": 1,
            "uid": format!("62e083ae-0199-4553-8a1e-948d5244{i:04x}"),
            "resourceVersion": format!("{}", 100_000 + i),
            "creationTimestamp": "2026-12-05T10:00:00Z", "finalizers": ["sandbox.dev/process"],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                "{\"apiVersion\":\"sandbox.dev/v1alpha1\",\"kind\":\"SandboxProcess\",\"spec\":{\"command\":[\"true\"],\"podName\":\"bench-3\"}}"},
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "sandbox.dev/v1alpha1",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                 "f:spec": {".": {}, "f:command": {}, "f:podName": {}}}},
                {"manager": "sandbox-operator", "operation": "Apply", "apiVersion": "sandbox.dev/v1alpha1",
                 "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {"f:conditions": {
                 "k:{\"type\":\"Ready\"}": {".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}}},
                 "f:exit": {"f:code": {}}, "f:phase": {}, "f:podUID": {}, "f:nodeName": {}}}}]
        },
        "spec": {"command": ["true"], "podName": "bench-3", "stop": false, "stopSignal": 15,
                 "terminationGracePeriodSeconds": 5},
        "status": {
            "observedGeneration": 1, "phase": "Exited", "podName": "bench-3", "nodeName": "node-1",
            "podUID": "156960e2-4b5e-49a5-81e2-04a139ba57f5",
            "targetPodUID": "156960e2-4b5e-49a5-81e2-04a139ba57f5",
            "containerID": "23d745860acc3cd787a12508ccdd8ab7f4cdf56f12b03cc403a8cc39f5ebc964",
            "pid": 49, "startedAt": "2026-12-05T10:00:01Z", "finishedAt": "2026-12-05T10:00:01Z",
            "exit": {"code": 0, "timedOut": false}, "endReason": "Exited",
            "output": {"stdoutBytes": 0, "stderrBytes": 0},
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "Succeeded", "message": "exited with code 0", "observedGeneration": 1, "lastTransitionTime": "2026-12-05T10:00:01Z"},
                {"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "exited with code 0", "observedGeneration": 1, "lastTransitionTime": "2026-12-05T10:00:01Z"},
                {"type": "Reconciling", "status": "False", "reason": "Succeeded", "message": "exited with code 0", "observedGeneration": 1, "lastTransitionTime": "2026-12-05T10:00:01Z"},
                {"type": "Stalled", "status": "False", "reason": "Succeeded", "message": "no failure", "observedGeneration": 1, "lastTransitionTime": "2026-12-05T10:00:01Z"}]
        }
    }))
    .unwrap()
}

#[test]
fn a_cached_final_object_holds_under_1_125_kib_of_heap() {
    const N: usize = 2_000;
    let objects: Vec<Entry> = (0..N).map(object).collect();
    let (store, mut writer) = reflector::store::<Entry>();
    writer.apply_watcher_event(&watcher::Event::Init);
    // The store keeps its own copy of each object (an Arc) keyed by a reference to it.
    let before = live();
    for o in &objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(o.clone()));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let per_object = (live() - before) / N as isize;
    assert_eq!(store.state().len(), N);
    println!("heap per cached final object: {per_object} bytes");
    assert!(
        per_object < 1152,
        "{per_object} bytes of heap per cached object"
    );
}
