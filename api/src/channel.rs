//! Kubernetes' remote-command protocol over WebSocket (`channel.k8s.io`), which the `attach`
//! subresource speaks so that clients built for `kubectl exec`/`attach` can use it by path:
//! each binary message is one channel's byte followed by its data. v5 adds the close channel
//! (stdin's end); v4 has none (stdin stays open until a one-shot `close` write).
//!
//! One place for the framing, the resize message and the final status (the exit code as
//! kubectl reads it), used by the operator and the Rust client; the Python client runs the same
//! cases (`clients/conformance/channel.json`).
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::wire::TerminalSize;

pub const V5: &str = "v5.channel.k8s.io";
pub const V4: &str = "v4.channel.k8s.io";
/// What the server speaks, preferred first.
pub const PROTOCOLS: [&str; 2] = [V5, V4];

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
/// The final status (`metav1.Status`): success, or the exit code, or why the stream ended.
pub const ERROR: u8 = 3;
pub const RESIZE: u8 = 4;
/// Ours, server to client, only to a client that asks (`cursors=true`): the log cursor after
/// which the output that follows starts. Sent after a terminal's screen (a redraw, not log
/// bytes), so a client that attaches again goes on from the exact byte, not from a new redraw.
pub const CURSOR: u8 = 9;
/// v5: the client closes one of its streams (data: the channel, `STDIN`).
pub const CLOSE: u8 = 255;

