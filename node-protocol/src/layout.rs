//! The agent's state directory, on a hostPath so it outlives agent pods:
//!
//! ```text
//! <state>/records/<id>.json          current record (atomically replaced by the supervisor)
//! <state>/procs/<id>/launch.json     what to run (written by the agent before the supervisor starts)
//! <state>/procs/<id>/process.json    the OCI process handed to the runtime
//! <state>/procs/<id>/supervisor.json supervisor pid + start time (identity across pid reuse)
//! <state>/procs/<id>/control.sock    stop/signal requests to the supervisor
//! <state>/procs/<id>/runtime.log     the runtime's own log (spawn errors)
//! <state>/procs/<id>/log/*.seg       output ledger segments
//! ```
use std::path::{Path, PathBuf};

use crate::exec_id::ExecId;

/// The host directory of pid files during launches (see [`Layout::launch_pid_file`]).
pub const LAUNCH_DIR: &str = "/run/sandbox-agent";

#[derive(Clone, Debug)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Layout { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn records_dir(&self) -> PathBuf {
        self.root.join("records")
    }

    pub fn procs_dir(&self) -> PathBuf {
        self.root.join("procs")
    }

    pub fn record(&self, id: &ExecId) -> PathBuf {
        self.records_dir().join(format!("{id}.json"))
    }

    pub fn proc_dir(&self, id: &ExecId) -> PathBuf {
        self.procs_dir().join(id.as_str())
    }

    /// A `processes` object's labels and annotations as last changed (the agent's, laid over the
    /// object the supervisor's records carry from the start).
    pub fn object(&self, id: &ExecId) -> PathBuf {
        self.proc_dir(id).join("object.json")
    }

    pub fn launch(&self, id: &ExecId) -> PathBuf {
        self.proc_dir(id).join("launch.json")
    }

    pub fn process_spec(&self, id: &ExecId) -> PathBuf {
        self.proc_dir(id).join("process.json")
    }

    pub fn supervisor(&self, id: &ExecId) -> PathBuf {
        self.proc_dir(id).join("supervisor.json")
    }

    pub fn control(&self, id: &ExecId) -> PathBuf {
        self.proc_dir(id).join("control.sock")
    }

    pub fn runtime_log(&self, id: &ExecId) -> PathBuf {
        self.proc_dir(id).join("runtime.log")
    }

    /// The process tree's cgroup directories, while it exists.
    pub fn cgroup(&self, id: &ExecId) -> PathBuf {
        self.proc_dir(id).join("cgroup.json")
    }

    pub fn pid_file(&self, id: &ExecId) -> PathBuf {
        self.proc_dir(id).join("pid")
    }

    /// Where the runtime writes the process's pid during the launch: the host's /run (a tmpfs
    /// nobody's output fills), so a start on a state dir that other writers filled meanwhile
    /// does not fail on a pid file it cannot create; the state dir when /run is not usable.
    pub fn launch_pid_file(&self, id: &ExecId) -> PathBuf {
        match launch_dir() {
            Some(run) => run.join(format!("{}.pid", id.as_str())),
            None => self.pid_file(id),
        }
    }

    /// The socket the runtime hands a terminal's master over (`runc exec --console-socket`),
    /// during the launch: under /run like the pid file, where the path stays short enough for a
    /// socket (the runtime connects to it by path, so the long-path detour cannot serve).
    pub fn console_socket(&self, id: &ExecId) -> PathBuf {
        match launch_dir() {
            Some(run) => run.join(format!("{}.tty", id.as_str())),
            None => self.proc_dir(id).join("console.sock"),
        }
    }

    pub fn ledger(&self, id: &ExecId) -> PathBuf {
        self.proc_dir(id).join("log")
    }

    pub fn bin_dir(&self) -> PathBuf {
        self.root.join("bin")
    }

    /// Creates the tree. The root is 0700 (also when it existed with a wider mode): records and
    /// launch specs hold the container's environment (Secret values included), ledgers the
    /// tenants' output; only root on the node may read them.
    pub fn ensure(&self) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(self.records_dir())?;
        std::fs::create_dir_all(self.procs_dir())?;
        std::fs::create_dir_all(self.bin_dir())?;
        std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700))
    }
}

/// The host's /run directory for launch files, when it is usable.
fn launch_dir() -> Option<&'static Path> {
    let run = Path::new(LAUNCH_DIR);
    let usable = std::fs::create_dir_all(run).is_ok() && {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(run, std::fs::Permissions::from_mode(0o700)).is_ok()
    };
    usable.then_some(run)
}

/// A unix socket's path as `bind`/`connect` can take it. `sun_path` holds 108 bytes, but a
/// socket's real path is the state dir (any length an admin chose) plus a process dir: past the
/// limit it is reached through its open directory, `/proc/self/fd/<dirfd>/<name>`, which the
/// kernel resolves like the directory itself. Keep the value alive until the call returns.
pub struct SocketPath {
    path: PathBuf,
    _dir: Option<std::os::fd::OwnedFd>,
}

/// Longest path used as is (sun_path is 108 bytes with its terminating NUL).
const SUN_PATH_MAX: usize = 107;

impl SocketPath {
    pub fn new(sock: &Path) -> std::io::Result<Self> {
        use std::os::unix::ffi::OsStrExt;
        if sock.as_os_str().as_bytes().len() <= SUN_PATH_MAX {
            return Ok(SocketPath {
                path: sock.to_path_buf(),
                _dir: None,
            });
        }
        let (Some(dir), Some(name)) = (sock.parent(), sock.file_name()) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("socket path {}", sock.display()),
            ));
        };
        let fd = nix::fcntl::open(
            dir,
            nix::fcntl::OFlag::O_PATH
                | nix::fcntl::OFlag::O_DIRECTORY
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(std::io::Error::from)?;
        use std::os::fd::AsRawFd;
        let path = Path::new("/proc/self/fd")
            .join(fd.as_raw_fd().to_string())
            .join(name);
        Ok(SocketPath {
            path,
            _dir: Some(fd),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod socket_path_tests {
    use super::SocketPath;
    use std::os::unix::net::{UnixListener, UnixStream};

    /// A socket deeper than sun_path allows is bound and reached all the same.
    #[test]
    fn long_socket_paths_bind_and_connect() {
        let base = std::env::temp_dir().join(format!("spo-sock-{}", std::process::id()));
        let dir = base.join("d".repeat(60)).join("e".repeat(60));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("control.sock");
        assert!(sock.as_os_str().len() > 108);
        assert!(
            UnixListener::bind(&sock).is_err(),
            "the limit this works around"
        );
        let at = SocketPath::new(&sock).unwrap();
        let listener = UnixListener::bind(at.path()).unwrap();
        drop(at);
        assert!(sock.exists(), "bound at its real path");
        let at = SocketPath::new(&sock).unwrap();
        let _conn = UnixStream::connect(at.path()).unwrap();
        listener.accept().unwrap();
        let short = SocketPath::new(&base.join("s.sock")).unwrap();
        assert_eq!(short.path(), base.join("s.sock"));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
