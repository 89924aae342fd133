//! Launching the process: its own cgroup under the container's, then `runc exec -d` into the
//! container, until the process runs (or the record says why it could not).
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::os::fd::AsFd;

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::pipe2;
use sandbox_wire::wire::{ErrorCode, Phase};

use super::tree::rearm;
use super::tty::ConsoleSocket;
use super::{after, Result, Supervisor};
use crate::cgroup::{self, ProcessCgroup};
use sandbox_node_protocol::clock::{now_nanos, rfc3339};
use sandbox_node_protocol::procfs;
use sandbox_node_protocol::record;
use sandbox_node_protocol::signals;
use sandbox_node_protocol::wait::{self, ChildEnd};

/// What the runtime is given for the process's input and output.
struct RuntimeIo<'a> {
    /// The read end of the stdin pipe (`stdin` without `tty`).
    stdin: Option<OwnedFd>,
    /// Where to send the terminal's master (`tty`).
    console: Option<&'a Path>,
    /// The write ends of the stdout and stderr pipes (with a terminal: the runtime's own).
    out: [OwnedFd; 2],
}

/// The read and write ends of the process's stdout and stderr pipes.
struct OutputPipes {
    read: [OwnedFd; 2],
    write: [OwnedFd; 2],
}

/// How long a just-started process's first report waits for its tree to end: a short command
/// is then reported once, final; a long one is reported Running this much later.
const EARLY_END: Duration = Duration::from_millis(10);

