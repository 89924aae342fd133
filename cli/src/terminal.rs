//! `run -it` / `attach -it`: this terminal joined to a `tty` process's over one streaming
//! attach. Raw mode here (the process's own terminal does the line editing, echo and Ctrl-C),
//! keys to its stdin as they come, its output written raw as it arrives, window changes as
//! resizes, and a detach sequence that leaves it running.
use std::io::Write;
use std::os::fd::AsFd;
use std::sync::Mutex;

use nix::sys::termios::{self, SetArg, Termios};
use sandbox_client::{AttachEvent, AttachOptions, Process};
use tokio::io::AsyncReadExt;
use tokio::signal::unix::{signal, SignalKind};

use crate::error::CliError;

/// Docker's default detach sequence: Ctrl-P Ctrl-Q.
pub const DEFAULT_DETACH_KEYS: &str = "ctrl-p,ctrl-q";

/// The size a terminal has when ours has none (stdin is not a terminal): the spec's default.
const DEFAULT_SIZE: (u16, u16) = (24, 80);

/// The bytes of a detach sequence (a type of its own: clap would take a `Vec` for many values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetachKeys(pub Vec<u8>);

/// `--detach-keys` as docker spells it: comma-separated keys, each `ctrl-X` (X in a-z, @, [,
/// \, ], ^, _) or one character.
pub fn parse_detach_keys(spec: &str) -> Result<DetachKeys, String> {
    let mut out = Vec::new();
    for key in spec.split(',') {
        let lower = key.to_ascii_lowercase();
        let byte = match lower.strip_prefix("ctrl-") {
            Some(c) if c.len() == 1 => match c.as_bytes()[0] {
                b @ b'a'..=b'z' => b - b'a' + 1,
                b @ (b'@' | b'[' | b'\\' | b']' | b'^' | b'_') => b - b'@',
                _ => return Err(format!("{key:?}: ctrl- takes a-z, @, [, \\, ], ^ or _")),
            },
            _ if key.len() == 1 => key.as_bytes()[0],
            _ => return Err(format!("{key:?} is not a key (ctrl-X or one character)")),
        };
        out.push(byte);
    }
    Ok(DetachKeys(out))
}

/// Finds the detach sequence in what is typed, across reads: bytes that may start it are held
/// back until it is complete (detach) or broken (they go to the process after all).
pub struct Detach {
    keys: Vec<u8>,
    held: usize,
}

impl Detach {
    pub fn new(keys: Vec<u8>) -> Self {
        Detach { keys, held: 0 }
    }

    /// The bytes of `input` for the process, and whether the sequence was completed (then what
    /// follows it is dropped: we leave).
    pub fn feed(&mut self, input: &[u8]) -> (Vec<u8>, bool) {
        let mut out = Vec::with_capacity(input.len());
        for &b in input {
            if b == self.keys[self.held] {
                self.held += 1;
                if self.held == self.keys.len() {
                    self.held = 0;
                    return (out, true);
                }
                continue;
            }
            // Broken: what was held is typing after all; this byte may start it again.
            out.extend_from_slice(&self.keys[..self.held]);
            self.held = 0;
            if b == self.keys[0] {
                self.held = 1;
            } else {
                out.push(b);
            }
        }
        (out, false)
    }
}

