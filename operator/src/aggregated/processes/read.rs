//! `get`, `list` and `watch`: from the replica's table, as JSON or as the `Table` kubectl asks for.
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use super::object::{column_definitions, json_answer, row};
use super::select::{Selector, Subject};
use super::store::{Change, Entry, Kind, Since};
use super::version::Asked;
use super::{Api, GROUP, GROUP_VERSION, KIND};
use crate::aggregated::subresources::authorization::caller;
use crate::aggregated::subresources::tls::Peer;
use crate::aggregated::subresources::{Result, SubresourceError};

/// How often a watch that asked for bookmarks gets one while nothing else happens.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// A watch's default length (the API server's `--min-request-timeout` is 30 min, randomized).
const DEFAULT_WATCH: Duration = Duration::from_secs(1800);

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListParams {
    label_selector: Option<String>,
    field_selector: Option<String>,
    #[serde(default)]
    watch: Option<String>,
    resource_version: Option<String>,
    timeout_seconds: Option<u64>,
    #[serde(default)]
    allow_watch_bookmarks: Option<String>,
    send_initial_events: Option<String>,
    include_object: Option<String>,
}

fn truthy(v: &Option<String>) -> bool {
    matches!(v.as_deref(), Some("true") | Some("1"))
}

/// How the caller wants objects: plain, or as rows of a `Table` (with whole objects or not).
#[derive(Clone, Copy)]
enum Shape {
    Objects,
    Table {
        whole: bool,
    },
    /// `PartialObjectMetadata` (the metadata clients: the garbage collector, quota).
    Metadata,
}

/// The first form of `Accept` this server can answer (JSON only): a `meta.k8s.io/v1` Table,
/// metadata only, or the objects; the objects when none is named.
fn shape(headers: &HeaderMap, p: &ListParams) -> Shape {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        if !matches!(media, "application/json" | "application/*" | "*/*") {
            continue;
        }
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |k: &str| params.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        let meta_v1 = param("g") == Some("meta.k8s.io") && param("v") == Some("v1");
        match param("as") {
            None => return Shape::Objects,
            Some("Table") if meta_v1 => {
                let whole = p.include_object.as_deref() == Some("Object");
                return Shape::Table { whole };
            }
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") if meta_v1 => {
                return Shape::Metadata
            }
            _ => {}
        }
    }
    Shape::Objects
}

/// An object's metadata as a `PartialObjectMetadata`.
fn metadata_only(json: &str) -> Value {
    let v: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": v["metadata"]})
}

pub async fn get_one(
    State(api): State<Arc<Api>>,
    Extension(peer): Extension<Peer>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    Query(p): Query<ListParams>,
) -> Result<Response> {
    caller(&api.server, &peer, &headers)?;
    api.server.all_known().await?;
    let e = api
        .store
        .get(&namespace, &name)
        .ok_or_else(|| not_found(&name))?;
    Ok(match shape(&headers, &p) {
        Shape::Objects => json_answer(axum::http::StatusCode::OK, e.json.to_string()),
        Shape::Metadata => json_answer(
            axum::http::StatusCode::OK,
            metadata_only(&e.json).to_string(),
        ),
        Shape::Table { whole } => {
            let t = table([&*e], &e.rv.to_string(), whole, true);
            json_answer(axum::http::StatusCode::OK, t.to_string())
        }
    })
}

pub fn not_found(name: &str) -> SubresourceError {
    SubresourceError::NotFound(format!("processes.{GROUP} \"{name}\" not found"))
}

pub async fn list(
    State(api): State<Arc<Api>>,
    Extension(peer): Extension<Peer>,
    Path(namespace): Path<String>,
    headers: HeaderMap,
    Query(p): Query<ListParams>,
) -> Result<Response> {
    caller(&api.server, &peer, &headers)?;
    api.server.all_known().await?;
    serve(&api, Some(namespace), &headers, &p)
}

pub async fn list_all(
    State(api): State<Arc<Api>>,
    Extension(peer): Extension<Peer>,
    headers: HeaderMap,
    Query(p): Query<ListParams>,
) -> Result<Response> {
    caller(&api.server, &peer, &headers)?;
    api.server.all_known().await?;
    serve(&api, None, &headers, &p)
}

