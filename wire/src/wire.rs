//! The node agent's wire protocol (JSON over HTTP), shared by the agent and the operator.
//!
//! Endpoints (all under `/v1`, bearer-token authenticated):
//! - `POST   /processes`              [`StartRequest`] → [`ProcessRecord`] (idempotent on `execId`)
//! - `GET    /processes`              → [`ProcessList`]
//! - `GET    /processes/{id}`         → [`ProcessRecord`]
//! - `POST   /processes/{id}/signal`  [`SignalRequest`] → [`ProcessRecord`]
//! - `POST   /processes/{id}/stdin`   bytes at `?offset=N[&close=true][&writer=W][&by=U]`
//!   → [`StdinState`] (with `writer` on a `tty` process: offsets are that writer's own, see
//!   [`StdinWriter`])
//! - `POST   /processes/{id}/resize`  [`TerminalSize`] → [`TerminalSize`] (a `tty` process)
//! - `GET    /processes/{id}/screen`  → [`TerminalScreen`] (a running `tty` process)
//! - `GET    /processes/{id}/logs`    [`LogQuery`] → NDJSON stream of [`LogEvent`]
//! - `DELETE /processes/{id}`         → forget: stop if running, delete record and logs
//! - `GET    /watch`                  → NDJSON stream of [`WatchEvent`]
//!
//! Errors come back as a non-2xx status with an [`ApiError`] body.
use serde::{Deserialize, Serialize};

/// Upper bound of every duration in seconds (`timeoutSeconds`, `terminationGracePeriodSeconds`,
/// `ttlSecondsAfterFinished`, `readiness.timeoutSeconds`, the agent's `graceSeconds`): int32, like
/// a Job's. About 68 years, far below what a monotonic clock plus a duration can overflow, so no
/// spec value can crash a deadline computation.
pub const MAX_SECONDS: i64 = i32::MAX as i64;

/// An HTTP probe path goes into the request line verbatim: printable ASCII, no space, no CR/LF
/// (which would let a spec inject headers or a second request).
pub fn request_path_ok(path: &str) -> bool {
    path.bytes().all(|b| b.is_ascii_graphic())
}

/// Stable error codes; the operator copies them into `status.error.code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    ContainerNotFound,
    ContainerUnavailable,
    InvalidProcessCwd,
    InvalidProcessEnvironment,
    /// `resources.limits` cannot be applied (above the container's own, or not on this node).
    InvalidResourceLimits,
    ProcessSpawnFailed,
    /// The container's runtime is one the agent cannot launch a process with (a RuntimeClass
    /// handler such as gVisor or Kata, or a runc known to be vulnerable or too old).
    RuntimeUnsupported,
    StaleProcessHandle,
    ProcessNotFound,
    ProcessLost,
    OperationInterrupted,
    AgentUnavailable,
    /// The request itself is malformed (names the field); not a process state.
    InvalidRequest,
    Unauthorized,
    Internal,
    /// A cap on open follows (or other held resources) was reached: retry later (HTTP 429).
    TooManyRequests,
    /// The process's output is no longer kept on its node (output budget, retention period).
    OutputFreed,
    /// A stdin write did not start at the accepted end (the message names it): resume there.
    StdinOffsetMismatch,
    /// The process has no stdin to write: not enabled (`spec.stdin`), closed, or ended.
    StdinUnavailable,
    /// A stdin write over bytes already accepted differs from them (another writer at the same
    /// offset, or a retry with other content): refused, never acknowledged (HTTP 409).
    StdinConflict,
    /// `securityContext` asks for a user or group the container's own process could not become
    /// (more privilege than it has), or `runAsNonRoot` with a process that would run as root; the
    /// message names the field and the container's user.
    UserNotPermitted,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ContainerNotFound => "ContainerNotFound",
            ErrorCode::ContainerUnavailable => "ContainerUnavailable",
            ErrorCode::InvalidProcessCwd => "InvalidProcessCwd",
            ErrorCode::InvalidProcessEnvironment => "InvalidProcessEnvironment",
            ErrorCode::InvalidResourceLimits => "InvalidResourceLimits",
            ErrorCode::ProcessSpawnFailed => "ProcessSpawnFailed",
            ErrorCode::RuntimeUnsupported => "RuntimeUnsupported",
            ErrorCode::StaleProcessHandle => "StaleProcessHandle",
            ErrorCode::ProcessNotFound => "ProcessNotFound",
            ErrorCode::ProcessLost => "ProcessLost",
            ErrorCode::OperationInterrupted => "OperationInterrupted",
            ErrorCode::AgentUnavailable => "AgentUnavailable",
            ErrorCode::InvalidRequest => "InvalidRequest",
            ErrorCode::Unauthorized => "Unauthorized",
            ErrorCode::Internal => "Internal",
            ErrorCode::TooManyRequests => "TooManyRequests",
            ErrorCode::OutputFreed => "OutputFreed",
            ErrorCode::StdinOffsetMismatch => "StdinOffsetMismatch",
            ErrorCode::StdinUnavailable => "StdinUnavailable",
            ErrorCode::StdinConflict => "StdinConflict",
            ErrorCode::UserNotPermitted => "UserNotPermitted",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

