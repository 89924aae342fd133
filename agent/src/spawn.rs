//! Starting a supervisor so that it outlives the agent: its own session, the host's mount
//! namespace (so the node's runtime binary and state are what it sees), and a cgroup outside the
//! agent pod's (runc kills everything in a container's cgroup when the agent container stops).
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::layout::Layout;

/// Which mount namespace supervisors run in.
#[derive(Clone, Debug)]
pub enum HostNamespace {
    /// The agent's own (clusterless use, tests).
    Own,
    /// A namespace file such as `/proc/1/ns/mnt`.
    Path(PathBuf),
    /// The container runtime's: the peer of its CRI socket (SO_PEERCRED), resolved per spawn so a
    /// runtime restart is followed. Works where pid 1 is not inspectable.
    Runtime(PathBuf),
}

impl HostNamespace {
    /// `/proc/<pid>` of a process in the target namespace, if not our own.
    pub fn proc_dir(&self) -> std::io::Result<Option<PathBuf>> {
        match self {
            HostNamespace::Own => Ok(None),
            HostNamespace::Path(p) => Ok(p.parent().and_then(Path::parent).map(Path::to_path_buf)),
            HostNamespace::Runtime(sock) => {
                use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
                let conn = std::os::unix::net::UnixStream::connect(sock)?;
                let cred = getsockopt(&conn, PeerCredentials).map_err(std::io::Error::from)?;
                Ok(Some(PathBuf::from(format!("/proc/{}", cred.pid()))))
            }
        }
    }
}

#[derive(Clone, Debug)]
pub struct SpawnConfig {
    /// Supervisor binary, as a path in the namespace the supervisor runs in.
    pub supervisor_bin: PathBuf,
    pub namespace: HostNamespace,
    /// Cgroup (relative to each hierarchy's root) that supervisors are moved into; None = stay.
    pub cgroup: Option<String>,
    /// Root of the cgroup filesystem; None = the target namespace's `/sys/fs/cgroup` (a
    /// container's own /sys/fs/cgroup shows only its own cgroup).
    pub cgroup_root: Option<PathBuf>,
    /// Caps on all supervisors together (their cgroup), so no supervisor bug or crafted output
    /// can take the node's memory or pids; the processes they run are in their own cgroups.
    pub limits: SupervisorLimits,
}

/// Limits of the supervisors' cgroup; None = unlimited.
#[derive(Clone, Copy, Debug, Default)]
pub struct SupervisorLimits {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
}

impl SupervisorLimits {
    /// The knobs to set in a cgroup dir of either layout: v1 memory/pids hierarchies, or a v2
    /// cgroup whose parent delegates the controllers (absent files = controller not there).
    fn knobs(&self) -> Vec<(&'static str, u64)> {
        let mut k = Vec::new();
        if let Some(m) = self.memory_bytes {
            // Whole pages, as the kernel stores it, so the value reads back equal.
            let m = (m / 4096).max(1) * 4096;
            k.extend([("memory.limit_in_bytes", m), ("memory.max", m)]);
        }
        if let Some(p) = self.pids {
            k.push(("pids.max", p));
        }
        k
    }
}

impl SpawnConfig {
    /// Creates the supervisors' cgroup with its limits, so a misconfiguration shows when the agent
    /// starts rather than at the first process.
    pub fn prepare(&self) -> std::io::Result<()> {
        let ns_proc = self.namespace.proc_dir()?;
        self.cgroup_procs(ns_proc.as_deref()).map(drop)
    }

