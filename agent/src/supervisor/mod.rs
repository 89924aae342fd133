//! The per-process supervisor (`sandbox-supervisor <state-dir> <exec-id>`).
//!
//! It is started by the agent in its own session, outside the agent pod's cgroup, and so survives
//! agent restarts and rolling updates. It becomes a child subreaper, asks the OCI runtime to exec
//! the process inside the container (`runc exec -d`, which leaves the process to us), drains its
//! stdout/stderr into the ledger, enforces the timeout, serves stop/signal requests on a unix
//! socket, runs readiness, and writes every state change to the record file atomically. The final
//! record is written only after the output is drained, and never with an invented exit code.
//!
//! Single-threaded poll loop (plus one probe thread for network readiness): footprint matters,
//! one of these runs per process.
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes set aside at the start for the final record (it is a few KiB; written aside, then
/// renamed).
const RESERVE_BYTES: usize = 32 << 10;

fn reserve_path(layout: &Layout, id: &ExecId) -> std::path::PathBuf {
    layout.proc_dir(id).join("record.reserve")
}

/// A line on the supervisor's stderr (its log in the state dir). Never panics, unlike
/// `eprintln!`: with the state dir's filesystem full, a log line must not end supervision.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::pipe2;
use sandbox_api::wire::{
    ApiError, EndReason, ErrorCode, ExitStatus, Phase, ProbeKind, ProcessRecord,
};
use serde::{Deserialize, Serialize};

use crate::cgroup::{self, ProcessCgroup};
use crate::clock::{now_nanos, rfc3339};
use crate::exec_id::ExecId;
use crate::layout::Layout;
use crate::ledger::{LedgerWriter, Stream};
use crate::procfs;
use crate::readiness::{self, LogMatcher};
use crate::record;
use crate::runtime::LaunchSpec;
use crate::signals;
use crate::wait::{self, ChildEnd};

const TAIL_BYTES: usize = 2048;
/// After the tree has ended, keep draining output still held open (a descriptor passed to a
/// process outside the tree) this long.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// Usage and process count refresh while running.
const USAGE_REFRESH: Duration = Duration::from_secs(5);
/// Membership re-check where the node cannot notify (pure cgroup v1).
const MEMBERSHIP_POLL: Duration = Duration::from_millis(20);
/// Non-durable record refresh while output flows.
const COUNTER_FLUSH: Duration = Duration::from_secs(1);
const READ_BUF: usize = 256 * 1024;

/// Identity of a running supervisor (pid reuse safe).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SupervisorIdentity {
    pub pid: i32,
    pub start_time: u64,
}

impl SupervisorIdentity {
    pub fn alive(&self) -> bool {
        procfs::alive(self.pid, Some(self.start_time))
    }
}

/// A request on the control socket (one JSON line; one JSON line back).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Control {
    /// Stop sequence: `signal` to the group, SIGKILL after `grace_seconds`.
    Stop { signal: i32, grace_seconds: u64 },
    /// Deliver `signal` to the process group once.
    Signal { signal: i32 },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ControlReply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

pub fn valid_signal(sig: i32) -> bool {
    (1..=64).contains(&sig)
}

/// Mode argument: end what is left of a lost supervisor's tree, then exit.
pub const END_TREE: &str = "--end-tree";

/// Entry point of the `sandbox-supervisor` binary.
pub fn main() -> ! {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 && !(args.len() == 4 && args[3] == END_TREE) {
        say!("usage: sandbox-supervisor <state-dir> <exec-id> [{END_TREE}]");
        std::process::exit(2);
    }
    let layout = Layout::new(&args[1]);
    let id = match ExecId::parse(&args[2]) {
        Ok(id) => id,
        Err(e) => {
            say!("{e}");
            std::process::exit(2);
        }
    };
    if args.len() == 4 {
        match end_tree(&layout, &id) {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                say!("supervisor: ending the tree of {}: {e}", id.as_str());
                std::process::exit(1);
            }
        }
    }
    match Supervisor::start(layout, id).and_then(|s| s.run()) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            say!("supervisor: {e}");
            std::process::exit(1);
        }
    }
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

