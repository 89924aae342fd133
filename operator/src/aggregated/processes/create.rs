//! `create`: the object checked by the one validator, its pod found and the caller's right to
//! exec in it checked, then the start sent to the pod's node; 201 once the agent holds it.
use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Extension;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::Api as KubeApi;
use sandbox_api::convert::{start_request, Target};
use sandbox_api::crd::SandboxProcessSpec;
use sandbox_api::validate;
use sandbox_api::validate::MAX_OBJECT_BYTES;
use sandbox_api::wire::{ProcessObject, ProcessRecord};
use serde::Deserialize;
use tracing::info;

use super::object::json_answer;
use super::read::not_found;
use super::store::Entry;
use super::strict::unknown_fields;
use super::{Api, GROUP, GROUP_VERSION, KIND};
use crate::aggregated::subresources::authorization::{authorize_exec_for, authorize_get, caller};
use crate::aggregated::subresources::tls::Peer;
use crate::aggregated::subresources::{agent_error_for, Result, SubresourceError};
use crate::envfrom;
use crate::pod;
use crate::status::{ContainerFacts, PodPhase};

/// The object a client posts (what it may set; the rest is the server's).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewProcess {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    metadata: NewMeta,
    spec: SandboxProcessSpec,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewMeta {
    name: Option<String>,
    generate_name: Option<String>,
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

pub(super) fn invalid(
    name: &str,
    field: &str,
    message: impl std::fmt::Display,
) -> SubresourceError {
    SubresourceError::Invalid(format!(
        "{KIND}.{GROUP} \"{name}\" is invalid: {field}: {message}"
    ))
}

/// The query of a create, as the API server passes it on.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateParams {
    field_validation: Option<String>,
    dry_run: Option<String>,
}

pub async fn create(
    State(api): State<Arc<Api>>,
    Extension(peer): Extension<Peer>,
    Path(namespace): Path<String>,
    Query(q): Query<CreateParams>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response> {
    let user = caller(&api.server, &peer, &headers)?;
    if q.dry_run.is_some() {
        return Err(SubresourceError::BadRequest(
            "dryRun: not supported by processes (a create starts the process)".into(),
        ));
    }
    let new = parse(&body)?;
    let name = name_of(&new.metadata)?;
    let unknown = unknown_spec_fields(&body, &new);
    if !unknown.is_empty() && q.field_validation.as_deref() == Some("Strict") {
        return Err(SubresourceError::BadRequest(format!(
            "strict decoding error: unknown field \"{}\"",
            unknown.join("\", unknown field \"")
        )));
    }
    check(&new, &namespace, &name)?;
    // One create of a name at a time on this replica: the second sees the first's process.
    let _held = Creating::take(&api, (namespace.clone(), name.clone())).await;
    let mut out = create_named(&api, &user, &namespace, &name, new).await?;
    // fieldValidation=Warn (or none): the response names what was dropped.
    for f in unknown.iter().take(10) {
        // RFC 7234 warn-text: a quoted string, its quotes and backslashes escaped.
        let text = format!("unknown field \"{f}\"")
            .replace('\\', "\\\\")
            .replace('"', "\\\"");
        let warning = format!("299 - \"{text}\"");
        if let Ok(v) = axum::http::HeaderValue::from_str(&warning) {
            out.headers_mut().append("warning", v);
        }
    }
    Ok(out)
}

/// A name being created on this replica, released when dropped: also when the client goes
/// away mid-create and the handler is dropped at an await.
pub(super) struct Creating<'a> {
    api: &'a Api,
    key: (String, String),
}

impl<'a> Creating<'a> {
    pub(super) async fn take(api: &'a Api, key: (String, String)) -> Creating<'a> {
        while !api.creating.lock().unwrap().insert(key.clone()) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        Creating { api, key }
    }
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        self.api.creating.lock().unwrap().remove(&self.key);
    }
}

/// The spec's fields the body has and the spec does not know.
fn unknown_spec_fields(body: &[u8], new: &NewProcess) -> Vec<String> {
    let (Ok(sent), Ok(kept)) = (
        serde_json::from_slice::<serde_json::Value>(body),
        serde_json::to_value(&new.spec),
    ) else {
        return vec![];
    };
    unknown_fields(&sent["spec"], &kept, "spec")
}

