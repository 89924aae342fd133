//! Spec fields this release does not know, found in an object's `managedFields`.
//!
//! A rollback puts an older CRD back, and the API server prunes the fields its schema lacks
//! from every object it serves: an older operator would start a `Pending` process without what
//! a newer release's field asked (a `securityContext`, limits), silently (docs/upgrading.md).
//! The field managers' sets are not pruned: `managedFields` still names every spec field a
//! client set (tried on the test cluster: after the CRD lost `spec.b`, `f:b` stayed in the
//! entry across status writes and label changes). So a field named there that this release's
//! schema does not know is one it would drop, and the operator refuses to start the process,
//! naming the field, rather than run it with less than was asked.
//!
//! The walk follows the schema: `f:NAME` is a property (or any key of a map with
//! `additionalProperties`), `k:`, `v:` and `i:` keys are list items, `.` is the node itself.
use std::sync::OnceLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::CustomResourceExt;
use serde_json::{Map, Value};

use crate::crd::SandboxProcess;

/// This release's schema of `spec`.
pub fn spec_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let crd = serde_json::to_value(SandboxProcess::crd()).expect("a CRD is JSON");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
    })
}

/// The part of a field set (`fieldsV1`, under `f:spec`) that `schema` does not know, as a field
/// set of the same shape; `None` when it knows all of it.
pub fn unknown_part(fields: &Value, schema: &Value) -> Option<Value> {
    /// The schema of a node that may hold anything (nothing below it is checked).
    static ANY: Value = Value::Null;
    let fields = fields.as_object()?;
    if schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) {
        return None;
    }
    let mut out = Map::new();
    for (key, sub) in fields {
        let child: Option<&Value> = if let Some(name) = key.strip_prefix("f:") {
            match (&schema["properties"][name], &schema["additionalProperties"]) {
                (Value::Null, any @ Value::Object(_)) => Some(any),
                (Value::Null, Value::Bool(true)) => Some(&ANY),
                (Value::Null, _) => None,
                (known, _) => Some(known),
            }
        } else if ["k:", "v:", "i:"].iter().any(|p| key.starts_with(p)) {
            Some(&schema["items"])
        } else {
            continue; // ".": the node itself
        };
        match child {
            Some(Value::Null) => {}
            Some(s) => {
                if let Some(u) = unknown_part(sub, s) {
                    out.insert(key.clone(), u);
                }
            }
            None => {
                out.insert(key.clone(), sub.clone());
            }
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// A field set's fields as dotted paths from `prefix` (`spec.securityContext.runAsNonRoot`;
/// a list item is `[]`): what a refusal names.
pub fn paths(fields: &Value, prefix: &str, out: &mut Vec<String>) {
    let Some(m) = fields.as_object().filter(|m| !m.is_empty()) else {
        out.push(prefix.to_string());
        return;
    };
    for (key, sub) in m {
        if let Some(name) = key.strip_prefix("f:") {
            paths(sub, &format!("{prefix}.{name}"), out);
        } else if key != "." {
            paths(sub, &format!("{prefix}[]"), out);
        }
    }
}

/// The spec fields the managers of an object set that this release's schema does not know
/// (empty: none), sorted and without repeats.
pub fn unknown_in(managed: Option<&[ManagedFieldsEntry]>) -> Vec<String> {
    let mut out = Vec::new();
    for entry in managed.unwrap_or_default() {
        let Some(fields) = &entry.fields_v1 else {
            continue;
        };
        if let Some(u) = unknown_part(&fields.0["f:spec"], spec_schema()) {
            paths(&u, "spec", &mut out);
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
    use serde_json::json;

    fn entry(fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some("m".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        }
    }

    #[test]
    fn every_field_this_release_sets_is_known() {
        // What clients and the status writer record today: nothing unknown.
        let today = json!({"f:spec": {
            "f:podName": {}, "f:command": {}, "f:env": {}, "f:stdin": {}, "f:tty": {},
            "f:terminal": {".": {}, "f:rows": {}, "f:cols": {}},
            "f:securityContext": {".": {}, "f:runAsNonRoot": {}, "f:runAsUser": {}},
            "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}},
            "f:podSelector": {".": {}, "f:matchLabels": {".": {}, "f:app": {}, "f:any-key": {}}},
            "f:readiness": {".": {}, "f:httpGet": {".": {}, "f:port": {}, "f:path": {}}},
            "f:restartPolicy": {}, "f:ttlSecondsAfterFinished": {}},
            "f:metadata": {"f:labels": {"f:x": {}}}, "f:status": {"f:phase": {}}});
        assert_eq!(unknown_in(Some(&[entry(today)])), Vec::<String>::new());
        assert_eq!(unknown_in(None), Vec::<String>::new());
    }

    #[test]
    fn fields_of_a_newer_release_are_named_wherever_they_are() {
        let newer = json!({"f:spec": {
            "f:command": {}, "f:seccomp": {".": {}, "f:profile": {}},
            "f:securityContext": {".": {}, "f:runAsNonRoot": {}, "f:capabilities": {}},
            "f:readiness": {"f:exec": {}}}});
        let other = json!({"f:spec": {"f:securityContext": {"f:capabilities": {}}}});
        assert_eq!(
            unknown_in(Some(&[entry(newer), entry(other)])),
            [
                "spec.readiness.exec",
                "spec.seccomp.profile",
                "spec.securityContext.capabilities"
            ]
        );
    }

    #[test]
    fn list_items_are_walked_by_the_items_schema() {
        let env = json!({"f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {},
            "f:valueFrom": {"f:vaultRef": {}}}}});
        assert_eq!(
            unknown_part(&env, spec_schema()),
            Some(json!({"f:env": {"k:{\"name\":\"A\"}": {"f:valueFrom": {"f:vaultRef": {}}}}}))
        );
        let mut p = Vec::new();
        paths(
            unknown_part(&env, spec_schema()).as_ref().unwrap(),
            "spec",
            &mut p,
        );
        assert_eq!(p, ["spec.env[].valueFrom.vaultRef"]);
    }
}
