//! A process's stdin (`stdin: true`) against real runc containers: bytes arrive once and in
//! order, across retries and an agent restart; wrong offsets are refused naming the right one;
//! a process that does not read takes only what its pipe holds; close and stop send EOF.
mod common;

use std::time::Duration;

use common::*;
use sandbox_wire::wire::{EndReason, StartRequest};
use sha2::{Digest, Sha256};

const T: Duration = Duration::from_secs(30);

fn fx() -> Fx {
    Fx::new("stdin", 0, &[])
}

fn with_stdin(c: &Container, cmd: &[&str]) -> StartRequest {
    let mut r = req(c, cmd);
    r.stdin = true;
    r
}

/// Deterministic bytes that are not text.
fn bytes(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Sends `data` from `offset` until all is taken (a write may take less); the end offset.
async fn send_all(a: &Agent, id: &str, mut offset: u64, data: &[u8]) -> u64 {
    let end = offset + data.len() as u64;
    let start = offset;
    while offset < end {
        let from = (offset - start) as usize;
        let to = (from + (256 << 10)).min(data.len());
        let (s, v) = a.stdin(id, offset, &data[from..to], false).await;
        assert_eq!(s, 200, "write at {offset}: {v}");
        let taken = v["bytes"].as_u64().unwrap();
        assert!(taken >= offset, "{v}");
        if taken == offset {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        offset = taken;
    }
    offset
}

#[tokio::test]
async fn bytes_arrive_once_in_order_across_retries_and_an_agent_restart() {
    let mut f = fx();
    let data = bytes(4 << 20);
    let r = f
        .agent
        .start(&with_stdin(&f.ctr, &["sha256sum"]))
        .await
        .unwrap();
    let id = r.exec_id.clone();
    let half = data.len() / 2;
    let at = send_all(&f.agent, &id, 0, &data[..half]).await;
    assert_eq!(at, half as u64);
    // A retry of accepted bytes (the whole first chunk again, and a part of it): acknowledged
    // with the current end, not written twice.
    let (s, v) = f.agent.stdin(&id, 0, &data[..1000], false).await;
    assert_eq!((s, v["bytes"].as_u64()), (200, Some(at)), "{v}");
    let (s, v) = f.agent.stdin(&id, 10, &data[10..20], false).await;
    assert_eq!((s, v["bytes"].as_u64()), (200, Some(at)), "{v}");
    // A retry with other bytes than were taken there is refused, not acknowledged.
    let mut other = data[at as usize - 100..at as usize].to_vec();
    other[50] ^= 1;
    let (s, v) = f.agent.stdin(&id, at - 100, &other, false).await;
    assert_eq!((s, v["code"].as_str()), (409, Some("StdinConflict")), "{v}");
    // (Nothing of it was written: the digest at the end is of `data` alone.)
    // A gap and an overlap: refused, naming where to write from.
    for offset in [at + 5, at - 5] {
        let (s, v) = f
            .agent
            .stdin(
                &id,
                offset,
                &data[offset as usize..offset as usize + 10],
                false,
            )
            .await;
        assert_eq!(
            (s, v["code"].as_str()),
            (409, Some("StdinOffsetMismatch")),
            "{v}"
        );
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .contains(&format!("write from offset {at}")),
            "{v}"
        );
    }
    // The agent dies and comes back: the supervisor kept stdin and its offset.
    f.agent.kill9();
    f.agent.spawn();
    f.agent.client = reqwest::Client::new(); // its pooled connections went with the old agent
    let rec = f.agent.record(&id).await;
    assert_eq!(rec.stdin.map(|s| (s.bytes, s.closed)), Some((at, false)));
    let end = send_all(&f.agent, &id, at, &data[half..]).await;
    assert_eq!(end, data.len() as u64);
    // EOF: sha256sum prints the digest of exactly the bytes sent, once each.
    let (s, v) = f.agent.stdin(&id, end, b"", true).await;
    assert_eq!((s, v["closed"].as_bool()), (200, Some(true)), "{v}");
    let rec = f.agent.wait_final(&id, T).await;
    assert_eq!(rec.exit.map(|e| e.code), Some(0));
    let want = format!("{:x}  -\n", Sha256::digest(&data));
    assert_eq!(text(&f.agent.logs(&id, "").await, Some("stdout")), want);
    assert_eq!(rec.stdin.map(|s| (s.bytes, s.closed)), Some((end, true)));
    // Ended: nothing more is taken.
    let (s, v) = f.agent.stdin(&id, end, b"x", false).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (409, Some("StdinUnavailable")),
        "{v}"
    );
}