fn parse(body: &[u8]) -> Result<NewProcess> {
    if body.len() > 2 * MAX_OBJECT_BYTES {
        return Err(SubresourceError::Invalid(format!(
            "{KIND}.{GROUP} is invalid: the object takes {} bytes, over the {MAX_OBJECT_BYTES} a process keeps",
            body.len()
        )));
    }
    serde_json::from_slice(body)
        .map_err(|e| SubresourceError::BadRequest(format!("the body is not a {KIND}: {e}")))
}

/// The name given, or one generated from `generateName` (five characters, as the API server).
fn name_of(m: &NewMeta) -> Result<String> {
    let name = match (&m.name, &m.generate_name) {
        (Some(n), _) if !n.is_empty() => n.clone(),
        (_, Some(g)) if !g.is_empty() => {
            const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
            let mut r = [0u8; 5];
            getrandom::fill(&mut r).map_err(|e| SubresourceError::Internal(e.to_string()))?;
            let suffix: String = r
                .iter()
                .map(|b| CHARS[*b as usize % CHARS.len()] as char)
                .collect();
            format!("{g}{suffix}")
        }
        _ => {
            return Err(invalid(
                "",
                "metadata.name",
                "Required value: name or generateName is required",
            ))
        }
    };
    validate::names::check(
        &name,
        validate::names::SUBDOMAIN,
        validate::names::SUBDOMAIN_RULE,
    )
    .map_err(|m| invalid(&name, "metadata.name", m))?;
    Ok(name)
}

/// The same checks and words as a SandboxProcess gets at apply.
fn check(new: &NewProcess, namespace: &str, name: &str) -> Result<()> {
    if let Some(v) = new.api_version.as_deref().filter(|v| *v != GROUP_VERSION) {
        return Err(SubresourceError::BadRequest(format!(
            "apiVersion: {v:?} is not {GROUP_VERSION}"
        )));
    }
    if let Some(k) = new.kind.as_deref().filter(|k| *k != KIND) {
        return Err(SubresourceError::BadRequest(format!(
            "kind: {k:?} is not {KIND}"
        )));
    }
    if let Some(ns) = new
        .metadata
        .namespace
        .as_deref()
        .filter(|ns| *ns != namespace)
    {
        return Err(SubresourceError::BadRequest(format!(
            "the namespace of the provided object ({ns}) does not match the namespace sent on the request ({namespace})"
        )));
    }
    sandbox_api::names::object_meta(&new.metadata.labels, &new.metadata.annotations)
        .map_err(|(field, message)| invalid(name, field, message))?;
    validate::spec(&new.spec)
        .map_err(|v| invalid(name, &format!("spec.{}", v.field), v.message))?;
    Ok(())
}

