//! The streaming attach: a WebSocket through the API server (`sandboxprocesses/attach`,
//! Kubernetes' `v5.channel.k8s.io`) carrying stdin, the output, resizes and the exit, that
//! outlives its connections. A duplex: [`AttachInput`] writes, [`AttachOutput`] reads, each
//! usable from its own task; a task between them owns the connection and, when it breaks (the
//! node's agent restarts, a proxy cuts it), attaches again: output from the cursor after the
//! last byte read, stdin from the offset the process took (bytes not yet taken are kept and
//! sent again), so no output byte is repeated or missed and each stdin byte is taken once.
mod link;

use std::time::Duration;

use sandbox_api::wire::{TerminalSize, MAX_STDIN_WRITE};
use tokio::sync::mpsc;

use super::Process;
use crate::error::{Error, Result};

/// What to attach to, and where to start.
#[derive(Clone, Debug, Default)]
pub struct AttachOptions {
    /// Write stdin (the process needs `stdin` or `tty`).
    pub stdin: bool,
    /// Output after this cursor (`None`: from the beginning of what is kept; on a terminal,
    /// from what its screen shows now: one redraw, then what follows; a reconnect goes on from
    /// the exact byte after the last one read).
    pub since: Option<String>,
    /// The offset of the first stdin byte sent (`None`: stdin's current end). Given, a writer
    /// that is not alone is refused instead of interleaved. On a terminal, the offset counts
    /// this attach's own bytes (`None`: 0): a terminal is shared, each attacher's keys reach it
    /// in the order they arrive, and none refuses another.
    pub stdin_offset: Option<u64>,
}

/// What the process said.
#[derive(Debug, PartialEq, Eq)]
pub enum AttachEvent {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// It ended with this code (128+N when a signal N ended it). The last event.
    Exit(i32),
}

/// What the connection's task passes to the output half: an event, or the log cursor the
/// output after it starts after (once a terminal's screen was drawn), for `resume_cursor`.
enum Out {
    Event(AttachEvent),
    Cursor(String),
}

/// What the input half asks of the connection's task.
enum Cmd {
    Stdin(Vec<u8>),
    Close,
    Resize(TerminalSize),
    Detach,
}

/// The writing half. Dropping it leaves the process running with its stdin open, and the
/// output half reads on until the exit.
pub struct AttachInput {
    tx: mpsc::Sender<Cmd>,
}

/// The reading half.
pub struct AttachOutput {
    rx: mpsc::Receiver<Result<Out>>,
    since: Option<String>,
    /// Output bytes returned by `next`.
    read: u64,
}

/// How long the attach tries to connect again before it gives up (a restarting agent is back
/// in seconds).
pub const RECONNECT_FOR: Duration = Duration::from_secs(60);

impl Process {
    /// Attaches to the process (waiting for its start like the other calls). Needs what a stdin
    /// write needs: `update` on the object and `create pods/exec` on its pod.
    pub async fn attach(&self, o: AttachOptions) -> Result<(AttachInput, AttachOutput)> {
        self.ensure_started("attach", self.start_timeout).await?;
        let (tx, cmds) = mpsc::channel(64);
        let (events, rx) = mpsc::channel(64);
        let tty = self.object().await?.spec.tty;
        // A terminal's writer: its own offsets, kept across this attach's reconnects.
        let writer = match tty && o.stdin {
            true => Some(new_writer()?),
            false => None,
        };
        let base = match (o.stdin, o.stdin_offset, &writer) {
            (true, None, Some(_)) => Some(0),
            (true, None, None) => Some(self.stdin_state().await?.bytes),
            (true, Some(n), _) => Some(n),
            (false, _, _) => None,
        };
        let at = link::At {
            since: o.since.clone(),
            screen: tty && o.since.is_none(),
            writer,
        };
        let first = link::Link::open(self, &at, 0, base).await?;
        let task = link::Task::new(self.clone(), at, base);
        tokio::spawn(task.run(first, cmds, events));
        let out = AttachOutput {
            rx,
            since: o.since,
            read: 0,
        };
        Ok((AttachInput { tx }, out))
    }
}

/// A writer id for this attach (its stdin offsets on a shared terminal are its own).
fn new_writer() -> Result<String> {
    let mut raw = [0u8; 12];
    getrandom::fill(&mut raw).map_err(|e| Error::Transport(format!("a writer id: {e}")))?;
    Ok(sandbox_api::wire::writer_id_from(raw))
}

fn gone() -> Error {
    Error::Transport("attach: the session ended".into())
}

impl AttachInput {
    /// Sends bytes to stdin. The process's pipe paces it: this waits while the pipe is full.
    pub async fn send(&mut self, data: &[u8]) -> Result<()> {
        for chunk in data.chunks(MAX_STDIN_WRITE) {
            self.tx
                .send(Cmd::Stdin(chunk.to_vec()))
                .await
                .map_err(|_| gone())?;
        }
        Ok(())
    }

    /// Ends stdin: the process reads EOF once everything sent is taken.
    pub async fn close_stdin(&mut self) -> Result<()> {
        self.tx.send(Cmd::Close).await.map_err(|_| gone())
    }

    /// A new window size for the process's terminal (`tty`).
    pub async fn resize(&mut self, rows: u16, cols: u16) -> Result<()> {
        let size = TerminalSize { rows, cols };
        size.check()
            .map_err(|(field, m)| Error::invalid(field.trim_start_matches("terminal."), m))?;
        self.tx.send(Cmd::Resize(size)).await.map_err(|_| gone())
    }

    /// Closes the connection and leaves the process running (stdin stays open; attach again
    /// to go on): the output half ends too. Bytes sent but not yet taken may be lost: a writer
    /// that goes on later starts from [`Process::stdin_state`]. A session that has ended (the
    /// process exited and its output was all delivered) has nothing left to close: `Ok`, as
    /// Python's `detach()` is.
    pub async fn detach(self) -> Result<()> {
        let _ = self.tx.send(Cmd::Detach).await;
        Ok(())
    }
}

impl AttachOutput {
    /// The next event; `None` after the exit, or after an error that attaching again could not
    /// mend (the last item).
    pub async fn next(&mut self) -> Option<Result<AttachEvent>> {
        loop {
            let ev = match self.rx.recv().await? {
                Ok(Out::Cursor(c)) => {
                    (self.since, self.read) = (Some(c), 0);
                    continue;
                }
                Ok(Out::Event(ev)) => ev,
                Err(e) => return Some(Err(e)),
            };
            if let AttachEvent::Stdout(d) | AttachEvent::Stderr(d) = &ev {
                self.read += d.len() as u64;
            }
            return Some(Ok(ev));
        }
    }

    /// Where the output read so far ends: an attach with it as `since` reads on from there.
    pub fn resume_cursor(&self) -> String {
        link::cursor_after(self.since.as_deref(), self.read)
    }
}
