//! `kubectl-sandbox`: a kubectl plugin for SandboxProcesses. Output comes through the operator's
//! subresource API (`sandboxprocesses/log` in `subresources.sandbox.dev`) via the API server, so
//! it works from anywhere a kubeconfig works, under the caller's RBAC.
//!
//! Built on `sandbox-client` (the process-handle library): this crate only parses flags and
//! prints.
//!
//! Exit status: `run --wait` (and `run -it`, `attach -it`, unless detached: 0) exits with the
//! process's exit code (128+signal when killed);
//! 127 when its executable was not found, 126 when it is not executable (like a shell); 125 when
//! the process could not run or was lost (phase Error); 1 for any other failure (API errors,
//! timeouts); 2 for bad usage.
mod complete;
mod connect;
mod duration;
mod error;
mod jsonpath;
mod logs;
mod objects;
mod terminal;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use sandbox_client::{Door, LogStream, RestartPolicy, Sandbox, SecurityContext, Start};

use connect::KubeFlags;
use error::{flag, CliError};

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-sandbox",
    bin_name = "kubectl sandbox",
    version,
    about = "Run and follow processes in pods through SandboxProcess objects",
    after_help = "Exit status of `run --wait`, `run -it` and `attach -it` (0 when detached): the process's exit code (128+n when killed by signal n); \
127 when its executable was not found, 126 when it is not executable; \
125 when it could not run or was lost (phase Error). Otherwise 0 on success, 1 on failure, 2 on bad usage.\n\
Flags go after the plugin's name: `kubectl sandbox -n NS ...` (kubectl passes none placed before it)."
)]
struct Cli {
    #[command(flatten)]
    kube: KubeFlags,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a SandboxProcess running ARGV in POD; with --wait, stream its output and exit
    /// with its exit code.
    Run(RunArgs),
    /// Run ARGV in POD as a Process served from the nodes (processes.sandbox.dev: no etcd
    /// write), with `kubectl exec`'s habits: the output streamed, our exit code its, Ctrl-C sent
    /// to it (with -t, typed to its terminal). Its name goes to stderr first (`process/NAME`)
    /// for logs, attach, kill or wait to reach it later; it is kept until its TTL after the end.
    Exec(RunArgs),
    /// Print a process's output: replay, follow until exit (-f), resume after a cursor (--after).
    Logs(LogsArgs),
    /// Stop a process (its stopSignal, SIGKILL after the grace period), or send one signal; an
    /// ended process is left alone ("already exited (code N)", exit 0).
    Kill(KillArgs),
    /// List SandboxProcesses.
    #[command(alias = "list")]
    Ls(LsArgs),
    /// Wait until a process has exited or is ready.
    Wait(WaitArgs),
    /// Send this terminal's stdin (or a pipe) to a process created with stdin (`run -i`,
    /// spec.stdin), streaming its output; EOF closes its stdin. Exits with its exit code.
    Attach(AttachArgs),
    /// Print a shell completion script for `kubectl-sandbox` itself: `source <(kubectl-sandbox
    /// completion bash)`. `kubectl sandbox <TAB>` completes through `kubectl_complete-sandbox`
    /// on PATH (shipped next to the plugin) instead.
    Completion(CompletionArgs),
}

