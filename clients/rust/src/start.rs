//! What to start: a builder over the SandboxProcess spec, applied with server-side apply.
use std::collections::BTreeMap;
use std::time::Duration;

use sandbox_api::crd::{
    EnvVar, ReadinessSpec, RestartPolicy, SecurityContextSpec, API_VERSION, KIND,
};
use sandbox_api::wire::MAX_SUPPLEMENTAL_GROUPS;
use serde_json::{json, Value};

use crate::error::{Error, Result};

/// A process to start: `argv` in a pod's container, as `kubectl exec` would run it.
///
/// Only what is set here is sent (server-side apply owns exactly these fields), so starting
/// again with the same id and the same options is a no-op that returns the same process.
///
/// ```
/// use std::time::Duration;
/// use sandbox_client::Start;
///
/// let job = Start::new("web-0", ["make", "test"])
///     .id("ci-42")
///     .container("builder")
///     .cwd("/src")
///     .env("CI", "1")
///     .timeout(Duration::from_secs(600))
///     .ttl(Duration::from_secs(3600))
///     .user(1000, Some(1000)); // as uid 1000, gid 1000 (a root container may)
/// let object = job.manifest("team-a", "ci-42").unwrap();
/// assert_eq!(object["spec"]["timeoutSeconds"], 600);
/// assert_eq!(object["spec"]["securityContext"]["runAsUser"], 1000);
/// assert_eq!(object["spec"]["command"][1], "test");
/// // A bad value never leaves the client: the option is named.
/// let e = Start::new("web-0", ["x"]).stop_signal(99).manifest("ns", "n").unwrap_err();
/// assert_eq!(e.code(), "InvalidArgument");
/// ```
#[derive(Clone, Debug, Default)]
pub struct Start {
    pub(crate) pod: String,
    pub(crate) argv: Vec<String>,
    pub(crate) id: Option<String>,
    pub(crate) container: Option<String>,
    pub(crate) cwd: Option<String>,
    pub(crate) env: Vec<EnvVar>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) stdin: bool,
    pub(crate) tty: bool,
    pub(crate) terminal: Option<(u16, u16)>,
    pub(crate) readiness: Option<ReadinessSpec>,
    pub(crate) ttl: Option<Duration>,
    pub(crate) stop_signal: Option<i32>,
    pub(crate) grace: Option<Duration>,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) security_context: Option<SecurityContextSpec>,
    pub(crate) restart_policy: RestartPolicy,
}