struct Supervisor {
    layout: Layout,
    id: ExecId,
    spec: LaunchSpec,
    rec: ProcessRecord,
    ledger: LedgerWriter,
    tail: VecDeque<u8>,
    sigfd: SignalFd,
    control: UnixListener,
    out: [Option<OwnedFd>; 2],
    host_pid: Option<i32>,
    exit: Option<ChildEnd>,
    /// The process's own cgroup (created before the launch; removed at the end).
    cgroup: Option<ProcessCgroup>,
    /// The cgroup's `cgroup.events` (v2), kept open: the kernel wakes `poll` (POLLPRI) when it
    /// changes, so the tree's end is seen at once without polling, and without an inotify
    /// instance per process (those are a scarce per-user resource the node's daemons need).
    cgroup_events: Option<std::fs::File>,
    /// Every member of the cgroup has ended, since then.
    emptied_at: Option<Instant>,
    usage_at: Option<Instant>,
    timeout_at: Option<Instant>,
    kill_at: Option<Instant>,
    /// A stop sequence has begun (its SIGKILL may have no deadline: see `after`).
    stopping: bool,
    timed_out: bool,
    stop_requested: bool,
    matcher: Option<LogMatcher>,
    readiness_deadline: Option<Instant>,
    probe_pipe: Option<OwnedFd>,
    probe_cancel: Arc<AtomicBool>,
    dirty_since: Option<Instant>,
    oom_before: Option<u64>,
    /// Kinds of write that failed so far (logged once each).
    write_errors: Vec<&'static str>,
}

impl Supervisor {
    fn start(layout: Layout, id: ExecId) -> Result<Self> {
        let spec: LaunchSpec = record::read_json(&layout.launch(&id))?;
        nix::sys::prctl::set_child_subreaper(true)?;
        let me = std::process::id() as i32;
        let ident = SupervisorIdentity {
            pid: me,
            start_time: procfs::start_time(me).unwrap_or(0),
        };
        record::write_json(&layout.supervisor(&id), &ident, false)?;
        // Room for the final record, kept from the start: on a filesystem that others fill
        // this process may have no output of its own to give up (best effort: none if already
        // full).
        let _ = std::fs::write(reserve_path(&layout, &id), vec![0u8; RESERVE_BYTES]);

        // Signals become poll events; the runtime child gets a clean mask from std::process.
        let mut mask = SigSet::empty();
        for s in [
            Signal::SIGCHLD,
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
        ] {
            mask.add(s);
        }
        mask.thread_block()?;
        // SAFETY: ignoring SIGPIPE installs no handler code; writes to a gone reader get EPIPE.
        unsafe { nix::sys::signal::signal(Signal::SIGPIPE, nix::sys::signal::SigHandler::SigIgn)? };
        let sigfd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;

        let sock = layout.control(&id);
        let _ = std::fs::remove_file(&sock);
        let control = UnixListener::bind(crate::layout::SocketPath::new(&sock)?.path())?;
        control.set_nonblocking(true)?;

        let ledger = LedgerWriter::open(&layout.ledger(&id), spec.retention_bytes)?;
        let req = &spec.request;
        let matcher = match req.readiness.as_ref().map(|r| &r.probe) {
            Some(ProbeKind::LogMatch { pattern, stream }) => {
                Some(LogMatcher::new(pattern, *stream)?)
            }
            _ => None,
        };
        let rec = ProcessRecord::starting(
            &req.exec_id,
            &req.pod_uid,
            &req.container,
            &spec.container_id,
        );
        let oom_before = procfs::oom_kills(spec.container_pid);
        let mut s = Supervisor {
            layout,
            id,
            spec,
            rec,
            ledger,
            tail: VecDeque::with_capacity(TAIL_BYTES),
            sigfd,
            control,
            out: [None, None],
            host_pid: None,
            exit: None,
            cgroup: None,
            cgroup_events: None,
            emptied_at: None,
            usage_at: None,
            timeout_at: None,
            kill_at: None,
            stopping: false,
            timed_out: false,
            stop_requested: false,
            matcher,
            readiness_deadline: None,
            probe_pipe: None,
            probe_cancel: Arc::new(AtomicBool::new(false)),
            dirty_since: None,
            oom_before,
            write_errors: Vec::new(),
        };
        s.save(false)?;
        Ok(s)
    }