/// Output stream(s): `Stdout`, `Stderr` or `Both`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum LogStream {
    Stdout,
    Stderr,
    #[default]
    Both,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRange {
    pub min: u16,
    pub max: u16,
}

impl Default for StatusRange {
    fn default() -> Self {
        StatusRange { min: 200, max: 399 }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ProbeKind {
    TcpSocket {
        port: u16,
    },
    HttpGet {
        port: u16,
        #[serde(default = "default_path")]
        path: String,
        #[serde(default)]
        status: StatusRange,
    },
    LogMatch {
        pattern: String,
        #[serde(default)]
        stream: LogStream,
    },
}

/// The answer to one port check (`POST /v1/processes/{id}/probe` with a [`ProbeKind`] body,
/// `tcpSocket` or `httpGet`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// The port took the connection (for HTTP: answered with a status in the range).
    pub ready: bool,
    /// What was seen (the HTTP status, why not ready).
    #[serde(default)]
    pub message: String,
}

fn default_path() -> String {
    "/".to_string()
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    pub probe: ProbeKind,
    #[serde(default = "default_period")]
    pub period_millis: u64,
    /// Not ready by then → `readinessTimedOut`; the process keeps running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
}

fn default_period() -> u64 {
    500
}

fn default_stop_signal() -> i32 {
    15
}

fn default_grace() -> u64 {
    5
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartRequest {
    /// Idempotency key: the SandboxProcess UID.
    pub exec_id: String,
    pub pod_uid: String,
    pub container: String,
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    #[serde(default = "default_stop_signal")]
    pub stop_signal: i32,
    #[serde(default = "default_grace")]
    pub grace_seconds: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Readiness>,
    /// Limits of the process's own cgroup (absent: only the container's limits apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceLimits>,
    /// A pipe to the process's stdin, held by its supervisor for the process's life (false:
    /// /dev/null).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdin: bool,
    /// The user the process runs as (absent: the container's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    /// Run the process on a pseudo-terminal of this initial size (absent: no terminal). Needs
    /// `stdin`: a terminal's input is the process's stdin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<TerminalSize>,
    /// Run the process again when it ends (`Never`: once). Never with `stdin` or `tty`.
    #[serde(default, skip_serializing_if = "RestartPolicy::is_never")]
    pub restart_policy: RestartPolicy,
    /// The `processes` object this process is (absent: a SandboxProcess's, whose object is in
    /// etcd). Opaque to the node: kept with the launch and copied into every record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Box<ProcessObject>>,
}

/// What the API server would store of a `processes` object, kept on its node instead: its
/// identity (the exec id is its uid), its labels and annotations, and its spec as created (env
/// with `valueFrom` references only, never their values).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessObject {
    pub namespace: String,
    pub name: String,
    /// RFC 3339, whole seconds.
    pub creation_timestamp: String,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
    /// The pod it runs in (the one named, or the one its selector chose).
    pub pod_name: String,
    /// The node it runs on.
    pub node_name: String,
    /// The spec (`SandboxProcessSpec`'s JSON).
    pub spec: serde_json::Value,
}

/// When a process that ended runs again, in the same container, after a back-off (as the
/// kubelet restarts a container): `Never` (default), `OnFailure` (an end other than exit code 0
/// without a signal), `Always`. `stop`, deletion, the pod's replacement and the container's end
/// end it for good, whatever the policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum RestartPolicy {
    #[default]
    Never,
    OnFailure,
    Always,
}

impl RestartPolicy {
    pub const ALL: [RestartPolicy; 3] = [Self::Never, Self::OnFailure, Self::Always];

