//! The process contract's rules, written once.
//!
//! The operator checks a SandboxProcess spec with [`spec`] before it asks an agent for anything;
//! the agent checks every start request at its door with [`start`]. Both give the same
//! [`Violation`] for the same mistake: the field named as in the SandboxProcess spec, one
//! message, one error code. [`start`] yields a [`Valid`] request, the only kind the agent's
//! process builder takes, so nothing behind the door checks again.
//!
//! The CRD's schema and CEL rules keep what the API server must enforce (a subset of these);
//! `crd/tests.rs` runs one table of cases against both so they cannot drift.
use std::collections::HashSet;
use std::fmt;
use std::ops::{Deref, RangeInclusive};

use crate::wire::{self, ErrorCode, ProbeKind, StartRequest, MAX_SECONDS};

/// Most items in `command` (also keeps the CEL rules' estimated cost under the API server's budget).
pub const MAX_ARGS: usize = 1024;
/// Longest single argument, in bytes.
pub const MAX_ARG_LEN: usize = 32768;
/// Most `env` entries.
pub const MAX_ENV: usize = 256;
/// Longest path (`workingDir`).
pub const MAX_PATH_LEN: usize = 4096;
/// `readiness.periodMillis`.
pub const PERIOD_MILLIS: RangeInclusive<u64> = 10..=3_600_000;
/// `readiness.httpGet.status` bounds.
pub const HTTP_STATUS: RangeInclusive<u16> = 100..=599;

/// Names as the API server checks them: a name no object can have would wait as not found until
/// the start deadline, a label no pod can carry would never match. Written without backslashes
/// so the CRD's CEL rules (`self.matches('…')`) use the very same patterns.
pub mod names {
    /// A DNS-1123 subdomain (pod, Secret and ConfigMap names), at most [`SUBDOMAIN_MAX`] bytes.
    pub const SUBDOMAIN: &str =
        "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
    pub const SUBDOMAIN_MAX: usize = 253;
    pub const SUBDOMAIN_RULE: &str = "a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters";
    /// A DNS-1123 label (container names), at most 63 bytes.
    pub const LABEL: &str = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";
    pub const LABEL_RULE: &str = "a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters";
    /// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 bytes.
    pub const LABEL_KEY: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$";
    pub const LABEL_KEY_RULE: &str = "a label key: an optional DNS subdomain prefix and '/', then 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit";
    /// A label value: empty, or at most 63 bytes of the label name alphabet.
    pub const LABEL_VALUE: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$";
    pub const LABEL_VALUE_RULE: &str = "a label value: empty, or 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit";

    /// `Err(message)` unless `value` matches `pattern` (and a label key's prefix is a subdomain
    /// of at most 253 bytes, which the pattern cannot count).
    pub fn check(value: &str, pattern: &str, rule: &str) -> Result<(), String> {
        let ok = regex_lite::Regex::new(pattern).is_ok_and(|re| re.is_match(value))
            && (pattern != SUBDOMAIN || value.len() <= SUBDOMAIN_MAX)
            && (pattern != LABEL_KEY
                || value
                    .rsplit_once('/')
                    .is_none_or(|(prefix, _)| prefix.len() <= SUBDOMAIN_MAX));
        if ok {
            Ok(())
        } else {
            Err(format!("{value:?} is not {rule}"))
        }
    }
}

/// A rule broken: the field (a path below `spec`, e.g. `command[0]`), what is wrong with it, and
/// the error code the object's status (and the agent's answer) carries for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub field: String,
    pub message: String,
    pub code: ErrorCode,
}

impl Violation {
    /// A violation with the code the field's kind of mistake gets: the environment, the working
    /// directory and the limits have their own codes; any other field the user writes makes a
    /// process that cannot be spawned.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Violation {
        let field = field.into();
        let code = if field.starts_with("env") {
            ErrorCode::InvalidProcessEnvironment
        } else if field == "workingDir" {
            ErrorCode::InvalidProcessCwd
        } else if field.starts_with("resources") {
            ErrorCode::InvalidResourceLimits
        } else {
            ErrorCode::ProcessSpawnFailed
        };
        Violation {
            field,
            message: message.into(),
            code,
        }
    }

    /// A field of the request that only the operator fills in (no user wrote it).
    fn request(field: &str, message: impl Into<String>) -> Violation {
        Violation {
            field: field.into(),
            message: message.into(),
            code: ErrorCode::InvalidRequest,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "spec.{}: {}", self.field, self.message)
    }
}

