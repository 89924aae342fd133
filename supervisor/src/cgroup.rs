//! The process's own cgroup: one per SandboxProcess, a child of the target container's cgroup in
//! every hierarchy the container is in, created before the process starts (`runc exec --cgroup`),
//! so every descendant is in it however it forks, setsids or daemonizes.
//!
//! - Membership and the end of the tree: cgroup v2 where the node has it (pure v2, or the hybrid
//!   layout's controller-less `/sys/fs/cgroup/unified`): `cgroup.events` says `populated 0` and
//!   can be watched with inotify; on pure v1, `cgroup.procs` is read.
//! - Kill: `cgroup.kill` (v2, Linux ≥ 5.14); otherwise freeze, SIGKILL every member, thaw.
//! - Limits and usage: whichever hierarchy has the file (v1 controllers on v1/hybrid nodes,
//!   `memory.max`/`cpu.max`/`pids.max` on v2).
//!
//! Nothing here touches a cgroup the agent did not create, except reading the container's limits
//! and, on pure v2, enabling a controller in the container cgroup's `subtree_control` (the only
//! way v2 allows a limit on a child).
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandbox_wire::wire::{ResourceLimits, Usage};
use serde::{Deserialize, Serialize};

/// CFS period for CPU limits, as the kubelet uses.
const CPU_PERIOD_US: u64 = 100_000;

/// Why limits could not be applied; `field` as in the SandboxProcess spec.
#[derive(Debug, PartialEq, Eq)]
pub struct LimitError {
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for LimitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessCgroup {
    /// The sub-cgroup name, relative to the container's cgroup (runc's `--cgroup` argument).
    pub name: String,
    /// One directory per hierarchy: key `""` is cgroup v2, others the v1 controllers.
    pub dirs: Vec<(String, PathBuf)>,
}

/// The container's cgroup directory in every hierarchy, keyed like runc's `cgroup_paths`.
/// runc's own state (`<root>/<id>/state.json`) is the exact set runc will join; other runtimes
/// are read from the container init's `/proc/<pid>/cgroup` and the mount table.
pub fn container_dirs(
    runtime_root: &str,
    container_id: &str,
    container_pid: i32,
) -> io::Result<BTreeMap<String, PathBuf>> {
    let state = Path::new(runtime_root)
        .join(container_id)
        .join("state.json");
    if let Ok(text) = fs::read(&state) {
        #[derive(Deserialize)]
        struct State {
            #[serde(default)]
            cgroup_paths: BTreeMap<String, PathBuf>,
        }
        if let Ok(s) = serde_json::from_slice::<State>(&text) {
            if !s.cgroup_paths.is_empty() {
                return Ok(s.cgroup_paths);
            }
        }
    }
    let membership = fs::read_to_string(format!("/proc/{container_pid}/cgroup"))?;
    let mounts = fs::read_to_string("/proc/self/mountinfo")?;
    Ok(from_proc(&membership, &mounts))
}

/// `/proc/<pid>/cgroup` joined with `/proc/self/mountinfo`: hierarchy key → directory.
fn from_proc(membership: &str, mountinfo: &str) -> BTreeMap<String, PathBuf> {
    // (key, mount root, mount point) for every cgroup mount.
    let mut mounts: Vec<(String, String, PathBuf)> = Vec::new();
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        if pre.len() < 5 || post.len() < 3 {
            continue;
        }
        let key = match post[0] {
            "cgroup2" => String::new(),
            "cgroup" => post[2]
                .split(',')
                .filter(|o| !matches!(*o, "rw" | "ro" | "xattr" | "noprefix") && !o.contains('='))
                .chain(post[2].split(',').filter(|o| o.starts_with("name=")))
                .collect::<Vec<_>>()
                .join(","),
            _ => continue,
        };
        mounts.push((key, pre[3].to_string(), PathBuf::from(pre[4])));
    }
    let mut out = BTreeMap::new();
    for line in membership.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let Some((_, root, point)) = mounts.iter().find(|(k, _, _)| k == ctrls) else {
            continue;
        };
        let rel = path.strip_prefix(root.as_str()).unwrap_or(path);
        let dir = point.join(rel.trim_start_matches('/'));
        for key in if ctrls.is_empty() {
            vec![String::new()]
        } else {
            ctrls.split(',').map(str::to_string).collect()
        } {
            out.insert(key, dir.clone());
        }
    }
    out
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn write(p: &Path, v: &str) -> io::Result<()> {
    fs::write(p, v).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
}