    pub fn is_never(&self) -> bool {
        *self == Self::Never
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Never => "Never",
            Self::OnFailure => "OnFailure",
            Self::Always => "Always",
        }
    }

    /// The policy named `s` (as written in the spec), or `None`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// A terminal's window size, in character cells; also the body of a resize request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    pub rows: u16,
    pub cols: u16,
}

/// The bounds of a terminal's size (one outside is refused, not clamped); the CRD's schema is
/// built from these too.
pub const MAX_TERMINAL_ROWS: u16 = 1000;
pub const MAX_TERMINAL_COLS: u16 = 10000;

impl TerminalSize {
    /// When `spec.terminal` is not set: the VT100's.
    pub const DEFAULT: TerminalSize = TerminalSize { rows: 24, cols: 80 };

    /// `Err((field, message))`, field as in the SandboxProcess spec (`terminal.rows`).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !(1..=MAX_TERMINAL_ROWS).contains(&self.rows) {
            return Err((
                "terminal.rows",
                format!("{}: must be 1-{MAX_TERMINAL_ROWS}", self.rows),
            ));
        }
        if !(1..=MAX_TERMINAL_COLS).contains(&self.cols) {
            return Err((
                "terminal.cols",
                format!("{}: must be 1-{MAX_TERMINAL_COLS}", self.cols),
            ));
        }
        Ok(())
    }
}

/// The process's user, as a Pod container's `securityContext` fields of the same names. Each is
/// optional; what is left out is the container's own. The agent refuses anything the
/// container's own process could not become (`UserNotPermitted`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supplemental_groups: Vec<u32>,
    /// Refuse the start when the process would run as uid 0.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub run_as_non_root: bool,
}

/// Highest user or group id (`securityContext`): a Pod's bound (int32), which also keeps clear
/// of `(uid_t)-1`, the kernel's "no change".
pub const MAX_ID: u32 = i32::MAX as u32;
/// Most `securityContext.supplementalGroups`: far more than a process needs, and a bound for
/// the CRD's list rules.
pub const MAX_SUPPLEMENTAL_GROUPS: usize = 64;

/// Per-process limits, in the units the kernel takes. Each is optional.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceLimits {
    /// CPU bandwidth in millicores (CFS quota over a 100 ms period).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<u64>,
    /// Memory in bytes; reaching it OOM-kills within this process's tree only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Most tasks (processes and threads) the tree may hold at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
}

/// The bounds of the limits the agent applies (one outside is refused, not clamped); the CRD's
/// CEL rules are built from these too, so apply refuses what the agent would.
pub const MIN_CPU_MILLIS: u64 = 10;
pub const MAX_CPU_MILLIS: u64 = 1_000_000_000;
pub const MIN_MEMORY_BYTES: u64 = 4 << 20;
pub const MAX_MEMORY_BYTES: u64 = i64::MAX as u64;
pub const MAX_PIDS: u64 = i32::MAX as u64;

impl ResourceLimits {
    /// `Err((field, message))`, field as in the SandboxProcess spec.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(c) = self.cpu_millis {
            if c < MIN_CPU_MILLIS {
                return Err((
                    "resources.limits.cpu",
                    format!("{c}m: must be at least {MIN_CPU_MILLIS}m"),
                ));
            }
            if c > MAX_CPU_MILLIS {
                return Err(("resources.limits.cpu", format!("{c}m: too large")));
            }
        }
        if let Some(m) = self.memory_bytes {
            if m < MIN_MEMORY_BYTES {
                return Err((
                    "resources.limits.memory",
                    format!("{m} bytes: must be at least 4Mi"),
                ));
            }
            if m > MAX_MEMORY_BYTES {
                return Err(("resources.limits.memory", format!("{m} bytes: too large")));
            }
        }
        if let Some(p) = self.pids {
            if p == 0 || p > MAX_PIDS {
                return Err((
                    "resources.limits.pids",
                    format!("{p}: must be 1-{MAX_PIDS}"),
                ));
            }
        }
        Ok(())
    }
}

/// The line a `logMatch` readiness matched (≤ 256 bytes, UTF-8 lossy, without its newline) and
/// the log cursor just after it: `logs?since=<cursor>` resumes right after the match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogMatchHit {
    pub line: String,
    pub cursor: String,
}