impl std::error::Error for Violation {}

/// A value that passed its rules. Only this module makes one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Valid<T>(T);

impl<T> Valid<T> {
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> Deref for Valid<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The agent's door: the whole start request.
pub fn start(req: StartRequest) -> Result<Valid<StartRequest>, Violation> {
    if req.pod_uid.is_empty() {
        return Err(Violation::request("podUid", "must not be empty"));
    }
    if req.container.is_empty() {
        return Err(Violation::request("container", "must not be empty"));
    }
    process(&req)?;
    Ok(Valid(req))
}

/// The rules of what a user writes about the process, on the request both sides send.
pub(crate) fn process(req: &StartRequest) -> Result<(), Violation> {
    command(&req.command)?;
    if let Some(wd) = &req.working_dir {
        working_dir(wd)?;
    }
    env(req.env.iter().map(|e| (e.name.as_str(), e.value.as_str())))?;
    seconds("timeoutSeconds", req.timeout_seconds, 1)?;
    seconds("terminationGracePeriodSeconds", Some(req.grace_seconds), 0)?;
    signal("stopSignal", req.stop_signal)?;
    if let Some(r) = &req.readiness {
        readiness(r)?;
    }
    if let Some(l) = &req.resources {
        l.check().map_err(|(f, m)| Violation::new(f, m))?;
    }
    Ok(())
}

fn command(cmd: &[String]) -> Result<(), Violation> {
    match cmd.first() {
        None => return Err(Violation::new("command", "must have at least 1 item")),
        Some(a) if a.is_empty() => {
            return Err(Violation::new(
                "command[0]",
                "the executable must not be empty",
            ))
        }
        _ => {}
    }
    if cmd.len() > MAX_ARGS {
        return Err(Violation::new(
            "command",
            format!("at most {MAX_ARGS} items"),
        ));
    }
    for (i, a) in cmd.iter().enumerate() {
        if a.len() > MAX_ARG_LEN {
            return Err(Violation::new(
                format!("command[{i}]"),
                format!("longer than {MAX_ARG_LEN} bytes"),
            ));
        }
        if a.contains('\0') {
            return Err(Violation::new(
                format!("command[{i}]"),
                "must not contain a NUL character",
            ));
        }
    }
    Ok(())
}

fn working_dir(wd: &str) -> Result<(), Violation> {
    if !wd.starts_with('/') {
        return Err(Violation::new("workingDir", "must be an absolute path"));
    }
    if wd.len() > MAX_PATH_LEN {
        return Err(Violation::new(
            "workingDir",
            format!("longer than {MAX_PATH_LEN} bytes"),
        ));
    }
    if wd.contains('\0') {
        return Err(Violation::new(
            "workingDir",
            "must not contain a NUL character",
        ));
    }
    Ok(())
}

/// Names and values of the environment, in order.
pub(crate) fn env<'a>(vars: impl Iterator<Item = (&'a str, &'a str)>) -> Result<(), Violation> {
    let mut seen = HashSet::new();
    for (i, (name, value)) in vars.enumerate() {
        if i >= MAX_ENV {
            return Err(Violation::new("env", format!("at most {MAX_ENV} items")));
        }
        let why = if name.is_empty() {
            "must not be empty"
        } else if name.contains('=') {
            "must not contain '='"
        } else if name.contains('\0') {
            "must not contain a NUL character"
        } else if !seen.insert(name) {
            "duplicate name"
        } else {
            ""
        };
        if !why.is_empty() {
            return Err(Violation::new(format!("env[{i}].name"), why));
        }
        if value.contains('\0') {
            return Err(Violation::new(
                format!("env[{i}].value"),
                "must not contain a NUL character",
            ));
        }
    }
    Ok(())
}

