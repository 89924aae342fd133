//! The resourceVersion of this replica's `processes`, and when a watch may resume from one.
//!
//! No store orders the changes of every node, so each replica numbers the changes it sees:
//! `epoch * 10^6 + seq`, the epoch this replica's start in milliseconds, `seq` counting from 1.
//! Decimal, increasing, never `0` (what apimachinery expects of a resourceVersion it compares).
//! Another replica's (or an earlier run's) numbers fall outside `[base, current]`: a watch
//! resumed from one gets 410 Gone and relists, as from one older than the window.

/// How many of the latest changes a watch can resume after (the apiserver's watch cache keeps a
/// window too); older is 410 Gone.
pub const WINDOW: usize = 4096;

#[derive(Debug)]
pub struct Versions {
    base: u64,
    seq: u64,
}

/// What a client's `resourceVersion` asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked {
    /// Absent or `0`: the current state (a list), or the current state then its changes (a
    /// watch).
    Any,
    /// A number: the changes after it.
    After(u64),
}

impl Asked {
    /// The `resourceVersion` parameter; an unparseable one names itself.
    pub fn parse(rv: Option<&str>) -> Result<Asked, String> {
        match rv {
            None | Some("") | Some("0") => Ok(Asked::Any),
            Some(s) => s
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0 && !s.starts_with('0') && !s.starts_with('+'))
                .map(Asked::After)
                .ok_or_else(|| format!("resourceVersion: {s:?} is not a resource version")),
        }
    }
}

impl Versions {
    pub fn new(epoch_ms: u64) -> Versions {
        Versions {
            base: epoch_ms.saturating_mul(1_000_000),
            seq: 0,
        }
    }

    /// The rv of the state now (the last change's, or the base before any).
    pub fn current(&self) -> u64 {
        (self.base + self.seq).max(1)
    }

    /// The rv of the next change.
    pub fn next(&mut self) -> u64 {
        self.seq += 1;
        self.base + self.seq
    }

    /// Whether a watch may resume after `rv`, with `oldest` the first change still in the window:
    /// an rv of ours, and no change after it fell out of the window.
    pub fn resumable(&self, rv: u64, oldest: Option<u64>) -> bool {
        if rv < self.base || rv > self.current() {
            return false;
        }
        match oldest {
            // Every change after rv is kept when the oldest kept is at most rv + 1.
            Some(o) => o <= rv + 1,
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_decimal_increasing_and_never_zero() {
        let mut v = Versions::new(1_700_000_000_000);
        assert_eq!(v.current(), 1_700_000_000_000_000_000);
        let a = v.next();
        let b = v.next();
        assert!(b > a && a > 0 && v.current() == b);
        assert_eq!(Versions::new(0).current(), 1);
    }

    /// The resume rules, as a table: (rv asked, oldest change kept) → resumable.
    #[test]
    fn a_watch_resumes_only_from_an_rv_of_ours_still_in_the_window() {
        let mut v = Versions::new(1000); // base 1_000_000_000
        for _ in 0..10 {
            v.next();
        }
        let base = 1_000_000_000;
        let cases = [
            (base + 10, Some(base + 1), true, "the current rv"),
            (base, Some(base + 1), true, "the base, every change kept"),
            (
                base + 4,
                Some(base + 5),
                true,
                "the change after it is the oldest kept",
            ),
            (
                base + 4,
                Some(base + 6),
                false,
                "a change after it fell out of the window",
            ),
            (
                base + 11,
                Some(base + 1),
                false,
                "newer than any we made: another replica's",
            ),
            (
                base - 1,
                None,
                false,
                "older than our start: an earlier run's or another replica's",
            ),
            (999_000_000_000_000, None, false, "far older"),
            (base + 3, None, true, "nothing changed since we began"),
        ];
        for (rv, oldest, want, why) in cases {
            assert_eq!(v.resumable(rv, oldest), want, "{why}");
        }
    }

    #[test]
    fn resource_versions_parse_as_apimachinery_writes_them() {
        assert_eq!(Asked::parse(None), Ok(Asked::Any));
        assert_eq!(Asked::parse(Some("")), Ok(Asked::Any));
        assert_eq!(Asked::parse(Some("0")), Ok(Asked::Any));
        assert_eq!(Asked::parse(Some("42")), Ok(Asked::After(42)));
        for bad in ["-1", "x", "007", "+5", "1.5", "99999999999999999999999"] {
            let e = Asked::parse(Some(bad)).unwrap_err();
            assert!(e.starts_with("resourceVersion: "), "{e}");
        }
    }
}
