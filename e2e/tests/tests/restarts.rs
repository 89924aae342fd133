//! Restarts (issue 31) as a user of the plugin meets them (`rust_tests restarts` from e2e/suites/cli):
//! `kubectl sandbox run --restart`, `ls` counting restarts, `logs --previous` printing the last
//! run, `kill` ending a back-off for good, and the flag's refusals before anything is created.
use anyhow::{ensure, Result};
use kube::api::ListParams;
use sandbox_api::crd::{EndReason, Phase, SandboxProcess};
use sandbox_e2e::manifests::pod;
use sandbox_e2e::{cmd, cond, with_ns, TestNs};

/// `kubectl sandbox -n NS ARGS`; must succeed; its stdout.
async fn plugin(t: &TestNs, args: &[&str]) -> Result<String> {
    let mut all = vec!["-n", t.name.as_str()];
    all.extend_from_slice(args);
    let out = cmd::kubectl_sandbox(&all).await?;
    ensure!(
        out.success(),
        "kubectl sandbox {}: exit {:?}: {}",
        args.join(" "),
        out.code,
        out.stderr
    );
    Ok(out.stdout)
}

fn restarts(o: &SandboxProcess) -> i32 {
    o.status.as_ref().map_or(0, |s| s.restart_count)
}

/// The `ls` row of `name`, split at whitespace.
async fn ls_row(t: &TestNs, name: &str) -> Result<Vec<String>> {
    let table = plugin(t, &["ls"]).await?;
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        header[..5] == ["NAME", "POD", "PHASE", "READY", "RESTARTS"],
        "ls:\n{table}"
    );
    let row = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name));
    Ok(row
        .map(|l| l.split_whitespace().map(String::from).collect())
        .unwrap_or_default())
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/cli"]
async fn on_failure_restarts_and_logs_previous_prints_the_last_run() {
    with_ns("restarts-onfailure", |t| async move {
        t.pods([pod("work", None)]).await?;
        // Each run prints its own pid: runs are told apart in the output.
        plugin(
            &t,
            &[
                "run",
                "work",
                "--name",
                "flaky",
                "--restart=OnFailure",
                "--",
                "sh",
                "-c",
                "echo run-$$; exit 3",
            ],
        )
        .await?;
        // The first restart after 10 s of back-off, the second 20 s after that.
        let o = t
            .until("flaky", 120, "restart twice", |o| restarts(o) >= 2)
            .await?;
        let s = o.status.clone().unwrap_or_default();
        ensure!(
            s.phase == Some(Phase::Running),
            "a restarting process stays Running: {s:?}"
        );
        let last = s
            .last_exit
            .clone()
            .expect("status.lastExit after a restart");
        assert_eq!((last.exit.code, last.end_reason), (3, EndReason::Exited));
        let row = ls_row(&t, "flaky").await?;
        ensure!(
            row.get(4).and_then(|n| n.parse::<i32>().ok()) >= Some(2),
            "RESTARTS: {row:?}"
        );
        // The previous run only: one line of the runs' output, which holds several.
        let previous = plugin(&t, &["logs", "flaky", "--previous"]).await?;
        ensure!(
            previous.starts_with("run-") && previous.lines().count() == 1,
            "logs --previous: {previous:?}"
        );
        let all = plugin(&t, &["logs", "flaky"]).await?;
        ensure!(
            all.lines().filter(|l| l.starts_with("run-")).count() >= 2
                && all.lines().any(|l| l == previous.trim_end()),
            "logs: {all:?}, previous: {previous:?}"
        );
        let short = plugin(&t, &["logs", "flaky", "-p", "--tail", "1"]).await?;
        assert_eq!(short, previous, "-p is --previous");
        // An output that has ended cannot be followed: refused, naming both flags.
        let out = cmd::kubectl_sandbox(&["-n", &t.name, "logs", "flaky", "-p", "-f"]).await?;
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        ensure!(
            out.stderr.contains("--previous") && out.stderr.contains("--follow"),
            "{}",
            out.stderr
        );
        // kill ends it for good, whether running or waiting out a back-off.
        plugin(&t, &["kill", "flaky"]).await?;
        let o = t
            .until("flaky", 60, "end for good", sandbox_client::is_final)
            .await?;
        let s = o.status.clone().unwrap_or_default();
        assert_eq!(s.phase, Some(Phase::Exited), "{s:?}");
        ensure!(s.restart_count >= 2, "the count is kept: {s:?}");
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/cli"]
async fn always_restarts_after_exit_0_and_shows_back_off() {
    with_ns("restarts-always", |t| async move {
        t.pods([pod("work", None)]).await?;
        plugin(
            &t,
            &[
                "run",
                "work",
                "--name",
                "again",
                "--restart",
                "Always",
                "--",
                "echo",
                "ok",
            ],
        )
        .await?;
        // Between runs: Running, Ready=False and Reconciling=True, reason BackOff.
        let o = t
            .until("again", 60, "wait out a back-off", |o| {
                cond(o, "Reconciling") == "True/BackOff"
            })
            .await?;
        assert_eq!(cond(&o, "Ready"), "False/BackOff");
        let row = ls_row(&t, "again").await?;
        ensure!(row.iter().any(|c| c == "BackOff"), "ls REASON: {row:?}");
        let o = t
            .until("again", 60, "restart", |o| restarts(o) >= 1)
            .await?;
        let last = o.status.and_then(|s| s.last_exit).expect("lastExit");
        assert_eq!((last.exit.code, last.end_reason), (0, EndReason::Exited));
        assert_eq!(plugin(&t, &["logs", "again", "--previous"]).await?, "ok\n");
        plugin(&t, &["kill", "again"]).await?;
        t.until("again", 60, "end for good", sandbox_client::is_final)
            .await?;
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/cli"]
async fn restart_flag_refusals_create_nothing() {
    with_ns("restarts-refused", |t| async move {
        t.pods([pod("work", None)]).await?;
        let run = |args: &'static [&'static str]| {
            let ns = t.name.clone();
            async move {
                let mut all = vec!["-n", ns.as_str(), "run"];
                all.extend_from_slice(args);
                cmd::kubectl_sandbox(&all).await
            }
        };
        let out = run(&["--restart=Bogus", "work", "--", "true"]).await?;
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        ensure!(
            out.stderr.contains("--restart") && out.stderr.contains("Never, OnFailure, Always"),
            "{}",
            out.stderr
        );
        // The API's own rule, named by the flag: a restarting process takes no input.
        for args in [
            &["--restart=OnFailure", "-i", "work", "--", "cat"][..],
            &["--restart=Always", "-t", "work", "--", "sh"],
        ] {
            let out = run(args).await?;
            assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
            ensure!(
                out.stderr.contains(&format!(
                    "--restart: {}",
                    sandbox_api::wire_rules::RESTART_WITH_STDIN
                )),
                "{args:?}: {}",
                out.stderr
            );
        }
        let left = t.sbps().list(&ListParams::default()).await?.items;
        ensure!(left.is_empty(), "objects were created: {}", left.len());
        // The API server refuses the same object written by hand, with the same words.
        let out = cmd::kubectl_stdin(
            &["-n", &t.name, "apply", "-f", "-"],
            "apiVersion: sandbox.dev/v1alpha1\nkind: SandboxProcess\nmetadata: {name: io}\n\
             spec: {podName: work, command: [cat], stdin: true, restartPolicy: OnFailure}\n",
        )
        .await?;
        ensure!(
            !out.success()
                && out
                    .stderr
                    .contains(sandbox_api::wire_rules::RESTART_WITH_STDIN),
            "kubectl apply: {:?}: {}",
            out.code,
            out.stderr
        );
        Ok(())
    })
    .await;
}
