//! Typed errors. A process that could not run, or was lost, is [`Error::Process`] with the
//! object's `status.error.code` ([`Error::code`]), so callers branch on the same codes the
//! object shows (`ContainerNotFound`, `InvalidProcessCwd`, `StaleProcessHandle`, ...).
use sandbox_api::crd::{EndReason, ErrorCode};

/// Everything the library can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A caller's value is unusable; names the field or option.
    #[error("{field}: {message}")]
    InvalidArgument { field: String, message: String },
    /// The Kubernetes API (or the subresource API behind it) refused or failed a request: the
    /// `Status` it answered with (`code` is the HTTP status, `reason` e.g. `Forbidden`).
    #[error("{message} ({reason})")]
    Api {
        code: u16,
        reason: String,
        message: String,
    },
    /// No connection, TLS, or a body that could not be read.
    #[error("{0}")]
    Transport(String),
    /// `start` with an id that names an object created with a different spec (or by someone
    /// else): the process it names is not this one.
    #[error("sandboxprocess {name} already exists with a different spec: {message}")]
    IdInUse { name: String, message: String },
    /// The process could not run, or was lost: phase `Error`, with `status.error`.
    #[error("sandboxprocess {name} failed: {code}: {message}")]
    Process {
        name: String,
        code: ErrorCode,
        message: String,
    },
    /// The object was deleted while waiting on it (or never existed).
    #[error("sandboxprocess {0} not found")]
    NotFound(String),
    /// A local wait ran out of time; the process was not touched. `state` says what the
    /// process was waiting for then (phase, reason, message), when it could be read.
    #[error(
        "timed out after {:?} waiting for sandboxprocess {name} to {what}{}",
        timeout,
        suffix(state)
    )]
    Timeout {
        name: String,
        what: &'static str,
        timeout: std::time::Duration,
        state: String,
    },
    /// A call that needs a started process waited `timeout` for the start in vain (a missing
    /// pod, a pod not running yet, no agent): [`Error::code`] is the reason it waits
    /// (`PodNotFound`, `PodPending`, `AgentUnavailable`, ...), `state` says it in full.
    #[error(
        "sandboxprocess {name} has not started after {:?} ({what} needs a started process): {state}",
        timeout
    )]
    NotStarted {
        name: String,
        what: &'static str,
        timeout: std::time::Duration,
        reason: Option<String>,
        state: String,
    },
    /// The process ended before its output matched (`wait_for_log`).
    #[error("sandboxprocess {name} ended before its output matched {pattern:?}")]
    ExitedBeforeLog { name: String, pattern: String },
    /// The process ended before it was ready (`wait_ready`, `wait_for_port`).
    #[error("sandboxprocess {name} ended before it was ready: {message}")]
    ExitedBeforeReady { name: String, message: String },
    /// The process ended without an exit status of its own (stopped before it started).
    #[error("sandboxprocess {name} ended ({reason}) without an exit code")]
    EndedWithoutExit { name: String, reason: EndReason },
    /// A log stream was cut without its end event, and could not be resumed.
    #[error("reading the output of sandboxprocess {name}: {message}")]
    StreamBroken { name: String, message: String },
}

impl Error {
    /// The machine-readable code: `status.error.code` for [`Error::Process`] (e.g.
    /// `ContainerNotFound`), the API's `reason` for [`Error::Api`] (`Forbidden`, `Conflict`,
    /// ...), else a fixed name per variant (`Timeout`, `ExitedBeforeLog`, ...).
    pub fn code(&self) -> &str {
        match self {
            Error::Process { code, .. } => code.as_str(),
            Error::Api { reason, .. } => reason,
            Error::InvalidArgument { .. } => "InvalidArgument",
            Error::Transport(_) => "Transport",
            Error::IdInUse { .. } => "IdInUse",
            Error::NotFound(_) => "NotFound",
            Error::Timeout { .. } => "Timeout",
            Error::NotStarted { reason, .. } => reason.as_deref().unwrap_or("NotStarted"),
            Error::ExitedBeforeLog { .. } => "ExitedBeforeLog",
            Error::ExitedBeforeReady { .. } => "ExitedBeforeReady",
            Error::EndedWithoutExit { .. } => "EndedWithoutExit",
            Error::StreamBroken { .. } => "StreamBroken",
        }
    }

    /// `status.error.code` when the process could not run or was lost.
    pub fn process_code(&self) -> Option<ErrorCode> {
        match self {
            Error::Process { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether a local wait ran out of time ([`Error::Timeout`], [`Error::NotStarted`]).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. } | Error::NotStarted { .. })
    }

    /// Whether a retry of the same request may succeed (throttled, unavailable, cut off).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Api { code, .. } => matches!(code, 429 | 500 | 502 | 503 | 504),
            Error::Transport(_) | Error::StreamBroken { .. } => true,
            _ => false,
        }
    }

    pub(crate) fn invalid(field: &str, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => Error::Api {
                code: s.code,
                reason: s.reason.clone(),
                message: s.message.clone(),
            },
            other => Error::Transport(other.to_string()),
        }
    }
}

fn suffix(state: &str) -> String {
    if state.is_empty() {
        String::new()
    } else {
        format!(": {state}")
    }
}

/// The library's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
