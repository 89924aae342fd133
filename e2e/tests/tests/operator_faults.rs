//! e2e/suites/operator's assertions that need the host-run operator to themselves, run one at a time
//! (`rust_tests operator_faults 1`) after tests/operator.rs: a restart of the operator (its hook,
//! e2e/suites/lib/operator-hooks.sh), and counts of the operator's metrics that any other test's status
//! writes would move.
use std::time::Duration;

use anyhow::{ensure, Result};
use sandbox_e2e::host::{hook, Host};
use sandbox_e2e::manifests::{pod, sbp, sh};
use sandbox_e2e::{cmd, field, metrics, with_ns, TestNs};
use serde_json::{json, Value};

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
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
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
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
    message: tail refused by e2e/suites/operator
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
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
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

/// issue 47: a rollback must not start a process without what a newer release's field asked.
/// A newer release is played by a CRD with one more spec field (`futureRestriction`); an object
/// sets it; the CRD goes back (the API server then prunes the field from the object it serves);
/// once its pod exists the process is refused, naming the field, and never runs.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn a_field_of_a_newer_release_refuses_the_start_after_a_rollback() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, PostParams};
    with_ns("opf-rollback", |t| async move {
        let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
        let name = "sandboxprocesses.sandbox.dev";
        let orig = crds.get(name).await?;
        // The operator may write the CRD too (at its start): a replace that lost the race is
        // tried again on the newest version.
        let replace = |with_field: bool| {
            let (crds, orig) = (crds.clone(), orig.clone());
            async move {
                for _ in 0..20 {
                    let mut crd = crds.get(name).await?;
                    crd.spec = orig.spec.clone();
                    if with_field {
                        let v = &mut crd.spec.versions[0];
                        let root = v
                            .schema
                            .as_mut()
                            .unwrap()
                            .open_api_v3_schema
                            .as_mut()
                            .unwrap();
                        let spec = root.properties.as_mut().unwrap().get_mut("spec").unwrap();
                        spec.properties.as_mut().unwrap().insert(
                            "futureRestriction".into(),
                            serde_json::from_value(json!({"type": "boolean"}))?,
                        );
                    }
                    match crds.replace(name, &PostParams::default(), &crd).await {
                        Err(kube::Error::Api(e)) if e.code == 409 => {
                            tokio::time::sleep(Duration::from_millis(200)).await
                        }
                        r => return r.map(|_| ()).map_err(anyhow::Error::from),
                    }
                }
                anyhow::bail!("the CRD kept changing under the replace")
            }
        };
        replace(true).await?;
        let applied = async {
            let o = sbp(
                "guarded",
                "later",
                sh("touch /tmp/guarded-ran", Value::Null),
            );
            let mut o = o;
            o["spec"]["futureRestriction"] = json!(true);
            // The new schema is served within moments: until then the field is pruned, or the
            // server-side apply is refused for it ("field not declared in schema", seen in CI).
            for _ in 0..50 {
                match t.apply_sbp(o.clone()).await {
                    Err(e) if format!("{e:#}").contains("field not declared in schema") => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                    r => r?,
                }
                let got: Value = serde_json::from_str(
                    &t.kubectl(&["get", "sbp", "guarded", "-o", "json"]).await?,
                )?;
                if got["spec"]["futureRestriction"] == json!(true) {
                    return anyhow::Ok(());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            anyhow::bail!("the newer schema was never served")
        }
        .await;
        // The rollback of the CRD, whatever happened above.
        replace(false).await?;
        applied?;
        for i in 0.. {
            let got: Value =
                serde_json::from_str(&t.kubectl(&["get", "sbp", "guarded", "-o", "json"]).await?)?;
            if got["spec"].get("futureRestriction").is_none() {
                break;
            }
            ensure!(i < 50, "the field was never pruned: {got}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        t.pods([pod("later", None)]).await?;
        let o = t
            .until_field("guarded", "/status/phase", "Error", 60)
            .await?;
        let message = field(&o, "/status/error/message");
        ensure!(
            message.starts_with("spec.futureRestriction: set by a newer release"),
            "{message}"
        );
        let ran = t
            .in_pod(
                "later",
                &["sh", "-c", "ls /tmp/guarded-ran 2>/dev/null; true"],
            )
            .await?;
        ensure!(ran.is_empty(), "the refused process ran");
        println!("note: refused after the rollback: {message}");
        Ok(())
    })
    .await;
}

/// Issue 48, item 6: a running process whose object is deleted while no operator is up, with no
/// finalizer (not added yet, or removed): the operator that takes the lease stops and forgets it
/// at once, not at its next periodic sweep (set to 5 minutes here): within 10 s of its return.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/operator"]
async fn deleted_while_no_operator_was_up_is_stopped_when_one_returns() {
    with_ns("opf-gone", |t| async move {
        let host = Host::from_env()?;
        t.pods([pod("target", None)]).await?;
        t.apply_sbp(sbp("gone", "target", sh("exec sleep 302", Value::Null)))
            .await?;
        let o = t
            .until_field("gone", "/status/phase", "Running", 60)
            .await?;
        let uid = field(&o, "/metadata/uid");
        hook(&["stop-operator"]).await?;
        let checked = async {
            let no_finalizer = r#"{"metadata":{"finalizers":null}}"#;
            t.kubectl(&["patch", "sbp", "gone", "--type=merge", "-p", no_finalizer])
                .await?;
            t.kubectl(&["delete", "sbp", "gone", "--wait=true", "--timeout=30s"])
                .await?;
            let args = t.pod_args("target").await?;
            ensure!(
                args.iter().any(|a| a == "sleep 302"),
                "it runs on while no operator is up: {args:?}"
            );
            let back = tokio::time::Instant::now();
            hook(&["start-operator", "300"]).await?;
            let mut code = host.agent_process_status(&uid).await?;
            while code != 404 && back.elapsed() < Duration::from_secs(10) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                code = host.agent_process_status(&uid).await?;
            }
            let took = back.elapsed();
            ensure!(
                code == 404,
                "the agent still holds {uid} (HTTP {code}) {took:?} after the operator's return"
            );
            let args = t.pod_args("target").await?;
            ensure!(
                !args.iter().any(|a| a == "sleep 302"),
                "the process still runs in the pod: {args:?}"
            );
            println!("note: stopped and forgotten {took:?} after the operator's return");
            Ok(())
        }
        .await;
        // The suite's operator again (its usual sweep), whatever the outcome.
        hook(&["restart-operator"]).await?;
        checked
    })
    .await;
}
