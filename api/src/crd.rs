//! The `SandboxProcess` custom resource (`sandbox.dev/v1alpha1`): one process run inside a pod's
//! container by the node agent, with its status.
//!
//! The OpenAPI schema (bounds, patterns, defaults and CEL `x-kubernetes-validations`, including
//! the immutability rules) holds what the API server must enforce at apply; every rule, those
//! included, is in `validate` once, for the operator and the agent's door.
use crate::names;
/// Leaf types the object shares with the wire: one definition, so they cannot drift.
pub use crate::wire::{ExitStatus, LogStream, RestartPolicy};
use crate::wire::{MAX_CPU_MILLIS, MAX_MEMORY_BYTES, MIN_CPU_MILLIS, MIN_MEMORY_BYTES};
use crate::wire::{MAX_TERMINAL_COLS, MAX_TERMINAL_ROWS};
use crate::wire_rules::Violation;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of every resource of this project.
pub const GROUP: &str = "sandbox.dev";
/// The version of [`SandboxProcess`].
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of [`SandboxProcess`], as written in manifests and server-side apply patches.
pub const API_VERSION: &str = "sandbox.dev/v1alpha1";
/// `kind` of [`SandboxProcess`].
pub const KIND: &str = "SandboxProcess";
/// Finalizer that makes deletion stop and forget the process. The operator adds it before the
/// first start; the clients send it at create, which spares that write (one of five for a short
/// process: create, finalizer, status, delete, finalizer removal).
pub const FINALIZER: &str = "sandbox.dev/process";

pub use crate::wire::MAX_SECONDS;
pub use crate::wire_rules::{MAX_ARGS, MAX_ARG_LEN, MAX_ENV, MAX_PATH_LEN};

