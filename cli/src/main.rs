//! `kubectl-sandbox`: a kubectl plugin for SandboxProcesses. Output comes through the operator's
//! subresource API (`sandboxprocesses/log` in `subresources.sandbox.dev`) via the API server, so
//! it works from anywhere a kubeconfig works, under the caller's RBAC.
//!
//! Exit status: `run --wait` exits with the process's exit code (128+signal when killed);
//! 125 when the process could not run or was lost (phase Error); 1 for any other failure
//! (API errors, timeouts); 2 for bad usage.
mod connect;
mod error;
mod logs;
mod objects;
mod signals;
mod stdin;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use connect::KubeFlags;
use error::CliError;

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-sandbox",
    bin_name = "kubectl sandbox",
    version,
    about = "Run and follow processes in pods through SandboxProcess objects",
    after_help = "Exit status of `run --wait`: the process's exit code (128+n when killed by signal n); \
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
    /// Print a process's output: replay, follow until exit (-f), resume after a cursor (--since).
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
}

#[derive(Args, Debug)]
struct AttachArgs {
    name: String,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Target pod (same namespace).
    pod: String,
    /// Container in the pod (default: the pod's default container).
    #[arg(short = 'c', long)]
    container: Option<String>,
    /// Name of the SandboxProcess (default: generated from the pod name).
    #[arg(long)]
    name: Option<String>,
    /// Environment variable NAME=VALUE, overlaid on the container's (repeatable).
    #[arg(long = "env", short = 'e', value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Working directory (absolute).
    #[arg(long)]
    workdir: Option<String>,
    /// Stop the process after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<i64>,
    /// Stream the output and exit with the process's exit code.
    #[arg(long)]
    wait: bool,
    /// Keep stdin open to the process and send this command's stdin to it (like `kubectl run
    /// -i`); implies --wait. EOF on our stdin closes the process's.
    #[arg(short = 'i', long)]
    stdin: bool,
    /// Print the created object (json|yaml) instead of its name; not with --wait.
    #[arg(short = 'o', long, value_parser = ["json", "yaml"])]
    output: Option<String>,
    /// The process's argv (after --).
    #[arg(last = true, required = true, value_name = "ARGV")]
    argv: Vec<String>,
}

#[derive(Args, Debug)]
struct LogsArgs {
    name: String,
    /// Follow until the process ends.
    #[arg(short = 'f', long)]
    follow: bool,
    /// Start after this cursor (from `-o json` events): no repeat, no gap.
    #[arg(long, value_name = "CURSOR")]
    since: Option<String>,
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
    #[arg(short = 'o', long, value_parser = ["json", "yaml", "name"])]
    output: Option<String>,
}

#[derive(Args, Debug)]
struct WaitArgs {
    name: String,
    #[arg(long = "for", default_value = "exit", value_parser = ["exit", "ready"])]
    for_: String,
    /// Give up after this many seconds (0: never).
    #[arg(long, default_value_t = 0, value_name = "SECONDS")]
    timeout: u64,
    #[arg(short = 'o', long, value_parser = ["json", "yaml"])]
    output: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    let (client, namespace) = cli.kube.connect().await?;
    let ctx = objects::Ctx { client, namespace };
    match cli.command {
        Command::Run(a) => {
            let env = a
                .env
                .iter()
                .map(|kv| objects::parse_env(kv))
                .collect::<Result<Vec<_>, _>>()?;
            if (a.wait || a.stdin) && a.output.is_some() {
                return Err(CliError::Usage(
                    "-o cannot be combined with --wait or -i".into(),
                ));
            }
            let spec = objects::RunSpec {
                pod: a.pod,
                container: a.container,
                name: a.name,
                env,
                workdir: a.workdir,
                timeout: a.timeout,
                argv: a.argv,
                stdin: a.stdin,
            };
            objects::run(&ctx, spec, a.wait || a.stdin, a.output.as_deref()).await
        }
        Command::Logs(a) => {
            let opts = logs::Options {
                follow: a.follow,
                since: a.since,
                stream: a.stream,
                timestamps: a.timestamps,
                json: a.output.is_some(),
                split: false,
            };
            let read = async {
                if a.follow {
                    objects::wait_started(&ctx, &a.name).await?;
                }
                match logs::print(&ctx.client, &ctx.namespace, &a.name, &opts).await {
                    Ok(_) => Ok(0),
                    Err(e) => Err(objects::explain_log_failure(&ctx, &a.name, e).await),
                }
            };
            // `logs` is not `run --wait`: a process that never started is a plain failure (1).
            read.await.map_err(|e| match e {
                CliError::Process { name, error } => CliError::NoOutput { name, error },
                e => e,
            })
        }
        Command::Kill(a) => {
            let signal = a.signal.as_deref().map(signals::parse).transpose()?;
            objects::kill(&ctx, &a.name, signal, a.output.as_deref()).await?;
            Ok(0)
        }
        Command::Ls(a) => {
            objects::list(
                &ctx,
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
            objects::wait(&ctx, &a.name, what, a.timeout, a.output.as_deref()).await
        }
        Command::Attach(a) => objects::attach(&ctx, &a.name).await,
    }
}