#[derive(Args, Debug)]
struct CompletionArgs {
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// `--detach-keys`, for `run -it` and `attach -it`.
#[derive(Args, Debug)]
struct DetachArgs {
    /// With -t: the sequence that detaches (docker's syntax: ctrl-X or a character, comma-separated).
    #[arg(long, value_name = "KEYS", default_value = terminal::DEFAULT_DETACH_KEYS, value_parser = terminal::parse_detach_keys)]
    detach_keys: terminal::DetachKeys,
}

#[derive(Args, Debug)]
struct AttachArgs {
    name: String,
    /// Accepted for `attach -it` (attach always sends our stdin).
    #[arg(short = 'i', long)]
    stdin: bool,
    /// Join this terminal to the process's (created with -t, spec.tty): raw mode, window size
    /// changes sent, its current screen drawn first (as tmux attach: the history stays in
    /// `logs`); other attachers share it; the detach keys leave it running.
    #[arg(short = 't', long)]
    tty: bool,
    #[command(flatten)]
    detach: DetachArgs,
    /// With -t: replay its output from after this cursor rather than drawing its screen.
    #[arg(long, value_name = "CURSOR", requires = "tty")]
    after: Option<String>,
    /// Without -t: send stdin as offset-numbered requests and follow the output, instead of the
    /// streaming attach (a WebSocket), for a proxy in the path that does not pass upgrades.
    #[arg(long, conflicts_with = "tty")]
    no_stream: bool,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Target pod (same namespace).
    pod: String,
    /// Container in the pod (default: the pod's default container).
    #[arg(short = 'c', long)]
    container: Option<String>,
    /// Name of the SandboxProcess, its id: running again with the same name and arguments is
    /// the same process, never a second one (default: POD-<random>).
    #[arg(long)]
    name: Option<String>,
    /// Environment variable NAME=VALUE, overlaid on the container's (repeatable).
    #[arg(long = "env", short = 'e', value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Label KEY=VALUE on the object (repeatable).
    #[arg(long = "label", short = 'l', value_name = "KEY=VALUE")]
    labels: Vec<String>,
    /// Working directory (absolute).
    #[arg(long)]
    workdir: Option<String>,
    /// Stop the process after this long (30s, 5m, 1h; a bare number is seconds).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    timeout: Option<Duration>,
    /// Delete the object this long after the process ended (spec.ttlSecondsAfterFinished).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    ttl: Option<Duration>,
    /// Stream the output and exit with the process's exit code.
    #[arg(long)]
    wait: bool,
    /// Delete the object once the process has ended and its output was shown; implies --wait.
    #[arg(long)]
    rm: bool,
    /// Run the process as UID, with primary group GID (spec.securityContext runAsUser,
    /// runAsGroup); never more than the container's own user may: a root container may use any,
    /// a container running as a non-root uid only itself (else phase Error, UserNotPermitted).
    /// Not `--user`: that is kubectl's kubeconfig user, as everywhere in this plugin.
    #[arg(long = "run-as", value_name = "UID[:GID]", value_parser = parse_user)]
    run_as: Option<(u32, Option<u32>)>,
    /// Supplementary group GID of the process, instead of the container's (repeatable;
    /// spec.securityContext.supplementalGroups).
    #[arg(long = "group-add", value_name = "GID", value_parser = parse_id)]
    group_add: Vec<u32>,
    /// Refuse to start the process as root (spec.securityContext.runAsNonRoot), the container's
    /// own uid counting when --run-as is not given.
    #[arg(long)]
    non_root: bool,
    /// Run it again when it ends (spec.restartPolicy, kubectl run's flag): Never, OnFailure (after
    /// an exit other than code 0), Always; after a back-off of 10s doubling to 5m (phase Running,
    /// reason BackOff). `logs --previous` prints the previous run's output. Not with -i or -t.
    #[arg(long, value_name = "POLICY", value_parser = restart_policies())]
    restart: Option<RestartPolicy>,
    /// Keep stdin open to the process and send this command's stdin to it (like `kubectl run
    /// -i`); implies --wait. EOF on our stdin closes the process's.
    #[arg(short = 'i', long)]
    stdin: bool,
    /// Run it on a terminal (spec.tty) of this terminal's size and join the two (`run -it`): raw
    /// mode, keys sent as typed (Ctrl-C included), window size changes sent; implies -i. The
    /// detach keys leave it running (exit 0); otherwise we exit with its exit code.
    #[arg(short = 't', long)]
    tty: bool,
    #[command(flatten)]
    detach: DetachArgs,
    /// `client`: print the object that would be created (with -o) and create nothing.
    #[arg(long, value_name = "client|none", value_parser = ["client", "none"], default_value = "none",
          num_args = 0..=1, default_missing_value = "client", require_equals = true)]
    dry_run: String,
    /// Print the created object (json|yaml) instead of its name; not with --wait.
    #[arg(short = 'o', long, value_parser = ["json", "yaml"])]
    output: Option<String>,
    /// The process's argv (after --).
    #[arg(last = true, required = true, value_name = "ARGV")]
    argv: Vec<String>,
}