/// A process to run inside a container of a pod in the same namespace, as `kubectl exec` would.
/// Everything except `stop` and `ttlSecondsAfterFinished` is immutable after creation.
// The printcolumn entries repeat `type_ = ...`, which clippy mistakes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "sandbox.dev",
    version = "v1alpha1",
    kind = "SandboxProcess",
    plural = "sandboxprocesses",
    shortname = "sbp",
    category = "sandbox",
    namespaced,
    status = "SandboxProcessStatus",
    derive = "PartialEq",
    doc = "A process run inside a pod's container by the sandbox node agent.",
    printcolumn(name = "Pod", type_ = "string", json_path = ".status.podName"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Restarts",
        type_ = "integer",
        json_path = ".status.restartCount"
    ),
    printcolumn(name = "Exit", type_ = "integer", json_path = ".status.exit.code"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.endReason"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.podName) != has(self.podSelector)", "message": "exactly one of podName, podSelector must be set"},
    {"rule": "has(self.podName) == has(oldSelf.podName) && (!has(self.podName) || self.podName == oldSelf.podName)", "message": "podName is immutable", "fieldPath": ".podName"},
    {"rule": "has(self.podSelector) == has(oldSelf.podSelector) && (!has(self.podSelector) || self.podSelector == oldSelf.podSelector)", "message": "podSelector is immutable", "fieldPath": ".podSelector"},
    {"rule": "has(self.container) == has(oldSelf.container) && (!has(self.container) || self.container == oldSelf.container)", "message": "container is immutable", "fieldPath": ".container"},
    {"rule": "self.command == oldSelf.command", "message": "command is immutable", "fieldPath": ".command"},
    {"rule": "has(self.securityContext) == has(oldSelf.securityContext) && (!has(self.securityContext) || self.securityContext == oldSelf.securityContext)", "message": "securityContext is immutable", "fieldPath": ".securityContext"},
    {"rule": "has(self.workingDir) == has(oldSelf.workingDir) && (!has(self.workingDir) || self.workingDir == oldSelf.workingDir)", "message": "workingDir is immutable", "fieldPath": ".workingDir"},
    {"rule": "has(self.env) == has(oldSelf.env) && (!has(self.env) || self.env == oldSelf.env)", "message": "env is immutable", "fieldPath": ".env"},
    {"rule": "has(self.timeoutSeconds) == has(oldSelf.timeoutSeconds) && (!has(self.timeoutSeconds) || self.timeoutSeconds == oldSelf.timeoutSeconds)", "message": "timeoutSeconds is immutable", "fieldPath": ".timeoutSeconds"},
    {"rule": "has(self.readiness) == has(oldSelf.readiness) && (!has(self.readiness) || self.readiness == oldSelf.readiness)", "message": "readiness is immutable", "fieldPath": ".readiness"},
    {"rule": "self.stopSignal == oldSelf.stopSignal", "message": "stopSignal is immutable", "fieldPath": ".stopSignal"},
    {"rule": "self.terminationGracePeriodSeconds == oldSelf.terminationGracePeriodSeconds", "message": "terminationGracePeriodSeconds is immutable", "fieldPath": ".terminationGracePeriodSeconds"},
    {"rule": "has(self.startDeadlineSeconds) == has(oldSelf.startDeadlineSeconds) && (!has(self.startDeadlineSeconds) || self.startDeadlineSeconds == oldSelf.startDeadlineSeconds)", "message": "startDeadlineSeconds is immutable", "fieldPath": ".startDeadlineSeconds"},
    {"rule": "has(self.resources) == has(oldSelf.resources) && (!has(self.resources) || self.resources == oldSelf.resources)", "message": "resources is immutable", "fieldPath": ".resources"},
    {"rule": "has(self.stdin) == has(oldSelf.stdin) && (!has(self.stdin) || self.stdin == oldSelf.stdin)", "message": "stdin is immutable", "fieldPath": ".stdin"},
    {"rule": "has(self.tty) == has(oldSelf.tty) && (!has(self.tty) || self.tty == oldSelf.tty)", "message": "tty is immutable", "fieldPath": ".tty"},
    {"rule": "has(self.terminal) == has(oldSelf.terminal) && (!has(self.terminal) || self.terminal == oldSelf.terminal)", "message": "terminal is immutable", "fieldPath": ".terminal"},
    {"rule": "!has(self.terminal) || (has(self.tty) && self.tty)", "message": "terminal requires tty", "fieldPath": ".terminal"},
    {"rule": "has(self.restartPolicy) == has(oldSelf.restartPolicy) && (!has(self.restartPolicy) || self.restartPolicy == oldSelf.restartPolicy)", "message": "restartPolicy is immutable", "fieldPath": ".restartPolicy"},
    {"rule": "!has(self.restartPolicy) || self.restartPolicy == 'Never' || !((has(self.stdin) && self.stdin) || (has(self.tty) && self.tty))", "message": "restartPolicy must be Never with stdin or tty", "fieldPath": ".restartPolicy"}
]))]
pub struct SandboxProcessSpec {
    /// Target pod, in the same namespace. Exactly one of `podName`, `podSelector`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1, max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [
        name_rule("podName", names::SUBDOMAIN, names::SUBDOMAIN_RULE)
    ]))]
    pub pod_name: String,

    /// Target pod by labels, in the same namespace, instead of `podName`: the operator picks one
    /// whose target container is running and ready — the oldest (creation time, then name) — and
    /// records it in `status.podName` before the start; from then on it is as if `podName` named
    /// it (replaced → `StaleProcessHandle`, never run again elsewhere). None matches → `Pending`
    /// `PodNotFound` until one does. Creating the object needs `create pods/exec` on every pod of
    /// the namespace (the pod is chosen later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<Box<PodSelector>>,

    /// Container of the pod. Default: the pod's `kubectl.kubernetes.io/default-container`
    /// annotation, else its first container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    #[schemars(extend("x-kubernetes-validations" = [
        name_rule("container", names::LABEL, names::LABEL_RULE)
    ]))]
    pub container: Option<String>,

    /// argv of the process (no shell); the first item is the executable.
    #[schemars(length(min = 1, max = 1024), inner(length(max = 32768)))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "size(self) == 0 || self[0] != ''", "message": "command[0] (the executable) must not be empty"}
    ]))]
    pub command: Vec<String>,

    /// Working directory (absolute). Default: the container's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.startsWith('/')", "message": "workingDir must be an absolute path"}
    ]))]
    pub working_dir: Option<String>,

    /// Environment overlaid on the container's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub env: Vec<EnvVar>,

    /// The user and groups the process runs as (`runAsUser`, `runAsGroup`,
    /// `supplementalGroups`, `runAsNonRoot`, as in a Pod container's `securityContext`), never
    /// more privilege than the container's own process has. Default: the container's user.
    /// Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<Box<SecurityContextSpec>>,

    /// Lifetime in seconds (1–2147483647); on expiry the process is stopped
    /// (`endReason: TimedOut`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub timeout_seconds: Option<i64>,

    /// When the process counts as ready. Without it, started = ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Box<ReadinessSpec>>,

    /// `true`: send `stopSignal` to the process group, SIGKILL after
    /// `terminationGracePeriodSeconds`.
    #[serde(default)]
    pub stop: bool,

    /// `true`: the process's stdin is a pipe its supervisor keeps open for the process's life;
    /// write it through the `sandboxprocesses/stdin` subresource (`kubectl sandbox attach`,
    /// `run -i`), exactly once per byte offset; closing it (or `stop`) sends EOF. `false`
    /// (default): /dev/null. Immutable.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdin: bool,

    /// `true`: the process runs on a pseudo-terminal its supervisor holds for the process's
    /// whole life, as under `kubectl exec -t`: the terminal is its stdin, stdout, stderr and
    /// controlling terminal; its output is one stream (stdout); `TERM` is the container's, else
    /// `xterm`. Implies stdin: a terminal's input is always open, whatever `stdin` says (and
    /// `status.stdin` counts it). Closing stdin stops taking input, it sends no EOF: type it
    /// (Ctrl-D, `\u0004`). Immutable.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,

    /// The terminal's initial window size (only with `tty`; default 24 rows, 80 columns); a
    /// resize changes it later. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<TerminalSpec>,

    /// Run the process again when it ends, in the same container, as the kubelet restarts a
    /// container: `Never` (default), `OnFailure` (after an exit code other than 0 or a signal,
    /// a timeout included), `Always`. The next run starts after a back-off of 10 s, doubled
    /// after each restart up to 5 min, back to 10 s after a run of 10 min; meanwhile the phase
    /// stays `Running` with reason `BackOff`. `timeoutSeconds` bounds each run; `stop`,
    /// deletion, the pod's replacement and the container's end end it for good.
    /// `status.restartCount` counts restarts, `status.lastExit` says how the previous run
    /// ended. Not with `stdin` or `tty`. Immutable.
    #[serde(default, skip_serializing_if = "RestartPolicy::is_never")]
    pub restart_policy: RestartPolicy,

    /// Signal sent on stop and timeout.
    #[serde(default = "default_stop_signal")]
    #[schemars(range(min = 1, max = 64))]
    pub stop_signal: i32,

    /// Seconds between the stop signal and SIGKILL (0–2147483647).
    #[serde(default = "default_grace")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub termination_grace_period_seconds: i64,

    /// Delete this object that many seconds after the process ended (0–2147483647).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub ttl_seconds_after_finished: Option<i64>,
    /// Give up when the process has not started this many seconds after the object was created
    /// (default 600): a final `Error` `StartDeadlineExceeded`. Bounds how long after its
    /// creator's rights were checked a process may still start (1–2147483647).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub start_deadline_seconds: Option<i64>,
    /// Limits for this process and everything it starts (its own cgroup, inside the
    /// container's): reaching the memory limit OOM-kills within this tree only, never the
    /// container or other processes. Never above the container's own limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Box<ResourcesSpec>>,
}

