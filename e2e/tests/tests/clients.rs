//! e2e/suites/clients' own assertions (the clients' scenarios themselves are clients/rust/tests and
//! clients/python/tests): the `sandboxprocesses/probe` subresource's authorization and input.
use anyhow::{bail, ensure, Result};
use sandbox_e2e::manifests::{pod, sbp};
use sandbox_e2e::{with_ns, TestNs};
use serde_json::{json, Value};

/// POST of `body` to PROCESS's probe subresource as the test's client (or the user it
/// impersonates): the answer, or the refusal as text.
async fn probe(t: &TestNs, process: &str, body: Value) -> Result<Result<String, String>> {
    let path = format!(
        "/apis/subresources.sandbox.dev/v1alpha1/namespaces/{}/sandboxprocesses/{process}/probe",
        t.name
    );
    let req = http::Request::post(&path).body(serde_json::to_vec(&body)?)?;
    Ok(t.client
        .request_text(req)
        .await
        .map_err(|e| format!("{e:?}")))
}

/// A probe that must be refused; the refusal.
async fn refused(t: &TestNs, who: &str, body: Value) -> Result<String> {
    match probe(t, "probe-guard", body).await? {
        Ok(out) => bail!("{who}: accepted: {out}"),
        Err(e) => Ok(e),
    }
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/clients"]
async fn port_checks_edit_may_view_and_no_pods_exec_may_not_and_bad_input_is_named() {
    with_ns("clients-probe", |t| async move {
        t.pods([pod("work", None)]).await?;
        t.apply_sbp(sbp(
            "probe-guard",
            "work",
            json!({"command": ["sleep", "120"]}),
        ))
        .await?;
        t.until_field("probe-guard", "/status/phase", "Running", 60)
            .await?;
        let port1 = json!({"tcpSocket": {"port": 1}});
        // edit (aggregated: sandboxprocesses/probe, and pods/exec): one check, not ready on port 1
        t.kubectl(&[
            "create",
            "rolebinding",
            "probe-edit",
            "--clusterrole=edit",
            "--user=spo-probe-editor",
        ])
        .await?;
        let editor = t.as_user("spo-probe-editor").await?;
        match probe(&editor, "probe-guard", port1.clone()).await? {
            Ok(out) => ensure!(out.contains(r#""ready":false"#), "port 1 answer: {out}"),
            Err(e) => bail!("edit cannot check a port: {e}"),
        }
        // view: refused by the API server (no sandboxprocesses/probe)
        t.kubectl(&[
            "create",
            "rolebinding",
            "probe-view",
            "--clusterrole=view",
            "--user=spo-probe-viewer",
        ])
        .await?;
        let out = refused(
            &t.as_user("spo-probe-viewer").await?,
            "a viewer",
            port1.clone(),
        )
        .await?;
        ensure!(
            out.to_lowercase().contains("forbidden"),
            "viewer refused how? {out}"
        );
        // get on the object and the subresource, without pods/exec on the pod: refused by the
        // operator
        t.kubectl_apply(NO_EXEC).await?;
        let out = refused(
            &t.as_user("spo-probe-noexec").await?,
            "a user without pods/exec",
            port1,
        )
        .await?;
        ensure!(out.contains("pods/exec"), "no-exec refused how? {out}");
        // bad input is named, never reaches an agent
        let out = refused(&t, "port 0", json!({"tcpSocket": {"port": 0}})).await?;
        ensure!(
            out.contains("probe.tcpSocket.port"),
            "port 0 refused how? {out}"
        );
        let out = refused(
            &t,
            "a path with a space",
            json!({"httpGet": {"port": 80, "path": "/a b"}}),
        )
        .await?;
        ensure!(
            out.contains("probe.httpGet.path"),
            "bad path refused how? {out}"
        );
        refused(&t, "logMatch", json!({"logMatch": {"pattern": "x"}})).await?;
        Ok(())
    })
    .await;
}

const NO_EXEC: &str = "
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: probe-no-exec}
rules:
- {apiGroups: [sandbox.dev], resources: [sandboxprocesses], verbs: [get]}
- {apiGroups: [subresources.sandbox.dev], resources: [sandboxprocesses/probe], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: probe-no-exec}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: probe-no-exec}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: spo-probe-noexec}]
";
