//! Wall-clock helpers: RFC 3339 UTC timestamps without a date-time dependency.
use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// `2026-11-30T06:11:13.123456Z` (microsecond precision, always UTC).
pub fn rfc3339(nanos: u64) -> String {
    let secs = (nanos / 1_000_000_000) as i64;
    let micros = (nanos % 1_000_000_000) / 1_000;
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

pub fn now_rfc3339() -> String {
    rfc3339(now_nanos())
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            rfc3339(951_782_400_000_001_000),
            "2000-02-29T00:00:00.000001Z"
        );
        assert_eq!(
            rfc3339(1_796_020_273_500_000_000),
            "2026-11-30T06:31:13.500000Z"
        );
    }
}
