//! Typed agent errors; each maps to a wire [`ErrorCode`] and an HTTP status.
use sandbox_wire::wire::{ApiError, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("container {container:?} of pod {pod_uid} not found: {detail}")]
    ContainerNotFound {
        pod_uid: String,
        container: String,
        detail: String,
    },
    #[error("container {container:?} of pod {pod_uid} is not running: {detail}")]
    ContainerUnavailable {
        pod_uid: String,
        container: String,
        detail: String,
    },
    #[error("working directory {cwd:?}: {reason}")]
    InvalidProcessCwd { cwd: String, reason: String },
    #[error("env: {0}")]
    InvalidProcessEnvironment(String),
    #[error("cannot start {argv0:?}: {reason}")]
    ProcessSpawnFailed { argv0: String, reason: String },
    /// `spec.securityContext` asks for more than the container's own process has.
    #[error("spec.{field}: {reason} (the container runs as {container_user})")]
    UserNotPermitted {
        field: String,
        reason: String,
        container_user: String,
    },
    #[error("{0}")]
    RuntimeUnsupported(String),
    #[error("process {0} not found")]
    ProcessNotFound(String),
    #[error("process {0}: supervisor vanished without an exit record")]
    ProcessLost(String),
    #[error("{0}")]
    OperationInterrupted(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A start request that breaks the process contract (`sandbox_wire::validate`): the same field,
    /// message and code the operator gives for the same spec.
    #[error("{0}")]
    Invalid(#[from] sandbox_wire::wire_rules::Violation),
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    #[error("container runtime: {0}")]
    Runtime(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Internal(String),
    /// The process's output is no longer kept (the node's output budget or retention period).
    #[error("{0}")]
    OutputFreed(String),
    /// A cap on what callers may hold open was reached; retry later.
    #[error("{0}")]
    TooManyRequests(String),
    /// A stdin write not at the accepted end (the message names the offset to write from).
    #[error("{0}")]
    StdinOffsetMismatch(String),
    #[error("{0}")]
    StdinUnavailable(String),
    /// A stdin write over accepted bytes that differs from them.
    #[error("{0}")]
    StdinConflict(String),
}

impl AgentError {
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> AgentError {
        let context = context.into();
        move |source| AgentError::Io { context, source }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            AgentError::ContainerNotFound { .. } => ErrorCode::ContainerNotFound,
            AgentError::ContainerUnavailable { .. } => ErrorCode::ContainerUnavailable,
            AgentError::InvalidProcessCwd { .. } => ErrorCode::InvalidProcessCwd,
            AgentError::InvalidProcessEnvironment(_) => ErrorCode::InvalidProcessEnvironment,
            AgentError::ProcessSpawnFailed { .. } => ErrorCode::ProcessSpawnFailed,
            AgentError::UserNotPermitted { .. } => ErrorCode::UserNotPermitted,
            AgentError::RuntimeUnsupported(_) => ErrorCode::RuntimeUnsupported,
            AgentError::ProcessNotFound(_) => ErrorCode::ProcessNotFound,
            AgentError::ProcessLost(_) => ErrorCode::ProcessLost,
            AgentError::OperationInterrupted(_) => ErrorCode::OperationInterrupted,
            AgentError::InvalidRequest(_) => ErrorCode::InvalidRequest,
            AgentError::Invalid(v) => v.code,
            AgentError::Unauthorized(_) => ErrorCode::Unauthorized,
            AgentError::Runtime(_) => ErrorCode::ContainerUnavailable,
            AgentError::Io { .. } | AgentError::Internal(_) => ErrorCode::Internal,
            AgentError::TooManyRequests(_) => ErrorCode::TooManyRequests,
            AgentError::OutputFreed(_) => ErrorCode::OutputFreed,
            AgentError::StdinOffsetMismatch(_) => ErrorCode::StdinOffsetMismatch,
            AgentError::StdinUnavailable(_) => ErrorCode::StdinUnavailable,
            AgentError::StdinConflict(_) => ErrorCode::StdinConflict,
        }
    }

    /// Label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        self.code().as_str()
    }

    pub fn http_status(&self) -> u16 {
        if let AgentError::Invalid(_) = self {
            return 400;
        }
        match self.code() {
            ErrorCode::InvalidRequest
            | ErrorCode::InvalidProcessCwd
            | ErrorCode::InvalidProcessEnvironment
            | ErrorCode::InvalidResourceLimits => 400,
            ErrorCode::TooManyRequests => 429,
            ErrorCode::UserNotPermitted => 403,
            ErrorCode::OutputFreed => 410,
            ErrorCode::Unauthorized => 401,
            ErrorCode::ProcessNotFound | ErrorCode::ContainerNotFound => 404,
            ErrorCode::ContainerUnavailable
            | ErrorCode::ProcessSpawnFailed
            | ErrorCode::RuntimeUnsupported
            | ErrorCode::StdinOffsetMismatch
            | ErrorCode::StdinUnavailable
            | ErrorCode::StdinConflict => 409,
            ErrorCode::OperationInterrupted | ErrorCode::AgentUnavailable => 503,
            _ => 500,
        }
    }

    pub fn to_api(&self) -> ApiError {
        ApiError {
            code: self.code(),
            message: self.to_string(),
        }
    }
}

impl From<sandbox_node_protocol::exec_id::InvalidExecId> for AgentError {
    fn from(e: sandbox_node_protocol::exec_id::InvalidExecId) -> Self {
        AgentError::InvalidRequest(e.0)
    }
}
