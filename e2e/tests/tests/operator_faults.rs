//! e2e/operator's assertions that need the host-run operator to themselves, run one at a time
//! (`rust_tests operator_faults 1`) after tests/operator.rs: a restart of the operator (its hook,
//! e2e/lib/operator-hooks.sh), and counts of the operator's metrics that any other test's status
//! writes would move.
use std::time::Duration;

use anyhow::{ensure, Result};
use sandbox_e2e::host::{hook, Host};
use sandbox_e2e::manifests::{pod, sbp, sh};
use sandbox_e2e::{cmd, field, metrics, with_ns, TestNs};
use serde_json::{json, Value};

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/operator"]
async fn operator_restarted_mid_run_adopts_without_a_second_process() {
    with_ns("opf-restart", |t| async move {
        t.pods([pod("target", None)]).await?;
        let script = "echo run >> /tmp/restart-runs; sleep 12";
        t.apply_sbp(sbp("restart", "target", sh(script, Value::Null)))
            .await?;
        let o = t
            .until_field("restart", "/status/phase", "Running", 60)
            .await?;
        let first = (field(&o, "/status/startedAt"), field(&o, "/status/pid"));
        // SIGKILL: no graceful shutdown, the Lease is left to expire.
        hook(&["restart-operator"]).await?;
        let o = t
            .until_field("restart", "/status/phase", "Exited", 60)
            .await?;
        assert_eq!(field(&o, "/status/exit/code"), "0");
        let after = (field(&o, "/status/startedAt"), field(&o, "/status/pid"));
        assert_eq!(after, first, "startedAt and pid");
        let runs = t.in_pod("target", &["cat", "/tmp/restart-runs"]).await?;
        assert_eq!(runs.lines().count(), 1, "runs: {runs:?}");
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/operator"]
async fn no_status_writes_while_nothing_changes() {
    with_ns("opf-quiet", |t| async move {
        let host = Host::from_env()?;
        t.pods([pod("target", None)]).await?;
        t.apply_sbp(sbp(
            "quiet",
            "target",
            json!({"command": ["sleep", "1004"]}),
        ))
        .await?;
        t.until_field("quiet", "/status/phase", "Running", 60)
            .await?;
        // The tree's first usage sample (taken 5 s after the start) is a change, written with
        // the next output refresh (30 s after the Running status); after it, a sleeping
        // process's usage stays the same.
        t.until("quiet", 45, "have a usage sample", |o| {
            !field(o, "/status/usage/memoryPeakBytes").is_empty()
        })
        .await?;
        // Measurement windows (counts over time), not waits for a state.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before = host.metric("sandbox_operator_status_writes_total").await?;
        tokio::time::sleep(Duration::from_secs(6)).await;
        let after = host.metric("sandbox_operator_status_writes_total").await?;
        assert_eq!(after, before, "status writes while nothing changed");
        Ok(())
    })
    .await;
}

/// Refuses updates of `sandboxprocesses/status` whose tail holds REFUSE-ME.
const REFUSE_TAIL: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: spo-e2e-refuse-tail}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [sandbox.dev], apiVersions: ["*"], operations: [UPDATE], resources: [sandboxprocesses/status]}
  validations:
  - expression: "!has(object.status.output) || !object.status.output.tail.contains('REFUSE-ME')"
    message: tail refused by e2e/operator
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: spo-e2e-refuse-tail}
spec: {policyName: spo-e2e-refuse-tail, validationActions: [Deny]}
"#;

/// A status the API server refuses for its content (here: a validating admission policy refusing
/// a tail that holds REFUSE-ME) is written withheld: final, exact exit code, the tail replaced by
/// a note saying why, a StatusWithheld Event, counted in sandbox_operator_status_writes_withheld;
/// the refused status is not sent again and again (failed writes stay put once it is final).
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/operator"]
async fn status_refused_for_its_content_is_written_withheld_once_and_says_so() {
    with_ns("opf-withheld", |t| async move {
        t.pods([pod("target", None)]).await?;
        let out = cmd::kubectl_stdin(&["apply", "-f", "-"], REFUSE_TAIL).await?;
        ensure!(out.success(), "the admission policy: {}", out.stderr);
        let outcome = withheld(&t).await;
        // The policy is the cluster's: gone whatever the outcome.
        cmd::kubectl(&[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            "spo-e2e-refuse-tail",
        ])
        .await?;
        outcome
    })
    .await;
}

async fn withheld(t: &TestNs) -> Result<()> {
    const FAILURES: &str = "sandbox_operator_status_write_failures_total";
    let host = Host::from_env()?;
    // The API server's admission learns of the policy through an informer.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let withheld0 = host
        .metric("sandbox_operator_status_writes_withheld_total")
        .await?;
    t.apply_sbp(sbp(
        "refused",
        "target",
        sh("printf REFUSE-ME; exit 3", Value::Null),
    ))
    .await?;
    let o = t
        .until("refused", 15, "exit with 3", |o| {
            field(o, "/status/phase") == "Exited" && field(o, "/status/exit/code") == "3"
        })
        .await?;
    let tail = field(&o, "/status/output/tail");
    ensure!(
        tail.contains("[withheld: the API server refused this status (422 Invalid"),
        "tail: {tail}"
    );
    assert_eq!(field(&o, "/status/output/stdoutBytes"), "9");
    let withheld = host
        .metric("sandbox_operator_status_writes_withheld_total")
        .await?;
    ensure!(
        withheld > withheld0,
        "status_writes_withheld did not grow from {withheld0}"
    );
    t.until_events("refused", &["StatusWithheld"], 10).await?;
    let failures = metrics::sum(&host.metrics().await?, FAILURES);
    // A reconcile of the final object.
    t.kubectl(&["annotate", "sbp", "refused", "e2e/poke=1"])
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let again = metrics::sum(&host.metrics().await?, FAILURES);
    assert_eq!(again, failures, "the refused status was sent again");
    Ok(())
}
