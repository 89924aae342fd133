//! The commands, on the client library: run, kill, ls, wait, attach.
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use sandbox_client::{
    AttachEvent, AttachInput, AttachOptions, Door, Exit, Killed, LastExitStatus, Object, Process,
    Sandbox, Start,
};
use serde::Serialize;

use crate::error::{flag, CliError};
use crate::logs;

/// `sandboxprocess.sandbox.dev/NAME` or `process.processes.sandbox.dev/NAME`: what kubectl prints.
fn kind_name(door: Door, name: &str) -> String {
    match door {
        Door::SandboxProcess => format!("sandboxprocess.sandbox.dev/{name}"),
        Door::Process => format!("process.processes.sandbox.dev/{name}"),
    }
}

/// `NAME=VALUE` (the value may contain `=` and be empty).
pub fn parse_pair(kv: &str, what: &str) -> Result<(String, String), CliError> {
    match kv.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.into(), value.into())),
        _ => Err(CliError::Usage(format!("{what}: {kv:?} is not NAME=VALUE"))),
    }
}

pub fn print_object<T: Serialize>(o: &T, format: &str) -> Result<(), CliError> {
    let text = match format {
        "yaml" => serde_yaml_ng::to_string(o).map_err(|e| CliError::Failed(e.to_string()))?,
        _ => serde_json::to_string_pretty(o).map_err(|e| CliError::Failed(e.to_string()))? + "\n",
    };
    print!("{text}");
    Ok(())
}

/// The process's exit code as ours (0–255), or the failure that phase `Error` means.
fn exit_status(exit: Exit) -> u8 {
    exit.code.clamp(0, 255) as u8
}

pub struct Run {
    pub start: Start,
    pub wait: bool,
    pub stdin: bool,
    /// `-t`: this terminal joined to the process's, with these detach keys.
    pub tty: Option<crate::terminal::DetachKeys>,
    pub rm: bool,
    pub output: Option<String>,
    pub dry_run: bool,
    /// `exec`: Ctrl-C (SIGINT to us) is sent to the process as SIGINT, as a terminal would.
    pub interrupt: bool,
}

/// The door and name a command's NAME means: `process/NAME` (or `proc/`, `processes/`, the full
/// `process.processes.sandbox.dev/`) a Process; `sandboxprocess/NAME` (`sbp/`, ...) a
/// SandboxProcess; a bare NAME the SandboxProcess, or else the Process of that name.
pub async fn resolve(sb: &Sandbox, arg: &str) -> Result<(Sandbox, String), CliError> {
    const PROCESS: [&str; 4] = [
        "process",
        "proc",
        "processes",
        "process.processes.sandbox.dev",
    ];
    const SANDBOX: [&str; 4] = [
        "sandboxprocess",
        "sbp",
        "sandboxprocesses",
        "sandboxprocess.sandbox.dev",
    ];
    if let Some((kind, name)) = arg.split_once('/') {
        let door = if PROCESS.contains(&kind) {
            Door::Process
        } else if SANDBOX.contains(&kind) {
            Door::SandboxProcess
        } else {
            return Err(CliError::Usage(format!(
                "NAME: {kind:?} is not a kind here: NAME, process/NAME or sandboxprocess/NAME"
            )));
        };
        return Ok((sb.clone().with_door(door), name.to_string()));
    }
    let sbp = sb.clone().with_door(Door::SandboxProcess);
    let not_here = |e: &sandbox_client::Error| {
        matches!(
            e,
            sandbox_client::Error::Api {
                code: 403 | 404,
                ..
            }
        )
    };
    match sbp.get(arg).await {
        Ok(Some(_)) => return Ok((sbp, arg.to_string())),
        Ok(None) => {}
        // May not read SandboxProcesses here (a tenant of Processes only): look for a Process.
        Err(e) if not_here(&e) => {}
        Err(e) => return Err(e.into()),
    }
    let proc = sb.clone().with_door(Door::Process);
    match proc.get(arg).await {
        Ok(Some(_)) => Ok((proc, arg.to_string())),
        // Neither: the SandboxProcess's answer (not found) is what the command reports.
        Ok(None) => Ok((sbp, arg.to_string())),
        Err(e) if not_here(&e) => Ok((sbp, arg.to_string())),
        Err(e) => Err(e.into()),
    }
}