async fn create_named(
    api: &Api,
    user: &crate::aggregated::subresources::frontproxy::UserInfo,
    namespace: &str,
    name: &str,
    new: NewProcess,
) -> Result<Response> {
    let spec_json =
        serde_json::to_value(&new.spec).map_err(|e| SubresourceError::Internal(e.to_string()))?;
    if let Some(e) = api.store.get(namespace, name) {
        return same_or_conflict(api, user, &e, &spec_json).await;
    }
    let live = api.store.live_in(namespace);
    if live >= api.per_namespace {
        return Err(SubresourceError::TooManyRequests(format!(
            "namespace {namespace} has {live} live processes, its bound (operator.processesPerNamespace, {}): wait for one to end or delete one",
            api.per_namespace
        )));
    }
    let (pod, node, container) = target(api, namespace, &new.spec).await?;
    authorize_exec_for(&api.server, user, namespace, &pod.0, "starting a process").await?;
    let url =
        api.server.agents.agent_url(&node).ok_or_else(|| {
            SubresourceError::Unavailable(format!("no running agent on node {node}"))
        })?;
    known_on(api, &url, &node).await?;
    if let Some(e) = api.store.get(namespace, name) {
        // Made before this replica knew the node (a create retried across a failover).
        return same_or_conflict(api, user, &e, &spec_json).await;
    }
    let exec_id = uid()?;
    let object = ProcessObject {
        namespace: namespace.into(),
        name: name.into(),
        creation_timestamp: now_seconds(),
        labels: new.metadata.labels,
        annotations: new.metadata.annotations,
        pod_name: pod.0.clone(),
        node_name: node.clone(),
        spec: spec_json,
    };
    let target = Target {
        exec_id: &exec_id,
        pod_uid: &pod.1,
        container: &container,
    };
    let values = env_values(api, user, namespace, name, &new.spec).await?;
    let mut req = start_request(&new.spec, target, &values)
        .map_err(|v| invalid(name, &format!("spec.{}", v.field), v.message))?;
    req.object = Some(Box::new(object.clone()));
    let req = validate::start(req).map_err(|v| invalid(name, &v.field, v.message))?;
    let rec = api
        .server
        .agents
        .client
        .start(&url, &req)
        .await
        .map_err(|e| agent_error_for(e, "process", name))?;
    let rec = ProcessRecord {
        object: Some(Box::new(object)),
        ..rec
    };
    api.store.upsert(&url, &rec);
    info!(%namespace, %name, pod = %pod.0, user = %user.username, exec_id = %exec_id, "process created");
    let e = api
        .store
        .get(namespace, name)
        .ok_or_else(|| not_found(name))?;
    Ok(json_answer(StatusCode::CREATED, e.json.to_string()))
}

/// The values of `env[].valueFrom`, read with the operator's rights once the caller may `get`
/// each Secret and ConfigMap named (a SubjectAccessReview each, before anything is read). They
/// go into the start request only: the object keeps the references, and messages name the
/// variable, the source and the key, never a value.
async fn env_values(
    api: &Api,
    user: &crate::aggregated::subresources::frontproxy::UserInfo,
    namespace: &str,
    name: &str,
    spec: &SandboxProcessSpec,
) -> Result<BTreeMap<String, String>> {
    let mut checked = std::collections::HashSet::new();
    for (i, e) in spec.env.iter().enumerate() {
        let Some((kind, r)) = e.value_from.as_ref().and_then(|f| f.reference()) else {
            continue;
        };
        let resource = if kind == "Secret" {
            "secrets"
        } else {
            "configmaps"
        };
        if checked.insert((resource, r.name.clone())) {
            let field = format!("spec.env[{i}].valueFrom");
            authorize_get(&api.server, user, namespace, resource, &r.name, &field).await?;
        }
    }
    envfrom::resolve(&api.server.client, namespace, spec)
        .await
        .map_err(|u| match u.reason {
            "EnvSourceUnreadable" => {
                // The API error is the operator's (its account, its rights): logged, not told.
                tracing::warn!(%namespace, %name, error = %u.message, "reading an env source");
                SubresourceError::Unavailable(
                    "spec.env: a Secret or ConfigMap could not be read now; try again".into(),
                )
            }
            reason => invalid(name, "spec.env", format!("{reason}: {}", u.message)),
        })
}

/// A create of a name held: the process, when the spec is the same (to a caller who could have
/// created it: `create pods/exec` on its pod, as for a new one); else 409.
async fn same_or_conflict(
    api: &Api,
    user: &crate::aggregated::subresources::frontproxy::UserInfo,
    e: &Entry,
    spec: &serde_json::Value,
) -> Result<Response> {
    let name = e.name.as_str();
    if &e.spec() == spec {
        let (ns, pod) = (&e.namespace, &e.columns.pod);
        authorize_exec_for(&api.server, user, ns, pod, "starting a process").await?;
        return Ok(json_answer(StatusCode::OK, e.json.to_string()));
    }
    Err(SubresourceError::AlreadyExists(format!(
        "processes.{GROUP} \"{name}\" already exists (with another spec)"
    )))
}

