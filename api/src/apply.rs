//! Server-side apply bodies that the API server takes whatever bytes their strings hold.
//!
//! An apply body is sent as `application/apply-patch+yaml`, and the API server decodes it with a
//! YAML parser (go-yaml, a port of libyaml) even when it is JSON. That parser refuses some
//! characters that JSON allows raw in a string (DEL, the C1 controls, U+FFFE, U+FFFF: "control
//! characters are not allowed", a 400 on every retry) and folds others as line breaks (NEL,
//! U+2028, U+2029), which would change the string. serde_json escapes only the C0 controls, so a
//! process that prints one such byte made its status unwritable. [`body`] escapes every character
//! the parser would refuse or change as `\uXXXX`, which JSON and YAML both decode to the same
//! character: the stored string is byte for byte the one serialized.
//!
//! Every apply of the operator and of the Rust client goes through here; the Python client applies
//! the same rule (`_yaml_safe_json`), and both are checked against the same classes of characters.
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::value::RawValue;

/// `value` as JSON that YAML parsers decode to the same value: the body of a server-side apply
/// (`kube::api::Patch::Apply(body(&v)?)`; kube sends a `RawValue` as it is).
pub fn body<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Box<RawValue>> {
    RawValue::from_string(yaml_safe(serde_json::to_string(value)?))
}

/// Whether the API server's YAML parser keeps `c`, raw inside a double-quoted scalar, as it is:
/// libyaml's printable set (yaml_parser_update_buffer) less the characters its scanner takes for
/// line breaks (NEL, LS, PS) and the byte order mark.
pub fn yaml_keeps(c: char) -> bool {
    matches!(c,
        '\t' | '\n' | '\r' | ' '..='~' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}'
        | '\u{10000}'..='\u{10ffff}')
        && !matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}')
}

/// Escapes, in a JSON text, every character YAML would not keep. Such characters are never JSON
/// syntax (all of it is printable ASCII), so each is inside a string, where `\uXXXX` means the
/// same character. All of them are in the Basic Multilingual Plane: one escape each, never a
/// surrogate pair (which go-yaml refuses).
fn yaml_safe(json: String) -> String {
    if json.chars().all(yaml_keeps) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if yaml_keeps(c) {
            out.push(c);
        } else {
            debug_assert!((c as u32) < 0x10000, "astral characters are kept");
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// One sample of each class of Unicode scalar values, with what it is.
    const CLASSES: &[(&str, &str)] = &[
        (
            "NUL and the C0 controls",
            "\0\u{1}\u{7}\u{8}\t\n\u{b}\u{c}\r\u{1b}\u{1f}",
        ),
        (
            "printable ASCII with JSON and YAML syntax",
            " !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        ),
        ("DEL", "x\u{7f}y"),
        ("C1 controls", "\u{80}\u{81}\u{9b}\u{9f}"),
        ("NEL", "a\u{85}b"),
        ("NBSP and Latin-1", "\u{a0}é\u{ff}"),
        ("line and paragraph separators", "a\u{2028}b\u{2029}c"),
        ("just below the surrogates", "\u{d7ff}"),
        (
            "just above the surrogates (private use)",
            "\u{e000}\u{f8ff}",
        ),
        ("byte order mark", "\u{feff}x"),
        ("replacement character (lossy UTF-8)", "\u{fffd}"),
        ("noncharacters U+FFFE and U+FFFF", "\u{fffe}\u{ffff}"),
        ("astral planes", "\u{10000}😀\u{1d11e}"),
        (
            "supplementary private use, the last scalar",
            "\u{f0000}\u{10fffd}\u{10ffff}",
        ),
    ];

    fn every_scalar_class() -> Value {
        let all: String = CLASSES.iter().map(|(_, s)| *s).collect();
        json!({
            "status": {
                "output": {"tail": all},
                "classes": CLASSES.iter().map(|(n, s)| json!({"name": n, "s": s})).collect::<Vec<_>>(),
            },
            all.clone(): "as a key, too",
        })
    }

    /// The body decodes, with a libyaml parser (the algorithm go-yaml ports), to exactly the value
    /// serialized, for every class; the plain JSON of the same value does not (the test can fail).
    #[test]
    fn every_scalar_class_survives_a_yaml_decoder() {
        let value = every_scalar_class();
        let sent = body(&value).unwrap();
        assert!(sent.get().chars().all(yaml_keeps), "{}", sent.get());
        let decoded: Value = serde_yaml_ng::from_str(sent.get()).expect("YAML takes the body");
        assert_eq!(decoded, value);
        assert_eq!(serde_json::from_str::<Value>(sent.get()).unwrap(), value);
        for (name, s) in CLASSES {
            let one = body(&json!({ "s": s })).unwrap();
            let back: Value = serde_yaml_ng::from_str(one.get()).unwrap();
            assert_eq!(back["s"], *s, "{name}");
        }
        let plain = serde_json::to_string(&value).unwrap();
        let refused_or_changed = serde_yaml_ng::from_str::<Value>(&plain).map(|v| v != value);
        assert!(
            !matches!(refused_or_changed, Ok(false)),
            "plain JSON would do"
        );
    }

    /// Each class that plain JSON gets wrong, one at a time: refused, or decoded to other text.
    #[test]
    fn plain_json_fails_where_the_escapes_are_needed() {
        for s in ["x\u{7f}y", "\u{81}", "\u{fffe}", "\u{ffff}", "a\u{85}b"] {
            let plain = serde_json::to_string(&json!({ "s": s })).unwrap();
            let got = serde_yaml_ng::from_str::<Value>(&plain).map(|v| v["s"] == s);
            assert!(!matches!(got, Ok(true)), "{s:?} needs no escape?");
            let sent = body(&json!({ "s": s })).unwrap();
            assert_eq!(
                serde_yaml_ng::from_str::<Value>(sent.get()).unwrap()["s"],
                s
            );
        }
    }

    #[test]
    fn clean_text_is_left_as_serde_json_wrote_it() {
        let v = json!({"a": "plain text, é and 😀", "n": 1});
        assert_eq!(body(&v).unwrap().get(), serde_json::to_string(&v).unwrap());
        assert_eq!(
            body(&json!({"d": "\u{7f}"})).unwrap().get(),
            r#"{"d":"\u007f"}"#
        );
    }
}