/// A duration: at least `min`, at most [`MAX_SECONDS`].
pub(crate) fn seconds<T: Into<i128> + Copy>(
    field: &str,
    value: Option<T>,
    min: i64,
) -> Result<(), Violation> {
    match value.map(Into::into) {
        Some(v) if v < min as i128 => Err(Violation::new(field, format!("must be at least {min}"))),
        Some(v) if v > MAX_SECONDS as i128 => Err(Violation::new(
            field,
            format!("must be at most {MAX_SECONDS}"),
        )),
        _ => Ok(()),
    }
}

/// A signal number: 1–64 (every standard and real-time signal).
pub fn signal(field: &str, n: i32) -> Result<(), Violation> {
    if (1..=64).contains(&n) {
        Ok(())
    } else {
        Err(Violation::new(field, format!("{n}: must be 1-64")))
    }
}

/// A TCP port: 1–65535.
pub(crate) fn port(field: &str, port: i64) -> Result<u16, Violation> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p >= 1)
        .ok_or_else(|| Violation::new(field, format!("{port}: must be 1-65535")))
}

pub(crate) const STATUS_RANGE_MESSAGE: &str = "min and max must be 100-599 with min <= max";

/// A port check asked for after the start (`sandboxprocesses/probe`): a `tcpSocket` or an
/// `httpGet`, with the rules of `readiness`; field names start with `prefix`.
pub fn port_check(prefix: &str, probe: &ProbeKind) -> Result<(), Violation> {
    match probe {
        ProbeKind::LogMatch { .. } => Err(Violation::new(
            prefix,
            "must be tcpSocket or httpGet (a log match is waited for on the output)",
        )),
        other => net_probe(prefix, other),
    }
}

fn net_probe(prefix: &str, probe: &ProbeKind) -> Result<(), Violation> {
    let f = |name: &str| format!("{prefix}.{name}");
    match probe {
        ProbeKind::TcpSocket { port: p } => {
            port(&f("tcpSocket.port"), (*p).into())?;
        }
        ProbeKind::HttpGet {
            port: p,
            path,
            status,
        } => {
            port(&f("httpGet.port"), (*p).into())?;
            if !path.starts_with('/') {
                return Err(Violation::new(f("httpGet.path"), "must start with '/'"));
            }
            if !wire::request_path_ok(path) {
                return Err(Violation::new(
                    f("httpGet.path"),
                    "must be printable ASCII without spaces or control characters",
                ));
            }
            if !HTTP_STATUS.contains(&status.min)
                || !HTTP_STATUS.contains(&status.max)
                || status.min > status.max
            {
                return Err(Violation::new(f("httpGet.status"), STATUS_RANGE_MESSAGE));
            }
        }
        ProbeKind::LogMatch { .. } => {}
    }
    Ok(())
}

fn readiness(r: &wire::Readiness) -> Result<(), Violation> {
    match &r.probe {
        p @ (ProbeKind::TcpSocket { .. } | ProbeKind::HttpGet { .. }) => {
            net_probe("readiness", p)?;
        }
        ProbeKind::LogMatch { pattern, .. } => {
            if pattern.is_empty() {
                return Err(Violation::new(
                    "readiness.logMatch.pattern",
                    "must not be empty",
                ));
            }
            if let Err(e) = regex_lite::Regex::new(pattern) {
                return Err(Violation::new("readiness.logMatch.pattern", e.to_string()));
            }
        }
    }
    if !PERIOD_MILLIS.contains(&r.period_millis) {
        return Err(Violation::new(
            "readiness.periodMillis",
            format!(
                "{}: must be {}-{}",
                r.period_millis,
                PERIOD_MILLIS.start(),
                PERIOD_MILLIS.end()
            ),
        ));
    }
    seconds("readiness.timeoutSeconds", r.timeout_seconds, 1)
}

