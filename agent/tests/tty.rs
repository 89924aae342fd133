//! A process on a terminal (`tty`) against real runc containers: it has a pty as its controlling
//! terminal, of the size asked for and then resized; its output is one stream; a shell reads
//! commands from it, and Ctrl-C reaches the foreground job the way a terminal delivers it.
mod common;

use std::time::{Duration, Instant};

use common::*;
use sandbox_wire::wire::{StartRequest, TerminalSize};
use serde_json::json;

const T: Duration = Duration::from_secs(30);

fn fx() -> Fx {
    Fx::new("tty", 0, &[])
}

fn with_tty(c: &Container, cmd: &[&str], rows: u16, cols: u16) -> StartRequest {
    let mut r = req(c, cmd);
    r.stdin = true;
    r.tty = Some(TerminalSize { rows, cols });
    r
}

/// Everything the process wrote so far (both streams).
async fn output(a: &Agent, id: &str) -> String {
    text(&a.logs(id, "").await, None)
}

/// Waits until the output holds `want`; the output then.
async fn wait_output(a: &Agent, id: &str, want: &str) -> String {
    let deadline = Instant::now() + T;
    loop {
        let out = output(a, id).await;
        if out.contains(want) {
            return out;
        }
        assert!(Instant::now() < deadline, "no {want:?} in {out:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Types `data` at the terminal (stdin at `at`); the offset after it.
async fn type_in(a: &Agent, id: &str, at: u64, data: &[u8]) -> u64 {
    typed(a, id, at, data, "close=false").await
}

/// A stdin write that must be taken whole (`query`: who writes); the offset after it.
async fn typed(a: &Agent, id: &str, at: u64, data: &[u8], query: &str) -> u64 {
    let (s, v) = a.stdin_as(id, at, data, query).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["bytes"].as_u64(), Some(at + data.len() as u64), "{v}");
    at + data.len() as u64
}

#[tokio::test]
async fn a_tty_process_has_a_pty_a_term_and_one_stream() {
    let f = fx();
    let cmd = ["sh", "-c", "tty; echo term=$TERM; echo to-stderr >&2"];
    let r = f
        .agent
        .start(&with_tty(&f.ctr, &cmd, 24, 80))
        .await
        .unwrap();
    let rec = f.agent.wait_final(&r.exec_id, T).await;
    assert_eq!(rec.exit.as_ref().map(|e| e.code), Some(0), "{rec:?}");
    let events = f.agent.logs(&r.exec_id, "").await;
    let stdout = text(&events, Some("stdout"));
    assert!(stdout.starts_with("/dev/pts/"), "{stdout:?}");
    assert!(
        stdout.ends_with("\r\nterm=xterm\r\nto-stderr\r\n"),
        "{stdout:?}"
    );
    // stderr is the terminal too: one stream, as `kubectl exec -t`.
    assert!(text(&events, Some("stderr")).is_empty());
    assert_eq!(rec.output.stderr_bytes, 0);
    // Its stdin is counted like any other.
    assert!(rec.stdin.is_some(), "{rec:?}");
}

#[tokio::test]
async fn stty_sees_the_initial_size_then_the_resized_one() {
    let f = fx();
    let cmd = [
        "sh",
        "-c",
        "trap 'echo winch' WINCH; stty size; until read x; do :; done; stty size",
    ];
    let r = f
        .agent
        .start(&with_tty(&f.ctr, &cmd, 30, 100))
        .await
        .unwrap();
    let id = r.exec_id.clone();
    wait_output(&f.agent, &id, "30 100\r\n").await;
    let (s, v) = f
        .agent
        .post(
            &format!("/v1/processes/{id}/resize"),
            &json!({"rows": 50, "cols": 120}),
        )
        .await;
    assert_eq!((s, &v), (200, &json!({"rows": 50, "cols": 120})));
    // The kernel told the foreground group (SIGWINCH).
    wait_output(&f.agent, &id, "winch").await;
    type_in(&f.agent, &id, 0, b"\n").await;
    wait_output(&f.agent, &id, "50 120\r\n").await;
    let rec = f.agent.wait_final(&id, T).await;
    assert_eq!(rec.exit.as_ref().map(|e| e.code), Some(0), "{rec:?}");
    // Out of bounds: refused, naming the field; a process without a terminal has none to size.
    let (s, v) = f
        .agent
        .post(
            &format!("/v1/processes/{id}/resize"),
            &json!({"rows": 0, "cols": 80}),
        )
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("terminal.rows"),
        "{v}"
    );
    let plain = f.agent.start(&req(&f.ctr, &["sleep", "30"])).await.unwrap();
    let (s, v) = f
        .agent
        .post(
            &format!("/v1/processes/{}/resize", plain.exec_id),
            &json!({"rows": 10, "cols": 10}),
        )
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("no terminal"),
        "{v}"
    );
    f.agent
        .signal(&plain.exec_id, json!({"stop": true, "graceSeconds": 0}))
        .await;
}

