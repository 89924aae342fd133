//! Signal names and numbers as `kill -s` takes them.
use crate::error::{Error, Result};

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
    ("STKFLT", 16),
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
    ("IOT", 6),
    ("POLL", 29),
];

/// glibc's SIGRTMIN/SIGRTMAX as `kill -l` shows them (32 and 33 are the C library's own).
const RTMIN: i32 = 34;
const RTMAX: i32 = 64;

/// `RTMIN`, `RTMIN+N`, `RTMAX`, `RTMAX-N` (as `kill -l` names 34–64).
fn realtime(name: &str) -> Option<i32> {
    let (base, rest, sign) = if let Some(r) = name.strip_prefix("RTMIN") {
        (RTMIN, r, 1)
    } else if let Some(r) = name.strip_prefix("RTMAX") {
        (RTMAX, r, -1)
    } else {
        return None;
    };
    let n = match rest {
        "" => 0,
        r => {
            let digits = if sign > 0 {
                r.strip_prefix('+')?
            } else {
                r.strip_prefix('-')?
            };
            digits.parse::<i32>().ok()?
        }
    };
    let sig = base + sign * n;
    (RTMIN..=RTMAX).contains(&sig).then_some(sig)
}

/// `9`, `KILL`, `SIGKILL`, `sigkill`, `RTMIN+6` → the signal number (1–64).
pub fn parse(s: &str) -> Result<i32> {
    let bad = || {
        Error::invalid(
            "signal",
            format!("{s:?} is not a signal number (1-64) or name (e.g. TERM, KILL, USR1)"),
        )
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
        .or_else(|| realtime(name))
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
        assert_eq!(parse("STKFLT").unwrap(), 16);
        assert_eq!(parse("SIGRTMIN").unwrap(), 34);
        assert_eq!(parse("rtmin+6").unwrap(), 40);
        assert_eq!(parse("RTMAX-1").unwrap(), 63);
        assert_eq!(parse("RTMAX").unwrap(), 64);
    }

    #[test]
    fn refusals_name_the_flag() {
        for bad in [
            "0", "65", "-1", "SIGFOO", "", "RTMIN+31", "RTMAX-31", "RTMIN-1", "RTMIN+x",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("signal:"), "{bad}: {e}");
        }
    }
}
