//! The handle of one started process: its SandboxProcess object, by name.
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::Stream;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Client, ResourceExt};
use sandbox_api::crd::{
    condition, EndReason, LogStream, Phase, SandboxProcess, SandboxProcessStatus,
};
use sandbox_api::wire::{ProcessRecord, StdinState};

use crate::error::{Error, Result};
use crate::logs::{self, LogEvent, LogOptions, Read, Reader};
use crate::stdin::{StallHook, StdinStall};

/// How a process ended: the root's exit code (128+n when signal n killed it), the signal,
/// whether `timeoutSeconds` stopped it, and the end reason (`Exited`, `Signaled`, `TimedOut`,
/// `Stopped`, `OOMKilled`, `ContainerExited`, `PodDeleted`, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    pub code: i32,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub end_reason: Option<EndReason>,
}

/// What [`Process::wait_for_log`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogMatch {
    /// The stream of the matched line.
    pub stream: LogStream,
    /// The matched line, without its newline (UTF-8, invalid bytes replaced).
    pub line: String,
    /// Just after the matched line: [`LogOptions::after`] reads on from there.
    pub cursor: String,
}

/// What [`Process::output`] collected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: Exit,
    /// Some output is missing: dropped by the node's retention cap, or beyond `max_bytes`.
    pub truncated: bool,
}

/// What [`Process::kill`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Killed {
    /// `spec.stop` was set: the stop signal now, SIGKILL after the grace period.
    Stopping { signal: i32, grace_seconds: i64 },
    /// The one signal was delivered to the process group.
    Signalled(i32),
    /// The process had already ended; nothing was sent. Says how it ended.
    AlreadyEnded(String),
}

/// A process started through a SandboxProcess. Cheap to clone; holds no connection. Dropping
/// it does nothing to the process: [`crate::Sandbox::get`] with its name reattaches.
#[derive(Clone)]
pub struct Process {
    pub(crate) client: Client,
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// Seen started once: calls that need a start do not ask again (a start is for good).
    pub(crate) started: Arc<AtomicBool>,
    /// How long a call without a timeout of its own waits for the start.
    pub(crate) start_timeout: Option<Duration>,
    /// Told when stdin has not taken a byte for a while.
    pub(crate) stdin_stall: Option<StallHook>,
}

/// How long a call without a timeout of its own (stdin, signal, logs) waits for the process to
/// start, by default ([`Process::with_start_timeout`]).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish()
    }
}

fn status(o: &SandboxProcess) -> SandboxProcessStatus {
    o.status.clone().unwrap_or_default()
}

/// The status will not change any more: phase `Exited`, or an `Error` that cannot heal
/// (`AgentUnavailable`, and `ProcessLost` without an end reason, recover when the agent answers).
pub fn is_final(o: &SandboxProcess) -> bool {
    o.status.as_ref().is_some_and(|s| s.is_final())
}

/// The operator has started the process (`status.podUID` is set then): it has output.
pub fn is_started(o: &SandboxProcess) -> bool {
    o.status.as_ref().is_some_and(|s| s.is_started())
}

/// `Ready=True`; for a process with `readiness` that has ended, only if it was ever ready
/// (`readyAt`): an older operator wrote `Ready=True` for one that exited with 0 before it was.
pub fn is_ready(o: &SandboxProcess) -> bool {
    let s = status(o);
    let said = s
        .condition(condition::READY)
        .is_some_and(|c| c.status == "True");
    let ended_never_ready = o.spec.readiness.is_some() && s.ready_at.is_none() && is_final(o);
    said && !ended_never_ready
}

/// The error of a process that ended without ever being started (`ContainerNotFound`,
/// `ProcessSpawnFailed`, `InvalidProcessCwd`, ...): it has no output, only `status.error`.
pub fn never_started(o: &SandboxProcess) -> Option<Error> {
    let s = status(o);
    if s.pod_uid.is_some() || s.phase != Some(Phase::Error) || !s.is_final() {
        return None;
    }
    s.error.map(|e| Error::Process {
        name: o.name_any(),
        code: e.code,
        message: e.message,
    })
}