/// What the process's tree used, from its cgroup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Highest memory use of the tree seen by the kernel (bytes; page cache included).
    pub memory_peak_bytes: u64,
    /// CPU time of the tree, user + system (nanoseconds).
    pub cpu_nanos: u64,
}

/// `stop: true` sends the stop sequence (signal to the group, SIGKILL after grace);
/// otherwise `signal` is delivered once to the process group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalRequest {
    #[serde(default)]
    pub stop: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_seconds: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Supervisor started, process not yet launched.
    Starting,
    Running,
    Exited,
    Error,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason {
    Exited,
    Signaled,
    TimedOut,
    Stopped,
    OOMKilled,
    ContainerExited,
    Lost,
}

/// How the process ended (`status.exit` too).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExitStatus {
    /// Exit code; 128+signal when killed by a signal.
    pub code: i32,
    /// The signal that killed the process, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// `true` when the process was stopped because `timeoutSeconds` expired.
    #[serde(default)]
    pub timed_out: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputSummary {
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// Last ≤ 2 KiB of combined output, UTF-8 lossy.
    #[serde(default)]
    pub tail: String,
    /// Bytes dropped by the retention cap.
    #[serde(default)]
    pub dropped_bytes: u64,
}

/// The process's stdin, when enabled: how many bytes it has accepted (the offset the next write
/// starts at) and whether it is closed (EOF sent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StdinState {
    pub bytes: u64,
    #[serde(default)]
    pub closed: bool,
}

/// Most bytes one stdin write carries; larger input is sent as several writes.
pub const MAX_STDIN_WRITE: usize = 1 << 20;

/// Who writes stdin. A terminal (`tty`) is shared like tmux's: each writer's bytes are placed
/// by offsets of its own (the bytes *it* has had taken), exactly once per writer, and appended
/// to the terminal's input in the order they arrive, so attachers never refuse each other.
/// Plain stdin keeps one offset for all writers (exactly once, in order); there `writer` and
/// `by` only name the writer whose bytes a refused one collided with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StdinWriter {
    /// One attach, kept across its reconnects ([`writer_id_ok`]).
    pub id: String,
    /// Who it writes for (the requesting user), named in refusals ([`writer_label`]).
    pub by: String,
}

/// Longest writer id.
pub const MAX_WRITER_ID: usize = 64;

/// A writer id: 1–64 of `[A-Za-z0-9_-]` (it is used as a key, and shown).
pub fn writer_id_ok(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_WRITER_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A writer id from 12 random bytes (24 hex digits): one per attach, minted by whoever starts it.
pub fn writer_id_from(random: [u8; 12]) -> String {
    random.iter().map(|b| format!("{b:02x}")).collect()
}

/// Longest writer label, in bytes.
pub const MAX_WRITER_LABEL: usize = 256;

/// The requester as a refusal names it: control characters dropped, at most
/// [`MAX_WRITER_LABEL`] bytes (cut on a character boundary). A user name is the API server's,
/// but it still travels in a message and a record: it is treated as any tenant's bytes.
pub fn writer_label(by: &str) -> String {
    let mut out = String::new();
    for c in by.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > MAX_WRITER_LABEL {
            break;
        }
        out.push(c);
    }
    out
}

/// A running terminal's current screen: escape sequences that redraw it on a terminal of the
/// same size (contents, colours, cursor, input modes; never a query), and the log cursor just
/// after the output it shows. An attach starts with it instead of the whole history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminalScreen {
    /// The redraw, base64. Empty when the screen is not kept ([`MAX_SCREEN_CELLS`]) or nothing
    /// was printed yet.
    #[serde(default)]
    pub data: String,
    /// The log cursor after the last byte the screen shows: the output follows from here.
    pub cursor: String,
    /// Whether a screen is kept for this terminal (false: too large; `data` is empty).
    pub kept: bool,
}

/// The largest terminal (rows × columns) whose screen is kept: 32 bytes a cell, twice with the
/// alternate screen, kept in the process's supervisor (e.g. 128×256; 24×80 is 1,920). Larger
/// terminals re-attach from their current end instead, with nothing replayed.
pub const MAX_SCREEN_CELLS: u32 = 32_768;