    fn save(&mut self, durable: bool) -> std::io::Result<()> {
        self.rec.revision += 1;
        self.rec.output.tail = {
            let (a, b) = self.tail.as_slices();
            let mut v = a.to_vec();
            v.extend_from_slice(b);
            // Cut at a UTF-8 boundary where possible so the tail does not start mid-character.
            let start = v.iter().position(|&c| (c as i8) >= -64).unwrap_or(0).min(3);
            String::from_utf8_lossy(&v[start..]).into_owned()
        };
        self.ledger.notice_removed();
        self.rec.output.dropped_bytes = self.ledger.dropped() + self.ledger.lost();
        self.dirty_since = None;
        let path = self.layout.record(&self.id);
        if !durable {
            // A refresh that cannot be written (a full disk) is retried later; supervising goes
            // on, and nothing the process does depends on it.
            if let Err(e) = record::write_json(&path, &self.rec, false) {
                self.write_failed("record", &e);
                self.dirty_since = Some(Instant::now());
            }
            return Ok(());
        }
        // The durable record (the end) must be written: on a full filesystem this process's own
        // oldest output is given up for it (an explicit gap), and it is retried for a while.
        let until = Instant::now() + Duration::from_secs(600);
        loop {
            match record::write_json(&path, &self.rec, true) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() < until => {
                    self.write_failed("final record", &e);
                    if !self.ledger.free_oldest()
                        && std::fs::remove_file(reserve_path(&self.layout, &self.id)).is_err()
                    {
                        std::thread::sleep(Duration::from_secs(1));
                    }
                    self.rec.output.dropped_bytes = self.ledger.dropped() + self.ledger.lost();
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Logs a failed write once per kind (the log may be on the same full filesystem).
    fn write_failed(&mut self, what: &'static str, e: &std::io::Error) {
        if !self.write_errors.contains(&what) {
            self.write_errors.push(what);
            say!("supervisor: writing {what}: {e} (supervision continues)");
        }
    }

    fn fail(&mut self, code: ErrorCode, message: String) -> Result<()> {
        if let Some(cg) = self.cgroup.take() {
            let _ = cg.kill_all();
            cg.remove();
            let _ = std::fs::remove_file(self.layout.cgroup(&self.id));
        }
        self.rec.phase = Phase::Error;
        self.rec.error = Some(ApiError { code, message });
        self.rec.finished_at = Some(rfc3339(now_nanos()));
        self.save(true)?;
        let _ = std::fs::remove_file(reserve_path(&self.layout, &self.id));
        Ok(())
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
        let limits = self.spec.request.resources.clone();
        self.cgroup = Some(cg);
        if let Some(l) = limits {
            let applied = l
                .check()
                .map_err(|(field, message)| cgroup::LimitError { field, message })
                .and_then(|_| self.cgroup.as_ref().map_or(Ok(()), |cg| cg.apply(&l)));
            if let Err(e) = applied {
                self.fail(ErrorCode::InvalidResourceLimits, e.to_string())?;
                return Ok(None);
            }
        }
        if let Some(ev) = self.cgroup.as_ref().and_then(ProcessCgroup::events_file) {
            // Without it, membership is polled instead: never a reason to fail the start.
            if let Ok(f) = std::fs::File::open(ev) {
                rearm(&f);
                self.cgroup_events = Some(f);
            }
        }
        Ok(Some(name))
    }

    /// The environment may hold Secret values (`env[].valueFrom`): once runc has read it, nothing
    /// on disk keeps it (the process spec goes, the launch spec keeps the names only).
    fn forget_env(&mut self) {
        let _ = std::fs::remove_file(self.layout.process_spec(&self.id));
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

    fn launch(&mut self) -> Result<bool> {
        let (out_r, out_w) = pipe2(OFlag::O_CLOEXEC)?;
        let (err_r, err_w) = pipe2(OFlag::O_CLOEXEC)?;
        for fd in [&out_r, &err_r] {
            // Bigger pipes: fewer wakeups for fast writers, more slack while we write the ledger.
            let _ = fcntl(fd, FcntlArg::F_SETPIPE_SZ(1 << 20));
            fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
        }
        let Some(cg_name) = self.make_cgroup()? else {
            return Ok(false);
        };
        let pid_file = self.layout.pid_file(&self.id);
        let _ = std::fs::remove_file(&pid_file);
        let log = self.layout.runtime_log(&self.id);
        // runc appends to an existing log and keeps its mode; its own would follow the umask,
        // which we leave alone because the process inherits it, as under `kubectl exec`.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log)?;
        let mut spawned = Command::new(&self.spec.runtime_binary);
        spawned
            .arg("--root")
            .arg(&self.spec.runtime_root)
            .arg("--log")
            .arg(&log)
            .arg("--log-format")
            .arg("json")
            .arg("exec")
            .arg("-d")
            .arg("--cgroup")
            .arg(&cg_name)
            .arg("--pid-file")
            .arg(&pid_file)
            .arg("--process")
            .arg(self.layout.process_spec(&self.id))
            .arg(&self.spec.container_id)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out_w))
            .stderr(Stdio::from(err_w));
        // SAFETY: the hook runs between fork and exec and makes only raw system calls.
        let spawned = unsafe {
            // Ignored signals stay ignored across exec, through runc, into the process: a signal
            // ignored by whoever started us (seen: 32, from the parent of a test harness) must
            // not become one the process cannot be killed by, where `kubectl exec` could.
            spawned.pre_exec(|| {
                signals::reset_to_default();
                Ok(())
            })
        }
        .spawn();
        self.out = [Some(out_r), Some(err_r)];
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let hint = if e.raw_os_error() == Some(libc::EAGAIN) {
                    " (the node's supervisors are at their pids cap, agent.supervisorLimits.pids, or the node is out of pids)"
                } else {
                    ""
                };
                self.fail(
                    ErrorCode::ProcessSpawnFailed,
                    format!("running runtime {}: {e}{hint}", self.spec.runtime_binary),
                )?;
                return Ok(false);
            }
        };
        // runc returns once the process runs (or failed to); the process is then reparented to
        // us as the subreaper. Output produced meanwhile waits in the (1 MiB) pipes.
        let status = wait::wait_for(child.id() as i32)?;
        self.forget_env();
        let ok = status == ChildEnd::Exited(0);
        let host_pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        if !ok || host_pid.is_none() {
            self.drain_available();
            let msg =
                runtime_error(&log).unwrap_or_else(|| format!("runtime exited with {status:?}"));
            let code = classify_runtime_error(&msg);
            self.fail(code, msg)?;
            return Ok(false);
        }
        let host_pid = host_pid.unwrap();
        wait_for_exec(host_pid);
        let now = Instant::now();
        self.usage_at = Some(now);
        self.host_pid = Some(host_pid);
        self.rec.host_pid = Some(host_pid);
        self.rec.pid = procfs::ns_pid(host_pid);
        self.rec.phase = Phase::Running;
        self.rec.started_at = Some(rfc3339(now_nanos()));
        let req = self.spec.request.clone();
        self.timeout_at = req.timeout_seconds.and_then(|t| after(now, t));
        if let Some(r) = &req.readiness {
            self.readiness_deadline = r.timeout_seconds.and_then(|t| after(now, t));
            if !matches!(r.probe, ProbeKind::LogMatch { .. }) {
                let (pr, pw) = pipe2(OFlag::O_CLOEXEC)?;
                let netns = format!("/proc/{}/ns/net", self.spec.container_pid);
                readiness::spawn_net_prober(
                    netns.into(),
                    r.probe.clone(),
                    Duration::from_millis(r.period_millis.max(10)),
                    self.readiness_deadline,
                    self.probe_cancel.clone(),
                    pw,
                )?;
                self.probe_pipe = Some(pr);
            }
        } else {
            // No readiness configured: started means ready.
            self.rec.ready = true;
            self.rec.ready_at = self.rec.started_at.clone();
        }
        // Not fsynced: after a node crash the process is gone anyway and the record says Lost.
        self.save(false)?;
        Ok(true)
    }

