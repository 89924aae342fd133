//! How a child ended, read straight from the kernel's wait status.
//!
//! nix's `WaitStatus` turns the terminating signal into its `Signal` enum, which has no variants
//! for the real-time signals (32–64): `waitpid` then returns `EINVAL` *after* the kernel has
//! reaped the child, so its end is lost for good. Every caller that reaps goes through here
//! instead, and a signal stays a plain number end to end.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// The end of a child process, as the kernel reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildEnd {
    /// Exited on its own with this code (0–255).
    Exited(i32),
    /// Killed by this signal (1–64).
    Signaled(i32),
}

impl ChildEnd {
    /// The shell convention: the exit code, or 128 + the signal number.
    pub fn code(self) -> i32 {
        match self {
            ChildEnd::Exited(c) => c,
            ChildEnd::Signaled(s) => 128 + s,
        }
    }

    pub fn signal(self) -> Option<i32> {
        match self {
            ChildEnd::Exited(_) => None,
            ChildEnd::Signaled(s) => Some(s),
        }
    }

    /// Decodes a raw wait status; `None` for a stop/continue report (not an end).
    pub fn from_raw(status: libc::c_int) -> Option<ChildEnd> {
        if libc::WIFEXITED(status) {
            Some(ChildEnd::Exited(libc::WEXITSTATUS(status)))
        } else if libc::WIFSIGNALED(status) {
            Some(ChildEnd::Signaled(libc::WTERMSIG(status)))
        } else {
            None
        }
    }
}

/// Reaps one ended child of this process without blocking: `Ok(None)` when no child has ended
/// (or there are no children left).
pub fn reap_any() -> io::Result<Option<(i32, ChildEnd)>> {
    loop {
        match wait_raw(-1, libc::WNOHANG) {
            Ok(Some((pid, st))) => match ChildEnd::from_raw(st) {
                Some(end) => return Ok(Some((pid, end))),
                None => continue, // a stop/continue report: not an end, look further
            },
            Ok(None) => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ECHILD) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

/// Blocks until child `pid` has ended.
pub fn wait_for(pid: i32) -> io::Result<ChildEnd> {
    loop {
        if let Some((_, st)) = wait_raw(pid, 0)? {
            if let Some(end) = ChildEnd::from_raw(st) {
                return Ok(end);
            }
        }
    }
}

/// Waits up to `limit` for child `pid` to end: `Ok(None)` when it is still running then (it is
/// left so). A pidfd wakes the wait at the child's end, with no polling.
pub fn wait_for_within(pid: i32, limit: Duration) -> io::Result<Option<ChildEnd>> {
    let Ok(fd) = pidfd_open(pid) else {
        // Before Linux 5.3: no bound rather than no start.
        return wait_for(pid).map(Some);
    };
    let until = Instant::now() + limit;
    loop {
        if let Some((_, st)) = wait_raw(pid, libc::WNOHANG)? {
            if let Some(end) = ChildEnd::from_raw(st) {
                return Ok(Some(end));
            }
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one pollfd, a live local, for the length of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(io::Error::last_os_error());
        }
    }
}

/// A descriptor for process `pid` that stays its own even if the pid is reused later (readable
/// once it has ended).
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just returned to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// waitpid(2), retried on EINTR; `Ok(None)` when WNOHANG found nothing.
fn wait_raw(pid: i32, flags: libc::c_int) -> io::Result<Option<(i32, libc::c_int)>> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid only writes the status through the pointer, which points at a live
        // local c_int for the whole call.
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r > 0 {
            return Ok(Some((r, status)));
        }
        if r == 0 {
            return Ok(None);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child past the bound is left running (`None`, promptly); one that ends within it is
    /// reported as soon as it ends, not at the bound.
    #[test]
    // Both children are reaped by the functions under test, which clippy cannot see.
    #[allow(clippy::zombie_processes)]
    fn wait_within_is_bounded_and_prompt() {
        let mut long = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let t = Instant::now();
        let got = wait_for_within(long.id() as i32, Duration::from_millis(200)).unwrap();
        assert_eq!(got, None);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        long.kill().unwrap();
        assert_eq!(
            wait_for(long.id() as i32).unwrap(),
            ChildEnd::Signaled(libc::SIGKILL)
        );

        let quick = std::process::Command::new("sh")
            .args(["-c", "sleep 0.1; exit 7"])
            .spawn()
            .unwrap();
        let t = Instant::now();
        let got = wait_for_within(quick.id() as i32, Duration::from_secs(20)).unwrap();
        assert_eq!(got, Some(ChildEnd::Exited(7)));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }

    /// Every signal whose default action ends a process (all of 1–64 but the eight that
    /// ignore or stop) kills a real child, and comes back with its own number — the real-time
    /// ones (34–64, and glibc's reserved 32–33) included.
    #[test]
    fn every_fatal_signal_comes_back_as_its_number() {
        // Default action ignore (SIGCHLD 17, SIGCONT 18, SIGURG 23, SIGWINCH 28) or stop
        // (SIGSTOP 19, SIGTSTP 20, SIGTTIN 21, SIGTTOU 22): they end nothing.
        let not_fatal = [17, 18, 19, 20, 21, 22, 23, 28];
        for sig in (1..=64).filter(|s| !not_fatal.contains(s)) {
            // SAFETY: between fork and _exit the child makes only raw system calls, as a fork of
            // a threaded process must (see `signals` for why raw).
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
            if pid == 0 {
                unsafe { raise_with_default_action(sig) };
            }
            let end = wait_for(pid).unwrap();
            assert_eq!(end, ChildEnd::Signaled(sig), "signal {sig}");
            assert_eq!((end.code(), end.signal()), (128 + sig, Some(sig)));
        }
    }

    /// Resets every signal to its default action, sends `sig` to ourselves; `_exit(3)` if we
    /// are still alive.
    unsafe fn raise_with_default_action(sig: i32) -> ! {
        crate::signals::reset_to_default();
        libc::syscall(libc::SYS_kill, libc::syscall(libc::SYS_getpid), sig);
        libc::_exit(3)
    }

    #[test]
    fn stop_reports_are_not_ends() {
        // WIFSTOPPED: 0x7f in the low byte, the signal above it.
        assert_eq!(ChildEnd::from_raw((19 << 8) | 0x7f), None);
        assert_eq!(ChildEnd::from_raw(0xffff), None); // WIFCONTINUED
        assert_eq!(ChildEnd::from_raw(7 << 8), Some(ChildEnd::Exited(7)));
        assert_eq!(ChildEnd::from_raw(40), Some(ChildEnd::Signaled(40)));
        assert_eq!(ChildEnd::from_raw(0x80 | 6), Some(ChildEnd::Signaled(6)));
    }
}
