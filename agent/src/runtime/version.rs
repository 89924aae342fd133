//! Which OCI runtimes the agent launches processes with. runc before 1.1.12 leaks a host
//! directory fd into the exec'd process (CVE-2024-21626: a `workingDir` of `/proc/self/fd/N`
//! reaches the host's filesystem), and runc before 1.1 has no `exec --cgroup` (a process's own
//! cgroup). Distributions patched the CVE in older versions; the builds known to be patched are
//! accepted by their package version, which their runc prints as its commit.
use std::fmt;

/// What `<runtime> --version` says about the runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Supported,
    /// Refused, with the reason to show the user.
    Refused(String),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Supported => f.write_str("supported"),
            Verdict::Refused(why) => f.write_str(why),
        }
    }
}

const FIXED: (u64, u64, u64) = (1, 1, 12);

/// Judges the output of `<runtime> --version`. Runtimes other than runc (crun, youki, ...) were
/// not affected by the CVE and are accepted.
pub fn judge(version_output: &str) -> Verdict {
    let mut lines = version_output.lines();
    let first = lines.next().unwrap_or_default().trim();
    let Some(v) = first.strip_prefix("runc version ") else {
        return Verdict::Supported;
    };
    let commit = version_output
        .lines()
        .find_map(|l| l.trim().strip_prefix("commit:"))
        .map(str::trim)
        .unwrap_or_default();
    let Some(ver) = numeric(v) else {
        return Verdict::Refused(format!(
            "runc version {v:?} cannot be read; runc 1.1.12 or later is required"
        ));
    };
    if ver < (1, 1, 0) {
        return Verdict::Refused(format!(
            "runc {v} has no `exec --cgroup` (a process's own cgroup); runc 1.1.12 or later is required"
        ));
    }
    if ver >= FIXED || distro_patched(v, commit) {
        return Verdict::Supported;
    }
    Verdict::Refused(format!(
        "runc {v} (commit {commit}) is vulnerable to CVE-2024-21626 (a working directory that reaches the host's filesystem), fixed in 1.1.12; upgrade the node's runc, or set agent.cri.allowVulnerableRuntime if this build is patched"
    ))
}

/// `1.1.5+ds1` → (1, 1, 5): the leading dotted numbers.
fn numeric(v: &str) -> Option<(u64, u64, u64)> {
    let core: String = v
        .trim_start_matches('v')
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut it = core.split('.').map(|p| p.parse::<u64>().ok());
    Some((it.next()??, it.next()??, it.next().flatten().unwrap_or(0)))
}

/// Distribution builds of runc < 1.1.12 with the CVE-2024-21626 fix backported, by the package
/// version their runc prints as its commit: Debian 12 from 1.1.5+ds1-1+deb12u1 (DSA-5605-1),
/// Ubuntu 20.04/22.04 from 1.1.7-0ubuntu1~XX.04.2 (USN-6619-1).
fn distro_patched(version: &str, commit: &str) -> bool {
    if version.starts_with("1.1.5+ds1") {
        if let Some(n) = commit.rsplit_once("+deb12u").map(|(_, n)| n) {
            return n.parse::<u32>().is_ok_and(|n| n >= 1);
        }
    }
    if version.starts_with("1.1.7") {
        for series in ["~20.04.", "~22.04."] {
            if let Some((_, n)) = commit.rsplit_once(series) {
                return n.parse::<u32>().is_ok_and(|n| n >= 2);
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(v: &str, commit: &str) -> String {
        format!("runc version {v}\ncommit: {commit}\nspec: 1.0.2-dev\ngo: go1.21\n")
    }

    #[test]
    fn fixed_upstream_versions_pass() {
        for v in ["1.1.12", "1.1.15", "1.2.0", "1.3.3", "2.0.0-rc.1"] {
            assert_eq!(
                judge(&out(v, &format!("v{v}-0-gabc"))),
                Verdict::Supported,
                "{v}"
            );
        }
    }

    #[test]
    fn vulnerable_versions_are_refused_with_the_cve() {
        for v in ["1.1.0", "1.1.11", "1.1.5+ds1"] {
            let Verdict::Refused(why) = judge(&out(v, "v1.1.11-0-g4bccb38")) else {
                panic!("{v} accepted");
            };
            assert!(why.contains("CVE-2024-21626"), "{why}");
        }
    }

    #[test]
    fn runc_without_exec_cgroup_is_refused() {
        let Verdict::Refused(why) = judge(&out("1.0.0~rc93+ds1", "1.0.0~rc93+ds1-5+deb11u3"))
        else {
            panic!("accepted");
        };
        assert!(why.contains("exec --cgroup"), "{why}");
    }

    #[test]
    fn patched_distribution_builds_pass() {
        // This machine's Debian 12 runc prints exactly this.
        assert_eq!(
            judge(&out("1.1.5+ds1", "1.1.5+ds1-1+deb12u1")),
            Verdict::Supported
        );
        assert_eq!(
            judge(&out("1.1.7-0ubuntu1~22.04.2", "1.1.7-0ubuntu1~22.04.2")),
            Verdict::Supported
        );
        assert!(matches!(
            judge(&out("1.1.5+ds1", "1.1.5+ds1-1")),
            Verdict::Refused(_)
        ));
        assert!(matches!(
            judge(&out("1.1.7-0ubuntu1~22.04.1", "1.1.7-0ubuntu1~22.04.1")),
            Verdict::Refused(_)
        ));
    }

    #[test]
    fn other_runtimes_and_garbage() {
        assert_eq!(
            judge("crun version 1.14\ncommit: abc\n+SYSTEMD +SELINUX"),
            Verdict::Supported
        );
        assert!(matches!(
            judge("runc version banana\n"),
            Verdict::Refused(_)
        ));
    }
}
