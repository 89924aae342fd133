//! `sandbox-operator`: the SandboxProcess controller.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kube::Client;
use sandbox_operator::agent::{discovery, trust, AgentClient, Agents};
use sandbox_operator::aggregated::{certs, processes, subresources};
use sandbox_operator::lease::{LeaderElector, LeaseConfig};
use sandbox_operator::metrics::{self, Metrics};
use sandbox_operator::reconcile::context::Settings;
use sandbox_operator::reconcile::controller;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{error, info};

#[derive(Parser, Debug)]
#[command(version, about = "SandboxProcess controller")]
struct Args {
    /// One agent URL for every node (host-run tests on a single node), instead of discovering
    /// the agent pods.
    #[arg(long, env = "SANDBOX_AGENT_URL")]
    agent_url: Option<String>,
    /// Bearer token for the agents: a projected ServiceAccount token of audience `sandbox-agent`.
    #[arg(long, default_value = "/var/run/secrets/sandbox.dev/agent-token/token")]
    agent_token_file: PathBuf,
    /// Label selector of this release's agent pods (in `--namespace`).
    #[arg(long, default_value = sandbox_operator::agent::AGENT_SELECTOR)]
    agent_selector: String,
    /// Port of the agent API on the agent pods.
    #[arg(long, default_value_t = 9443)]
    agent_port: u16,
    /// The agents' ServiceAccount: only its pod-bound requests for agent certificates are signed.
    #[arg(long, default_value = "sandbox-process-operator-agent")]
    agent_service_account: String,
    /// ConfigMap (key ca.crt) the leader keeps the CA bundle in, for the agents.
    #[arg(long, default_value = "sandbox-process-operator-ca-bundle")]
    agent_bundle_configmap: String,
    /// Namespace of the operator: its agent pods live here.
    #[arg(long, env = "POD_NAMESPACE", default_value = "sandbox-system")]
    namespace: String,
    /// This replica's name in the Lease and in Events.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Reconciles running at once.
    #[arg(long, default_value_t = 16)]
    concurrency: u16,
    /// Seconds an agent may be unreachable before the status reports AgentUnavailable or
    /// ProcessLost.
    #[arg(long, default_value_t = 30)]
    agent_grace_seconds: u64,
    /// Seconds between two comparisons of the agents' processes with the objects; a process
    /// whose object is missing in two in a row is stopped and forgotten.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86400))]
    orphan_sweep_seconds: u64,
    /// Most live (not ended) `processes` per namespace; a create beyond it is refused (429).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    processes_per_namespace: u64,
    /// Seconds an ended `processes` object is kept (its record and output on its node) when its
    /// spec sets no `ttlSecondsAfterFinished`.
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(0..=i32::MAX as u64))]
    processes_ttl_seconds: u64,
    /// Leader election through one Lease per cluster: every operator of the cluster (replicas,
    /// other releases, one started by hand) must share it, so that only one acts. Turn off only
    /// where no other operator can run.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    #[arg(long, default_value = "sandboxprocesses.sandbox.dev")]
    lease_name: String,
    /// Namespace of the Lease: the same for every operator of the cluster.
    #[arg(long, default_value = "kube-system")]
    lease_namespace: String,
    #[arg(long, default_value_t = 15)]
    lease_duration_seconds: u64,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
    /// Serve the subresource API (`sandboxprocesses/log`, `/signal`, reached through the API
    /// server's aggregation layer) on this address; off when unset.
    #[arg(long)]
    subresources_addr: Option<SocketAddr>,
    /// The Secret (in `--namespace`) with the subresource API's serving certificate (`tls.crt`,
    /// `tls.key`), re-read while running.
    #[arg(long, default_value = "sandbox-process-operator-serving")]
    serving_secret: String,
    /// `self`: the leader issues and renews the serving certificate from its own CA (kept in
    /// `--ca-secret`) and publishes the CA bundle into each `--api-service`; `external`: another
    /// issuer (cert-manager) writes the serving Secret and the APIService's caBundle.
    #[arg(long, value_enum, default_value_t = CertMode::SelfSigned)]
    certificates: CertMode,
    #[arg(long, default_value = "sandbox-process-operator-ca")]
    ca_secret: String,
    /// The APIServices served here (comma-separated): each gets the CA bundle.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "v1alpha1.subresources.sandbox.dev,v1alpha1.processes.sandbox.dev"
    )]
    api_service: Vec<String>,
    /// Where the quantity webhook listens (TLS with the subresource API's serving certificate,
    /// no client certificate); none without it. Needs --subresources-addr.
    #[arg(long)]
    webhook_addr: Option<SocketAddr>,
    /// The MutatingWebhookConfiguration served by the subresource API's server, whose
    /// `caBundle` the operator publishes (`self` mode); none when empty.
    #[arg(long, default_value = "")]
    mutating_webhook: String,
    /// DNS names of the serving certificate (the Service's), comma-separated.
    #[arg(long, value_delimiter = ',')]
    serving_dns: Vec<String>,
    /// Validity of the CA (`self`): a duration such as `8760h`, `90m`, `600s`.
    #[arg(long, default_value = "8760h", value_parser = duration)]
    ca_validity: Duration,
    /// Validity of the serving certificate (`self`); renewed at 2/3 of it.
    #[arg(long, default_value = "2160h", value_parser = duration)]
    leaf_validity: Duration,
    /// The chart's `helm test`: run one SandboxProcess in this pod (POD_NAME in POD_NAMESPACE)
    /// through the installed release, check its end, delete it, and exit (0: passed).
    #[arg(long)]
    self_test: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum CertMode {
    #[value(name = "self")]
    SelfSigned,
    External,
}

