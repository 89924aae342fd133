//! The streaming attach (`sandboxprocesses/attach`, a WebSocket through the API server's
//! aggregation proxy) as the Rust client uses it: stdin and output on one connection, the exit
//! code at its end, resuming output and stdin across reconnects, a terminal resized through it,
//! and who may attach. Run by e2e/suites/suite.
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use sandbox_client::{AttachOptions, AttachOutput, Start};
use sandbox_e2e::manifests::pod;
use sandbox_e2e::{with_ns, TestNs};

/// Output until `want` appears in it (or the exit, or 60 s).
async fn read_until(out: &mut AttachOutput, want: &[u8]) -> Result<(Vec<u8>, Option<i32>)> {
    sandbox_e2e::attach::read_until(out, Some(want), Duration::from_secs(60)).await
}

async fn exit_of(out: &mut AttachOutput) -> Result<(Vec<u8>, i32)> {
    sandbox_e2e::attach::to_exit(out, Duration::from_secs(60)).await
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn attach_carries_stdin_and_both_streams_and_ends_with_the_exit_code() {
    with_ns("attach-rpc", |t| async move {
        t.pods([pod("work", None)]).await?;
        // A JSON-RPC-style echo server on stdio: one answer line per request line.
        let script =
            r#"while read -r l; do echo "{\"result\":$l}"; echo "seen $l" >&2; done; exit 3"#;
        let p = t
            .sandbox
            .start(
                Start::new("work", ["sh", "-c", script])
                    .id("rpc")
                    .stdin(true),
            )
            .await?;
        let (mut input, mut out) = p
            .attach(AttachOptions {
                stdin: true,
                ..Default::default()
            })
            .await?;
        let mut rtts = Vec::new();
        for i in 0..20 {
            let t0 = Instant::now();
            input.send(format!("{i}\n").as_bytes()).await?;
            read_until(&mut out, format!("{{\"result\":{i}}}\n").as_bytes()).await?;
            rtts.push(t0.elapsed());
        }
        read_until(&mut out, b"seen 19\n").await?;
        input.close_stdin().await?;
        let (_, code) = exit_of(&mut out).await?;
        ensure!(code == 3, "exit code {code}, want 3");
        // Detaching from a session that has ended is no error (the process is gone, and a
        // fast one's session can end before its reader gets to detach).
        input.detach().await?;
        rtts.sort();
        println!(
            "note: JSON-RPC line round trip through the attach: median {:?}, max {:?}",
            rtts[10], rtts[19]
        );
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn a_second_attach_from_the_first_ones_cursor_repeats_and_misses_nothing() {
    with_ns("attach-resume", |t| async move {
        t.pods([pod("work", None)]).await?;
        let p = t
            .sandbox
            .start(
                Start::new("work", ["sh", "-c", "seq 1 60000; seq 1 3000 >&2; exit 5"]).id("seq"),
            )
            .await?;
        let (input, mut out) = p.attach(AttachOptions::default()).await?;
        let (first, _) = read_until(&mut out, b"\n20000\n").await?;
        let cursor = out.resume_cursor();
        input.detach().await?;
        drop(out);
        let (_input, mut out) = p
            .attach(AttachOptions {
                since: Some(cursor.clone()),
                ..Default::default()
            })
            .await?;
        let (rest, code) = exit_of(&mut out).await?;
        ensure!(code == 5, "exit code {code}, want 5");
        // Both streams in the order the process wrote them: stdout's lines, then stderr's.
        let all = [first, rest].concat();
        let want: String = (1..=60000)
            .chain(1..=3000)
            .map(|n| format!("{n}\n"))
            .collect();
        ensure!(
            all == want.as_bytes(),
            "{} bytes after two attaches (resumed at {cursor}), want {}",
            all.len(),
            want.len()
        );
        Ok(())
    })
    .await;
}

/// 8 MiB into `sha256sum` over attaches cut mid-stream: each reconnect asks where stdin is and
/// sends from there, so the digest is that of the bytes sent, each taken once.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn stdin_over_cut_attaches_arrives_exactly_once() {
    with_ns("attach-once", |t| async move {
        t.pods([pod("work", None)]).await?;
        let p = t
            .sandbox
            .start(Start::new("work", ["sha256sum"]).id("sum").stdin(true))
            .await?;
        let data: Vec<u8> = (0..8u32 << 20)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let want = sandbox_e2e::cmd::sha256_of(&data).await?;
        let mut cuts = 0;
        loop {
            let at = p.stdin_state().await?.bytes as usize;
            let opts = AttachOptions {
                stdin: true,
                stdin_offset: Some(at as u64),
                ..Default::default()
            };
            let (mut input, out) = p.attach(opts).await?;
            let end = (at + (3 << 20)).min(data.len());
            input.send(&data[at..end]).await?;
            if end == data.len() {
                input.close_stdin().await?;
                let mut out = out;
                let (got, code) = exit_of(&mut out).await?;
                ensure!(code == 0, "sha256sum exit {code}");
                let got = String::from_utf8_lossy(&got);
                ensure!(
                    got.starts_with(&want),
                    "digest {got:?}, want {want} (after {cuts} cuts)"
                );
                break;
            }
            // Cut without waiting: whatever the operator had not written yet is sent again.
            input.detach().await?;
            cuts += 1;
        }
        println!(
            "note: 8 MiB through sha256sum over {} attaches, digest exact",
            cuts + 1
        );
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn a_terminal_resized_through_the_attach_sees_its_new_size() {
    with_ns("attach-tty", |t| async move {
        t.pods([pod("work", None)]).await?;
        let p = t
            .sandbox
            .start(
                Start::new("work", ["sh", "-i"])
                    .id("term")
                    .tty(true)
                    .terminal(30, 100),
            )
            .await?;
        let (mut input, mut out) = p
            .attach(AttachOptions {
                stdin: true,
                ..Default::default()
            })
            .await?;
        input.send(b"stty size\n").await?;
        read_until(&mut out, b"30 100\r\n").await?;
        input.resize(50, 120).await?;
        input.send(b"stty size\n").await?;
        read_until(&mut out, b"50 120\r\n").await?;
        input.send(b"exit 7\n").await?;
        let (_, code) = exit_of(&mut out).await?;
        ensure!(code == 7, "exit code {code}, want 7");
        Ok(())
    })
    .await;
}

async fn attach_as(t: &TestNs, user: &str) -> Result<Result<(), String>> {
    let t = t.as_user(user).await?;
    Ok(
        match t
            .sandbox
            .process("cat")
            .attach(AttachOptions {
                stdin: true,
                ..Default::default()
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        },
    )
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn edit_may_attach_view_and_edit_without_pods_exec_may_not() {
    with_ns("attach-rbac", |t| async move {
        t.pods([pod("work", None)]).await?;
        t.sandbox
            .start(Start::new("work", ["cat"]).id("cat").stdin(true))
            .await?
            .wait_started(Some(Duration::from_secs(60)))
            .await?;
        for (role, user) in [("edit", "spo-attach-editor"), ("view", "spo-attach-viewer")] {
            let binding = format!("attach-{role}");
            t.kubectl(&[
                "create",
                "rolebinding",
                &binding,
                &format!("--clusterrole={role}"),
                &format!("--user={user}"),
            ])
            .await?;
        }
        if let Err(e) = attach_as(&t, "spo-attach-editor").await? {
            bail!("edit cannot attach: {e}");
        }
        match attach_as(&t, "spo-attach-viewer").await? {
            Ok(()) => bail!("view attached"),
            Err(e) => ensure!(
                e.to_lowercase().contains("forbidden"),
                "view refused how? {e}"
            ),
        }
        // Everything edit has on SandboxProcesses and their attach, but not pods/exec: the
        // subresource API's own check refuses, as kubectl attach would be refused.
        t.kubectl_apply(
            r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: sbp-no-exec}
rules:
  - apiGroups: [sandbox.dev]
    resources: [sandboxprocesses]
    verbs: [get, list, watch, update, patch]
  - apiGroups: [subresources.sandbox.dev]
    resources: [sandboxprocesses/attach, sandboxprocesses/stdin]
    verbs: [get, create]
"#,
        )
        .await?;
        t.kubectl(&[
            "create",
            "rolebinding",
            "attach-no-exec",
            "--role=sbp-no-exec",
            "--user=spo-attach-noexec",
        ])
        .await?;
        match attach_as(&t, "spo-attach-noexec").await? {
            Ok(()) => bail!("a user without pods/exec attached"),
            Err(e) => ensure!(e.contains("pods/exec"), "refused how? {e}"),
        }
        Ok(())
    })
    .await;
}

/// An attach with stdin to a process whose stdin was closed (EOF sent) while it runs on is refused
/// up front, `StdinUnavailable`, not `StdinOffsetMismatch` at the first key (issue 47); without
/// stdin it attaches and reads on.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn attaching_stdin_to_a_closed_one_says_it_is_closed() {
    with_ns("attach-closed", |t| async move {
        t.pods([pod("work", None)]).await?;
        let p = t
            .sandbox
            .start(
                Start::new("work", ["sh", "-c", "cat; echo after-eof; sleep 30"])
                    .id("closed")
                    .stdin(true),
            )
            .await?;
        p.send_stdin(b"first\n").await?;
        p.close_stdin().await?;
        let with_stdin = AttachOptions {
            stdin: true,
            ..Default::default()
        };
        let said = match p.attach(with_stdin).await {
            Err(e) => e.to_string(),
            Ok(_) => bail!("an attach with stdin to a closed one was accepted"),
        };
        ensure!(
            said.contains("StdinUnavailable") && said.contains("is closed"),
            "{said}"
        );
        let (_input, mut out) = p.attach(AttachOptions::default()).await?;
        read_until(&mut out, b"first\nafter-eof\n").await?;
        println!("note: {said}");
        p.delete().await?;
        Ok(())
    })
    .await;
}
