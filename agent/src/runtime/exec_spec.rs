//! The exec'd process: the container's own OCI `process` with only args, env and cwd replaced,
//! so user, capabilities, no_new_privs, AppArmor/SELinux labels and rlimits are the container's
//! (seccomp, cgroups and namespaces come from the container itself when the runtime execs),
//! except the user and capabilities `spec.securityContext` lowers to (see [`super::user`]).
//! Also the pre-launch checks that turn common mistakes into precise errors.
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use sandbox_wire::wire::{EnvVar, StartRequest};
use sandbox_wire::wire_rules::Valid;
use serde_json::{json, Value};

use crate::error::AgentError;

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Container env with the overlay applied: same name replaces in place, new names append.
pub fn merge_env(base: &[String], overlay: &[EnvVar]) -> Vec<String> {
    let mut out: Vec<String> = base.to_vec();
    for e in overlay {
        let prefix = format!("{}=", e.name);
        let kv = format!("{}={}", e.name, e.value);
        match out.iter_mut().find(|s| s.starts_with(&prefix)) {
            Some(slot) => *slot = kv,
            None => out.push(kv),
        }
    }
    out
}

/// Builds the OCI process for the exec from the container's spec.
/// Takes only a request that passed the door (`sandbox_wire::wire_rules::start`): nothing is checked
/// twice.
pub fn build_process(
    container_spec: &Value,
    req: &Valid<StartRequest>,
) -> Result<Value, AgentError> {
    let mut process = container_spec
        .get("process")
        .cloned()
        .unwrap_or_else(|| json!({}));
    // First: a refused user must stop the start before anything else is judged.
    if let (Some(sc), true) = (&req.security_context, process.is_object()) {
        super::user::apply(&mut process, sc)?;
    }
    let obj = process
        .as_object_mut()
        .ok_or_else(|| AgentError::Internal("container spec has no process object".into()))?;
    let base_env: Vec<String> = obj
        .get("env")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let cwd = match &req.working_dir {
        Some(d) => d.clone(),
        None => obj
            .get("cwd")
            .and_then(|c| c.as_str())
            .filter(|c| !c.is_empty())
            .unwrap_or("/")
            .to_string(),
    };
    if !cwd.starts_with('/') {
        return Err(AgentError::InvalidProcessCwd {
            cwd,
            reason: "must be an absolute path".into(),
        });
    }
    if under_proc(&cwd) {
        return Err(AgentError::InvalidProcessCwd {
            cwd,
            reason: MAGIC_LINKS.into(),
        });
    }
    let mut env = merge_env(&base_env, &req.env);
    obj.insert("args".into(), json!(req.command));
    obj.insert("cwd".into(), json!(cwd));
    obj.remove("consoleSize");
    obj.insert("terminal".into(), json!(req.tty.is_some()));
    if let Some(size) = req.tty {
        // The runtime makes the terminal this size before the process runs.
        obj.insert(
            "consoleSize".into(),
            json!({"height": size.rows, "width": size.cols}),
        );
        // What a terminal program needs to know to draw: the container's own TERM, else xterm.
        if !env.iter().any(|e| e.starts_with("TERM=")) {
            env.push("TERM=xterm".into());
        }
    }
    obj.insert("env".into(), json!(env));
    // Pod-level "user" may have been given as a name only; runc needs numeric ids (present in
    // specs produced by CRI runtimes), so leave it untouched.
    Ok(process)
}

const MAGIC_LINKS: &str = "procfs paths are not allowed: /proc holds magic links (/proc/self/cwd, /proc/N/root, ...) that point outside the container's filesystem";

/// Whether an absolute path names `/proc` or something under it, `.` and `..` applied.
fn under_proc(path: &str) -> bool {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts.first() == Some(&"proc")
}

pub fn process_env_path(process: &Value) -> String {
    process["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .find_map(|s| s.strip_prefix("PATH="))
        .unwrap_or(DEFAULT_PATH)
        .to_string()
}

fn open_in_root(root: &std::os::fd::OwnedFd, path: &str) -> nix::Result<std::fs::File> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    openat2(root, path, how).map(std::fs::File::from)
}

/// Most symlinks followed in one path (the kernel's MAXSYMLINKS).
const MAX_LINKS: usize = 40;

