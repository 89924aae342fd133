//! Objects as the operator's watches read them: without `managedFields` and kubectl's
//! last-applied-configuration annotation, which nothing here reads. They are skipped while the
//! JSON is read instead of being built and dropped: managedFields is a deep tree per field
//! manager (~15 KB of heap in many small allocations for every event of a SandboxProcess, and
//! for every event of every pod in the cluster), and that churn between long-lived cache entries
//! is what keeps a burst's heap from being given back (docs/benchmarks.md, "Operator memory").
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use kube::runtime::watcher;
use kube::Resource;
use sandbox_api::spec_fields;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// kubectl's client-side-apply copy of the object (a second copy of the spec).
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `metadata` without `selfLink` and the last-applied annotation, and of `managedFields` only
/// what `M` keeps ([`Skip`]: nothing).
#[derive(Deserialize, Default)]
#[serde(
    rename_all = "camelCase",
    default,
    bound = "M: Deserialize<'de> + Default"
)]
pub struct Meta<M = Skip> {
    #[serde(deserialize_with = "annotations")]
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    uid: Option<String>,
    managed_fields: M,
}

/// What of `managedFields` is kept: nothing, or the spec fields this release does not know.
pub trait Managed {
    fn entries(self) -> Option<Vec<ManagedFieldsEntry>>;
}

/// `managedFields` skipped unread (a pod's, and everything but a SandboxProcess's spec fields).
#[derive(Default)]
pub struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Skip, D::Error> {
        IgnoredAny::deserialize(d).map(|_| Skip)
    }
}

impl Managed for Skip {
    fn entries(self) -> Option<Vec<ManagedFieldsEntry>> {
        None
    }
}

/// A SandboxProcess's `managedFields` reduced to the spec fields this release's schema does not
/// know (`sandbox_api::spec_fields`: what a rollback would drop), one entry per manager that set
/// some; `None` (nothing kept) when there are none, as nearly always.
#[derive(Default)]
pub struct UnknownSpec(Option<Vec<ManagedFieldsEntry>>);

impl<'de> Deserialize<'de> for UnknownSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<UnknownSpec, D::Error> {
        /// An entry's manager and its `f:spec` set (status and metadata sets skipped unread).
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Entry {
            manager: Option<String>,
            #[serde(default, rename = "fieldsV1")]
            fields: SpecSet,
        }
        /// The unknown part of the entry's `f:spec` set (its known part walked, not built).
        #[derive(Default)]
        struct SpecSet(Option<serde_json::Value>);
        impl<'de> Deserialize<'de> for SpecSet {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SpecSet, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = SpecSet;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str("a field set")
                    }
                    fn visit_unit<E>(self) -> Result<SpecSet, E> {
                        Ok(SpecSet(None))
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<SpecSet, A::Error> {
                        let mut unknown = None;
                        while let Some(k) = m.next_key::<String>()? {
                            if k == "f:spec" {
                                let seed = spec_fields::UnknownPart(spec_fields::spec_schema());
                                unknown = m.next_value_seed(seed)?;
                            } else {
                                m.next_value::<IgnoredAny>()?;
                            }
                        }
                        Ok(SpecSet(unknown))
                    }
                }
                d.deserialize_any(V)
            }
        }
        let entries = Option::<Vec<Entry>>::deserialize(d)?.unwrap_or_default();
        let kept: Vec<ManagedFieldsEntry> = entries
            .into_iter()
            .filter_map(|e| {
                let unknown = e.fields.0?;
                Some(ManagedFieldsEntry {
                    manager: e.manager,
                    fields_type: Some("FieldsV1".into()),
                    fields_v1: Some(FieldsV1(serde_json::json!({ "f:spec": unknown }))),
                    ..Default::default()
                })
            })
            .collect();
        Ok(UnknownSpec((!kept.is_empty()).then_some(kept)))
    }
}

impl Managed for UnknownSpec {
    fn entries(self) -> Option<Vec<ManagedFieldsEntry>> {
        self.0
    }
}

impl<M: Managed> From<Meta<M>> for ObjectMeta {
    fn from(m: Meta<M>) -> ObjectMeta {
        ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: m.managed_fields.entries(),
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: None,
            uid: m.uid,
        }
    }
}