    fn pgid(&self) -> Option<i32> {
        // runc exec calls setsid: the process leads its own group. Never signal group 0 or 1.
        self.host_pid.filter(|&p| p > 1)
    }

    fn kill_group(&self, sig: i32) -> std::io::Result<()> {
        let Some(pg) = self.pgid() else { return Ok(()) };
        // SAFETY: kill(2) with a negative pid signals a process group; pg > 1 is checked above.
        if unsafe { libc::kill(-pg, sig) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            Ok(())
        } else {
            Err(e)
        }
    }

    /// `sig` to every process of the tree (its cgroup); SIGKILL ends the whole cgroup at once.
    fn signal_tree(&self, sig: i32) -> std::io::Result<()> {
        match &self.cgroup {
            Some(cg) if sig == libc::SIGKILL => cg.kill_all(),
            Some(cg) => {
                cg.signal_all(sig);
                Ok(())
            }
            None => self.kill_group(sig),
        }
    }

    /// The root has exited and its cgroup is empty: nothing of the process is left.
    fn tree_done(&self) -> bool {
        self.exit.is_some() && self.emptied_at.is_some()
    }

    fn begin_stop(&mut self, signal: i32, grace: u64) -> std::io::Result<()> {
        if self.tree_done() || self.stopping {
            return Ok(()); // idempotent: already ended or already stopping
        }
        self.signal_tree(signal)?;
        // A grace too long to represent is "never": the stop signal stands alone, as asked.
        self.kill_at = after(Instant::now(), grace);
        self.stopping = true;
        if grace == 0 {
            self.signal_tree(libc::SIGKILL)?;
        }
        Ok(())
    }

