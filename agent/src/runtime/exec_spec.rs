//! The exec'd process: the container's own OCI `process` with only args, env and cwd replaced,
//! so user, capabilities, no_new_privs, AppArmor/SELinux labels and rlimits are the container's
//! (seccomp, cgroups and namespaces come from the container itself when the runtime execs).
//! Also the pre-launch checks that turn common mistakes into precise errors.
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use sandbox_api::wire::{EnvVar, StartRequest};
use serde_json::{json, Value};

use crate::error::AgentError;

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub fn validate_env(env: &[EnvVar]) -> Result<(), AgentError> {
    for (i, e) in env.iter().enumerate() {
        let why = if e.name.is_empty() {
            Some("name is empty")
        } else if e.name.contains('=') {
            Some("name contains '='")
        } else if e.name.contains('\0') || e.value.contains('\0') {
            Some("contains a NUL byte")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(AgentError::InvalidProcessEnvironment(format!(
                "env[{i}] ({:?}): {why}",
                e.name
            )));
        }
    }
    Ok(())
}

pub fn validate_command(cmd: &[String]) -> Result<(), AgentError> {
    match cmd.first() {
        None => Err(AgentError::InvalidRequest(
            "command: must have at least one item".into(),
        )),
        Some(a) if a.is_empty() => Err(AgentError::InvalidRequest(
            "command[0]: must not be empty".into(),
        )),
        _ => match cmd.iter().position(|a| a.contains('\0')) {
            Some(i) => Err(AgentError::InvalidRequest(format!(
                "command[{i}]: contains a NUL byte"
            ))),
            None => Ok(()),
        },
    }
}

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
pub fn build_process(container_spec: &Value, req: &StartRequest) -> Result<Value, AgentError> {
    validate_command(&req.command)?;
    validate_env(&req.env)?;
    let mut process = container_spec
        .get("process")
        .cloned()
        .unwrap_or_else(|| json!({}));
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
    obj.insert("args".into(), json!(req.command));
    obj.insert("env".into(), json!(merge_env(&base_env, &req.env)));
    obj.insert("cwd".into(), json!(cwd));
    obj.insert("terminal".into(), json!(false));
    obj.remove("consoleSize");
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

/// Checks cwd and the executable inside the container's root filesystem (`root` is
/// `/proc/<init pid>/root`). Paths are resolved with the container's root as "/" so a tenant's
/// symlink cannot point the host-root agent at host files.
pub fn precheck_in_root(root: &Path, process: &Value) -> Result<(), AgentError> {
    let rootfd: std::os::fd::OwnedFd = std::fs::File::open(root)
        .map_err(|e| {
            AgentError::Internal(format!("opening container root {}: {e}", root.display()))
        })?
        .into();
    let cwd = process["cwd"].as_str().unwrap_or("/");
    match open_in_root(&rootfd, cwd).map(|f| f.metadata()) {
        Ok(Ok(m)) if m.is_dir() => {}
        Ok(Ok(_)) => {
            return Err(AgentError::InvalidProcessCwd {
                cwd: cwd.into(),
                reason: "not a directory".into(),
            })
        }
        Ok(Err(e)) => {
            return Err(AgentError::InvalidProcessCwd {
                cwd: cwd.into(),
                reason: e.to_string(),
            })
        }
        // RESOLVE_NO_MAGICLINKS: a symlink to a procfs magic link, or a symlink loop.
        Err(nix::errno::Errno::ELOOP) => {
            return Err(AgentError::InvalidProcessCwd {
                cwd: cwd.into(),
                reason: "the path goes through a magic link or a symlink loop; magic links (procfs) are not allowed".into(),
            })
        }
        Err(e) => {
            return Err(AgentError::InvalidProcessCwd {
                cwd: cwd.into(),
                reason: e.desc().into(),
            })
        }
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
        return check(&full).map_err(spawn_err);
    }
    let mut last = None;
    for dir in process_env_path(process)
        .split(':')
        .filter(|d| !d.is_empty())
    {
        match check(&format!("{dir}/{argv0}")) {
            Ok(()) => return Ok(()),
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

    #[test]
    fn overlay_replaces_and_appends() {
        let spec = json!({"process": {"args": ["sleep"], "env": ["PATH=/bin", "A=1"], "cwd": "/srv",
            "user": {"uid": 1000, "gid": 1000}, "capabilities": {"bounding": []}, "terminal": true}});
        let p = build_process(
            &spec,
            &req(vec![
                EnvVar {
                    name: "A".into(),
                    value: "2".into(),
                },
                EnvVar {
                    name: "B".into(),
                    value: "x=y".into(),
                },
            ]),
        )
        .unwrap();
        assert_eq!(p["env"], json!(["PATH=/bin", "A=2", "B=x=y"]));
        assert_eq!(p["cwd"], "/srv");
        assert_eq!(p["terminal"], false);
        assert_eq!(p["user"]["uid"], 1000, "container user kept");
        assert_eq!(p["args"], json!(["env"]));
    }

    #[test]
    fn bad_env_names_the_entry() {
        for (name, frag) in [("", "env[0]"), ("A=B", "'='")] {
            let err = build_process(
                &json!({"process": {}}),
                &req(vec![EnvVar {
                    name: name.into(),
                    value: "v".into(),
                }]),
            )
            .unwrap_err();
            assert_eq!(
                err.code(),
                sandbox_api::wire::ErrorCode::InvalidProcessEnvironment
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
            let err = build_process(&json!({"process": {}}), &r).unwrap_err();
            assert_eq!(err.code(), sandbox_api::wire::ErrorCode::InvalidProcessCwd);
            assert!(err.to_string().contains("magic links"), "{cwd}: {err}");
        }
        for fine in ["/procs", "/srv/proc", "/"] {
            let mut r = req(vec![]);
            r.working_dir = Some(fine.into());
            assert!(build_process(&json!({"process": {}}), &r).is_ok(), "{fine}");
        }
    }

    #[test]
    fn relative_cwd_rejected() {
        let mut r = req(vec![]);
        r.working_dir = Some("tmp".into());
        let err = build_process(&json!({"process": {}}), &r).unwrap_err();
        assert_eq!(err.code(), sandbox_api::wire::ErrorCode::InvalidProcessCwd);
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
            sandbox_api::wire::ErrorCode::InvalidProcessCwd,
            "{e}"
        );
        let e = precheck_in_root(root.path(), &p("nope", "/")).unwrap_err();
        assert!(e.to_string().contains("not found in $PATH"), "{e}");
        let e = precheck_in_root(root.path(), &p("data", "/")).unwrap_err();
        assert!(e.to_string().contains("permission denied"), "{e}");
    }
}
