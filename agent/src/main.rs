//! `sandbox-agent`: the node agent daemon.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use sandbox_agent::api_server::ApiAccess;
use sandbox_agent::auth::{Auth, TokenReviewer};
use sandbox_agent::registry::{Config, Registry};
use sandbox_agent::runtime::{cri::CriLookup, runc_state::RuncStateLookup, Lookup};
use sandbox_agent::server::{router, AppState};
use sandbox_agent::spawn::{install_supervisor, HostNamespace, SpawnConfig, SupervisorLimits};
use sandbox_node_protocol::layout::Layout;

#[derive(Parser)]
#[command(
    name = "sandbox-agent",
    version,
    about = "Runs and supervises processes inside pod containers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Copy, Clone, ValueEnum)]
enum LookupKind {
    /// Ask the node's CRI runtime (containerd, CRI-O).
    Cri,
    /// Read a runc state root directly (containers started with plain runc).
    Runc,
}

#[derive(Copy, Clone, ValueEnum)]
enum AuthMode {
    /// Projected ServiceAccount token checked by TokenReview.
    TokenReview,
    /// Shared secret read from --token-file (tests, clusterless use).
    Static,
}

#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
enum TlsMode {
    /// Mutual TLS: a serving certificate for this node from the operator's signer (by
    /// CertificateSigningRequest), callers' client certificates checked against the bundle.
    Csr,
    /// Plain HTTP (host-run tests only: the API is node-root equivalent).
    Off,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the agent API.
    Serve(Box<Serve>),
}