/// One message of the protocol.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Stdin(&'a [u8]),
    Stdout(&'a [u8]),
    Stderr(&'a [u8]),
    Status(&'a [u8]),
    Resize(TerminalSize),
    /// The log cursor the output after this frame starts after ([`CURSOR`]).
    Cursor(&'a [u8]),
    /// The end of the sender's stream on this channel.
    Close(u8),
}

/// The resize message, as client-go sends it.
#[derive(Debug, Serialize, Deserialize)]
struct Size {
    #[serde(rename = "Width")]
    width: u16,
    #[serde(rename = "Height")]
    height: u16,
}

impl Frame<'_> {
    /// A binary message's frame; `Err` says why it is none (empty, an unknown channel, a resize
    /// that is not a size).
    pub fn decode(msg: &[u8]) -> Result<Frame<'_>, String> {
        let (&ch, data) = msg
            .split_first()
            .ok_or("an empty message (no channel byte)")?;
        Ok(match ch {
            STDIN => Frame::Stdin(data),
            STDOUT => Frame::Stdout(data),
            STDERR => Frame::Stderr(data),
            ERROR => Frame::Status(data),
            RESIZE => {
                let s: Size = serde_json::from_slice(data)
                    .map_err(|e| format!("resize: not {{\"Width\": W, \"Height\": H}} ({e})"))?;
                Frame::Resize(TerminalSize {
                    rows: s.height,
                    cols: s.width,
                })
            }
            CURSOR => Frame::Cursor(data),
            CLOSE => Frame::Close(*data.first().ok_or("close: names no channel")?),
            other => return Err(format!("channel {other} is not one of 0-4, 9, 255")),
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let (ch, data): (u8, std::borrow::Cow<[u8]>) = match self {
            Frame::Stdin(d) => (STDIN, (*d).into()),
            Frame::Stdout(d) => (STDOUT, (*d).into()),
            Frame::Stderr(d) => (STDERR, (*d).into()),
            Frame::Status(d) => (ERROR, (*d).into()),
            Frame::Resize(s) => {
                let size = Size {
                    width: s.cols,
                    height: s.rows,
                };
                (
                    RESIZE,
                    serde_json::to_vec(&size).expect("a size is JSON").into(),
                )
            }
            Frame::Cursor(d) => (CURSOR, (*d).into()),
            Frame::Close(c) => (CLOSE, vec![*c].into()),
        };
        let mut out = Vec::with_capacity(1 + data.len());
        out.push(ch);
        out.extend_from_slice(&data);
        out
    }
}

/// The final status of an ended process, as kubelet sends it for `kubectl exec`: `Success`, or
/// `NonZeroExitCode` with the code as the `ExitCode` cause (kubectl exits with it).
pub fn exit_status(code: i32) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: {code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// A stream that ended for another reason than the process's end (`reason`: a Kubernetes
/// status reason such as `InternalError`, `Conflict`).
pub fn failure(reason: &str, message: &str) -> Value {
    json!({"metadata": {}, "status": "Failure", "reason": reason, "message": message})
}

/// Why a stream ended without the process's end: the status's reason and message.
#[derive(Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: String,
    pub message: String,
}

impl Failure {
    /// The node's agent or the connection failed: attaching again goes on.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.reason.as_str(),
            "ServiceUnavailable" | "InternalError" | "Timeout"
        )
    }
}

/// What a final status says: `Ok(code)` when the process ended (0 on `Success`), `Err` when the
/// stream ended without its end.
pub fn read_status(data: &[u8]) -> Result<i32, Failure> {
    let v: Value = serde_json::from_slice(data).map_err(|e| Failure {
        reason: "InternalError".into(),
        message: format!("a status that is not JSON: {e}"),
    })?;
    if v["status"] == "Success" {
        return Ok(0);
    }
    if v["reason"] == "NonZeroExitCode" {
        let causes = v["details"]["causes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for c in causes {
            if c["reason"] == "ExitCode" {
                if let Some(code) = c["message"].as_str().and_then(|m| m.parse().ok()) {
                    return Ok(code);
                }
            }
        }
    }
    Err(Failure {
        reason: v["reason"].as_str().unwrap_or("Failure").to_string(),
        message: v["message"]
            .as_str()
            .unwrap_or("the stream ended with a failure")
            .to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let size = TerminalSize {
            rows: 30,
            cols: 100,
        };
        for f in [
            Frame::Stdin(b"abc"),
            Frame::Stdout(b""),
            Frame::Stderr(b"\xff\x00"),
            Frame::Status(b"{}"),
            Frame::Resize(size),
            Frame::Cursor(b"c1.2.abc"),
            Frame::Close(STDIN),
        ] {
            let bytes = f.encode();
            assert_eq!(Frame::decode(&bytes).unwrap(), f);
        }
        assert_eq!(
            Frame::Resize(size).encode(),
            b"\x04{\"Width\":100,\"Height\":30}".to_vec()
        );
    }

    #[test]
    fn bad_frames_say_why() {
        for (msg, why) in [
            (&b""[..], "empty"),
            (b"\x07x", "channel 7"),
            (b"\x04{\"Width\":-1}", "resize:"),
            (b"\xff", "close:"),
        ] {
            let e = Frame::decode(msg).unwrap_err();
            assert!(e.contains(why), "{msg:?}: {e}");
        }
    }

    /// clients/conformance/channel.json, which the Python client runs too.
    #[test]
    fn conformance_channel() {
        let doc: Value =
            serde_json::from_str(include_str!("../../clients/conformance/channel.json")).unwrap();
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        for case in doc["frames"].as_array().unwrap() {
            let n = |k: &str| u16::try_from(case[k].as_u64().unwrap()).unwrap();
            let data = case["data"].as_str().unwrap_or("").as_bytes();
            let f = match case["kind"].as_str().unwrap() {
                "stdin" => Frame::Stdin(data),
                "cursor" => Frame::Cursor(data),
                "resize" => Frame::Resize(TerminalSize {
                    rows: n("rows"),
                    cols: n("cols"),
                }),
                _ => Frame::Close(STDIN),
            };
            assert_eq!(
                hex(&f.encode()),
                case["wire_hex"].as_str().unwrap(),
                "{case}"
            );
        }
        for case in doc["status"].as_array().unwrap() {
            let got = read_status(&serde_json::to_vec(&case["status"]).unwrap());
            match case["exit"].as_i64() {
                Some(code) => assert_eq!(got, Ok(code as i32), "{case}"),
                None => {
                    let f = got.unwrap_err();
                    assert_eq!(f.message, case["error"].as_str().unwrap(), "{case}");
                    assert_eq!(
                        f.is_transient(),
                        case["transient"].as_bool().unwrap(),
                        "{case}"
                    );
                }
            }
        }
    }

    #[test]
    fn exit_codes_survive_the_status() {
        for code in [0, 1, 7, 137, 255] {
            let s = serde_json::to_vec(&exit_status(code)).unwrap();
            assert_eq!(read_status(&s), Ok(code));
        }
        let f = serde_json::to_vec(&failure("InternalError", "agent gone")).unwrap();
        let e = read_status(&f).unwrap_err();
        assert_eq!((e.message.as_str(), e.is_transient()), ("agent gone", true));
    }
}