/// `spec.terminal`: a window size in character cells.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct TerminalSpec {
    /// Rows (lines), 1-1000. Default 24.
    #[serde(default = "default_rows")]
    #[schemars(range(min = 1, max = MAX_TERMINAL_ROWS))]
    pub rows: i32,
    /// Columns, 1-10000. Default 80.
    #[serde(default = "default_cols")]
    #[schemars(range(min = 1, max = MAX_TERMINAL_COLS))]
    pub cols: i32,
}

fn default_rows() -> i32 {
    crate::wire::TerminalSize::DEFAULT.rows.into()
}

fn default_cols() -> i32 {
    crate::wire::TerminalSize::DEFAULT.cols.into()
}

/// When `startDeadlineSeconds` is not set.
pub const DEFAULT_START_DEADLINE_SECONDS: i64 = 600;

/// `spec.resources`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ResourcesSpec {
    /// Upper bounds for the process tree; each is optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceLimitsSpec>,
}

/// `spec.resources.limits`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ResourceLimitsSpec {
    /// CPU as a Kubernetes quantity (`500m`, `2`), 10m-1000000: CFS bandwidth for the tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [limit_rule(
        "resources.limits.cpu",
        &format!("{}m", MIN_CPU_MILLIS - 1),
        &format!("{MAX_CPU_MILLIS}m"),
        &format!("{MIN_CPU_MILLIS}m-{}", MAX_CPU_MILLIS / 1000),
    )]))]
    pub cpu: Option<crate::quantity::Quantity>,
    /// Memory as a Kubernetes quantity (`64Mi`, `1G`), at least 4Mi: the tree's memory cgroup
    /// limit; reaching it ends the process with `endReason: OOMKilled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [limit_rule(
        "resources.limits.memory",
        &(MIN_MEMORY_BYTES - 1).to_string(),
        &MAX_MEMORY_BYTES.to_string(),
        &format!("4Mi-{MAX_MEMORY_BYTES}"),
    )]))]
    pub memory: Option<crate::quantity::Quantity>,
    /// Most processes and threads the tree may hold at once (1–2147483647); `fork` fails
    /// inside beyond it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub pids: Option<i64>,
}