impl Supervisor {
    /// `Ok(false)` when the process could not be started (the record says why, final).
    pub(super) fn launch(&mut self) -> Result<bool> {
        let pipes = output_pipes()?;
        let Some(cg_name) = self.make_cgroup()? else {
            return Ok(false);
        };
        let pid_file = self.layout.launch_pid_file(&self.id);
        let _ = std::fs::remove_file(&pid_file);
        let log = self.layout.runtime_log(&self.id);
        open_runtime_log(&log)?;
        let [out_r, err_r] = pipes.read;
        let (stdin_r, console) = match self.input() {
            Ok(input) => input,
            Err(e) => {
                let msg = format!("preparing the process's input: {e}");
                self.fail(ErrorCode::ProcessSpawnFailed, msg)?;
                return Ok(false);
            }
        };
        let io = RuntimeIo {
            stdin: stdin_r,
            console: console.as_ref().map(|c| c.path()),
            out: pipes.write,
        };
        let spawned = self.spawn_runtime(&cg_name, &pid_file, &log, io);
        self.out = [Some(out_r), Some(err_r)];
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                self.spawn_failed(&e)?;
                return Ok(false);
            }
        };
        // runc returns once the process runs (or failed to); the process is then reparented to
        // us as the subreaper. Output produced meanwhile waits in the (1 MiB) pipes.
        let runtime_pid = child.id() as i32;
        let limit = Duration::from_millis(self.spec.runtime_timeout_ms);
        let Some(status) = wait::wait_for_within(runtime_pid, limit)? else {
            self.runtime_hung(runtime_pid, &pid_file)?;
            return Ok(false);
        };
        self.forget_env();
        let host_pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        let _ = std::fs::remove_file(&pid_file);
        let Some(host_pid) = host_pid.filter(|_| status == ChildEnd::Exited(0)) else {
            self.runtime_failed(&log, status)?;
            return Ok(false);
        };
        wait_for_exec(host_pid);
        self.host_pid = Some(host_pid);
        if let Some(console) = console {
            if !self.take_terminal(console)? {
                return Ok(false);
            }
        }
        self.mark_running(host_pid)?;
        Ok(true)
    }

    /// The process's input: a pipe's read end for the runtime (`stdin`), or the socket the
    /// runtime sends a terminal over (`tty`, whose master is stdin then).
    fn input(&mut self) -> Result<(Option<OwnedFd>, Option<ConsoleSocket>)> {
        let req = &self.spec.request;
        if req.stdin || req.tty.is_some() {
            self.rec.stdin = Some(Default::default());
        }
        if req.tty.is_some() {
            let path = self.layout.console_socket(&self.id);
            return Ok((None, Some(ConsoleSocket::bind(&path)?)));
        }
        if !req.stdin {
            return Ok((None, None));
        }
        let (r, w) = super::stdin::pipe()?;
        self.stdin = Some(w);
        Ok((Some(r), None))
    }

    /// Creates the process's cgroup under the container's and applies its limits; `None` when
    /// that failed (the record says why).
    fn make_cgroup(&mut self) -> Result<Option<String>> {
        let name = format!("sandbox-{}", self.id.as_str());
        let made = cgroup::container_dirs(
            &self.spec.runtime_root,
            &self.spec.container_id,
            self.spec.container_pid,
        )
        .and_then(|dirs| ProcessCgroup::create(&dirs, &name));
        let cg = match made {
            Ok(cg) => cg,
            Err(e) => {
                self.fail(
                    ErrorCode::ProcessSpawnFailed,
                    format!("creating the process's cgroup: {e}"),
                )?;
                return Ok(None);
            }
        };
        // Kept beside the record so an agent that finds this supervisor gone can end the tree.
        record::write_json(&self.layout.cgroup(&self.id), &cg, false)?;
        self.cgroup = Some(cg);
        if !self.apply_limits()? {
            return Ok(None);
        }
        self.watch_cgroup_events();
        Ok(Some(name))
    }

    /// The request's resource limits hold for the whole tree; `Ok(false)` when they cannot be
    /// applied (the record says why).
    fn apply_limits(&mut self) -> Result<bool> {
        let Some(l) = self.spec.request.resources.clone() else {
            return Ok(true);
        };
        let applied = l
            .check()
            .map_err(|(field, message)| cgroup::LimitError { field, message })
            .and_then(|_| self.cgroup.as_ref().map_or(Ok(()), |cg| cg.apply(&l)));
        if let Err(e) = applied {
            self.fail(ErrorCode::InvalidResourceLimits, e.to_string())?;
            return Ok(false);
        }
        Ok(true)
    }

    /// The tree's end is seen at once where the kernel can tell (cgroup v2 `cgroup.events`).
    fn watch_cgroup_events(&mut self) {
        if let Some(ev) = self.cgroup.as_ref().and_then(ProcessCgroup::events_file) {
            // Without it, membership is polled instead: never a reason to fail the start.
            if let Ok(f) = std::fs::File::open(ev) {
                rearm(&f);
                self.cgroup_events = Some(f);
            }
        }
    }

    /// The OCI runtime does the entering of the container (`runc exec -d`), leaving the process
    /// to us.
    fn spawn_runtime(
        &self,
        cg_name: &str,
        pid_file: &Path,
        log: &Path,
        io: RuntimeIo<'_>,
    ) -> std::io::Result<Child> {
        let [out_w, err_w] = io.out;
        let mut spawned = Command::new(&self.spec.runtime_binary);
        spawned
            .arg("--root")
            .arg(&self.spec.runtime_root)
            .arg("--log")
            .arg(log)
            .arg("--log-format")
            .arg("json")
            .arg("exec")
            .arg("-d")
            .arg("--cgroup")
            .arg(cg_name)
            .arg("--pid-file")
            .arg(pid_file);
        if let Some(console) = io.console {
            // The process spec says `terminal: true`; the runtime sends the master here.
            spawned.arg("--console-socket").arg(console);
        }
        spawned
            .arg("--process")
            .arg(self.layout.process_spec(&self.id))
            .arg(&self.spec.container_id)
            .stdin(io.stdin.map_or_else(Stdio::null, Stdio::from))
            .stdout(Stdio::from(out_w))
            .stderr(Stdio::from(err_w));
        // SAFETY: the hook runs between fork and exec and makes only raw system calls.
        unsafe {
            // Ignored signals stay ignored across exec, through runc, into the process: a signal
            // ignored by whoever started us (seen: 32, from the parent of a test harness) must
            // not become one the process cannot be killed by, where `kubectl exec` could.
            spawned.pre_exec(|| {
                signals::reset_to_default();
                Ok(())
            })
        }
        .spawn()
    }

    /// The runtime itself could not be run: the record says so, with a hint at the usual cause.
    fn spawn_failed(&mut self, e: &std::io::Error) -> Result<()> {
        let hint = if e.raw_os_error() == Some(libc::EAGAIN) {
            " (the node's supervisors are at their pids cap, agent.supervisorLimits.pids, or the node is out of pids)"
        } else {
            ""
        };
        self.fail(
            ErrorCode::ProcessSpawnFailed,
            format!("running runtime {}: {e}{hint}", self.spec.runtime_binary),
        )
    }

    /// The runtime ran but did not start the process: its own message, classified, is the error.
    fn runtime_failed(&mut self, log: &Path, status: ChildEnd) -> Result<()> {
        self.drain_available();
        let msg = runtime_error(log).unwrap_or_else(|| format!("runtime exited with {status:?}"));
        let code = classify_runtime_error(&msg);
        self.fail(code, msg)
    }

    /// The runtime did not return within its bound (a wedged runtime must not wedge the start
    /// forever): it is killed, and `fail` ends whatever it had started in the process's cgroup,
    /// so a failed start leaves nothing running.
    fn runtime_hung(&mut self, runtime_pid: i32, pid_file: &Path) -> Result<()> {
        // SAFETY: kill(2) on our own child, not yet reaped: its pid cannot have been reused.
        unsafe { libc::kill(runtime_pid, libc::SIGKILL) };
        let _ = wait::wait_for(runtime_pid);
        let _ = std::fs::remove_file(pid_file);
        self.forget_env();
        let msg = format!(
            "the runtime ({}) did not start the process within {} ms; it was killed, with \
             anything it had started",
            self.spec.runtime_binary, self.spec.runtime_timeout_ms
        );
        self.fail(ErrorCode::ProcessSpawnFailed, msg)
    }

    /// From here the process is Running: deadlines start, readiness starts, the record says so.
    fn mark_running(&mut self, host_pid: i32) -> Result<()> {
        let now = Instant::now();
        self.usage_at = Some(now);
        self.host_pid = Some(host_pid);
        self.rec.host_pid = Some(host_pid);
        self.rec.pid = procfs::ns_pid(host_pid);
        self.rec.phase = Phase::Running;
        self.rec.started_at = Some(rfc3339(now_nanos()));
        self.run_started = Some(now);
        self.timeout_at = self
            .spec
            .request
            .timeout_seconds
            .and_then(|t| after(now, t));
        self.start_readiness(now)?;
        // A process whose whole tree ends at once (a `true`) is reported once, final, moments
        // later: the start's answer is its result and the operator writes one status for it
        // (docs/concepts/writes.md), not Running and then the end. Not for one that runs again: each run
        // is shown, and a crash loop without back-off must still reach the loop that serves a
        // stop between runs.
        if self.spec.request.restart_policy.is_never() && self.ended_at_once()? {
            return Ok(());
        }
        // Not fsynced: after a node crash the process is gone anyway and the record says Lost.
        self.save(false)?;
        Ok(())
    }

    /// Whether the process's tree has ended within [`EARLY_END`] of the runtime's return. The
    /// wait ends at the root's exit (SIGCHLD), so a short command costs nothing; one whose root
    /// left children behind is not waited for.
    fn ended_at_once(&mut self) -> Result<bool> {
        let until = Instant::now() + EARLY_END;
        loop {
            self.reap();
            self.check_tree()?;
            let left = until.saturating_duration_since(Instant::now());
            if self.tree_done() || self.exit.is_some() || left.is_zero() {
                return Ok(self.tree_done());
            }
            let ms = u16::try_from(left.as_millis() + 1).unwrap_or(u16::MAX);
            let mut fds = [PollFd::new(self.sigfd.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            // Reaps, and a stop asked for meanwhile is acted on, not lost.
            self.on_signals();
        }
    }

    /// The environment may hold Secret values (`env[].valueFrom`): once runc has read it, nothing
    /// on disk keeps it (the process spec goes, the launch spec keeps the names only).
    fn forget_env(&mut self) {
        let path = self.layout.process_spec(&self.id);
        if !self.spec.request.restart_policy.is_never() && self.process_spec.is_none() {
            // The next runs need it; memory is where the running process's env is anyway.
            self.process_spec = std::fs::read(&path).ok();
        }
        let _ = std::fs::remove_file(path);
        for e in &mut self.spec.request.env {
            e.value.clear();
        }
        let path = self.layout.launch(&self.id);
        if let Err(e) = record::write_json(&path, &self.spec, false) {
            // A full filesystem has no room for the new file: overwrite the old one in place
            // (blanking values only shrinks it, so no new space is needed).
            let in_place = serde_json::to_vec(&self.spec)
                .map_err(std::io::Error::other)
                .and_then(|bytes| {
                    use std::io::Write as _;
                    let mut f = std::fs::OpenOptions::new().write(true).open(&path)?;
                    f.write_all(&bytes)?;
                    f.set_len(bytes.len() as u64)
                });
            if let Err(e2) = in_place {
                say!(
                    "supervisor: rewriting the launch spec without env values: {e}; in place: {e2}"
                );
            }
        }
    }
}

/// The process's output goes through pipes we drain without blocking the loop.
fn output_pipes() -> Result<OutputPipes> {
    let (out_r, out_w) = pipe2(OFlag::O_CLOEXEC)?;
    let (err_r, err_w) = pipe2(OFlag::O_CLOEXEC)?;
    for fd in [&out_r, &err_r] {
        // Bigger pipes: fewer wakeups for fast writers, more slack while we write the ledger.
        let _ = fcntl(fd, FcntlArg::F_SETPIPE_SZ(1 << 20));
        fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    }
    Ok(OutputPipes {
        read: [out_r, err_r],
        write: [out_w, err_w],
    })
}

/// runc appends to an existing log and keeps its mode; its own would follow the umask, which we
/// leave alone because the process inherits it, as under `kubectl exec`.
fn open_runtime_log(log: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)?;
    Ok(())
}