/// The operator's check of a SandboxProcess spec: the object's own rules, then the process rules
/// on the start request it becomes (values read from Secrets and ConfigMaps are checked when
/// read, in the operator's `envfrom`).
#[cfg(feature = "crd")]
pub fn spec(spec: &crate::crd::SandboxProcessSpec) -> Result<(), Violation> {
    use crate::convert::{start_request, Target};
    if spec.pod_name.is_empty() == spec.pod_selector.is_none() {
        return Err(Violation::new(
            "podName",
            "exactly one of podName, podSelector must be set",
        ));
    }
    if !spec.pod_name.is_empty() {
        name(
            "podName",
            &spec.pod_name,
            names::SUBDOMAIN,
            names::SUBDOMAIN_RULE,
        )?;
    }
    if let Some(c) = &spec.container {
        name("container", c, names::LABEL, names::LABEL_RULE)?;
    }
    if let Some(sel) = &spec.pod_selector {
        selector(sel)?;
    }
    for (i, e) in spec.env.iter().enumerate() {
        let Some(from) = &e.value_from else { continue };
        let field = format!("env[{i}].valueFrom");
        if !e.value.is_empty() {
            return Err(Violation::new(field, "value and valueFrom are exclusive"));
        }
        match from.reference() {
            None => {
                return Err(Violation::new(
                    field,
                    "must set exactly one of secretKeyRef, configMapKeyRef",
                ))
            }
            Some((_, r)) if r.name.is_empty() || r.key.is_empty() => {
                return Err(Violation::new(field, "name and key must not be empty"))
            }
            Some((kind, r)) => {
                let field = format!("{field}.{}KeyRef.name", kind_field(kind));
                name(&field, &r.name, names::SUBDOMAIN, names::SUBDOMAIN_RULE)?;
            }
        }
    }
    seconds(
        "ttlSecondsAfterFinished",
        spec.ttl_seconds_after_finished,
        0,
    )?;
    seconds("startDeadlineSeconds", spec.start_deadline_seconds, 1)?;
    // Every variable keeps its place (so `env[i]` names the spec's item): a value not read yet
    // stands in as empty.
    let unread = spec
        .env
        .iter()
        .filter(|e| e.value_from.is_some())
        .map(|e| (e.name.clone(), String::new()))
        .collect();
    let target = Target {
        exec_id: "-",
        pod_uid: "-",
        container: "-",
    };
    process(&start_request(spec, target, &unread)?)
}

#[cfg(feature = "crd")]
fn kind_field(kind: &str) -> &'static str {
    if kind == "Secret" {
        "secret"
    } else {
        "configMap"
    }
}

#[cfg(feature = "crd")]
fn name(field: &str, value: &str, pattern: &str, rule: &str) -> Result<(), Violation> {
    names::check(value, pattern, rule).map_err(|m| Violation::new(field, m))
}

/// A pod selector's keys and values must be ones a pod's labels can have.
#[cfg(feature = "crd")]
fn selector(sel: &crate::crd::PodSelector) -> Result<(), Violation> {
    use crate::crd::SelectorOperator::{In, NotIn};
    for (k, v) in &sel.match_labels {
        let field = format!("podSelector.matchLabels[{k:?}]");
        name(&field, k, names::LABEL_KEY, names::LABEL_KEY_RULE)?;
        name(&field, v, names::LABEL_VALUE, names::LABEL_VALUE_RULE)?;
    }
    for (i, r) in sel.match_expressions.iter().enumerate() {
        let field = format!("podSelector.matchExpressions[{i}]");
        if matches!(r.operator, In | NotIn) == r.values.is_empty() {
            return Err(Violation::new(
                format!("{field}.values"),
                "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
            ));
        }
        name(
            &format!("{field}.key"),
            &r.key,
            names::LABEL_KEY,
            names::LABEL_KEY_RULE,
        )?;
        for (j, v) in r.values.iter().enumerate() {
            let field = format!("{field}.values[{j}]");
            name(&field, v, names::LABEL_VALUE, names::LABEL_VALUE_RULE)?;
        }
    }
    Ok(())
}

