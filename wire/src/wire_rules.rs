//! The rules of the agent's start request (the wire), written once: the agent checks every
//! request at its door with [`start`], the operator checks the request a spec becomes with the
//! same rules (`spec_rules`). Both give the same [`Violation`] for the same mistake: the
//! field named as in the SandboxProcess spec, one message, one error code. [`start`] yields a
//! [`Valid`] request, the only kind the agent's process builder takes, so nothing behind the
//! door checks again.
use std::collections::HashSet;
use std::fmt;
use std::ops::{Deref, RangeInclusive};

use crate::wire::{
    self, ErrorCode, ProbeKind, RestartPolicy, SecurityContext, StartRequest, MAX_ID, MAX_SECONDS,
    MAX_SUPPLEMENTAL_GROUPS,
};

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
        } else if field.starts_with("securityContext") {
            ErrorCode::UserNotPermitted
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
    if let Some(o) = &req.object {
        object(o)?;
    }
    Ok(Valid(req))
}

/// The most a `processes` object's copy on its node may take, as JSON: kept with the launch and
/// in every record, in the agent's memory and the operator's. The API server takes 3 MiB for an
/// etcd object; the operator refuses a create's body over twice this (422), the agent a start
/// whose object is over it (naming `object`).
pub const MAX_OBJECT_BYTES: usize = 16 * 1024;

/// A `processes` object's copy: named, and small enough to keep per record.
pub fn object(o: &crate::wire::ProcessObject) -> Result<(), Violation> {
    if o.namespace.is_empty() || o.name.is_empty() {
        return Err(Violation::request(
            "object",
            "must have a namespace and a name",
        ));
    }
    let size = serde_json::to_vec(o).map_or(usize::MAX, |v| v.len());
    if size > MAX_OBJECT_BYTES {
        return Err(Violation::request(
            "object",
            format!("takes {size} bytes as JSON, over the {MAX_OBJECT_BYTES} a process keeps"),
        ));
    }
    Ok(())
}

/// The rules of what a user writes about the process, on the request both sides send.
pub fn process(req: &StartRequest) -> Result<(), Violation> {
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
    if let Some(t) = &req.tty {
        t.check().map_err(|(f, m)| Violation::new(f, m))?;
        // The spec's `tty` implies stdin; the request says so explicitly (its builder's duty).
        if !req.stdin {
            return Err(Violation::request("stdin", "must be true with tty"));
        }
    }
    if let Some(sc) = &req.security_context {
        security_context(sc)?;
    }
    restart(req.restart_policy, req.stdin)
}

/// Input is one stream of offsets for one run: a process that restarts takes none (`input`:
/// stdin or a terminal). The one rule, used by the start request's check and the clients.
pub fn restart(policy: RestartPolicy, input: bool) -> Result<(), Violation> {
    if !policy.is_never() && input {
        return Err(Violation::new("restartPolicy", RESTART_WITH_STDIN));
    }
    Ok(())
}

/// The message of every enforcer of [`restart`] (the CRD's CEL rule too).
pub const RESTART_WITH_STDIN: &str = "restartPolicy must be Never with stdin or tty";

/// A user or group id: 0 to [`MAX_ID`].
pub fn id(field: &str, v: i64) -> Result<u32, Violation> {
    u32::try_from(v)
        .ok()
        .filter(|v| *v <= MAX_ID)
        .ok_or_else(|| Violation::new(field, format!("{v}: must be 0-{MAX_ID}")))
}