/// A v1 "unlimited" is a huge number or -1; v2 says "max".
fn limit_value(s: &str) -> Option<u64> {
    match s.parse::<i64>() {
        Ok(v) if (0..(1 << 62)).contains(&v) => Some(v as u64),
        _ => None,
    }
}

impl ProcessCgroup {
    /// Creates `name` under each of the container's directories. An existing empty one (left by a
    /// crashed launch of the same id) is reused; one with members is refused.
    pub fn create(container: &BTreeMap<String, PathBuf>, name: &str) -> io::Result<Self> {
        let mut dirs: Vec<(String, PathBuf)> = Vec::new();
        for (key, parent) in container {
            if !parent.is_dir() || dirs.iter().any(|(_, d)| d.parent() == Some(parent)) {
                continue; // comounted controllers share one directory
            }
            let dir = parent.join(name);
            match fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("creating cgroup {}: {e}", dir.display()),
                    ))
                }
            }
            // A new v1 cpuset has no CPUs or memory nodes: joining it fails until they are set.
            for f in ["cpuset.cpus", "cpuset.mems"] {
                if let (true, Some(v)) = (dir.join(f).exists(), read_trim(&parent.join(f))) {
                    if read_trim(&dir.join(f)).is_none_or(|c| c.is_empty()) {
                        write(&dir.join(f), &v)?;
                    }
                }
            }
            dirs.push((key.clone(), dir));
        }
        if dirs.is_empty() {
            return Err(io::Error::other(
                "the container has no cgroup directory on this node",
            ));
        }
        let cg = ProcessCgroup {
            name: name.to_string(),
            dirs,
        };
        if !cg.is_empty() {
            return Err(io::Error::other(format!(
                "cgroup {name} already has members"
            )));
        }
        Ok(cg)
    }

    /// The first of our directories that has `file` (the hierarchy that implements it).
    fn with(&self, file: &str) -> Option<PathBuf> {
        self.dirs
            .iter()
            .map(|(_, d)| d.join(file))
            .find(|p| p.exists())
    }

    fn v2(&self) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(k, _)| k.is_empty())
            .map(|(_, d)| d.as_path())
    }

    /// `cgroup.events` to watch for the end of the tree (v2 only).
    pub fn events_file(&self) -> Option<PathBuf> {
        self.v2()
            .map(|d| d.join("cgroup.events"))
            .filter(|p| p.exists())
    }

    /// Applies `limits`, refusing any above the container's own.
    pub fn apply(&self, limits: &ResourceLimits) -> Result<(), LimitError> {
        if let Some(bytes) = limits.memory_bytes {
            self.set_limit(
                "resources.limits.memory",
                "memory",
                &["memory.limit_in_bytes", "memory.max"],
                bytes,
                " bytes",
            )?;
            // No swap beyond the limit where the node accounts it (as the kubelet does).
            if let Some(p) = self.with("memory.memsw.limit_in_bytes") {
                let _ = write(&p, &bytes.to_string());
            }
            if let Some(p) = self.with("memory.swap.max") {
                let _ = write(&p, "0");
            }
        }
        if let Some(millis) = limits.cpu_millis {
            let quota = millis * CPU_PERIOD_US / 1000;
            if let Some(p) = self.with("cpu.cfs_quota_us") {
                let parent = p.parent().and_then(Path::parent).unwrap_or(Path::new("/"));
                let own = read_trim(&parent.join("cpu.cfs_quota_us")).and_then(|q| limit_value(&q));
                let period = read_trim(&parent.join("cpu.cfs_period_us"))
                    .and_then(|q| limit_value(&q))
                    .unwrap_or(CPU_PERIOD_US);
                check_above(
                    "resources.limits.cpu",
                    millis,
                    own.map(|q| q * 1000 / period.max(1)),
                    "m",
                )?;
                let dir = p.parent().unwrap_or(Path::new("/"));
                write(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())
                    .and_then(|_| write(&p, &quota.to_string()))
                    .map_err(|e| limit_failed("resources.limits.cpu", e))?;
            } else {
                let p = self.v2_controller_file("resources.limits.cpu", "cpu", "cpu.max")?;
                let parent = p.parent().and_then(Path::parent).unwrap_or(Path::new("/"));
                let own = read_trim(&parent.join("cpu.max")).and_then(|m| {
                    let mut it = m.split_whitespace();
                    let q = limit_value(it.next()?)?;
                    let period = limit_value(it.next()?)?;
                    Some(q * 1000 / period.max(1))
                });
                check_above("resources.limits.cpu", millis, own, "m")?;
                write(&p, &format!("{quota} {CPU_PERIOD_US}"))
                    .map_err(|e| limit_failed("resources.limits.cpu", e))?;
            }
        }
        if let Some(n) = limits.pids {
            self.set_limit("resources.limits.pids", "pids", &["pids.max"], n, "")?;
        }
        Ok(())
    }

    /// Writes `value` into the first of `files` (v1 name first, v2 name last) the node has,
    /// after checking it against the container's own value of that file.
    fn set_limit(
        &self,
        field: &'static str,
        controller: &str,
        files: &[&str],
        value: u64,
        unit: &str,
    ) -> Result<(), LimitError> {
        let p = match files.iter().find_map(|f| self.with(f)) {
            Some(p) => p,
            None => {
                let v2_file = files.last().copied().unwrap_or_default();
                self.v2_controller_file(field, controller, v2_file)?
            }
        };
        let file = p.file_name().map(|f| f.to_owned()).unwrap_or_default();
        let own = p
            .parent()
            .and_then(Path::parent)
            .and_then(|parent| read_trim(&parent.join(&file)))
            .and_then(|s| limit_value(&s));
        check_above(field, value, own, unit)?;
        write(&p, &value.to_string()).map_err(|e| limit_failed(field, e))
    }

    /// On v2, a limit needs the controller enabled in the parent's `subtree_control`.
    fn v2_controller_file(
        &self,
        field: &'static str,
        controller: &str,
        file: &str,
    ) -> Result<PathBuf, LimitError> {
        let Some(dir) = self.v2() else {
            return Err(LimitError {
                field,
                message: format!("this node has no {controller} cgroup controller"),
            });
        };
        let parent = dir.parent().unwrap_or(Path::new("/"));
        if let Err(e) = write(
            &parent.join("cgroup.subtree_control"),
            &format!("+{controller}"),
        ) {
            return Err(LimitError {
                field,
                message: format!(
                    "the container's cgroup cannot delegate the {controller} controller to a \
                     child on this cgroup v2 node (the container's own processes are in it): {e}"
                ),
            });
        }
        let p = dir.join(file);
        if p.exists() {
            Ok(p)
        } else {
            Err(LimitError {
                field,
                message: format!("this node has no {controller} cgroup controller"),
            })
        }
    }

    /// No process left in the tree.
    pub fn is_empty(&self) -> bool {
        if let Some(ev) = self.events_file() {
            if let Some(text) = read_trim(&ev) {
                return !text.lines().any(|l| l == "populated 1");
            }
        }
        self.members().is_empty()
    }

    /// Host pids of the tree's processes.
    pub fn members(&self) -> Vec<i32> {
        let dir = self.v2().unwrap_or(&self.dirs[0].1);
        fs::read_to_string(dir.join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Sends `sig` to every member, again to any forked meanwhile (bounded rounds).
    pub fn signal_all(&self, sig: i32) -> usize {
        let mut sent = std::collections::HashSet::new();
        for _ in 0..5 {
            let fresh: Vec<i32> = self
                .members()
                .into_iter()
                .filter(|p| *p > 1 && !sent.contains(p))
                .collect();
            if fresh.is_empty() {
                break;
            }
            for pid in fresh {
                // SAFETY: kill(2) on a single positive pid > 1 taken from our own cgroup.
                unsafe { libc::kill(pid, sig) };
                sent.insert(pid);
            }
        }
        sent.len()
    }

    /// SIGKILLs the whole tree at once: `cgroup.kill` where the kernel has it, else freeze,
    /// SIGKILL every member, thaw (so nothing forks in between).
    pub fn kill_all(&self) -> io::Result<()> {
        if let Some(k) = self.with("cgroup.kill") {
            return write(&k, "1");
        }
        let freezer = self
            .with("freezer.state")
            .map(|p| (p, "FROZEN", "THAWED"))
            .or_else(|| self.with("cgroup.freeze").map(|p| (p, "1", "0")));
        if let Some((p, frozen, _)) = &freezer {
            write(p, frozen)?;
            let until = Instant::now() + Duration::from_millis(500);
            while Instant::now() < until {
                let state = read_trim(p).unwrap_or_default();
                let done = if p.ends_with("freezer.state") {
                    state == "FROZEN"
                } else {
                    self.events_file()
                        .and_then(|e| read_trim(&e))
                        .is_some_and(|t| t.lines().any(|l| l == "frozen 1"))
                };
                if done {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.signal_all(libc::SIGKILL);
        if let Some((p, _, thawed)) = freezer {
            write(&p, thawed)?;
        }
        Ok(())
    }

    /// Peak memory and CPU time so far (zeros where the node does not account them).
    pub fn usage(&self) -> Usage {
        let memory_peak_bytes = ["memory.max_usage_in_bytes", "memory.peak"]
            .iter()
            .find_map(|f| self.with(f).and_then(|p| read_trim(&p)))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let cpu_nanos = self
            .with("cpuacct.usage")
            .and_then(|p| read_trim(&p))
            .and_then(|s| s.parse().ok())
            .or_else(|| {
                let stat = read_trim(&self.with("cpu.stat")?)?;
                let usec: u64 = stat
                    .lines()
                    .find_map(|l| l.strip_prefix("usage_usec "))?
                    .trim()
                    .parse()
                    .ok()?;
                Some(usec * 1000)
            })
            .unwrap_or(0);
        Usage {
            memory_peak_bytes,
            cpu_nanos,
        }
    }

    /// OOM kills inside the tree (v1 `memory.oom_control`, v2 `memory.events`).
    pub fn oom_kills(&self) -> Option<u64> {
        ["memory.oom_control", "memory.events"]
            .iter()
            .find_map(|f| self.with(f).and_then(|p| read_trim(&p)))?
            .lines()
            .find_map(|l| {
                l.strip_prefix("oom_kill ")
                    .and_then(|n| n.trim().parse().ok())
            })
    }

    /// Removes every directory (retrying briefly: v1 releases a cgroup a moment after its last
    /// task is reaped). Returns the ones that could not be removed.
    pub fn remove(&self) -> Vec<PathBuf> {
        let until = Instant::now() + Duration::from_secs(2);
        let mut left: Vec<PathBuf> = self.dirs.iter().map(|(_, d)| d.clone()).collect();
        loop {
            left.retain(|d| match fs::remove_dir(d) {
                Ok(()) => false,
                Err(e) => e.kind() != io::ErrorKind::NotFound,
            });
            if left.is_empty() || Instant::now() >= until {
                return left;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn check_above(
    field: &'static str,
    value: u64,
    own: Option<u64>,
    unit: &str,
) -> Result<(), LimitError> {
    match own {
        Some(own) if value > own => Err(LimitError {
            field,
            message: format!("{value}{unit} is above the container's own limit ({own}{unit})"),
        }),
        _ => Ok(()),
    }
}

fn limit_failed(field: &'static str, e: io::Error) -> LimitError {
    LimitError {
        field,
        message: format!("applying it failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hybrid_layout_from_proc() {
        let membership = "9:name=systemd:/kubepods/pod1/c1\n4:memory:/kubepods/pod1/c1\n1:cpu,cpuacct:/kubepods/pod1/c1\n0::/kubepods/pod1/c1\n";
        let mounts = "\
30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
31 25 0:27 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
33 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
40 25 0:30 / /proc rw - proc proc rw
";
        let m = from_proc(membership, mounts);
        assert_eq!(
            m[""],
            PathBuf::from("/sys/fs/cgroup/unified/kubepods/pod1/c1")
        );
        assert_eq!(
            m["memory"],
            PathBuf::from("/sys/fs/cgroup/memory/kubepods/pod1/c1")
        );
        assert_eq!(
            m["cpu"],
            PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1")
        );
        assert_eq!(m["cpuacct"], m["cpu"]);
        assert_eq!(
            m["name=systemd"],
            PathBuf::from("/sys/fs/cgroup/systemd/kubepods/pod1/c1")
        );
    }

    #[test]
    fn pure_v2_with_a_namespaced_mount_root() {
        let m = from_proc(
            "0::/kubepods.slice/pod2/c2\n",
            "28 22 0:25 /kubepods.slice /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        assert_eq!(m.len(), 1);
        assert_eq!(m[""], PathBuf::from("/sys/fs/cgroup/pod2/c2"));
    }

    #[test]
    fn unlimited_values() {
        assert_eq!(limit_value("9223372036854771712"), None);
        assert_eq!(limit_value("-1"), None);
        assert_eq!(limit_value("max"), None);
        assert_eq!(limit_value("33554432"), Some(33554432));
        assert!(check_above("f", 2, Some(1), "").is_err());
        assert!(check_above("f", 1, Some(1), "").is_ok());
        assert!(check_above("f", 5, None, "").is_ok());
    }
}
