//! Durations as kubectl takes them (`30s`, `5m`, `1h30m`, `250ms`; Go's `time.ParseDuration`
//! units up to hours), and a bare number as seconds (what these flags took before).
use std::time::Duration;

/// `value_parser` for time flags.
pub fn parse(s: &str) -> Result<Duration, String> {
    let bad = || {
        format!("{s:?} is not a duration (e.g. 30s, 5m, 1h30m, 250ms; a bare number is seconds)")
    };
    if s.is_empty() {
        return Err(bad());
    }
    if let Ok(n) = s.parse::<u64>() {
        return Ok(Duration::from_secs(n));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let n: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per = match &rest[..unit_len] {
            "ns" => 1e0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        let nanos = n * nanos_per;
        if !nanos.is_finite() || nanos > 1e19 {
            return Err(bad());
        }
        total = total
            .checked_add(Duration::from_nanos(nanos as u64))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_durations() {
        assert_eq!(parse("60").unwrap(), Duration::from_secs(60));
        assert_eq!(parse("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        for bad in ["", "m", "5x", "-1s", "1d", "s5", "5m3"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