#[tokio::test]
async fn a_shell_reads_commands_from_the_terminal_across_an_agent_restart() {
    let mut f = fx();
    let r = f
        .agent
        .start(&with_tty(&f.ctr, &["sh"], 24, 80))
        .await
        .unwrap();
    let id = r.exec_id.clone();
    // Echoed as typed, then run: the answer (42) is not in what was typed.
    let at = type_in(&f.agent, &id, 0, b"echo $((6*7))\n").await;
    let out = wait_output(&f.agent, &id, "\r\n42\r\n").await;
    assert!(out.contains("echo $((6*7))\r\n"), "echo: {out:?}");
    // The agent dies and comes back: the supervisor kept the terminal.
    f.agent.kill9();
    f.agent.spawn();
    f.agent.client = reqwest::Client::new(); // its pooled connections went with the old agent
    type_in(&f.agent, &id, at, b"stty size; exit 7\n").await;
    let rec = f.agent.wait_final(&id, T).await;
    assert_eq!(rec.exit.as_ref().map(|e| e.code), Some(7), "{rec:?}");
    assert!(output(&f.agent, &id).await.contains("\r\n24 80\r\n"));
}

/// Whether a process of the host runs with exactly this argv.
fn running(argv: &[&str]) -> bool {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .any(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want))
}

