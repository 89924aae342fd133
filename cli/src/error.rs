//! Errors and the exit status each one means.
use sandbox_api::crd::ProcessError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("kubeconfig: {0}")]
    Config(String),
    /// The API server (or the subresource API behind it) refused or failed the request.
    #[error("{0}")]
    Api(String),
    #[error("{0}")]
    Timeout(String),
    /// A log stream ended without its End event (connection lost).
    #[error("reading the log stream: {0}")]
    StreamBroken(String),
    /// The process could not run or was lost (phase Error).
    #[error("sandboxprocess {name} failed: {}: {}", error.code.as_str(), error.message)]
    Process { name: String, error: ProcessError },
    /// Output was asked of a process that was never started (phase Error before the start).
    #[error("sandboxprocess {name} has no output: the process could not start: {}: {}", error.code.as_str(), error.message)]
    NoOutput { name: String, error: ProcessError },
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Process { .. } => 125,
            _ => 1,
        }
    }
}

impl From<kube::Error> for CliError {
    fn from(e: kube::Error) -> Self {
        match e {
            // The Status message is what kubectl prints ("... is forbidden: User ...").
            kube::Error::Api(s) => CliError::Api(format!("{} ({})", s.message, s.reason)),
            other => CliError::Api(other.to_string()),
        }
    }
}
