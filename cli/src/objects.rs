//! The SandboxProcess side of the commands: create, stop/signal, list, wait.
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Client, Resource, ResourceExt};
use sandbox_api::crd::{
    condition, EnvVar, Phase, ProcessError, SandboxProcess, SandboxProcessStatus,
};
use sandbox_api::wire::ProcessRecord;
use serde::Serialize;

use crate::error::CliError;
use crate::logs;

pub struct Ctx {
    pub client: Client,
    pub namespace: String,
}

impl Ctx {
    fn api(&self) -> Api<SandboxProcess> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

pub struct RunSpec {
    /// spec.stdin: a pipe kept open to the process's stdin.
    pub stdin: bool,
    pub pod: String,
    pub container: Option<String>,
    pub name: Option<String>,
    pub env: Vec<EnvVar>,
    pub workdir: Option<String>,
    pub timeout: Option<i64>,
    pub argv: Vec<String>,
}

/// `NAME=VALUE` (the value may contain `=` and be empty).
pub fn parse_env(kv: &str) -> Result<EnvVar, CliError> {
    match kv.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok(EnvVar {
            name: name.into(),
            value: value.into(),
            value_from: None,
        }),
        _ => Err(CliError::Usage(format!("--env: {kv:?} is not NAME=VALUE"))),
    }
}

fn kind_name(name: &str) -> String {
    format!("sandboxprocess.sandbox.dev/{name}")
}

fn status(o: &SandboxProcess) -> SandboxProcessStatus {
    o.status.clone().unwrap_or_default()
}

fn is_final(o: &SandboxProcess) -> bool {
    matches!(status(o).phase, Some(Phase::Exited | Phase::Error))
}

/// `Ready=True`; for a process with `readiness` that has ended, only if it was ever ready
/// (`readyAt`): an operator from before `ExitedBeforeReady` wrote `Ready=True` for such a process
/// when it exited with code 0 or was stopped, and a final status is never rewritten.
fn is_ready(o: &SandboxProcess) -> bool {
    let s = status(o);
    let said = s
        .condition(condition::READY)
        .is_some_and(|c| c.status == "True");
    let ended_never_ready = o.spec.readiness.is_some() && s.ready_at.is_none() && is_final(o);
    said && !ended_never_ready
}

/// What `wait --for ready` says of the object that ended its wait: nothing when it is ready;
/// else phase `Error` is [`CliError::Process`] (exit 125), and an exit before it was ever ready
/// (`Ready=False ExitedBeforeReady`, whatever the exit code) fails naming the Ready condition's
/// reason and message (exit 1).
fn ready_outcome(o: &SandboxProcess) -> Result<(), CliError> {
    if is_ready(o) {
        return Ok(());
    }
    let s = status(o);
    if let (Some(Phase::Error), Some(error)) = (s.phase, s.error.clone()) {
        return Err(CliError::Process {
            name: o.name_any(),
            error,
        });
    }
    let why = match s.condition(condition::READY) {
        Some(c) if c.status != "True" && !c.reason.is_empty() => {
            format!("{}: {}", c.reason, c.message)
        }
        _ => "readiness never passed".to_string(),
    };
    Err(CliError::Api(format!(
        "{} ended without becoming ready ({why})",
        kind_name(&o.name_any())
    )))
}

fn print_object<T: Serialize>(o: &T, format: &str) -> Result<(), CliError> {
    let text = match format {
        "yaml" => serde_yaml_ng::to_string(o).map_err(|e| CliError::Api(e.to_string()))?,
        _ => serde_json::to_string_pretty(o).map_err(|e| CliError::Api(e.to_string()))? + "\n",
    };
    print!("{text}");
    Ok(())
}

/// Waits (forever when `timeout` is `None`) for `cond` on the named object.
async fn until(
    ctx: &Ctx,
    name: &str,
    timeout: Option<Duration>,
    what: &str,
    cond: impl Fn(&SandboxProcess) -> bool,
) -> Result<SandboxProcess, CliError> {
    let fut = await_condition(ctx.api(), name, move |o: Option<&SandboxProcess>| {
        // A deleted object also ends the wait; reported below.
        o.is_none_or(&cond)
    });
    let got = match timeout {
        Some(t) => tokio::time::timeout(t, fut).await.map_err(|_| {
            CliError::Timeout(format!(
                "timed out after {}s waiting for {} to {what}",
                t.as_secs(),
                kind_name(name)
            ))
        })?,
        None => fut.await,
    }
    .map_err(|e| CliError::Api(format!("watching {}: {e}", kind_name(name))))?;
    got.ok_or_else(|| CliError::Api(format!("{} was deleted", kind_name(name))))
}

