//! Spec fields this release does not know, found in an object's `managedFields`.
//!
//! A rollback puts an older CRD back, and the API server prunes the fields its schema lacks
//! from every object it serves: an older operator would start a `Pending` process without what
//! a newer release's field asked (a `securityContext`, limits), silently (docs/operations/upgrade.md).
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
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
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
    let fields = fields.as_object()?;
    let mut out = Map::new();
    for (key, sub) in fields {
        match child(schema, key) {
            Child::Skip => {}
            Child::Known(s) => {
                if let Some(u) = unknown_part(sub, s) {
                    out.insert(key.clone(), u);
                }
            }
            Child::Unknown => {
                out.insert(key.clone(), sub.clone());
            }
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// What a key of a field set is to `schema`.
enum Child<'a> {
    /// Nothing to check below it: the node itself (`.`), a map of anything, a node that keeps
    /// unknown fields.
    Skip,
    /// A field (or list item) with this schema.
    Known(&'a Value),
    /// A field this schema does not have.
    Unknown,
}

fn child<'a>(schema: &'a Value, key: &str) -> Child<'a> {
    if key == "." || schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) {
        return Child::Skip;
    }
    let known = if let Some(name) = key.strip_prefix("f:") {
        match (&schema["properties"][name], &schema["additionalProperties"]) {
            (Value::Null, any @ Value::Object(_)) => any,
            (Value::Null, Value::Bool(true)) => return Child::Skip,
            (Value::Null, _) => return Child::Unknown,
            (known, _) => known,
        }
    } else if ["k:", "v:", "i:"].iter().any(|p| key.starts_with(p)) {
        &schema["items"]
    } else {
        return Child::Skip;
    };
    match known {
        Value::Null => Child::Skip,
        s => Child::Known(s),
    }
}

/// [`unknown_part`] read straight from the JSON (the watch's `managedFields`): the known part of
/// the set is walked, never built; only an unknown part (nearly never) becomes a value.
pub struct UnknownPart<'a>(pub &'a Value);

impl<'de> DeserializeSeed<'de> for UnknownPart<'_> {
    type Value = Option<Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Value>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UnknownPart<'_> {
    type Value = Option<Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field set")
    }
    fn visit_unit<E>(self) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Option<Value>, A::Error> {
        let mut out = Map::new();
        while let Some(key) = m.next_key::<String>()? {
            match child(self.0, &key) {
                Child::Skip => {
                    m.next_value::<IgnoredAny>()?;
                }
                Child::Known(s) => {
                    if let Some(u) = m.next_value_seed(UnknownPart(s))? {
                        out.insert(key, u);
                    }
                }
                Child::Unknown => {
                    out.insert(key, m.next_value()?);
                }
            }
        }
        Ok((!out.is_empty()).then_some(Value::Object(out)))
    }
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

    /// Read straight from JSON, a set gives what the walk of its value gives.
    #[test]
    fn the_streaming_read_is_the_walk() {
        for set in [
            json!({"f:command": {}, "f:podName": {}}),
            json!({"f:command": {}, "f:seccomp": {".": {}, "f:profile": {}},
                "f:securityContext": {".": {}, "f:runAsNonRoot": {}, "f:capabilities": {}}}),
            json!({"f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:valueFrom": {"f:vaultRef": {}}}}}),
            json!({"f:podSelector": {"f:matchLabels": {"f:any": {}}}}),
            json!({}),
        ] {
            let text = serde_json::to_string(&set).unwrap();
            let mut d = serde_json::Deserializer::from_str(&text);
            let read = UnknownPart(spec_schema()).deserialize(&mut d).unwrap();
            assert_eq!(read, unknown_part(&set, spec_schema()), "{set}");
        }
    }
}
