//! The agent's HTTP API (see `sandbox_wire::wire` for the endpoints and types).
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use base64::Engine;
use sandbox_wire::wire::{
    LogEvent, LogQuery, LogStream, ProcessList, ProcessRecord, SignalRequest, StartRequest,
    TerminalSize, WatchEvent, LOG_KEEPALIVE,
};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::auth::Auth;
use crate::error::AgentError;
use crate::metrics::Metrics;
use crate::registry::{Registry, Who};
use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::ledger::{self, decode_cursor, encode_cursor, Entry, Pos, Stream};

/// A follower re-reads at least this often even without a wake (a missed inotify event, a
/// full event queue): a safety net, not the way output arrives.
const FOLLOW_FALLBACK: Duration = Duration::from_secs(5);
/// How often an idle `/v1/watch` stream says it is alive ([`WatchEvent::Heartbeat`]).
const WATCH_HEARTBEAT: Duration = Duration::from_secs(5);
/// Default page for non-follow reads without maxBytes, per ledger read.
const READ_CHUNK: u64 = 4 << 20;

#[derive(Clone)]
pub struct AppState {
    pub registry: Arc<Registry>,
    pub auth: Arc<Auth>,
    pub metrics: Arc<Metrics>,
    /// The agent's serving certificate (with TLS on), for its expiry in the metrics.
    pub serving_cert: Option<std::path::PathBuf>,
    /// Becomes true when the agent shuts down: open streams end.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

/// Resolves once shutdown has started.
async fn stopping(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

impl IntoResponse for AgentError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.to_api())).into_response()
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/processes", post(start).get(list))
        .route("/v1/processes/{id}", get(get_one).delete(forget))
        .route("/v1/processes/{id}/signal", post(signal))
        .route("/v1/processes/{id}/object", put(set_object))
        .route("/v1/processes/{id}/probe", post(probe))
        .route(
            "/v1/processes/{id}/stdin",
            post(stdin).layer(axum::extract::DefaultBodyLimit::max(
                sandbox_wire::wire::MAX_STDIN_WRITE,
            )),
        )
        .route("/v1/processes/{id}/resize", post(resize))
        .route("/v1/processes/{id}/screen", get(screen))
        .route("/v1/processes/{id}/logs", get(logs))
        .route("/v1/watch", get(watch))
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(state)
}

async fn authenticate(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match st.auth.check(header).await {
        Ok(()) => next.run(req).await,
        Err(e) => {
            tracing::warn!(error = %e, path = %req.uri().path(), "refused");
            st.metrics.error(e.metric_label());
            e.into_response()
        }
    }
}

async fn start(
    State(st): State<AppState>,
    body: Bytes,
) -> Result<Json<sandbox_wire::wire::ProcessRecord>, AgentError> {
    let t0 = std::time::Instant::now();
    let r = match serde_json::from_slice::<StartRequest>(&body) {
        Ok(req) => st.registry.start(req).await,
        Err(e) => Err(AgentError::InvalidRequest(format!("request body: {e}"))),
    };
    if r.is_ok() {
        st.metrics.started(t0.elapsed());
    }
    Ok(Json(counted(&st, r)?))
}

/// Counts an error answer by its code.
fn counted<T>(st: &AppState, r: Result<T, AgentError>) -> Result<T, AgentError> {
    if let Err(e) = &r {
        st.metrics.error(e.metric_label());
    }
    r
}

/// `/metrics` of the metrics listener (no token: aggregates only).
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(st): State<AppState>| async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    st.metrics.encode(&st.registry.list(), node_facts(&st)),
                )
            }),
        )
        .with_state(state)
}

/// The node's side of the metrics, read at scrape time.
fn node_facts(st: &AppState) -> crate::metrics::NodeFacts {
    let fs = nix::sys::statvfs::statvfs(st.registry.layout().root()).ok();
    crate::metrics::NodeFacts {
        lost: st.registry.lost(),
        state_dir: fs.map(|f| {
            let unit = f.fragment_size();
            (
                f.blocks_available().saturating_mul(unit),
                f.blocks().saturating_mul(unit),
            )
        }),
        cert_expiry: st
            .serving_cert
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|pem| crate::tls::identity::not_after(&pem)),
    }
}

async fn list(State(st): State<AppState>) -> Json<ProcessList> {
    Json(ProcessList {
        items: st.registry.list(),
    })
}

