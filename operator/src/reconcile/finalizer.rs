//! The operator's finalizer (`sandbox.dev/process`), added only to a process some status shows
//! running (docs/concepts/writes.md): a process final in its first status never gets one, so its whole
//! life is the user's create, one status write and the user's delete. A deletion the finalizer
//! did not hold up reaches the agent through the watch's DELETED event (`deleted`) or, if no
//! operator was up, the sweep when one takes the lease (`controller::sweep_orphans`).
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use sandbox_api::crd::SandboxProcess;
use serde_json::{json, Value};
use tracing::debug;

use crate::reconcile::context::FINALIZER;
use crate::reconcile::error::Error;

/// Whether the object carries the operator's finalizer.
pub fn held(meta: &ObjectMeta) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == FINALIZER)
}

/// A JSON patch adding the finalizer to `current` (the list as the copy of object `uid` holds
/// it). Its tests make a list changed meanwhile, or another object of the same name (deleted and
/// created again while a start was under way), fail the patch instead of being written over (a
/// missing list tests equal to null).
pub fn adding(current: &[String], uid: &str) -> Value {
    let same = json!({"op": "test", "path": "/metadata/uid", "value": uid});
    if current.is_empty() {
        return json!([
            same,
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ]);
    }
    json!([
        same,
        {"op": "test", "path": "/metadata/finalizers", "value": current},
        {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
    ])
}

/// A JSON patch removing the finalizer from `current` (object `uid`'s); `None` when it is not
/// there.
pub fn removing(current: &[String], uid: &str) -> Option<Value> {
    let at = current.iter().position(|f| f == FINALIZER)?;
    Some(json!([
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": "/metadata/finalizers", "value": current},
        {"op": "remove", "path": format!("/metadata/finalizers/{at}")},
    ]))
}

/// Adds the finalizer to a process shown running. A copy behind the object (its list changed,
/// or the object is being deleted, which takes no new finalizer) is not an error: the next
/// reconcile sees the newer copy, and a deletion reaches the agent without the finalizer.
pub async fn add(api: &Api<SandboxProcess>, obj: &SandboxProcess) -> Result<(), Error> {
    if held(&obj.metadata) || obj.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let patch = adding(obj.finalizers(), &obj.uid().unwrap_or_default());
    match send(api, obj, patch).await {
        Err(Error::Finalizer(kube::Error::Api(e))) if matches!(e.code, 404 | 409 | 422) => {
            debug!(code = e.code, message = %e.message, "finalizer not added; the copy is behind");
            Ok(())
        }
        r => r,
    }
}

/// Removes the finalizer once the process is stopped and forgotten (the object then goes).
pub async fn remove(api: &Api<SandboxProcess>, obj: &SandboxProcess) -> Result<(), Error> {
    let Some(patch) = removing(obj.finalizers(), &obj.uid().unwrap_or_default()) else {
        return Ok(());
    };
    match send(api, obj, patch).await {
        Err(Error::Finalizer(kube::Error::Api(e))) if e.code == 404 => Ok(()),
        r => r,
    }
}

async fn send(api: &Api<SandboxProcess>, obj: &SandboxProcess, patch: Value) -> Result<(), Error> {
    let patch: json_patch::Patch =
        serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await
    .map(|_| ())
    .map_err(Error::Finalizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(patch: Value, doc: Value) -> Result<Value, String> {
        let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
        let mut doc = doc;
        json_patch::patch(&mut doc, &patch).map_err(|e| e.to_string())?;
        Ok(doc)
    }

    /// Added to an absent or a present list, never over a list that changed meanwhile;
    /// removed from where it is, never from a list that changed.
    #[test]
    fn the_patches_add_and_remove_only_over_the_list_they_saw() {
        let meta = |f: Value| json!({"metadata": {"name": "p", "uid": "u1", "finalizers": f}});
        // The API server's JSON patch takes a missing member as null in a test (the Rust crate
        // here does not); the e2e tests add it to objects without the list.
        let none = meta(Value::Null);
        let added = apply(adding(&[], "u1"), none.clone()).unwrap();
        assert_eq!(added, meta(json!([FINALIZER])));
        // Another object of the same name: refused.
        assert!(apply(adding(&[], "u0"), none).is_err());
        let theirs = vec!["x.io/keep".to_string()];
        let added = apply(adding(&theirs, "u1"), meta(json!(["x.io/keep"]))).unwrap();
        assert_eq!(added, meta(json!(["x.io/keep", FINALIZER])));
        // The copy saw none, someone added theirs meanwhile: refused, theirs kept.
        assert!(apply(adding(&[], "u1"), meta(json!(["x.io/keep"]))).is_err());
        let both = vec!["x.io/keep".to_string(), FINALIZER.to_string()];
        let removed = apply(removing(&both, "u1").unwrap(), meta(json!(both))).unwrap();
        assert_eq!(removed, meta(json!(["x.io/keep"])));
        assert!(apply(removing(&both, "u1").unwrap(), meta(json!([FINALIZER]))).is_err());
        assert!(apply(removing(&both, "u0").unwrap(), meta(json!(both))).is_err());
        assert_eq!(removing(&theirs, "u1"), None);
    }
}
