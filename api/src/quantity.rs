//! Kubernetes resource quantities (`200m`, `1.5`, `32Mi`, `1e9`), as `spec.resources.limits`
//! takes them: the same grammar as a Pod's, parsed exactly (no floats) into the integer units the
//! agent applies (CPU millicores, bytes), rounding up like the API server does.
use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The API server's own Quantity pattern (apimachinery), also used by CRDs that embed quantities.
pub const PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A quantity as written by the user; an integer in YAML (`cpu: 2`) is kept as its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quantity(pub String);

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Uint(u64),
            // `cpu: 1.5`, as a Pod takes it: the shortest decimal that reads back as the same
            // number, which is what was written for any value of up to 15 digits.
            Float(f64),
            Str(String),
        }
        Ok(Quantity(match Raw::deserialize(d)? {
            Raw::Int(i) => i.to_string(),
            Raw::Uint(u) => u.to_string(),
            Raw::Float(f) => f.to_string(),
            Raw::Str(s) => s,
        }))
    }
}

impl JsonSchema for Quantity {
    fn schema_name() -> Cow<'static, str> {
        "Quantity".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "x-kubernetes-int-or-string": true,
            "pattern": PATTERN,
            "maxLength": 64,
        })
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The exact value as `num / den` (both < 2^127 for any quantity this accepts).
fn parse_exact(s: &str) -> Result<(u128, u128), String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 64 {
        return Err("must be at most 64 characters".into());
    }
    let (neg, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let split = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(split);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty()) || number.matches('.').count() > 1 {
        return Err(format!("{s:?} is not a quantity (e.g. 500m, 2, 1.5, 64Mi)"));
    }
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(format!("{s:?} is too large"));
    }
    let mut num: u128 = if digits.is_empty() {
        0
    } else {
        digits
            .parse()
            .map_err(|_| format!("{s:?} is not a number"))?
    };
    let mut den: u128 = 10u128.pow(frac.len() as u32);
    let (bin, dec): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..]
                .parse()
                .map_err(|_| format!("{s:?}: bad exponent {e:?}"))?;
            if !(-18..=18).contains(&exp) {
                return Err(format!("{s:?}: exponent out of range"));
            }
            (0, exp)
        }
        other => return Err(format!("{s:?}: unknown suffix {other:?}")),
    };
    let too_large = || format!("{s:?} is too large");
    num = num.checked_mul(1u128 << bin).ok_or_else(too_large)?;
    if dec >= 0 {
        num = num
            .checked_mul(10u128.pow(dec as u32))
            .ok_or_else(too_large)?;
    } else {
        den = den
            .checked_mul(10u128.pow((-dec) as u32))
            .ok_or_else(too_large)?;
    }
    if neg && num != 0 {
        return Err(format!("{s:?} must not be negative"));
    }
    Ok((num, den))
}

/// `value * scale`, rounded up, as u64 (`Err` names what is wrong, for the field's message).
fn scaled(s: &str, scale: u128) -> Result<u64, String> {
    let (num, den) = parse_exact(s)?;
    let v = num
        .checked_mul(scale)
        .ok_or_else(|| format!("{s:?} is too large"))?
        .div_ceil(den);
    u64::try_from(v).map_err(|_| format!("{s:?} is too large"))
}

impl Quantity {
    /// CPU in millicores (`250m` → 250, `1.5` → 1500), rounded up to 1m.
    pub fn millicores(&self) -> Result<u64, String> {
        scaled(&self.0, 1000)
    }

    /// Bytes (`64Mi` → 67108864, `1G` → 10^9), rounded up to a whole byte.
    pub fn bytes(&self) -> Result<u64, String> {
        scaled(&self.0, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    #[test]
    fn cpu_forms() {
        for (s, m) in [
            ("200m", 200),
            ("1", 1000),
            ("0.5", 500),
            ("1.5", 1500),
            (".1", 100),
            ("2.", 2000),
            ("1500000u", 1500),
            ("0.0001", 1), // rounded up, as the API server does
            ("1e3", 1_000_000),
            ("+3", 3000),
            ("0", 0),
        ] {
            assert_eq!(q(s).millicores(), Ok(m), "{s}");
        }
    }

    #[test]
    fn memory_forms() {
        for (s, b) in [
            ("32Mi", 32 << 20),
            ("1Gi", 1 << 30),
            ("100M", 100_000_000),
            ("1k", 1000),
            ("128974848", 128_974_848),
            ("129e6", 129_000_000),
            ("1.5Ki", 1536),
            ("1m", 1), // a thousandth of a byte rounds up to one
            ("8Ei", 8 << 60),
        ] {
            assert_eq!(q(s).bytes(), Ok(b), "{s}");
        }
    }

    #[test]
    fn refusals_say_why() {
        for s in [
            "", "abc", "1..2", ".", "-1", "1Xi", "1e99", "16Ei", "5 Mi", "1e", "Mi",
        ] {
            assert!(q(s).bytes().is_err(), "{s:?} accepted");
        }
        assert!(q("-1").bytes().unwrap_err().contains("negative"));
        assert!(q("1Xi").bytes().unwrap_err().contains("suffix"));
        assert_eq!(q("-0").bytes(), Ok(0));
    }

    #[test]
    fn integers_in_yaml_are_kept() {
        let v: Quantity = serde_json::from_str("2").unwrap();
        assert_eq!(v, q("2"));
        let v: Quantity = serde_json::from_str("1.5").unwrap();
        assert_eq!(v.millicores(), Ok(1500));
        let v: Quantity = serde_json::from_str("1e20").unwrap();
        assert_eq!(v, q("100000000000000000000"));
        let v: Quantity = serde_json::from_str("\"250m\"").unwrap();
        assert_eq!(v.millicores(), Ok(250));
        assert_eq!(serde_json::to_string(&q("1Gi")).unwrap(), "\"1Gi\"");
    }

    #[test]
    fn the_pattern_and_the_parser_agree() {
        let re = regex_lite::Regex::new(PATTERN).unwrap();
        for s in ["200m", "1", "0.5", "32Mi", "1e3", "+3", ".1", "2.", "1E-3"] {
            assert!(re.is_match(s), "{s}");
            assert!(q(s).bytes().is_ok(), "{s}");
        }
        for s in ["abc", "1..2", "5 Mi", "1Xi", "Mi", "1e"] {
            assert!(!re.is_match(s), "{s}");
            assert!(q(s).bytes().is_err(), "{s}");
        }
    }
}
