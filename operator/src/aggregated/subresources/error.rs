//! Errors of the extension API: each answered as the Kubernetes `Status` kubectl prints, and the
//! agent's refusals mapped onto them.
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandbox_api::wire::ErrorCode;
use serde_json::json;
use tracing::warn;

use crate::agent::AgentError;

/// Errors of the extension API, answered as a Kubernetes `Status` (what kubectl prints).
#[derive(Debug, thiserror::Error)]
pub enum SubresourceError {
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Conflict(String),
    /// 409, reason `AlreadyExists`: a create of a name another object holds.
    #[error("{0}")]
    AlreadyExists(String),
    /// 422, reason `Invalid`: the object breaks a rule (the message names the field).
    #[error("{0}")]
    Invalid(String),
    /// 415: a PATCH in a form not served (strategic merge, server-side apply).
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    TooManyRequests(String),
    #[error("{0}")]
    Gone(String),
    #[error("{0}")]
    Internal(String),
}

impl SubresourceError {
    fn status(&self) -> (StatusCode, &'static str) {
        match self {
            SubresourceError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            SubresourceError::Forbidden(_) => (StatusCode::FORBIDDEN, "Forbidden"),
            SubresourceError::NotFound(_) => (StatusCode::NOT_FOUND, "NotFound"),
            SubresourceError::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
            SubresourceError::Conflict(_) => (StatusCode::CONFLICT, "Conflict"),
            SubresourceError::AlreadyExists(_) => (StatusCode::CONFLICT, "AlreadyExists"),
            SubresourceError::Invalid(_) => (StatusCode::UNPROCESSABLE_ENTITY, "Invalid"),
            SubresourceError::UnsupportedMediaType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UnsupportedMediaType")
            }
            SubresourceError::Unavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable")
            }
            SubresourceError::TooManyRequests(_) => {
                (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests")
            }
            SubresourceError::Gone(_) => (StatusCode::GONE, "Gone"),
            SubresourceError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
        }
    }
}

impl IntoResponse for SubresourceError {
    fn into_response(self) -> Response {
        let (code, reason) = self.status();
        let body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": reason,
            "code": code.as_u16(),
        });
        (code, Json(body)).into_response()
    }
}

pub type Result<T, E = SubresourceError> = std::result::Result<T, E>;

/// What the caller is told when the agent refuses or cannot be reached.
pub fn agent_error(e: AgentError, name: &str) -> SubresourceError {
    agent_error_for(e, "sandboxprocess", name)
}

/// As [`agent_error`], naming the object as `kind` (`process` for the processes resource).
pub fn agent_error_for(e: AgentError, kind: &str, name: &str) -> SubresourceError {
    match e {
        AgentError::Api { error, .. } if error.code == ErrorCode::ProcessNotFound => {
            SubresourceError::NotFound(format!(
                "the agent holds no process for {kind} \"{name}\" (its output is gone)"
            ))
        }
        AgentError::Api { error, .. } if error.code == ErrorCode::InvalidRequest => {
            SubresourceError::BadRequest(error.message)
        }
        AgentError::Api { error, .. } if error.code == ErrorCode::TooManyRequests => {
            SubresourceError::TooManyRequests(error.message)
        }
        AgentError::Api { error, .. } if error.code == ErrorCode::OutputFreed => {
            SubresourceError::Gone(error.message)
        }
        AgentError::Api { error, .. } => {
            SubresourceError::Conflict(format!("{}: {}", error.code, error.message))
        }
        // The node's address and the agent's own words (paths on the node) stay in the
        // operator's log: a tenant is told what to do.
        e @ AgentError::Unreachable { .. } => {
            warn!(%kind, %name, error = %e, "the node's agent did not answer");
            SubresourceError::Unavailable(format!(
                "the node's agent did not answer for {kind} \"{name}\" (restarting, or \
                 unreachable); try again (the operator's log has the cause)"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No node-internal identifier reaches a tenant through an agent's failure.
    #[test]
    fn an_unreachable_agent_is_not_named_to_a_tenant() {
        let e = AgentError::Unreachable {
            url: "https://node-7.agent.sandbox-system.svc:8443".into(),
            message: "connecting to /var/lib/sandbox-agent/procs/x/control.sock: refused".into(),
        };
        let m = agent_error(e, "p").to_string();
        assert!(!m.contains("node-7") && !m.contains("/var/lib"), "{m}");
        assert!(
            m.contains("sandboxprocess \"p\"") && m.contains("try again"),
            "{m}"
        );
    }

    /// The agent's stdin refusals reach the caller as 409 with their code first.
    #[test]
    fn stdin_refusals_keep_their_code() {
        for code in [ErrorCode::StdinConflict, ErrorCode::StdinOffsetMismatch] {
            let e = AgentError::Api {
                url: "u".into(),
                error: sandbox_api::wire::ApiError {
                    code,
                    message: "m".into(),
                },
            };
            match agent_error(e, "p") {
                SubresourceError::Conflict(m) => assert_eq!(m, format!("{code}: m")),
                other => panic!("{other:?}"),
            }
        }
    }
    #[test]
    fn errors_are_kubernetes_statuses() {
        let r = SubresourceError::Forbidden("no".into()).into_response();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
    }
}
