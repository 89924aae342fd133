//! Signal names and numbers as `kill -s` takes them.
use crate::error::CliError;

const NAMES: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("CHLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("PWR", 30),
    ("SYS", 31),
];

/// `9`, `KILL`, `SIGKILL`, `sigkill` → 9.
pub fn parse(s: &str) -> Result<i32, CliError> {
    let bad = || {
        CliError::Usage(format!(
            "--signal: {s:?} is not a signal number (1-64) or name (e.g. TERM, KILL, USR1)"
        ))
    };
    if let Ok(n) = s.parse::<i32>() {
        return if (1..=64).contains(&n) {
            Ok(n)
        } else {
            Err(bad())
        };
    }
    let up = s.to_ascii_uppercase();
    let name = up.strip_prefix("SIG").unwrap_or(&up);
    NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_names() {
        assert_eq!(parse("9").unwrap(), 9);
        assert_eq!(parse("KILL").unwrap(), 9);
        assert_eq!(parse("SIGusr1").unwrap(), 10);
        assert_eq!(parse("term").unwrap(), 15);
        assert_eq!(parse("64").unwrap(), 64);
    }

    #[test]
    fn refusals_name_the_flag() {
        for bad in ["0", "65", "-1", "SIGFOO", ""] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("--signal"), "{bad}: {e}");
        }
    }
}