/// The exit status `run --wait` and `wait --for exit` report for a final object.
fn exit_code(o: &SandboxProcess) -> Result<u8, CliError> {
    let s = status(o);
    match (s.phase, s.exit, s.error) {
        (Some(Phase::Exited), Some(exit), _) => Ok(exit.code.clamp(0, 255) as u8),
        (_, _, Some(error)) => Err(CliError::Process {
            name: o.name_any(),
            error,
        }),
        _ => Err(CliError::Api(format!(
            "{} ended without an exit status",
            kind_name(&o.name_any())
        ))),
    }
}

pub async fn run(
    ctx: &Ctx,
    spec: RunSpec,
    wait: bool,
    output: Option<&str>,
) -> Result<u8, CliError> {
    let mut meta = serde_json::json!({"namespace": ctx.namespace});
    match &spec.name {
        Some(n) => meta["name"] = n.clone().into(),
        None => meta["generateName"] = format!("{}-", spec.pod).into(),
    }
    let mut s = serde_json::json!({"podName": spec.pod, "command": spec.argv});
    if let Some(c) = &spec.container {
        s["container"] = c.clone().into();
    }
    if let Some(d) = &spec.workdir {
        s["workingDir"] = d.clone().into();
    }
    if let Some(t) = spec.timeout {
        s["timeoutSeconds"] = t.into();
    }
    if !spec.env.is_empty() {
        s["env"] = serde_json::to_value(&spec.env).expect("env serializes");
    }
    if spec.stdin {
        s["stdin"] = true.into();
    }
    // Through serde so the spec's defaults (stopSignal, grace period) apply.
    let obj: SandboxProcess = serde_json::from_value(serde_json::json!({
        "apiVersion": SandboxProcess::api_version(&()),
        "kind": SandboxProcess::kind(&()),
        "metadata": meta,
        "spec": s,
    }))
    .map_err(|e| CliError::Usage(e.to_string()))?;
    let created = ctx.api().create(&PostParams::default(), &obj).await?;
    let name = created.name_any();
    if !wait {
        match output {
            Some(f) => print_object(&created, f)?,
            None => println!("{} created", kind_name(&name)),
        }
        return Ok(0);
    }
    if spec.stdin {
        return attach(ctx, &name).await;
    }
    wait_started(ctx, &name).await?;
    follow_to_exit(ctx, &name).await
}

/// Streams the output until the process ends; its exit code.
async fn follow_to_exit(ctx: &Ctx, name: &str) -> Result<u8, CliError> {
    let opts = logs::Options {
        follow: true,
        stream: "both".into(),
        split: true,
        ..Default::default()
    };
    if let Err(e) = logs::print(&ctx.client, &ctx.namespace, name, &opts).await {
        return Err(explain_log_failure(ctx, name, e).await);
    }
    let done = until(ctx, name, None, "end", is_final).await?;
    exit_code(&done)
}

/// Our stdin to the process's (closed at our EOF) while its output streams; its exit code.
pub async fn attach(ctx: &Ctx, name: &str) -> Result<u8, CliError> {
    wait_started(ctx, name).await?;
    let o = ctx.api().get(name).await?;
    if !o.spec.stdin {
        return Err(CliError::Usage(format!(
            "{} was created without stdin (spec.stdin: true, or `run -i`)",
            kind_name(name)
        )));
    }
    let (client, namespace) = (ctx.client.clone(), ctx.namespace.clone());
    let target = name.to_string();
    let mut input = Some(tokio::spawn(async move {
        crate::stdin::pump(&client, &namespace, &target, tokio::io::stdin()).await
    }));
    let follow = follow_to_exit(ctx, name);
    tokio::pin!(follow);
    loop {
        tokio::select! {
            code = &mut follow => {
                // The process may end before it read all we had: its choice, as with a pipe.
                if let Some(i) = input.take() {
                    i.abort();
                }
                return code;
            }
            sent = async { input.as_mut().expect("guarded").await }, if input.is_some() => {
                input = None;
                match sent {
                    Ok(Ok(_)) => {} // all sent, stdin closed: the output goes on
                    // It ended, or closed its stdin, first: the output says how it went.
                    Ok(Err(CliError::Api(m))) if m.contains("StdinUnavailable") => {}
                    Ok(Err(e)) => return Err(e),
                    Err(e) => return Err(CliError::Api(format!("sending stdin: {e}"))),
                }
            }
        }
    }
}