#[tokio::test]
async fn ctrl_c_ends_the_foreground_job_and_the_shell_lives_on() {
    let f = fx();
    let r = f
        .agent
        .start(&with_tty(&f.ctr, &["sh", "-i"], 24, 80))
        .await
        .unwrap();
    let id = r.exec_id.clone();
    let at = type_in(&f.agent, &id, 0, b"sleep 4321\n").await;
    // Ctrl-C before the shell has read the line would only flush it: wait for the job to run.
    let deadline = Instant::now() + T;
    while !running(&["sleep", "4321"]) {
        assert!(Instant::now() < deadline, "sleep 4321 never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let at = type_in(&f.agent, &id, at, b"\x03").await;
    // The shell is back at once (not after 4321 s) and runs the next command.
    let at = type_in(&f.agent, &id, at, b"echo alive-$((1+1))\n").await;
    wait_output(&f.agent, &id, "alive-2").await;
    assert!(!running(&["sleep", "4321"]));
    type_in(&f.agent, &id, at, b"exit 3\n").await;
    let rec = f.agent.wait_final(&id, T).await;
    assert_eq!(rec.exit.as_ref().map(|e| e.code), Some(3), "{rec:?}");
}

/// A stdin write to a shared terminal by `writer` at its own offset `at`; the offset after.
async fn type_as(a: &Agent, id: &str, writer: &str, at: u64, data: &[u8]) -> u64 {
    typed(a, id, at, data, &format!("writer={writer}")).await
}

/// Two attachers type into one terminal, as two tmux clients do: each writer's bytes are placed
/// by offsets of its own, so neither refuses the other, each retry is still taken once, and
/// the keys reach the process in the order they arrive.
#[tokio::test]
async fn two_writers_share_a_terminal_and_neither_is_refused() {
    let f = fx();
    let cmd = ["sh", "-c", "read a; read b; read c; echo \"got:$a:$b:$c\""];
    let r = f
        .agent
        .start(&with_tty(&f.ctr, &cmd, 24, 80))
        .await
        .unwrap();
    let id = r.exec_id.clone();
    let a = type_as(&f.agent, &id, "writer-a", 0, b"one\n").await;
    // B starts at its own 0, where A's bytes are: no conflict.
    let b = type_as(&f.agent, &id, "writer-b", 0, b"two\n").await;
    // A's retry of what was taken is acknowledged without typing it again.
    let (s, v) = f.agent.stdin_as(&id, 0, b"one\n", "writer=writer-a").await;
    assert_eq!((s, v["bytes"].as_u64()), (200, Some(a)), "{v}");
    // A gap in A's own bytes is refused, naming A's count.
    let (s, v) = f.agent.stdin_as(&id, a + 5, b"x", "writer=writer-a").await;
    assert_eq!(
        (s, v["code"].as_str()),
        (409, Some("StdinOffsetMismatch")),
        "{v}"
    );
    assert_eq!(
        v["message"].as_str().map(|m| m.contains("are 4")),
        Some(true),
        "{v}"
    );
    // A bad writer id is refused by name.
    let (s, v) = f.agent.stdin_as(&id, 0, b"x", "writer=a%20b").await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("writer: \"a b\""),
        "{v}"
    );
    type_as(&f.agent, &id, "writer-b", b, b"three\n").await;
    wait_output(&f.agent, &id, "got:one:two:three").await;
    let rec = f.agent.wait_final(&id, T).await;
    assert_eq!(rec.exit.as_ref().map(|e| e.code), Some(0), "{rec:?}");
    assert_eq!(
        rec.stdin.map(|s| s.bytes),
        Some(14),
        "all writers' bytes: {rec:?}"
    );
    // A process without a terminal has no shared input.
    let plain = f.agent.start(&with_stdin_only(&f.ctr)).await.unwrap();
    let (s, v) = f.agent.stdin_as(&plain.exec_id, 0, b"x", "writer=w").await;
    assert_eq!(
        (s, v["code"].as_str()),
        (409, Some("StdinUnavailable")),
        "{v}"
    );
    f.agent
        .signal(&plain.exec_id, json!({"stop": true, "graceSeconds": 0}))
        .await;
}

fn with_stdin_only(c: &Container) -> StartRequest {
    let mut r = req(c, &["cat"]);
    r.stdin = true;
    r
}

/// What a terminal of this size shows after `bytes`.
fn shown(bytes: &[u8], rows: u16, cols: u16) -> String {
    let mut p = vt100::Parser::new(rows.try_into().unwrap(), cols.try_into().unwrap(), 0);
    p.process(bytes);
    p.screen().contents()
}

/// The screen an attach starts from is what the terminal shows, not its history: one screenful
/// after 2 MB of output, no query printed long ago in it, and a cursor from which the output
/// goes on with what came after.
#[tokio::test]
async fn the_screen_is_what_the_terminal_shows_with_a_cursor_after_it() {
    use base64::Engine;
    let f = fx();
    let script =
        "seq 1 300000; printf '\\033[6n\\033[c'; echo ready; read x; echo after-$x; read y";
    let r = f
        .agent
        .start(&with_tty(&f.ctr, &["sh", "-c", script], 10, 40))
        .await
        .unwrap();
    let id = r.exec_id.clone();
    wait_output(&f.agent, &id, "ready\r\n").await;
    let t0 = Instant::now();
    let (s, v) = f.agent.get(&format!("/v1/processes/{id}/screen")).await;
    let took = t0.elapsed();
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["kept"], json!(true), "{v}");
    let redraw = base64::engine::general_purpose::STANDARD
        .decode(v["data"].as_str().unwrap())
        .unwrap();
    let history = output(&f.agent, &id).await;
    assert!(history.len() > 2_000_000, "{}", history.len());
    assert!(redraw.len() < 4096, "a screenful: {} bytes", redraw.len());
    assert!(took < Duration::from_millis(200), "{took:?}");
    assert_eq!(shown(&redraw, 10, 40), shown(history.as_bytes(), 10, 40));
    assert!(
        shown(&redraw, 10, 40).contains("300000\nready"),
        "{redraw:?}"
    );
    for q in [&b"\x1b[6n"[..], b"\x1b[c"] {
        assert!(
            !redraw.windows(q.len()).any(|w| w == q),
            "a query in {redraw:?}"
        );
    }
    // The output after the cursor is what came after the screen.
    let cursor = v["cursor"].as_str().unwrap().to_string();
    type_in(&f.agent, &id, 0, b"x\n").await;
    wait_output(&f.agent, &id, "after-x").await;
    let after = text(&f.agent.logs(&id, &format!("since={cursor}")).await, None);
    assert_eq!(after, "x\r\nafter-x\r\n");
    type_in(&f.agent, &id, 2, b"y\n").await;
    f.agent.wait_final(&id, T).await;
    // Ended: no screen to attach to.
    let (s, _) = f.agent.get(&format!("/v1/processes/{id}/screen")).await;
    assert_eq!(s, 400);
}
