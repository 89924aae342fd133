//! e2e/suites/certs' mode cert-manager checks. No cert-manager controller can be built here (its cmd
//! modules are not served by the Go module proxy), so the test plays it exactly where it acts:
//! it writes the CA Secret and the serving Secret as cert-manager's CA Issuer does (ECDSA P-256,
//! `tls.crt`, `tls.key`, `ca.crt`, made with openssl) and moves the APIService's `caBundle` as
//! its cainjector does. e2e/suites/certs deploys the release with `certificates.mode=cert-manager`
//! first (SPO_CERTS_NS, SPO_CERTS_FULL name it).
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine;
use sandbox_e2e::manifests::{pod, sbp, sh};
use sandbox_e2e::{cmd, env, field, with_ns, TestNs};
use serde_json::json;

const APISVC: &str = "v1alpha1.subresources.sandbox.dev";
const PROCESSES_APISVC: &str = "v1alpha1.processes.sandbox.dev";

/// The release under test and a scratch directory for the key material.
struct Release {
    ns: String,
    full: String,
    dir: PathBuf,
}

struct Pair {
    cert: String,
    key: String,
}

impl Release {
    fn file(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    /// A CA as cert-manager's self-signed Issuer makes one for the chart's CA Certificate.
    async fn ca(&self, name: &str) -> Result<Pair> {
        let (crt, key) = (
            self.file(&format!("{name}.crt")),
            self.file(&format!("{name}.key")),
        );
        let cn = format!("/CN={name}");
        cmd::ok(
            "openssl",
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &crt,
                "-subj",
                &cn,
                "-days",
                "2",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        )
        .await?;
        read_pair(&crt, &key)
    }

    /// The serving certificate for the APIService's Service, issued by `ca`.
    async fn leaf(&self, name: &str, ca: &str, dns: &[String]) -> Result<Pair> {
        let (crt, key, csr) = (
            self.file(&format!("{name}.crt")),
            self.file(&format!("{name}.key")),
            self.file(&format!("{name}.csr")),
        );
        let san = format!(
            "subjectAltName={}",
            dns.iter()
                .map(|d| format!("DNS:{d}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let ext = self.file(&format!("{name}.ext"));
        std::fs::write(
            &ext,
            format!(
                "{san}\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
            extendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid\n"
            ),
        )?;
        let cn = format!("/CN={}", dns[0]);
        cmd::ok(
            "openssl",
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &cn,
            ],
        )
        .await?;
        let (ca_crt, ca_key) = (
            self.file(&format!("{ca}.crt")),
            self.file(&format!("{ca}.key")),
        );
        cmd::ok(
            "openssl",
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_crt,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                &ext,
                "-out",
                &crt,
            ],
        )
        .await?;
        read_pair(&crt, &key)
    }

    /// Writes a Secret as cert-manager does (its own field manager, the three keys).
    async fn secret(&self, name: &str, cert: &Pair, ca: &Pair) -> Result<()> {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let s = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": self.ns},
            "data": {"tls.crt": b64(&cert.cert), "tls.key": b64(&cert.key), "ca.crt": b64(&ca.cert)}});
        let out = cmd::kubectl_stdin(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=cert-manager-certificates-issuing",
                "-f",
                "-",
            ],
            &s.to_string(),
        )
        .await?;
        if !out.success() {
            bail!("writing Secret {name}: {}", out.stderr);
        }
        Ok(())
    }

    /// cainjector's move: the APIServices and the quantity webhook trust `ca`.
    async fn inject(&self, ca: &Pair) -> Result<()> {
        let b = base64::engine::general_purpose::STANDARD.encode(&ca.cert);
        let patch = json!({"spec": {"caBundle": b}}).to_string();
        // Both APIServices of the one server (cert-manager's annotation is on each).
        for svc in [APISVC, PROCESSES_APISVC] {
            cmd::kubectl(&["patch", "apiservice", svc, "--type=merge", "-p", &patch]).await?;
        }
        let hook = format!("{}-quantities", self.full);
        let patch = json!([{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": b}]);
        let patch = patch.to_string();
        let args = [
            "patch",
            "mutatingwebhookconfiguration",
            &hook,
            "--type=json",
            "-p",
            &patch,
        ];
        cmd::kubectl(&args).await?;
        Ok(())
    }

    /// The CAs the operator published for the agents.
    async fn agent_bundle(&self) -> Result<String> {
        let cm = format!("{}-ca-bundle", self.full);
        cmd::kubectl(&[
            "-n",
            &self.ns,
            "get",
            "configmap",
            &cm,
            "-o",
            r"jsonpath={.data.ca\.crt}",
        ])
        .await
    }

    /// Waits (30 s) until the agents' bundle holds each of `cas` (by content).
    async fn bundle_holds(&self, cas: &[&Pair]) -> Result<()> {
        let key = |s: &str| s.split_whitespace().collect::<String>();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let b = key(&self.agent_bundle().await.unwrap_or_default());
            if cas.iter().all(|c| b.contains(&key(&c.cert))) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the agents' bundle lacks a CA after 30 s: {} CA(s) in it",
                    b.matches("BEGINCERTIFICATE").count()
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

fn read_pair(crt: &str, key: &str) -> Result<Pair> {
    Ok(Pair {
        cert: std::fs::read_to_string(crt).with_context(|| crt.to_string())?,
        key: std::fs::read_to_string(key).with_context(|| key.to_string())?,
    })
}

/// A process on node 1 ends with its exact code: the operator reached the agent over mutual
/// TLS (agent certificate trusted by the operator, the operator's client certificate by the
/// agent).
async fn runs(t: &TestNs, name: &str) -> Result<()> {
    t.apply_sbp(sbp(
        name,
        "work",
        sh(&format!("echo {name}; exit 7"), json!({})),
    ))
    .await?;
    let o = t
        .until_field(name, "/status/phase", "Exited", 90)
        .await
        .with_context(|| format!("{name}: the operator could not run it on the agent"))?;
    let got = field(&o, "/status/exit/code");
    if got != "7" {
        bail!("{name}: exit code {got}");
    }
    Ok(())
}

/// A field (jsonpath) of the release's agent pod on node 1 (`extra` narrows the field selector).
async fn node1_agent(r: &Release, extra: &str, jsonpath: &str) -> Result<String> {
    let sel = format!(
        "app.kubernetes.io/component=agent,app.kubernetes.io/instance={}",
        r.full
    );
    let field_sel = format!("spec.nodeName={}{extra}", sandbox_e2e::node1());
    let out = format!("jsonpath={{.items[0].{jsonpath}}}");
    cmd::kubectl(&[
        "-n",
        &r.ns,
        "get",
        "pods",
        "-l",
        &sel,
        "--field-selector",
        &field_sel,
        "-o",
        &out,
    ])
    .await
}

/// Issuer of the certificate the agent on node 1 serves, as openssl prints it.
async fn agent_issuer(r: &Release) -> Result<String> {
    let ip = node1_agent(r, ",status.phase=Running", "status.podIP").await?;
    let script = format!(
        "openssl s_client -connect {ip}:9443 </dev/null 2>/dev/null | openssl x509 -noout -issuer"
    );
    Ok(cmd::ok("sh", &["-c", &script]).await?.trim().to_string())
}

/// The agent on node 1 replaced with no certificate of its own: it asks for one by a CSR.
async fn new_agent(r: &Release) -> Result<()> {
    let name = node1_agent(r, "", "metadata.name").await?;
    // Node 1 shares this host's filesystem: the agent's state dir (chart default) is here.
    let _ = std::fs::remove_dir_all(Path::new("/var/lib/sandbox-agent/tls"));
    cmd::kubectl(&[
        "-n",
        &r.ns,
        "delete",
        "pod",
        &name,
        "--wait=true",
        "--timeout=60s",
    ])
    .await?;
    let ds = format!("ds/{}-agent", r.full);
    cmd::kubectl(&["-n", &r.ns, "rollout", "status", &ds, "--timeout=120s"]).await?;
    Ok(())
}

/// The APIService's Service names, as the chart's serving Certificate lists them.
async fn serving_dns(r: &Release) -> Result<Vec<String>> {
    let svc = cmd::kubectl(&[
        "get",
        "apiservice",
        APISVC,
        "-o",
        "jsonpath={.spec.service.name}",
    ])
    .await?;
    Ok(vec![
        format!("{svc}.{}.svc", r.ns),
        format!("{svc}.{}", r.ns),
        svc,
    ])
}

/// The subresource API answers a log read (the API server trusts the serving certificate).
async fn log_served(t: &TestNs, name: &str, secs: u64) -> Result<()> {
    let path = format!(
        "/apis/subresources.sandbox.dev/v1alpha1/namespaces/{}/sandboxprocesses/{name}/log",
        t.name
    );
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match cmd::kubectl(&["get", "--raw", &path]).await {
            Ok(out) if out.contains(name) => return Ok(()),
            Ok(out) if Instant::now() > deadline => bail!("log of {name}: {out}"),
            Err(e) if Instant::now() > deadline => bail!("log of {name}: {e:#}"),
            _ => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/certs"]
async fn the_release_rerendered_for_cert_manager_runs_the_operator_as_the_certificates_reader() {
    let (ns, full) = (env("SPO_CERTS_NS"), env("SPO_CERTS_FULL"));
    let deploy = format!("{full}-operator");
    let args = cmd::kubectl(&[
        "-n",
        &ns,
        "get",
        "deploy",
        &deploy,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].args}",
    ])
    .await
    .unwrap();
    assert!(
        args.contains("--certificates=external"),
        "the operator does not run with --certificates=external: {args}"
    );
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/certs"]
async fn cert_manager_ca_renewal_keeps_the_old_ca_trusted_until_every_leaf_has_rolled() {
    with_ns("certs-cm", |t| async move {
        let dir = std::env::temp_dir().join(format!("spo-{}", t.name));
        std::fs::create_dir_all(&dir)?;
        let r = Release {
            ns: env("SPO_CERTS_NS"),
            full: env("SPO_CERTS_FULL"),
            dir,
        };
        let (ca_secret, serving) = (format!("{}-ca", r.full), format!("{}-serving", r.full));
        let dns = serving_dns(&r).await?;
        t.pods([pod("work", None)]).await?;
        // cert-manager issues the CA and the serving certificate; cainjector injects the CA.
        let ca1 = r.ca("ca1").await?;
        let leaf1 = r.leaf("leaf1", "ca1", &dns).await?;
        r.secret(&ca_secret, &ca1, &ca1).await?;
        r.secret(&serving, &leaf1, &ca1).await?;
        r.inject(&ca1).await?;
        r.bundle_holds(&[&ca1]).await?;
        runs(&t, "on-ca1").await?;
        log_served(&t, "on-ca1", 30).await?;
        // cert-manager renews the CA (a new key) at once; the serving certificate keeps ca1
        // until its own renewal, agents and replicas keep their certificates.
        let ca2 = r.ca("ca2").await?;
        r.secret(&ca_secret, &ca2, &ca2).await?;
        r.bundle_holds(&[&ca1, &ca2]).await?;
        runs(&t, "after-renewal").await?;
        // A new agent asks for its certificate: signed by ca2, which the replicas must trust.
        new_agent(&r).await?;
        let issuer = agent_issuer(&r).await?;
        println!("note: the new agent's certificate: {issuer}");
        if !issuer.contains("ca2") {
            bail!("the new agent's certificate is not from the renewed CA: {issuer}");
        }
        runs(&t, "new-agent").await?;
        // A new operator replica: its client certificate from ca2, which the agents must trust.
        let deploy = format!("deploy/{}-operator", r.full);
        cmd::kubectl(&["-n", &r.ns, "rollout", "restart", &deploy]).await?;
        cmd::kubectl(&["-n", &r.ns, "rollout", "status", &deploy, "--timeout=180s"]).await?;
        runs(&t, "new-operator").await?;
        // The serving certificate renewed under ca2; cainjector moves the caBundle.
        let leaf2 = r.leaf("leaf2", "ca2", &dns).await?;
        r.secret(&serving, &leaf2, &ca2).await?;
        r.inject(&ca2).await?;
        log_served(&t, "new-operator", 30).await?;
        runs(&t, "on-ca2").await?;
        // ca1 stays trusted until it expires: certificates from it may live on (other nodes'
        // agents, until they renew).
        r.bundle_holds(&[&ca1, &ca2]).await?;
        let _ = std::fs::remove_dir_all(&r.dir);
        Ok(())
    })
    .await;
}
