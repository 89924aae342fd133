//! Commands a test runs as a user or an operator of the cluster would: kubectl (exec, wait,
//! apply of arbitrary manifests) and the fault hooks of e2e/cluster. Every command is bounded.
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// What a finished command said.
#[derive(Debug)]
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs `program args` with `stdin`, for at most `limit`; a non-zero exit is not an error here.
pub async fn run(
    program: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
    limit: Duration,
) -> Result<Out> {
    let mut c = Command::new(program);
    c.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = c.spawn().with_context(|| format!("starting {program}"))?;
    if let (Some(data), Some(mut w)) = (stdin, child.stdin.take()) {
        w.write_all(data)
            .await
            .with_context(|| format!("{program}: writing stdin"))?;
    }
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .with_context(|| format!("{program} {} did not end within {limit:?}", args.join(" ")))??;
    Ok(Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Runs a command that must succeed; its stdout.
/// The SHA-256 of `data` as this machine's `sha256sum` prints it (what a process's
/// `sha256sum` of the same bytes prints first).
pub async fn sha256_of(data: &[u8]) -> Result<String> {
    let out = run("sha256sum", &[], Some(data), Duration::from_secs(60)).await?;
    out.stdout
        .split_whitespace()
        .next()
        .map(str::to_string)
        .context("sha256sum printed nothing")
}

pub async fn ok(program: &str, args: &[&str]) -> Result<String> {
    let out = run(program, args, None, Duration::from_secs(120)).await?;
    if !out.success() {
        bail!(
            "{program} {} failed ({:?}): {}{}",
            args.join(" "),
            out.code,
            out.stderr,
            out.stdout
        );
    }
    Ok(out.stdout)
}

/// kubectl with these arguments (the wrapper's KUBECONFIG); must succeed.
pub async fn kubectl(args: &[&str]) -> Result<String> {
    ok("kubectl", args).await
}

/// kubectl reading a manifest on stdin; not required to succeed (a refusal is often the point).
pub async fn kubectl_stdin(args: &[&str], stdin: &str) -> Result<Out> {
    run(
        "kubectl",
        args,
        Some(stdin.as_bytes()),
        Duration::from_secs(120),
    )
    .await
}

/// A fault hook of the test cluster: `e2e/cluster ARGS` (node stop/start, crash, ...).
pub async fn cluster(args: &[&str]) -> Result<String> {
    let script = crate::repo_root().join("e2e/cluster");
    ok(script.to_str().context("repository path")?, args).await
}

/// The chart deployed again (`e2e/deploy ARGS` with the images the suite built:
/// SPO_DEPLOY_NO_BUILD=1); `helm --wait` bounds it at 5 min.
pub async fn deploy(args: &[&str]) -> Result<String> {
    let script = crate::repo_root().join("e2e/deploy");
    let mut all = vec![
        "SPO_DEPLOY_NO_BUILD=1",
        script.to_str().context("repository path")?,
    ];
    all.extend_from_slice(args);
    let out = run("env", &all, None, Duration::from_secs(330)).await?;
    if !out.success() {
        bail!(
            "e2e/deploy {} failed ({:?}): {}",
            args.join(" "),
            out.code,
            out.stderr
        );
    }
    Ok(out.stdout)
}

/// `kubectl sandbox ARGS` with the plugin built from this tree (cargo, into the tests' target
/// directory) first on PATH, as a user installs it; not required to succeed.
pub async fn kubectl_sandbox(args: &[&str]) -> Result<Out> {
    let path = plugin_path().await?;
    let mut all = vec![path.as_str(), "kubectl", "sandbox"];
    all.extend_from_slice(args);
    run("env", &all, None, Duration::from_secs(120)).await
}

/// `kubectl sandbox ARGS` ended after `secs` if still running (SIGTERM, as `timeout` does: exit
/// 124): what it said by then.
pub async fn kubectl_sandbox_for(secs: u32, args: &[&str]) -> Result<Out> {
    let path = plugin_path().await?;
    let limit = secs.to_string();
    let mut all = vec![
        path.as_str(),
        "timeout",
        limit.as_str(),
        "kubectl",
        "sandbox",
    ];
    all.extend_from_slice(args);
    run("env", &all, None, Duration::from_secs(u64::from(secs) + 60)).await
}

/// `kubectl sandbox ARGS` started alongside the test (e.g. a follow), its stdout piped, killed
/// when dropped.
pub async fn kubectl_sandbox_child(args: &[&str]) -> Result<tokio::process::Child> {
    let path = plugin_path().await?;
    Command::new("env")
        .arg(path)
        .args(["kubectl", "sandbox"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting kubectl sandbox")
}

/// `PATH=…` with the plugin's directory first.
async fn plugin_path() -> Result<String> {
    // Built and put in place once per test binary: tests run it from several threads, and a copy
    // written over the binary while another test executed it failed that exec (ETXTBSY).
    static PLUGIN_DIR: tokio::sync::OnceCell<std::path::PathBuf> =
        tokio::sync::OnceCell::const_new();
    let dir = PLUGIN_DIR.get_or_try_init(install_plugin).await?;
    Ok(format!(
        "PATH={}:{}",
        dir.to_str().context("target path")?,
        std::env::var("PATH").unwrap_or_default()
    ))
}

/// Builds the plugin and puts it alone in a directory for PATH; the copy is renamed into place,
/// so a plugin another test binary runs from there keeps its own file.
async fn install_plugin() -> Result<std::path::PathBuf> {
    let root = crate::repo_root();
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let manifest = root.join("Cargo.toml");
    let manifest = manifest.to_str().context("repository path")?;
    let built = run(
        cargo,
        &[
            "build",
            "-q",
            "--manifest-path",
            manifest,
            "-p",
            "kubectl-sandbox",
        ],
        None,
        Duration::from_secs(600),
    )
    .await?;
    if !built.success() {
        bail!("building kubectl-sandbox failed: {}", built.stderr);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let dir = target.join("e2e-plugin");
    std::fs::create_dir_all(&dir)?;
    let tmp = dir.join(format!(".kubectl-sandbox.{}", std::process::id()));
    std::fs::copy(target.join("debug/kubectl-sandbox"), &tmp)?;
    std::fs::rename(&tmp, dir.join("kubectl-sandbox"))?;
    Ok(dir)
}