/// `--restart`'s values, spelled as in the spec (and kubectl run): possible values, so a bad one
/// is refused listing them and `--restart <TAB>` completes them.
fn restart_policies() -> impl clap::builder::TypedValueParser<Value = RestartPolicy> {
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(RestartPolicy::ALL.map(RestartPolicy::as_str))
        .map(|s| RestartPolicy::parse(&s).expect("one of RestartPolicy::ALL"))
}

/// A user or group id as a Pod takes it: 0-2147483647.
fn parse_id(s: &str) -> Result<u32, String> {
    s.parse::<u32>()
        .ok()
        .filter(|v| *v <= sandbox_api::wire::MAX_ID)
        .ok_or_else(|| {
            format!(
                "{s:?} is not a numeric id 0-{} (names are not looked up)",
                sandbox_api::wire::MAX_ID
            )
        })
}

/// `UID` or `UID:GID`, as `docker run --user` takes them (numbers only).
fn parse_user(s: &str) -> Result<(u32, Option<u32>), String> {
    match s.split_once(':') {
        Some((u, g)) => Ok((parse_id(u)?, Some(parse_id(g)?))),
        None => Ok((parse_id(s)?, None)),
    }
}

#[derive(Args, Debug)]
struct LogsArgs {
    name: String,
    /// Follow until the process ends.
    #[arg(short = 'f', long)]
    follow: bool,
    /// The output of the previous run of a restarting process (`run --restart`), as `kubectl
    /// logs --previous`; it has ended: not with -f or --after.
    #[arg(short = 'p', long, conflicts_with_all = ["follow", "after"])]
    previous: bool,
    /// Start after this cursor (from `-o json` events, `status.logMatch`): no repeat, no gap.
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,
    /// Only output read within this long before now (5s, 2m, 3h), like `kubectl logs --since`.
    #[arg(long, value_name = "DURATION", value_parser = since_duration)]
    since: Option<Duration>,
    /// Only the last N lines of the output there is now (then, with -f, what follows);
    /// -1: all.
    #[arg(long, value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    tail: i64,
    /// Stop after this many bytes of output.
    #[arg(long, value_name = "BYTES")]
    limit_bytes: Option<u64>,
    #[arg(long, default_value = "both", value_parser = ["stdout", "stderr", "both"])]
    stream: String,
    /// Prefix each line with the time it was read (RFC 3339).
    #[arg(long)]
    timestamps: bool,
    /// `json`: one event per line with its cursor (data, truncated, end); data as text in `data`,
    /// or base64 in `dataBase64` when the bytes are not UTF-8.
    #[arg(short = 'o', long, value_parser = ["json"])]
    output: Option<String>,
}

/// `--since` is a duration, as in kubectl; a cursor there is pointed to `--after`.
fn since_duration(s: &str) -> Result<Duration, String> {
    duration::parse(s).map_err(|e| {
        if s.starts_with('c') || s.contains('+') {
            format!("{s:?} looks like a cursor: resume after a cursor with --after CURSOR (--since takes a duration, as in kubectl logs)")
        } else {
            e
        }
    })
}

#[derive(Args, Debug)]
struct KillArgs {
    name: String,
    /// Send this one signal (number or name, e.g. 9, KILL, SIGUSR1) instead of stopping.
    #[arg(short = 's', long)]
    signal: Option<String>,
    #[arg(short = 'o', long, value_parser = ["json", "yaml"])]
    output: Option<String>,
}

#[derive(Args, Debug)]
struct LsArgs {
    /// All namespaces.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// Label selector.
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// wide | json | yaml | name | jsonpath=TEMPLATE (kubectl's template syntax).
    #[arg(short = 'o', long, value_parser = ls_output)]
    output: Option<String>,
}

