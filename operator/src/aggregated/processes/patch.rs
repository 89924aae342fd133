//! `patch`: a process's labels and annotations changed (`kubectl label`, `annotate`, `edit`,
//! a client-side `apply`), as JSON merge patch or JSON patch. The spec of a running command never
//! changes: a patch that would change it is refused naming `spec`. The change is kept by the
//! process's node agent, beside its record, so every replica serves it and it outlives restarts.
use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::Extension;
use serde::Deserialize;
use serde_json::Value;
use tracing::info;

use super::create::{invalid, Creating};
use super::object::json_answer;
use super::read::not_found;
use super::store::Entry;
use super::{Api, GROUP_VERSION, KIND};
use crate::aggregated::subresources::authorization::caller;
use crate::aggregated::subresources::tls::Peer;
use crate::aggregated::subresources::{agent_error_for, Result, SubresourceError};

/// The query of a patch, as the API server passes it on.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchParams {
    field_validation: Option<String>,
    dry_run: Option<String>,
}

/// The forms of PATCH, by `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    Merge,
    Json,
}

fn form(headers: &HeaderMap) -> Result<Form> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = ct.split(';').next().unwrap_or("").trim();
    match media {
        "application/merge-patch+json" => Ok(Form::Merge),
        "application/json-patch+json" => Ok(Form::Json),
        _ => Err(SubresourceError::UnsupportedMediaType(format!(
            "the body of a PATCH of processes must be a JSON merge patch (application/merge-patch+json, kubectl --type=merge) or a JSON patch (application/json-patch+json, --type=json), not {media:?}"
        ))),
    }
}

pub async fn patch(
    State(api): State<Arc<Api>>,
    Extension(peer): Extension<Peer>,
    Path((namespace, name)): Path<(String, String)>,
    Query(q): Query<PatchParams>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response> {
    let user = caller(&api.server, &peer, &headers)?;
    let form = form(&headers)?;
    if q.dry_run.is_some() {
        return Err(SubresourceError::BadRequest(
            "dryRun: not supported by processes".into(),
        ));
    }
    api.server.all_known().await?;
    // Writes of one name on this replica go one at a time: each reads what the one before wrote.
    let _held = Creating::take(&api, (namespace.clone(), name.clone())).await;
    let e = api
        .store
        .get(&namespace, &name)
        .ok_or_else(|| not_found(&name))?;
    let current: Value =
        serde_json::from_str(&e.json).map_err(|err| SubresourceError::Internal(err.to_string()))?;
    let patched = apply(current.clone(), form, &body)?;
    let strict = q.field_validation.as_deref() == Some("Strict");
    let (labels, annotations) = changed_metadata(&e, &current, &patched, strict)?;
    if labels == e.labels && annotations == e.annotations() {
        return Ok(json_answer(StatusCode::OK, e.json.to_string()));
    }
    let mut object = e
        .stand_in()
        .and_then(|r| r.object)
        .ok_or_else(|| SubresourceError::Internal("no object to patch".into()))?;
    object.labels = labels;
    object.annotations = annotations;
    sandbox_api::wire_rules::object(&object).map_err(|v| invalid(&name, &v.field, v.message))?;
    let rec = api
        .server
        .agents
        .client
        .set_object(&e.agent, &e.exec_id, &object)
        .await
        .map_err(|err| agent_error_for(err, "process", &name))?;
    info!(%namespace, %name, user = %user.username, "process labels or annotations changed");
    // The change comes through this replica's watch of the agent too, after every older record
    // the watch still carries: answered once it is there, no older record reverts it later.
    let deadline = tokio::time::Instant::now() + WATCHED_WITHIN;
    loop {
        if let Some(now) = api.store.get(&namespace, &name) {
            // Another rv first: the annotations are read from the JSON.
            let changed = now.rv != e.rv;
            if changed && now.labels == object.labels && now.annotations() == object.annotations {
                return Ok(json_answer(StatusCode::OK, now.json.to_string()));
            }
        }
        if tokio::time::Instant::now() >= deadline {
            // The watch is behind (or cut): the agent's answer, taken as is.
            api.store.upsert(&e.agent, &rec);
            let now = api
                .store
                .get(&namespace, &name)
                .ok_or_else(|| not_found(&name))?;
            return Ok(json_answer(StatusCode::OK, now.json.to_string()));
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// How long a patch waits for its change to come through the agent's watch.
const WATCHED_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The object with the patch applied; a patch that does not apply is the client's error.
fn apply(mut doc: Value, form: Form, body: &[u8]) -> Result<Value> {
    let bad = |e: &dyn std::fmt::Display| SubresourceError::BadRequest(format!("the patch: {e}"));
    match form {
        Form::Merge => {
            let p: Value = serde_json::from_slice(body).map_err(|e| bad(&e))?;
            if !p.is_object() {
                return Err(bad(&"a merge patch must be a JSON object"));
            }
            json_patch::merge(&mut doc, &p);
        }
        Form::Json => {
            let p: json_patch::Patch = serde_json::from_slice(body).map_err(|e| bad(&e))?;
            json_patch::patch(&mut doc, &p)
                .map_err(|e| SubresourceError::Invalid(format!("the patch does not apply: {e}")))?;
        }
    }
    Ok(doc)
}

type Meta = (BTreeMap<String, String>, BTreeMap<String, String>);

/// The labels and annotations of the patched object, once everything else in it is found as it
/// was (the status is the server's and ignored, as the API server ignores it on the object).
fn changed_metadata(e: &Entry, current: &Value, patched: &Value, strict: bool) -> Result<Meta> {
    let name = e.name.as_str();
    if patched.get("apiVersion").and_then(Value::as_str) != Some(GROUP_VERSION)
        || patched.get("kind").and_then(Value::as_str) != Some(KIND)
    {
        return Err(SubresourceError::BadRequest(format!(
            "apiVersion and kind: a patch cannot change them ({GROUP_VERSION}, {KIND})"
        )));
    }
    let meta = &patched["metadata"];
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "generation",
    ] {
        if meta.get(field) != current["metadata"].get(field) {
            return Err(invalid(
                name,
                &format!("metadata.{field}"),
                "field is immutable",
            ));
        }
    }
    if let Some(rv) = meta.get("resourceVersion").filter(|rv| !rv.is_null()) {
        if Some(rv) != current["metadata"].get("resourceVersion") {
            return Err(SubresourceError::Conflict(format!(
                "Operation cannot be fulfilled on processes.{} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                super::GROUP
            )));
        }
    }
    if patched.get("spec") != current.get("spec") {
        return Err(invalid(
            name,
            "spec",
            "field is immutable: a process's command cannot change; delete it and create another",
        ));
    }
    if strict {
        let known = ["apiVersion", "kind", "metadata", "spec", "status"];
        if let Some(k) = patched
            .as_object()
            .and_then(|o| o.keys().find(|k| !known.contains(&k.as_str())))
        {
            return Err(SubresourceError::BadRequest(format!(
                "strict decoding error: unknown field \"{k}\""
            )));
        }
    }
    let map = |field: &str| -> Result<BTreeMap<String, String>> {
        match meta.get(field) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(v) => serde_json::from_value(v.clone()).map_err(|_| {
                invalid(
                    name,
                    &format!("metadata.{field}"),
                    "must be a map of strings to strings",
                )
            }),
        }
    };
    let (labels, annotations) = (map("labels")?, map("annotations")?);
    sandbox_api::names::object_meta(&labels, &annotations)
        .map_err(|(field, message)| invalid(name, field, message))?;
    Ok((labels, annotations))
}

#[cfg(test)]
mod tests;