/// How a final object ended: its [`Exit`], or the error that phase `Error` carries.
pub fn exit_of(o: &SandboxProcess) -> Result<Exit> {
    let s = status(o);
    match (s.phase, s.exit, s.error, s.end_reason) {
        (Some(Phase::Exited), Some(e), _, reason) => Ok(Exit {
            code: e.code,
            signal: e.signal,
            timed_out: e.timed_out,
            end_reason: reason,
        }),
        (_, _, Some(e), _) => Err(Error::Process {
            name: o.name_any(),
            code: e.code,
            message: e.message,
        }),
        (_, _, None, Some(reason)) => Err(Error::EndedWithoutExit {
            name: o.name_any(),
            reason,
        }),
        _ => Err(Error::Transport(format!(
            "sandboxprocess {} ended without an exit status",
            o.name_any()
        ))),
    }
}

/// What `wait_ready` says of the object that ended its wait.
pub fn ready_outcome(o: &SandboxProcess) -> Result<()> {
    if is_ready(o) {
        return Ok(());
    }
    let s = status(o);
    if let (Some(Phase::Error), Some(e)) = (s.phase, s.error.clone()) {
        return Err(Error::Process {
            name: o.name_any(),
            code: e.code,
            message: e.message,
        });
    }
    let message = match s.condition(condition::READY) {
        Some(c) if c.status != "True" && !c.reason.is_empty() => {
            format!("{}: {}", c.reason, c.message)
        }
        _ => "readiness never passed".to_string(),
    };
    Err(Error::ExitedBeforeReady {
        name: o.name_any(),
        message,
    })
}

/// For a process that has already ended, how (what `kill` reports instead of acting).
pub fn already_ended(o: &SandboxProcess) -> Option<String> {
    if !is_final(o) {
        return None; // also an Error that heals: it may still run
    }
    let s = status(o);
    match s.phase? {
        Phase::Exited => Some(match (&s.exit, s.end_reason) {
            (Some(e), _) => match e.signal {
                Some(sig) => format!("already exited (code {}, signal {sig})", e.code),
                None => format!("already exited (code {})", e.code),
            },
            (None, Some(r)) => format!("already ended ({r}) without running"),
            (None, None) => "already ended".to_string(),
        }),
        Phase::Error => Some(match &s.error {
            Some(e) => format!("already ended: {}: {}", e.code.as_str(), e.message),
            None => "already ended (phase Error)".to_string(),
        }),
        Phase::Pending | Phase::Running => None,
    }
}

impl Process {
    /// The object's name (the id to reattach with).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// How long calls without a timeout of their own (stdin, signal, logs) wait for the process
    /// to start (default [`START_TIMEOUT`]; `None`: for ever). Not started by then:
    /// [`Error::NotStarted`], whose code says why (`PodNotFound`, ...).
    pub fn with_start_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Calls `hook` when a stdin write has waited `after` without the process taking a byte
    /// (it is not reading its stdin); the write goes on waiting. Once per stall.
    pub fn on_stdin_stall(
        mut self,
        after: Duration,
        hook: impl Fn(&StdinStall) + Send + Sync + 'static,
    ) -> Self {
        self.stdin_stall = Some(StallHook {
            after,
            hook: Arc::new(hook),
        });
        self
    }

    fn api(&self) -> Api<SandboxProcess> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub(crate) fn url(&self, sub: &str) -> String {
        format!(
            "{}/namespaces/{}/sandboxprocesses/{}/{sub}",
            logs::PATH_PREFIX,
            logs::encode(&self.namespace),
            logs::encode(&self.name)
        )
    }

    /// The object as it is now.
    pub async fn object(&self) -> Result<SandboxProcess> {
        self.api()
            .get_opt(&self.name)
            .await?
            .ok_or_else(|| Error::NotFound(self.name.clone()))
    }

