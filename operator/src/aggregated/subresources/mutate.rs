//! The mutating admission webhook (`POST /mutate/sandboxprocesses`): the rewrite of
//! [`sandbox_api::admission`], nothing else. It reads only the request's body, so it needs no
//! caller identity: the API server calls it for objects its `matchConditions` pick (a quantity
//! written as a number that is not an integer), which keeps it off every other write.
use axum::Json;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::DynamicObject;
use sandbox_api::admission::quantity_numbers;
use tracing::{info, warn};

pub const PATH: &str = "/mutate/sandboxprocesses";

pub async fn mutate(
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => return Json(AdmissionResponse::invalid(e).into_review()),
    };
    Json(respond(&request).into_review())
}

fn respond(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let allowed = AdmissionResponse::from(request);
    let Some(object) = &request.object else {
        return allowed;
    };
    let object = match serde_json::to_value(object) {
        Ok(v) => v,
        Err(e) => return allowed.deny(format!("reading the object: {e}")),
    };
    let fixes = quantity_numbers(&object);
    if fixes.is_empty() {
        return allowed;
    }
    let patch = json_patch::Patch(
        fixes
            .iter()
            .map(|(field, text)| {
                json_patch::PatchOperation::Replace(json_patch::ReplaceOperation {
                    path: json_patch::jsonptr::PointerBuf::parse(*field)
                        .expect("QUANTITY_FIELDS are JSON pointers"),
                    value: serde_json::Value::String(text.clone()),
                })
            })
            .collect(),
    );
    info!(
        namespace = request.namespace.as_deref().unwrap_or_default(),
        name = %request.name,
        fields = ?fixes.iter().map(|f| f.0).collect::<Vec<_>>(),
        "quantities written as numbers rewritten as text"
    );
    match allowed.clone().with_patch(patch) {
        Ok(r) => r,
        Err(e) => {
            warn!(error = %e, "serializing the quantity patch");
            allowed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn review(spec: serde_json::Value) -> AdmissionRequest<DynamicObject> {
        let r: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u1", "operation": "CREATE", "name": "p", "namespace": "ns",
                "kind": {"group": "sandbox.dev", "version": "v1alpha1", "kind": "SandboxProcess"},
                "resource": {"group": "sandbox.dev", "version": "v1alpha1", "resource": "sandboxprocesses"},
                "userInfo": {"username": "alice"},
                "object": {"apiVersion": "sandbox.dev/v1alpha1", "kind": "SandboxProcess",
                           "metadata": {"name": "p", "namespace": "ns"}, "spec": spec},
            }
        }))
        .unwrap();
        r.try_into().unwrap()
    }

    /// The patch as sent: kube serializes the bytes as a JSON array of numbers, which the API
    /// server's decoder takes for `[]byte` as well as base64.
    fn patch_of(r: &AdmissionResponse) -> Option<serde_json::Value> {
        let bytes = r.patch.as_ref()?;
        Some(serde_json::from_slice(bytes).unwrap())
    }

    #[test]
    fn a_number_cpu_becomes_its_text_and_the_uid_is_kept() {
        let r = respond(&review(
            json!({"podName": "x", "resources": {"limits": {"cpu": 1.5}}}),
        ));
        assert!(r.allowed);
        let v = serde_json::to_value(r.clone().into_review()).unwrap();
        assert_eq!(v["response"]["uid"], "u1");
        assert_eq!(v["response"]["patchType"], "JSONPatch");
        assert_eq!(
            patch_of(&r).unwrap(),
            json!([{"op": "replace", "path": "/spec/resources/limits/cpu", "value": "1.5"}])
        );
    }

    #[test]
    fn anything_else_passes_unchanged() {
        for spec in [
            json!({"resources": {"limits": {"cpu": "1.5", "memory": 64}}}),
            json!({"podName": "x"}),
        ] {
            let r = respond(&review(spec.clone()));
            assert!(r.allowed, "{spec}");
            assert_eq!(patch_of(&r), None, "{spec}");
        }
    }

    /// The chart's matchConditions pick every field the rewrite knows, and only by number.
    #[test]
    fn the_charts_match_conditions_name_every_quantity_field() {
        let chart = include_str!(
            "../../../../charts/sandbox-process-operator/templates/subresource-api.yaml"
        );
        for field in sandbox_api::admission::QUANTITY_FIELDS {
            let path = format!("object{}", field.replace('/', "."));
            let cond = format!("type({path}) == double");
            assert!(
                chart.contains(&cond),
                "the chart's matchConditions lack `{cond}`"
            );
        }
    }
}