/// How long a create waits for this replica to know what the target node's agent holds.
const KNOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until this replica's watch of the node's agent has synced once: before, a repeated
/// create (retried across a failover) would not be told from a new one and start twice.
async fn known_on(api: &Api, url: &str, node: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + KNOWN_WAIT;
    while !api.server.agents.synced_once(url) {
        if tokio::time::Instant::now() >= deadline {
            return Err(SubresourceError::Unavailable(format!(
                "this operator replica does not know yet what the agent on node {node} holds; try again"
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The pod (name, uid), its node and the container: the one named, or the one a selector picks
/// as a SandboxProcess's would; refused, naming why, when it cannot take a process now.
async fn target(
    api: &Api,
    namespace: &str,
    spec: &SandboxProcessSpec,
) -> Result<((String, String), String, String)> {
    let pods = KubeApi::<Pod>::namespaced(api.server.client.clone(), namespace);
    let read = |e: kube::Error| SubresourceError::Internal(format!("reading pods: {e}"));
    let container = spec.container.as_deref();
    let p = if let Some(sel) = &spec.pod_selector {
        let all = pods.list(&ListParams::default()).await.map_err(read)?;
        let chosen = pod::choose(all.items.iter(), namespace, sel, container).ok_or_else(|| {
            SubresourceError::Conflict(format!(
                "no pod in namespace {namespace} matches spec.podSelector with its container running and ready"
            ))
        })?;
        all.items
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some(&chosen))
            .ok_or_else(|| SubresourceError::Internal("the chosen pod went".into()))?
    } else {
        pods.get_opt(&spec.pod_name)
            .await
            .map_err(read)?
            .ok_or_else(|| {
                SubresourceError::NotFound(format!("pods \"{}\" not found", spec.pod_name))
            })?
    };
    let name = p.metadata.name.clone().unwrap_or_default();
    let f = pod::facts(&p, container);
    let c = match &f.container {
        ContainerFacts::Found { name, .. } => name.clone(),
        ContainerFacts::NotInSpec { name: c } => {
            return Err(SubresourceError::BadRequest(format!(
                "container {c} is not valid for pod {name}"
            )))
        }
        ContainerFacts::InitContainer { name: c } => {
            return Err(SubresourceError::BadRequest(format!(
                "container {c} of pod {name} is an init container: processes run in the pod's containers"
            )))
        }
    };
    if !pod::can_start(&f) {
        let phase = match f.phase {
            PodPhase::Running if f.terminating => "terminating".to_string(),
            PodPhase::Running => format!("running, its container {c} not"),
            other => format!("{other:?}"),
        };
        return Err(SubresourceError::BadRequest(format!(
            "unable to start a process in pod {name}: it is {phase}"
        )));
    }
    let node = f.node_name.clone().unwrap_or_default();
    Ok(((name, f.uid), node, c))
}

/// A new object uid (RFC 4122 version 4), the process's exec id on its node.
fn uid() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| SubresourceError::Internal(e.to_string()))?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}

fn now_seconds() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_version_4() {
        let u = uid().unwrap();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!("89ab".contains(&u[19..20]), "{u}");
        assert_ne!(u, uid().unwrap());
    }

    #[test]
    fn names_are_given_or_generated_and_checked() {
        let m = |name: Option<&str>, g: Option<&str>| NewMeta {
            name: name.map(Into::into),
            generate_name: g.map(Into::into),
            ..Default::default()
        };
        assert_eq!(name_of(&m(Some("p1"), None)).unwrap(), "p1");
        let g = name_of(&m(None, Some("run-"))).unwrap();
        assert!(g.starts_with("run-") && g.len() == 9, "{g}");
        let e = name_of(&m(None, None)).unwrap_err().to_string();
        assert!(e.contains("metadata.name: Required value"), "{e}");
        let e = name_of(&m(Some("Bad_Name"), None)).unwrap_err().to_string();
        assert!(e.contains("metadata.name"), "{e}");
    }

    #[test]
    fn bad_specs_get_the_validators_words_naming_the_field() {
        let new: NewProcess = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"podName": "x", "command": []},
        }))
        .unwrap();
        let e = check(&new, "ns", "p").unwrap_err().to_string();
        assert!(
            e.starts_with("Process.processes.sandbox.dev \"p\" is invalid: spec.command"),
            "{e}"
        );
        let new: NewProcess = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "other"},
            "spec": {"podName": "x", "command": ["true"]},
        }))
        .unwrap();
        let e = check(&new, "ns", "p").unwrap_err().to_string();
        assert!(e.contains("does not match the namespace"), "{e}");
    }
}
