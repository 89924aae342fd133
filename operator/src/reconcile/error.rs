//! The reconcile's one error type, each variant with the label it is counted under.
use std::time::Duration;

use crate::agent::AgentError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] kube::Error),
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error("cleanup: {0}")]
    Cleanup(String),
    #[error("object has no {0}")]
    Incomplete(&'static str),
    /// A bug met by one object: caught at the reconcile boundary so that it cannot take the
    /// operator, and every other object with it, down; retried with backoff like any error.
    #[error("reconcile panicked: {0}")]
    Panicked(String),
    #[error("status write: no answer from the API server within {0:?}")]
    StatusWriteTimeout(Duration),
}

impl Error {
    /// Label of the `reconcile_errors` metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Finalizer(_) => "finalizer",
            Error::Agent(AgentError::Unreachable { .. }) => "agent_unreachable",
            Error::Agent(AgentError::Api { .. }) => "agent",
            Error::StatusWriteTimeout(_) => "status_write_timeout",
            Error::Cleanup(_) => "cleanup",
            Error::Incomplete(_) => "incomplete_object",
            Error::Panicked(_) => "panic",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_have_metric_labels() {
        let e = Error::Agent(AgentError::Unreachable {
            url: "u".into(),
            message: "m".into(),
        });
        assert_eq!(e.metric_label(), "agent_unreachable");
        assert_eq!(Error::Cleanup("x".into()).metric_label(), "cleanup");
    }
}