/// The runtime's error message from its JSON log (last error/fatal entries).
fn runtime_error(log: &Path) -> Option<String> {
    let mut f = std::fs::File::open(log).ok()?;
    let mut text = String::new();
    f.read_to_string(&mut text).ok()?;
    let msgs: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| matches!(v["level"].as_str(), Some("error" | "fatal")))
        .filter_map(|v| v["msg"].as_str().map(str::to_string))
        .collect();
    msgs.last().cloned()
}

/// Maps a runtime error message to the status error code users see.
pub fn classify_runtime_error(msg: &str) -> ErrorCode {
    let m = msg.to_ascii_lowercase();
    if m.contains("chdir") || m.contains("cwd") {
        ErrorCode::InvalidProcessCwd
    } else if m.contains("not running")
        || m.contains("stopped container")
        || m.contains("does not exist")
        || m.contains("paused")
    {
        ErrorCode::ContainerUnavailable
    } else {
        ErrorCode::ProcessSpawnFailed
    }
}

/// `runc exec -d` can return while its pid is still runc's init, before the exec of the user's
/// program; that Go code swallows signals it has no default for (SIGUSR1, the real-time ones), so
/// a signal sent in that window would be lost. Running starts when the program runs.
fn wait_for_exec(pid: i32) {
    let until = Instant::now() + Duration::from_secs(2);
    while procfs::comm(pid).is_some_and(|c| c.starts_with("runc:[")) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_runc_messages() {
        assert_eq!(
            classify_runtime_error("exec failed: unable to start container process: chdir to cwd (\"/nope\") set in config.json failed: no such file or directory"),
            ErrorCode::InvalidProcessCwd
        );
        assert_eq!(
            classify_runtime_error("exec failed: unable to start container process: exec: \"nope\": executable file not found in $PATH"),
            ErrorCode::ProcessSpawnFailed
        );
        assert_eq!(
            classify_runtime_error("cannot exec in a stopped container"),
            ErrorCode::ContainerUnavailable
        );
        assert_eq!(
            classify_runtime_error("container does not exist"),
            ErrorCode::ContainerUnavailable
        );
    }
}