/// Whether the operator has started the process (`status.podUID` is set then): only a started
/// process has output to read.
fn is_started(o: &SandboxProcess) -> bool {
    status(o).pod_uid.is_some()
}

/// The error of a process that ended without ever being started (`ContainerNotFound`,
/// `ProcessSpawnFailed`, `InvalidProcessCwd`, ...): there is no output, only `status.error`.
pub fn never_started(o: &SandboxProcess) -> Option<ProcessError> {
    let s = status(o);
    if s.pod_uid.is_some() || s.phase != Some(Phase::Error) {
        return None;
    }
    s.error
}

/// Waits until the process was started (so it has output to read); a process that could not
/// start is [`CliError::Process`] with its `status.error` (exit 125).
pub async fn wait_started(ctx: &Ctx, name: &str) -> Result<(), CliError> {
    let o = until(ctx, name, None, "start", |o| is_started(o) || is_final(o)).await?;
    match never_started(&o) {
        Some(error) => Err(CliError::Process {
            name: o.name_any(),
            error,
        }),
        None => Ok(()),
    }
}

/// A failed read of the output, explained by the object when the process never started: its
/// `status.error` rather than the subresource's "no process" (exit 125 for `run --wait`).
pub async fn explain_log_failure(ctx: &Ctx, name: &str, e: CliError) -> CliError {
    if !matches!(e, CliError::Api(_) | CliError::StreamBroken(_)) {
        return e;
    }
    match ctx.api().get_opt(name).await {
        Ok(Some(o)) => match never_started(&o) {
            Some(error) => CliError::Process {
                name: o.name_any(),
                error,
            },
            None => e,
        },
        _ => e,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitFor {
    Exit,
    Ready,
}

pub async fn wait(
    ctx: &Ctx,
    name: &str,
    what: WaitFor,
    timeout_secs: u64,
    output: Option<&str>,
) -> Result<u8, CliError> {
    let timeout = (timeout_secs > 0).then(|| Duration::from_secs(timeout_secs));
    let o = match what {
        WaitFor::Exit => until(ctx, name, timeout, "exit", is_final).await?,
        WaitFor::Ready => {
            let o = until(ctx, name, timeout, "be ready", |o| {
                is_ready(o) || is_final(o)
            })
            .await?;
            ready_outcome(&o)?;
            o
        }
    };
    if what == WaitFor::Exit {
        // An Error phase is a failure of the wait too (exit 125, with the reason).
        if status(&o).phase == Some(Phase::Error) {
            exit_code(&o)?;
        }
    }
    match output {
        Some(f) => print_object(&o, f)?,
        None => println!("{} condition met", kind_name(name)),
    }
    Ok(0)
}

/// For a process that has already ended, what `kill` says instead of stopping or signalling it
/// (nothing is changed then): `already exited (code N)`, with the signal when it was killed.
pub fn already_ended(o: &SandboxProcess) -> Option<String> {
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

/// Stops the process (`spec.stop`) or sends one signal; a process that has already ended is left
/// as it is (no patch, no signal), reported with its exit, and that is a success.
pub async fn kill(
    ctx: &Ctx,
    name: &str,
    signal: Option<i32>,
    output: Option<&str>,
) -> Result<(), CliError> {
    let current = ctx.api().get(name).await?;
    if let Some(said) = already_ended(&current) {
        match output {
            Some(f) => print_object(&current, f)?,
            None => println!("{} {said}; nothing sent", kind_name(name)),
        }
        return Ok(());
    }
    let Some(sig) = signal else {
        let patch = serde_json::json!({"spec": {"stop": true}});
        let o = ctx
            .api()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        match output {
            Some(f) => print_object(&o, f)?,
            None => println!(
                "{} stopping (signal {}, SIGKILL after {}s)",
                kind_name(name),
                o.spec.stop_signal,
                o.spec.termination_grace_period_seconds
            ),
        }
        return Ok(());
    };
    let url = format!(
        "{}/namespaces/{}/sandboxprocesses/{}/signal",
        logs::PATH_PREFIX,
        ctx.namespace,
        name
    );
    let body = serde_json::to_vec(&serde_json::json!({"signal": sig})).expect("json");
    let req = http::Request::post(&url)
        .header("content-type", "application/json")
        .body(body)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let rec: ProcessRecord = ctx.client.request(req).await?;
    match output {
        Some(f) => print_object(&rec, f)?,
        None => println!("{}: signal {sig} sent", kind_name(name)),
    }
    Ok(())
}

fn age(o: &SandboxProcess) -> String {
    let Some(t) = o.metadata.creation_timestamp.as_ref() else {
        return "<unknown>".into();
    };
    let secs = Timestamp::now().duration_since(t.0).as_secs().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 * 2 => format!("{}m", s / 60),
        s if s < 86400 * 2 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

pub fn table(items: &[SandboxProcess], with_namespace: bool) -> String {
    let mut rows = vec![];
    let mut head = vec!["NAME", "POD", "PHASE", "READY", "EXIT", "REASON", "AGE"];
    if with_namespace {
        head.insert(0, "NAMESPACE");
    }
    rows.push(head.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    for o in items {
        let s = status(o);
        let ready = s
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status.clone());
        let mut row = vec![
            o.name_any(),
            s.pod_name
                .clone()
                .unwrap_or_else(|| o.spec.pod_name.clone()),
            s.phase.map(|p| p.to_string()).unwrap_or_default(),
            ready.unwrap_or_default(),
            s.exit.map(|e| e.code.to_string()).unwrap_or_default(),
            s.end_reason
                .map(|r| r.to_string())
                .or_else(|| s.error.map(|e| e.code.as_str().to_string()))
                .unwrap_or_default(),
            age(o),
        ];
        if with_namespace {
            row.insert(0, o.namespace().unwrap_or_default());
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

pub async fn list(
    ctx: &Ctx,
    all_namespaces: bool,
    selector: Option<&str>,
    output: Option<&str>,
) -> Result<(), CliError> {
    let api: Api<SandboxProcess> = if all_namespaces {
        Api::all(ctx.client.clone())
    } else {
        ctx.api()
    };
    let mut lp = ListParams::default();
    if let Some(s) = selector {
        lp = lp.labels(s);
    }
    let list = api.list(&lp).await?;
    match output {
        Some("name") => {
            for o in &list.items {
                println!("{}", kind_name(&o.name_any()));
            }
        }
        Some(f) => {
            let v = serde_json::json!({
                "apiVersion": "v1",
                "kind": "List",
                "items": list.items,
            });
            print_object(&v, f)?;
        }
        None if list.items.is_empty() => {
            if all_namespaces {
                eprintln!("No resources found");
            } else {
                eprintln!("No resources found in {} namespace.", ctx.namespace);
            }
        }
        None => print!("{}", table(&list.items, all_namespaces)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_pairs() {
        let e = parse_env("A=b=c").unwrap();
        assert_eq!((e.name.as_str(), e.value.as_str()), ("A", "b=c"));
        assert_eq!(parse_env("EMPTY=").unwrap().value, "");
        for bad in ["novalue", "=x", ""] {
            let err = parse_env(bad).unwrap_err().to_string();
            assert!(err.starts_with("--env"), "{err}");
        }
    }

    #[test]
    fn table_columns() {
        let o: SandboxProcess = serde_json::from_value(serde_json::json!({
            "apiVersion": "sandbox.dev/v1alpha1", "kind": "SandboxProcess",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"podName": "web", "command": ["true"]},
            "status": {"phase": "Exited", "exit": {"code": 3}, "endReason": "Exited",
                       "conditions": [{"type": "Ready", "status": "False", "reason": "Exited",
                                       "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        let t = table(&[o], true);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("NAMESPACE   NAME"), "{t}");
        let cols: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            &cols[..7],
            ["ns", "p", "web", "Exited", "False", "3", "Exited"]
        );
    }

    fn object(status: serde_json::Value) -> SandboxProcess {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "spec": {"podName": "w", "command": ["x"]},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_process_that_never_started_is_its_status_error() {
        // Refused by the agent: the node is known (from the pod), the process never started.
        let o = object(serde_json::json!({"phase": "Error", "nodeName": "n1",
            "error": {"code": "ProcessSpawnFailed", "message": "exec \"nope\": not found"}}));
        assert!(!is_started(&o));
        let error = never_started(&o).expect("never started");
        let e = CliError::Process {
            name: "p".into(),
            error: error.clone(),
        };
        assert_eq!(e.exit_code(), 125, "run --wait");
        assert_eq!(
            e.to_string(),
            "sandboxprocess p failed: ProcessSpawnFailed: exec \"nope\": not found"
        );
        let e = CliError::NoOutput {
            name: "p".into(),
            error,
        };
        assert_eq!(e.exit_code(), 1, "logs");
        assert!(
            e.to_string()
                .contains("could not start: ProcessSpawnFailed: exec"),
            "{e}"
        );
        for code in ["ContainerNotFound", "InvalidProcessCwd"] {
            let o = object(serde_json::json!({"phase": "Error",
                "error": {"code": code, "message": "m"}}));
            assert_eq!(never_started(&o).unwrap().code.as_str(), code);
        }
        // Started, then lost: its output may be readable; not a start failure.
        let lost = object(
            serde_json::json!({"phase": "Error", "nodeName": "n1", "podUID": "u",
            "error": {"code": "ProcessLost", "message": "gone"}}),
        );
        assert!(is_started(&lost) && never_started(&lost).is_none());
        // Pending on a scheduled pod: not started yet, and no error either.
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
    fn wait_for_ready_fails_for_a_process_that_ended_before_it_was_ever_ready() {
        // What the operator writes now: Ready=False ExitedBeforeReady, even for code 0.
        let o = with_readiness(serde_json::json!({"phase": "Exited", "exit": {"code": 0},
            "endReason": "Exited", "conditions": ready_cond("False", "ExitedBeforeReady",
                "exited with code 0 before it was ever ready")}));
        assert!(!is_ready(&o));
        let e = ready_outcome(&o).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert_eq!(
            e.to_string(),
            "sandboxprocess.sandbox.dev/p ended without becoming ready \
             (ExitedBeforeReady: exited with code 0 before it was ever ready)"
        );
        // What an older operator wrote for it (Ready=True Succeeded, no readyAt): not ready either.
        for reason in ["Succeeded", "Stopped"] {
            let o = with_readiness(serde_json::json!({"phase": "Exited", "exit": {"code": 0},
                "conditions": ready_cond("True", reason, "exited with code 0")}));
            assert!(!is_ready(&o), "{reason}");
            let e = ready_outcome(&o).unwrap_err();
            assert_eq!(e.exit_code(), 1);
            assert!(e.to_string().ends_with("(readiness never passed)"), "{e}");
        }
        // Phase Error: its error, exit 125.
        let o = with_readiness(serde_json::json!({"phase": "Error", "podUID": "u",
            "error": {"code": "StaleProcessHandle", "message": "pod w was deleted"},
            "conditions": ready_cond("False", "StaleProcessHandle", "pod w was deleted")}));
        assert_eq!(ready_outcome(&o).unwrap_err().exit_code(), 125);
    }

    #[test]
    fn wait_for_ready_passes_for_a_process_that_was_ready() {
        let running = with_readiness(serde_json::json!({"phase": "Running",
            "readyAt": "2026-01-01T00:00:01Z", "conditions": ready_cond("True", "Ready", "")}));
        assert!(is_ready(&running) && ready_outcome(&running).is_ok());
        // Ready, then ended with code 0 or stopped: Ready=True stays, as before.
        for reason in ["Succeeded", "Stopped"] {
            let o = with_readiness(serde_json::json!({"phase": "Exited", "exit": {"code": 0},
                "readyAt": "2026-01-01T00:00:01Z", "conditions": ready_cond("True", reason, "")}));
            assert!(ready_outcome(&o).is_ok(), "{reason}");
        }
        // No readiness declared: started = ready, an exit with code 0 is Ready=True.
        let o = object(serde_json::json!({"phase": "Exited", "exit": {"code": 0},
            "conditions": ready_cond("True", "Succeeded", "exited with code 0")}));
        assert!(ready_outcome(&o).is_ok());
        // Not ready yet, still running: the wait goes on (neither ready nor final).
        let o = with_readiness(serde_json::json!({"phase": "Running",
            "conditions": ready_cond("False", "ReadinessPending", "")}));
        assert!(!is_ready(&o) && !is_final(&o));
    }

    #[test]
    fn exit_codes() {
        let mk = |status: serde_json::Value| -> SandboxProcess {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"}, "spec": {"podName": "w", "command": ["x"]},
                "status": status,
            }))
            .unwrap()
        };
        assert_eq!(
            exit_code(&mk(
                serde_json::json!({"phase": "Exited", "exit": {"code": 137, "signal": 9}})
            ))
            .unwrap(),
            137
        );
        let e = exit_code(&mk(serde_json::json!({"phase": "Error",
            "error": {"code": "ContainerNotFound", "message": "no container x"}})))
        .unwrap_err();
        assert_eq!(e.exit_code(), 125);
        assert!(e.to_string().contains("ContainerNotFound"), "{e}");
    }
}
