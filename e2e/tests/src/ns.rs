//! A temporary namespace per test, as linkerd's policy-test does: created with a random suffix
//! and a label, deleted at the end whatever the outcome (the operator still runs, so the
//! SandboxProcesses' finalizers are honoured first). A failed test prints the status of every
//! SandboxProcess in it, as the bash suites' `status_of` did.
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::FutureExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use sandbox_api::crd::SandboxProcess;
use sandbox_client::Sandbox;
use serde_json::json;

use crate::cmd;

/// Namespaces made here carry this label, its value the test binary's name (`suite` for
/// tests/suite.rs): e2e/suites/lib/rust.sh deletes what a killed run of that binary left.
pub const LABEL: &str = "e2e.sandbox.dev/temporary";

/// This test binary's name without cargo's hash (target/debug/deps/suite-0123abcd → suite).
fn binary() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let stem = exe.file_stem().and_then(|s| s.to_str()).unwrap_or("e2e");
    stem.rsplit_once('-')
        .map_or(stem, |(name, _)| name)
        .to_string()
}

/// The namespace a test works in, and clients bound to it.
#[derive(Clone)]
pub struct TestNs {
    pub name: String,
    pub client: Client,
    pub sandbox: Sandbox,
}

impl TestNs {
    /// Namespaced objects of any kind here.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    pub fn sbps(&self) -> Api<SandboxProcess> {
        self.api()
    }

    /// kubectl -n NAMESPACE ARGS; must succeed.
    pub async fn kubectl(&self, args: &[&str]) -> Result<String> {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        cmd::kubectl(&all).await
    }

    /// kubectl -n NAMESPACE apply -f - of a manifest (any kinds); must succeed.
    pub async fn kubectl_apply(&self, yaml: &str) -> Result<()> {
        let out = cmd::kubectl_stdin(&["-n", &self.name, "apply", "-f", "-"], yaml).await?;
        anyhow::ensure!(out.success(), "kubectl apply: {}", out.stderr);
        Ok(())
    }

    /// Runs CMD in the pod's main container (kubectl exec); its stdout.
    pub async fn in_pod(&self, pod: &str, argv: &[&str]) -> Result<String> {
        let mut all = vec!["exec", pod, "-c", "main", "--"];
        all.extend_from_slice(argv);
        self.kubectl(&all).await
    }

    /// Every SandboxProcess's status here, as YAML, for a failure's output.
    pub async fn statuses(&self) -> String {
        let Ok(list) = self.sbps().list(&ListParams::default()).await else {
            return "(the SandboxProcesses could not be listed)".into();
        };
        let mut s = String::new();
        for o in list {
            let status = serde_yaml_ng::to_string(&o.status).unwrap_or_default();
            s.push_str(&format!("--- {}\n{status}", o.name_any()));
        }
        s
    }
}

/// Runs `test` in a fresh namespace named PREFIX-xxxxx; deletes it afterwards (kept with
/// SPO_E2E_KEEP=1). A failure or a panic is reported with the namespace's statuses.
pub async fn with_ns<F, Fut>(prefix: &str, test: F)
where
    F: FnOnce(TestNs) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    ensure_deployed()
        .await
        .expect("deploying this tree's chart (e2e/deploy)");
    let t = create(prefix).await.expect("creating the test namespace");
    let outcome = AssertUnwindSafe(test(t.clone())).catch_unwind().await;
    // What failed first (a panic's message is already printed by its hook), then the statuses.
    if let Ok(Err(e)) = &outcome {
        eprintln!("{e:#}");
    }
    if !matches!(outcome, Ok(Ok(()))) {
        eprintln!("namespace {}:\n{}", t.name, t.statuses().await);
    }
    if std::env::var("SPO_E2E_KEEP").as_deref() == Ok("1") {
        eprintln!("kept: namespace {}", t.name);
    } else {
        remove(&t).await;
    }
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(_)) => panic!("the test failed (above)"),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Run alone (one `cargo test` against a running cluster, e2e/README.md), a test first deploys
/// this tree's chart when no release is in `sandbox-system` (e2e/deploy: build, images, helm; a
/// few minutes the first time), once per test binary. A bash suite has deployed what it tests,
/// or runs the operator on the host on purpose: it sets SPO_E2E_SUITE, and nothing is deployed.
async fn ensure_deployed() -> Result<()> {
    // The outcome, failure included: a failed deploy is not tried again by every test.
    static ONCE: tokio::sync::OnceCell<Result<(), String>> = tokio::sync::OnceCell::const_new();
    if std::env::var_os("SPO_E2E_SUITE").is_some() {
        return Ok(());
    }
    ONCE.get_or_init(|| async { deploy_unless_there().await.map_err(|e| format!("{e:#}")) })
        .await
        .clone()
        .map_err(anyhow::Error::msg)
}

async fn deploy_unless_there() -> Result<()> {
    let ns = crate::release::NAMESPACE;
    let selector = "app.kubernetes.io/name=sandbox-process-operator";
    let found =
        crate::cmd::kubectl(&["-n", ns, "get", "deployment", "-l", selector, "-o", "name"]).await?;
    if !found.trim().is_empty() {
        eprintln!(
            "testing the release already in {ns} ({}); run e2e/deploy to test a change",
            found.trim()
        );
        return Ok(());
    }
    eprintln!("no release in {ns}: running e2e/deploy first");
    let script = crate::repo_root().join("e2e/deploy");
    let status = tokio::process::Command::new(&script)
        .stdout(std::process::Stdio::inherit())
        .status()
        .await
        .with_context(|| format!("running {}", script.display()))?;
    anyhow::ensure!(status.success(), "{} failed: {status}", script.display());
    Ok(())
}

async fn create(prefix: &str) -> Result<TestNs> {
    let mut config = kube::Config::infer().await.context("kubeconfig")?;
    config.default_retry = false;
    let client = Client::try_from(config)?;
    let mut id = [0u8; 3];
    getrandom::fill(&mut id).map_err(|e| anyhow::anyhow!("random namespace suffix: {e}"))?;
    let suffix: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let name = format!("{prefix}-{suffix}");
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {LABEL: binary()}}
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    let sandbox = Sandbox::new(client.clone(), name.clone());
    Ok(TestNs {
        name,
        client,
        sandbox,
    })
}

/// SandboxProcesses deleted while the operator runs (their finalizers stop the processes);
/// what is left after 60 s has its finalizers dropped; then the namespace goes (not waited for).
async fn remove(t: &TestNs) {
    let api = t.sbps();
    let _ = api
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        match api.list(&ListParams::default()).await {
            Ok(l) if l.items.is_empty() => break,
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    if let Ok(left) = api.list(&ListParams::default()).await {
        for o in left {
            let drop = Patch::Merge(json!({"metadata": {"finalizers": null}}));
            let _ = api
                .patch(&o.name_any(), &PatchParams::default(), &drop)
                .await;
        }
    }
    let _ = Api::<Namespace>::all(t.client.clone())
        .delete(&t.name, &DeleteParams::background())
        .await;
}