/// What a list or watch selects: a namespace (or all) and the selectors.
struct Filter {
    namespace: Option<String>,
    selector: Selector,
}

impl Filter {
    fn keeps(&self, e: &Entry) -> bool {
        self.namespace.as_deref().is_none_or(|ns| ns == e.namespace)
            && self.selector.matches(&Subject {
                namespace: &e.namespace,
                name: &e.name,
                labels: &e.labels,
                columns: &e.columns,
            })
    }
}

fn serve(
    api: &Arc<Api>,
    namespace: Option<String>,
    headers: &HeaderMap,
    p: &ListParams,
) -> Result<Response> {
    let selector = Selector::parse(p.label_selector.as_deref(), p.field_selector.as_deref())
        .map_err(SubresourceError::BadRequest)?;
    let asked =
        Asked::parse(p.resource_version.as_deref()).map_err(SubresourceError::BadRequest)?;
    let filter = Filter {
        namespace,
        selector,
    };
    let shape = shape(headers, p);
    if truthy(&p.watch) {
        // kube-apiserver with the WatchList gate off refuses it the same way; clients fall back
        // to a list then a watch.
        if p.send_initial_events.is_some() {
            return Err(SubresourceError::Invalid(
                "sendInitialEvents: Forbidden: sendInitialEvents is not supported by processes; list, then watch from the list's resourceVersion".into(),
            ));
        }
        return Ok(watch(api, filter, asked, shape, p));
    }
    let (items, rv) = api.store.list();
    let items: Vec<Arc<Entry>> = items.into_iter().filter(|e| filter.keeps(e)).collect();
    Ok(match shape {
        Shape::Objects => {
            let mut out = format!(
                r#"{{"kind":"{KIND}List","apiVersion":"{GROUP_VERSION}","metadata":{{"resourceVersion":"{rv}"}},"items":["#
            );
            for (i, e) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&e.json);
            }
            out.push_str("]}");
            json_answer(axum::http::StatusCode::OK, out)
        }
        Shape::Table { whole } => json_answer(
            axum::http::StatusCode::OK,
            table(items.iter().map(|e| &**e), &rv.to_string(), whole, true).to_string(),
        ),
        Shape::Metadata => {
            let items: Vec<Value> = items.iter().map(|e| metadata_only(&e.json)).collect();
            let list = json!({
                "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": rv.to_string()}, "items": items,
            });
            json_answer(axum::http::StatusCode::OK, list.to_string())
        }
    })
}

/// A `meta.k8s.io/v1` Table of `items` (the list's resourceVersion on the table, or
/// `kubectl get -w` replays every row); column definitions only when `columns`.
fn table<'a>(
    items: impl IntoIterator<Item = &'a Entry>,
    rv: &str,
    whole: bool,
    columns: bool,
) -> Value {
    let rows: Vec<Value> = items
        .into_iter()
        .map(|e| {
            let obj: Value = serde_json::from_str(&e.json).unwrap_or(Value::Null);
            row(&e.columns, &obj, whole)
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": if columns { column_definitions() } else { json!([]) },
        "rows": rows,
    })
}

/// One watch event line.
fn event(kind: &str, e: &Entry, rv: u64, shape: Shape, first: &mut bool) -> Bytes {
    let object = match shape {
        Shape::Objects => {
            if kind == Kind::Deleted.as_str() {
                // A deletion carries the last state at the deletion's resourceVersion.
                let mut v: Value = serde_json::from_str(&e.json).unwrap_or(Value::Null);
                v["metadata"]["resourceVersion"] = rv.to_string().into();
                v
            } else {
                serde_json::from_str(&e.json).unwrap_or(Value::Null)
            }
        }
        Shape::Table { whole } => {
            let t = table([e], &rv.to_string(), whole, *first);
            *first = false;
            t
        }
        Shape::Metadata => {
            let mut v = metadata_only(&e.json);
            v["metadata"]["resourceVersion"] = rv.to_string().into();
            v
        }
    };
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn bookmark(rv: u64) -> Bytes {
    let v = json!({"type": "BOOKMARK", "object": {
        "kind": KIND, "apiVersion": GROUP_VERSION,
        "metadata": {"resourceVersion": rv.to_string()},
    }});
    Bytes::from(format!("{v}\n"))
}

/// 410 as an in-stream ERROR event (never as the response's status: clients would retry the
/// same resourceVersion forever), then the end of the stream.
fn expired() -> Bytes {
    let v = json!({"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version: the processes served by this replica cannot resume from it; list again",
        "reason": "Expired", "code": 410,
    }});
    Bytes::from(format!("{v}\n"))
}

