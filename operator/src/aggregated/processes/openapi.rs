//! OpenAPI v3 for the group, as kube-apiserver publishes one for each group version: the API
//! server's aggregator lists it in its `/openapi/v3` and proxies the document to us. kubectl reads
//! it to validate on the server (`fieldValidation`, which it looks for on the PATCH operation:
//! without it kubectl fetches and parses the cluster's whole `/openapi/v2` before every create)
//! and for `kubectl explain processes`. The spec and status schemas are the SandboxProcess CRD's:
//! one spec, one status.
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use axum::extract::Query;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use kube::CustomResourceExt;
use serde_json::{json, Value};

use super::{GROUP, GROUP_VERSION, KIND, VERSION};

/// The discovery document's key for the group version, and the document's path.
pub fn gv_path() -> String {
    format!("apis/{GROUP}/{VERSION}")
}

struct Document {
    body: String,
    hash: String,
}

fn document() -> &'static Document {
    static DOC: OnceLock<Document> = OnceLock::new();
    DOC.get_or_init(|| {
        let body = build().to_string();
        Document {
            hash: hash(&body),
            body,
        }
    })
}

/// 128 bits from two SipHash passes: the hash only has to change when the document does (kubectl
/// caches a document by it for good).
fn hash(body: &str) -> String {
    let pass = |salt: u8| {
        let mut h = std::hash::DefaultHasher::new();
        salt.hash(&mut h);
        body.hash(&mut h);
        h.finish()
    };
    format!("{:016X}{:016X}", pass(1), pass(2))
}

/// `GET /openapi/v3`: the group versions this server documents.
pub async fn discovery() -> Response {
    let url = format!("/openapi/v3/{}?hash={}", gv_path(), document().hash);
    json_response(
        json!({"paths": {gv_path(): {"serverRelativeURL": url}}}).to_string(),
        false,
    )
}

#[derive(serde::Deserialize)]
pub struct HashQuery {
    hash: Option<String>,
}

/// `GET /openapi/v3/apis/processes.sandbox.dev/v1alpha1`: cacheable for good when asked by its
/// hash, as kube-apiserver serves its own.
pub async fn group_version(Query(q): Query<HashQuery>) -> Response {
    let doc = document();
    json_response(
        doc.body.clone(),
        q.hash.as_deref() == Some(doc.hash.as_str()),
    )
}

fn json_response(body: String, immutable: bool) -> Response {
    let cache = if immutable {
        "public, immutable, max-age=31536000"
    } else {
        "no-cache, private"
    };
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, cache),
        ],
        body,
    )
        .into_response()
}

const PROCESS: &str = "dev.sandbox.processes.v1alpha1.Process";
const PROCESS_LIST: &str = "dev.sandbox.processes.v1alpha1.ProcessList";
const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn gvk(kind: &str) -> Value {
    json!({"group": GROUP, "version": VERSION, "kind": kind})
}

