//! The supervisor's own setup, before anything is launched: who it is, where it listens, which
//! signals it takes, and the first (Starting) record.
use std::collections::VecDeque;
use std::os::unix::net::UnixListener;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use sandbox_wire::wire::{ProbeKind, ProcessRecord};

use super::record_file::{reserve_path, RESERVE_BYTES};
use super::screen::Screen;
use super::{Result, Supervisor, TAIL_BYTES};
use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::launch::LaunchSpec;
use sandbox_node_protocol::launch::SupervisorIdentity;
use sandbox_node_protocol::layout::Layout;
use sandbox_node_protocol::ledger::{LedgerWriter, Pos};
use sandbox_node_protocol::procfs;
use sandbox_node_protocol::readiness::LogMatcher;
use sandbox_node_protocol::record;

impl Supervisor {
    pub(super) fn start(layout: Layout, id: ExecId) -> Result<Self> {
        let spec: LaunchSpec = record::read_json(&layout.launch(&id))?;
        nix::sys::prctl::set_child_subreaper(true)?;
        announce(&layout, &id)?;
        let sigfd = signals_as_fd()?;
        let control = bind_control(&layout, &id)?;
        let ledger = LedgerWriter::open(&layout.ledger(&id), spec.retention_bytes)?
            .with_floor(sandbox_node_protocol::ledger::OUTPUT_FLOOR);
        let matcher = log_matcher(&spec)?;
        let req = &spec.request;
        let rec = ProcessRecord {
            object: req.object.clone(),
            ..ProcessRecord::starting(
                &req.exec_id,
                &req.pod_uid,
                &req.container,
                &spec.container_id,
            )
        };
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
            stdin: None,
            tty: None,
            stdin_taken: Default::default(),
            last_by: None,
            writers: Default::default(),
            screen: Screen::none(),
            probe_cancel: Arc::new(AtomicBool::new(false)),
            dirty_since: None,
            oom_before,
            write_errors: Vec::new(),
            run_from: Pos::default(),
            run_started: None,
            restarts_since_reset: 0,
            backing_off: false,
            process_spec: None,
        };
        s.save(false)?;
        Ok(s)
    }
}

/// The agent tells a live supervisor from a lost one (or a reused pid) by this identity file.
fn announce(layout: &Layout, id: &ExecId) -> Result<()> {
    let me = std::process::id() as i32;
    let ident = SupervisorIdentity {
        pid: me,
        start_time: procfs::start_time(me).unwrap_or(0),
    };
    record::write_json(&layout.supervisor(id), &ident, false)?;
    // Room for the final record, kept from the start: on a filesystem that others fill
    // this process may have no output of its own to give up (best effort: none if already
    // full).
    let _ = record::write_private(&reserve_path(layout, id), &[0u8; RESERVE_BYTES]);
    Ok(())
}

/// Signals become poll events, so the single-threaded loop sees them with everything else.
fn signals_as_fd() -> Result<SignalFd> {
    // The runtime child gets a clean mask from std::process.
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
    Ok(SignalFd::with_flags(
        &mask,
        SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
    )?)
}

/// The agent's stop and signal requests arrive on this socket (a stale one from a crash goes).
fn bind_control(layout: &Layout, id: &ExecId) -> Result<UnixListener> {
    let sock = layout.control(id);
    let _ = std::fs::remove_file(&sock);
    let control =
        UnixListener::bind(sandbox_node_protocol::layout::SocketPath::new(&sock)?.path())?;
    control.set_nonblocking(true)?;
    Ok(control)
}

/// A bad logMatch pattern must fail the start, before anything is launched.
pub(super) fn log_matcher(spec: &LaunchSpec) -> Result<Option<LogMatcher>> {
    Ok(match spec.request.readiness.as_ref().map(|r| &r.probe) {
        Some(ProbeKind::LogMatch { pattern, stream }) => Some(LogMatcher::new(pattern, *stream)?),
        _ => None,
    })
}
