//! `spec.securityContext`: the user the exec'd process runs as, judged against the container's
//! own process (its OCI `process.user`) so that it never has more privilege than that process:
//! [`decide`] holds the rules, [`apply`] writes the outcome into the OCI process.
use sandbox_wire::wire::SecurityContext;
use serde_json::{json, Value};

use crate::error::AgentError;

/// A process's user and groups, as in an OCI `process.user`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
}

impl User {
    /// The OCI `process.user` (absent: root, as runc takes it).
    pub fn of(process: &Value) -> User {
        let u = &process["user"];
        let id = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
        User {
            uid: id(&u["uid"]),
            gid: id(&u["gid"]),
            additional_gids: u["additionalGids"]
                .as_array()
                .into_iter()
                .flatten()
                .map(id)
                .collect(),
        }
    }
}

impl std::fmt::Display for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "uid {} gid {}", self.uid, self.gid)?;
        if !self.additional_gids.is_empty() {
            write!(f, " groups {:?}", self.additional_gids)?;
        }
        Ok(())
    }
}

/// Whether the container's process could change its own uid (`CAP_SETUID`) and groups
/// (`CAP_SETGID`): listed in both its bounding and permitted sets, or no sets listed at all
/// (runc then leaves root's full sets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Powers {
    pub setuid: bool,
    pub setgid: bool,
}

impl Powers {
    pub fn of(process: &Value) -> Powers {
        let Some(caps) = process.get("capabilities").filter(|c| c.is_object()) else {
            return Powers {
                setuid: true,
                setgid: true,
            };
        };
        let has = |cap: &str| {
            ["bounding", "permitted"].iter().all(|set| {
                let list = caps.get(*set).and_then(Value::as_array);
                list.into_iter().flatten().any(|c| c.as_str() == Some(cap))
            })
        };
        Powers {
            setuid: has("CAP_SETUID"),
            setgid: has("CAP_SETGID"),
        }
    }
}

/// A field of `securityContext` the container's user does not allow, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub field: &'static str,
    pub reason: String,
}

/// The process's user for `sc` in a container whose own process runs as `own` with `powers`:
/// - a container running as root (uid 0) may run the process as any uid (with `CAP_SETUID`) and
///   groups (with `CAP_SETGID`): what its root could `su` to;
/// - otherwise only as its own uid, with groups its process already holds (its gid and
///   additional gids): anything else would be more than that process can become;
/// - `runAsNonRoot` refuses uid 0, the container's uid included when `runAsUser` is left out
///   (as the kubelet does).
///
/// Groups: `runAsGroup` or the container's gid; `supplementalGroups` when given, else the
/// container's when the uid is the container's, none when it is another user's (root's groups
/// are not handed to another user).
pub fn decide(own: &User, powers: Powers, sc: &SecurityContext) -> Result<User, Refusal> {
    let refuse = |field, reason: String| Err(Refusal { field, reason });
    let any_uid = own.uid == 0 && powers.setuid;
    let any_group = own.uid == 0 && powers.setgid;
    let uid = sc.run_as_user.unwrap_or(own.uid);
    if !any_uid && uid != own.uid {
        let why = match own.uid {
            0 => "the container's root process has no CAP_SETUID",
            _ => "a container running as a non-root user runs processes only as itself",
        };
        return refuse("securityContext.runAsUser", format!("{uid}: {why}"));
    }
    let held = |g: u32| any_group || g == own.gid || own.additional_gids.contains(&g);
    let why = match own.uid {
        0 => "the container's root process has no CAP_SETGID and does not hold it",
        _ => "not a group of the container's non-root user",
    };
    if let Some(g) = sc.run_as_group.filter(|g| !held(*g)) {
        return refuse("securityContext.runAsGroup", format!("{g}: {why}"));
    }
    if let Some(g) = sc.supplemental_groups.iter().find(|g| !held(**g)) {
        return refuse("securityContext.supplementalGroups", format!("{g}: {why}"));
    }
    if sc.run_as_non_root && uid == 0 {
        let field = match sc.run_as_user {
            Some(_) => "securityContext.runAsUser",
            None => "securityContext.runAsNonRoot",
        };
        return refuse(field, "the process would run as uid 0 (root)".into());
    }
    let additional_gids = if !sc.supplemental_groups.is_empty() {
        sc.supplemental_groups.clone()
    } else if uid == own.uid {
        own.additional_gids.clone()
    } else {
        vec![]
    };
    Ok(User {
        uid,
        gid: sc.run_as_group.unwrap_or(own.gid),
        additional_gids,
    })
}

/// The process's capabilities when it runs as `to` in a container whose process runs as `from`
/// with `caps` (its OCI `process.capabilities`). From root to a non-root uid, as the kernel does
/// for a root process that changes to that uid and executes a program: permitted, effective and
/// ambient are cleared by the uid change, and an execve by a non-root user keeps only ambient
/// capabilities. runc, though, sets the listed sets after its own uid change, so a non-root
/// process would be handed root's; hence every set but bounding becomes the container's ambient
/// set — the capabilities it really grants as ambient, i.e. also in its permitted and inheritable
/// sets (the kernel raises no other; runc's default spec lists ambient ones without inheritable,
/// which grants none). Bounding stays the container's: it caps what file capabilities can grant,
/// as for the container's own process. Otherwise (root stays root, a non-root uid stays itself)
/// the container's sets are kept.
pub fn capabilities(caps: Option<&Value>, from: u32, to: u32) -> Option<Value> {
    if from != 0 || to == 0 {
        return caps.cloned();
    }
    let set = |name: &str| -> Vec<&str> {
        let list = caps.and_then(|c| c.get(name)).and_then(Value::as_array);
        list.into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect()
    };
    let (permitted, inheritable) = (set("permitted"), set("inheritable"));
    let ambient: Vec<&str> = set("ambient")
        .into_iter()
        .filter(|c| permitted.contains(c) && inheritable.contains(c))
        .collect();
    let mut out = json!({
        "effective": ambient, "permitted": ambient, "inheritable": ambient, "ambient": ambient,
    });
    if let Some(b) = caps.and_then(|c| c.get("bounding")) {
        out["bounding"] = b.clone();
    }
    Some(out)
}

/// Applies `sc` to the OCI process built from the container's, or refuses it (before anything
/// is started) with `UserNotPermitted` naming the field and the container's user.
pub fn apply(process: &mut Value, sc: &SecurityContext) -> Result<(), AgentError> {
    let own = User::of(process);
    let new = decide(&own, Powers::of(process), sc).map_err(|r| AgentError::UserNotPermitted {
        field: r.field.into(),
        reason: r.reason,
        container_user: own.to_string(),
    })?;
    let caps = capabilities(process.get("capabilities"), own.uid, new.uid);
    let user = &mut process["user"];
    if !user.is_object() {
        *user = json!({});
    }
    user["uid"] = new.uid.into();
    user["gid"] = new.gid.into();
    user["additionalGids"] = json!(new.additional_gids);
    if let Some(c) = caps {
        process["capabilities"] = c;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