#[derive(Parser)]
struct Serve {
    #[arg(long, env = "SANDBOX_AGENT_LISTEN", default_value = "0.0.0.0:9443")]
    listen: SocketAddr,
    /// Prometheus metrics (`/metrics`, aggregates only, no token) on this address; off if unset.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Host path (also mounted at the same path in the agent pod).
    #[arg(
        long,
        env = "SANDBOX_AGENT_STATE_DIR",
        default_value = "/var/lib/sandbox-agent"
    )]
    state_dir: PathBuf,
    #[arg(long, value_enum, default_value = "cri")]
    lookup: LookupKind,
    #[arg(long, default_value = "/run/containerd/containerd.sock")]
    cri_socket: PathBuf,
    /// OCI runtime binary, as a path in the supervisors' mount namespace.
    #[arg(long, default_value = "/usr/sbin/runc")]
    runtime_binary: String,
    /// Runtime state root for containers whose lookup does not report one
    /// (containerd: /run/containerd/runc/k8s.io; CRI-O: /run/runc).
    #[arg(long, default_value = "/run/containerd/runc/k8s.io")]
    runtime_root: String,
    /// Supervisor binary; default: the `sandbox-supervisor` next to this binary, installed
    /// into <state-dir>/bin.
    #[arg(long)]
    supervisor_binary: Option<PathBuf>,
    /// Run supervisors in the host's mount namespace (from a hostPID pod): `runtime` = the
    /// container runtime's (peer of --cri-socket), or a namespace file such as /proc/1/ns/mnt.
    #[arg(long)]
    host_mount_ns: Option<String>,
    /// Cgroup that supervisors are moved to, outside the agent pod's cgroup.
    #[arg(long, default_value = "sandbox-supervisors")]
    supervisor_cgroup: String,
    /// Memory cap of all supervisors together (their cgroup). Default: 64 MiB + 4 MiB per
    /// --max-processes (a supervisor uses about 1.6 MiB; runc needs more while it starts one).
    #[arg(long)]
    supervisor_memory_bytes: Option<u64>,
    /// Pids cap of all supervisors together. Default: 256 + 4 per --max-processes (a supervisor is
    /// one thread; each start briefly runs a multi-threaded runc).
    #[arg(long)]
    supervisor_pids: Option<u64>,
    /// Leave supervisors in the agent's own cgroup (only for clusterless testing).
    #[arg(long)]
    no_supervisor_cgroup: bool,
    /// The host's cgroup filesystem. Default: /sys/fs/cgroup of the --host-mount-ns namespace
    /// (a container's own /sys/fs/cgroup shows only its own cgroup).
    #[arg(long)]
    cgroup_root: Option<PathBuf>,
    /// The wait before a restarting process's second run (`restartPolicy`), doubled after each
    /// restart up to --restart-backoff-max-ms; the kubelet's by default. Lower only for tests.
    #[arg(long, default_value_t = 10_000)]
    restart_backoff_initial_ms: u64,
    #[arg(long, default_value_t = 300_000)]
    restart_backoff_max_ms: u64,
    /// A run that lasted this long resets the back-off to its initial wait.
    #[arg(long, default_value_t = 600_000)]
    restart_backoff_reset_ms: u64,
    /// Output kept per process; older output is dropped with an explicit gap marker.
    #[arg(long, default_value_t = 64 << 20)]
    log_retention_bytes: u64,
    /// How long the OCI runtime may take to start one process (`runc exec`) before the start
    /// fails, the runtime is killed and whatever it started is ended.
    /// At least 1000: runc takes tens of milliseconds, seconds on a loaded node.
    #[arg(long, default_value_t = sandbox_node_protocol::launch::DEFAULT_RUNTIME_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1000..))]
    runtime_timeout_ms: u64,
    /// What all processes' output together may hold in the state dir (default: a quarter of its
    /// filesystem); beyond it the oldest finished output is freed, then running ones trimmed.
    #[arg(long)]
    output_budget_bytes: Option<u64>,
    /// A finished process's output is freed this long after its end (its record stays).
    #[arg(long, default_value_t = 7 * 24 * 3600)]
    finished_output_retention_seconds: u64,
    /// How often the budget and the retention are enforced.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    budget_sweep_seconds: u64,
    /// Most processes supervised at once on this node; more starts wait (429, the operator keeps
    /// them Pending).
    #[arg(long, default_value_t = 2000)]
    max_processes: usize,
    /// Most log follows open at once on one process; more are refused (429).
    #[arg(long, default_value_t = 256)]
    max_follows_per_process: usize,
    /// Launch even with a runtime known to be vulnerable (CVE-2024-21626) or too old, for a build
    /// patched in a way the agent cannot tell from `--version`.
    #[arg(long)]
    allow_vulnerable_runtime: bool,
    /// Most log follows open at once on this agent; more are refused (429).
    #[arg(long, default_value_t = 4096)]
    max_follows: usize,
    #[arg(long, value_enum, default_value = "token-review")]
    auth: AuthMode,
    #[arg(long)]
    token_file: Option<PathBuf>,
    #[arg(long, default_value = "sandbox-agent")]
    audience: String,
    /// The only caller accepted, e.g. system:serviceaccount:sandbox-system:sandbox-operator.
    #[arg(long, env = "SANDBOX_AGENT_ALLOWED_USER")]
    allowed_user: Option<String>,
    #[arg(long, default_value = "/proc")]
    proc_root: String,
    #[arg(long, value_enum, default_value = "csr")]
    tls: TlsMode,
    /// This node's name (the serving certificate names it): the pod's spec.nodeName.
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// The agent pods' namespace (the certificate's name and the bundle ConfigMap's namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: Option<String>,
    #[arg(long, default_value = "sandbox.dev/agent-serving")]
    signer_name: String,
    /// ConfigMap (key ca.crt) with the CAs callers' client certificates must chain to.
    #[arg(long, default_value = "sandbox-process-operator-ca-bundle")]
    client_ca_configmap: String,
    /// Plain-HTTP /healthz (alive) and /readyz (serving TLS) for the kubelet's probes, which
    /// hold no client certificate; off if unset.
    #[arg(long)]
    health_listen: Option<SocketAddr>,
    /// How long open requests may run on after SIGTERM.
    #[arg(long, default_value_t = 20)]
    drain_seconds: u64,
    /// API server for TokenReview when not running in a pod (with --api-ca-file, --api-token-file).
    #[arg(long, requires_all = ["api_ca_file", "api_token_file"])]
    api_server: Option<String>,
    #[arg(long)]
    api_ca_file: Option<String>,
    /// Token allowed to create TokenReviews (system:auth-delegator).
    #[arg(long)]
    api_token_file: Option<String>,
}

fn main() -> anyhow::Result<()> {
    // Before the runtime's threads exist: each takes an arena as it first allocates.
    sandbox_memory::tune();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Serve(s) => {
            let s = *s;
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "info".into()),
                )
                .json()
                .init();
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?
                .block_on(serve(s))
        }
    }
}

