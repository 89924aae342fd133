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
