//! Signal dispositions as the kernel keeps them, below the C library: glibc's wrappers refuse to
//! touch 32 and 33 (its own cancellation and setxid signals), and nix's `Signal` has no variants
//! for 32–64, so both would leave those signals as they were inherited.

/// The kernel's `struct sigaction` (x86-64 and aarch64 layout).
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

const SIG_DFL: usize = 0;
/// Size of the kernel's signal set in bytes (64 signals).
const SIGSET_SIZE: usize = 8;

/// Every signal 1–64 back to its default action and unblocked, for a child about to exec (ignored
/// dispositions and the blocked mask survive exec; handlers do not).
///
/// # Safety
/// Async-signal-safe (raw system calls only): callable between fork and exec.
pub unsafe fn reset_to_default() {
    let dfl = KernelSigaction {
        handler: SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            &dfl,
            std::ptr::null_mut::<KernelSigaction>(),
            SIGSET_SIZE,
        );
    }
    let all: u64 = u64::MAX;
    libc::syscall(
        libc::SYS_rt_sigprocmask,
        libc::SIG_UNBLOCK,
        &all,
        std::ptr::null_mut::<u64>(),
        SIGSET_SIZE,
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn reset_clears_inherited_ignores() {
        // SAFETY: the child makes only raw system calls before _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            unsafe {
                libc::signal(libc::SIGUSR1, libc::SIG_IGN);
                super::reset_to_default();
                let mut old: libc::sigaction = std::mem::zeroed();
                libc::sigaction(libc::SIGUSR1, std::ptr::null(), &mut old);
                libc::_exit(if old.sa_sigaction == libc::SIG_DFL {
                    0
                } else {
                    1
                });
            }
        }
        assert_eq!(
            crate::wait::wait_for(pid).unwrap(),
            crate::wait::ChildEnd::Exited(0)
        );
    }
}