/// One pidfd per supervised process plus connections: lift the soft fd limit to the hard one.
fn raise_nofile_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// Holds `<state-dir>/agent.lock` (flock) for the agent's life; waits while another agent holds it.
async fn lock_state_dir(layout: &Layout) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    use nix::fcntl::{Flock, FlockArg};
    use std::io::{Seek, Write};
    let path = layout.root().join("agent.lock");
    let mut said = false;
    loop {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(mut held) => {
                held.set_len(0)?;
                held.rewind()?;
                write!(held, "{}", std::process::id())?;
                if said {
                    tracing::info!(lock = %path.display(), "state dir free: serving");
                }
                return Ok(held);
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                if !said {
                    let holder = std::fs::read_to_string(&path).unwrap_or_default();
                    tracing::warn!(
                        lock = %path.display(),
                        holder_pid = %holder.trim(),
                        "standing by: another agent serves this state dir (a second release on \
                         the same agent.stateDir?); waiting until it stops"
                    );
                    said = true;
                }
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            }
            Err((_, e)) => return Err(e).with_context(|| format!("locking {}", path.display())),
        }
    }
}

async fn serve(s: Serve) -> anyhow::Result<()> {
    raise_nofile_limit();
    let layout = Layout::new(&s.state_dir);
    layout
        .ensure()
        .with_context(|| format!("creating state dir {}", s.state_dir.display()))?;
    // One agent per state dir: a second release's DaemonSet (or an agent started by hand) on the
    // same host path would rescan, reattach and rewrite the same records. It waits instead.
    let _state_lock = lock_state_dir(&layout).await?;
    // One API server client for TokenReview and the certificate's, when either needs it.
    let api = match (s.auth, s.tls) {
        (AuthMode::Static, TlsMode::Off) => None,
        _ => Some(api_access(&s)?.client()?),
    };
    let auth = auth_of(&s, api.clone())?;
    let layout_root = layout.root().to_path_buf();
    let supervisor_bin = supervisor_bin_of(&s, &layout)?;
    let lookup = lookup_of(&s)?;
    let cfg = registry_config(&s, layout, lookup, supervisor_bin);
    // Not fatal: the runtime may not be up yet; every spawn retries it and fails with this reason.
    if let Err(e) = cfg.spawn.prepare() {
        tracing::warn!("preparing the supervisors' cgroup: {e}");
    }
    let registry = Registry::open(cfg).await?;
    // Thousands of starts at once (their requests, records, watch events) leave a heap the
    // agent would otherwise keep for the rest of its life (docs/benchmarks.md, "The node agent").
    sandbox_memory::spawn(sandbox_memory::EVERY);
    // Streams (watch, log follow) end when shutdown starts, so graceful shutdown can finish;
    // nothing the agent holds needs saving (supervisors own the state).
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let state = AppState {
        registry,
        auth: Arc::new(auth),
        metrics: Arc::new(sandbox_agent::metrics::Metrics::new()),
        serving_cert: (s.tls == TlsMode::Csr).then(|| s.state_dir.join("tls").join("tls.crt")),
        shutdown: stop_rx,
    };
    if let Some(addr) = s.metrics_listen {
        serve_metrics(addr, state.clone()).await?;
    }
    let app = router(state.clone());
    let listener = tokio::net::TcpListener::bind(s.listen)
        .await
        .with_context(|| format!("binding {}", s.listen))?;
    tracing::info!(listen = %listener.local_addr()?, "listening");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::spawn(async move {
        tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });
    let stop = state.shutdown.clone();
    match s.tls {
        TlsMode::Off => {
            if let Some(addr) = s.health_listen {
                serve_health(addr, watch_ready(true)).await?;
            }
            let mut stop = stop;
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await?;
        }
        TlsMode::Csr => {
            let api = api.context("--tls csr needs the API server")?;
            let cfg = tls_config(&s, api, &layout_root)?;
            if let Some(addr) = s.health_listen {
                serve_health(addr, ready_when(cfg.clone())).await?;
            }
            let drain = std::time::Duration::from_secs(s.drain_seconds);
            sandbox_agent::tls::serve(listener, cfg, app, stop, drain).await?;
        }
    }
    Ok(())
}