pub async fn run(sb: &Sandbox, r: Run) -> Result<u8, CliError> {
    if r.dry_run {
        let name = r.start.name().map_err(CliError::Client)?;
        let m = r
            .start
            .manifest(sb.namespace(), &name)
            .map_err(|e| flag(e, "run"))?;
        match r.output.as_deref() {
            Some(f) => print_object(&m, f)?,
            None => println!("{} created (dry run)", kind_name(sb.door(), &name)),
        }
        return Ok(0);
    }
    // A start by name is idempotent (the same spec is the same process): say so when it was
    // there already, rather than "created" twice for one process.
    let existed = match r.start.given_id() {
        Some(id) => sb.process(id).object().await.is_ok(),
        None => false,
    };
    let p = sb.start(r.start).await.map_err(|e| flag(e, "run"))?;
    if r.interrupt {
        // What reaches it later: kubectl sandbox logs|attach|kill|wait process/NAME.
        eprintln!("process/{}", p.name());
    }
    if !r.wait {
        match r.output.as_deref() {
            Some(f) => print_object(&p.object().await?, f)?,
            None if existed => println!(
                "{} already exists with this spec: the same process, not started again",
                kind_name(p.door(), p.name())
            ),
            None => println!("{} created", kind_name(p.door(), p.name())),
        }
        return Ok(0);
    }
    let outcome = if let Some(keys) = r.tty {
        match terminal_to(&p, keys, None).await {
            // Detached: it runs on, so it stays (--rm or not) for the attach we suggested.
            Ok(None) => return Ok(0),
            Ok(Some(code)) => Ok(code),
            Err(e) => Err(e),
        }
    } else {
        let forward = r
            .interrupt
            .then(|| tokio::spawn(forward_interrupts(p.clone())));
        let code = if r.stdin {
            attach_to(&p, true).await
        } else {
            follow_to_exit(&p).await
        };
        if let Some(f) = forward {
            f.abort();
        }
        code
    };
    if r.rm {
        // Like `kubectl run --rm`: gone once we are done with it, however that went.
        if let Err(e) = p.delete().await {
            eprintln!(
                "kubectl-sandbox: deleting {}: {e}",
                kind_name(p.door(), p.name())
            );
        }
    }
    outcome
}

/// Each Ctrl-C (SIGINT to us) sent on to the process as SIGINT, while its output streams: the
/// process decides what an interrupt means, as on a terminal. A third within a second leaves
/// (the process may ignore SIGINT; it runs on, reachable by its name).
async fn forward_interrupts(p: Process) {
    let mut recent: Vec<std::time::Instant> = vec![];
    while tokio::signal::ctrl_c().await.is_ok() {
        let now = std::time::Instant::now();
        recent.retain(|t| now.duration_since(*t) < Duration::from_secs(1));
        recent.push(now);
        if recent.len() >= 3 {
            eprintln!("kubectl-sandbox: left process/{} running", p.name());
            std::process::exit(130);
        }
        if let Err(e) = p.signal(2).await {
            eprintln!("kubectl-sandbox: sending SIGINT: {e}");
        }
    }
}

