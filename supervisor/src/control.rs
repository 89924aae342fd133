//! The control socket's requests from the agent, one per connection: a line of JSON in (a
//! stdin write's bytes after it), a line out. Each is handed to the part that owns it: stops
//! and signals ([`crate::stop`]), stdin and the terminal ([`crate::stdin`], [`crate::tty`]).
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use base64::Engine;
use sandbox_node_protocol::control::{Control, ControlReply};

use super::Supervisor;

impl Supervisor {
    /// Serves one request from the agent (one line in, with `stdinBytes` its bytes after it;
    /// one line out).
    pub(super) fn handle_control(&mut self, mut conn: UnixStream) {
        let _ = conn.set_nonblocking(false);
        let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
        let mut line = String::new();
        let mut r = BufReader::new(&conn);
        let reply = match r.read_line(&mut line) {
            Ok(_) => match serde_json::from_str::<Control>(&line) {
                Ok(Control::StdinBytes {
                    offset,
                    len,
                    close,
                    by,
                }) => match payload(&mut r, len) {
                    Ok(bytes) => self.write_stdin(offset, &bytes, close, by.as_deref()),
                    Err(e) => ControlReply::of(Err(e)),
                },
                Ok(Control::TerminalBytes {
                    writer,
                    offset,
                    len,
                    close,
                }) => match payload(&mut r, len) {
                    Ok(bytes) => self.write_terminal(&writer, offset, &bytes, close),
                    Err(e) => ControlReply::of(Err(e)),
                },
                Ok(c) => self.apply(c),
                Err(e) => ControlReply::of(Err(format!("bad control request: {e}"))),
            },
            Err(e) => ControlReply::of(Err(format!("reading control request: {e}"))),
        };
        let mut body = serde_json::to_vec(&reply).unwrap_or_default();
        body.push(b'\n');
        let _ = conn.write_all(&body);
    }

    fn apply(&mut self, c: Control) -> ControlReply {
        match c {
            Control::Stop {
                signal,
                grace_seconds,
            } => ControlReply::of(self.request_stop(signal, grace_seconds)),
            Control::Signal { signal } => ControlReply::of(self.deliver_signal(signal)),
            Control::Stdin {
                offset,
                data,
                close,
            } => match base64::engine::general_purpose::STANDARD.decode(data) {
                Ok(bytes) => self.write_stdin(offset, &bytes, close, None),
                Err(e) => ControlReply::of(Err(format!("stdin data: {e}"))),
            },
            Control::Resize { rows, cols } => {
                ControlReply::of(self.resize(sandbox_wire::wire::TerminalSize { rows, cols }))
            }
            Control::StdinState => match self.rec.stdin {
                Some(at) => ControlReply::with_stdin(at),
                None => ControlReply::of(Ok(())),
            },
            Control::Screen => match self.screen_now() {
                Ok(screen) => ControlReply {
                    ok: true,
                    screen: Some(screen),
                    ..Default::default()
                },
                Err(e) => ControlReply::of(Err(e)),
            },
            // Read with their bytes by `handle_control`.
            Control::StdinBytes { .. } | Control::TerminalBytes { .. } => {
                ControlReply::of(Err("a write without its bytes".into()))
            }
        }
    }
}

/// The raw bytes of a `stdinBytes` request, after its line (bounded as a `stdin` write is).
fn payload(r: &mut impl std::io::Read, len: usize) -> std::result::Result<Vec<u8>, String> {
    if len > sandbox_wire::wire::MAX_STDIN_WRITE {
        return Err(format!(
            "stdin write of {len} bytes: at most {} per write",
            sandbox_wire::wire::MAX_STDIN_WRITE
        ));
    }
    let mut bytes = vec![0; len];
    r.read_exact(&mut bytes)
        .map_err(|e| format!("reading {len} stdin bytes: {e}"))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_wire_format() {
        let c: Control =
            serde_json::from_str(r#"{"op":"stop","signal":15,"graceSeconds":2}"#).unwrap();
        assert!(matches!(
            c,
            Control::Stop {
                signal: 15,
                grace_seconds: 2
            }
        ));
    }
}
