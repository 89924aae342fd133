//! The status to write when the API server refuses one for its content: the same facts (phase,
//! exit, end reason, error code, counters, conditions' states) without text a tenant could have
//! put there, so an object never lacks its final status because of what its process printed.
use sandbox_api::crd::SandboxProcessStatus;

/// Stands for the output tail and the logMatch line in a withheld status.
pub const WITHHELD: &str = "[withheld: the API server refused this status";

/// Longest message kept (escaped) in a withheld status: the API server's own bounds are far above.
const MAX_MESSAGE: usize = 1024;

/// Whether an API answer refuses a write for what it holds (not for who sent it, or when): a
/// request the server could not decode (400), a body too large (413), an invalid object (422,
/// also a validating admission policy's default).
pub fn refuses_content(code: u16) -> bool {
    matches!(code, 400 | 413 | 422)
}

/// `s` with the output tail and the logMatch line replaced by a note that says why, and every
/// message cut to printable ASCII (other characters escaped as `\u{..}`).
pub fn withheld(s: &SandboxProcessStatus, refusal: &str) -> SandboxProcessStatus {
    let note = format!(
        "{WITHHELD} ({}); `kubectl sandbox logs` has the output]",
        printable(refusal, 200)
    );
    let mut w = s.clone();
    if let Some(o) = w.output.as_mut() {
        o.tail = note.clone();
    }
    if let Some(m) = w.log_match.as_mut() {
        m.line = WITHHELD.to_string() + "]";
    }
    if let Some(e) = w.error.as_mut() {
        e.message = printable(&e.message, MAX_MESSAGE);
    }
    for c in &mut w.conditions {
        c.message = printable(&c.message, MAX_MESSAGE);
    }
    w
}

/// `s` in printable ASCII, at most `max` bytes: no parser or validator can refuse it.
pub fn printable(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let piece = if matches!(c, ' '..='~') {
            c.to_string()
        } else {
            c.escape_unicode().to_string()
        };
        if out.len() + piece.len() > max {
            break;
        }
        out.push_str(&piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use sandbox_api::crd::{
        ErrorCode, LogMatchStatus, OutputStatus, Phase, ProcessError, SandboxProcessStatus,
    };

    fn hostile() -> SandboxProcessStatus {
        SandboxProcessStatus {
            phase: Some(Phase::Error),
            output: Some(OutputStatus {
                stdout_bytes: 5,
                stderr_bytes: 1,
                tail: "x\u{7f}y\u{fffe}".into(),
            }),
            log_match: Some(LogMatchStatus {
                line: "ready\u{85}".into(),
                cursor: "c1".into(),
            }),
            error: Some(ProcessError {
                code: ErrorCode::ProcessSpawnFailed,
                message: "exec \"a\u{81}b\": no such file".into(),
            }),
            conditions: vec![Condition {
                type_: "Stalled".into(),
                status: "True".into(),
                reason: "ProcessSpawnFailed".into(),
                message: "é\u{7f}".repeat(2000),
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                observed_generation: None,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn keeps_the_facts_and_drops_the_tenant_text() {
        let s = hostile();
        let w = withheld(
            &s,
            "400 BadRequest: yaml: control characters are not allowed",
        );
        assert_eq!(w.phase, s.phase);
        let o = w.output.as_ref().unwrap();
        assert_eq!((o.stdout_bytes, o.stderr_bytes), (5, 1));
        assert!(o.tail.starts_with(WITHHELD) && o.tail.contains("400 BadRequest"));
        let m = w.log_match.as_ref().unwrap();
        assert_eq!(m.cursor, "c1");
        assert!(m.line.starts_with(WITHHELD));
        let e = w.error.as_ref().unwrap();
        assert_eq!(e.code, ErrorCode::ProcessSpawnFailed);
        assert_eq!(e.message, "exec \"a\\u{81}b\": no such file");
        let c = &w.conditions[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "ProcessSpawnFailed")
        );
        assert!(c.message.len() <= MAX_MESSAGE && c.message.starts_with("\\u{e9}\\u{7f}"));
        let text = serde_json::to_string(&w).unwrap();
        assert!(text.chars().all(|c| matches!(c, ' '..='~')), "{text}");
    }

    #[test]
    fn printable_never_cuts_an_escape() {
        assert_eq!(printable("ab\u{7f}", 4), "ab");
        assert_eq!(printable("ab\u{7f}", 8), "ab\\u{7f}");
        assert_eq!(printable("plain", 100), "plain");
    }

    #[test]
    fn only_content_refusals_fall_back() {
        for (code, content) in [
            (400, true),
            (413, true),
            (422, true),
            (401, false),
            (403, false),
            (404, false),
            (409, false),
            (429, false),
            (500, false),
            (503, false),
        ] {
            assert_eq!(refuses_content(code), content, "{code}");
        }
    }
}
