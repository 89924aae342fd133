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

/// Its agent unreachable, then answering again: one change each way, the relisting's unchanged
/// record clears the error, and a view of the agent as down since before that record spoke (a
/// keeper's round that raced the relisting) changes nothing.
#[test]
fn an_unreachable_agent_is_shown_once_and_cleared_by_its_record() {
    let s = Store::new(1000);
    let (_, _, mut rx) = s.snapshot();
    let r = rec("u1", "p1", Phase::Running);
    s.upsert("a1", &r);
    let tick = || std::thread::sleep(std::time::Duration::from_millis(2));
    let down = |since: &Time| AgentView::Unreachable {
        since: since.clone(),
        message: "its watch stream is down".into(),
    };
    tick();
    let since = now(); // seen down after its record last spoke
    let stand_in = s.get("ns", "p1").unwrap().stand_in().unwrap();
    s.put("a1", &stand_in, Some(&down(&since)));
    let shown = s.get("ns", "p1").unwrap();
    assert!(shown.unreachable && shown.kept.erred, "{}", shown.json);
    // The same view next round: no change.
    s.put("a1", &stand_in, Some(&down(&since)));
    // The relisting sends the record, unchanged since before: it speaks again.
    tick();
    s.upsert("a1", &r);
    let back = s.get("ns", "p1").unwrap();
    assert!(!back.unreachable && !back.kept.erred, "{}", back.json);
    assert_eq!(back.columns.phase, "Running");
    // A round that read the agent as down before the relisting: stale, ignored.
    s.put("a1", &stand_in, Some(&down(&since)));
    assert!(!s.get("ns", "p1").unwrap().unreachable);
    s.upsert("a1", &r);
    let kinds: Vec<Kind> = std::iter::from_fn(|| rx.try_recv().ok())
        .map(|c| c.kind)
        .collect();
    assert_eq!(kinds, [Kind::Added, Kind::Modified, Kind::Modified]);
}

/// What the keeper, the bound, a delete and attach read without the JSON.
#[test]
fn kept_facts_come_from_the_spec_and_status() {
    let s = Store::new(1000);
    let mut r = rec("u1", "p1", Phase::Running);
    r.object.as_mut().unwrap().spec = json!({"podName": "pod", "command": ["sh"], "tty": true,
        "ttlSecondsAfterFinished": 7, "terminationGracePeriodSeconds": 30});
    s.upsert("a1", &r);
    let e = s.get("ns", "p1").unwrap();
    assert_eq!(
        (e.kept.ended, e.kept.ttl, e.kept.grace, e.kept.tty),
        (false, Some(7), 30, true)
    );
    s.upsert("a1", &rec("u2", "p2", Phase::Exited));
    let e = s.get("ns", "p2").unwrap();
    assert_eq!(
        (e.kept.ended, e.kept.ttl, e.kept.grace, e.kept.tty),
        (true, None, 5, false)
    );
    assert_eq!(
        e.kept.end.as_ref().map(|t| t.0.to_string()).as_deref(),
        Some("2026-12-06T10:00:02Z")
    );
    assert_eq!(e.spec(), json!({"podName": "pod", "command": ["true"]}));
}
