//! The per-process supervisor (`sandbox-supervisor <state-dir> <exec-id>`), a crate and binary of
//! its own: it shares with the agent daemon only `sandbox-node-protocol` (launch spec, control
//! messages, layout, records, ledger) and the wire's types.
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
//!
//! Where each part lives:
//! - [`start`](self::start): the supervisor's own setup (identity, signals, control socket).
//! - [`launch`](self::launch): the process's cgroup and `runc exec`, until the process runs.
//! - [`event_loop`](self::event_loop): the poll loop and its deadlines.
//! - [`output`](self::output): stdout/stderr into the ledger, the tail, logMatch.
//! - [`ready`](self::ready): readiness (probe results, its deadline).
//! - [`tree`](self::tree): the process tree (its root's exit, its cgroup's membership, usage).
//! - [`control`](self::control): the control socket's requests from the agent, each handed on.
//! - [`stop`](self::stop): stop sequences and signals to the tree.
//! - [`record_file`](self::record_file): writing the record (refreshes, the final one, its room).
//! - [`stdin`](self::stdin), [`tty`](self::tty): the process's input, its terminal;
//!   [`writers`](self::writers): a shared terminal's writers; [`screen`](self::screen): what
//!   the terminal shows now, for an attach.
//! - [`end`](self::end): how a run ended (exit, error) and the final record.
//! - [`restart`](self::restart): runs after the first (`restartPolicy`) and their back-off.
//! - [`cgroup`]: the process tree's own cgroup (membership, kill, limits, usage).
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A line on the supervisor's stderr (its log in the state dir). Never panics, unlike
/// `eprintln!`: with the state dir's filesystem full, a log line must not end supervision.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod cgroup;
mod control;
mod end;
mod event_loop;
mod launch;
mod output;
mod ready;
mod record_file;
mod restart;
mod screen;
mod start;
mod stdin;
mod stop;
mod tree;
mod tty;
mod writers;

use nix::sys::signalfd::SignalFd;
use sandbox_wire::wire::ProcessRecord;

use crate::cgroup::ProcessCgroup;
use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::launch::LaunchSpec;
use sandbox_node_protocol::launch::END_TREE;
use sandbox_node_protocol::layout::Layout;
use sandbox_node_protocol::ledger::{LedgerWriter, Pos};
use sandbox_node_protocol::readiness::LogMatcher;
use sandbox_node_protocol::wait::ChildEnd;

pub use launch::classify_runtime_error;

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
        match stop::end_tree(&layout, &id) {
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
    /// The write end of the process's stdin (`stdin: true`), until it is closed.
    stdin: Option<OwnedFd>,
    /// The master of the process's terminal (`tty`), held for its whole life (for resizes).
    tty: Option<OwnedFd>,
    /// The last stdin bytes taken, to compare a write over them with.
    stdin_taken: stdin::Taken,
    /// Who wrote the last stdin bytes taken (a label), named in a refusal of another writer.
    last_by: Option<String>,
    /// A shared terminal's writers and their own counts.
    writers: writers::Writers,
    /// What the terminal shows now (`tty`; nothing kept otherwise).
    screen: screen::Screen,
    probe_cancel: Arc<AtomicBool>,
    dirty_since: Option<Instant>,
    oom_before: Option<u64>,
    /// Kinds of write that failed so far (logged once each).
    write_errors: Vec<&'static str>,
    /// Where this run's output starts in the ledger.
    run_from: Pos,
    /// When this run started running.
    run_started: Option<Instant>,
    /// Restarts since the back-off was last reset (by a long enough run).
    restarts_since_reset: u32,
    /// Between runs: waiting out the back-off.
    backing_off: bool,
    /// The runtime's process spec, kept for the next runs of a restarting process (its file
    /// goes once read: it may hold Secret values).
    process_spec: Option<Vec<u8>>,
}

/// `now + secs`, or `None` when that instant cannot be represented (no deadline then): spec values
/// are bounded by the API, but records and requests may come from elsewhere, and an overflow
/// here would panic the supervisor and leave its process unsupervised.
fn after(now: Instant, secs: u64) -> Option<Instant> {
    now.checked_add(Duration::from_secs(secs))
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
}