    /// Its status as it is now.
    pub async fn status(&self) -> Result<SandboxProcessStatus> {
        Ok(status(&self.object().await?))
    }

    /// Waits (on a watch) until `cond` holds, for any condition a caller (or a test) needs
    /// beyond the ones named here; `what` names it in a timeout. `None` waits for ever. A
    /// deleted object ends the wait with [`Error::NotFound`].
    pub async fn until(
        &self,
        timeout: Option<Duration>,
        what: &'static str,
        cond: impl Fn(&SandboxProcess) -> bool + Send + 'static,
    ) -> Result<SandboxProcess> {
        let cond = std::sync::Arc::new(cond);
        let watched = async {
            let mut failures = 0u32;
            loop {
                let c = cond.clone();
                // Boxed: a watcher's state is large, and waits nest (wait_for_port holds one
                // while it checks); on the stack it overflowed a 2 MiB thread in debug builds.
                let fut = Box::pin(await_condition(
                    self.api(),
                    &self.name,
                    // A deleted object also ends the wait; reported below.
                    move |o: Option<&SandboxProcess>| o.is_none_or(|o| c(o)),
                ));
                match fut.await {
                    Ok(got) => return Ok(got),
                    // The watch ended on an error (expired, cut, the API server restarting):
                    // watch again, as kubectl wait does; the timeout bounds it.
                    Err(_) if failures < 60 => {
                        failures += 1;
                        tokio::time::sleep(Duration::from_millis(
                            250 * u64::from(failures.min(20)),
                        ))
                        .await;
                    }
                    Err(e) => {
                        return Err(Error::Transport(format!(
                            "watching sandboxprocess {}: {e}",
                            self.name
                        )))
                    }
                }
            }
        };
        self.within(what, timeout, Instant::now(), watched)
            .await?
            .ok_or_else(|| Error::NotFound(self.name.clone()))
    }

    /// Waits until the process has ended; how. Phase `Error` (could not run, lost, stale
    /// handle) is [`Error::Process`] with its code. A timeout ends only this wait.
    pub async fn wait(&self, timeout: Option<Duration>) -> Result<Exit> {
        let o = self.until(timeout, "exit", is_final).await?;
        exit_of(&o)
    }

    /// Waits until the process was started (it has output then); one that could not start is
    /// [`Error::Process`] with its `status.error` code (or [`Error::EndedWithoutExit`]: stopped
    /// first). At the timeout: [`Error::NotStarted`], which says why it waits.
    pub async fn wait_started(&self, timeout: Option<Duration>) -> Result<()> {
        self.ensure_started("wait_started", timeout).await
    }

    /// Waits until the process is ready (its declared readiness passed; without one, once it
    /// started). Ending first is [`Error::ExitedBeforeReady`] or [`Error::Process`].
    pub async fn wait_ready(&self, timeout: Option<Duration>) -> Result<()> {
        let o = self
            .until(timeout, "be ready", |o| is_ready(o) || is_final(o))
            .await?;
        ready_outcome(&o)
    }