fn ls_output(s: &str) -> Result<String, String> {
    match s {
        "wide" | "json" | "yaml" | "name" => Ok(s.into()),
        t if t.starts_with("jsonpath=") => Ok(t.into()),
        _ => Err(format!(
            "{s:?}: one of wide, json, yaml, name, jsonpath=TEMPLATE"
        )),
    }
}

#[derive(Args, Debug)]
struct WaitArgs {
    name: String,
    #[arg(long = "for", default_value = "exit", value_parser = ["exit", "ready"])]
    for_: String,
    /// Give up after this long (30s, 5m; a bare number is seconds; 0: never).
    #[arg(long, default_value = "0", value_name = "DURATION", value_parser = duration::parse)]
    timeout: Duration,
    #[arg(short = 'o', long, value_parser = ["json", "yaml"])]
    output: Option<String>,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // kubectl_complete-sandbox (kubectl's plugin completion) asks here, in cobra's protocol.
    let completing = args.get(1).is_some_and(|a| a == "__complete");
    let cli = if completing { None } else { Some(Cli::parse()) };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let Some(cli) = cli else {
        let mut cmd = Cli::command();
        cmd.build(); // global flags (-n, --context, ...) reach the subcommands
        rt.block_on(complete::run(&cmd, &args[2..]));
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::process::exit(0)
    };
    let code = match rt.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    };
    // Not by dropping the runtime: that waits for a read of our stdin (attach, run -i) that
    // cannot be cancelled, i.e. until the user presses Enter after the process has ended.
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(code.into())
}

async fn dispatch(cli: Cli) -> Result<u8, CliError> {
    if let Command::Completion(a) = &cli.command {
        return completion(a);
    }
    let (client, namespace) = cli.kube.connect().await?;
    let sb = Sandbox::new(client, namespace).with_field_manager("kubectl-sandbox");
    match cli.command {
        Command::Run(a) => objects::run(&sb, run_of(a)?).await,
        Command::Exec(a) => {
            let mut r = run_of(a)?;
            if r.output.is_some() || r.dry_run {
                return Err(CliError::Usage("exec: -o and --dry-run are run's".into()));
            }
            r.wait = true;
            r.interrupt = true;
            objects::run(&sb.with_door(Door::Process), r).await
        }
        Command::Logs(a) => {
            let opts = logs_options(&a)?;
            let (sb, name) = objects::resolve(&sb, &a.name).await?;
            logs::print(&sb.process(&name), &opts)
                .await
                .map(|_| 0)
                .map_err(CliError::into_no_output)
        }
        Command::Kill(a) => {
            let signal = a
                .signal
                .as_deref()
                .map(sandbox_client::signal::parse)
                .transpose()
                .map_err(|e| flag(e, "--signal"))?;
            let (sb, name) = objects::resolve(&sb, &a.name).await?;
            objects::kill(&sb, &name, signal, a.output.as_deref()).await?;
            Ok(0)
        }
        Command::Ls(a) => {
            objects::list(
                &sb,
                a.all_namespaces,
                a.selector.as_deref(),
                a.output.as_deref(),
            )
            .await?;
            Ok(0)
        }
        Command::Wait(a) => {
            let what = if a.for_ == "ready" {
                objects::WaitFor::Ready
            } else {
                objects::WaitFor::Exit
            };
            let timeout = (!a.timeout.is_zero()).then_some(a.timeout);
            let (sb, name) = objects::resolve(&sb, &a.name).await?;
            objects::wait(&sb, &name, what, timeout, a.output.as_deref()).await
        }
        Command::Attach(a) => {
            let tty = a.tty.then_some(objects::AttachTty {
                keys: a.detach.detach_keys,
                after: a.after,
            });
            let (sb, name) = objects::resolve(&sb, &a.name).await?;
            objects::attach(&sb, &name, tty, !a.no_stream).await
        }
        Command::Completion(_) => unreachable!("handled above"),
    }
}

/// The shell completion script, on stdout.
fn completion(a: &CompletionArgs) -> Result<u8, CliError> {
    let mut cmd = Cli::command();
    // Into a buffer: clap_complete panics when its writer fails (a reader that closed the
    // pipe early, `| head`); a closed pipe is simply the end here.
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "kubectl-sandbox", &mut script);
    use std::io::Write;
    match std::io::stdout().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(0),
    }
}

