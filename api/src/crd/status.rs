//! `status` of a SandboxProcess: what the operator observed, the codes and reasons it uses, and
//! the condition types.
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ExitStatus;

/// Observed state, written by the operator only.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxProcessStatus {
    /// `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Pending` (not started yet), `Running`, `Exited` (ended; see `exit` and `endReason`) or
    /// `Error` (see `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The target pod: `spec.podName`, or the pod `spec.podSelector` chose (set before the
    /// start, then never changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// Node of the pod the process was started in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// UID of the pod the process was started in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "podUID")]
    pub pod_uid: Option<String>,
    /// UID of the pod named `podName` when the operator first saw it: the process starts only
    /// in that pod, never in one created later under the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "targetPodUID")]
    pub target_pod_uid: Option<String>,
    /// Name of the container the process runs in: `spec.container`, or the pod's default
    /// container when that is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    /// Runtime ID of the container the process runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "containerID")]
    pub container_id: Option<String>,
    /// PID as seen inside the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// When the process started (whole seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the process ended, or the start failed for good (whole seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// When the process became ready (whole seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<Time>,
    /// How the process ended: its exit code (128+signal when a signal killed it), the signal,
    /// and whether `timeoutSeconds` expired. Set only when the process really exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitStatus>,
    /// Why the process ended: `Exited` (on its own), `Signaled`, `TimedOut`, `Stopped`,
    /// `OOMKilled`, `ContainerExited`, `PodReplaced`, `PodDeleted` or `Lost`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_reason: Option<EndReason>,
    /// Set when `phase` is `Error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ProcessError>,
    /// Output counters and the last ≤ 2 KiB (refreshed at most every 30 s while running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputStatus>,
    /// `true` while the process itself has exited but processes it started still run: the
    /// object stays `Running` until the whole tree has ended, then `exit` is the root's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub root_exited: bool,
    /// Processes of this tree still running (its cgroup's members; refreshed at most every 30 s, and when the root exits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<i32>,
    /// What the tree used (from its cgroup; refreshed at most every 30 s, final at the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageStatus>,
    /// The output line that satisfied a `logMatch` readiness, and the log cursor just after it
    /// (`kubectl sandbox logs --after CURSOR` resumes right after the match).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_match: Option<LogMatchStatus>,
    /// With `spec.stdin`: the bytes stdin has taken (refreshed with the output while it runs) and
    /// whether it is closed (EOF sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<StdinStatus>,
    /// Runs started after the first (`spec.restartPolicy`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restart_count: i32,
    /// How the previous run ended, with `spec.restartPolicy` (as a container's
    /// `lastState.terminated`); `kubectl sandbox logs --previous` prints its output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<Box<LastExitStatus>>,
    /// `Ready`, `Succeeded`, `Reconciling`, `Stalled` (kstatus-compatible).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    Pending,
    Running,
    Exited,
    Error,
}

impl Phase {
    pub const ALL: [Phase; 4] = [Phase::Pending, Phase::Running, Phase::Exited, Phase::Error];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Exited => "Exited",
            Phase::Error => "Error",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum EndReason {
    Exited,
    Signaled,
    TimedOut,
    Stopped,
    OOMKilled,
    ContainerExited,
    PodReplaced,
    PodDeleted,
    Lost,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Exited => "Exited",
            EndReason::Signaled => "Signaled",
            EndReason::TimedOut => "TimedOut",
            EndReason::Stopped => "Stopped",
            EndReason::OOMKilled => "OOMKilled",
            EndReason::ContainerExited => "ContainerExited",
            EndReason::PodReplaced => "PodReplaced",
            EndReason::PodDeleted => "PodDeleted",
            EndReason::Lost => "Lost",
        }
    }
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ProcessError {
    /// Why the process could not run or was lost (a machine-readable code).
    pub code: ErrorCode,
    /// What happened, for people; names the offending field when the spec was the cause.
    pub message: String,
}

/// `status.error.code`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ErrorCode {
    ContainerNotFound,
    ContainerUnavailable,
    InvalidProcessCwd,
    InvalidProcessEnvironment,
    InvalidResourceLimits,
    ProcessSpawnFailed,
    /// The container's runtime cannot be used to launch a process (its RuntimeClass handler, or a
    /// runc the agent refuses); the message names it.
    RuntimeUnsupported,
    StaleProcessHandle,
    ProcessNotFound,
    ProcessLost,
    OperationInterrupted,
    AgentUnavailable,
    /// Not started within `startDeadlineSeconds` of the object's creation.
    StartDeadlineExceeded,
    /// `spec.securityContext` asks for more privilege than the container's own process has (or
    /// root with `runAsNonRoot`); the message names the field and the container's user.
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
            ErrorCode::StartDeadlineExceeded => "StartDeadlineExceeded",
            ErrorCode::UserNotPermitted => "UserNotPermitted",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputStatus {
    /// Bytes written to stdout so far (all of them, also those no longer retained).
    pub stdout_bytes: i64,
    /// Bytes written to stderr so far (all of them, also those no longer retained).
    pub stderr_bytes: i64,
    /// Last ≤ 2 KiB of combined output (UTF-8, lossy).
    #[serde(default)]
    pub tail: String,
}

/// `status.logMatch`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LogMatchStatus {
    /// The matched line without its newline (at most 256 bytes, UTF-8, invalid bytes replaced).
    pub line: String,
    /// Opaque log cursor just after the matched line.
    pub cursor: String,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// `status.lastExit`: the end of the previous run of a restarting process.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastExitStatus {
    /// Its exit code (128+signal when a signal killed it), the signal, and whether
    /// `timeoutSeconds` expired.
    pub exit: ExitStatus,
    /// Why it ended (`Exited`, `Signaled`, `TimedOut`, `OOMKilled`).
    pub end_reason: EndReason,
    /// When the previous run started (whole seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the previous run ended (whole seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}

/// `status.usage`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageStatus {
    /// Highest memory use of the tree (bytes, page cache included).
    pub memory_peak_bytes: i64,
    /// CPU time of the tree, user + system (milliseconds).
    pub cpu_time_millis: i64,
}

/// `status.stdin`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StdinStatus {
    /// Bytes stdin has taken. While the process runs it is refreshed with the output (at most
    /// every 30 s); `GET …/stdin` gives the live offset a writer resumes from.
    pub bytes: i64,
    /// Stdin is closed (EOF sent): by a write with `close=true`, a `stop`, or the process's end.
    pub closed: bool,
}

/// Condition types.
pub mod condition {
    pub const READY: &str = "Ready";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const RECONCILING: &str = "Reconciling";
    pub const STALLED: &str = "Stalled";

    /// Reason of `Ready` (and of `Reconciling`, `Stalled`) when a process with `readiness` ended
    /// without ever having been ready (`Ready=False`, `Stalled=True`, whatever its exit code;
    /// `Succeeded` still follows the exit code).
    pub const EXITED_BEFORE_READY: &str = "ExitedBeforeReady";
}

impl SandboxProcessStatus {
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}