impl ResourceLimitsSpec {
    /// The agent's limits, in kernel units; `Err` names the field.
    pub fn to_wire(&self) -> Result<crate::wire::ResourceLimits, Violation> {
        let cpu = match &self.cpu {
            Some(q) => Some(
                q.millicores()
                    .map_err(|m| Violation::new("resources.limits.cpu", m))?,
            ),
            None => None,
        };
        let memory = match &self.memory {
            Some(q) => Some(
                q.bytes()
                    .map_err(|m| Violation::new("resources.limits.memory", m))?,
            ),
            None => None,
        };
        let pids = match self.pids {
            Some(p) if p < 1 => {
                return Err(Violation::new(
                    "resources.limits.pids",
                    "must be at least 1",
                ))
            }
            Some(p) => Some(p as u64),
            None => None,
        };
        let w = crate::wire::ResourceLimits {
            cpu_millis: cpu,
            memory_bytes: memory,
            pids,
        };
        w.check().map_err(|(f, m)| Violation::new(f, m))?;
        Ok(w)
    }
}

/// The CEL twin of a [`names`] check, with the validator's pattern.
fn name_rule(field: &str, pattern: &str, rule: &str) -> serde_json::Value {
    serde_json::json!({
        "rule": format!("self.matches('{pattern}')"),
        "message": format!("{field} must be {rule}"),
    })
}

/// The CEL twin of [`crate::wire::ResourceLimits::check`]: the agent rounds a quantity up to a
/// whole unit (millicore, byte), so it reaches the minimum exactly when it is above the unit
/// before it (`above`), and stays within the maximum exactly when it is at most `at_most`.
/// The value is an int or a string (`string(self)` reads both).
fn limit_rule(field: &str, above: &str, at_most: &str, range: &str) -> serde_json::Value {
    let q = "quantity(string(self))";
    serde_json::json!({
        "rule": format!(
            "isQuantity(string(self)) && {q}.compareTo(quantity('{above}')) > 0 && {q}.compareTo(quantity('{at_most}')) <= 0"
        ),
        "message": format!("{field} must be a quantity of {range}"),
    })
}

