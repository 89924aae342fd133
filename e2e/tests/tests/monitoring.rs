//! The chart's monitoring, proven with a real Prometheus (Debian's, on the host): it scrapes the
//! release's operator and every agent, loads the chart's PrometheusRule, and after a workload
//! every query of the chart's Grafana dashboard returns data and every alert rule evaluates.
//! Run by e2e/suites/suite (`rust_tests monitoring 1`).
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use sandbox_e2e::manifests::{pod, sbp, sh};
use sandbox_e2e::{cmd, release, with_ns};
use serde_json::{json, Value};

/// Where the job names match what the chart's ServiceMonitor/PodMonitor give Prometheus.
const OPERATOR_JOB: &str = "sandbox-process-operator-operator-metrics";
const AGENT_JOB: &str = "sandbox-system/sandbox-process-operator-agent";

fn chart() -> PathBuf {
    sandbox_e2e::repo_root().join("charts/sandbox-process-operator")
}

/// `ip:port` of each pod's container port named `metrics`.
fn targets(pods: &[Pod]) -> Result<Vec<String>> {
    pods.iter()
        .map(|p| {
            let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
            let port = p
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.ports.as_ref())
                .and_then(|ps| ps.iter().find(|p| p.name.as_deref() == Some("metrics")))
                .map(|p| p.container_port);
            match (ip, port) {
                (Some(ip), Some(port)) => Ok(format!("{ip}:{port}")),
                _ => bail!("pod {:?} has no IP or metrics port", p.metadata.name),
            }
        })
        .collect()
}

/// The chart's alert rules as a Prometheus rules file (the PrometheusRule's `spec`).
async fn rules_file(dir: &Path) -> Result<PathBuf> {
    let chart = chart();
    let out = cmd::ok(
        "helm",
        &[
            "template",
            "sandbox-process-operator",
            chart.to_str().unwrap(),
            "-n",
            release::NAMESPACE,
            "--kube-version",
            "1.34.4",
            "--set",
            "metrics.prometheusRule.enabled=true",
        ],
    )
    .await?;
    let spec = serde_yaml_docs(&out)
        .into_iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .context("no PrometheusRule rendered")?["spec"]
        .clone();
    let path = dir.join("rules.json");
    std::fs::write(&path, serde_json::to_vec(&spec)?)?;
    Ok(path)
}

fn serde_yaml_docs(text: &str) -> Vec<Value> {
    text.split("\n---")
        .filter_map(|d| serde_yaml_ng::from_str::<Value>(d).ok())
        .filter(|v| v.is_object())
        .collect()
}

/// Every `expr` of the dashboard, with Grafana's variables made concrete.
fn dashboard_queries() -> Result<Vec<(String, String)>> {
    let path = chart().join("files/dashboards/sandbox-process-operator.json");
    let d: Value = serde_json::from_slice(&std::fs::read(&path).context("the dashboard")?)?;
    let mut out = vec![];
    let panels = d["panels"].as_array().context("no panels")?;
    for p in panels {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(e) = t["expr"].as_str() {
                out.push((p["title"].as_str().unwrap_or("?").to_string(), concrete(e)));
            }
        }
    }
    ensure!(!out.is_empty(), "the dashboard has no queries");
    Ok(out)
}

