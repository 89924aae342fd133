//! The supervisor's control socket: one JSON request line, one JSON reply line. The supervisor
//! serves it (`supervisor::stop`); the agent calls it (`daemon::control_client`).
use sandbox_wire::wire::{ErrorCode, StdinState, TerminalScreen};
use serde::{Deserialize, Serialize};

/// A request on the control socket (one JSON line; one JSON line back).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Control {
    /// Stop sequence: `signal` to the group, SIGKILL after `grace_seconds`.
    Stop { signal: i32, grace_seconds: u64 },
    /// Deliver `signal` to the process group once.
    Signal { signal: i32 },
    /// Bytes for stdin starting at byte `offset` (base64), then EOF when `close`.
    Stdin {
        offset: u64,
        #[serde(default)]
        data: String,
        #[serde(default)]
        close: bool,
    },
    /// A new window size for the process's terminal (`tty`).
    Resize { rows: u16, cols: u16 },
    /// Like `Stdin`, with the `len` bytes raw after the request line: no base64 and no JSON
    /// string of up to 1 MiB to build and parse per write. Supervisors older than it refuse it
    /// as an unknown op ([`is_unknown_op`]); the agent then sends `Stdin`.
    StdinBytes {
        offset: u64,
        len: usize,
        #[serde(default)]
        close: bool,
        /// Who writes (a label, [`sandbox_wire::wire::writer_label`]), named when a later
        /// write collides with these bytes. Older supervisors ignore it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// Like `StdinBytes` on a terminal shared by several writers: `offset` counts the bytes of
    /// `writer` alone ([`sandbox_wire::wire::StdinWriter`]). Older supervisors refuse it as an
    /// unknown op.
    TerminalBytes {
        writer: String,
        offset: u64,
        len: usize,
        #[serde(default)]
        close: bool,
    },
    /// The terminal's current screen ([`TerminalScreen`]). Older supervisors refuse it as an
    /// unknown op.
    Screen,
    /// Where stdin is now (the record has it within the flush period: writes do not each
    /// rewrite it). Older supervisors refuse it as an unknown op; the record is then exact.
    StdinState,
}

/// Whether a refusal says the supervisor does not know the request's op (an older binary: the
/// supervisor of a process outlives agent upgrades).
pub fn is_unknown_op(message: &str) -> bool {
    message.contains("unknown variant")
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ControlReply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The error's code, where it is not a malformed request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    /// Stdin after the request (stdin requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<StdinState>,
    /// The terminal's screen (`screen` requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<TerminalScreen>,
}

impl ControlReply {
    pub fn of(r: std::result::Result<(), String>) -> ControlReply {
        match r {
            Ok(()) => ControlReply {
                ok: true,
                ..Default::default()
            },
            Err(e) => ControlReply {
                ok: false,
                error: Some(e),
                ..Default::default()
            },
        }
    }

    pub fn with_stdin(s: StdinState) -> ControlReply {
        ControlReply {
            ok: true,
            stdin: Some(s),
            ..Default::default()
        }
    }
}

pub fn valid_signal(sig: i32) -> bool {
    (1..=64).contains(&sig)
}
