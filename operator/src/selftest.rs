//! `sandbox-operator --self-test`: the chart's `helm test`. From a pod of the operator's image,
//! it runs one SandboxProcess in that very pod, through the installed operator, agent and
//! admission policy, and checks what a user would: the exit code, the output, the conditions,
//! and that the object deletes cleanly.
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use sandbox_api::crd::{condition, Phase, SandboxProcess, SandboxProcessSpec};

/// Everything must be done within this (the chart's test pod has no deadline of its own).
const WITHIN: Duration = Duration::from_secs(120);

/// Runs the test in pod `pod` of `namespace`; `Err` says what a user would have seen go wrong.
pub async fn run(client: Client, namespace: &str, pod: &str) -> Result<()> {
    let api: Api<SandboxProcess> = Api::namespaced(client, namespace);
    let name = format!("{pod}-selftest");
    let spec: SandboxProcessSpec = serde_json::from_value(serde_json::json!({
        "podName": pod,
        // This binary is the one executable the image has; its version is known output.
        "command": [std::env::current_exe()?.to_string_lossy(), "--version"],
        "timeoutSeconds": 60,
    }))?;
    let _ = api.delete(&name, &DeleteParams::default()).await;
    wait_gone(&api, &name).await?;
    api.create(&PostParams::default(), &SandboxProcess::new(&name, spec))
        .await
        .with_context(|| format!("creating SandboxProcess {namespace}/{name}"))?;
    let checked = wait_final(&api, &name).await.and_then(|o| check(&o));
    api.delete(&name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting SandboxProcess {namespace}/{name}"))?;
    checked?;
    wait_gone(&api, &name).await?;
    println!("ok: SandboxProcess {namespace}/{name} ran in this pod, exited 0 and was deleted");
    Ok(())
}

/// What a user would check: Exited 0, Succeeded, the binary's version in the output.
fn check(o: &SandboxProcess) -> Result<()> {
    let s = o.status.clone().unwrap_or_default();
    let code = s.exit.as_ref().map(|e| e.code);
    let succeeded = s.condition(condition::SUCCEEDED).map(|c| c.status.as_str());
    let tail = s.output.as_ref().map(|o| o.tail.as_str()).unwrap_or("");
    if s.phase != Some(Phase::Exited) || code != Some(0) || succeeded != Some("True") {
        bail!("expected Exited, exit code 0, Succeeded=True; the status is {s:#?}");
    }
    if !tail.starts_with("sandbox-operator ") {
        bail!("expected the binary's version in status.output.tail, got {tail:?}");
    }
    Ok(())
}

async fn wait_final(api: &Api<SandboxProcess>, name: &str) -> Result<SandboxProcess> {
    let until = tokio::time::Instant::now() + WITHIN;
    loop {
        let o = api.get(name).await?;
        let phase = o.status.as_ref().and_then(|s| s.phase);
        if matches!(phase, Some(Phase::Exited | Phase::Error)) {
            return Ok(o);
        }
        if tokio::time::Instant::now() >= until {
            bail!("not ended within {WITHIN:?}: {:#?}", o.status);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn wait_gone(api: &Api<SandboxProcess>, name: &str) -> Result<()> {
    let until = tokio::time::Instant::now() + WITHIN;
    while api.get_opt(name).await?.is_some() {
        if tokio::time::Instant::now() >= until {
            bail!("SandboxProcess {name} still there {WITHIN:?} after its delete");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}