fn watch(api: &Arc<Api>, filter: Filter, asked: Asked, shape: Shape, p: &ListParams) -> Response {
    // `from`: the rv the stream stands at (bookmarks say it; later changes are above it).
    let (initial, mut rx, from) = match asked {
        Asked::Any => {
            let (items, rv, rx) = api.store.snapshot();
            let added: Vec<Change> = items
                .into_iter()
                .map(|entry| Change {
                    rv: entry.rv,
                    kind: Kind::Added,
                    entry,
                })
                .collect();
            (added, rx, rv)
        }
        Asked::After(rv) => match api.store.since(rv) {
            Since::Changes(c, rx) => (c, rx, rv),
            Since::Expired => {
                let body = Body::from(expired());
                return ([(header::CONTENT_TYPE, "application/json")], body).into_response();
            }
        },
    };
    let bookmarks = truthy(&p.allow_watch_bookmarks);
    // A client's timeout, at most the default (a huge one would overflow the deadline).
    let until = tokio::time::Instant::now()
        + p.timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_WATCH)
            .min(DEFAULT_WATCH);
    let stream = async_stream(move |tx| async move {
        let mut first = true;
        let mut last = from;
        let mut bookmark_at = tokio::time::Instant::now() + BOOKMARK_EVERY;
        for c in initial {
            last = last.max(c.rv);
            if filter.keeps(&c.entry)
                && tx
                    .send(event(c.kind.as_str(), &c.entry, c.rv, shape, &mut first))
                    .await
                    .is_err()
            {
                return;
            }
        }
        loop {
            if tx.is_closed() {
                return; // the client went away
            }
            let next = tokio::time::timeout_at(until.min(bookmark_at), rx.recv()).await;
            let out = match next {
                Ok(Ok(c)) if c.rv <= last => continue,
                Ok(Ok(c)) => {
                    last = c.rv;
                    if !filter.keeps(&c.entry) {
                        continue;
                    }
                    event(c.kind.as_str(), &c.entry, c.rv, shape, &mut first)
                }
                // Fell behind the window: the client relists.
                Ok(Err(RecvError::Lagged(_))) => {
                    let _ = tx.send(expired()).await;
                    return;
                }
                Ok(Err(RecvError::Closed)) => return,
                Err(_) if tokio::time::Instant::now() >= until => return,
                Err(_) => {
                    bookmark_at = tokio::time::Instant::now() + BOOKMARK_EVERY;
                    if !bookmarks {
                        continue;
                    }
                    // The last change this stream has passed (sent or filtered out).
                    bookmark(last)
                }
            };
            if tx.send(out).await.is_err() {
                return;
            }
        }
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream.map(Ok::<_, Infallible>)),
    )
        .into_response()
}

/// A stream fed by a task (the watch loop), ended when the task ends or the client goes.
fn async_stream<F, Fut>(f: F) -> impl futures::Stream<Item = Bytes>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Bytes>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(f(tx));
    tokio_stream_from(rx)
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> impl futures::Stream<Item = Bytes> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kubectl, the metadata clients and plain clients ask for, and what they get.
    #[test]
    fn the_accept_header_chooses_the_form() {
        let cases = [
            ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", "table"),
            ("application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", "objects"),
            ("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json", "metadata"),
            ("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", "metadata"),
            ("application/json", "objects"),
            ("", "objects"),
            ("*/*", "objects"),
        ];
        for (accept, want) in cases {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, accept.parse().unwrap());
            let got = match shape(&h, &ListParams::default()) {
                Shape::Objects => "objects",
                Shape::Table { .. } => "table",
                Shape::Metadata => "metadata",
            };
            assert_eq!(got, want, "{accept}");
        }
        let m = metadata_only(
            r#"{"kind":"Process","metadata":{"name":"p","resourceVersion":"5"},"spec":{}}"#,
        );
        assert_eq!(m["kind"], "PartialObjectMetadata");
        assert_eq!(m["metadata"]["name"], "p");
        assert!(m.get("spec").is_none());
    }
}
