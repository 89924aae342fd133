//! `labelSelector` and `fieldSelector` of a list or watch, parsed as the API server parses them
//! (apimachinery's `labels.Parse` and `fields.ParseSelector`), and matched against an entry.
use std::collections::BTreeMap;

use super::object::Columns;

#[derive(Debug, PartialEq, Eq)]
enum Label {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    Absent(String),
}

/// The fields a `fieldSelector` may name (others are refused, naming them, as the API server
/// refuses a field label it does not index).
pub const FIELDS: [&str; 5] = [
    "metadata.name",
    "metadata.namespace",
    "spec.podName",
    "status.podName",
    "status.phase",
];

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Selector {
    labels: Vec<Label>,
    /// (field, value, equal).
    fields: Vec<(&'static str, String, bool)>,
}

/// What a selected entry shows.
pub struct Subject<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub columns: &'a Columns,
}

impl Selector {
    pub fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Selector, String> {
        let mut s = Selector::default();
        for req in split_top(labels.unwrap_or("")) {
            s.labels.push(label(req)?);
        }
        for req in fields.unwrap_or("").split(',').map(str::trim) {
            if req.is_empty() {
                continue;
            }
            let (field, value, eq) = if let Some((f, v)) = req.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = req.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = req.split_once('=') {
                (f, v, true)
            } else {
                return Err(format!("fieldSelector: invalid selector: {req:?}"));
            };
            let field = field.trim();
            let known = FIELDS.iter().find(|f| **f == field).ok_or_else(|| {
                format!(
                    "fieldSelector: field label not supported: {field} (supported: {})",
                    FIELDS.join(", ")
                )
            })?;
            s.fields.push((known, value.trim().to_string(), eq));
        }
        Ok(s)
    }

    pub fn matches(&self, e: &Subject<'_>) -> bool {
        self.labels.iter().all(|l| match l {
            Label::Eq(k, v) => e.labels.get(k) == Some(v),
            Label::Ne(k, v) => e.labels.get(k) != Some(v),
            Label::In(k, vs) => e.labels.get(k).is_some_and(|v| vs.contains(v)),
            Label::NotIn(k, vs) => !e.labels.get(k).is_some_and(|v| vs.contains(v)),
            Label::Exists(k) => e.labels.contains_key(k),
            Label::Absent(k) => !e.labels.contains_key(k),
        }) && self.fields.iter().all(|(f, v, eq)| {
            let have = match *f {
                "metadata.name" => e.name,
                "metadata.namespace" => e.namespace,
                "status.phase" => e.columns.phase.as_str(),
                _ => e.columns.pod.as_str(),
            };
            (have == v) == *eq
        })
    }
}

/// The requirements of a label selector: split at commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut from) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[from..i].trim());
                from = i + 1;
            }
            _ => {}
        }
    }
    out.push(s[from..].trim());
    out.into_iter().filter(|r| !r.is_empty()).collect()
}

fn label(req: &str) -> Result<Label, String> {
    let bad = || format!("labelSelector: unable to parse requirement: {req:?}");
    let key_ok = |k: &str| {
        !k.is_empty()
            && k.len() <= 317
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
    };
    let value_ok = |v: &str| {
        v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    let set = |k: &str, rest: &str| -> Result<(String, Vec<String>), String> {
        let inner = rest
            .trim()
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(bad)?;
        let vs: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
        if !key_ok(k) || vs.iter().any(|v| !value_ok(v)) {
            return Err(bad());
        }
        Ok((k.to_string(), vs))
    };
    if let Some(k) = req.strip_prefix('!') {
        let k = k.trim();
        return key_ok(k).then(|| Label::Absent(k.into())).ok_or_else(bad);
    }
    if let Some((k, v)) = req.split_once("!=") {
        let (k, v) = (k.trim(), v.trim());
        return (key_ok(k) && value_ok(v))
            .then(|| Label::Ne(k.into(), v.into()))
            .ok_or_else(bad);
    }
    if let Some((k, v)) = req.split_once("==").or_else(|| req.split_once('=')) {
        let (k, v) = (k.trim(), v.trim());
        return (key_ok(k) && value_ok(v))
            .then(|| Label::Eq(k.into(), v.into()))
            .ok_or_else(bad);
    }
    if let Some((k, rest)) = req.split_once(" notin ") {
        let (k, vs) = set(k.trim(), rest)?;
        return Ok(Label::NotIn(k, vs));
    }
    if let Some((k, rest)) = req.split_once(" in ") {
        let (k, vs) = set(k.trim(), rest)?;
        return Ok(Label::In(k, vs));
    }
    key_ok(req)
        .then(|| Label::Exists(req.into()))
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_match_as_the_api_server_matches_them() {
        let labels: BTreeMap<String, String> = [("app", "web"), ("tier", "a")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let columns = Columns {
            pod: "pod-1".into(),
            phase: "Running".into(),
            ..Default::default()
        };
        let e = Subject {
            namespace: "ns",
            name: "p1",
            labels: &labels,
            columns: &columns,
        };
        let cases: [(Option<&str>, Option<&str>, bool); 16] = [
            (None, None, true),
            (Some("app=web"), None, true),
            (Some("app==web"), None, true),
            (Some("app=db"), None, false),
            (Some("app!=db"), None, true),
            (Some("app,tier"), None, true),
            (Some("!app"), None, false),
            (Some("!other"), None, true),
            (Some("app in (db, web)"), None, true),
            (Some("app notin (db,web)"), None, false),
            (Some("app in (db),tier=a"), None, false),
            (None, Some("metadata.name=p1"), true),
            (None, Some("metadata.name!=p1"), false),
            (None, Some("status.phase=Running,spec.podName=pod-1"), true),
            (None, Some("status.podName==pod-2"), false),
            (Some("tier=a"), Some("metadata.namespace=ns"), true),
        ];
        for (l, f, want) in cases {
            let s = Selector::parse(l, f).unwrap();
            assert_eq!(s.matches(&e), want, "{l:?} {f:?}");
        }
    }

    #[test]
    fn a_bad_selector_is_refused_naming_it() {
        for (l, f, says) in [
            (Some("app=("), None, "labelSelector"),
            (Some("a b"), None, "labelSelector"),
            (Some("app in db"), None, "labelSelector"),
            (
                None,
                Some("spec.command=x"),
                "field label not supported: spec.command",
            ),
            (
                None,
                Some("metadata.name"),
                "fieldSelector: invalid selector",
            ),
        ] {
            let e = Selector::parse(l, f).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
    }
}