/// The path that `path` names inside `root`, as a path without symlinks: symlinks are followed
/// as the container sees them (absolute ones from its root, `..` never above it), each step
/// opened with no symlink or magic link in it. runc is handed this path, so the directory it
/// enters is the one checked here, whatever symlinks the tenant placed (CVE-2024-21626 class).
fn resolve_in_root(root: &std::os::fd::OwnedFd, path: &str) -> nix::Result<String> {
    use nix::errno::Errno;
    use nix::sys::stat::{fstatat, SFlag};
    use std::collections::VecDeque;
    use std::os::unix::ffi::OsStrExt;

    let parts = |p: &[u8]| -> VecDeque<Vec<u8>> {
        p.split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    };
    let mut done: Vec<Vec<u8>> = Vec::new();
    let mut todo = parts(path.as_bytes());
    let mut links = 0;
    while let Some(c) = todo.pop_front() {
        match c.as_slice() {
            b"." => continue,
            b".." => {
                done.pop();
                continue;
            }
            b"proc" if done.is_empty() => {
                // Refused by the caller (magic links); the rest is not resolved from here.
                done.push(c);
                done.extend(todo.drain(..).filter(|c| c != b"." && c != b".."));
                break;
            }
            _ => {}
        }
        let prefix = format!("/{}", String::from_utf8_lossy(&done.join(&b'/')));
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_SYMLINKS);
        let parent = openat2(root, prefix.as_str(), how)?;
        let name = std::ffi::OsStr::from_bytes(&c);
        let st = fstatat(&parent, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK {
            links += 1;
            if links > MAX_LINKS {
                return Err(Errno::ELOOP);
            }
            let target = nix::fcntl::readlinkat(&parent, name)?;
            let target = target.as_bytes();
            if target.starts_with(b"/") {
                done.clear();
            }
            for t in parts(target).into_iter().rev() {
                todo.push_front(t);
            }
        } else {
            done.push(c);
        }
    }
    let out = format!("/{}", String::from_utf8_lossy(&done.join(&b'/')));
    // Names that are not UTF-8 cannot be handed to runc (JSON) as they are.
    if out.as_bytes() != [b"/".as_slice(), &done.join(&b'/')].concat() {
        return Err(Errno::EILSEQ);
    }
    Ok(out)
}