/// `<number><s|m|h|d>`: what Helm values and Go write for durations (one unit).
fn duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.split_at(s.len().saturating_sub(1));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: expected a number and a unit (s, m, h, d), e.g. 90m"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(format!("{s:?}: the unit must be s, m, h or d")),
    };
    match n.checked_mul(secs) {
        Some(t) if t >= 60 => Ok(Duration::from_secs(t)),
        _ => Err(format!(
            "{s:?}: must be at least 60s and at most u64 seconds"
        )),
    }
}

fn identity(args: &Args) -> String {
    args.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "sandbox-operator".into());
        format!("{host}-{}", std::process::id())
    })
}

async fn signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => info!("SIGTERM"),
        _ = tokio::signal::ctrl_c() => info!("SIGINT"),
    }
}

fn main() -> anyhow::Result<()> {
    // Before the runtime's threads exist: each takes an arena as it first allocates.
    sandbox_memory::tune();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve())
}

async fn serve() -> anyhow::Result<()> {
    let args = Args::parse();
    check(&args)?;
    init_logging(args.log_json);
    if args.self_test {
        let pod = args
            .identity
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("--self-test needs POD_NAME"))?;
        let client = Client::try_default().await?;
        return sandbox_operator::selftest::run(client, &args.namespace, pod).await;
    }
    let identity = identity(&args);
    let client = Client::try_default().await?;
    let metrics = Arc::new(Metrics::new());
    serve_metrics(args.metrics_addr, metrics.clone());
    sandbox_memory::spawn(sandbox_memory::EVERY);
    let (agents, changed) = agent_registry(&args, &client, &identity)?;
    // Every replica watches every agent: the process API serves from those watches; the
    // controller hears of changes only while this replica leads.
    let processes = processes::Store::new(epoch_ms());
    agents.set_sink(processes.clone());
    tokio::spawn(agents.clone().run_watches());
    if let Some(addr) = args.subresources_addr {
        let at = Serving {
            addr,
            agents: agents.clone(),
            processes,
        };
        serve_subresources(&args, client.clone(), at, metrics.clone());
    }
    // Shutdown: a signal, or losing the lease.
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let elector = args
        .leader_elect
        .then(|| elector(&args, &client, &identity));
    let lost_lease = Arc::new(AtomicBool::new(false));
    if let Some(e) = &elector {
        info!(identity = %identity, lease = %args.lease_name, namespace = %args.lease_namespace, "waiting for the leader lease");
        tokio::select! {
            _ = e.acquire() => {}
            _ = signal() => return Ok(()),
        }
        hold_lease(e.clone(), stop_tx.clone(), lost_lease.clone());
    }
    metrics.set_leader(true);
    metrics.ready.store(true, Ordering::Relaxed);
    let leader_tasks = leader_tasks(&args, &client);
    tokio::spawn(async move {
        signal().await;
        let _ = stop_tx.send(true);
    });
    let shutdown = async move {
        let _ = stop_rx.wait_for(|s| *s).await;
    };
    let settings = settings(&args, identity);
    controller::run(client, settings, agents, changed, metrics.clone(), shutdown).await?;
    for t in leader_tasks {
        t.abort();
    }
    step_down(&metrics, elector.as_deref(), &lost_lease).await;
    Ok(())
}