/// What can be judged without the container: the ids in range, and no root with
/// `runAsNonRoot` (whether the container allows the user is the agent's judgement).
fn security_context(sc: &SecurityContext) -> Result<(), Violation> {
    let f = |name: &str| format!("securityContext.{name}");
    for (name, v) in [
        ("runAsUser", sc.run_as_user),
        ("runAsGroup", sc.run_as_group),
    ] {
        if let Some(v) = v {
            id(&f(name), v.into())?;
        }
    }
    if sc.supplemental_groups.len() > MAX_SUPPLEMENTAL_GROUPS {
        return Err(Violation::new(
            f("supplementalGroups"),
            format!("at most {MAX_SUPPLEMENTAL_GROUPS} items"),
        ));
    }
    for (i, g) in sc.supplemental_groups.iter().enumerate() {
        id(&f(&format!("supplementalGroups[{i}]")), (*g).into())?;
    }
    if sc.run_as_non_root && sc.run_as_user == Some(0) {
        return Err(Violation::new(
            f("runAsUser"),
            "0 (root) contradicts runAsNonRoot: true",
        ));
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
pub fn env<'a>(vars: impl Iterator<Item = (&'a str, &'a str)>) -> Result<(), Violation> {
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
        } else if name.chars().any(char::is_control) {
            "must not contain a control character"
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
pub fn seconds<T: Into<i128> + Copy>(
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
pub fn port(field: &str, port: i64) -> Result<u16, Violation> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p >= 1)
        .ok_or_else(|| Violation::new(field, format!("{port}: must be 1-65535")))
}

pub const STATUS_RANGE_MESSAGE: &str = "min and max must be 100-599 with min <= max";

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
            tty: None,
            security_context: None,
            restart_policy: RestartPolicy::Never,
            object: None,
        }
    }

    fn as_user(sc: SecurityContext) -> StartRequest {
        StartRequest {
            security_context: Some(sc),
            ..req(&["x"])
        }
    }

    fn ready_on(probe: ProbeKind, period_millis: u64) -> StartRequest {
        StartRequest {
            readiness: Some(wire::Readiness {
                probe,
                period_millis,
                timeout_seconds: None,
            }),
            ..req(&["x"])
        }
    }

    /// Requests each breaking one rule, with the field and code the door names.
    fn door_cases() -> Vec<(StartRequest, &'static str, ErrorCode)> {
        vec![
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
                ready_on(
                    ProbeKind::LogMatch {
                        pattern: "(".into(),
                        stream: wire::LogStream::Both,
                    },
                    500,
                ),
                "readiness.logMatch.pattern",
                ErrorCode::ProcessSpawnFailed,
            ),
            (
                ready_on(ProbeKind::TcpSocket { port: 80 }, 1),
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
        ]
    }

    /// Terminal requests the door refuses: a size out of bounds, a terminal without stdin.
    fn tty_cases() -> Vec<(StartRequest, &'static str, ErrorCode)> {
        vec![
            (
                StartRequest {
                    stdin: true,
                    tty: Some(wire::TerminalSize { rows: 0, cols: 80 }),
                    ..req(&["x"])
                },
                "terminal.rows",
                ErrorCode::ProcessSpawnFailed,
            ),
            (
                StartRequest {
                    tty: Some(wire::TerminalSize::DEFAULT),
                    ..req(&["x"])
                },
                "stdin",
                ErrorCode::InvalidRequest,
            ),
        ]
    }

    /// `securityContext` requests the door refuses (whether the container allows the user is
    /// the agent's judgement, later).
    fn user_cases() -> Vec<(StartRequest, &'static str, ErrorCode)> {
        vec![
            (
                as_user(SecurityContext {
                    run_as_user: Some(MAX_ID + 1),
                    ..Default::default()
                }),
                "securityContext.runAsUser",
                ErrorCode::UserNotPermitted,
            ),
            (
                as_user(SecurityContext {
                    supplemental_groups: vec![1, u32::MAX],
                    ..Default::default()
                }),
                "securityContext.supplementalGroups[1]",
                ErrorCode::UserNotPermitted,
            ),
            (
                as_user(SecurityContext {
                    supplemental_groups: vec![1; MAX_SUPPLEMENTAL_GROUPS + 1],
                    ..Default::default()
                }),
                "securityContext.supplementalGroups",
                ErrorCode::UserNotPermitted,
            ),
            (
                as_user(SecurityContext {
                    run_as_user: Some(0),
                    run_as_non_root: true,
                    ..Default::default()
                }),
                "securityContext.runAsUser",
                ErrorCode::UserNotPermitted,
            ),
        ]
    }

    #[test]
    fn a_restarting_process_takes_no_input() {
        let mut r = req(&["x"]);
        r.restart_policy = RestartPolicy::OnFailure;
        assert_eq!(process(&r), Ok(()));
        r.stdin = true;
        let err = process(&r).expect_err("stdin with restarts");
        assert_eq!(err.field, "restartPolicy");
        assert_eq!(err.message, RESTART_WITH_STDIN);
    }

    #[test]
    fn the_door_names_the_field_and_code() {
        for (r, field, code) in door_cases()
            .into_iter()
            .chain(tty_cases())
            .chain(user_cases())
        {
            let v = start(r.clone()).expect_err(field);
            assert_eq!((v.field.as_str(), v.code), (field, code), "{r:?}: {v}");
            assert!(v.to_string().starts_with(&format!("spec.{field}: ")));
        }
        assert_eq!(start(req(&["x"])).unwrap().command, ["x"]);
        let at_bounds = SecurityContext {
            run_as_user: Some(MAX_ID),
            run_as_group: Some(0),
            supplemental_groups: vec![MAX_ID; MAX_SUPPLEMENTAL_GROUPS],
            run_as_non_root: true,
        };
        assert!(start(as_user(at_bounds)).is_ok());
    }
}