/// This terminal's window size (rows, cols) from stdin; the default when stdin is not a
/// terminal or has no size.
pub fn size() -> (u16, u16) {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` to the pointer, which is valid for the call.
    let r = unsafe { libc::ioctl(libc::STDIN_FILENO, libc::TIOCGWINSZ, &mut ws) };
    if r != 0 || ws.ws_row == 0 || ws.ws_col == 0 {
        return DEFAULT_SIZE;
    }
    // Within what spec.terminal takes.
    (ws.ws_row.min(1000), ws.ws_col.min(10000))
}

/// The settings raw mode replaced, for whoever restores them (drop, panic hook, signal).
static SAVED: Mutex<Option<Termios>> = Mutex::new(None);

fn restore() {
    let saved = SAVED.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(t) = saved {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSADRAIN, &t);
    }
}

/// Raw mode on stdin while it lives (nothing when stdin is not a terminal); restored when it
/// is dropped, on an error's return, and by the panic hook on a panic.
pub struct RawMode(());

impl RawMode {
    pub fn enter() -> Result<RawMode, CliError> {
        let stdin = std::io::stdin();
        let Ok(saved) = termios::tcgetattr(stdin.as_fd()) else {
            return Ok(RawMode(())); // not a terminal: bytes pass as they are
        };
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        *SAVED.lock().unwrap_or_else(|e| e.into_inner()) = Some(saved);
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            hook(info)
        }));
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSADRAIN, &raw)
            .map_err(|e| CliError::Failed(format!("raw mode on this terminal: {e}")))?;
        Ok(RawMode(()))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        restore();
    }
}

/// How a terminal session ended.
pub enum Ended {
    /// The process ended with this status.
    Exited(u8),
    /// The detach sequence was typed: the process runs on.
    Detached,
}

/// Joins this terminal to `p` (started, with `spec.tty`) over one streaming attach: its output
/// from `after` (None: its current screen, then on) until it ends or the user detaches.
pub async fn session(
    p: &Process,
    keys: DetachKeys,
    after: Option<String>,
) -> Result<Ended, CliError> {
    // Before raw mode: from here a SIGTERM or SIGHUP ends the session through its return
    // (raw mode restored), not by the default action.
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut winch = signal(SignalKind::window_change())?;
    let opts = AttachOptions {
        stdin: true,
        since: after,
        ..Default::default()
    };
    let (mut input, mut output) = p.attach(opts).await?;
    let _raw = RawMode::enter()?;
    let (rows, cols) = size();
    input.resize(rows, cols).await?; // this terminal's size, whatever the last one's was
    let (tx, mut keys_rx) = tokio::sync::mpsc::unbounded_channel();
    let typing = tokio::spawn(read_keys(tx, Detach::new(keys.0)));
    let mut typing_open = true;
    let ended = loop {
        tokio::select! {
            ev = output.next() => match ev {
                Some(Ok(AttachEvent::Stdout(d) | AttachEvent::Stderr(d))) => write_out(&d)?,
                Some(Ok(AttachEvent::Exit(code))) => break Ended::Exited(code.clamp(0, 255) as u8),
                Some(Err(e)) => return Err(e.into()),
                None => break Ended::Exited(p.wait(None).await?.code.clamp(0, 255) as u8),
            },
            k = keys_rx.recv(), if typing_open => match k {
                Some(Key::Bytes(b)) => input.send(&b).await?,
                Some(Key::Detach) => {
                    input.detach().await?;
                    break Ended::Detached;
                }
                None => typing_open = false, // our EOF: the output goes on
            },
            _ = winch.recv() => {
                let (rows, cols) = size();
                input.resize(rows, cols).await?;
            }
            // Raw mode is restored on the way out (RawMode's drop), then we exit.
            _ = term.recv() => return Err(CliError::Failed("terminated".into())),
            _ = hup.recv() => return Err(CliError::Failed("hung up".into())),
        }
    };
    typing.abort();
    Ok(ended)
}

fn write_out(data: &[u8]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(data)?;
    out.flush()?;
    Ok(())
}

/// What the key reader hands the sender: bytes to type, or the detach.
enum Key {
    Bytes(Vec<u8>),
    Detach,
}

/// Reads this terminal's keys as they come; ends at the detach sequence or at our EOF (a
/// terminal has no EOF to pass on: the process keeps its input open).
async fn read_keys(tx: tokio::sync::mpsc::UnboundedSender<Key>, mut detach: Detach) {
    let mut stdin = tokio::io::stdin();
    let mut buf = vec![0u8; 4096];
    loop {
        let n = match stdin.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let (bytes, detached) = detach.feed(&buf[..n]);
        if !bytes.is_empty() && tx.send(Key::Bytes(bytes)).is_err() {
            return;
        }
        if detached {
            let _ = tx.send(Key::Detach);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detach_keys_as_docker_spells_them() {
        assert_eq!(
            parse_detach_keys(DEFAULT_DETACH_KEYS).unwrap().0,
            [0x10, 0x11]
        );
        assert_eq!(
            parse_detach_keys("ctrl-@,ctrl-_,x").unwrap().0,
            [0, 0x1f, b'x']
        );
        assert_eq!(parse_detach_keys("Ctrl-A").unwrap().0, [1]);
        for bad in ["", "ctrl-", "ctrl-1", "ab", "ctrl-p,"] {
            assert!(parse_detach_keys(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn detach_is_found_across_reads_and_a_broken_one_is_typed() {
        let mut d = Detach::new(vec![0x10, 0x11]);
        assert_eq!(d.feed(b"ls\x10"), (b"ls".to_vec(), false), "held back");
        assert_eq!(d.feed(b"x"), (b"\x10x".to_vec(), false), "broken: typed");
        assert_eq!(d.feed(b"\x10\x10"), (b"\x10".to_vec(), false), "restarts");
        assert_eq!(d.feed(b"\x11rest"), (Vec::new(), true), "completed");
        let mut d = Detach::new(vec![0x10, 0x11]);
        assert_eq!(d.feed(b"a\x10\x11"), (b"a".to_vec(), true));
        assert_eq!(d.feed(b"\x03"), (b"\x03".to_vec(), false), "Ctrl-C passes");
    }
}