/// Flags that only make sense together.
fn check(args: &Args) -> anyhow::Result<()> {
    if args.subresources_addr.is_some()
        && args.certificates == CertMode::SelfSigned
        && args.serving_dns.is_empty()
    {
        anyhow::bail!("--serving-dns: required with --certificates=self (the Service's DNS names)");
    }
    Ok(())
}

/// The agent registry the controller and the subresource API share, and the exec ids whose
/// record changed (the controller's trigger). Agents found by their pods are reached over TLS
/// with our CA, kept by `trust::keep`; a fixed `--agent-url` is for host-run tests and plain
/// HTTP.
fn agent_registry(
    args: &Args,
    client: &Client,
    identity: &str,
) -> anyhow::Result<(Arc<Agents>, mpsc::UnboundedReceiver<String>)> {
    let agent_client = if args.agent_url.is_none() {
        let c = AgentClient::tls(args.agent_token_file.clone(), args.namespace.clone());
        tokio::spawn(trust::keep(
            client.clone(),
            trust_of(args, identity),
            c.clone(),
        ));
        c
    } else {
        AgentClient::plain(args.agent_token_file.clone())?
    };
    let pods = args
        .agent_url
        .is_none()
        .then(|| discovery::watch_agent_pods(client, &args.namespace, &args.agent_selector));
    let (tx, rx) = mpsc::unbounded_channel();
    let agents = Agents::new(
        agent_client,
        args.agent_url.clone(),
        pods,
        args.agent_port,
        tx,
    );
    Ok((agents, rx))
}

/// Renews the lease while this replica leads; on losing it, says so and asks to stop.
fn hold_lease(elector: Arc<LeaderElector>, stop: watch::Sender<bool>, lost: Arc<AtomicBool>) {
    tokio::spawn(async move {
        elector.hold().await;
        lost.store(true, Ordering::SeqCst);
        let _ = stop.send(true);
    });
}

/// What the leader alone runs: it issues certificates (two replicas would make two CAs), signs
/// the agents' requests, and publishes the bundle the agents verify our client certificates
/// with.
fn leader_tasks(args: &Args, client: &Client) -> Vec<JoinHandle<()>> {
    let agent_tls = args.agent_url.is_none();
    let needs_ca = args.subresources_addr.is_some() || agent_tls;
    let mut tasks = Vec::new();
    if needs_ca && args.certificates == CertMode::SelfSigned {
        tasks.push(tokio::spawn(certs::issue_forever(
            client.clone(),
            issuing(args),
        )));
    } else if needs_ca {
        tasks.push(tokio::spawn(certs::mirror_forever(
            client.clone(),
            issuing(args),
        )));
    }
    if agent_tls {
        tasks.push(tokio::spawn(certs::signer::sign_forever(
            client.clone(),
            signing(args),
        )));
    }
    tasks
}

/// After the controller stopped: not ready any more; a lost lease exits at once (another
/// replica leads already), else the lease is handed back for the next one.
async fn step_down(metrics: &Metrics, elector: Option<&LeaderElector>, lost_lease: &AtomicBool) {
    metrics.set_leader(false);
    metrics.ready.store(false, Ordering::Relaxed);
    if lost_lease.load(Ordering::SeqCst) {
        error!("lost the leader lease; exiting");
        std::process::exit(1);
    }
    if let Some(e) = elector {
        e.release().await;
    }
    info!("stopped");
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,kube=warn,hyper=warn".into());
    if json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
}

fn serve_metrics(addr: SocketAddr, m: Arc<Metrics>) {
    tokio::spawn(async move {
        if let Err(e) = metrics::serve(addr, m).await {
            error!(error = %e, %addr, "metrics endpoint");
        }
    });
}

/// Every replica serves the subresource API, leader or not: it only reads.
/// This replica's start, in milliseconds: the epoch of its `processes` resourceVersions.
fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_millis() as u64)
}

/// What the extension API server serves, and where.
struct Serving {
    addr: SocketAddr,
    agents: Arc<Agents>,
    processes: Arc<processes::Store>,
}