async fn get_one(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<sandbox_wire::wire::ProcessRecord>, AgentError> {
    Ok(Json(counted(&st, st.registry.get_live(&id).await)?))
}

async fn forget(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, AgentError> {
    counted(&st, st.registry.forget(&id).await)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn signal(
    State(st): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<sandbox_wire::wire::ProcessRecord>, AgentError> {
    let r = match serde_json::from_slice::<SignalRequest>(&body) {
        Ok(req) => st.registry.signal(&id, req).await,
        Err(e) => Err(AgentError::InvalidRequest(format!("request body: {e}"))),
    };
    Ok(Json(counted(&st, r)?))
}

/// A `processes` object's new labels and annotations (the operator's PATCH).
async fn set_object(
    State(st): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<sandbox_wire::wire::ProcessRecord>, AgentError> {
    let r = match serde_json::from_slice::<sandbox_wire::wire::ProcessObject>(&body) {
        Ok(o) => st.registry.set_object(&id, o).await,
        Err(e) => Err(AgentError::InvalidRequest(format!("request body: {e}"))),
    };
    Ok(Json(counted(&st, r)?))
}

/// One port check in the process's pod (`tcpSocket` or `httpGet`, as in readiness).
async fn probe(
    State(st): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<sandbox_wire::wire::ProbeResult>, AgentError> {
    let r = match serde_json::from_slice::<sandbox_wire::wire::ProbeKind>(&body) {
        Ok(p) => st.registry.probe(&id, p).await,
        Err(e) => Err(AgentError::InvalidRequest(format!(
            "request body: {e} (one of tcpSocket: {{port}}, httpGet: {{port, path, status}})"
        ))),
    };
    Ok(Json(counted(&st, r)?))
}

/// `?offset=N[&close=true][&writer=W][&by=U]`: where the body's bytes start in the process's
/// input (in `writer`'s own bytes on a shared terminal), and who writes.
#[derive(serde::Deserialize)]
struct StdinQuery {
    offset: u64,
    #[serde(default)]
    close: bool,
    writer: Option<String>,
    by: Option<String>,
}

/// The body, as bytes, for stdin at `offset`; the answer is stdin's state after it.
async fn stdin(
    State(st): State<AppState>,
    Path(id): Path<String>,
    q: Result<Query<StdinQuery>, axum::extract::rejection::QueryRejection>,
    body: Bytes,
) -> Result<Json<sandbox_wire::wire::StdinState>, AgentError> {
    let r = match q {
        Ok(Query(q)) => {
            let who = Who {
                writer: q.writer.as_deref(),
                by: q.by.as_deref(),
            };
            st.registry.stdin(&id, q.offset, &body, q.close, who).await
        }
        Err(e) => Err(AgentError::InvalidRequest(format!(
            "query: {e} (offset=<bytes already sent>, close=true|false, writer=<id>, by=<user>)"
        ))),
    };
    Ok(Json(counted(&st, r)?))
}

/// What the process's terminal shows now (a redraw), and the log cursor after it.
async fn screen(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<sandbox_wire::wire::TerminalScreen>, AgentError> {
    let r = st.registry.screen(&id).await;
    Ok(Json(counted(&st, r)?))
}

/// A new window size (`{"rows", "cols"}`) for the process's terminal; the answer echoes it.
async fn resize(
    State(st): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<TerminalSize>, AgentError> {
    let r = match serde_json::from_slice::<TerminalSize>(&body) {
        Ok(size) => st.registry.resize(&id, size).await.map(|()| size),
        Err(e) => Err(AgentError::InvalidRequest(format!(
            "request body: {e} ({{\"rows\": N, \"cols\": N}})"
        ))),
    };
    Ok(Json(counted(&st, r)?))
}

fn ndjson(rx: mpsc::Receiver<Bytes>) -> Response {
    let stream = futures::StreamExt::map(ReceiverStream::new(rx), Ok::<_, Infallible>);
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    resp
}

fn line<T: serde::Serialize>(v: &T) -> Bytes {
    let mut b = serde_json::to_vec(v).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

/// The `end` event. The stream reaches tenants (through the operator's subresource API): the
/// node's identifiers are left out of the record.
fn end_event(cursor: String, record: Option<ProcessRecord>) -> LogEvent {
    LogEvent::End {
        cursor,
        record: record.map(|mut r| {
            r.withhold_node();
            Box::new(r)
        }),
    }
}

/// The last event of a read that stopped at its byte limit: `more` (resume at the cursor) unless
/// nothing is left, that is, the output is drained and the process ended — or, without `follow`,
/// nothing more is there yet (as an unlimited read would end).
fn after_limit(
    cursor: String,
    output_left: bool,
    follow: bool,
    record: Option<ProcessRecord>,
) -> LogEvent {
    let ended = record.as_ref().is_some_and(|r| r.is_final());
    if output_left || (follow && !ended) {
        LogEvent::More { cursor }
    } else {
        end_event(cursor, record.filter(|r| r.is_final()))
    }
}

async fn logs(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<LogQuery>,
) -> Result<Response, AgentError> {
    let eid = ExecId::parse(&id)?;
    let rec = st.registry.get(&id)?;
    let dir = st.registry.layout().ledger(&eid);
    let (start, until) = log_span(&eid, &q, &rec, &dir)?;
    if let Some(why) = crate::budget::freed(&dir) {
        return Err(AgentError::OutputFreed(why));
    }
    check_readable(&dir, start).await?;
    // Subscribed before the first read, so no write between the read and the wait is missed.
    let wakes = if q.follow {
        Some(st.registry.follows().follow(&dir)?)
    } else {
        None
    };
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let reader = LogReader {
        registry: st.registry.clone(),
        id,
        eid,
        legacy: ledger::is_legacy(&dir),
        dir,
        want: q.stream.unwrap_or(LogStream::Both),
        follow: q.follow,
        budget: q.max_bytes.unwrap_or(u64::MAX),
        until,
        wakes,
        tx,
    };
    let stop = st.shutdown.clone();
    tokio::spawn(async move {
        tokio::select! { _ = reader.send_from(start) => {}, _ = stopping(stop) => {} }
    });
    Ok(ndjson(rx))
}

/// Where a read starts (`since`, else the beginning) and, for `previous`, where it ends: the
/// previous run's span, as its supervisor recorded it.
fn log_span(
    eid: &ExecId,
    q: &LogQuery,
    rec: &ProcessRecord,
    dir: &std::path::Path,
) -> Result<(Pos, Option<Pos>), AgentError> {
    let decode = |c: &str| match decode_cursor(eid.as_str(), c) {
        Ok(p) => Ok(p),
        // A follow that began on an older agent resumes here after its upgrade.
        Err(e) => match ledger::decode_legacy_cursor(c) {
            Some(offset) => ledger::legacy_pos(dir, offset)
                .map_err(|e| AgentError::InvalidRequest(format!("since {c:?}: {e}"))),
            None => Err(AgentError::InvalidRequest(e.to_string())),
        },
    };
    if !q.previous {
        let start = q.since.as_deref().map(decode).transpose()?;
        return Ok((start.unwrap_or_default(), None));
    }
    q.check().map_err(AgentError::InvalidRequest)?;
    let Some(last) = &rec.last_exit else {
        return Err(AgentError::InvalidRequest(format!(
            "previous: the process has no previous run (restartCount {})",
            rec.restart_count
        )));
    };
    Ok((
        decode(&last.output_from)?,
        Some(decode(&last.output_until)?),
    ))
}

/// The ledger position just past an entry.
fn entry_end(e: &Entry) -> Pos {
    match e {
        Entry::Data { cursor, .. } => *cursor,
        Entry::Gap { to, .. } => *to,
    }
}

/// Validates the cursor up front so a bad one is a 400, not a broken stream.
async fn check_readable(dir: &std::path::Path, start: Pos) -> Result<(), AgentError> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || ledger::read_after(&dir, start, 1))
        .await
        .map_err(|e| AgentError::Internal(e.to_string()))?
        .map_err(|e| AgentError::InvalidRequest(e.to_string()))?;
    Ok(())
}

/// One log request being served, once its checks have passed: the stream runs on its own task.
struct LogReader {
    registry: Arc<Registry>,
    id: String,
    eid: ExecId,
    /// An older supervisor's ledger: cursors in the older form (`ledger::is_legacy`).
    legacy: bool,
    dir: std::path::PathBuf,
    want: LogStream,
    follow: bool,
    /// Bytes of output still to send (maxBytes).
    budget: u64,
    /// Where the output asked for ends (`previous`: where the next run's begins).
    until: Option<Pos>,
    wakes: Option<crate::follow::Follow>,
    tx: mpsc::Sender<Bytes>,
}

impl LogReader {
    /// Sends output from `pos` until the end (or maxBytes, or the span's end), then the event that
    /// says which.
    async fn send_from(mut self, mut pos: Pos) {
        let mut final_seen = false;
        // When this stream last sent something: an idle follow sends a keepalive line after
        // LOG_KEEPALIVE of silence, so its reader can tell an idle process from a dead link.
        let mut last_sent = tokio::time::Instant::now();
        loop {
            let Some((mut entries, mut next)) = self.read(pos, self.budget.min(READ_CHUNK)).await
            else {
                break;
            };
            // A span (`previous`) ends where the next run's output begins.
            let span_done = self.until.is_some_and(|u| next.offset >= u.offset);
            if let Some(until) = self.until.filter(|_| span_done) {
                entries.retain(|e| entry_end(e).offset <= until.offset);
                next = until;
            }
            let got_any = !entries.is_empty();
            for e in entries {
                let Some(ev) = self.event_of(e) else {
                    continue;
                };
                if self.tx.send(line(&ev)).await.is_err() {
                    return; // client went away
                }
                last_sent = tokio::time::Instant::now();
            }
            pos = next;
            // A span cannot be resumed (`previous` takes no `since`): maxBytes ends it.
            if span_done || (self.until.is_some() && self.budget == 0) {
                let _ = self.tx.send(line(&end_event(self.cursor(pos), None))).await;
                return;
            }
            if self.budget == 0 {
                self.send_after_limit(pos).await;
                return;
            }
            if got_any {
                continue;
            }
            if !self.follow || final_seen {
                break;
            }
            if last_sent.elapsed() >= LOG_KEEPALIVE {
                if self.tx.send(Bytes::from_static(b"\n")).await.is_err() {
                    return;
                }
                last_sent = tokio::time::Instant::now();
            }
            let keepalive_due = LOG_KEEPALIVE.saturating_sub(last_sent.elapsed());
            final_seen = self.wait_for_more(keepalive_due).await;
        }
        let record = self.registry.get(&self.id).ok().filter(|r| r.is_final());
        let _ = self
            .tx
            .send(line(&end_event(self.cursor(pos), record)))
            .await;
    }

    /// Ledger reads block on files: they run off the async threads. `None`: unreadable.
    async fn read(&self, pos: Pos, max: u64) -> Option<(Vec<Entry>, Pos)> {
        let d = self.dir.clone();
        match tokio::task::spawn_blocking(move || ledger::read_after(&d, pos, max)).await {
            Ok(Ok(v)) => Some(v),
            _ => None,
        }
    }

    fn cursor(&self, p: Pos) -> String {
        if self.legacy {
            return ledger::encode_legacy_cursor(p);
        }
        encode_cursor(self.eid.as_str(), p)
    }

    /// The wire event of a ledger entry; `None` for a stream the client did not ask for (its
    /// bytes still count against maxBytes).
    fn event_of(&mut self, e: Entry) -> Option<LogEvent> {
        Some(match e {
            Entry::Gap { from, to } => LogEvent::Truncated {
                dropped_bytes: to.data.saturating_sub(from.data),
                cursor: self.cursor(to),
            },
            Entry::Data {
                stream,
                ts_nanos,
                data,
                cursor: at,
            } => {
                self.budget = self.budget.saturating_sub(data.len() as u64);
                let s = match stream {
                    Stream::Stdout => LogStream::Stdout,
                    Stream::Stderr => LogStream::Stderr,
                };
                if self.want != LogStream::Both && self.want != s {
                    return None;
                }
                LogEvent::Data {
                    stream: s,
                    data: base64::engine::general_purpose::STANDARD.encode(&data),
                    ts_nanos,
                    cursor: self.cursor(at),
                }
            }
        })
    }

    /// Stopped by maxBytes: say whether (and where) more follows, never a false end.
    async fn send_after_limit(&self, pos: Pos) {
        // The record first: output written before it became final is then seen below.
        let record = self.registry.get(&self.id).ok();
        let d = self.dir.clone();
        let left = tokio::task::spawn_blocking(move || ledger::read_after(&d, pos, 1))
            .await
            .map(|r| r.map(|(e, _)| !e.is_empty()).unwrap_or(true))
            .unwrap_or(true);
        let _ = self
            .tx
            .send(line(&after_limit(
                self.cursor(pos),
                left,
                self.follow,
                record,
            )))
            .await;
    }

    /// The final record is written after output is drained: once seen, one more read gets
    /// everything. Until then, waits for the ledger to change, `at_most` (the next keepalive).
    /// `true`: the record is final.
    async fn wait_for_more(&mut self, at_most: Duration) -> bool {
        let final_seen = self
            .registry
            .get(&self.id)
            .map(|r| r.is_final())
            .unwrap_or(true);
        if !final_seen {
            if let Some(w) = self.wakes.as_mut() {
                let _ = tokio::time::timeout(FOLLOW_FALLBACK.min(at_most), w.changed()).await;
            }
        }
        final_seen
    }
}

async fn watch(State(st): State<AppState>) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let registry = st.registry.clone();
    let stop = st.shutdown.clone();
    let stream = async move {
        let mut sub = registry.subscribe();
        // First of all: the reader's silence deadline starts at connect, not after the list (a
        // node lost during the list or the first interval would otherwise go unnoticed).
        let beat = line(&WatchEvent::Heartbeat {
            interval_ms: WATCH_HEARTBEAT.as_millis() as u64,
        });
        if tx.send(beat).await.is_err() {
            return;
        }
        'outer: loop {
            for rec in registry.list() {
                if tx
                    .send(line(&WatchEvent::Upsert {
                        record: Box::new(rec),
                    }))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if tx.send(line(&WatchEvent::Synced)).await.is_err() {
                return;
            }
            let mut beat = tokio::time::interval_at(
                tokio::time::Instant::now() + WATCH_HEARTBEAT,
                WATCH_HEARTBEAT,
            );
            beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let next = tokio::select! {
                    ev = sub.recv() => ev,
                    _ = beat.tick() => {
                        let ev = WatchEvent::Heartbeat {
                            interval_ms: WATCH_HEARTBEAT.as_millis() as u64,
                        };
                        if tx.send(line(&ev)).await.is_err() {
                            return;
                        }
                        continue;
                    }
                };
                match next {
                    Ok(ev) => {
                        beat.reset();
                        if tx.send(line(&ev)).await.is_err() {
                            return;
                        }
                    }
                    // Fell behind: resend the full state rather than skip changes.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue 'outer,
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    };
    tokio::spawn(async move {
        tokio::select! { _ = stream => {}, _ = stopping(stop) => {} }
    });
    ndjson(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_wire::wire::Phase;

    fn record(phase: Phase) -> ProcessRecord {
        let mut r = ProcessRecord::starting("e", "p", "c", "id");
        r.phase = phase;
        r.pid = Some(7);
        r.host_pid = Some(40_123);
        r
    }

    #[test]
    fn the_end_event_leaves_out_the_host_pid() {
        let LogEvent::End {
            record: Some(r), ..
        } = end_event("c".into(), Some(record(Phase::Exited)))
        else {
            panic!()
        };
        assert_eq!((r.pid, r.host_pid), (Some(7), None));
        let text = serde_json::to_string(&end_event("c".into(), Some(record(Phase::Exited))));
        assert!(!text.unwrap().contains("hostPid"));
    }

    #[test]
    fn a_byte_limit_ends_with_more_unless_nothing_is_left() {
        let more = |ev: LogEvent| matches!(ev, LogEvent::More { ref cursor } if cursor == "c9");
        let running = || Some(record(Phase::Running));
        let exited = || Some(record(Phase::Exited));
        // Output left: more, whatever the process does.
        assert!(more(after_limit("c9".into(), true, false, exited())));
        assert!(more(after_limit("c9".into(), true, false, running())));
        // A follow of a running process: more may come.
        assert!(more(after_limit("c9".into(), false, true, running())));
        // Drained and ended: the real end, with the record.
        assert!(matches!(
            after_limit("c9".into(), false, true, exited()),
            LogEvent::End {
                record: Some(_),
                ..
            }
        ));
        // Nothing more there yet and no follow: ends like an unlimited read (no record).
        assert!(matches!(
            after_limit("c9".into(), false, false, running()),
            LogEvent::End { record: None, .. }
        ));
    }
}