/// Grafana's interval variables as a short window; any other `$var` as "everything".
fn concrete(expr: &str) -> String {
    let mut e = expr
        .replace("$__rate_interval", "1m")
        .replace("$__interval", "1m")
        .replace("$__range", "5m");
    while let Some(i) = e.find('$') {
        let end = e[i + 1..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(e.len(), |n| i + 1 + n);
        let quoted = e[..i].ends_with('"') && e[end..].starts_with('"');
        let op_eq = e[..i].ends_with("=\"") && !e[..i].ends_with("~\"");
        let with = if quoted { ".*" } else { "" };
        e.replace_range(i..end, with);
        if quoted && op_eq {
            // `label="$var"` → `label=~".*"`
            let at = e[..i].rfind("=\"").unwrap();
            e.replace_range(at..at + 1, "=~");
        }
    }
    e
}

/// A directory of its own, removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Result<Self> {
        let d = std::env::temp_dir().join(format!("spo-{name}"));
        std::fs::create_dir_all(&d)?;
        Ok(Scratch(d))
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Prometheus {
    child: tokio::process::Child,
    url: String,
}

impl Prometheus {
    async fn start(
        dir: &Path,
        operator: &[String],
        agents: &[String],
        rules: &Path,
    ) -> Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let cfg = json!({
            "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
            "rule_files": [rules],
            "scrape_configs": [
                {"job_name": OPERATOR_JOB, "static_configs": [{"targets": operator}]},
                {"job_name": AGENT_JOB, "static_configs": [{"targets": agents}]},
            ],
        });
        let cfg_path = dir.join("prometheus.json");
        std::fs::write(&cfg_path, serde_json::to_vec(&cfg)?)?;
        let child = tokio::process::Command::new("prometheus")
            .arg(format!("--config.file={}", cfg_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::fs::File::create(dir.join("prometheus.log"))?)
            .stderr(std::fs::File::create(dir.join("prometheus.err"))?)
            .kill_on_drop(true)
            .spawn()
            .context("starting prometheus (Debian's package, e2e/prereqs)")?;
        Ok(Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
        })
    }

    async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<Value> {
        let r = reqwest::Client::new()
            .get(format!("{}{path}", self.url))
            .query(query)
            .send()
            .await?;
        Ok(r.json().await?)
    }

    /// The result vector of an instant query (an error if Prometheus refuses it).
    async fn query(&self, expr: &str) -> Result<Vec<Value>> {
        let v = self.get("/api/v1/query", &[("query", expr)]).await?;
        ensure!(v["status"] == "success", "{expr}: {v}");
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn prometheus_scrapes_every_component_and_every_dashboard_query_returns_data() {
    with_ns("monitoring", |t| async move {
        let dir = Scratch::new(&t.name)?;
        let operator = targets(&release::pods(&t.client, Some("operator")).await?)?;
        let agents = targets(&release::pods(&t.client, Some("agent")).await?)?;
        let rules = rules_file(dir.path()).await?;
        let mut prom = Prometheus::start(dir.path(), &operator, &agents, &rules).await?;
        // A workload: one exits 0, one 3, one is still running; one start refused by the agent.
        t.pods([pod("work", None)]).await?;
        for (name, script) in [("ok", "echo hi"), ("three", "exit 3"), ("long", "sleep 60")] {
            t.apply_sbp(sbp(name, "work", sh(script, json!({})))).await?;
        }
        t.apply_sbp(sbp("nocwd", "work", json!({"command": ["true"], "workingDir": "/nope"})))
            .await?;
        t.until_field("three", "/status/phase", "Exited", 60).await?;
        // Every target up, then every query answers with data (rates need two scrapes after the
        // workload).
        let until = Instant::now() + Duration::from_secs(90);
        let mut empty: Vec<String>;
        loop {
            ensure!(prom.child.try_wait()?.is_none(), "prometheus exited: {}", std::fs::read_to_string(dir.path().join("prometheus.err")).unwrap_or_default());
            let up = prom.query("up == 1").await.unwrap_or_default().len();
            empty = vec![];
            for (title, q) in dashboard_queries()? {
                if prom.query(&q).await?.is_empty() {
                    empty.push(format!("{title}: {q}"));
                }
            }
            if up == operator.len() + agents.len() && empty.is_empty() {
                break;
            }
            ensure!(Instant::now() < until, "after 90 s: {up} targets up of {}; queries without data:\n{}", operator.len() + agents.len(), empty.join("\n"));
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        // Every alert rule evaluates without error (and none is firing on a healthy release).
        let rules = prom.get("/api/v1/rules", &[]).await?;
        let groups = rules["data"]["groups"].as_array().cloned().unwrap_or_default();
        let all: Vec<Value> = groups.iter().flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default()).collect();
        ensure!(!all.is_empty(), "no rules loaded: {rules}");
        for r in &all {
            ensure!(r["health"] == "ok", "rule {} does not evaluate: {}", r["name"], r["lastError"]);
        }
        let firing: Vec<String> = all.iter().filter(|r| r["state"] == "firing").map(|r| r["name"].to_string()).collect();
        ensure!(firing.is_empty(), "alerts firing on a healthy release: {firing:?}");
        println!("note: {} targets up; {} dashboard queries with data; {} alert rules evaluate, none firing", operator.len() + agents.len(), dashboard_queries()?.len(), all.len());
        Ok(())
    })
    .await;
}

#[test]
fn grafana_variables_become_concrete() {
    assert_eq!(
        concrete(r#"sum(rate(x_total{job="$job", pod=~"$pod"}[$__rate_interval]))"#),
        r#"sum(rate(x_total{job=~".*", pod=~".*"}[1m]))"#
    );
    assert_eq!(concrete("up"), "up");
}
