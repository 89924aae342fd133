//! The process's terminal (`tty`): the runtime makes the pseudo-terminal inside the container
//! (`runc exec --console-socket`: the slave becomes the process's stdin, stdout, stderr and
//! controlling terminal, in a new session) and hands us its master over a unix socket
//! (SCM_RIGHTS). The supervisor holds the master for the process's whole life: what the process
//! writes is read from it as stdout (one stream, as under `kubectl exec -t`), stdin's accepted
//! bytes are written to it (the line discipline echoes them and turns Ctrl-C into SIGINT for the
//! foreground group), and a resize sets its window size (the kernel sends SIGWINCH).
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use sandbox_wire::wire::{ErrorCode, TerminalScreen, TerminalSize};

use super::screen::Screen;
use super::{Result, Supervisor};
use sandbox_node_protocol::ledger::encode_cursor;

/// The socket the runtime connects to with the master; removed when dropped.
pub(super) struct ConsoleSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl ConsoleSocket {
    pub(super) fn bind(path: &Path) -> std::io::Result<ConsoleSocket> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        Ok(ConsoleSocket {
            listener,
            path: path.to_path_buf(),
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The master the runtime sent. Called once the runtime has returned: its connection and
    /// the descriptor wait in the socket's queue, so nothing here blocks for long.
    fn receive(&self) -> std::io::Result<OwnedFd> {
        let (conn, _) = self.listener.accept()?;
        conn.set_nonblocking(false)?;
        conn.set_read_timeout(Some(Duration::from_secs(2)))?;
        // runc sends the terminal's name as the data, the master as the one right.
        let mut name = [0u8; 4096];
        let mut iov = [IoSliceMut::new(&mut name)];
        let mut space = nix::cmsg_space!([RawFd; 1]);
        let msg = recvmsg::<()>(
            conn.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )?;
        let mut fds: Vec<OwnedFd> = Vec::new();
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: SCM_RIGHTS descriptors are new ones installed in this process for us
                // alone; each is owned exactly once, here.
                fds.extend(
                    raw.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        // Any extra descriptor is closed as `fds` drops.
        fds.into_iter().next().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the runtime sent no terminal",
            )
        })
    }
}

impl Drop for ConsoleSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sets a terminal's window size; on the master, the kernel then signals SIGWINCH to the
/// terminal's foreground process group.
pub(super) fn set_size(fd: &OwnedFd, size: TerminalSize) -> std::io::Result<()> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize` through the pointer, which is valid for the call;
    // the descriptor is open (borrowed from an OwnedFd).
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Supervisor {
    /// Takes the master the runtime sent, once the process runs: it becomes stdout's source and
    /// stdin's sink. `Ok(false)`: none came (the record says so; the process is ended, as it
    /// would run without input or output otherwise).
    pub(super) fn take_terminal(&mut self, console: ConsoleSocket) -> Result<bool> {
        let size = self.spec.request.tty.unwrap_or(TerminalSize::DEFAULT);
        let got = console.receive().and_then(|master| {
            fcntl(&master, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
            // The runtime set the size from consoleSize already; again here, whatever it did.
            set_size(&master, size)?;
            Ok(master)
        });
        let master = match got {
            Ok(m) => m,
            Err(e) => {
                let _ = self.signal_tree(libc::SIGKILL);
                self.fail(
                    ErrorCode::ProcessSpawnFailed,
                    format!("receiving the terminal from the runtime: {e}"),
                )?;
                return Ok(false);
            }
        };
        // The runtime's own output (none when all went well) is in the pipes until here.
        self.drain_available();
        self.out = [Some(master.try_clone()?), None];
        self.stdin = Some(master.try_clone()?);
        self.tty = Some(master);
        self.screen = Screen::new(size);
        Ok(true)
    }

    /// A resize request: the new window size on the terminal.
    pub(super) fn resize(&mut self, size: TerminalSize) -> std::result::Result<(), String> {
        size.check().map_err(|(field, m)| format!("{field}: {m}"))?;
        let Some(master) = &self.tty else {
            return Err("the process has no terminal (spec.tty)".into());
        };
        set_size(master, size).map_err(|e| format!("setting the terminal's size: {e}"))?;
        self.screen.resize(size);
        Ok(())
    }

    /// What the terminal shows now, and the log cursor after the output it shows: everything
    /// read from the terminal went to the ledger and the screen together, so the two agree.
    pub(super) fn screen_now(&self) -> std::result::Result<TerminalScreen, String> {
        if self.tty.is_none() {
            return Err("the process has no terminal (spec.tty)".into());
        }
        Ok(TerminalScreen {
            data: base64::engine::general_purpose::STANDARD.encode(self.screen.redraw()),
            cursor: encode_cursor(self.id.as_str(), self.ledger.end_pos()),
            kept: self.screen.kept(),
        })
    }
}