#[tokio::test]
async fn a_process_that_does_not_read_takes_only_what_its_pipe_holds() {
    let f = fx();
    let r = f
        .agent
        .start(&with_stdin(&f.ctr, &["sleep", "30"]))
        .await
        .unwrap();
    let id = r.exec_id.clone();
    let chunk = bytes(1 << 20);
    let mut at = 0;
    for _ in 0..4 {
        let (s, v) = f.agent.stdin(&id, at, &chunk, false).await;
        assert_eq!(s, 200, "{v}");
        at = v["bytes"].as_u64().unwrap();
    }
    // The pipe's capacity (1 MiB where allowed, 64 KiB at least), not the 4 MiB offered.
    assert!((64 << 10..=1 << 20).contains(&at), "taken {at}");
    // A write bigger than one request may carry is refused, naming the limit.
    let (s, v) = f.agent.stdin(&id, at, &bytes((1 << 20) + 1), false).await;
    assert!(s == 400 || s == 413, "{s} {v}");
    // Stop: stdin is closed with it, and the process ends Stopped.
    let (s, _) = f.agent.signal(&id, serde_json::json!({"stop": true})).await;
    assert_eq!(s, 200);
    let rec = f.agent.wait_final(&id, T).await;
    assert_eq!(rec.end_reason, Some(EndReason::Stopped));
    assert_eq!(rec.stdin.map(|s| (s.bytes, s.closed)), Some((at, true)));
}

#[tokio::test]
async fn without_stdin_writes_are_refused_and_the_process_reads_nothing() {
    let f = fx();
    let r = f
        .agent
        .start(&req(&f.ctr, &["sh", "-c", "cat; echo eof"]))
        .await
        .unwrap();
    let (s, v) = f.agent.stdin(&r.exec_id, 0, b"hello", false).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (409, Some("StdinUnavailable")),
        "{v}"
    );
    let rec = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(rec.output.tail, "eof\n");
    assert_eq!(rec.stdin, None);
}

/// Two writers at the same offset at once, with different bytes: one is taken, the other is
/// refused as a conflict (never acknowledged and dropped), and so is its retry.
#[tokio::test]
async fn different_bytes_at_the_same_offset_conflict() {
    let f = fx();
    let r = f.agent.start(&with_stdin(&f.ctr, &["cat"])).await.unwrap();
    let id = r.exec_id.clone();
    let (a, b) = (
        b"from writer A\n".as_slice(),
        b"from writer B!\n".as_slice(),
    );
    let ((sa, va), (sb, vb)) = tokio::join!(
        f.agent.stdin(&id, 0, a, false),
        f.agent.stdin(&id, 0, b, false)
    );
    let (winner, loser, lost) = match (sa, sb) {
        (200, 409) => (a, b, vb),
        (409, 200) => (b, a, va),
        other => panic!("one taken, one refused: {other:?} {va} {vb}"),
    };
    assert_eq!(lost["code"].as_str(), Some("StdinConflict"), "{lost}");
    let (s, v) = f.agent.stdin(&id, 0, loser, false).await;
    assert_eq!((s, v["code"].as_str()), (409, Some("StdinConflict")), "{v}");
    // The winner's retry is acknowledged, and the stream is the winner's bytes only.
    let (s, v) = f.agent.stdin(&id, 0, winner, true).await;
    assert_eq!((s, v["closed"].as_bool()), (200, Some(true)), "{v}");
    let rec = f.agent.wait_final(&id, T).await;
    assert_eq!(rec.exit.map(|e| e.code), Some(0));
    assert_eq!(
        text(&f.agent.logs(&id, "").await, Some("stdout")).as_bytes(),
        winner
    );
}

/// A second writer refused over the first one's bytes is told whose they are, so two people
/// attached to one plain stdin see why one of them was turned away.
#[tokio::test]
async fn a_refused_writer_is_told_who_wrote_first() {
    let f = fx();
    let r = f.agent.start(&with_stdin(&f.ctr, &["cat"])).await.unwrap();
    let id = r.exec_id.clone();
    let (s, v) = f.agent.stdin_as(&id, 0, b"alice's\n", "by=alice").await;
    assert_eq!(s, 200, "{v}");
    for (offset, data) in [(0, &b"bob's!!\n"[..]), (3, b"x")] {
        let (s, v) = f.agent.stdin_as(&id, offset, data, "by=bob").await;
        assert_eq!(s, 409, "{v}");
        let m = v["message"].as_str().unwrap();
        assert!(m.contains("written by \"alice\""), "{m}");
    }
    // Alice's own retry is acknowledged, and a refusal of hers names nobody else.
    let (s, v) = f.agent.stdin_as(&id, 0, b"alice's\n", "by=alice").await;
    assert_eq!((s, v["bytes"].as_u64()), (200, Some(8)), "{v}");
    let (s, v) = f.agent.stdin_as(&id, 20, b"y", "by=alice").await;
    assert_eq!(s, 409, "{v}");
    assert!(
        !v["message"].as_str().unwrap().contains("written by"),
        "{v}"
    );
    // A control character in the label does not reach the message.
    let (_, v) = f.agent.stdin_as(&id, 8, b"m", "by=mal%0Alory").await;
    let (_, v2) = f.agent.stdin_as(&id, 8, b"n", "by=bob").await;
    assert_eq!(v["bytes"].as_u64(), Some(9), "{v}");
    assert!(
        v2["message"].as_str().unwrap().contains("\"mallory\""),
        "{v2}"
    );
    f.agent.stdin(&id, 9, b"", true).await;
    f.agent.wait_final(&id, T).await;
}
