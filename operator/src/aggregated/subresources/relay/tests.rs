use std::sync::{Arc, Mutex};

use super::*;

const T: Timing = Timing {
    keepalive: Duration::from_millis(50),
    silence: Duration::from_millis(300),
};

type Feed = mpsc::UnboundedSender<Result<Bytes, String>>;

/// A fake agent connection: what the test sends on the returned sender arrives as chunks; a
/// sender kept but unused is a connection gone silent (no FIN, no RST).
fn conn() -> (Feed, Chunks) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    (
        tx,
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed(),
    )
}

fn ev(kind: &str, cursor: &str) -> Bytes {
    Bytes::from(format!("{{\"type\":\"{kind}\",\"cursor\":\"{cursor}\"}}\n"))
}

/// Connects that hand out `later` in turn and record each query.
fn connects(later: Vec<Chunks>) -> (Connect, Arc<Mutex<Vec<LogQuery>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let later = Arc::new(Mutex::new(later.into_iter()));
    let a = asked.clone();
    let c: Connect = Box::new(move |q| {
        a.lock().unwrap().push(q);
        let next = later.lock().unwrap().next();
        async move { next.ok_or_else(|| "refused".to_string()) }.boxed()
    });
    (c, asked)
}

/// Runs the relay; the events it sent (keepalives counted apart) and how it ended.
async fn relayed(c: Connect, q: LogQuery, first: Chunks) -> (Vec<String>, usize, Option<String>) {
    let (tx, mut rx) = mpsc::channel(16);
    let task = tokio::spawn(run(c, q, first, T, tx));
    let (mut events, mut keepalives, mut error) = (Vec::new(), 0, None);
    while let Some(item) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("the relay hung")
    {
        match item {
            Ok(b) if &b[..] == b"\n" => keepalives += 1,
            Ok(b) => events.push(
                String::from_utf8(b.to_vec())
                    .unwrap()
                    .trim_end()
                    .to_string(),
            ),
            Err(e) => error = Some(e.to_string()),
        }
    }
    task.await.unwrap();
    (events, keepalives, error)
}

fn follow() -> LogQuery {
    LogQuery {
        follow: true,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_silent_agent_connection_is_replaced_from_the_last_cursor() {
    let (a1, first) = conn();
    let (a2, second) = conn();
    a1.send(Ok(ev("data", "c1"))).unwrap();
    a2.send(Ok(ev("data", "c2"))).unwrap();
    a2.send(Ok(ev("end", "c3"))).unwrap();
    let (c, asked) = connects(vec![second]);
    let (events, keepalives, error) = relayed(c, follow(), first).await;
    // c1 once, then what came after it: no gap, no repeat.
    assert_eq!(
        events,
        [ev("data", "c1"), ev("data", "c2"), ev("end", "c3")].map(|b| {
            String::from_utf8(b.to_vec())
                .unwrap()
                .trim_end()
                .to_string()
        })
    );
    assert_eq!(error, None);
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].since.as_deref(), Some("c1"));
    assert!(asked[0].follow);
    // The reader heard keepalives all along, during the silence too.
    assert!(keepalives >= 4, "{keepalives} keepalives");
    drop(a1);
}

#[tokio::test]
async fn agent_keepalives_keep_its_connection() {
    let (a1, first) = conn();
    let (c, asked) = connects(vec![]);
    let feeder = tokio::spawn(async move {
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            a1.send(Ok(Bytes::from_static(b"\n"))).unwrap();
        }
        // Split across chunks: one event.
        a1.send(Ok(Bytes::from_static(b"{\"type\":\"end\",")))
            .unwrap();
        a1.send(Ok(Bytes::from_static(b"\"cursor\":\"c9\"}\n")))
            .unwrap();
        a1
    });
    let (events, _, error) = relayed(c, follow(), first).await;
    assert_eq!(events, [r#"{"type":"end","cursor":"c9"}"#]);
    assert_eq!(error, None);
    assert!(
        asked.lock().unwrap().is_empty(),
        "reconnected although the agent was alive"
    );
    drop(feeder.await);
}

#[tokio::test]
async fn with_max_bytes_the_reader_reads_on_with_its_own_budget() {
    let (a1, first) = conn();
    a1.send(Ok(ev("data", "c1"))).unwrap();
    let (c, asked) = connects(vec![]);
    let q = LogQuery {
        max_bytes: Some(100),
        ..follow()
    };
    let (events, _, error) = relayed(c, q, first).await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[1], r#"{"type":"more","cursor":"c1"}"#);
    assert_eq!(error, None);
    assert!(asked.lock().unwrap().is_empty());
    drop(a1);
}

#[tokio::test]
async fn before_any_output_the_same_read_is_asked_again() {
    // maxBytes, but nothing relayed yet (a gap moves the cursor, not the budget).
    let (a1, first) = conn();
    a1.send(Ok(ev("truncated", "c1"))).unwrap();
    let (a2, second) = conn();
    a2.send(Ok(ev("end", "c2"))).unwrap();
    let (c, asked) = connects(vec![second]);
    let q = LogQuery {
        max_bytes: Some(100),
        since: Some("c0".into()),
        ..follow()
    };
    let (events, _, _) = relayed(c, q.clone(), first).await;
    assert_eq!(events.len(), 2);
    let asked = asked.lock().unwrap();
    assert_eq!(
        asked[0],
        LogQuery {
            since: Some("c1".into()),
            ..q
        }
    );
    drop((a1, a2));
}

#[tokio::test]
async fn a_failed_reconnect_breaks_the_response() {
    let (a1, first) = conn();
    let (c, _) = connects(vec![]);
    let (events, _, error) = relayed(c, follow(), first).await;
    assert!(events.is_empty());
    assert!(error.unwrap().contains("refused"));
    drop(a1);
}

#[tokio::test]
async fn a_bad_line_from_the_agent_breaks_the_response() {
    let (a1, first) = conn();
    a1.send(Ok(Bytes::from_static(b"not json\n"))).unwrap();
    let (c, _) = connects(vec![]);
    let (_, _, error) = relayed(c, follow(), first).await;
    assert!(error.unwrap().contains("not a log event"));
}

#[tokio::test]
async fn the_relay_ends_when_its_reader_goes() {
    let (a1, first) = conn();
    let (c, _) = connects(vec![]);
    let (tx, rx) = mpsc::channel(16);
    let task = tokio::spawn(run(c, follow(), first, T, tx));
    drop(rx);
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("the relay outlived its reader")
        .unwrap();
    assert!(a1.is_closed(), "the agent connection was not dropped");
}