/// The annotations without the last-applied copy (its value skipped unread); none left: `None`.
fn annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Annotations;
    impl<'de> Visitor<'de> for Annotations {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of strings to strings")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = map.next_key::<String>()? {
                if k == LAST_APPLIED {
                    map.next_value::<IgnoredAny>()?;
                } else {
                    out.insert(k, map.next_value()?);
                }
            }
            Ok((!out.is_empty()).then_some(out))
        }
    }
    d.deserialize_any(Annotations)
}

/// A Pod read as above; the watch of pods yields these and stores plain pods (`pods`).
#[derive(Clone, Debug)]
pub struct WatchedPod(pub Pod);

impl<'de> Deserialize<'de> for WatchedPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<WatchedPod, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: Meta,
            spec: Option<PodSpec>,
            status: Option<PodStatus>,
        }
        let w = Wire::deserialize(d)?;
        Ok(WatchedPod(Pod {
            metadata: w.metadata.into(),
            spec: w.spec,
            status: w.status,
        }))
    }
}

/// The items of `impl Resource` for a type read in place of the namespaced resource `$of`
/// (its kind, group, version and plural: the watch lists and watches that resource).
macro_rules! resource_of {
    ($of:ty) => {
        type DynamicType = ();
        type Scope = k8s_openapi::NamespaceResourceScope;

        fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
            <$of as kube::Resource>::kind(dt)
        }
        fn group(dt: &()) -> std::borrow::Cow<'_, str> {
            <$of as kube::Resource>::group(dt)
        }
        fn version(dt: &()) -> std::borrow::Cow<'_, str> {
            <$of as kube::Resource>::version(dt)
        }
        fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
            <$of as kube::Resource>::plural(dt)
        }
    };
}
pub(crate) use resource_of;

impl Resource for WatchedPod {
    resource_of!(Pod);

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// The watch's events with plain pods.
pub fn pods(e: watcher::Event<WatchedPod>) -> watcher::Event<Pod> {
    use watcher::Event::*;
    match e {
        Apply(p) => Apply(p.0),
        Delete(p) => Delete(p.0),
        Init => Init,
        InitApply(p) => InitApply(p.0),
        InitDone => InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read as the whole object is, but for what is skipped.
    #[test]
    fn metadata_is_read_whole_but_for_what_is_skipped() {
        let meta = serde_json::json!({
            "name": "p", "namespace": "ns", "uid": "u", "generation": 3,
            "resourceVersion": "9", "generateName": "p-", "selfLink": "/x",
            "creationTimestamp": "2026-12-05T10:00:00Z",
            "deletionTimestamp": "2026-12-05T10:00:09Z", "deletionGracePeriodSeconds": 0,
            "finalizers": ["sandbox.dev/process"], "labels": {"app": "w"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "o", "uid": "ou"}],
            "annotations": {LAST_APPLIED: {"not": "even a string"}, "team": "a"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:podName": {}}}}],
        });
        let mut all = meta.clone();
        all["annotations"] = serde_json::json!({"team": "a"});
        let mut whole: ObjectMeta = serde_json::from_value(all).unwrap();
        (whole.managed_fields, whole.self_link) = (None, None);
        let read: ObjectMeta = serde_json::from_value::<Meta>(meta).unwrap().into();
        assert_eq!(read, whole);
        assert!(read.owner_references.is_some() && read.deletion_timestamp.is_some());
        for (annotations, want) in [
            (serde_json::json!({LAST_APPLIED: "{}"}), None),
            (serde_json::json!(null), None),
            (serde_json::json!({}), None),
        ] {
            let m: Meta =
                serde_json::from_value(serde_json::json!({"annotations": annotations})).unwrap();
            assert_eq!(m.annotations, want);
        }
        let bad = serde_json::from_value::<Meta>(serde_json::json!({"annotations": {"a": 1}}));
        assert!(bad.is_err());
    }

    #[test]
    fn a_pod_is_read_whole_but_for_its_managed_fields() {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "w", "namespace": "ns", "uid": "pu",
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"},
        });
        let mut want: Pod = serde_json::from_value(pod.clone()).unwrap();
        want.metadata.managed_fields = None;
        let WatchedPod(read) = serde_json::from_value(pod).unwrap();
        assert_eq!(read, want);
    }
}