fn default_stop_signal() -> i32 {
    15
}

fn default_grace() -> i64 {
    5
}

/// A label selector (as `metav1.LabelSelector`): every `matchLabels` pair and every
/// `matchExpressions` requirement must hold; an empty selector matches every pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSelector {
    /// Labels the pod must have, with these values (at most 64).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    // Values by the schema's pattern: a CEL rule over a map's keys costs more than the API
    // server's budget (keys have no length bound), so keys are the validator's alone.
    #[schemars(extend("maxProperties" = 64, "additionalProperties" = {
        "type": "string", "maxLength": 63, "pattern": names::LABEL_VALUE,
    }))]
    pub match_labels: std::collections::BTreeMap<String, String>,
    /// Requirements on the pod's labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One requirement of a `podSelector` on the pod's labels (as
/// `metav1.LabelSelectorRequirement`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)", "message": "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist"}
]))]
pub struct SelectorRequirement {
    /// The label key.
    #[schemars(length(min = 1, max = 317))]
    #[schemars(extend("x-kubernetes-validations" = [
        name_rule("podSelector.matchExpressions[].key", names::LABEL_KEY, names::LABEL_KEY_RULE)
    ]))]
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: SelectorOperator,
    /// The values for `In` and `NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 63)))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": format!("self.all(v, v.matches('{}'))", names::LABEL_VALUE),
        "message": format!("podSelector.matchExpressions[].values must each be {}", names::LABEL_VALUE_RULE),
    }]))]
    pub values: Vec<String>,
}

/// The operator of a [`SelectorRequirement`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl PodSelector {
    /// Whether a pod with these labels is selected.
    pub fn matches(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let v = labels.get(&r.key);
                match r.operator {
                    SelectorOperator::In => v.is_some_and(|v| r.values.contains(v)),
                    SelectorOperator::NotIn => v.is_none_or(|v| !r.values.contains(v)),
                    SelectorOperator::Exists => v.is_some(),
                    SelectorOperator::DoesNotExist => v.is_none(),
                }
            })
    }
}

/// One environment variable: a literal `value`, or `valueFrom` a Secret or ConfigMap.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.valueFrom) || self.value == ''", "message": "env value and valueFrom are exclusive"}
]))]
pub struct EnvVar {
    /// Variable name: 1–256 characters, no `=` and no control character (a newline, a tab, NUL:
    /// a Pod refuses them too); unique within `env`.
    #[schemars(length(min = 1, max = 256))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "!self.contains('=')", "message": "env name must not contain '='"},
        {"rule": "!self.contains('\\u0000')", "message": "env name must not contain a NUL character"},
        {"rule": "!self.matches('\\\\p{Cc}')", "message": "env name must not contain a control character"}
    ]))]
    pub name: String,
    /// Value, verbatim (no `$(VAR)` expansion): up to 32768 characters, no NUL. Default "".
    #[serde(default)]
    #[schemars(length(max = 32768))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "!self.contains('\\u0000')", "message": "env value must not contain a NUL character"}
    ]))]
    pub value: String,
    /// The value from a key of a Secret or a ConfigMap in the object's namespace, read when the
    /// process starts (never shown in status, Events or logs). Creating the object needs `get`
    /// on each referenced Secret and ConfigMap. Missing (and not `optional`): the process stays
    /// `Pending` until it appears or `startDeadlineSeconds` passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
}

/// Where an env value comes from: exactly one of `secretKeyRef`, `configMapKeyRef`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.secretKeyRef) != has(self.configMapKeyRef)", "message": "valueFrom must set exactly one of secretKeyRef, configMapKeyRef"}
]))]
pub struct EnvVarSource {
    /// A key of a Secret in the object's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeySelector>,
    /// A key of a ConfigMap in the object's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<KeySelector>,
}

