//! The `processes` resource, served from the nodes (e2e/suites/suite): create, get, list, watch and
//! delete through the API server as kubectl and kube-rs use them; a second create; the rights of
//! `kubectl exec`; bad input named by field; the end's ttl. Each test has its own namespace.
use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use futures::TryStreamExt;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use sandbox_e2e::manifests::{pod, sh};
use sandbox_e2e::processes::{process, text};
use sandbox_e2e::{cmd, follow, with_ns};
use serde_json::json;

fn kube_status(e: &anyhow::Error) -> Option<(u16, String, String)> {
    match e.downcast_ref::<kube::Error>()? {
        kube::Error::Api(s) => Some((s.code, s.reason.clone(), s.message.clone())),
        _ => None,
    }
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn a_process_runs_and_reads_as_any_resource() {
    with_ns("proc-basic", |t| async move {
        t.pods([pod("work", None)]).await?;
        let mut o = process(
            "p1",
            "work",
            sh("echo out; echo err >&2; exit 7", json!({})),
        );
        o["metadata"]["labels"] = json!({"app": "demo"});
        let created = t.create_proc(o).await?;
        ensure!(
            !text(&created, "/metadata/uid").is_empty(),
            "no uid: {:?}",
            created.data
        );
        ensure!(!text(&created, "/metadata/resourceVersion").is_empty());
        let done = t
            .until_proc("p1", 60, "exit", |o| text(o, "/status/phase") == "Exited")
            .await?;
        assert_eq!(text(&done, "/status/exit/code"), "7");
        assert_eq!(text(&done, "/status/endReason"), "Exited");
        assert_eq!(text(&done, "/status/podName"), "work");
        // Both streams, combined (their order between two pipes is the reader's).
        let tail = text(&done, "/status/output/tail");
        ensure!(
            tail.len() == 8 && tail.contains("out\n") && tail.contains("err\n"),
            "{tail:?}"
        );
        assert_eq!(
            text(&done, "/metadata/uid"),
            text(&created, "/metadata/uid")
        );
        // Selectors: the process's labels, its pod and its phase.
        let lists = [
            ("app=demo", "", 1),
            ("app=other", "", 0),
            ("", "status.phase=Exited", 1),
            ("", "spec.podName=work,metadata.name=p1", 1),
            ("", "status.phase=Running", 0),
        ];
        for (labels, fields, n) in lists {
            let lp = ListParams::default().labels(labels).fields(fields);
            let got = t.procs().list(&lp).await?;
            assert_eq!(got.items.len(), n, "{labels:?} {fields:?}");
            ensure!(got
                .metadata
                .resource_version
                .is_some_and(|rv| !rv.is_empty()));
        }
        // kubectl's table: the columns of `kubectl get sbp`.
        let table = t.kubectl(&["get", "processes"]).await?;
        let head: Vec<&str> = table
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(
            head,
            ["NAME", "POD", "PHASE", "READY", "RESTARTS", "EXIT", "REASON", "AGE"]
        );
        let row: Vec<&str> = table
            .lines()
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(&row[..3], ["p1", "work", "Exited"], "{table}");
        assert!(row.contains(&"7"), "{table}");
        let all = cmd::kubectl(&["get", "proc", "-A", "-o", "name"]).await?;
        assert!(
            all.lines().any(|l| l == "process.processes.sandbox.dev/p1"),
            "{all}"
        );
        // A running process deleted: stopped (its tree gone from the pod) and forgotten.
        t.create_proc(process(
            "long",
            "work",
            sh("sleep 300", json!({"terminationGracePeriodSeconds": 1})),
        ))
        .await?;
        t.until_proc("long", 60, "run", |o| text(o, "/status/phase") == "Running")
            .await?;
        assert_eq!(t.count_procs("work", "sleep 300").await?, 1);
        t.kubectl(&["delete", "process", "long", "--timeout=60s"])
            .await?;
        ensure!(
            t.procs().get_opt("long").await?.is_none(),
            "still served after kubectl delete returned"
        );
        assert_eq!(t.count_procs("work", "sleep 300").await?, 0);
        // An ended one is forgotten at once.
        t.procs().delete("p1", &DeleteParams::default()).await?;
        t.until_proc_gone("p1", 30).await?;
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn a_second_create_returns_the_first_or_conflicts() {
    with_ns("proc-twice", |t| async move {
        t.pods([pod("work", None)]).await?;
        let o = process(
            "once",
            "work",
            sh("echo $$ >> /tmp/once; sleep 2", json!({})),
        );
        let first = t.create_proc(o.clone()).await?;
        let again = t.create_proc(o).await?;
        assert_eq!(text(&again, "/metadata/uid"), text(&first, "/metadata/uid"));
        let other = process("once", "work", sh("echo other", json!({})));
        let e = t.create_proc(other).await.unwrap_err();
        let (code, reason, message) = kube_status(&e).context("an API status")?;
        assert_eq!((code, reason.as_str()), (409, "AlreadyExists"), "{message}");
        t.until_proc("once", 60, "exit", |o| text(o, "/status/phase") == "Exited")
            .await?;
        assert_eq!(
            t.in_pod("work", &["wc", "-l", "/tmp/once"])
                .await?
                .split_whitespace()
                .next(),
            Some("1")
        );
        // generateName: a fresh name each time.
        let gen = json!({
            "apiVersion": "processes.sandbox.dev/v1alpha1", "kind": "Process",
            "metadata": {"generateName": "run-"},
            "spec": {"podName": "work", "command": ["true"]},
        });
        let a = t.create_proc(gen.clone()).await?;
        let b = t.create_proc(gen).await?;
        let (a, b) = (text(&a, "/metadata/name"), text(&b, "/metadata/name"));
        ensure!(
            a.starts_with("run-") && b.starts_with("run-") && a != b,
            "{a} {b}"
        );
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn the_rights_are_those_of_kubectl_exec() {
    with_ns("proc-rights", |t| async move {
        t.pods([pod("work", None)]).await?;
        let ns = t.name.clone();
        t.kubectl(&[
            "create",
            "rolebinding",
            "viewer",
            "--clusterrole=view",
            "--user=vic",
        ])
        .await?;
        t.kubectl(&[
            "create",
            "role",
            "procs",
            "--verb=create,get,list,watch,delete,update",
            "--resource=processes.processes.sandbox.dev,processes.processes.sandbox.dev/signal",
        ])
        .await?;
        t.kubectl(&[
            "create",
            "rolebinding",
            "procs",
            "--role=procs",
            "--user=pat",
        ])
        .await?;
        t.create_proc(process("mine", "work", sh("exit 0", json!({}))))
            .await?;
        let o = process("p", "work", sh("exit 0", json!({})));
        // view: reads, never creates.
        let vic = t.as_user("vic").await?;
        assert_eq!(
            vic.procs().list(&ListParams::default()).await?.items.len(),
            1
        );
        let e = vic.create_proc(o.clone()).await.unwrap_err();
        assert_eq!(kube_status(&e).map(|s| s.0), Some(403), "{e:#}");
        // processes without pods/exec: refused, naming pods/exec.
        let pat = t.as_user("pat").await?;
        let e = pat.create_proc(o.clone()).await.unwrap_err();
        let (code, _, message) = kube_status(&e).context("an API status")?;
        assert_eq!(code, 403, "{message}");
        assert!(
            message.contains("pods/exec") && message.contains("starting a process"),
            "{message}"
        );
        ensure!(
            t.procs().get_opt("p").await?.is_none(),
            "created although refused"
        );
        // Output: the view role reads it (get on the object, as for a SandboxProcess's).
        let log =
            format!("/apis/processes.sandbox.dev/v1alpha1/namespaces/{ns}/processes/mine/log");
        follow::get_text(&vic.client, &log).await?;
        // A signal needs pods/exec on the process's pod too.
        let signal = log.replace("/log", "/signal");
        let req = http::Request::post(signal.as_str())
            .header("content-type", "application/json")
            .body(br#"{"signal": 15}"#.to_vec())?;
        let e = pat.client.request_text(req).await.unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("pods/exec") && e.contains("signalling a Process"),
            "{e}"
        );
        // Nobody here may list processes across namespaces.
        let e = vic
            .client
            .request::<serde_json::Value>(
                http::Request::get("/apis/processes.sandbox.dev/v1alpha1/processes")
                    .body(vec![])?,
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("forbidden"), "{e} ({ns})");
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn bad_input_is_refused_naming_the_field() {
    with_ns("proc-bad", |t| async move {
        t.pods([pod("work", None)]).await?;
        let cases = [
            (process("neg", "work", json!({"command": ["true"], "timeoutSeconds": -1})), 422, "spec.timeoutSeconds"),
            (process("empty", "work", json!({"command": []})), 422, "spec.command"),
            (process("ref", "work", json!({"command": ["true"], "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]})), 422, "spec.env: SecretNotFound"),
            (process("Bad_Name", "work", json!({"command": ["true"]})), 422, "metadata.name"),
            (process("nopod", "nosuch", json!({"command": ["true"]})), 404, "pods \"nosuch\" not found"),
            (process("noctr", "work", json!({"command": ["true"], "container": "nope"})), 400, "container nope"),
        ];
        for (o, code, says) in cases {
            let e = t.create_proc(o).await.unwrap_err();
            let (got, _, message) = kube_status(&e).with_context(|| format!("{e:#}"))?;
            assert_eq!(got, code, "{message}");
            assert!(message.contains(says), "{message} (wanted {says:?})");
        }
        // A typo is refused under strict field validation, naming the field (as kubectl sends it).
        let body = serde_json::to_vec(&process("typo", "work", json!({"command": ["true"], "comand": ["x"]})))?;
        let path = format!("/apis/processes.sandbox.dev/v1alpha1/namespaces/{}/processes?fieldValidation=Strict", t.name);
        let e = t
            .client
            .request::<serde_json::Value>(http::Request::post(path).header("content-type", "application/json").body(body)?)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("unknown field \"spec.comand\""), "{e}");
        ensure!(t.procs().list(&ListParams::default()).await?.items.is_empty(), "a refused create left a process");
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn an_ended_process_goes_after_its_ttl() {
    with_ns("proc-ttl", |t| async move {
        t.pods([pod("work", None)]).await?;
        t.create_proc(process(
            "short",
            "work",
            sh("exit 3", json!({"ttlSecondsAfterFinished": 2})),
        ))
        .await?;
        t.until_proc("short", 60, "exit", |o| {
            text(o, "/status/phase") == "Exited"
        })
        .await?;
        t.until_proc_gone("short", 30).await?;
        Ok(())
    })
    .await;
}

/// kube-rs's watcher over the resource: every process seen in its final state with its exact
/// exit code, and nothing invented.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn a_watcher_sees_each_process_end_with_its_code() {
    with_ns("proc-watch", |t| async move {
        t.pods([pod("work", None)]).await?;
        const N: usize = 40;
        let seen = watch_until_final(&t, N, Duration::from_secs(120), || async {
            for i in 0..N {
                let o = process(
                    &format!("w{i}"),
                    "work",
                    sh(&format!("exit {}", i % 7), json!({})),
                );
                t.procs()
                    .create(&PostParams::default(), &serde_json::from_value(o)?)
                    .await?;
            }
            Ok(())
        })
        .await?;
        for i in 0..N {
            assert_eq!(
                seen.get(&format!("w{i}")).map(String::as_str),
                Some((i % 7).to_string().as_str())
            );
        }
        Ok(())
    })
    .await;
}

/// Runs `make` while a watcher (kube::runtime::watcher) follows the namespace; returns each
/// name's exit code once `n` processes are final. Fails on a name it did not make.
pub async fn watch_until_final<F, Fut>(
    t: &sandbox_e2e::TestNs,
    n: usize,
    within: Duration,
    make: F,
) -> Result<BTreeMap<String, String>>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let stream = watcher(t.procs(), watcher::Config::default()).applied_objects();
    let follow = async {
        let mut stream = std::pin::pin!(stream);
        let mut finals = BTreeMap::new();
        while let Some(o) = stream.try_next().await? {
            if text(&o, "/status/phase") == "Exited" {
                finals.insert(text(&o, "/metadata/name"), text(&o, "/status/exit/code"));
            }
            if finals.len() >= n {
                return Ok::<_, anyhow::Error>(finals);
            }
        }
        anyhow::bail!("the watcher ended")
    };
    let (finals, made) = tokio::join!(tokio::time::timeout(within, follow), make());
    made?;
    finals.map_err(|_| anyhow::anyhow!("not all {n} processes seen final within {within:?}"))?
}

/// A namespace deleted: its processes go too (stopped, forgotten), as its SandboxProcesses do.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn a_deleted_namespace_takes_its_processes() {
    with_ns("proc-nsgone", |t| async move {
        // A second namespace of this test's, labelled as temporary too (a killed run's is swept).
        let other = format!("{}-x", t.name);
        let label = format!("{}={}", sandbox_e2e::ns::LABEL, "processes");
        cmd::kubectl(&["create", "namespace", &other]).await?;
        cmd::kubectl(&["label", "namespace", &other, &label]).await?;
        let o = sandbox_e2e::TestNs {
            name: other.clone(),
            ..t.clone()
        };
        o.pods([pod("work", None)]).await?;
        o.create_proc(process("lives", "work", sh("sleep 300", json!({}))))
            .await?;
        o.until_proc("lives", 60, "run", |p| {
            text(p, "/status/phase") == "Running"
        })
        .await?;
        cmd::kubectl(&["delete", "namespace", &other, "--wait=false"]).await?;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let all = cmd::kubectl(&[
                "get",
                "processes",
                "-A",
                "-o",
                "name",
                "--field-selector",
                &format!("metadata.namespace={other}"),
            ])
            .await?;
            if all.trim().is_empty() {
                break;
            }
            ensure!(
                std::time::Instant::now() < deadline,
                "still served 60 s after its namespace was deleted: {all}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(())
    })
    .await;
}

/// kubectl treats processes as any typed resource: it finds the group's OpenAPI v3 and validates
/// on the server (no `/openapi/v2` fetched before a create), `explain` works, and `label`,
/// `annotate` and `patch` change labels and annotations and nothing else.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn kubectl_validates_explains_and_relabels_a_process() {
    with_ns("proc-kubectl", |t| async move {
        t.pods([pod("work", None)]).await?;
        // The API server's aggregator reads a group's OpenAPI when its APIService appears and
        // every minute after.
        let gv = "apis/processes.sandbox.dev/v1alpha1";
        let mut listed = false;
        for _ in 0..90 {
            let root = cmd::kubectl(&["get", "--raw", "/openapi/v3"]).await?;
            let root: serde_json::Value = serde_json::from_str(&root)?;
            if root["paths"].get(gv).is_some() {
                listed = true;
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        ensure!(listed, "/openapi/v3 does not list {gv} after 90 s");
        let manifest = format!(
            "apiVersion: processes.sandbox.dev/v1alpha1\nkind: Process\nmetadata: {{name: k1, namespace: {}}}\nspec: {{podName: work, command: [sleep, '300']}}\n",
            t.name
        );
        let out = cmd::kubectl_stdin(&["create", "-f", "-", "-v=6"], &manifest).await?;
        ensure!(out.success(), "kubectl create: {}", out.stderr);
        ensure!(
            !out.stderr.contains("/openapi/v2"),
            "kubectl fetched /openapi/v2 to validate a Process:\n{}",
            out.stderr
        );
        let typo = manifest.replace("command:", "comand: [x], command:").replace("k1", "k2");
        let out = cmd::kubectl_stdin(&["create", "-f", "-"], &typo).await?;
        ensure!(
            !out.success() && out.stderr.contains("unknown field \"spec.comand\""),
            "{out:?}"
        );
        let explain = cmd::kubectl(&["explain", "processes.spec.command"]).await?;
        ensure!(explain.contains("KIND:       Process"), "{explain}");
        t.kubectl(&["label", "proc", "k1", "tier=web"]).await?;
        t.kubectl(&["annotate", "proc", "k1", "note=any text"]).await?;
        t.kubectl(&["patch", "proc", "k1", "--type=json", "-p", r#"[{"op":"add","path":"/metadata/labels/x","value":"1"}]"#]).await?;
        let by_label = t.procs().list(&ListParams::default().labels("tier=web,x=1")).await?;
        assert_eq!(by_label.items.len(), 1);
        let o = &by_label.items[0];
        assert_eq!(text(o, "/metadata/annotations/note"), "any text");
        assert_eq!(text(o, "/status/phase"), "Running");
        let refusals = [
            (vec!["patch", "proc", "k1", "--type=merge", "-p", r#"{"spec":{"command":["id"]}}"#], "spec: field is immutable"),
            (vec!["label", "proc", "k1", "bad key=x"], "metadata.labels"),
            (vec!["patch", "proc", "k1", "-p", r#"{"metadata":{"labels":{"a":"b"}}}"#], "merge patch"),
        ];
        for (args, want) in refusals {
            let mut all = vec!["-n", t.name.as_str()];
            all.extend(args.iter().copied());
            let out = cmd::run("kubectl", &all, None, Duration::from_secs(60)).await?;
            ensure!(!out.success() && out.stderr.contains(want), "{args:?}: {out:?}");
        }
        let still = t.procs().get("k1").await?;
        assert_eq!(text(&still, "/spec/command/0"), "sleep");
        t.kubectl(&["delete", "proc", "k1"]).await?;
        Ok(())
    })
    .await;
}

/// POST of `body` (JSON) to a path through the API server, as a client of this namespace.
async fn post_json(t: &sandbox_e2e::TestNs, path: &str, body: &[u8]) -> Result<String> {
    let req = http::Request::post(path)
        .header("content-type", "application/json")
        .body(body.to_vec())?;
    Ok(t.client.request_text(req).await?)
}

/// A whole log read: its bytes as text, and its `end` event.
async fn read_log(
    t: &sandbox_e2e::TestNs,
    path: &str,
) -> Result<(String, Option<serde_json::Value>)> {
    let log = follow::get_text(&t.client, path).await?;
    let mut bytes = Vec::new();
    let mut end = None;
    for line in log.lines().filter(|l| !l.is_empty()) {
        let ev: serde_json::Value = serde_json::from_str(line)?;
        match ev["type"].as_str() {
            Some("data") => bytes.extend(follow::decode(&ev)?),
            Some("end") => end = Some(ev),
            _ => {}
        }
    }
    Ok((String::from_utf8(bytes)?, end))
}

/// A Process has the subresources of a SandboxProcess, through its own group: its output (with
/// cursors), stdin, signals.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn a_process_has_the_subresources_of_a_sandbox_process() {
    with_ns("proc-sub", |t| async move {
        t.pods([pod("work", None)]).await?;
        let at = |name: &str, sub: &str| {
            format!(
                "/apis/processes.sandbox.dev/v1alpha1/namespaces/{}/processes/{name}/{sub}",
                t.name
            )
        };
        // Output: every byte of both streams, by cursor.
        t.create_proc(process(
            "out",
            "work",
            sh("echo one; echo two >&2; exit 3", json!({})),
        ))
        .await?;
        t.until_proc("out", 60, "exit", |o| text(o, "/status/phase") == "Exited")
            .await?;
        let (out, end) = read_log(&t, &at("out", "log")).await?;
        ensure!(
            out.contains("one\n") && out.contains("two\n") && out.len() == 8,
            "{out:?}"
        );
        let end = end.context("no end event")?;
        assert_eq!(end["record"]["exit"]["code"], 3, "{end}");
        let (stdout, _) = read_log(&t, &format!("{}?stream=stdout", at("out", "log"))).await?;
        assert_eq!(stdout, "one\n");
        // stdin: written, closed, read by the process.
        t.create_proc(process(
            "cat",
            "work",
            json!({"command": ["cat"], "stdin": true}),
        ))
        .await?;
        t.until_proc("cat", 60, "run", |o| text(o, "/status/phase") == "Running")
            .await?;
        let wrote = post_json(
            &t,
            &format!("{}?offset=0&close=true", at("cat", "stdin")),
            b"hello\n",
        )
        .await?;
        ensure!(wrote.contains("\"closed\":true"), "{wrote}");
        let done = t
            .until_proc("cat", 60, "exit", |o| text(o, "/status/phase") == "Exited")
            .await?;
        assert_eq!(text(&done, "/status/exit/code"), "0");
        assert_eq!(text(&done, "/status/output/tail"), "hello\n");
        // A signal ends a sleeper by it.
        t.create_proc(process("sleeper", "work", sh("sleep 300", json!({}))))
            .await?;
        t.until_proc("sleeper", 60, "run", |o| {
            text(o, "/status/phase") == "Running"
        })
        .await?;
        post_json(&t, &at("sleeper", "signal"), br#"{"signal": 9}"#).await?;
        let done = t
            .until_proc("sleeper", 60, "end", |o| {
                text(o, "/status/phase") == "Exited"
            })
            .await?;
        assert_eq!(text(&done, "/status/exit/signal"), "9", "{:?}", done.data);
        // A refusal names it as what it is.
        let e = follow::get_text(&t.client, &at("out", "stdin"))
            .await
            .unwrap_err();
        ensure!(
            format!("{e:#}")
                .contains("StdinUnavailable: process \"out\" was created without spec.stdin"),
            "{e:#}"
        );
        // No such process: 404 in the resource's words.
        let e = follow::get_text(&t.client, &at("nope", "log"))
            .await
            .unwrap_err();
        ensure!(
            format!("{e:#}").contains("processes.processes.sandbox.dev \"nope\" not found"),
            "{e:#}"
        );
        Ok(())
    })
    .await;
}

/// `env[].valueFrom`: the value read from a Secret when the caller may read it (a
/// SubjectAccessReview before anything is read), never in the object; refused naming the
/// Secret and the field for a caller who may exec into the pod but not read the Secret.
#[tokio::test]
#[ignore = "needs the test cluster: run by e2e/suites/suite"]
async fn env_from_a_secret_needs_get_on_it_and_stays_out_of_the_object() {
    with_ns("proc-env", |t| async move {
        t.pods([pod("work", None)]).await?;
        t.kubectl(&[
            "create",
            "secret",
            "generic",
            "creds",
            "--from-literal=token=s3cr3t-v4lue",
        ])
        .await?;
        t.kubectl(&["create", "configmap", "conf", "--from-literal=mode=fast"])
            .await?;
        let env = json!([
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "conf", "key": "mode"}}},
        ]);
        let spec = sh("echo $TOKEN $MODE", json!({"env": env}));
        t.create_proc(process("reads", "work", spec.clone()))
            .await?;
        let done = t
            .until_proc("reads", 60, "exit", |o| {
                text(o, "/status/phase") == "Exited"
            })
            .await?;
        assert_eq!(text(&done, "/status/output/tail"), "s3cr3t-v4lue fast\n");
        // The tail is the process's own output; the object itself holds the reference only.
        let mut o = serde_json::to_value(&done)?;
        o["status"]["output"] = json!(null);
        ensure!(
            !o.to_string().contains("s3cr3t"),
            "the value in the object: {o}"
        );
        // May exec into the pod, may not read the Secret: refused before anything is read.
        t.kubectl(&[
            "create",
            "role",
            "execer",
            "--verb=create,get",
            "--resource=pods/exec,processes.processes.sandbox.dev",
        ])
        .await?;
        t.kubectl(&[
            "create",
            "rolebinding",
            "execer",
            "--role=execer",
            "--user=eve",
        ])
        .await?;
        let eve = t.as_user("eve").await?;
        let e = eve
            .create_proc(process("steal", "work", spec))
            .await
            .unwrap_err();
        let (code, _, message) = kube_status(&e).context("an API status")?;
        assert_eq!(code, 403, "{message}");
        ensure!(
            message.contains("secrets \"creds\"") && message.contains("spec.env[0].valueFrom"),
            "{message}"
        );
        ensure!(
            t.procs().get_opt("steal").await?.is_none(),
            "created although refused"
        );
        Ok(())
    })
    .await;
}