/// `run`'s flags as the start it makes and how to follow it.
fn run_of(a: RunArgs) -> Result<objects::Run, CliError> {
    let dry_run = a.dry_run == "client";
    let wait = a.wait || a.stdin || a.tty || a.rm;
    if wait && (a.output.is_some() || dry_run) {
        return Err(CliError::Usage(
            "-o and --dry-run cannot be combined with --wait, --rm or -i".into(),
        ));
    }
    let mut start = Start::new(a.pod, a.argv).stdin(a.stdin || a.tty);
    if a.tty {
        let (rows, cols) = terminal::size();
        start = start.tty(true).terminal(rows, cols);
    }
    if let Some(n) = a.name {
        start = start.id(n);
    }
    if let Some(c) = a.container {
        start = start.container(c);
    }
    if let Some(d) = a.workdir {
        start = start.cwd(d);
    }
    if let Some(t) = a.timeout {
        start = start.timeout(t);
    }
    if let Some(t) = a.ttl {
        start = start.ttl(t);
    }
    for kv in &a.env {
        let (k, v) = objects::parse_pair(kv, "--env")?;
        start = start.env(k, v);
    }
    for kv in &a.labels {
        let (k, v) = objects::parse_pair(kv, "--label")?;
        start = start.label(k, v);
    }
    if a.non_root && matches!(a.run_as, Some((0, _))) {
        return Err(CliError::Usage(
            "--run-as: 0 (root) contradicts --non-root".into(),
        ));
    }
    if a.run_as.is_some() || !a.group_add.is_empty() || a.non_root {
        start = start.security_context(SecurityContext {
            supplemental_groups: a.group_add.iter().map(|g| i64::from(*g)).collect(),
            run_as_non_root: a.non_root.then_some(true),
            ..Default::default()
        });
    }
    if let Some((uid, gid)) = a.run_as {
        start = start.user(uid, gid);
    }
    if let Some(p) = a.restart {
        start = start.restart_policy(p);
        // The API's rule (not with stdin or tty, i.e. -i, -t), named by our flag.
        if let Err(e) = start.manifest("-", "-") {
            if matches!(&e, sandbox_client::Error::InvalidArgument { field, .. } if field == "restartPolicy")
            {
                return Err(flag(e, "--restart"));
            }
        }
    }
    Ok(objects::Run {
        start,
        wait,
        stdin: a.stdin,
        tty: a.tty.then_some(a.detach.detach_keys),
        rm: a.rm,
        output: a.output,
        dry_run,
        interrupt: false,
    })
}