/// Everything known about one process; written by its supervisor, served by the agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessRecord {
    /// Empty only in a record shown to a tenant ([`ProcessRecord::withhold_node`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub exec_id: String,
    pub pod_uid: String,
    pub container: String,
    #[serde(default)]
    pub container_id: String,
    pub phase: Phase,
    /// PID as seen inside the container's PID namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_pid: Option<i32>,
    /// RFC 3339 timestamps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default)]
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<String>,
    #[serde(default)]
    pub readiness_timed_out: bool,
    #[serde(default)]
    pub stop_requested: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_reason: Option<EndReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
    #[serde(default)]
    pub output: OutputSummary,
    /// The root process has exited while other members of its cgroup still run; `exit` comes
    /// when the last one has ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub root_exited: bool,
    /// Processes in the tree's cgroup (refreshed while running; 0 at the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The line that satisfied a `logMatch` readiness, and the cursor just after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_match: Option<LogMatchHit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<StdinState>,
    /// Bumped on every write by the supervisor; lets readers drop stale updates.
    #[serde(default)]
    pub revision: u64,
    /// Runs started after the first (`restartPolicy`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restart_count: u32,
    /// How the previous run ended (after a restart, or while the next one waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<RunEnd>,
    /// While a restart waits out its back-off: when the next run starts (RFC 3339). The phase
    /// stays `Running`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_until: Option<String>,
    /// The `processes` object this process is ([`StartRequest::object`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Box<ProcessObject>>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The end of one run of a restarting process, and where its output lies in the ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEnd {
    pub exit: ExitStatus,
    pub end_reason: EndReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    pub finished_at: String,
    /// Log cursors: the run's output is what lies after `output_from` up to `output_until`
    /// (`logs --previous`).
    pub output_from: String,
    pub output_until: String,
}