impl Start {
    /// `argv` (no shell; `argv[0]` is the executable) in pod `pod` of the client's namespace.
    pub fn new<S: Into<String>>(pod: impl Into<String>, argv: impl IntoIterator<Item = S>) -> Self {
        Start {
            pod: pod.into(),
            argv: argv.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }

    /// The object's name, chosen by the caller: starting again with the same id (a retry after
    /// a lost reply, another client) gives the same process, never a second one. Without it, a
    /// name `<pod>-<random>` is chosen once per call.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Container of the pod (default: the pod's default container).
    pub fn container(mut self, c: impl Into<String>) -> Self {
        self.container = Some(c.into());
        self
    }

    /// Working directory (absolute).
    pub fn cwd(mut self, dir: impl Into<String>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// One environment variable, overlaid on the container's.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push(EnvVar {
            name: name.into(),
            value: value.into(),
            value_from: None,
        });
        self
    }

    /// Stop the process this long after it started (`endReason: TimedOut`); whole seconds,
    /// rounded up.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// Keep a pipe open to the process's stdin ([`crate::Process::send_stdin`]).
    pub fn stdin(mut self, on: bool) -> Self {
        self.stdin = on;
        self
    }

    /// Run it on a terminal (`spec.tty`), as `kubectl exec -t`: one output stream, stdin
    /// always open ([`crate::Process::send_stdin`]), resized by [`crate::Process::resize`].
    pub fn tty(mut self, on: bool) -> Self {
        self.tty = on;
        self
    }

    /// The terminal's initial size in character cells (with [`Start::tty`]; default 24×80).
    pub fn terminal(mut self, rows: u16, cols: u16) -> Self {
        self.terminal = Some((rows, cols));
        self
    }

    /// Readiness declared in the spec (the operator probes it; `Ready` condition).
    pub fn readiness(mut self, r: ReadinessSpec) -> Self {
        self.readiness = Some(r);
        self
    }

    /// Delete the object this long after the process ended.
    pub fn ttl(mut self, d: Duration) -> Self {
        self.ttl = Some(d);
        self
    }

    /// Signal sent on stop and timeout (default 15).
    pub fn stop_signal(mut self, sig: i32) -> Self {
        self.stop_signal = Some(sig);
        self
    }

    /// Time between the stop signal and SIGKILL (default 5 s); whole seconds, rounded up.
    pub fn grace_period(mut self, d: Duration) -> Self {
        self.grace = Some(d);
        self
    }

    /// The user and groups the process runs as (`spec.securityContext`), never more than the
    /// container's own process has: a start asking for more ends `Error` `UserNotPermitted`
    /// ([`crate::Error::Process`]). Replaces what [`Start::user`] set.
    pub fn security_context(mut self, sc: SecurityContextSpec) -> Self {
        self.security_context = Some(sc);
        self
    }

    /// Run as `uid` (`runAsUser`) and, if given, primary group `gid` (`runAsGroup`); the rest of
    /// the security context is kept.
    pub fn user(mut self, uid: u32, gid: Option<u32>) -> Self {
        let sc = self.security_context.get_or_insert_with(Default::default);
        sc.run_as_user = Some(uid.into());
        sc.run_as_group = gid.map(Into::into);
        self
    }

    /// Run it again when it ends (`spec.restartPolicy`), as the kubelet restarts a container:
    /// `OnFailure` after an exit other than code 0, `Always` after any end, each time after a
    /// back-off (10 s doubling to 5 min; the phase stays `Running`, reason `BackOff`).
    /// `status.restartCount` counts the restarts, `status.lastExit` says how the previous run
    /// ended, `LogOptions::previous` reads its output. Not with [`Start::stdin`] or
    /// [`Start::tty`] (refused before any request). Default `Never`.
    pub fn restart_policy(mut self, p: RestartPolicy) -> Self {
        self.restart_policy = p;
        self
    }

    /// A label on the object (for [`crate::Sandbox::list`] selectors).
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// The id given ([`Start::id`]), if any: the name a start of it again reaches.
    pub fn given_id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The object's name: the id, or a fresh `<pod>-<5 random characters>` each call (like
    /// `generateName`; [`crate::Sandbox::start`] picks one and keeps it for its retries).
    pub fn name(&self) -> Result<String> {
        if let Some(id) = &self.id {
            return Ok(id.clone());
        }
        // Pod names may be 253 characters; object names too: keep room for the suffix.
        let base: String = self.pod.chars().take(240).collect();
        Ok(format!(
            "{}-{}",
            base.trim_end_matches(['-', '.']),
            suffix()?
        ))
    }

    /// The object to apply (what `--dry-run=client` shows): the fields set here and nothing
    /// else. Bad values are [`Error::InvalidArgument`] naming the option.
    pub fn manifest(&self, namespace: &str, name: &str) -> Result<Value> {
        if self.pod.is_empty() {
            return Err(Error::invalid("pod", "must not be empty"));
        }
        if self.argv.is_empty() || self.argv[0].is_empty() {
            return Err(Error::invalid(
                "argv",
                "needs at least the executable (argv[0], not empty)",
            ));
        }
        let mut spec = json!({"podName": self.pod, "command": self.argv});
        if let Some(c) = &self.container {
            spec["container"] = c.clone().into();
        }
        if let Some(d) = &self.cwd {
            spec["workingDir"] = d.clone().into();
        }
        if !self.env.is_empty() {
            spec["env"] = serde_json::to_value(&self.env).expect("env serializes");
        }
        if let Some(t) = self.timeout {
            spec["timeoutSeconds"] = seconds("timeout", t, 1)?.into();
        }
        if self.stdin {
            spec["stdin"] = true.into();
        }
        if self.tty {
            spec["tty"] = true.into();
        }
        if let Some((rows, cols)) = self.terminal {
            spec["terminal"] = terminal(self.tty, rows, cols)?;
        }
        if let Some(r) = &self.readiness {
            spec["readiness"] = serde_json::to_value(r).expect("readiness serializes");
        }
        if let Some(t) = self.ttl {
            spec["ttlSecondsAfterFinished"] = seconds("ttl", t, 0)?.into();
        }
        if let Some(s) = self.stop_signal {
            if !(1..=64).contains(&s) {
                return Err(Error::invalid("stop_signal", format!("{s} is not 1-64")));
            }
            spec["stopSignal"] = s.into();
        }
        if let Some(g) = self.grace {
            spec["terminationGracePeriodSeconds"] = seconds("grace_period", g, 0)?.into();
        }
        if let Some(sc) = &self.security_context {
            spec["securityContext"] = security_context(sc)?;
        }
        if !self.restart_policy.is_never() {
            spec["restartPolicy"] = restart_policy(self.restart_policy, self.stdin, self.tty)?;
        }
        // No finalizer: the operator adds it to a process it shows running (docs/concepts/writes.md).
        let mut meta = json!({"name": name, "namespace": namespace});
        if !self.labels.is_empty() {
            meta["labels"] = serde_json::to_value(&self.labels).expect("labels serialize");
        }
        Ok(json!({"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}))
    }
}

/// `spec.terminal`, checked as the API server would (only with `tty`, within the bounds).
fn terminal(tty: bool, rows: u16, cols: u16) -> Result<Value> {
    if !tty {
        return Err(Error::invalid("terminal", "requires tty"));
    }
    let size = sandbox_api::wire::TerminalSize { rows, cols };
    size.check()
        .map_err(|(field, m)| Error::invalid(field, m))?;
    Ok(json!({"rows": rows, "cols": cols}))
}

/// Whole seconds, rounded up, at least `min`, within the API's range.
fn seconds(field: &str, d: Duration, min: u64) -> Result<i64> {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    if s < min || s > i32::MAX as u64 {
        return Err(Error::invalid(
            field,
            format!("{d:?} is outside {min}s..{}s", i32::MAX),
        ));
    }
    Ok(s as i64)
}

/// `spec.securityContext`, checked as the API checks it; an error names its field.
fn security_context(sc: &SecurityContextSpec) -> Result<Value> {
    sc.to_wire()
        .map_err(|v| Error::invalid(&v.field, v.message))?;
    if sc.supplemental_groups.len() > MAX_SUPPLEMENTAL_GROUPS {
        return Err(Error::invalid(
            "securityContext.supplementalGroups",
            format!("more than {MAX_SUPPLEMENTAL_GROUPS} groups"),
        ));
    }
    if sc.run_as_non_root == Some(true) && sc.run_as_user == Some(0) {
        return Err(Error::invalid(
            "securityContext.runAsUser",
            "0 (root) contradicts runAsNonRoot",
        ));
    }
    Ok(serde_json::to_value(sc).expect("securityContext serializes"))
}

/// `spec.restartPolicy`, checked by the API's own rule (the one the operator, the agent and the
/// CRD enforce): a process that restarts takes no input.
fn restart_policy(p: RestartPolicy, stdin: bool, tty: bool) -> Result<Value> {
    sandbox_api::wire_rules::restart(p, stdin || tty)
        .map_err(|v| Error::invalid(&v.field, v.message))?;
    Ok(p.as_str().into())
}

/// Five characters as `generateName` makes them (no vowels, no look-alikes).
fn suffix() -> Result<String> {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut raw = [0u8; 5];
    getrandom::fill(&mut raw).map_err(|e| Error::Transport(format!("random name: {e}")))?;
    Ok(raw
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_was_set_is_applied() {
        let s = Start::new("web", ["sh", "-c", "echo hi"]);
        let m = s.manifest("ns", "p1").unwrap();
        assert_eq!(
            m,
            json!({"apiVersion": "sandbox.dev/v1alpha1", "kind": "SandboxProcess",
                "metadata": {"name": "p1", "namespace": "ns"},
                "spec": {"podName": "web", "command": ["sh", "-c", "echo hi"]}})
        );
        let s = Start::new("web", ["x"])
            .container("c")
            .cwd("/tmp")
            .env("A", "b=c")
            .timeout(Duration::from_millis(1500))
            .stdin(true)
            .ttl(Duration::from_secs(0))
            .label("team", "a");
        let m = s.manifest("ns", "p1").unwrap();
        assert_eq!(m["spec"]["timeoutSeconds"], 2, "rounded up");
        assert_eq!(m["spec"]["ttlSecondsAfterFinished"], 0);
        assert_eq!(m["spec"]["env"], json!([{"name": "A", "value": "b=c"}]));
        assert_eq!(m["spec"]["stdin"], true);
        assert_eq!(m["metadata"]["labels"]["team"], "a");
        assert!(m["spec"].get("tty").is_none() && m["spec"].get("terminal").is_none());
        assert!(
            m["spec"].get("stop").is_none(),
            "stop is kill's, not start's"
        );
        let m = Start::new("web", ["sh", "-i"])
            .tty(true)
            .terminal(30, 100)
            .manifest("ns", "p1")
            .unwrap();
        assert_eq!(m["spec"]["tty"], true);
        assert_eq!(m["spec"]["terminal"], json!({"rows": 30, "cols": 100}));
    }

    #[test]
    fn bad_values_name_the_field() {
        let e = Start::new("web", Vec::<String>::new())
            .manifest("ns", "n")
            .unwrap_err();
        assert!(e.to_string().starts_with("argv:"), "{e}");
        let e = Start::new("", ["x"]).manifest("ns", "n").unwrap_err();
        assert!(e.to_string().starts_with("pod:"), "{e}");
        let e = Start::new("w", ["x"])
            .timeout(Duration::ZERO)
            .manifest("ns", "n")
            .unwrap_err();
        assert!(e.to_string().starts_with("timeout:"), "{e}");
        let e = Start::new("w", ["x"])
            .stop_signal(65)
            .manifest("ns", "n")
            .unwrap_err();
        assert_eq!(e.code(), "InvalidArgument");
        let term = |tty, rows, cols| {
            Start::new("w", ["sh"])
                .tty(tty)
                .terminal(rows, cols)
                .manifest("ns", "n")
                .unwrap_err()
                .to_string()
        };
        assert!(term(false, 24, 80).starts_with("terminal:"));
        assert!(term(true, 0, 80).starts_with("terminal.rows:"));
        assert!(term(true, 24, 10001).starts_with("terminal.cols:"));
    }

    /// clients/conformance/terminal.json: the sizes the Python client's tests check too.
    #[test]
    fn conformance_terminal() {
        let doc: Value = serde_json::from_str(include_str!("../../conformance/terminal.json"))
            .expect("terminal.json is JSON");
        for case in crate::conformance::cases(&doc, "start", 8) {
            let mut s = Start::new("w", ["sh"]).tty(case["tty"].as_bool().unwrap());
            if let Some(t) = case["terminal"].as_array() {
                let n = |i: usize| u16::try_from(t[i].as_u64().unwrap()).unwrap();
                s = s.terminal(n(0), n(1));
            }
            match (s.manifest("ns", "n"), case["error"].as_str()) {
                (Ok(m), None) => {
                    for key in ["tty", "terminal"] {
                        assert_eq!(m["spec"].get(key), case["spec"].get(key), "{case}");
                    }
                }
                (Err(Error::InvalidArgument { field, .. }), Some(want)) => {
                    assert_eq!(field, want, "{case}")
                }
                (other, _) => panic!("{case}: {other:?}"),
            }
        }
    }

    /// clients/conformance/create.json: the metadata every start sends (no finalizer: not
    /// even `sandbox_api::crd::FINALIZER`, which the operator adds itself when it must).
    #[test]
    fn conformance_create() {
        let doc: Value = serde_json::from_str(include_str!("../../conformance/create.json"))
            .expect("create.json is JSON");
        let m = Start::new("w", ["sh"]).manifest("ns", "n").unwrap();
        assert_eq!(m["metadata"].get("finalizers"), None);
        assert_eq!(doc["metadata"]["finalizers"], Value::Null);
    }

    /// clients/conformance/restart.json `start`: the policy sent, or refused naming the field
    /// (with the API's own message for stdin and tty).
    #[test]
    fn conformance_restart_policy() {
        let doc: Value = serde_json::from_str(include_str!("../../conformance/restart.json"))
            .expect("restart.json is JSON");
        for case in crate::conformance::cases(&doc, "start", 8) {
            let mut s = Start::new("w", ["sh"])
                .stdin(case["stdin"].as_bool().unwrap())
                .tty(case["tty"].as_bool().unwrap());
            if let Some(name) = case["restartPolicy"].as_str() {
                // A name that is no policy cannot be written in Rust: the type refuses it.
                let Some(p) = RestartPolicy::parse(name) else {
                    assert_eq!(case["error"], "restartPolicy", "{case}");
                    continue;
                };
                s = s.restart_policy(p);
            }
            match (s.manifest("ns", "n"), case["error"].as_str()) {
                (Ok(m), None) => {
                    for key in ["restartPolicy", "stdin", "tty"] {
                        assert_eq!(m["spec"].get(key), case["spec"].get(key), "{case}");
                    }
                }
                (Err(Error::InvalidArgument { field, message }), Some(want)) => {
                    assert_eq!(field, want, "{case}");
                    if let Some(m) = case["message"].as_str() {
                        assert_eq!(message, m, "{case}");
                    }
                }
                (other, _) => panic!("{case}: {other:?}"),
            }
        }
    }

    #[test]
    fn restart_policy_is_the_apis_rule() {
        let e = Start::new("w", ["sh"])
            .stdin(true)
            .restart_policy(RestartPolicy::OnFailure)
            .manifest("ns", "n")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "restartPolicy: {}",
                sandbox_api::wire_rules::RESTART_WITH_STDIN
            )
        );
        let m = Start::new("w", ["sh"])
            .restart_policy(RestartPolicy::Always)
            .manifest("ns", "n")
            .unwrap();
        assert_eq!(m["spec"]["restartPolicy"], "Always");
    }

    #[test]
    fn security_context_as_set_and_checked() {
        let m = Start::new("w", ["id"])
            .user(1000, Some(1000))
            .manifest("ns", "n")
            .unwrap();
        assert_eq!(
            m["spec"]["securityContext"],
            json!({"runAsUser": 1000, "runAsGroup": 1000})
        );
        let sc = SecurityContextSpec {
            supplemental_groups: vec![2000],
            run_as_non_root: Some(true),
            run_as_group: Some(5),
            ..Default::default()
        };
        let m = Start::new("w", ["id"])
            .security_context(sc)
            .user(7, None)
            .manifest("ns", "n")
            .unwrap();
        assert_eq!(
            m["spec"]["securityContext"],
            json!({"runAsUser": 7, "supplementalGroups": [2000], "runAsNonRoot": true}),
            "user() sets the uid and the gid it was given, keeps the rest"
        );
        let bad = |sc: SecurityContextSpec| {
            Start::new("w", ["id"])
                .security_context(sc)
                .manifest("ns", "n")
                .unwrap_err()
                .to_string()
        };
        let e = Start::new("w", ["id"])
            .user(1 << 31, None)
            .manifest("ns", "n")
            .unwrap_err();
        assert!(
            e.to_string().starts_with("securityContext.runAsUser:"),
            "{e}"
        );
        let e = bad(SecurityContextSpec {
            supplemental_groups: vec![1, -1],
            ..Default::default()
        });
        assert!(
            e.starts_with("securityContext.supplementalGroups[1]:"),
            "{e}"
        );
        let e = bad(SecurityContextSpec {
            supplemental_groups: vec![1; 65],
            ..Default::default()
        });
        assert!(e.starts_with("securityContext.supplementalGroups:"), "{e}");
        let e = bad(SecurityContextSpec {
            run_as_user: Some(0),
            run_as_non_root: Some(true),
            ..Default::default()
        });
        assert!(e.starts_with("securityContext.runAsUser:"), "{e}");
    }

    #[test]
    fn generated_names() {
        let a = Start::new("web", ["x"]).name().unwrap();
        let b = Start::new("web", ["x"]).name().unwrap();
        assert!(a.starts_with("web-") && a.len() == 9, "{a}");
        assert_ne!(a, b);
        assert_eq!(Start::new("web", ["x"]).id("mine").name().unwrap(), "mine");
    }
}
