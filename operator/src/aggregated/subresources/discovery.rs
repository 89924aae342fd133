//! API discovery: what `kubectl api-resources` and the aggregator read (`/apis`, the group, its
//! resource list).
use axum::Json;
use serde_json::json;

pub const API_GROUP: &str = "subresources.sandbox.dev";
pub const API_VERSION: &str = "v1alpha1";
/// The second group this server serves: the `processes` resource (`aggregated::processes`).
pub const PROCESSES_GROUP: &str = "processes.sandbox.dev";

fn group_json_of(group: &str) -> serde_json::Value {
    let gv = format!("{group}/{API_VERSION}");
    json!({
        "name": group,
        "versions": [{"groupVersion": gv, "version": API_VERSION}],
        "preferredVersion": {"groupVersion": gv, "version": API_VERSION},
    })
}

fn group_json() -> serde_json::Value {
    group_json_of(API_GROUP)
}

pub async fn group_list() -> Json<serde_json::Value> {
    let groups = [group_json(), group_json_of(PROCESSES_GROUP)];
    Json(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

pub async fn group() -> Json<serde_json::Value> {
    let mut g = group_json();
    g["kind"] = "APIGroup".into();
    g["apiVersion"] = "v1".into();
    Json(g)
}

pub async fn resource_list() -> Json<serde_json::Value> {
    Json(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{API_GROUP}/{API_VERSION}"),
        "resources": [
            {"name": "sandboxprocesses/log", "singularName": "", "namespaced": true,
             "kind": "SandboxProcessLog", "verbs": ["get"]},
            {"name": "sandboxprocesses/signal", "singularName": "", "namespaced": true,
             "kind": "SandboxProcessSignal", "verbs": ["create"]},
            {"name": "sandboxprocesses/stdin", "singularName": "", "namespaced": true,
             "kind": "SandboxProcessStdin", "verbs": ["create", "get"]},
            {"name": "sandboxprocesses/resize", "singularName": "", "namespaced": true,
             "kind": "SandboxProcessResize", "verbs": ["create"]},
            {"name": "sandboxprocesses/attach", "singularName": "", "namespaced": true,
             "kind": "SandboxProcessAttach", "verbs": ["get", "create"]},
            {"name": "sandboxprocesses/probe", "singularName": "", "namespaced": true,
             "kind": "SandboxProcessProbe", "verbs": ["create"]},
        ],
    }))
}