/// Waits for the start (for ever, as `kubectl wait` does without a timeout), saying on stderr
/// why it waits whenever that changes (a missing pod, a pending one, no agent): not 15 s of
/// silence for a pod name mistyped. A start under way (`Starting`) is not remarked on: the
/// process's own stderr stays alone on ours.
async fn wait_started_saying(p: &Process) -> Result<(), CliError> {
    let mut told = String::new();
    loop {
        match p.wait_started(Some(STARTED_SAY_AFTER)).await {
            Ok(()) => return Ok(()),
            Err(sandbox_client::Error::NotStarted { state, reason, .. }) => {
                let starting = reason.as_deref().is_none_or(|r| r == "Starting");
                if !starting && state != told {
                    eprintln!(
                        "kubectl-sandbox: {} waits to start: {state}",
                        kind_name(p.door(), p.name())
                    );
                    told = state;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// How long a start is waited for before the plugin says why it waits.
const STARTED_SAY_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// Streams the output until the process ends; its exit code.
async fn follow_to_exit(p: &Process) -> Result<u8, CliError> {
    wait_started_saying(p).await?;
    let opts = logs::Options {
        follow: true,
        split: true,
        ..Default::default()
    };
    logs::print(p, &opts).await?;
    Ok(exit_status(p.wait(None).await?))
}

/// `attach -t`: this terminal joined to a `tty` process's, from its current screen (or its
/// output after `after`, replayed).
pub struct AttachTty {
    pub keys: crate::terminal::DetachKeys,
    pub after: Option<String>,
}

/// Our stdin to the process's (closed at our EOF) while its output streams; its exit code. With
/// `tty`, a terminal session instead (0 when the user detaches).
pub async fn attach(
    sb: &Sandbox,
    name: &str,
    tty: Option<AttachTty>,
    stream: bool,
) -> Result<u8, CliError> {
    let p = sb.process(name);
    // An ended process has no stdin to take ours: say how it ended rather than replay it.
    if let Some(how) = sandbox_client::already_ended(&p.object().await?) {
        return Err(CliError::Failed(format!(
            "{} has {how}: there is no process to attach to (its output: kubectl sandbox logs {name})",
            kind_name(sb.door(), name)
        )));
    }
    match tty {
        Some(t) => Ok(terminal_to(&p, t.keys, t.after).await?.unwrap_or(0)),
        None => attach_to(&p, stream).await,
    }
}

/// A terminal session with `p`: its exit status, or None when the user detached (told how to
/// come back).
async fn terminal_to(
    p: &Process,
    keys: crate::terminal::DetachKeys,
    after: Option<String>,
) -> Result<Option<u8>, CliError> {
    wait_started_saying(p).await?;
    if !p.object().await?.spec.tty {
        return Err(CliError::Usage(format!(
            "{} has no terminal (spec.tty: true, or `run -it`): attach without -t",
            kind_name(p.door(), p.name())
        )));
    }
    match crate::terminal::session(p, keys, after).await? {
        crate::terminal::Ended::Exited(code) => Ok(Some(code)),
        crate::terminal::Ended::Detached => {
            eprintln!(
                "\r\nkubectl-sandbox: detached from {}, which runs on; attach again with: kubectl sandbox -n {} attach -it {}",
                kind_name(p.door(), p.name()),
                p.namespace(),
                p.name()
            );
            Ok(None)
        }
    }
}

async fn attach_to(p: &Process, stream: bool) -> Result<u8, CliError> {
    wait_started_saying(p).await?;
    let spec = p.object().await?.spec;
    // A terminal's input is stdin too (`tty` implies it): a pipe may type into it.
    if !spec.stdin && !spec.tty {
        return Err(CliError::Usage(format!(
            "{} was created without stdin (spec.stdin: true, or `run -i`)",
            kind_name(p.door(), p.name())
        )));
    }
    let who = kind_name(p.door(), p.name());
    let target = p.clone().on_stdin_stall(STDIN_STALL, move |s| {
        eprintln!(
            "kubectl-sandbox: {who} is not reading its stdin ({} bytes pending for {} s); still waiting",
            s.pending,
            s.waited.as_secs()
        )
    });
    if stream {
        streamed(p, target).await
    } else {
        by_requests(target).await
    }
}

/// One streaming attach (docs/guides/stdin.md) carries our stdin in and the output out; it attaches
/// again by itself when a connection breaks, losing and repeating nothing.
async fn streamed(p: &Process, target: Process) -> Result<u8, CliError> {
    let opts = AttachOptions {
        stdin: true,
        ..Default::default()
    };
    let (input, mut output) = target.attach(opts).await?;
    let mut pump = Some(tokio::spawn(pump(input)));
    loop {
        tokio::select! {
            ev = output.next() => match ev {
                Some(Ok(AttachEvent::Stdout(d))) => write_all(&mut std::io::stdout(), &d)?,
                Some(Ok(AttachEvent::Stderr(d))) => write_all(&mut std::io::stderr(), &d)?,
                // The process may end before it read all we had: its choice, as with a pipe.
                Some(Ok(AttachEvent::Exit(code))) => return Ok(code.clamp(0, 255) as u8),
                Some(Err(e)) => return Err(e.into()),
                None => return Ok(exit_status(p.wait(None).await?)),
            },
            sent = async { pump.as_mut().expect("guarded").await }, if pump.is_some() => {
                pump = None;
                match sent {
                    Ok(Ok(())) => {} // all sent, stdin closed: the output goes on
                    Ok(Err(e)) => return Err(e.into()),
                    Err(e) => return Err(CliError::Failed(format!("sending stdin: {e}"))),
                }
            }
        }
    }
}

/// `--no-stream`, for a path that does not pass WebSocket upgrades: stdin as offset POSTs,
/// the output by the log follow (each a plain request, resumed the same way).
async fn by_requests(target: Process) -> Result<u8, CliError> {
    let p = target.clone();
    let mut input = Some(tokio::spawn(async move {
        target.pump_stdin(tokio::io::stdin()).await
    }));
    let follow = follow_to_exit(&p);
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
                    Ok(Err(e)) if e.to_string().contains("StdinUnavailable") => {}
                    Ok(Err(e)) => return Err(e.into()),
                    Err(e) => return Err(CliError::Failed(format!("sending stdin: {e}"))),
                }
            }
        }
    }
}

fn write_all(w: &mut impl std::io::Write, data: &[u8]) -> Result<(), CliError> {
    w.write_all(data)?;
    w.flush()?;
    Ok(())
}

/// Our stdin into the attach, closed at our EOF.
async fn pump(mut input: AttachInput) -> Result<(), sandbox_client::Error> {
    use tokio::io::AsyncReadExt;
    let mut stdin = tokio::io::stdin();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = stdin
            .read(&mut buf)
            .await
            .map_err(|e| sandbox_client::Error::Transport(format!("reading stdin: {e}")))?;
        if n == 0 {
            // Dropping the input half after this leaves the output reading on to the exit.
            return input.close_stdin().await;
        }
        input.send(&buf[..n]).await?;
    }
}