impl ProcessRecord {
    /// A hash of the record's wire form (its every field): what tells a record sent again
    /// unchanged from a changed one without keeping the record.
    pub fn digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        serde_json::to_vec(self).unwrap_or_default().hash(&mut h);
        h.finish()
    }

    /// What a tenant may read of the record: without the node's identifiers (the node's pid of
    /// the process, the agent's id for it). Every response a tenant can read that carries a
    /// record passes through here (the log's `end` event, the signal's answer).
    pub fn withhold_node(&mut self) {
        self.host_pid = None;
        self.exec_id.clear();
    }

    /// A record in phase `Starting`: nothing launched yet.
    pub fn starting(exec_id: &str, pod_uid: &str, container: &str, container_id: &str) -> Self {
        ProcessRecord {
            exec_id: exec_id.to_string(),
            pod_uid: pod_uid.to_string(),
            container: container.to_string(),
            container_id: container_id.to_string(),
            phase: Phase::Starting,
            pid: None,
            host_pid: None,
            started_at: None,
            finished_at: None,
            ready: false,
            ready_at: None,
            readiness_timed_out: false,
            stop_requested: false,
            exit: None,
            end_reason: None,
            error: None,
            output: OutputSummary::default(),
            root_exited: false,
            processes: None,
            usage: None,
            log_match: None,
            stdin: None,
            revision: 0,
            restart_count: 0,
            last_exit: None,
            backoff_until: None,
            object: None,
        }
    }

    pub fn is_final(&self) -> bool {
        matches!(self.phase, Phase::Exited | Phase::Error)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessList {
    pub items: Vec<ProcessRecord>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogQuery {
    /// Opaque cursor from a previous event: return what came after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    #[serde(default)]
    pub follow: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<LogStream>,
    /// The output of the previous run of a restarting process (`kubectl logs --previous`);
    /// not with `since` or `follow`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub previous: bool,
}

impl LogQuery {
    /// The one rule of a log query the operator and the agent both enforce: the previous run's
    /// output has ended, so `previous` takes no `follow` or `since`.
    pub fn check(&self) -> Result<(), String> {
        if self.previous && (self.follow || self.since.is_some()) {
            return Err(
                "previous: not with follow or since (the previous run's output has ended)".into(),
            );
        }
        Ok(())
    }
}

/// A log stream that has sent nothing for this long sends an empty line (a keepalive). Every
/// reader skips empty lines (NDJSON), so readers that predate it are not affected.
pub const LOG_KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(5);

/// A log reader that has read nothing, not even a keepalive, for this long takes its connection
/// for dead (a peer gone without FIN or RST sends nothing) and resumes from its last cursor.
/// Four keepalives missed: a slow hop is not mistaken for a dead one.
pub const LOG_SILENCE_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

/// The log stream's one line on the wire: NDJSON, one [`LogEvent`] per line, and empty lines
/// (keepalives, [`LOG_KEEPALIVE`]) between them that carry nothing.
pub fn log_line_is_keepalive(line: &[u8]) -> bool {
    line.iter().all(|b| b.is_ascii_whitespace())
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum LogEvent {
    /// `data` is base64 (output is bytes, not necessarily UTF-8).
    #[serde(rename_all = "camelCase")]
    Data {
        stream: LogStream,
        data: String,
        /// Unix time in nanoseconds when the supervisor read the bytes.
        ts_nanos: u64,
        cursor: String,
    },
    /// Output between `from` and `to` was dropped by the retention cap.
    #[serde(rename_all = "camelCase")]
    Truncated { dropped_bytes: u64, cursor: String },
    /// This response ends here and more output follows (or may, while the process runs): read
    /// on with `since=cursor`. Sent when `maxBytes` was reached (never when the output is
    /// already drained), or by the operator when its connection to the node's agent went silent
    /// during a read with `maxBytes` (it cannot know the budget left: the reader does).
    #[serde(rename_all = "camelCase")]
    More { cursor: String },
    /// The last event. With `record`: the process has ended and its output is drained. Without
    /// (a read without `follow` of a process still running): nothing more was there yet.
    #[serde(rename_all = "camelCase")]
    End {
        cursor: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        record: Option<Box<ProcessRecord>>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum WatchEvent {
    /// Current state of a process (sent for each at the start, then on every change).
    Upsert { record: Box<ProcessRecord> },
    /// The record was forgotten.
    Deleted { exec_id: String },
    /// The initial list is complete.
    Synced,
    /// Sent every `interval_ms` while nothing else is: a reader that hears nothing for a few
    /// intervals knows the agent is gone even when the connection gives no sign (a partitioned
    /// or powered-off node sends no reset). Readers that do not know it skip it.
    #[serde(rename_all = "camelCase")]
    Heartbeat { interval_ms: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_ids_and_labels() {
        assert!(writer_id_ok("a") && writer_id_ok("Ab-9_z") && writer_id_ok(&"x".repeat(64)));
        let minted = writer_id_from([0xab; 12]);
        assert!(writer_id_ok(&minted) && minted.len() == 24 && minted.starts_with("abab"));
        for bad in ["", "a b", "a/b", "é", "a\n", &"x".repeat(65)] {
            assert!(!writer_id_ok(bad), "{bad:?}");
        }
        assert_eq!(writer_label("alice"), "alice");
        assert_eq!(writer_label("a\nb\u{7f}c\u{85}d"), "abcd");
        let long = "é".repeat(200); // 400 bytes
        let l = writer_label(&long);
        assert!(l.len() <= MAX_WRITER_LABEL && l.len() == 256 && l.chars().all(|c| c == 'é'));
    }

    #[test]
    fn start_request_defaults() {
        let r: StartRequest = serde_json::from_str(
            r#"{"execId":"a","podUid":"p","container":"c","command":["sleep","1"]}"#,
        )
        .unwrap();
        assert_eq!(r.stop_signal, 15);
        assert_eq!(r.grace_seconds, 5);
        assert!(r.env.is_empty());
    }

    #[test]
    fn probe_defaults() {
        let r: Readiness = serde_json::from_str(r#"{"probe":{"httpGet":{"port":8080}}}"#).unwrap();
        assert_eq!(r.period_millis, 500);
        assert_eq!(
            r.probe,
            ProbeKind::HttpGet {
                port: 8080,
                path: "/".into(),
                status: StatusRange { min: 200, max: 399 }
            }
        );
    }

    #[test]
    fn previous_takes_no_follow_or_since() {
        let q = |previous, follow, since: Option<&str>| LogQuery {
            since: since.map(str::to_string),
            follow,
            max_bytes: None,
            stream: None,
            previous,
        };
        assert_eq!(q(true, false, None).check(), Ok(()));
        assert_eq!(q(false, true, Some("c1.1.0")).check(), Ok(()));
        for bad in [q(true, true, None), q(true, false, Some("c1.1.0"))] {
            assert!(
                bad.check().unwrap_err().starts_with("previous: "),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn log_event_shape() {
        let e = LogEvent::Truncated {
            dropped_bytes: 5,
            cursor: "c1".into(),
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"type":"truncated","droppedBytes":5,"cursor":"c1"}"#
        );
        let e = LogEvent::More {
            cursor: "c2".into(),
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"type":"more","cursor":"c2"}"#
        );
    }
}