/// `logs`'s flags as the read they ask for.
fn logs_options(a: &LogsArgs) -> Result<logs::Options, CliError> {
    let stream = match a.stream.as_str() {
        "stdout" => LogStream::Stdout,
        "stderr" => LogStream::Stderr,
        _ => LogStream::Both,
    };
    if a.tail < -1 {
        return Err(CliError::Usage(format!(
            "--tail: {} is not -1 or more",
            a.tail
        )));
    }
    if a.limit_bytes == Some(0) {
        return Err(CliError::Usage("--limit-bytes: must be at least 1".into()));
    }
    Ok(logs::Options {
        follow: a.follow,
        after: a.after.clone(),
        since: a.since,
        tail: usize::try_from(a.tail).ok(),
        limit_bytes: a.limit_bytes,
        stream,
        timestamps: a.timestamps,
        json: a.output.is_some(),
        split: false,
        previous: a.previous,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<objects::Run, String> {
        let argv = ["kubectl-sandbox", "run"]
            .iter()
            .chain(args)
            .chain(&["--", "id"]);
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        let Command::Run(a) = cli.command else {
            unreachable!("run")
        };
        run_of(a).map_err(|e| e.to_string())
    }

    fn security_context(args: &[&str]) -> serde_json::Value {
        let r = run(args).unwrap();
        r.start.manifest("ns", "n").unwrap()["spec"]["securityContext"].clone()
    }

    #[test]
    fn user_flags_make_the_security_context() {
        use serde_json::json;
        assert_eq!(security_context(&["w"]), serde_json::Value::Null);
        assert_eq!(
            security_context(&["--run-as", "1000:1000", "w"]),
            json!({"runAsUser": 1000, "runAsGroup": 1000})
        );
        assert_eq!(
            security_context(&["--run-as=0", "--group-add", "2000", "--group-add=3", "w"]),
            json!({"runAsUser": 0, "supplementalGroups": [2000, 3]})
        );
        assert_eq!(
            security_context(&["--non-root", "w"]),
            json!({"runAsNonRoot": true})
        );
    }

    #[test]
    fn bad_user_values_are_refused_naming_the_flag() {
        for (args, flag) in [
            (&["--run-as", "nobody", "w"][..], "--run-as"),
            (&["--run-as", "1000:", "w"], "--run-as"),
            (&["--run-as", "2147483648", "w"], "--run-as"),
            (&["--run-as=-1", "w"], "--run-as"),
            (&["--group-add", "wheel", "w"], "--group-add"),
        ] {
            let e = run(args)
                .err()
                .unwrap_or_else(|| panic!("{args:?} accepted"));
            assert!(e.contains(flag), "{args:?}: {e}");
        }
        // --user stays kubectl's kubeconfig user.
        let cli =
            Cli::try_parse_from(["kubectl-sandbox", "run", "--user", "alice", "w", "--", "id"]);
        assert_eq!(cli.unwrap().kube.user.as_deref(), Some("alice"));
        // Root with --non-root is a contradiction, named before anything is sent.
        let e = run(&["--run-as", "0:5", "--non-root", "w"]).err().unwrap();
        assert!(e.starts_with("--run-as:"), "{e}");
    }

    #[test]
    fn restart_flag_sets_the_policy() {
        let policy = |args: &[&str]| {
            run(args).unwrap().start.manifest("ns", "n").unwrap()["spec"]["restartPolicy"].clone()
        };
        assert_eq!(policy(&["w"]), serde_json::Value::Null);
        assert_eq!(policy(&["--restart", "OnFailure", "w"]), "OnFailure");
        assert_eq!(policy(&["--restart=Always", "w"]), "Always");
        assert_eq!(
            policy(&["--restart=Never", "-i", "w"]),
            serde_json::Value::Null
        );
        for bad in ["Bogus", "onfailure", ""] {
            let e = run(&["--restart", bad, "w"]).err().unwrap();
            assert!(e.contains("--restart"), "{bad}: {e}");
            assert!(e.contains("Never, OnFailure, Always"), "{bad}: {e}");
        }
        for io in ["-i", "-t"] {
            let e = run(&["--restart=OnFailure", io, "w"]).err().unwrap();
            assert_eq!(
                e,
                format!("--restart: {}", sandbox_api::wire_rules::RESTART_WITH_STDIN),
                "{io}"
            );
        }
    }

    fn logs(args: &[&str]) -> Result<logs::Options, String> {
        let argv = ["kubectl-sandbox", "logs", "p"].iter().chain(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        let Command::Logs(a) = cli.command else {
            unreachable!("logs")
        };
        logs_options(&a).map_err(|e| e.to_string())
    }

    #[test]
    fn previous_is_a_read_of_what_ended() {
        assert!(!logs(&[]).unwrap().previous);
        assert!(logs(&["--previous"]).unwrap().previous);
        let o = logs(&["-p", "--tail", "2", "--since", "5m"]).unwrap();
        assert!(o.previous && o.tail == Some(2));
        for (args, other) in [
            (&["-p", "-f"][..], "--follow"),
            (&["--previous", "--follow"], "--follow"),
            (&["-p", "--after", "c1"], "--after"),
        ] {
            let e = logs(args)
                .err()
                .unwrap_or_else(|| panic!("{args:?} accepted"));
            assert!(
                e.contains("--previous") && e.contains(other),
                "{args:?}: {e}"
            );
        }
    }
}

/// docs/reference/plugin.md, generated from `Cli` and checked against the committed page.
#[cfg(test)]
mod reference;