/// How long stdin may take nothing before the user is told (the writer keeps waiting).
const STDIN_STALL: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitFor {
    Exit,
    Ready,
}

pub async fn wait(
    sb: &Sandbox,
    name: &str,
    what: WaitFor,
    timeout: Option<Duration>,
    output: Option<&str>,
) -> Result<u8, CliError> {
    let p = sb.process(name);
    match what {
        // Phase Error is a failure of the wait too (exit 125, with the reason).
        WaitFor::Exit => {
            p.wait(timeout).await?;
        }
        WaitFor::Ready => p.wait_ready(timeout).await?,
    }
    match output {
        Some(f) => print_object(&p.object().await?, f)?,
        None => println!("{} condition met", kind_name(sb.door(), name)),
    }
    Ok(0)
}

/// Stops the process or sends one signal; an ended process is left as it is, and reported.
pub async fn kill(
    sb: &Sandbox,
    name: &str,
    signal: Option<i32>,
    output: Option<&str>,
) -> Result<(), CliError> {
    let p = sb.process(name);
    let done = p.kill(signal).await?;
    if let Some(f) = output {
        return print_object(&p.object().await?, f);
    }
    match done {
        Killed::AlreadyEnded(said) => {
            println!("{} {said}; nothing sent", kind_name(sb.door(), name))
        }
        Killed::Stopping {
            signal,
            grace_seconds,
        } => println!(
            "{} stopping (signal {signal}, SIGKILL after {grace_seconds}s)",
            kind_name(sb.door(), name)
        ),
        Killed::Signalled(sig) => println!("{}: signal {sig} sent", kind_name(sb.door(), name)),
    }
    Ok(())
}