/// One key of a Secret or ConfigMap, as in a Pod's `env[].valueFrom`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct KeySelector {
    /// The Secret's or ConfigMap's name (a DNS subdomain).
    #[schemars(length(min = 1, max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [
        name_rule("valueFrom name", names::SUBDOMAIN, names::SUBDOMAIN_RULE)
    ]))]
    pub name: String,
    /// The key in its data.
    #[schemars(length(min = 1, max = 253))]
    #[schemars(regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
    /// When the object or the key does not exist, leave the variable out instead of waiting.
    #[serde(default)]
    pub optional: bool,
}

impl EnvVarSource {
    /// (kind, reference) of the one source set.
    pub fn reference(&self) -> Option<(&'static str, &KeySelector)> {
        match (&self.secret_key_ref, &self.config_map_key_ref) {
            (Some(r), None) => Some(("Secret", r)),
            (None, Some(r)) => Some(("ConfigMap", r)),
            _ => None,
        }
    }
}

/// Readiness: exactly one of `tcpSocket`, `httpGet`, `logMatch`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "(has(self.tcpSocket) ? 1 : 0) + (has(self.httpGet) ? 1 : 0) + (has(self.logMatch) ? 1 : 0) == 1",
     "message": "readiness must set exactly one of tcpSocket, httpGet, logMatch"}
]))]
pub struct ReadinessSpec {
    /// Ready once a TCP connection to the port (in the pod's network namespace) succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TcpSocketProbe>,
    /// Ready once an HTTP GET returns a status in the range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpGetProbe>,
    /// Ready once a line of output matches the pattern.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_match: Option<LogMatchProbe>,
    /// Probe period in milliseconds.
    #[serde(default = "default_period")]
    #[schemars(range(min = 10, max = 3_600_000))]
    pub period_millis: i64,
    /// Seconds (1–2147483647): not ready by then → `Ready=False`, reason `ReadinessTimeout`;
    /// the process keeps running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub timeout_seconds: Option<i64>,
}

fn default_period() -> i64 {
    500
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct TcpSocketProbe {
    /// TCP port (1–65535), connected to inside the pod's network namespace (a listener on
    /// 127.0.0.1 counts).
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct HttpGetProbe {
    /// TCP port (1–65535) of the HTTP server, inside the pod's network namespace.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Request path, starting with `/`, printable ASCII without spaces (it goes into the request
    /// line as is). Default `/`.
    #[serde(default = "default_path")]
    #[schemars(length(min = 1, max = 2048))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.startsWith('/')", "message": "httpGet.path must start with '/'"},
        {"rule": "self.matches('^[!-~]*$')", "message": "httpGet.path must be printable ASCII without spaces or control characters"}
    ]))]
    pub path: String,
    /// Accepted status codes (inclusive). Default 200–399.
    #[serde(default)]
    pub status: StatusRange,
}

fn default_path() -> String {
    "/".into()
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.min <= self.max", "message": "status.min must not exceed status.max"}
]))]
pub struct StatusRange {
    /// Lowest accepted HTTP status code (100–599, ≤ `max`).
    #[schemars(range(min = 100, max = 599))]
    pub min: i32,
    /// Highest accepted HTTP status code (100–599, ≥ `min`).
    #[schemars(range(min = 100, max = 599))]
    pub max: i32,
}

impl Default for StatusRange {
    fn default() -> Self {
        StatusRange { min: 200, max: 399 }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct LogMatchProbe {
    /// Regular expression matched against each line.
    #[schemars(length(min = 1, max = 1024))]
    pub pattern: String,
    /// Output matched: `Stdout`, `Stderr` or `Both` (default).
    #[serde(default)]
    pub stream: LogStream,
}

mod security;
mod state;
mod status;
pub use security::SecurityContextSpec;
pub use state::{Exit, NoExit};
pub use status::*;

#[cfg(test)]
mod tests;