    /// Re-reads the cgroup's membership once the root has exited.
    fn check_tree(&mut self) -> std::io::Result<()> {
        if self.exit.is_none() || self.emptied_at.is_some() {
            return Ok(());
        }
        let empty = self.cgroup.as_ref().is_none_or(ProcessCgroup::is_empty);
        if empty {
            self.emptied_at = Some(Instant::now());
        } else if !self.rec.root_exited {
            self.rec.root_exited = true;
            self.rec.processes = self.cgroup.as_ref().map(|c| c.members().len() as u32);
            self.save(false)?;
        }
        Ok(())
    }

    /// Usage and process count, at most every [`USAGE_REFRESH`].
    fn refresh_usage(&mut self, now: Instant) -> std::io::Result<()> {
        let Some(cg) = &self.cgroup else {
            return Ok(());
        };
        if self.usage_at.is_some_and(|t| now < t + USAGE_REFRESH) {
            return Ok(());
        }
        self.usage_at = Some(now);
        let usage = Some(cg.usage());
        let processes = Some(cg.members().len() as u32);
        if usage != self.rec.usage || processes != self.rec.processes {
            self.rec.usage = usage;
            self.rec.processes = processes;
            self.save(false)?;
        }
        Ok(())
    }

    fn on_output(&mut self, idx: usize, data: &[u8]) -> std::io::Result<()> {
        let stream = if idx == 0 {
            Stream::Stdout
        } else {
            Stream::Stderr
        };
        let hit = match self.matcher.as_mut() {
            Some(m) if !self.rec.ready && !self.rec.readiness_timed_out => m.feed(stream, data),
            _ => None,
        };
        let Some(hit) = hit else {
            return self.append_output(stream, data);
        };
        // Cut the output after the matched line so a cursor can point just past it.
        self.append_output(stream, &data[..hit.end])?;
        let after = self.ledger.end_pos();
        self.mark_ready_on(hit.line, after)?;
        if hit.end < data.len() {
            self.append_output(stream, &data[hit.end..])?;
        }
        Ok(())
    }

    fn append_output(&mut self, stream: Stream, data: &[u8]) -> std::io::Result<()> {
        // Output that cannot be stored is counted as lost (a gap readers see), never the end of
        // supervision.
        if let Err(e) = self.ledger.append(stream, now_nanos(), data) {
            self.write_failed("output", &e);
        }
        match stream {
            Stream::Stdout => self.rec.output.stdout_bytes += data.len() as u64,
            Stream::Stderr => self.rec.output.stderr_bytes += data.len() as u64,
        }
        let keep = &data[data.len().saturating_sub(TAIL_BYTES)..];
        let overflow = (self.tail.len() + keep.len()).saturating_sub(TAIL_BYTES);
        self.tail.drain(..overflow);
        self.tail.extend(keep);
        if self.dirty_since.is_none() {
            self.dirty_since = Some(Instant::now());
        }
        Ok(())
    }

    fn mark_ready_on(&mut self, line: String, after: crate::ledger::Pos) -> std::io::Result<()> {
        self.rec.log_match = Some(sandbox_api::wire::LogMatchHit {
            line,
            cursor: crate::ledger::encode_cursor(self.id.as_str(), after),
        });
        self.mark_ready()
    }

    /// A stream closed: a last line without a newline is complete now (logMatch).
    fn on_eof(&mut self, idx: usize) -> std::io::Result<()> {
        self.out[idx] = None;
        let stream = if idx == 0 {
            Stream::Stdout
        } else {
            Stream::Stderr
        };
        if !self.rec.ready && !self.rec.readiness_timed_out {
            if let Some(line) = self.matcher.as_mut().and_then(|m| m.eof(stream)) {
                let after = self.ledger.end_pos();
                self.mark_ready_on(line, after)?;
            }
        }
        Ok(())
    }

