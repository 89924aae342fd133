//! Small /proc readers: process identity (pid + start time survives pid reuse), namespaced pids,
//! cgroup membership.
use std::fs;

/// Field 22 of /proc/<pid>/stat: start time in clock ticks since boot.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm (field 2) may contain spaces and parentheses; fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Process state letter (R, S, Z, ...) from /proc/<pid>/stat.
pub fn state(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].chars().next()
}

/// /proc/<pid>/comm without the newline.
pub fn comm(pid: i32) -> Option<String> {
    let c = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(c.trim_end_matches('\n').to_string())
}

/// True when `pid` exists, is not a zombie, and started at `start` (when given).
pub fn alive(pid: i32, start: Option<u64>) -> bool {
    match (start_time(pid), start) {
        (Some(_), None) => state(pid) != Some('Z'),
        (Some(t), Some(s)) => t == s && state(pid) != Some('Z'),
        (None, _) => false,
    }
}

/// The pid as seen in the innermost PID namespace (last field of NSpid).
pub fn ns_pid(pid: i32) -> Option<i32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// Path of `pid`'s cgroup in the v1 hierarchy that has `controller`, or the v2 path.
pub fn cgroup_path(pid: i32, controller: &str) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let mut v2 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        if ctrls.split(',').any(|c| c == controller) {
            return Some(path.to_string());
        }
        if ctrls.is_empty() {
            v2 = Some(path.to_string());
        }
    }
    v2
}

/// OOM kills recorded for `pid`'s memory cgroup (v1 `memory.oom_control`, v2 `memory.events`).
pub fn oom_kills(pid: i32) -> Option<u64> {
    let path = cgroup_path(pid, "memory")?;
    let v1 = format!("/sys/fs/cgroup/memory{path}/memory.oom_control");
    let v2 = format!("/sys/fs/cgroup{path}/memory.events");
    let text = fs::read_to_string(v1)
        .or_else(|_| fs::read_to_string(v2))
        .ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix("oom_kill ")
            .and_then(|n| n.trim().parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_identity() {
        let me = std::process::id() as i32;
        let t = start_time(me).expect("start time");
        assert!(alive(me, Some(t)));
        assert!(!alive(me, Some(t + 1)));
        assert_eq!(ns_pid(me), Some(me));
    }
}
