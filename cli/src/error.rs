//! Errors and the exit status each one means.
use sandbox_client::{Error, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("kubeconfig: {0}")]
    Config(String),
    #[error("{0}")]
    Client(#[from] Error),
    /// Output was asked of a process that was never started (phase Error before the start).
    #[error("sandboxprocess {name} has no output: the process could not start: {code}: {message}")]
    NoOutput {
        name: String,
        code: ErrorCode,
        message: String,
    },
    #[error("{0}")]
    Failed(String),
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

impl CliError {
    /// A shell's habits: 127 the executable was not found, 126 it is not executable; 125 the
    /// process could not run or was lost (phase Error); 2 bad usage; 1 anything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Client(Error::InvalidArgument { .. }) => 2,
            CliError::Client(e @ Error::Process { .. }) => spawn_exit_code(e).unwrap_or(125),
            _ => 1,
        }
    }

    /// `logs` is not `run --wait`: a process that never started is a plain failure (1).
    pub fn into_no_output(self) -> CliError {
        match self {
            CliError::Client(Error::Process {
                name,
                code,
                message,
            }) => CliError::NoOutput {
                name,
                code,
                message,
            },
            e => e,
        }
    }
}

/// 127 / 126 for a `ProcessSpawnFailed` whose message says the executable was not found / is
/// not executable (the agent's checks before the start, as a shell reports them).
fn spawn_exit_code(e: &Error) -> Option<u8> {
    let Error::Process { code, message, .. } = e else {
        return None;
    };
    if *code != ErrorCode::ProcessSpawnFailed {
        return None;
    }
    if message.contains("not found") || message.contains("No such file") {
        Some(127)
    } else if message.contains("ermission denied") || message.contains("is a directory") {
        Some(126)
    } else {
        None
    }
}

impl From<kube::Error> for CliError {
    fn from(e: kube::Error) -> Self {
        CliError::Client(e.into())
    }
}

/// A library argument error in the CLI's words: the flag it came from.
pub fn flag(e: Error, flag: &str) -> CliError {
    match e {
        Error::InvalidArgument { message, .. } => CliError::Usage(format!("{flag}: {message}")),
        e => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spawn(message: &str) -> CliError {
        CliError::Client(Error::Process {
            name: "p".into(),
            code: ErrorCode::ProcessSpawnFailed,
            message: message.into(),
        })
    }

    #[test]
    fn exit_codes_like_a_shell() {
        assert_eq!(
            spawn("cannot start \"nope\": executable file not found in $PATH").exit_code(),
            127
        );
        assert_eq!(
            spawn("cannot start \"/x\": No such file or directory").exit_code(),
            127
        );
        assert_eq!(
            spawn("cannot start \"/etc/hosts\": permission denied (not executable)").exit_code(),
            126
        );
        assert_eq!(
            spawn("cannot start \"/tmp\": is a directory").exit_code(),
            126
        );
        assert_eq!(
            spawn("fork: resource temporarily unavailable").exit_code(),
            125
        );
        let lost = CliError::Client(Error::Process {
            name: "p".into(),
            code: ErrorCode::ContainerNotFound,
            message: "no container x".into(),
        });
        assert_eq!(lost.exit_code(), 125);
        assert_eq!(lost.into_no_output().exit_code(), 1);
        assert_eq!(CliError::Usage("x".into()).exit_code(), 2);
    }
}