    fn mark_ready(&mut self) -> std::io::Result<()> {
        self.rec.ready = true;
        self.rec.ready_at = Some(rfc3339(now_nanos()));
        self.save(false)
    }

    /// Reads what is available on both pipes without blocking (used on spawn failure).
    fn drain_available(&mut self) {
        let mut buf = vec![0u8; READ_BUF];
        for idx in 0..2 {
            while let Some(fd) = self.out[idx].as_ref() {
                match nix::unistd::read(fd, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let _ = self.on_output(idx, &buf[..n]);
                    }
                }
            }
        }
    }

    fn reap(&mut self) {
        // Also collects the group's orphans adopted by us as the subreaper.
        while let Ok(Some((pid, end))) = wait::reap_any() {
            if Some(pid) == self.host_pid && self.exit.is_none() {
                self.exit = Some(end);
                if self.stopping || self.timed_out {
                    // Root gone during a stop: finish the rest of the tree now.
                    let _ = self.signal_tree(libc::SIGKILL);
                }
            }
        }
    }

    fn handle_control(&mut self, mut conn: UnixStream) {
        let _ = conn.set_nonblocking(false);
        let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
        let mut line = String::new();
        let reply = match BufReader::new(&conn).read_line(&mut line) {
            Ok(_) => match serde_json::from_str::<Control>(&line) {
                Ok(c) => self.apply(c),
                Err(e) => Err(format!("bad control request: {e}")),
            },
            Err(e) => Err(format!("reading control request: {e}")),
        };
        let reply = match reply {
            Ok(()) => ControlReply {
                ok: true,
                error: None,
            },
            Err(e) => ControlReply {
                ok: false,
                error: Some(e),
            },
        };
        let mut body = serde_json::to_vec(&reply).unwrap_or_default();
        body.push(b'\n');
        let _ = conn.write_all(&body);
    }

    fn apply(&mut self, c: Control) -> std::result::Result<(), String> {
        match c {
            Control::Stop {
                signal,
                grace_seconds,
            } => {
                if !valid_signal(signal) {
                    return Err(format!("signal {signal}: must be 1-64"));
                }
                if !self.tree_done() && !self.stop_requested {
                    self.stop_requested = true;
                    self.rec.stop_requested = true;
                    self.save(false).map_err(|e| e.to_string())?;
                }
                self.begin_stop(signal, grace_seconds)
                    .map_err(|e| e.to_string())
            }
            Control::Signal { signal } => {
                if !valid_signal(signal) {
                    return Err(format!("signal {signal}: must be 1-64"));
                }
                if self.tree_done() {
                    return Ok(());
                }
                // While the root runs, its process group (as a shell would); after, its leftovers.
                if self.exit.is_none() {
                    self.kill_group(signal).map_err(|e| e.to_string())
                } else {
                    self.signal_tree(signal).map_err(|e| e.to_string())
                }
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let flush = self.dirty_since.map(|t| t + COUNTER_FLUSH);
        let drain = self.emptied_at.map(|t| t + DRAIN_GRACE);
        let membership = match (&self.exit, &self.emptied_at, &self.cgroup_events) {
            (Some(_), None, None) => Some(Instant::now() + MEMBERSHIP_POLL),
            _ => None,
        };
        let usage = self.usage_at.map(|t| t + USAGE_REFRESH);
        let readiness =
            if self.matcher.is_some() && !self.rec.ready && !self.rec.readiness_timed_out {
                self.readiness_deadline
            } else {
                None
            };
        let stop = if !self.tree_done() {
            self.kill_at.or(if self.timed_out {
                None
            } else {
                self.timeout_at
            })
        } else {
            None
        };
        [flush, drain, membership, usage, readiness, stop]
            .into_iter()
            .flatten()
            .min()
    }

    fn run(mut self) -> Result<()> {
        if !self.launch()? {
            return Ok(());
        }
        let mut buf = vec![0u8; READ_BUF];
        loop {
            self.check_tree()?;
            let done_draining = self.out.iter().all(Option::is_none)
                || self.emptied_at.is_some_and(|t| t.elapsed() >= DRAIN_GRACE);
            if self.tree_done() && done_draining {
                break;
            }
            let now = Instant::now();
            let timeout = match self.next_deadline() {
                Some(d) if d <= now => PollTimeout::ZERO,
                Some(d) => PollTimeout::try_from((d - now).as_millis().min(60_000) as u32 + 1)
                    .unwrap_or(PollTimeout::MAX),
                None => PollTimeout::NONE,
            };
            let (ready_out, ready_sig, ready_ctl, ready_probe) = {
                let mut fds = Vec::with_capacity(6);
                let mut slots = [usize::MAX; 6];
                for (i, fd) in self.out.iter().enumerate() {
                    if let Some(fd) = fd {
                        slots[i] = fds.len();
                        fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
                    }
                }
                slots[2] = fds.len();
                fds.push(PollFd::new(self.sigfd.as_fd(), PollFlags::POLLIN));
                slots[3] = fds.len();
                fds.push(PollFd::new(self.control.as_fd(), PollFlags::POLLIN));
                if let Some(p) = &self.probe_pipe {
                    slots[4] = fds.len();
                    fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
                }
                if let Some(f) = &self.cgroup_events {
                    slots[5] = fds.len();
                    fds.push(PollFd::new(f.as_fd(), PollFlags::POLLPRI));
                }
                match poll(&mut fds, timeout) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
                let hit = |slot: usize| {
                    slot != usize::MAX && fds[slot].revents().is_some_and(|r| !r.is_empty())
                };
                if hit(slots[5]) {
                    // Re-armed only; membership is re-read at the top of the loop.
                    if let Some(f) = &self.cgroup_events {
                        rearm(f);
                    }
                }
                (
                    [hit(slots[0]), hit(slots[1])],
                    hit(slots[2]),
                    hit(slots[3]),
                    hit(slots[4]),
                )
            };
            for (idx, ready) in ready_out.into_iter().enumerate() {
                if !ready {
                    continue;
                }
                // A full buffer means more is waiting: keep reading (bounded, so control requests
                // and the other stream still get their turn) instead of going back to poll.
                for _ in 0..8 {
                    let Some(fd) = self.out[idx].as_ref() else {
                        break;
                    };
                    match nix::unistd::read(fd, &mut buf) {
                        Ok(0) => self.on_eof(idx)?,
                        Ok(n) => {
                            self.on_output(idx, &buf[..n])?;
                            if n == buf.len() {
                                continue;
                            }
                        }
                        Err(Errno::EAGAIN) | Err(Errno::EINTR) => {}
                        Err(_) => self.on_eof(idx)?,
                    }
                    break;
                }
            }
            if ready_sig {
                let mut stop_sig = false;
                while let Ok(Some(info)) = self.sigfd.read_signal() {
                    if info.ssi_signo as i32 != libc::SIGCHLD {
                        stop_sig = true;
                    }
                }
                self.reap();
                if stop_sig {
                    // Someone asked the supervisor itself to stop: stop the process properly.
                    let (sig, grace) = (
                        self.spec.request.stop_signal,
                        self.spec.request.grace_seconds,
                    );
                    let _ = self.apply(Control::Stop {
                        signal: sig,
                        grace_seconds: grace,
                    });
                }
            }
            if ready_ctl {
                while let Ok((conn, _)) = self.control.accept() {
                    self.handle_control(conn);
                }
            }
            if ready_probe {
                let mut b = [0u8; 1];
                let got = self
                    .probe_pipe
                    .as_ref()
                    .map(|p| nix::unistd::read(p, &mut b));
                self.probe_pipe = None;
                if let Some(Ok(1)) = got {
                    if b[0] == readiness::READY && self.exit.is_none() {
                        self.mark_ready()?;
                    } else if b[0] == readiness::TIMED_OUT {
                        self.rec.readiness_timed_out = true;
                        self.save(false)?;
                    }
                }
            }
            let now = Instant::now();
            if !self.tree_done() {
                if !self.timed_out && !self.stopping && self.timeout_at.is_some_and(|t| now >= t) {
                    self.timed_out = true;
                    let (sig, grace) = (
                        self.spec.request.stop_signal,
                        self.spec.request.grace_seconds,
                    );
                    self.begin_stop(sig, grace)?;
                } else if self.kill_at.is_some_and(|t| now >= t) {
                    self.signal_tree(libc::SIGKILL)?;
                    self.kill_at = after(now, 3600);
                }
                self.refresh_usage(now)?;
            }
            if self.matcher.is_some()
                && !self.rec.ready
                && !self.rec.readiness_timed_out
                && self.readiness_deadline.is_some_and(|t| now >= t)
            {
                self.rec.readiness_timed_out = true;
                self.save(false)?;
            }
            if self.dirty_since.is_some_and(|t| now >= t + COUNTER_FLUSH) {
                self.save(false)?;
            }
        }
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        self.probe_cancel.store(true, Ordering::Relaxed);
        let end = self.exit.expect("finish after exit");
        let (code, signal) = (end.code(), end.signal());
        // A container stop SIGKILLs every process in it; the init may die a moment after ours.
        let container_gone =
            signal == Some(libc::SIGKILL) && !self.stop_requested && !self.timed_out && {
                let until = Instant::now() + Duration::from_millis(500);
                loop {
                    if !procfs::alive(self.spec.container_pid, self.spec.container_start) {
                        break true;
                    }
                    if Instant::now() >= until {
                        break false;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            };
        let container_oom = match (self.oom_before, procfs::oom_kills(self.spec.container_pid)) {
            (Some(a), Some(b)) => b > a,
            _ => false,
        };
        // The tree's own cgroup starts at 0 OOM kills: any is its own limit being hit.
        let tree_oom = self
            .cgroup
            .as_ref()
            .and_then(ProcessCgroup::oom_kills)
            .is_some_and(|n| n > 0);
        let oom = container_oom || tree_oom;
        if let Some(cg) = self.cgroup.take() {
            self.rec.usage = Some(cg.usage());
            self.rec.processes = Some(0);
            let left = cg.remove();
            if !left.is_empty() {
                say!("supervisor: cgroups not removed: {left:?}");
            }
            let _ = std::fs::remove_file(self.layout.cgroup(&self.id));
        }
        self.rec.root_exited = false;
        let reason = if self.timed_out {
            EndReason::TimedOut
        } else if self.stop_requested {
            EndReason::Stopped
        } else if signal == Some(libc::SIGKILL) && oom {
            EndReason::OOMKilled
        } else if container_gone {
            EndReason::ContainerExited
        } else if signal.is_some() {
            EndReason::Signaled
        } else {
            EndReason::Exited
        };
        self.rec.phase = Phase::Exited;
        self.rec.exit = Some(ExitStatus {
            code,
            signal,
            timed_out: self.timed_out,
        });
        self.rec.end_reason = Some(reason);
        self.rec.finished_at = Some(rfc3339(now_nanos()));
        self.save(true)?;
        let _ = std::fs::remove_file(reserve_path(&self.layout, &self.id));
        let _ = std::fs::remove_file(self.layout.control(&self.id));
        Ok(())
    }
}

/// Kills every member of a lost supervisor's cgroup and removes it.
fn end_tree(layout: &Layout, id: &ExecId) -> Result<()> {
    let path = layout.cgroup(id);
    let cg: ProcessCgroup = record::read_json(&path)?;
    let until = Instant::now() + Duration::from_secs(10);
    while !cg.is_empty() && Instant::now() < until {
        cg.kill_all()?;
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = cg.remove();
    if !left.is_empty() {
        return Err(format!("not removed: {left:?}").into());
    }
    std::fs::remove_file(&path)?;
    Ok(())
}

/// Reads a kernfs file from its start through this descriptor: its next change wakes `poll`.
fn rearm(f: &std::fs::File) {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 256];
    let _ = f.read_at(&mut buf, 0);
}

/// The runtime's error message from its JSON log (last error/fatal entries).
fn runtime_error(log: &std::path::Path) -> Option<String> {
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

/// `now + secs`, or `None` when that instant cannot be represented (no deadline then): spec values
/// are bounded by the API, but records and requests may come from elsewhere, and an overflow
/// here would panic the supervisor and leave its process unsupervised.
fn after(now: Instant, secs: u64) -> Option<Instant> {
    now.checked_add(Duration::from_secs(secs))
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
    fn deadlines_too_far_are_none_not_a_panic() {
        let now = Instant::now();
        assert_eq!(after(now, u64::MAX), None);
        assert!(after(now, i32::MAX as u64).is_some_and(|t| t > now));
        assert_eq!(after(now, 0), Some(now));
    }

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