type TlsConfig = tokio::sync::watch::Receiver<Option<Arc<rustls::ServerConfig>>>;

/// The TLS configuration, rebuilt whenever our certificate or the client CA bundle changes.
fn tls_config(
    s: &Serve,
    client: kube::Client,
    state_dir: &std::path::Path,
) -> anyhow::Result<TlsConfig> {
    use sandbox_agent::tls::{bundle, identity, server_config};
    use tokio::sync::watch;
    let node = s
        .node_name
        .clone()
        .context("--tls csr needs --node-name (NODE_NAME: the pod's spec.nodeName)")?;
    let namespace = match &s.namespace {
        Some(n) => n.clone(),
        None => std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
            .map(|n| n.trim().to_string())
            .context("--tls csr needs --namespace (POD_NAMESPACE)")?,
    };
    let (id_tx, mut id_rx) = watch::channel(None);
    let (ca_tx, mut ca_rx) = watch::channel(None);
    tokio::spawn(identity::keep(
        identity::Identity {
            csrs: kube::Api::all(client.clone()),
            node,
            namespace: namespace.clone(),
            signer: s.signer_name.clone(),
            dir: state_dir.join("tls"),
        },
        ca_rx.clone(),
        id_tx,
    ));
    tokio::spawn(bundle::keep(
        kube::Api::namespaced(client, &namespace),
        s.client_ca_configmap.clone(),
        ca_tx,
    ));
    let (cfg_tx, cfg_rx) = watch::channel(None);
    tokio::spawn(async move {
        loop {
            let (id, ca) = (
                id_rx.borrow_and_update().clone(),
                ca_rx.borrow_and_update().clone(),
            );
            if let (Some(id), Some(ca)) = (id, ca) {
                match server_config(&id.cert, &id.key, &ca) {
                    Ok(c) => {
                        tracing::info!("TLS configuration updated; new connections use it");
                        let _ = cfg_tx.send(Some(Arc::new(c)));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS material not usable; keeping the current")
                    }
                }
            }
            tokio::select! {
                r = id_rx.changed() => if r.is_err() { return },
                r = ca_rx.changed() => if r.is_err() { return },
            }
        }
    });
    Ok(cfg_rx)
}

/// A receiver keeps the last value after its sender is gone.
fn watch_ready(ready: bool) -> tokio::sync::watch::Receiver<bool> {
    tokio::sync::watch::channel(ready).1
}

fn ready_when(mut cfg: TlsConfig) -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if cfg.wait_for(Option::is_some).await.is_ok() {
            let _ = tx.send(true);
        }
    });
    rx
}

/// /healthz and /readyz in plain HTTP, apart from the API (the kubelet has no client
/// certificate).
async fn serve_health(
    addr: SocketAddr,
    ready: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    use axum::{http::StatusCode, routing::get};
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr} (--health-listen)"))?;
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = *ready.borrow();
                async move {
                    if ready {
                        (StatusCode::OK, "ok")
                    } else {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            "no serving certificate or client CA bundle yet",
                        )
                    }
                }
            }),
        );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "health listener ended");
        }
    });
    Ok(())
}

/// Who may call the agent: a shared token (tests, clusterless use) or the operator's
/// ServiceAccount token, checked by TokenReview.
fn auth_of(s: &Serve, api: Option<kube::Client>) -> anyhow::Result<Auth> {
    Ok(match s.auth {
        AuthMode::Static => {
            let f = s
                .token_file
                .as_ref()
                .context("--auth static needs --token-file")?;
            let token =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            if token.trim().len() < 16 {
                bail!(
                    "--token-file {}: token must be at least 16 characters",
                    f.display()
                );
            }
            Auth::Static {
                token: token.trim().to_string(),
            }
        }
        AuthMode::TokenReview => {
            let user = s
                .allowed_user
                .clone()
                .context("--auth token-review needs --allowed-user")?;
            Auth::TokenReview(Box::new(TokenReviewer::new(
                api.context("--auth token-review needs the API server")?,
                s.audience.clone(),
                user,
            )?))
        }
    })
}