fn age(o: &Object) -> String {
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

/// The command line as a shell would show it, cut to `max` characters.
fn command_line(argv: &[String], max: usize) -> String {
    let quoted: Vec<String> = argv
        .iter()
        .map(|a| {
            if !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect();
    let s = quoted.join(" ");
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// The condition reason of a process waiting out a restart's back-off.
const BACK_OFF: &str = "BackOff";

/// `status.lastExit` in a cell: its code and end reason (`3/Exited`, `137/Signaled`).
fn last_exit(l: &LastExitStatus) -> String {
    format!("{}/{}", l.exit.code, l.end_reason)
}

/// The object as its server serves it: a Process keeps its own apiVersion and kind.
fn as_served(door: Door, o: &Object) -> serde_json::Value {
    let mut v = serde_json::to_value(o).unwrap_or_default();
    if door == Door::Process {
        v["apiVersion"] = "processes.sandbox.dev/v1alpha1".into();
        v["kind"] = "Process".into();
    }
    v
}

/// The kind column's word for a door.
fn kind_word(door: Door) -> &'static str {
    match door {
        Door::SandboxProcess => "SandboxProcess",
        Door::Process => "Process",
    }
}

pub fn table(items: &[(Door, Object)], with_namespace: bool, wide: bool) -> String {
    let mut rows = vec![];
    let mut head = vec![
        "NAME", "POD", "PHASE", "READY", "RESTARTS", "EXIT", "REASON", "AGE", "KIND",
    ];
    if wide {
        head.extend(["NODE", "CONTAINER", "PID", "LAST-EXIT", "COMMAND"]);
    }
    if with_namespace {
        head.insert(0, "NAMESPACE");
    }
    rows.push(head.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    for (door, o) in items {
        let s = o.status.clone().unwrap_or_default();
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready");
        let mut row = vec![
            o.name_any(),
            s.pod_name
                .clone()
                .unwrap_or_else(|| o.spec.pod_name.clone()),
            s.phase.map(|p| p.to_string()).unwrap_or_default(),
            ready.map(|c| c.status.clone()).unwrap_or_default(),
            s.restart_count.to_string(),
            s.exit
                .as_ref()
                .map(|e| e.code.to_string())
                .unwrap_or_default(),
            s.end_reason
                .map(|r| r.to_string())
                .or_else(|| s.error.as_ref().map(|e| e.code.as_str().to_string()))
                // A restart waiting out its back-off (as a pod's CrashLoopBackOff).
                .or_else(|| {
                    ready
                        .filter(|c| c.reason == BACK_OFF)
                        .map(|c| c.reason.clone())
                })
                .unwrap_or_default(),
            age(o),
            kind_word(*door).to_string(),
        ];
        if wide {
            let none = || "<none>".to_string();
            row.push(s.node_name.clone().unwrap_or_else(none));
            // The container it ran in; before the start, the one asked for, if any.
            row.push(
                s.container_name
                    .clone()
                    .or_else(|| o.spec.container.clone().filter(|c| !c.is_empty()))
                    .unwrap_or_else(|| "<default>".into()),
            );
            row.push(s.pid.map(|p| p.to_string()).unwrap_or_else(none));
            row.push(s.last_exit.as_ref().map_or_else(none, |l| last_exit(l)));
            row.push(command_line(&o.spec.command, 60));
        }
        if with_namespace {
            row.insert(0, o.namespace().unwrap_or_default());
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
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

/// Both kinds, SandboxProcesses and Processes, in one table (a KIND column) or list.
pub async fn list(
    sb: &Sandbox,
    all_namespaces: bool,
    selector: Option<&str>,
    output: Option<&str>,
) -> Result<(), CliError> {
    let mut items: Vec<(Door, Object)> = vec![];
    for door in [Door::SandboxProcess, Door::Process] {
        let sb = sb.clone().with_door(door);
        let got = if all_namespaces {
            sb.list_all_namespaces(selector).await
        } else {
            sb.list(selector).await
        };
        match got {
            Ok(v) => items.extend(v.into_iter().map(|o| (door, o))),
            // A cluster that does not serve processes (the subresource API off).
            Err(sandbox_client::Error::Api { code: 404, .. }) if door == Door::Process => {}
            Err(e) if door == Door::Process => {
                eprintln!("kubectl-sandbox: processes not listed: {e}")
            }
            Err(e) => return Err(e.into()),
        }
    }
    items.sort_by_key(|(d, o)| (o.namespace(), o.name_any(), *d == Door::Process));
    let list = || {
        let items: Vec<serde_json::Value> = items.iter().map(|(d, o)| as_served(*d, o)).collect();
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items,
                           "metadata": {"resourceVersion": ""}})
    };
    match output {
        Some("name") => {
            for (d, o) in &items {
                println!("{}", kind_name(*d, &o.name_any()));
            }
        }
        Some(f) if f.starts_with("jsonpath=") => {
            let text = crate::jsonpath::render(&f["jsonpath=".len()..], &list())?;
            print!("{text}");
        }
        Some(f @ ("json" | "yaml")) => print_object(&list(), f)?,
        _ if items.is_empty() => {
            if all_namespaces {
                eprintln!("No resources found");
            } else {
                eprintln!("No resources found in {} namespace.", sb.namespace());
            }
        }
        Some("wide") => print!("{}", table(&items, all_namespaces, true)),
        _ => print!("{}", table(&items, all_namespaces, false)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs() {
        let (n, v) = parse_pair("A=b=c", "--env").unwrap();
        assert_eq!((n.as_str(), v.as_str()), ("A", "b=c"));
        assert_eq!(parse_pair("EMPTY=", "--env").unwrap().1, "");
        for bad in ["novalue", "=x", ""] {
            let err = parse_pair(bad, "--env").unwrap_err().to_string();
            assert!(err.starts_with("--env"), "{err}");
        }
    }

    #[test]
    fn table_columns() {
        let o: Object = serde_json::from_value(serde_json::json!({
            "apiVersion": "sandbox.dev/v1alpha1", "kind": "SandboxProcess",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"podName": "web", "command": ["sh", "-c", "echo hi"]},
            "status": {"phase": "Exited", "exit": {"code": 3}, "endReason": "Exited", "nodeName": "n1",
                       "conditions": [{"type": "Ready", "status": "False", "reason": "Exited",
                                       "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        let t = table(&[(Door::SandboxProcess, o.clone())], true, false);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("NAMESPACE   NAME"), "{t}");
        let cols: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            &cols[..8],
            ["ns", "p", "web", "Exited", "False", "0", "3", "Exited"]
        );
        assert_eq!(cols.last(), Some(&"SandboxProcess"), "{t}");
        let t = table(&[(Door::Process, o.clone())], false, false);
        assert!(t.lines().nth(1).unwrap().ends_with(" Process"), "{t}");
        let t = table(&[(Door::SandboxProcess, o.clone())], false, true);
        assert!(
            t.lines()
                .next()
                .unwrap()
                .ends_with("NODE   CONTAINER   PID      LAST-EXIT   COMMAND"),
            "{t}"
        );
        assert!(
            t.lines()
                .nth(1)
                .unwrap()
                .ends_with("n1     <default>   <none>   <none>      sh -c 'echo hi'"),
            "{t}"
        );
        // Once started, the container it ran in, also when the spec left it to the pod.
        let mut o = o;
        o.status.get_or_insert_with(Default::default).container_name = Some("main".into());
        let t = table(&[(Door::SandboxProcess, o)], false, true);
        assert!(
            t.lines()
                .nth(1)
                .unwrap()
                .contains(" n1     main        <none> "),
            "{t}"
        );
    }

    #[test]
    fn restarts_and_the_last_exit() {
        let o: Object = serde_json::from_value(serde_json::json!({
            "apiVersion": "sandbox.dev/v1alpha1", "kind": "SandboxProcess",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"podName": "web", "command": ["false"], "restartPolicy": "OnFailure"},
            "status": {"phase": "Running", "restartCount": 4, "nodeName": "n1",
                       "lastExit": {"exit": {"code": 3}, "endReason": "Exited",
                                    "finishedAt": "2026-01-01T00:00:00Z"},
                       "conditions": [{"type": "Ready", "status": "False", "reason": "BackOff",
                                       "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        let t = table(&[(Door::SandboxProcess, o)], false, true);
        let cols: Vec<&str> = t.lines().nth(1).unwrap().split_whitespace().collect();
        // No exit of the current run: its column stays empty, the reason says why it waits.
        assert_eq!(
            &cols[..7],
            ["p", "web", "Running", "False", "4", "BackOff", "<unknown>"]
        );
        assert_eq!(cols[cols.len() - 2], "3/Exited", "{t}");
    }
}
