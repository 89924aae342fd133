//! A `Process` as clients read it: the object kept on its node, with the status a SandboxProcess
//! would have (the same pure [`crate::status::compute`], from the agent's record), and its row of
//! `kubectl get processes` (the columns of `kubectl get sbp`).
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use sandbox_api::crd::{SandboxProcessSpec, SandboxProcessStatus};
use sandbox_api::wire::{ProcessObject, ProcessRecord};
use serde_json::{json, Value};

use super::{GROUP_VERSION, KIND};
use crate::status::{self, AgentView, ContainerFacts, Facts, PodFacts, PodPhase};

/// What a row of the table and the field selectors read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Columns {
    pub pod: String,
    pub node: String,
    pub phase: String,
    pub ready: String,
    pub restarts: i64,
    pub exit: Option<i64>,
    pub reason: String,
    pub created: String,
}

pub struct Rendered {
    pub status: SandboxProcessStatus,
    pub columns: Columns,
}

/// The status of the process this record is, after `prev` (`None`: first seen), with what its
/// agent says now (`None`: the record itself; else its agent unreachable). `None` when the kept
/// spec does not read as a spec (written by a newer operator).
pub fn render(
    rec: &ProcessRecord,
    obj: &ProcessObject,
    prev: Option<&SandboxProcessStatus>,
    view: Option<&AgentView>,
    output_due: bool,
    now: Time,
) -> Option<Rendered> {
    let spec: SandboxProcessSpec = serde_json::from_value(obj.spec.clone()).ok()?;
    let created = parse_time(&obj.creation_timestamp);
    // What the agent knows of the pod: the process runs in its container while the record says
    // so; the container's end and the pod's deletion end the record (`endReason`).
    let pod = PodFacts {
        uid: rec.pod_uid.clone(),
        node_name: Some(obj.node_name.clone()),
        phase: PodPhase::Running,
        terminating: false,
        container: ContainerFacts::Found {
            name: rec.container.clone(),
            running: true,
        },
    };
    let default = SandboxProcessStatus::default();
    let record = AgentView::Record(Box::new(rec.clone()));
    let agent = view.unwrap_or(&record);
    let facts = Facts {
        generation: Some(1),
        spec: &spec,
        prev: prev.unwrap_or(&default),
        pod_name: &obj.pod_name,
        pod: Some(&pod),
        created: created.as_ref(),
        agent,
        invalid: None,
        now,
        // A view other than the record comes from the keeper, which has judged the grace.
        agent_grace: if view.is_some() {
            Duration::ZERO
        } else {
            Duration::from_secs(30)
        },
        output_due,
    };
    let status = status::compute(&facts);
    let columns = columns(&status, obj);
    Some(Rendered { status, columns })
}

fn parse_time(s: &str) -> Option<Time> {
    s.parse().ok().map(Time)
}

fn columns(s: &SandboxProcessStatus, obj: &ProcessObject) -> Columns {
    let ready = s
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
        .unwrap_or_default();
    Columns {
        pod: s.pod_name.clone().unwrap_or_else(|| obj.pod_name.clone()),
        node: obj.node_name.clone(),
        phase: s.phase.map(|p| p.to_string()).unwrap_or_default(),
        ready,
        restarts: s.restart_count.into(),
        exit: s.exit.as_ref().map(|e| e.code.into()),
        reason: s.end_reason.map(|r| r.to_string()).unwrap_or_default(),
        created: obj.creation_timestamp.clone(),
    }
}

/// The object, as JSON text.
pub fn to_json(
    rec: &ProcessRecord,
    obj: &ProcessObject,
    status: &SandboxProcessStatus,
    rv: u64,
) -> String {
    let mut metadata = json!({
        "name": obj.name,
        "namespace": obj.namespace,
        "uid": rec.exec_id,
        "resourceVersion": rv.to_string(),
        "generation": 1,
        "creationTimestamp": obj.creation_timestamp,
    });
    if !obj.labels.is_empty() {
        metadata["labels"] = json!(obj.labels);
    }
    if !obj.annotations.is_empty() {
        metadata["annotations"] = json!(obj.annotations);
    }
    json!({
        "apiVersion": GROUP_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": obj.spec,
        "status": status,
    })
    .to_string()
}

/// The table's columns, as `kubectl get sbp` prints them (the CRD's printer columns).
pub fn column_definitions() -> Value {
    let col = |name: &str, ty: &str, format: &str, description: &str, priority: i32| json!({"name": name, "type": ty, "format": format, "description": description, "priority": priority});
    json!([
        col("Name", "string", "name", "the process's name", 0),
        col("Pod", "string", "", "the pod it runs in", 0),
        col("Phase", "string", "", "status.phase", 0),
        col("Ready", "string", "", "the Ready condition", 0),
        col("Restarts", "integer", "", "status.restartCount", 0),
        col("Exit", "integer", "", "status.exit.code", 0),
        col("Reason", "string", "", "status.endReason", 0),
        col("Age", "date", "", "metadata.creationTimestamp", 0),
        col("Node", "string", "", "the node it runs on", 1),
    ])
}