fn query(name: &str, ty: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": ty, "uniqueItems": true}})
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn reply(status: &str, schema: Value) -> Value {
    json!({status: {"description": "OK", "content": {"application/json": {"schema": schema}}}})
}

/// One operation on processes, with kube-apiserver's extensions (what kubectl reads).
fn operation(
    id: &str,
    action: &str,
    kind: &str,
    parameters: Vec<Value>,
    responses: Value,
) -> Value {
    json!({
        "operationId": id, "tags": [format!("processes_{VERSION}")],
        "parameters": parameters, "responses": responses,
        "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk(kind),
    })
}

fn list_params() -> Vec<Value> {
    vec![
        query("labelSelector", "string", "only the processes whose labels match"),
        query("fieldSelector", "string", "only the processes whose fields match: metadata.name, metadata.namespace, spec.podName, status.podName, status.phase"),
        query("watch", "boolean", "watch for changes, from resourceVersion"),
        query("resourceVersion", "string", "where a watch starts (this replica's own numbering)"),
        query("allowWatchBookmarks", "boolean", "send BOOKMARK events"),
        query("timeoutSeconds", "integer", "end the list or watch after this long"),
        query("sendInitialEvents", "boolean", "not served (422): list, then watch"),
    ]
}

fn write_params() -> Vec<Value> {
    vec![
        query(
            "dryRun",
            "string",
            "not served: refused (a create starts the process)",
        ),
        query(
            "fieldManager",
            "string",
            "accepted; processes keep no managed fields",
        ),
        query(
            "fieldValidation",
            "string",
            "Strict refuses unknown fields; otherwise they are named in a Warning",
        ),
    ]
}

fn paths() -> Value {
    let base = format!("/apis/{GROUP}/{VERSION}");
    let ns = path_param(
        "namespace",
        "object name and auth scope, such as for teams and projects",
    );
    let name = path_param("name", "name of the Process");
    let list = reply("200", schema_ref(PROCESS_LIST));
    let one = reply("200", schema_ref(PROCESS));
    let mut created = reply("201", schema_ref(PROCESS));
    created["200"] = one["200"].clone();
    let patch_body = json!({"content": {
        "application/merge-patch+json": {"schema": schema_ref(&format!("{META}.Patch"))},
        "application/json-patch+json": {"schema": schema_ref(&format!("{META}.Patch"))},
    }, "required": true});
    let mut post = operation(
        "createNamespacedProcess",
        "post",
        KIND,
        write_params(),
        created,
    );
    post["requestBody"] =
        json!({"content": {"application/json": {"schema": schema_ref(PROCESS)}}, "required": true});
    let mut patch = operation(
        "patchNamespacedProcess",
        "patch",
        KIND,
        write_params(),
        one.clone(),
    );
    patch["requestBody"] = patch_body;
    let delete_params = vec![query(
        "dryRun",
        "string",
        "not served: refused (a delete stops the process)",
    )];
    json!({
        format!("{base}/processes"): {
            "get": operation("listProcessForAllNamespaces", "list", KIND, list_params(), list.clone()),
        },
        format!("{base}/namespaces/{{namespace}}/processes"): {
            "parameters": [ns.clone()],
            "get": operation("listNamespacedProcess", "list", KIND, list_params(), list),
            "post": post,
        },
        format!("{base}/namespaces/{{namespace}}/processes/{{name}}"): {
            "parameters": [name, ns],
            "get": operation("readNamespacedProcess", "get", KIND, vec![], one.clone()),
            "patch": patch,
            "delete": operation("deleteNamespacedProcess", "delete", KIND, delete_params, one),
        },
    })
}

/// The CRD's `spec` and `status` schemas.
fn crd_schemas() -> (Value, Value) {
    let crd = serde_json::to_value(sandbox_api::crd::SandboxProcess::crd()).unwrap_or_default();
    let props = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
    (props["spec"].clone(), props["status"].clone())
}

fn schemas() -> Value {
    let (spec, status) = crd_schemas();
    let string = |d: &str| json!({"type": "string", "description": d});
    let type_meta = |d: &str| {
        json!({
            "apiVersion": string(GROUP_VERSION),
            "kind": string(d),
        })
    };
    let mut process = type_meta(KIND);
    process["metadata"] =
        json!({"allOf": [schema_ref(&format!("{META}.ObjectMeta"))], "default": {}});
    process["spec"] = spec;
    process["status"] = status;
    let mut list = type_meta("ProcessList");
    list["items"] = json!({"type": "array", "items": schema_ref(PROCESS)});
    list["metadata"] = json!({"allOf": [schema_ref(&format!("{META}.ListMeta"))], "default": {}});
    let strings =
        json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}});
    json!({
        PROCESS: {
            "description": "A command run in a container of a pod, served from its node's agent and never stored in etcd (docs/concepts/processes.md). The spec and status are a SandboxProcess's.",
            "type": "object", "required": ["spec"], "properties": process,
            "x-kubernetes-group-version-kind": [gvk(KIND)],
        },
        PROCESS_LIST: {
            "description": "A list of processes.",
            "type": "object", "required": ["items"], "properties": list,
            "x-kubernetes-group-version-kind": [gvk("ProcessList")],
        },
        format!("{META}.ObjectMeta"): {
            "description": "The metadata a Process keeps: name or generateName, labels and annotations are the client's; the rest is set by the server. Other fields are ignored.",
            "type": "object",
            "properties": {
                "name": string("unique in the namespace; given or generated"),
                "generateName": string("a prefix: five random characters are appended"),
                "namespace": string("the namespace"),
                "labels": strings.clone(),
                "annotations": strings,
                "uid": string("also the process's exec id on its node"),
                "resourceVersion": string("this replica's version of the object"),
                "generation": {"type": "integer", "format": "int64"},
                "creationTimestamp": {"type": "string", "format": "date-time"},
            },
        },
        format!("{META}.ListMeta"): {
            "type": "object",
            "properties": {"resourceVersion": string("this replica's version of the list")},
        },
        format!("{META}.Patch"): {
            "description": "A JSON merge patch or JSON patch; only labels and annotations can change.",
            "type": "object",
        },
    })
}

fn build() -> Value {
    json!({
        "openapi": "3.0.0",
        "info": {"title": "sandbox-process-operator: processes", "version": VERSION},
        "paths": paths(),
        "components": {"schemas": schemas()},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kubectl looks for to validate on the server rather than fetch `/openapi/v2`: a PATCH
    /// operation of the kind with a `fieldValidation` query parameter; and for `explain`: the
    /// kind's schema, with the CRD's spec, resolvable references.
    #[test]
    fn kubectl_finds_server_side_validation_and_the_schema() {
        let doc = build();
        let patches: Vec<&Value> = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .filter_map(|p| p.get("patch"))
            .filter(|op| op["x-kubernetes-group-version-kind"] == gvk(KIND))
            .collect();
        assert_eq!(patches.len(), 1);
        assert!(patches[0]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"));
        let schemas = &doc["components"]["schemas"];
        let process = &schemas[PROCESS];
        assert_eq!(process["x-kubernetes-group-version-kind"][0], gvk(KIND));
        assert!(process["properties"]["spec"]["properties"]["command"].is_object());
        assert!(process["properties"]["status"]["properties"]["phase"].is_object());
        let text = doc.to_string();
        for r in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = r.split('"').next().unwrap();
            assert!(
                schemas.get(name).is_some(),
                "{name} is referenced, not defined"
            );
        }
    }

    #[test]
    fn the_hash_follows_the_document() {
        assert_eq!(hash("a"), hash("a"));
        assert_ne!(hash("a"), hash("b"));
        assert_eq!(hash("a").len(), 32);
    }
}
