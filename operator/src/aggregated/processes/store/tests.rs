use super::*;
use sandbox_api::wire::{EndReason, ExitStatus, Phase, ProcessObject};
use serde_json::json;

fn rec(id: &str, name: &str, phase: Phase) -> ProcessRecord {
    let obj = ProcessObject {
        namespace: "ns".into(),
        name: name.into(),
        creation_timestamp: "2026-12-06T10:00:00Z".into(),
        labels: Default::default(),
        annotations: Default::default(),
        pod_name: "pod".into(),
        node_name: "n1".into(),
        spec: json!({"podName": "pod", "command": ["true"]}),
    };
    let mut r = ProcessRecord {
        phase,
        started_at: Some("2026-12-06T10:00:01Z".into()),
        object: Some(Box::new(obj)),
        ..ProcessRecord::starting(id, "pod-uid", "c", "ctr")
    };
    if phase == Phase::Exited {
        r.finished_at = Some("2026-12-06T10:00:02Z".into());
        r.exit = Some(ExitStatus {
            code: 0,
            signal: None,
            timed_out: false,
        });
        r.end_reason = Some(EndReason::Exited);
    }
    r
}

/// Each change gets the next resourceVersion and reaches the window and the subscribers; a
/// record seen again unchanged is no change; a forgotten one is DELETED with its last state.
#[test]
fn changes_are_numbered_kept_and_sent() {
    let s = Store::new(1000);
    let (_, rv0, mut rx) = s.snapshot();
    s.upsert("a1", &rec("u1", "p1", Phase::Running));
    s.upsert("a1", &rec("u1", "p1", Phase::Running));
    s.upsert("a1", &rec("u1", "p1", Phase::Exited));
    s.remove("u1");
    s.remove("u1");
    // The watch's last upsert, sent before the agent forgot it, arrives late: not back.
    s.upsert("a1", &rec("u1", "p1", Phase::Exited));
    let kinds: Vec<(u64, Kind)> = std::iter::from_fn(|| rx.try_recv().ok())
        .map(|c| (c.rv, c.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (rv0 + 1, Kind::Added),
            (rv0 + 2, Kind::Modified),
            (rv0 + 3, Kind::Deleted)
        ]
    );
    assert!(s.get("ns", "p1").is_none());
    match s.since(rv0 + 1) {
        Since::Changes(c, _) => assert_eq!(c.len(), 2),
        Since::Expired => panic!("within the window"),
    }
    assert!(matches!(s.since(rv0 - 1), Since::Expired));
}

/// A name is one process's: a second process with it (two replicas racing) is not served.
#[test]
fn a_name_is_held_by_its_first_process() {
    let s = Store::new(1000);
    s.upsert("a1", &rec("u1", "p1", Phase::Running));
    s.upsert("a2", &rec("u2", "p1", Phase::Running));
    assert_eq!(s.get("ns", "p1").unwrap().exec_id, "u1");
    assert_eq!(s.live_in("ns"), 1);
    s.upsert("a1", &rec("u1", "p1", Phase::Exited));
    assert_eq!(s.live_in("ns"), 0);
    assert_eq!(s.live_in("other"), 0);
    let (items, rv) = s.list();
    assert_eq!(items.len(), 1);
    assert_eq!(rv, s.current_rv());
}

/// Records of SandboxProcesses (no object) are not this table's.
#[test]
fn records_without_an_object_are_ignored() {
    let s = Store::new(1000);
    let mut r = rec("u1", "p1", Phase::Running);
    r.object = None;
    s.upsert("a1", &r);
    assert!(s.list().0.is_empty());
}

/// The window keeps the latest WINDOW changes: resuming before them is 410.
#[test]
fn a_watch_older_than_the_window_must_relist() {
    let s = Store::new(1000);
    let rv0 = s.current_rv();
    for i in 0..(WINDOW + 2) {
        let phase = if i % 2 == 0 {
            Phase::Running
        } else {
            Phase::Exited
        };
        s.upsert("a1", &rec(&format!("u{i}"), &format!("p{i}"), phase));
    }
    assert!(matches!(s.since(rv0), Since::Expired));
    assert!(matches!(s.since(s.current_rv() - 10), Since::Changes(..)));
}

/// A start's answer overtaken by the watch (a newer revision first) does not go back in time.
#[test]
fn an_older_revision_does_not_replace_a_newer_one() {
    let s = Store::new(1000);
    let mut done = rec("u1", "p1", Phase::Exited);
    done.revision = 5;
    s.upsert("a1", &done);
    let mut start = rec("u1", "p1", Phase::Running);
    start.revision = 1;
    s.upsert("a1", &start);
    assert_eq!(s.get("ns", "p1").unwrap().columns.phase, "Exited");
}
