//! The exec id: the SandboxProcess UID, used as a directory name and socket path component.

/// Longest accepted id; keeps `<state>/procs/<id>/control.sock` under the 108-byte sun_path limit
/// for state dirs of reasonable length.
pub const MAX_LEN: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecId(String);

/// An id that cannot be an exec id; its message names the field (the agent answers 400 with it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidExecId(pub String);

impl ExecId {
    pub fn parse(s: &str) -> Result<Self, InvalidExecId> {
        let ok = !s.is_empty()
            && s.len() <= MAX_LEN
            && !s.starts_with('.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
        if ok {
            Ok(ExecId(s.to_string()))
        } else {
            Err(InvalidExecId(format!(
                "execId {s:?}: must be 1-{MAX_LEN} characters of [A-Za-z0-9._-], not starting with '.'"
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ExecId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_uids_and_rejects_paths() {
        assert!(ExecId::parse("3f0c8a9e-1b2c-4d5e-8f90-0123456789ab").is_ok());
        for bad in ["", "..", "../x", "a/b", ".hidden", &"x".repeat(65), "a b"] {
            assert!(ExecId::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
