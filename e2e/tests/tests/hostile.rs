//! e2e/suites/hostile's cases that may run side by side: a tenant (a ServiceAccount with only `edit`)
//! tries what a shared cluster must survive, and after each the other tenant's processes run on
//! and nothing of the release restarted (`Tenants::others_fine`). The cases that take the whole
//! node or measure it run one at a time in tests/hostile_node.rs.
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use sandbox_e2e::follow::{get_text, log_path};
use sandbox_e2e::manifests::{pod, sbp, sh};
use sandbox_e2e::tenants::{with_tenants, Tenants};
use sandbox_e2e::{field, release};
use serde_json::{json, Value};

const I64_MAX: i64 = i64::MAX;

/// A process of the tenant's `victim` pod that would sleep for a second, with `extra` fields.
fn sleeper(name: &str, extra: Value) -> Value {
    let mut spec = extra;
    spec["command"] = json!(["sleep", "1"]);
    sbp(name, "victim", spec)
}

/// Refused at apply, the refusal naming `field`.
async fn refused_naming(t: &Tenants, o: Value, field: &str) -> Result<()> {
    let out = t.refused(o).await?;
    ensure!(out.contains(field), "refusal does not name {field}: {out}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/hostile"]
async fn extreme_durations_of_2_63_minus_1_are_refused_at_apply_naming_the_field() {
    with_tenants(
        "hostile-durations",
        vec![pod("victim", None)],
        |t| async move {
            let cases = [
                ("timeoutSeconds", json!({"timeoutSeconds": I64_MAX})),
                (
                    "terminationGracePeriodSeconds",
                    json!({"terminationGracePeriodSeconds": I64_MAX}),
                ),
                (
                    "readiness.timeoutSeconds",
                    json!({"readiness": {"tcpSocket": {"port": 80}, "timeoutSeconds": I64_MAX}}),
                ),
            ];
            for (field, extra) in cases {
                refused_naming(&t, sleeper("huge", extra), field).await?;
            }
            t.others_fine("extreme durations", None).await
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/hostile"]
async fn hostile_resource_limits_are_refused_by_name_and_nothing_starts() {
    with_tenants(
        "hostile-limits",
        vec![pod("victim", None)],
        |t| async move {
            let limits = |l: Value| json!({"resources": {"limits": l}});
            // malformed, impossible (issue 35: refused at apply with the agent's bounds)
            refused_naming(
                &t,
                sleeper("badq", limits(json!({"memory": "1 Gi"}))),
                "resources.limits.memory",
            )
            .await?;
            refused_naming(
                &t,
                sleeper("zero", limits(json!({"pids": 0}))),
                "resources.limits.pids",
            )
            .await?;
            refused_naming(
                &t,
                sleeper("tinycpu", limits(json!({"cpu": "1m"}))),
                "resources.limits.cpu",
            )
            .await?;
            // 16Ei (2^64) gets past the CRD's CEL today (a known gap); the operator refuses it by name.
            if t.apply(sleeper("hugemem", limits(json!({"memory": "16Ei"}))))
                .await
                .is_ok()
            {
                let o = t
                    .admin
                    .until_field("hugemem", "/status/phase", "Error", 30)
                    .await?;
                let msg = field(&o, "/status/error/message");
                ensure!(
                    msg.contains("resources.limits.memory"),
                    "hugemem's error: {msg}"
                );
                ensure!(field(&o, "/status/startedAt").is_empty(), "hugemem started");
            }
            t.others_fine("hostile limits", None).await
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/hostile"]
async fn a_fork_bomb_under_a_pids_limit_stays_bounded_and_ends_cleanly() {
    with_tenants(
        "hostile-forkbomb",
        vec![pod("bomb", None)],
        |t| async move {
            t.apply(sbp("calm", "bomb", json!({"command": ["sleep", "300"]})))
                .await?;
            t.admin
                .until_field("calm", "/status/phase", "Running", 30)
                .await?;
            t.apply(sbp(
                "forkbomb",
                "bomb",
                sh(
                    "b() { b & b & wait; }; b",
                    json!({
                        "resources": {"limits": {"pids": 64, "cpu": "500m"}},
                        "timeoutSeconds": 8, "terminationGracePeriodSeconds": 0,
                    }),
                ),
            ))
            .await?;
            // Running, or already over: a bomb that hits the pids limit can die out within a second.
            t.admin
                .until("forkbomb", 30, "run or end", |o| {
                    matches!(field(o, "/status/phase").as_str(), "Running" | "Exited")
                })
                .await?;
            t.others_fine("fork bomb (while it runs)", None).await?;
            // It ends by its timeout, or earlier when every branch has hit "can't fork" (busybox sh
            // exits on a failed fork); either way the whole tree ends.
            let o = t
                .admin
                .until_field("forkbomb", "/status/phase", "Exited", 40)
                .await?;
            let ended = format!(
                "{}/{}",
                field(&o, "/status/endReason"),
                field(&o, "/status/processes")
            );
            ensure!(
                matches!(ended.as_str(), "TimedOut/0" | "Exited/0"),
                "the bomb ended as {ended}"
            );
            println!("note: the bomb ended as {ended}");
            let calm = field(&t.admin.get("calm").await?, "/status/phase");
            ensure!(calm == "Running", "the neighbour process is {calm}");
            let restarts = t
                .admin
                .kubectl(&[
                    "get",
                    "pod",
                    "bomb",
                    "-o",
                    "jsonpath={.status.containerStatuses[0].restartCount}",
                ])
                .await?;
            ensure!(restarts == "0", "the container restarted ({restarts})");
            let (left, ps) = t.extra_procs("bomb").await?;
            ensure!(
                left == 1,
                "expected only the neighbour's sleep left in the pod, found {left} extra:\n{ps}"
            );
            Ok(())
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/hostile"]
async fn idle_tcp_connections_to_the_subresource_api_do_not_stop_it_serving() {
    with_tenants("hostile-idle", vec![], |t| async move {
        let (op, port) = release::pod_port(&t.admin.client, "operator", "api").await?;
        let ip = op
            .status
            .and_then(|s| s.pod_ip)
            .context("no operator pod IP")?;
        // 500 sockets that never say a word, held while the other tenant runs a process and
        // reads its output through the API server (which needs the same server).
        let mut held = Vec::with_capacity(500);
        for i in 0..500 {
            let c = tokio::net::TcpStream::connect((ip.as_str(), port as u16));
            match tokio::time::timeout(Duration::from_secs(5), c).await {
                Ok(Ok(s)) => held.push(s),
                other => bail!("connection {i} to {ip}:{port}: {other:?}"),
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        t.others_fine("500 idle connections held", None).await?;
        let path = log_path(&t.other.name, "ordinary-1", "");
        get_text(&t.admin.client, &path)
            .await
            .context("a log read while idle connections are held")?;
        drop(held);
        t.others_fine("500 idle connections dropped", None).await
    })
    .await;
}