/// Checks cwd and the executable inside the container's root filesystem (`root` is
/// `/proc/<init pid>/root`). Paths are resolved with the container's root as "/" so a tenant's
/// symlink cannot point the host-root agent at host files. Returns the working directory
/// resolved to a path without symlinks, which is what runc must be given.
pub fn precheck_in_root(root: &Path, process: &Value) -> Result<String, AgentError> {
    let rootfd: std::os::fd::OwnedFd = std::fs::File::open(root)
        .map_err(|e| {
            AgentError::Internal(format!("opening container root {}: {e}", root.display()))
        })?
        .into();
    let asked = process["cwd"].as_str().unwrap_or("/");
    let cwd_err = |reason: String| AgentError::InvalidProcessCwd {
        cwd: asked.into(),
        reason,
    };
    let cwd = match resolve_in_root(&rootfd, asked) {
        Ok(c) => c,
        Err(nix::errno::Errno::ELOOP) => {
            return Err(cwd_err("too many levels of symbolic links".into()))
        }
        Err(nix::errno::Errno::EILSEQ) => {
            return Err(cwd_err("the resolved path is not valid UTF-8".into()))
        }
        Err(e) => return Err(cwd_err(e.desc().into())),
    };
    if under_proc(&cwd) {
        return Err(cwd_err(if cwd == asked {
            MAGIC_LINKS.into()
        } else {
            format!("resolves to {cwd}: {MAGIC_LINKS}")
        }));
    }
    let cwd = cwd.as_str();
    match open_in_root(&rootfd, cwd).map(|f| f.metadata()) {
        Ok(Ok(m)) if m.is_dir() => {}
        Ok(Ok(_)) => return Err(cwd_err("not a directory".into())),
        Ok(Err(e)) => return Err(cwd_err(e.to_string())),
        // RESOLVE_NO_MAGICLINKS: a symlink to a procfs magic link, or a symlink loop.
        Err(nix::errno::Errno::ELOOP) => {
            return Err(cwd_err("the path goes through a magic link or a symlink loop; magic links (procfs) are not allowed".into()))
        }
        Err(e) => return Err(cwd_err(e.desc().into())),
    }
    let argv0 = process["args"][0].as_str().unwrap_or_default();
    let spawn_err = |reason: String| AgentError::ProcessSpawnFailed {
        argv0: argv0.to_string(),
        reason,
    };
    let check = |path: &str| -> Result<(), String> {
        let f = open_in_root(&rootfd, path).map_err(|e| e.desc().to_string())?;
        let m = f.metadata().map_err(|e| e.to_string())?;
        if m.is_dir() {
            return Err("is a directory".into());
        }
        if m.permissions().mode() & 0o111 == 0 {
            return Err("permission denied (not executable)".into());
        }
        Ok(())
    };
    if argv0.contains('/') {
        let full = if argv0.starts_with('/') {
            argv0.to_string()
        } else {
            format!("{cwd}/{argv0}")
        };
        return check(&full).map(|()| cwd.to_string()).map_err(spawn_err);
    }
    let mut last = None;
    for dir in process_env_path(process)
        .split(':')
        .filter(|d| !d.is_empty())
    {
        match check(&format!("{dir}/{argv0}")) {
            Ok(()) => return Ok(cwd.to_string()),
            Err(e) if e.contains("No such file") => {}
            Err(e) => last = Some(e),
        }
    }
    Err(spawn_err(match last {
        Some(e) => e,
        None => "executable file not found in $PATH".into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(env: Vec<EnvVar>) -> StartRequest {
        serde_json::from_value(json!({
            "execId": "x", "podUid": "p", "container": "c", "command": ["env"],
            "env": env
        }))
        .unwrap()
    }

    fn valid(r: StartRequest) -> Valid<StartRequest> {
        sandbox_wire::wire_rules::start(r).unwrap()
    }

    /// What the agent's door answers for a request.
    fn door(r: StartRequest) -> AgentError {
        sandbox_wire::wire_rules::start(r).unwrap_err().into()
    }

    #[test]
    fn overlay_replaces_and_appends() {
        let spec = json!({"process": {"args": ["sleep"], "env": ["PATH=/bin", "A=1"], "cwd": "/srv",
            "user": {"uid": 1000, "gid": 1000}, "capabilities": {"bounding": []}, "terminal": true}});
        let p = build_process(
            &spec,
            &valid(req(vec![
                EnvVar {
                    name: "A".into(),
                    value: "2".into(),
                },
                EnvVar {
                    name: "B".into(),
                    value: "x=y".into(),
                },
            ])),
        )
        .unwrap();
        assert_eq!(p["env"], json!(["PATH=/bin", "A=2", "B=x=y"]));
        assert_eq!(p["cwd"], "/srv");
        assert_eq!(p["terminal"], false);
        assert_eq!(p["user"]["uid"], 1000, "container user kept");
        assert_eq!(p["args"], json!(["env"]));
    }

    #[test]
    fn a_tty_gets_a_terminal_its_size_and_a_term() {
        let spec = json!({"process": {"args": ["sh"], "env": ["PATH=/bin"], "cwd": "/",
            "consoleSize": {"height": 1, "width": 1}}});
        let mut r = req(vec![]);
        r.stdin = true;
        r.tty = Some(sandbox_wire::wire::TerminalSize {
            rows: 30,
            cols: 100,
        });
        let p = build_process(&spec, &valid(r.clone())).unwrap();
        assert_eq!(p["terminal"], true);
        assert_eq!(p["consoleSize"], json!({"height": 30, "width": 100}));
        assert_eq!(p["env"], json!(["PATH=/bin", "TERM=xterm"]));
        // The container's TERM (or the spec's) stands.
        r.env.push(EnvVar {
            name: "TERM".into(),
            value: "vt100".into(),
        });
        let p = build_process(&spec, &valid(r)).unwrap();
        assert_eq!(p["env"], json!(["PATH=/bin", "TERM=vt100"]));
        // Without a tty: no terminal, no size, no TERM added.
        let p = build_process(&spec, &valid(req(vec![]))).unwrap();
        assert_eq!(p["terminal"], false);
        assert!(p.get("consoleSize").is_none());
        assert_eq!(p["env"], json!(["PATH=/bin"]));
    }

    #[test]
    fn bad_env_names_the_entry() {
        for (name, frag) in [("", "env[0]"), ("A=B", "'='")] {
            let err = door(req(vec![EnvVar {
                name: name.into(),
                value: "v".into(),
            }]));
            assert_eq!(err.http_status(), 400);
            assert_eq!(
                err.code(),
                sandbox_wire::wire::ErrorCode::InvalidProcessEnvironment
            );
            assert!(err.to_string().contains(frag), "{err}");
        }
    }

    #[test]
    fn procfs_cwd_is_refused_as_magic_links() {
        for cwd in [
            "/proc",
            "/proc/self/cwd",
            "/proc/1/root",
            "/tmp/../proc/self",
            "//proc/./1",
        ] {
            let mut r = req(vec![]);
            r.working_dir = Some(cwd.into());
            let err = build_process(&json!({"process": {}}), &valid(r)).unwrap_err();
            assert_eq!(err.code(), sandbox_wire::wire::ErrorCode::InvalidProcessCwd);
            assert!(err.to_string().contains("magic links"), "{cwd}: {err}");
        }
        for fine in ["/procs", "/srv/proc", "/"] {
            let mut r = req(vec![]);
            r.working_dir = Some(fine.into());
            assert!(
                build_process(&json!({"process": {}}), &valid(r)).is_ok(),
                "{fine}"
            );
        }
    }

    #[test]
    fn relative_cwd_rejected() {
        let mut r = req(vec![]);
        r.working_dir = Some("tmp".into());
        let err = door(r);
        assert_eq!(err.code(), sandbox_wire::wire::ErrorCode::InvalidProcessCwd);
        assert_eq!(err.to_string(), "spec.workingDir: must be an absolute path");
    }

    #[test]
    fn precheck_resolves_inside_root() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("bin")).unwrap();
        std::fs::create_dir_all(root.path().join("work")).unwrap();
        let exe = root.path().join("bin/tool");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(root.path().join("bin/data"), "x").unwrap();
        // An absolute symlink must resolve inside the root, not on the host.
        std::os::unix::fs::symlink("/etc", root.path().join("work/etc")).unwrap();
        let p = |args: &str, cwd: &str| json!({"args": [args], "cwd": cwd, "env": ["PATH=/bin"]});
        assert!(precheck_in_root(root.path(), &p("tool", "/work")).is_ok());
        assert!(precheck_in_root(root.path(), &p("/bin/tool", "/")).is_ok());
        let e = precheck_in_root(root.path(), &p("tool", "/work/etc")).unwrap_err();
        assert_eq!(
            e.code(),
            sandbox_wire::wire::ErrorCode::InvalidProcessCwd,
            "{e}"
        );
        // What runc gets is the path with the symlinks resolved inside the root.
        std::fs::create_dir_all(root.path().join("srv/app")).unwrap();
        std::os::unix::fs::symlink("/srv", root.path().join("work/srv")).unwrap();
        std::os::unix::fs::symlink("../../../../srv/app", root.path().join("work/up")).unwrap();
        std::os::unix::fs::symlink("/proc/self/fd/7", root.path().join("work/leak")).unwrap();
        std::os::unix::fs::symlink("loop", root.path().join("work/loop")).unwrap();
        assert_eq!(
            precheck_in_root(root.path(), &p("tool", "/work/srv/app/.")).unwrap(),
            "/srv/app"
        );
        assert_eq!(
            precheck_in_root(root.path(), &p("tool", "/work/up")).unwrap(),
            "/srv/app",
            "`..` stops at the container's root"
        );
        let e = precheck_in_root(root.path(), &p("tool", "/work/leak")).unwrap_err();
        assert!(e.to_string().contains("resolves to /proc/self/fd/7"), "{e}");
        let e = precheck_in_root(root.path(), &p("tool", "/work/loop")).unwrap_err();
        assert!(e.to_string().contains("symbolic links"), "{e}");
        let e = precheck_in_root(root.path(), &p("nope", "/")).unwrap_err();
        assert!(e.to_string().contains("not found in $PATH"), "{e}");
        let e = precheck_in_root(root.path(), &p("data", "/")).unwrap_err();
        assert!(e.to_string().contains("permission denied"), "{e}");
    }
}