    /// Creates the supervisor cgroup in every mounted hierarchy (limits set, re-set if someone
    /// removed the cgroup); returns their `cgroup.procs`.
    fn cgroup_procs(&self, ns_proc: Option<&Path>) -> std::io::Result<Vec<PathBuf>> {
        let Some(name) = &self.cgroup else {
            return Ok(Vec::new());
        };
        let cgroup_root = match (&self.cgroup_root, ns_proc) {
            (Some(r), _) => r.clone(),
            (None, Some(p)) => p.join("root/sys/fs/cgroup"),
            (None, None) => PathBuf::from("/sys/fs/cgroup"),
        };
        let mut out = Vec::new();
        let unified = cgroup_root.join("cgroup.procs").exists();
        let roots: Vec<PathBuf> = if unified {
            vec![cgroup_root.clone()]
        } else {
            std::fs::read_dir(&cgroup_root)?
                .flatten()
                .map(|e| e.path())
                // v1: one hierarchy per controller dir; skip symlinked aliases (cpu,cpuacct).
                .filter(|p| p.join("cgroup.procs").exists() && !p.is_symlink())
                .collect()
        };
        for root in roots {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir)?;
            // cpuset needs cpus/mems populated before tasks can join (v1).
            for knob in ["cpuset.cpus", "cpuset.mems"] {
                let (parent, child) = (root.join(knob), dir.join(knob));
                if child.exists()
                    && std::fs::read_to_string(&child)
                        .map(|s| s.trim().is_empty())
                        .unwrap_or(false)
                {
                    if let Ok(v) = std::fs::read_to_string(parent) {
                        let _ = std::fs::write(&child, v.trim());
                    }
                }
            }
            for (knob, v) in self.limits.knobs() {
                let f = dir.join(knob);
                let want = v.to_string();
                match std::fs::read_to_string(&f) {
                    Ok(cur) if cur.trim() == want => {}
                    Ok(_) => std::fs::write(&f, &want).map_err(|e| {
                        std::io::Error::new(
                            e.kind(),
                            format!("setting the supervisors' {} to {want}: {e}", f.display()),
                        )
                    })?,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
            out.push(dir.join("cgroup.procs"));
        }
        Ok(out)
    }
}

/// A supervisor just started: its pid, and a pidfd for its exit (`None` only on a kernel without
/// pidfds, before 5.3).
pub struct Spawned {
    pub pid: u32,
    pub exits: Option<OwnedFd>,
}

pub fn spawn_supervisor(
    cfg: &SpawnConfig,
    layout: &Layout,
    id: &ExecId,
) -> std::io::Result<Spawned> {
    // One at a time with the reaper, until the pidfd is open: a supervisor that ended at once and
    // was reaped first would free its pid, which after the node's pids wrapped can be another
    // process's by the time pidfd_open names it; the start would then wait on, and judge the
    // supervisor by, a stranger's exit. Unreaped, the pid stays the supervisor's (a zombie).
    let _no_reaping = children();
    let pid = spawn(cfg, layout, id, None)?;
    Ok(Spawned {
        pid,
        exits: sandbox_node_protocol::wait::pidfd_open(pid as i32).ok(),
    })
}

/// Held by a supervisor's start until its pidfd is open, and by every reap.
fn children() -> std::sync::MutexGuard<'static, ()> {
    static CHILDREN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    CHILDREN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ends what is left of a lost supervisor's process tree (its cgroup), from the host's view.
pub fn spawn_tree_reaper(cfg: &SpawnConfig, layout: &Layout, id: &ExecId) -> std::io::Result<u32> {
    spawn(
        cfg,
        layout,
        id,
        Some(sandbox_node_protocol::launch::END_TREE),
    )
}

fn spawn(
    cfg: &SpawnConfig,
    layout: &Layout,
    id: &ExecId,
    mode: Option<&str>,
) -> std::io::Result<u32> {
    let ns_proc = cfg.namespace.proc_dir()?;
    let procs: Vec<OwnedFd> = cfg
        .cgroup_procs(ns_proc.as_deref())?
        .iter()
        .map(|p| OpenOptions::new().write(true).open(p).map(OwnedFd::from))
        .collect::<std::io::Result<_>>()?;
    let mntns: Option<OwnedFd> = match &ns_proc {
        Some(p) => Some(File::open(p.join("ns/mnt"))?.into()),
        None => None,
    };
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(layout.proc_dir(id).join("supervisor.log"))?;
    let mut cmd = Command::new(&cfg.supervisor_bin);
    cmd.arg(layout.root())
        .arg(id.as_str())
        .args(mode)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let proc_fds: Vec<i32> = procs.iter().map(|f| f.as_raw_fd()).collect();
    let mnt_fd = mntns.as_ref().map(|f| f.as_raw_fd());
    // SAFETY: runs in the forked child before exec; it only makes async-signal-safe syscalls
    // (setsid, setns, write) on file descriptors opened by the parent and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            for fd in &proc_fds {
                if libc::write(*fd, b"0".as_ptr().cast(), 1) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(fd) = mnt_fd {
                if libc::setns(fd, libc::CLONE_NEWNS) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop((procs, mntns));
    // Not waited on here: supervisors usually outlive this agent; `reap_exited` collects them.
    Ok(child.id())
}

/// The identity of the runtime binary as supervisors will run it (their mount namespace), so a
/// caller can tell when it was replaced.
pub fn runtime_file_id(cfg: &SpawnConfig, bin: &str) -> std::io::Result<FileId> {
    use std::os::unix::fs::MetadataExt;
    let seen = match cfg.namespace.proc_dir()? {
        Some(p) => p.join("root").join(bin.trim_start_matches('/')),
        None => PathBuf::from(bin),
    };
    let m = std::fs::metadata(&seen)?;
    Ok(FileId {
        dev: m.dev(),
        ino: m.ino(),
        mtime: m.mtime(),
    })
}

/// Runs `bin --version` in the supervisors' mount namespace (where the runtime binary's path means
/// what supervisors will run) and returns its stdout. Gives up after 10 s.
pub fn runtime_version(cfg: &SpawnConfig, bin: &str) -> std::io::Result<String> {
    use std::io::Read;
    let ns_proc = cfg.namespace.proc_dir()?;
    let mntns: Option<OwnedFd> = match &ns_proc {
        Some(p) => Some(File::open(p.join("ns/mnt"))?.into()),
        None => None,
    };
    let mut cmd = Command::new(bin);
    cmd.arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mnt_fd = mntns.as_ref().map(|f| f.as_raw_fd());
    // SAFETY: runs in the forked child before exec and only calls setns on a descriptor the
    // parent opened; nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = mnt_fd {
                if libc::setns(fd, libc::CLONE_NEWNS) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    drop(mntns);
    // Its output, not its exit status, is the answer: the agent reaps every exited child of its
    // own (`reap_exited`), so waiting for this one may find it gone (ECHILD). Read until the
    // pipe closes, on a thread so that a runtime that hangs is given up after 10 s.
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = tx.send(stdout.read_to_string(&mut out).map(|_| out));
    });
    let out = rx.recv_timeout(std::time::Duration::from_secs(10));
    if out.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait(); // ECHILD when already reaped: nothing to collect
    match out {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{bin} --version did not answer within 10 s"),
        )),
    }
}

/// A file's identity: replaced or rewritten means a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
    mtime: i64,
}

/// Collects exited supervisors that are our children (the agent never has other children), but
/// none whose pidfd is still being opened ([`spawn_supervisor`]).
pub fn reap_exited() {
    let _no_start_between_fork_and_pidfd = children();
    while let Ok(Some(_)) = sandbox_node_protocol::wait::reap_any() {}
}

/// Installs the supervisor binary under the state dir (content-addressed), so supervisors keep a
/// stable executable in the host's view even after the agent's image is gone.
pub fn install_supervisor(from: &Path, layout: &Layout) -> std::io::Result<PathBuf> {
    use sha2::Digest;
    let bytes = std::fs::read(from)?;
    let digest = sha2::Sha256::digest(&bytes);
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let dest = layout.bin_dir().join(format!("sandbox-supervisor-{hex}"));
    if !dest.exists() {
        let tmp = layout
            .bin_dir()
            .join(format!(".sandbox-supervisor-{hex}.tmp"));
        std::fs::write(&tmp, &bytes)?;
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        std::fs::rename(&tmp, &dest)?;
    }
    Ok(dest)
}