fn serve_subresources(args: &Args, client: Client, at: Serving, metrics: Arc<Metrics>) {
    let Serving {
        addr,
        agents,
        processes: store,
    } = at;
    let per_namespace = args.processes_per_namespace as usize;
    let (ttl, grace) = (
        args.processes_ttl_seconds,
        Duration::from_secs(args.agent_grace_seconds),
    );
    let (namespace, secret) = (args.namespace.clone(), args.serving_secret.clone());
    let webhook = args.webhook_addr;
    // The certificate served, whoever issued it: its expiry is what an alert must see.
    let served = move |pem: &str| {
        metrics.certificate_expires("serving", sandbox_operator::pki::authority::not_after(pem))
    };
    tokio::spawn(async move {
        let (tls, request_headers) =
            certs::reload::serving(client.clone(), namespace, secret, served).await;
        let server = Arc::new(subresources::Server {
            client,
            agents,
            request_headers,
            processes: Some(store.clone()),
        });
        let api = processes::Api::new(server.clone(), store, per_namespace);
        tokio::spawn(processes::keep::run(api.clone(), ttl, grace));
        let more = processes::router(api);
        if let Some(addr) = webhook {
            let tls = tls.clone();
            tokio::spawn(async move {
                if let Err(e) = subresources::run_webhook(addr, tls).await {
                    error!(error = %e, %addr, "quantity webhook stopped");
                    std::process::exit(1);
                }
            });
        }
        if let Err(e) = subresources::run(server, more, addr, tls).await {
            error!(error = %e, %addr, "subresource API stopped");
            std::process::exit(1);
        }
    });
}

fn elector(args: &Args, client: &Client, identity: &str) -> Arc<LeaderElector> {
    Arc::new(LeaderElector::new(
        client.clone(),
        &args.lease_namespace,
        LeaseConfig {
            name: args.lease_name.clone(),
            // The release's namespace too: the holder seen by a standby names the release.
            identity: format!("{}/{identity}", args.namespace),
            duration: Duration::from_secs(args.lease_duration_seconds.max(2)),
            renew_every: Duration::from_secs((args.lease_duration_seconds / 3).max(1)),
        },
    ))
}

fn issuing(args: &Args) -> certs::Issuing {
    certs::Issuing {
        namespace: args.namespace.clone(),
        ca_secret: args.ca_secret.clone(),
        serving_secret: args.serving_secret.clone(),
        api_services: if args.subresources_addr.is_some() {
            args.api_service.clone()
        } else {
            vec![]
        },
        webhook: (args.subresources_addr.is_some() && !args.mutating_webhook.is_empty())
            .then(|| args.mutating_webhook.clone()),
        // Without the subresource API the serving certificate is only the CA's companion (its
        // issuer tells the replicas which CA is out): any stable name does.
        dns: if args.serving_dns.is_empty() {
            vec![format!("{}.{}.svc", args.serving_secret, args.namespace)]
        } else {
            args.serving_dns.clone()
        },
        agent_bundle: args.agent_bundle_configmap.clone(),
        validity: sandbox_operator::pki::authority::Validity {
            ca: args.ca_validity,
            leaf: args.leaf_validity,
        },
    }
}

fn signing(args: &Args) -> certs::signer::Signing {
    certs::signer::Signing {
        namespace: args.namespace.clone(),
        agent_user: format!(
            "system:serviceaccount:{}:{}",
            args.namespace, args.agent_service_account
        ),
        agent_selector: args.agent_selector.clone(),
        ca_secret: args.ca_secret.clone(),
        external_bundle: external_bundle(args),
        validity: args.leaf_validity,
    }
}

/// `external` certificates: the agents' bundle the operator keeps every CA in (cert-manager
/// replaces its CA at once), which the signer and the replicas wait on.
fn external_bundle(args: &Args) -> Option<String> {
    (args.certificates == CertMode::External).then(|| args.agent_bundle_configmap.clone())
}

fn trust_of(args: &Args, identity: &str) -> trust::Trust {
    trust::Trust {
        namespace: args.namespace.clone(),
        ca_secret: args.ca_secret.clone(),
        serving_secret: args.serving_secret.clone(),
        external_bundle: external_bundle(args),
        identity: format!("sandbox-operator {}/{identity}", args.namespace),
        validity: args.leaf_validity,
    }
}

fn settings(args: &Args, identity: String) -> Settings {
    Settings {
        agent_grace: Duration::from_secs(args.agent_grace_seconds),
        concurrency: args.concurrency.max(1),
        instance: identity,
        orphan_sweep: Duration::from_secs(args.orphan_sweep_seconds),
    }
}