/// The rules only the API server can check, between an object and its previous version: every
/// field except `stop` and `ttlSecondsAfterFinished` is immutable.
#[cfg(feature = "crd")]
pub fn spec_update(
    new: &crate::crd::SandboxProcessSpec,
    old: &crate::crd::SandboxProcessSpec,
) -> Result<(), Violation> {
    let immutable: [(&str, bool); 13] = [
        ("podName", new.pod_name == old.pod_name),
        ("podSelector", new.pod_selector == old.pod_selector),
        ("container", new.container == old.container),
        ("command", new.command == old.command),
        ("workingDir", new.working_dir == old.working_dir),
        ("env", new.env == old.env),
        ("timeoutSeconds", new.timeout_seconds == old.timeout_seconds),
        ("readiness", new.readiness == old.readiness),
        ("stopSignal", new.stop_signal == old.stop_signal),
        (
            "terminationGracePeriodSeconds",
            new.termination_grace_period_seconds == old.termination_grace_period_seconds,
        ),
        ("resources", new.resources == old.resources),
        (
            "startDeadlineSeconds",
            new.start_deadline_seconds == old.start_deadline_seconds,
        ),
        ("stdin", new.stdin == old.stdin),
    ];
    match immutable.iter().find(|(_, same)| !same) {
        Some((field, _)) => Err(Violation::new(*field, format!("{field} is immutable"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(command: &[&str]) -> StartRequest {
        StartRequest {
            exec_id: "e".into(),
            pod_uid: "p".into(),
            container: "c".into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            working_dir: None,
            env: vec![],
            timeout_seconds: None,
            stop_signal: 15,
            grace_seconds: 5,
            readiness: None,
            resources: None,
            stdin: false,
        }
    }

    #[test]
    fn the_door_names_the_field_and_code() {
        let cases: Vec<(StartRequest, &str, ErrorCode)> = vec![
            (req(&[]), "command", ErrorCode::ProcessSpawnFailed),
            (req(&[""]), "command[0]", ErrorCode::ProcessSpawnFailed),
            (
                req(&["x", "a\0b"]),
                "command[1]",
                ErrorCode::ProcessSpawnFailed,
            ),
            (
                StartRequest {
                    pod_uid: String::new(),
                    ..req(&["x"])
                },
                "podUid",
                ErrorCode::InvalidRequest,
            ),
            (
                StartRequest {
                    working_dir: Some("tmp".into()),
                    ..req(&["x"])
                },
                "workingDir",
                ErrorCode::InvalidProcessCwd,
            ),
            (
                StartRequest {
                    env: vec![wire::EnvVar {
                        name: "A=B".into(),
                        value: String::new(),
                    }],
                    ..req(&["x"])
                },
                "env[0].name",
                ErrorCode::InvalidProcessEnvironment,
            ),
            (
                StartRequest {
                    timeout_seconds: Some(0),
                    ..req(&["x"])
                },
                "timeoutSeconds",
                ErrorCode::ProcessSpawnFailed,
            ),
            (
                StartRequest {
                    grace_seconds: u64::MAX,
                    ..req(&["x"])
                },
                "terminationGracePeriodSeconds",
                ErrorCode::ProcessSpawnFailed,
            ),
            (
                StartRequest {
                    stop_signal: 65,
                    ..req(&["x"])
                },
                "stopSignal",
                ErrorCode::ProcessSpawnFailed,
            ),
            (
                StartRequest {
                    readiness: Some(wire::Readiness {
                        probe: ProbeKind::LogMatch {
                            pattern: "(".into(),
                            stream: wire::LogStream::Both,
                        },
                        period_millis: 500,
                        timeout_seconds: None,
                    }),
                    ..req(&["x"])
                },
                "readiness.logMatch.pattern",
                ErrorCode::ProcessSpawnFailed,
            ),
            (
                StartRequest {
                    readiness: Some(wire::Readiness {
                        probe: ProbeKind::TcpSocket { port: 80 },
                        period_millis: 1,
                        timeout_seconds: None,
                    }),
                    ..req(&["x"])
                },
                "readiness.periodMillis",
                ErrorCode::ProcessSpawnFailed,
            ),
            (
                StartRequest {
                    resources: Some(wire::ResourceLimits {
                        cpu_millis: Some(1),
                        ..Default::default()
                    }),
                    ..req(&["x"])
                },
                "resources.limits.cpu",
                ErrorCode::InvalidResourceLimits,
            ),
        ];
        for (r, field, code) in cases {
            let v = start(r.clone()).expect_err(field);
            assert_eq!((v.field.as_str(), v.code), (field, code), "{r:?}: {v}");
            assert!(v.to_string().starts_with(&format!("spec.{field}: ")));
        }
        assert_eq!(start(req(&["x"])).unwrap().command, ["x"]);
    }
}
