use super::*;
use crate::aggregated::processes::store::Store;
use sandbox_api::wire::{Phase, ProcessObject, ProcessRecord};
use serde_json::json;

fn entry(labels: &[(&str, &str)]) -> Arc<Entry> {
    let obj = ProcessObject {
        namespace: "ns".into(),
        name: "p".into(),
        creation_timestamp: "2026-12-06T10:00:00Z".into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        annotations: Default::default(),
        pod_name: "pod".into(),
        node_name: "n1".into(),
        spec: json!({"podName": "pod", "command": ["sleep", "9"]}),
    };
    let rec = ProcessRecord {
        phase: Phase::Running,
        started_at: Some("2026-12-06T10:00:01Z".into()),
        object: Some(Box::new(obj)),
        ..ProcessRecord::starting("u1", "pod-uid", "c", "ctr")
    };
    let s = Store::new(1000);
    s.upsert("a1", &rec);
    s.get("ns", "p").unwrap()
}

fn patched(e: &Entry, form: Form, body: Value) -> Result<Meta> {
    let doc: Value = serde_json::from_str(&e.json).unwrap();
    let patched = apply(doc.clone(), form, body.to_string().as_bytes())?;
    changed_metadata(e, &doc, &patched, true)
}

fn message(r: Result<Meta>) -> String {
    match r {
        Err(e) => e.to_string(),
        Ok(m) => panic!("accepted: {m:?}"),
    }
}

/// What `kubectl label`, `annotate` and `patch --type=json` send, and what comes of it.
#[test]
fn labels_and_annotations_change_by_either_form() {
    let e = entry(&[("app", "a"), ("old", "x")]);
    let (labels, notes) = patched(
        &e,
        Form::Merge,
        json!({"metadata": {"labels": {"tier": "b", "old": null}, "annotations": {"n": "text"}}}),
    )
    .unwrap();
    assert_eq!(
        labels,
        [("app".into(), "a".into()), ("tier".into(), "b".into())].into()
    );
    assert_eq!(notes, [("n".into(), "text".into())].into());
    let (labels, _) = patched(
        &e,
        Form::Json,
        json!([{"op": "replace", "path": "/metadata/labels/app", "value": "z"}]),
    )
    .unwrap();
    assert_eq!(labels["app"], "z");
    // The status is the server's: a patch of it is ignored, as on any object.
    let (labels, _) = patched(&e, Form::Merge, json!({"status": {"phase": "Exited"}})).unwrap();
    assert_eq!(labels, e.labels);
}

/// Everything but labels and annotations is refused, naming the field.
#[test]
fn anything_else_is_refused_naming_the_field() {
    let e = entry(&[]);
    let cases = [
        (
            json!({"spec": {"command": ["rm", "-rf", "/"]}}),
            "spec: field is immutable",
        ),
        (
            json!({"metadata": {"name": "q"}}),
            "metadata.name: field is immutable",
        ),
        (
            json!({"metadata": {"uid": "u2"}}),
            "metadata.uid: field is immutable",
        ),
        (
            json!({"metadata": {"labels": {"bad key": "v"}}}),
            "metadata.labels: \"bad key\"",
        ),
        (
            json!({"metadata": {"labels": {"k": 5}}}),
            "metadata.labels: must be a map",
        ),
        (
            json!({"metadata": {"resourceVersion": "1"}}),
            "the object has been modified",
        ),
        (json!({"kind": "Pod"}), "cannot change them"),
        (json!({"extra": 1}), "unknown field \"extra\""),
    ];
    for (body, want) in cases {
        let got = message(patched(&e, Form::Merge, body.clone()));
        assert!(got.contains(want), "{body}: {got}");
    }
    let got = message(patched(
        &e,
        Form::Json,
        json!([{"op": "test", "path": "/metadata/name", "value": "other"}]),
    ));
    assert!(got.contains("does not apply"), "{got}");
}

#[test]
fn only_the_two_json_forms_are_taken() {
    let with = |ct: &str| {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, ct.parse().unwrap());
        form(&h)
    };
    assert_eq!(with("application/merge-patch+json").unwrap(), Form::Merge);
    assert_eq!(
        with("application/json-patch+json; charset=utf-8").unwrap(),
        Form::Json
    );
    for other in [
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
    ] {
        let e = with(other).unwrap_err();
        assert!(
            matches!(e, SubresourceError::UnsupportedMediaType(_)),
            "{other}"
        );
        assert!(e.to_string().contains("--type=merge"), "{e}");
    }
}