/// One row: its cells, and the object it is of (metadata only unless `whole`).
pub fn row(c: &Columns, object: &Value, whole: bool) -> Value {
    let age = age(&c.created);
    let object = if whole {
        object.clone()
    } else {
        json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": object["metadata"],
        })
    };
    json!({
        "cells": [object["metadata"]["name"], c.pod, c.phase, c.ready, c.restarts, c.exit, c.reason, age, c.node],
        "object": object,
    })
}

/// kubectl's short age (`5s`, `3m`, `2h`, `4d`), as the API server's table printer writes it.
fn age(created: &str) -> String {
    let Ok(t) = created.parse::<k8s_openapi::jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = k8s_openapi::jiff::Timestamp::now()
        .duration_since(t)
        .as_secs()
        .max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// An answer of JSON `body` (an object, a list, a Table) with `code`: every handler's.
pub fn json_answer(code: axum::http::StatusCode, body: String) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        code,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_api::wire::{EndReason, ExitStatus, Phase};

    fn object() -> ProcessObject {
        ProcessObject {
            namespace: "ns".into(),
            name: "p1".into(),
            creation_timestamp: "2026-12-06T10:00:00Z".into(),
            labels: [("app".to_string(), "a".to_string())].into(),
            annotations: Default::default(),
            pod_name: "pod-1".into(),
            node_name: "node-1".into(),
            spec: json!({"podName": "pod-1", "command": ["sh", "-c", "exit 3"]}),
        }
    }

    /// A record the agent ended with code 3 reads as a SandboxProcess would: Exited, exit 3,
    /// in the pod it ran in; the table row says the same.
    #[test]
    fn an_ended_record_reads_as_a_sandboxprocess_status() {
        let obj = object();
        let rec = ProcessRecord {
            phase: Phase::Exited,
            started_at: Some("2026-12-06T10:00:01Z".into()),
            finished_at: Some("2026-12-06T10:00:02Z".into()),
            exit: Some(ExitStatus {
                code: 3,
                signal: None,
                timed_out: false,
            }),
            end_reason: Some(EndReason::Exited),
            object: Some(Box::new(obj.clone())),
            ..ProcessRecord::starting("u-1", "pod-uid", "main", "ctr")
        };
        let now = Time("2026-12-06T10:00:03Z".parse().unwrap());
        let r = render(&rec, &obj, None, None, true, now).expect("rendered");
        assert!(r.status.is_final(), "{:?}", r.status);
        assert_eq!(r.columns.phase, "Exited");
        assert_eq!(r.columns.exit, Some(3));
        assert_eq!(r.columns.pod, "pod-1");
        let v: Value = serde_json::from_str(&to_json(&rec, &obj, &r.status, 7)).unwrap();
        assert_eq!(v["kind"], "Process");
        assert_eq!(v["apiVersion"], "processes.sandbox.dev/v1alpha1");
        assert_eq!(v["metadata"]["resourceVersion"], "7");
        assert_eq!(v["metadata"]["uid"], "u-1");
        assert_eq!(v["metadata"]["labels"]["app"], "a");
        assert_eq!(v["status"]["exit"]["code"], 3);
        assert_eq!(v["status"]["phase"], "Exited");
        let row = row(&r.columns, &v, false);
        assert_eq!(row["cells"][0], "p1");
        assert_eq!(row["cells"][2], "Exited");
        assert_eq!(row["cells"][5], 3);
        assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(row["object"]["metadata"]["namespace"], "ns");
    }

    #[test]
    fn a_spec_this_operator_cannot_read_is_not_served() {
        let mut obj = object();
        obj.spec = json!({"command": "not a list"});
        let rec = ProcessRecord::starting("u", "p", "c", "");
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        assert!(render(&rec, &obj, None, None, true, now).is_none());
    }

    #[test]
    fn ages_as_kubectl_prints_them() {
        assert_eq!(age("garbage"), "<unknown>");
        let ago = |s: i64| {
            (k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(s))
                .to_string()
        };
        assert_eq!(age(&ago(5)), "5s");
        assert_eq!(age(&ago(600)), "10m");
        assert_eq!(age(&ago(3 * 3600)), "3h");
        assert_eq!(age(&ago(5 * 86_400)), "5d");
    }
}