/// How the agent reaches the API server: in-cluster, or the --api-* flags.
fn api_access(s: &Serve) -> anyhow::Result<ApiAccess> {
    Ok(match &s.api_server {
        Some(url) => ApiAccess {
            url: url.clone(),
            ca_file: s.api_ca_file.clone().unwrap_or_default(),
            token_file: s.api_token_file.clone().unwrap_or_default(),
        },
        None => ApiAccess::in_cluster()?,
    })
}

/// The supervisor binary, as a path where supervisors run (installed from beside the agent).
fn supervisor_bin_of(s: &Serve, layout: &Layout) -> anyhow::Result<std::path::PathBuf> {
    Ok(match &s.supervisor_binary {
        Some(p) => p.clone(),
        None => {
            let me = std::env::current_exe()?;
            let sibling = me.with_file_name("sandbox-supervisor");
            install_supervisor(&sibling, layout)
                .with_context(|| format!("installing {}", sibling.display()))?
        }
    })
}

/// How containers are found: through the node's CRI runtime, or a runc state root read directly.
fn lookup_of(s: &Serve) -> anyhow::Result<Lookup> {
    Ok(match s.lookup {
        LookupKind::Cri => Lookup::Cri(CriLookup::new(s.cri_socket.clone())?),
        LookupKind::Runc => Lookup::RuncState(RuncStateLookup {
            root: s.runtime_root.clone().into(),
        }),
    })
}

/// The registry's settings, every node cap among them, from the flags.
fn registry_config(
    s: &Serve,
    layout: Layout,
    lookup: Lookup,
    supervisor_bin: std::path::PathBuf,
) -> Config {
    Config {
        layout,
        lookup,
        spawn: spawn_config(s, supervisor_bin),
        runtime_binary: s.runtime_binary.clone(),
        default_runtime_root: s.runtime_root.clone(),
        retention_bytes: s.log_retention_bytes,
        runtime_timeout_ms: s.runtime_timeout_ms,
        backoff: sandbox_node_protocol::launch::Backoff {
            initial_ms: s.restart_backoff_initial_ms,
            max_ms: s.restart_backoff_max_ms,
            reset_after_ms: s.restart_backoff_reset_ms,
        },
        proc_root: s.proc_root.clone(),
        max_processes: s.max_processes,
        budget: sandbox_agent::budget::Budget {
            max_bytes: s
                .output_budget_bytes
                .unwrap_or_else(|| sandbox_agent::budget::default_budget(&s.state_dir)),
            finished_ttl: std::time::Duration::from_secs(s.finished_output_retention_seconds),
        },
        budget_sweep: std::time::Duration::from_secs(s.budget_sweep_seconds),
        max_follows_per_process: s.max_follows_per_process,
        max_follows: s.max_follows,
        allow_vulnerable_runtime: s.allow_vulnerable_runtime,
    }
}

/// Where supervisors run and what they may use together (`agent.supervisorLimits`).
fn spawn_config(s: &Serve, supervisor_bin: std::path::PathBuf) -> SpawnConfig {
    SpawnConfig {
        supervisor_bin,
        namespace: match s.host_mount_ns.as_deref() {
            None => HostNamespace::Own,
            Some("runtime") => HostNamespace::Runtime(s.cri_socket.clone()),
            Some(p) => HostNamespace::Path(p.into()),
        },
        cgroup: (!s.no_supervisor_cgroup).then(|| s.supervisor_cgroup.clone()),
        cgroup_root: s.cgroup_root.clone(),
        limits: SupervisorLimits {
            memory_bytes: Some(
                s.supervisor_memory_bytes
                    .unwrap_or((64 << 20) + (4 << 20) * s.max_processes as u64),
            ),
            pids: Some(
                s.supervisor_pids
                    .unwrap_or(256 + 4 * s.max_processes as u64),
            ),
        },
    }
}

/// Metrics (aggregates only, no token) on their own listener, apart from the agent's API.
async fn serve_metrics(addr: std::net::SocketAddr, state: AppState) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr} (--metrics-listen)"))?;
    tracing::info!(listen = %listener.local_addr()?, "serving metrics");
    let metrics = sandbox_agent::server::metrics_router(state);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, metrics).await {
            tracing::warn!(error = %e, "metrics listener ended");
        }
    });
    Ok(())
}
