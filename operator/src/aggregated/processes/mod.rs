//! The `processes` resource (`processes.sandbox.dev/v1alpha1`, kind `Process`): the second door
//! to a process, served by every replica from the agents' records, never stored in etcd: a
//! command costs its node's work, not four API writes.
//!
//! - `POST   …/namespaces/NS/processes` a `Process` (the SandboxProcess spec) → 201, once its
//!   record is on its node; the same name with the same spec again → 200 with it, another
//!   spec → 409.
//! - `GET    …/namespaces/NS/processes/NAME`, `GET …/processes` (all namespaces) and
//!   `GET …/namespaces/NS/processes` with `labelSelector`, `fieldSelector` ([`select::FIELDS`]),
//!   `watch=true` from a `resourceVersion` ([`version`]), bookmarks; as a `Table` for kubectl.
//! - `PATCH  …/namespaces/NS/processes/NAME` (merge or JSON patch): new labels and annotations;
//!   the spec never changes.
//! - `DELETE …/namespaces/NS/processes/NAME`: stops it (its grace period) and forgets it.
//!
//! The API server has authorized the verb on `processes` before proxying; a create also needs
//! `create pods/exec` on the target pod (a SubjectAccessReview for the caller), as `kubectl exec`.
//!
//! - `GET    /openapi/v3` and the group version's document ([`openapi`]): server-side
//!   validation and `kubectl explain`.
//!
//! One job per file: the table ([`store`]), the object and its row ([`object`]), selectors
//! ([`select`]), unknown fields ([`strict`]), resource versions ([`version`]), ends and lost agents ([`keep`]), and the handlers ([`create`], [`read`],
//! [`patch`], [`delete`]).
mod create;
mod delete;
pub mod keep;
mod object;
mod openapi;
mod patch;
mod read;
mod select;
pub mod store;
mod strict;
mod version;

use std::sync::Arc;

use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::subresources::Server;
pub use super::subresources::PROCESSES_GROUP as GROUP;
pub use store::Store;

pub const VERSION: &str = "v1alpha1";
pub const GROUP_VERSION: &str = "processes.sandbox.dev/v1alpha1";
pub const KIND: &str = "Process";

/// What every handler shares.
pub struct Api {
    pub server: Arc<Server>,
    pub store: Arc<Store>,
    /// Most live (not ended) processes per namespace (`--processes-per-namespace`).
    pub per_namespace: usize,
    /// Names being created or patched on this replica: a second write of one waits for the
    /// first (and reads what it wrote); writes of other names go on.
    creating: std::sync::Mutex<std::collections::HashSet<(String, String)>>,
}

impl Api {
    pub fn new(server: Arc<Server>, store: Arc<Store>, per_namespace: usize) -> Arc<Api> {
        Arc::new(Api {
            server,
            store,
            per_namespace,
            creating: Default::default(),
        })
    }
}

pub fn router(api: Arc<Api>) -> Router {
    let base = format!("/apis/{GROUP}/{VERSION}");
    let ns = format!("{base}/namespaces/{{namespace}}/processes");
    Router::new()
        .route(&format!("/apis/{GROUP}"), get(group))
        .route("/openapi/v3", get(openapi::discovery))
        .route(
            &format!("/openapi/v3/{}", openapi::gv_path()),
            get(openapi::group_version),
        )
        .route(&base, get(resource_list))
        .route(&format!("{base}/processes"), get(read::list_all))
        .route(&ns, get(read::list).post(create::create))
        .route(
            &format!("{ns}/{{name}}"),
            get(read::get_one)
                .delete(delete::delete)
                .patch(patch::patch),
        )
        .with_state(api)
}

async fn group() -> Json<serde_json::Value> {
    let gv = json!({"groupVersion": GROUP_VERSION, "version": VERSION});
    Json(json!({
        "kind": "APIGroup", "apiVersion": "v1", "name": GROUP,
        "versions": [gv], "preferredVersion": gv,
    }))
}

async fn resource_list() -> Json<serde_json::Value> {
    Json(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": resources(),
    }))
}

/// The resource and its subresources (those served by the subresource handlers, through `Door::Process`).
fn resources() -> serde_json::Value {
    let sub = |name: &str, verbs: &[&str]| json!({"name": format!("processes/{name}"), "singularName": "", "namespaced": true, "kind": KIND, "verbs": verbs});
    json!([
        {
            "name": "processes", "singularName": "process", "namespaced": true, "kind": KIND,
            "verbs": ["create", "delete", "get", "list", "patch", "watch"],
            "shortNames": ["proc"], "categories": ["sandbox"],
        },
        sub("log", &["get"]),
        sub("signal", &["create"]),
        sub("stdin", &["create", "get"]),
        sub("resize", &["create"]),
        sub("attach", &["create", "get"]),
        sub("probe", &["create"]),
    ])
}
