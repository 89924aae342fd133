//! The `processes` resource through faults (e2e/suites/suite, one at a time): the operator replaced
//! while a kube-rs watcher follows 200 short processes, and the agent replaced while a process
//! runs. Records live on the nodes: nothing is lost with the operator, exit codes stay exact.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use futures::StreamExt;
use kube::api::PostParams;
use kube::runtime::{watcher, WatchStreamExt};
use sandbox_e2e::manifests::{pod, sh};
use sandbox_e2e::processes::{process, text};
use sandbox_e2e::{release, with_ns, TestNs};
use serde_json::json;

/// Creates `n` processes, `parallel` at a time; the i-th exits with i % 200 after a short sleep.
async fn make(t: &TestNs, n: usize, parallel: usize) -> Result<()> {
    let results: Vec<Result<()>> = futures::stream::iter(0..n)
        .map(|i| async move {
            let o = process(
                &format!("f{i}"),
                "work",
                sh(&format!("sleep 0.{}; exit {}", i % 10, i % 200), json!({})),
            );
            let o = serde_json::from_value(o)?;
            // A create refused while no operator serves is retried; a second create of a name
            // already made returns it (same spec).
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                match t.procs().create(&PostParams::default(), &o).await {
                    Ok(_) => return Ok(()),
                    Err(_) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        })
        .buffer_unordered(parallel)
        .collect()
        .await;
    results.into_iter().collect()
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn a_watcher_across_an_operator_restart_sees_every_exit_exactly() {
    with_ns("procf-failover", |t| async move {
        t.pods([pod("work", None)]).await?;
        const N: usize = 200;
        // As a controller runs it: errors (no operator serving for a while: 503) retried with
        // back-off, a 410 relisted.
        let stream = watcher(t.procs(), watcher::Config::default())
            .default_backoff()
            .applied_objects();
        let follow = async {
            let mut stream = std::pin::pin!(stream);
            let mut finals = BTreeMap::new();
            let mut errors = 0;
            while let Some(o) = stream.next().await {
                let o = match o {
                    Ok(o) => o,
                    Err(e) => {
                        errors += 1;
                        println!("note: watcher error {errors} (retried): {e}");
                        continue;
                    }
                };
                let name = text(&o, "/metadata/name");
                ensure!(name.starts_with('f'), "a process nobody made: {name}");
                if text(&o, "/status/phase") == "Exited" {
                    finals.insert(name, text(&o, "/status/exit/code"));
                }
                if finals.len() == N {
                    return Ok(finals);
                }
            }
            anyhow::bail!("the watcher ended")
        };
        let work = async {
            make(&t, N / 2, 10).await?;
            // The creates after it retry until a new operator serves.
            release::delete_operator_pods().await?;
            make(&t, N, 10).await
        };
        let (finals, made) =
            tokio::join!(tokio::time::timeout(Duration::from_secs(300), follow), work);
        made?;
        let finals =
            finals.map_err(|_| anyhow::anyhow!("not every process seen final within 300 s"))??;
        for i in 0..N {
            assert_eq!(
                finals.get(&format!("f{i}")).map(String::as_str),
                Some((i % 200).to_string().as_str()),
                "f{i}"
            );
        }
        // Each started once: one line per process in the pod would need a file; the count of
        // records served is the count made.
        let listed = t.procs().list(&Default::default()).await?.items.len();
        assert_eq!(listed, N);
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn a_process_outlives_its_agent_and_keeps_its_code() {
    with_ns("procf-agent", |t| async move {
        t.pods([pod("work", None)]).await?;
        t.create_proc(process(
            "outlive",
            "work",
            sh("echo before; sleep 8; echo after; exit 5", json!({})),
        ))
        .await?;
        t.until_proc("outlive", 60, "run", |o| {
            text(o, "/status/phase") == "Running"
        })
        .await?;
        // A label given after the start is kept by the agent beside the record: it outlives it.
        t.kubectl(&["label", "proc", "outlive", "kept=yes"]).await?;
        release::replace_agents(&t.client).await?;
        let done = t
            .until_proc("outlive", 90, "exit", |o| {
                text(o, "/status/phase") == "Exited"
            })
            .await?;
        assert_eq!(text(&done, "/status/exit/code"), "5");
        assert_eq!(text(&done, "/status/output/tail"), "before\nafter\n");
        assert_eq!(text(&done, "/metadata/labels/kept"), "yes");
        Ok(())
    })
    .await;
}