    /// Its output as a stream of events, from `o.after` (or the beginning); with `o.follow`,
    /// until the process ends (a lost connection is resumed by cursor). Ends with `End`.
    ///
    /// ```no_run
    /// # async fn demo(p: sandbox_client::Process) -> Result<(), sandbox_client::Error> {
    /// use futures::StreamExt;
    /// use sandbox_client::{LogEvent, LogOptions};
    ///
    /// let mut events = Box::pin(p.logs(LogOptions { follow: true, ..Default::default() }));
    /// let mut last = None;
    /// while let Some(ev) = events.next().await {
    ///     match ev? {
    ///         LogEvent::Data { data, cursor, .. } => {
    ///             print!("{}", String::from_utf8_lossy(&data));
    ///             last = Some(cursor); // keep it: `after: last` resumes here, from anywhere
    ///         }
    ///         LogEvent::Truncated { dropped_bytes, .. } => eprintln!("[{dropped_bytes} bytes dropped]"),
    ///         LogEvent::End { .. } => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn logs(&self, o: LogOptions) -> impl Stream<Item = Result<LogEvent>> + Send + 'static {
        let this = self.clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<LogEvent>>(16);
        tokio::spawn(async move {
            let mut reader = match this.reader(&o).await {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            loop {
                // A dropped stream ends the read at once, not at the next event (a quiet
                // follow would otherwise hold its connection and the agent's follow slot).
                let next = tokio::select! {
                    n = logs::next_public(&mut reader) => n,
                    _ = tx.closed() => return,
                };
                let next = match next {
                    Err(e) => Err(this.explain(e).await),
                    other => other,
                };
                match next {
                    Ok(Some(ev)) => {
                        if tx.send(Ok(ev)).await.is_err() {
                            return; // the stream was dropped
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
        });
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
    }

    /// A reader, once the process has started (only a started process has output).
    async fn reader(&self, o: &LogOptions) -> Result<Reader> {
        let r = Reader::new(self.client.clone(), &self.namespace, &self.name, o)?;
        self.ensure_started("logs", self.start_timeout).await?;
        Ok(r)
    }

    /// A failed read, explained by the object when the process never started: its
    /// `status.error` rather than the subresource's "no process".
    async fn explain(&self, e: Error) -> Error {
        if !matches!(e, Error::Api { .. } | Error::StreamBroken { .. }) {
            return e;
        }
        match self.api().get_opt(&self.name).await {
            Ok(Some(o)) => never_started(&o).unwrap_or(e),
            _ => e,
        }
    }

    /// Waits until a complete line of its output (from `after`, or the beginning) matches the
    /// regular expression `pattern` (regex-lite syntax, like `readiness.logMatch`); the line and
    /// a cursor just after it. Ending first is [`Error::ExitedBeforeLog`].
    pub async fn wait_for_log(
        &self,
        pattern: &str,
        stream: LogStream,
        after: Option<String>,
        timeout: Option<Duration>,
    ) -> Result<LogMatch> {
        let re = regex_lite::Regex::new(pattern)
            .map_err(|e| Error::invalid("pattern", e.to_string()))?;
        let begun = Instant::now();
        self.ensure_started("wait_for_log", timeout).await?;
        let fut = self.find_line(&re, stream, after);
        self.within("log a matching line", timeout, begun, fut)
            .await
    }

    async fn find_line(
        &self,
        re: &regex_lite::Regex,
        stream: LogStream,
        after: Option<String>,
    ) -> Result<LogMatch> {
        let o = LogOptions {
            follow: true,
            after,
            stream,
            limit_bytes: None,
        };
        let mut reader = self.reader(&o).await?;
        let mut lines = logs::Lines2::default();
        let matches = |line: &[u8]| re.is_match(&String::from_utf8_lossy(line));
        loop {
            let ev = match reader.next().await {
                Ok(Some(ev)) => ev,
                Ok(None) => unreachable!("a follow ends with End"),
                Err(e) => return Err(self.explain(e).await),
            };
            match ev {
                Read::Data {
                    stream,
                    data,
                    start,
                    cursor,
                    ..
                } => {
                    let mut found = None;
                    let end = lines.feed(stream, &data, |line| {
                        let hit = matches(line);
                        if hit {
                            found = Some(String::from_utf8_lossy(line).into_owned());
                        }
                        hit
                    });
                    if let (Some(end), Some(line)) = (end, found) {
                        let cursor = if end == data.len() {
                            cursor
                        } else {
                            start.plus(end as u64).render()
                        };
                        return Ok(LogMatch {
                            stream,
                            line,
                            cursor,
                        });
                    }
                }
                Read::Truncated { .. } => lines.gap(),
                Read::End { cursor, .. } => {
                    // The output is complete: a last line without a newline counts now.
                    let mut found = None;
                    lines.finish(|s, line| {
                        let hit = matches(line);
                        if hit {
                            found = Some((s, String::from_utf8_lossy(line).into_owned()));
                        }
                        hit
                    });
                    return match found {
                        Some((stream, line)) => Ok(LogMatch {
                            stream,
                            line,
                            cursor: cursor.render(),
                        }),
                        None => Err(Error::ExitedBeforeLog {
                            name: self.name.clone(),
                            pattern: re.as_str().to_string(),
                        }),
                    };
                }
            }
        }
    }

    /// Waits for the end, then its whole retained output and how it ended. `max_bytes` bounds
    /// what is kept per stream (beyond it, `truncated`); a timeout ends only this wait.
    pub async fn output(
        &self,
        max_bytes: Option<usize>,
        timeout: Option<Duration>,
    ) -> Result<Output> {
        let begun = Instant::now();
        self.ensure_started("output", timeout).await?;
        self.within("end", timeout, begun, self.collect(max_bytes))
            .await
    }

    async fn collect(&self, max_bytes: Option<usize>) -> Result<Output> {
        let mut reader = self
            .reader(&LogOptions {
                follow: true,
                ..Default::default()
            })
            .await?;
        let (mut stdout, mut stderr, mut truncated) = (Vec::new(), Vec::new(), false);
        let cap = max_bytes.unwrap_or(usize::MAX);
        loop {
            match reader.next().await {
                Ok(Some(Read::Data { stream, data, .. })) => {
                    let buf = if stream == LogStream::Stderr {
                        &mut stderr
                    } else {
                        &mut stdout
                    };
                    let room = cap.saturating_sub(buf.len());
                    if data.len() > room {
                        truncated = true;
                    }
                    buf.extend_from_slice(&data[..room.min(data.len())]);
                }
                Ok(Some(Read::Truncated { .. })) => truncated = true,
                Ok(Some(Read::End { .. })) | Ok(None) => break,
                Err(e) => return Err(self.explain(e).await),
            }
        }
        let done = self.until(None, "end", is_final).await?;
        Ok(Output {
            stdout,
            stderr,
            exit: exit_of(&done)?,
            truncated,
        })
    }

    /// `None`: stop it (`spec.stop`: its stop signal, SIGKILL after the grace period).
    /// `Some(n)`: send signal n once to its process group. An ended process is left alone.
    pub async fn kill(&self, signal: Option<i32>) -> Result<Killed> {
        let current = self.object().await?;
        if let Some(said) = already_ended(&current) {
            return Ok(Killed::AlreadyEnded(said));
        }
        match signal {
            None => {
                let patch = serde_json::json!({"spec": {"stop": true}});
                let o = self
                    .api()
                    .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                Ok(Killed::Stopping {
                    signal: o.spec.stop_signal,
                    grace_seconds: o.spec.termination_grace_period_seconds,
                })
            }
            Some(sig) => {
                self.signal(sig).await?;
                Ok(Killed::Signalled(sig))
            }
        }
    }

    /// Sends signal `sig` (1–64) once to the process group; the agent's record after it.
    pub async fn signal(&self, sig: i32) -> Result<ProcessRecord> {
        if !(1..=64).contains(&sig) {
            return Err(Error::invalid("signal", format!("{sig} is not 1-64")));
        }
        self.ensure_started("signal", self.start_timeout).await?;
        let body = serde_json::to_vec(&serde_json::json!({"signal": sig})).expect("json");
        let req = http::Request::post(self.url("signal"))
            .header("content-type", "application/json")
            .body(body)
            .map_err(|e| Error::invalid("name", e.to_string()))?;
        Ok(self.client.request(req).await?)
    }

    /// Where its stdin is: the bytes taken (the offset of the next write), closed or not.
    pub async fn stdin_state(&self) -> Result<StdinState> {
        self.ensure_started("stdin_state", self.start_timeout)
            .await?;
        crate::stdin::state(&self.client, &self.url("stdin")).await
    }

    /// Appends `data` to its stdin, exactly once (a lost reply is retried by offset), waiting
    /// while the process does not read; the offset after it. Needs `spec.stdin`.
    pub async fn send_stdin(&self, data: &[u8]) -> Result<u64> {
        let at = self.stdin_state().await?.bytes;
        self.send_stdin_at(at, data).await
    }

    /// Like [`Process::send_stdin`], with the offset `data` starts at given by the caller: a
    /// retry of a call that failed part-way sends the same bytes at the same offset, and stdin
    /// takes only what it has not taken yet (exactly once across calls, not only within one).
    pub async fn send_stdin_at(&self, offset: u64, data: &[u8]) -> Result<u64> {
        self.ensure_started("send_stdin", self.start_timeout)
            .await?;
        let w = self.stdin_writer();
        let mut at = offset;
        // In writes the subresource takes (at most 1 MiB each).
        for piece in data.chunks(crate::stdin::CHUNK) {
            at = w.send(at, piece, false).await?;
        }
        Ok(at)
    }

    /// Closes its stdin (EOF).
    pub async fn close_stdin(&self) -> Result<()> {
        let at = self.stdin_state().await?;
        if !at.closed {
            self.stdin_writer().send(at.bytes, &[], true).await?;
        }
        Ok(())
    }

    /// Copies `input` to its stdin from where it is now, exactly once, and closes it at the
    /// end of `input`; the bytes sent.
    pub async fn pump_stdin(&self, input: impl tokio::io::AsyncRead + Unpin) -> Result<u64> {
        self.ensure_started("pump_stdin", self.start_timeout)
            .await?;
        self.stdin_writer().pump(input).await
    }

    fn stdin_writer(&self) -> crate::stdin::Writer<'_> {
        crate::stdin::Writer {
            client: &self.client,
            url: self.url("stdin"),
            name: &self.name,
            stall: self.stdin_stall.as_ref(),
        }
    }

    /// Deletes the object (a running process is stopped by the operator first).
    pub async fn delete(&self) -> Result<()> {
        match self
            .api()
            .delete(&self.name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(status: serde_json::Value) -> SandboxProcess {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "spec": {"podName": "w", "command": ["x"]},
            "status": status,
        }))
        .unwrap()
    }

    fn with_readiness(status: serde_json::Value) -> SandboxProcess {
        let mut o = object(status);
        o.spec.readiness =
            Some(serde_json::from_value(serde_json::json!({"tcpSocket": {"port": 8080}})).unwrap());
        o
    }

    fn ready_cond(status: &str, reason: &str, message: &str) -> serde_json::Value {
        serde_json::json!([{"type": "Ready", "status": status, "reason": reason,
            "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}])
    }

    #[test]
    fn exits_and_errors_carry_the_status() {
        let e = exit_of(&object(serde_json::json!({"phase": "Exited",
            "exit": {"code": 137, "signal": 9}, "endReason": "Signaled"})))
        .unwrap();
        assert_eq!(
            e,
            Exit {
                code: 137,
                signal: Some(9),
                timed_out: false,
                end_reason: Some(EndReason::Signaled)
            }
        );
        let e = exit_of(&object(serde_json::json!({"phase": "Error",
            "error": {"code": "ContainerNotFound", "message": "no container x"}})))
        .unwrap_err();
        assert_eq!(e.code(), "ContainerNotFound");
        assert_eq!(
            e.process_code(),
            Some(sandbox_api::crd::ErrorCode::ContainerNotFound)
        );
        let e = exit_of(&object(
            serde_json::json!({"phase": "Exited", "endReason": "Stopped"}),
        ))
        .unwrap_err();
        assert_eq!(e.code(), "EndedWithoutExit");
    }

    #[test]
    fn a_process_that_never_started_is_its_status_error() {
        let o = object(serde_json::json!({"phase": "Error", "nodeName": "n1",
            "error": {"code": "ProcessSpawnFailed", "message": "exec \"nope\": not found"}}));
        assert!(!is_started(&o));
        let e = never_started(&o).expect("never started");
        assert_eq!(
            e.to_string(),
            "sandboxprocess p failed: ProcessSpawnFailed: exec \"nope\": not found"
        );
        let lost = object(
            serde_json::json!({"phase": "Error", "nodeName": "n1", "podUID": "u",
            "error": {"code": "ProcessLost", "message": "gone"}}),
        );
        assert!(is_started(&lost) && never_started(&lost).is_none());
        let pending = object(serde_json::json!({"phase": "Pending", "nodeName": "n1"}));
        assert!(!is_started(&pending) && never_started(&pending).is_none());
    }

    #[test]
    fn kill_leaves_an_ended_process_alone() {
        let said = |v: serde_json::Value| already_ended(&object(v));
        assert_eq!(
            said(serde_json::json!({"phase": "Exited", "exit": {"code": 3}})).as_deref(),
            Some("already exited (code 3)")
        );
        assert_eq!(
            said(serde_json::json!({"phase": "Exited", "exit": {"code": 143, "signal": 15}}))
                .as_deref(),
            Some("already exited (code 143, signal 15)")
        );
        assert_eq!(
            said(serde_json::json!({"phase": "Error",
                "error": {"code": "ContainerNotFound", "message": "no container x"}}))
            .as_deref(),
            Some("already ended: ContainerNotFound: no container x")
        );
        assert!(
            said(serde_json::json!({"phase": "Exited", "endReason": "Stopped"}))
                .unwrap()
                .starts_with("already ended (Stopped)")
        );
        for running in ["Running", "Pending"] {
            assert_eq!(said(serde_json::json!({"phase": running})), None);
        }
        assert_eq!(said(serde_json::json!({})), None, "no status yet");
    }

    #[test]
    fn ready_only_if_it_was_ever_ready() {
        let o = with_readiness(serde_json::json!({"phase": "Exited", "exit": {"code": 0},
            "endReason": "Exited", "conditions": ready_cond("False", "ExitedBeforeReady",
                "exited with code 0 before it was ever ready")}));
        let e = ready_outcome(&o).unwrap_err();
        assert_eq!(e.code(), "ExitedBeforeReady");
        assert_eq!(
            e.to_string(),
            "sandboxprocess p ended before it was ready: \
             ExitedBeforeReady: exited with code 0 before it was ever ready"
        );
        for reason in ["Succeeded", "Stopped"] {
            let o = with_readiness(serde_json::json!({"phase": "Exited", "exit": {"code": 0},
                "conditions": ready_cond("True", reason, "exited with code 0")}));
            assert!(!is_ready(&o), "{reason}");
            let e = ready_outcome(&o).unwrap_err();
            assert!(e.to_string().ends_with("readiness never passed"), "{e}");
        }
        let o = with_readiness(serde_json::json!({"phase": "Error", "podUID": "u",
            "error": {"code": "StaleProcessHandle", "message": "pod w was deleted"},
            "conditions": ready_cond("False", "StaleProcessHandle", "pod w was deleted")}));
        assert_eq!(ready_outcome(&o).unwrap_err().code(), "StaleProcessHandle");
        let running = with_readiness(serde_json::json!({"phase": "Running",
            "readyAt": "2026-01-01T00:00:01Z", "conditions": ready_cond("True", "Ready", "")}));
        assert!(ready_outcome(&running).is_ok());
        for reason in ["Succeeded", "Stopped"] {
            let o = with_readiness(serde_json::json!({"phase": "Exited", "exit": {"code": 0},
                "readyAt": "2026-01-01T00:00:01Z", "conditions": ready_cond("True", reason, "")}));
            assert!(ready_outcome(&o).is_ok(), "{reason}");
        }
        let o = object(serde_json::json!({"phase": "Exited", "exit": {"code": 0},
            "conditions": ready_cond("True", "Succeeded", "exited with code 0")}));
        assert!(ready_outcome(&o).is_ok());
        let o = with_readiness(serde_json::json!({"phase": "Running",
            "conditions": ready_cond("False", "ReadinessPending", "")}));
        assert!(!is_ready(&o) && !is_final(&o));
    }
}
