//! docs/reference/chart-values.md: every value of the Helm chart, from its values.schema.json
//! (`$ref`s into `$defs` resolved), with its default from values.yaml and, where the schema
//! describes none, the comment above it there.
use std::collections::BTreeMap;

use serde_json::Value;

use super::markdown::{code, generated_by, head};
use super::schema::{field_row, fields_of, literal, Field, COLUMNS};

pub const PAGE: &str = "docs/reference/chart-values.md";
const CHART: &str = "charts/sandbox-process-operator";

pub fn page(root: &std::path::Path, command: &str) -> String {
    let read = |name: &str| {
        let path = root.join(CHART).join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    };
    let schema: Value = serde_json::from_str(&read("values.schema.json")).expect("schema JSON");
    let values_text = read("values.yaml");
    let values: Value = serde_yaml_ng::from_str(&values_text).expect("values YAML");
    let comments = comments(&values_text);
    for path in comments.keys() {
        // The comment parser must have followed the nesting: each key it found is a value.
        assert!(
            !lookup(&values, path).is_null(),
            "values.yaml comment parsed for {path:?}, not a value there"
        );
    }
    let resolve = |s: &Value| resolve(&schema, s);
    let mut fields = vec![];
    fields_of(&schema, "", &resolve, &mut fields);
    let mut out = generated_by(command);
    out += &format!(
        "# Chart values\n\n\
         Every value of the `sandbox-process-operator` chart, from `{CHART}/values.schema.json` \
         (which rejects unknown keys), with its default from `{CHART}/values.yaml`. The \
         description is the schema's, or else the comment above the key in values.yaml. `[]` \
         stands for each item of a list.\n\n"
    );
    out += &head(&[&["Value"], COLUMNS].concat());
    for f in &fields {
        out += &row_of(f, &values, &comments, &resolve);
    }
    out
}

fn row_of(
    f: &Field,
    values: &Value,
    comments: &BTreeMap<String, String>,
    resolve: super::schema::Resolve,
) -> String {
    let s = &f.schema;
    let default = lookup(values, &f.path);
    // An object whose fields have rows of their own: its default is theirs.
    let default = match default {
        Value::Null => String::new(),
        Value::Object(m) if !m.is_empty() && s["properties"].is_object() => String::new(),
        d => code(&literal(d)),
    };
    let description = s["description"]
        .as_str()
        .or_else(|| comments.get(&f.path).map(String::as_str))
        .unwrap_or_default();
    field_row(f, resolve, &default, description)
}

/// The schema a `$ref` (`#/$defs/NAME`) names, the keywords beside it added; `s` itself
/// without one.
fn resolve(root: &Value, s: &Value) -> Value {
    let Some(name) = s["$ref"].as_str() else {
        return s.clone();
    };
    let pointer = name
        .strip_prefix('#')
        .unwrap_or_else(|| panic!("only local $refs are resolved: {name}"));
    let mut out = resolve(
        root,
        root.pointer(pointer)
            .unwrap_or_else(|| panic!("$ref {name} names nothing")),
    );
    for (k, v) in s.as_object().into_iter().flatten() {
        if k != "$ref" {
            out[k] = v.clone();
        }
    }
    out
}

/// The value at a dotted path; Null for a list's items (`[]`) or a missing key.
fn lookup<'a>(values: &'a Value, path: &str) -> &'a Value {
    if path.contains("[]") {
        return &Value::Null;
    }
    path.split('.').fold(values, |v, key| &v[key])
}

/// The comment block right above each key of values.yaml, by dotted path: `#` lines at the
/// key's indentation with no blank line between them and the key. Lists and block scalars are
/// skipped: their lines are not keys of the tree.
fn comments(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut keys: Vec<(usize, String)> = vec![];
    let mut pending: Vec<(usize, String)> = vec![];
    let mut skip_below: Option<usize> = None;
    for line in text.lines() {
        let body = line.trim_start();
        let indent = line.len() - body.len();
        if skip_below.is_some_and(|i| indent > i) && !body.is_empty() {
            continue;
        }
        skip_below = None;
        if body.is_empty() {
            pending.clear();
        } else if let Some(c) = body.strip_prefix('#') {
            pending.push((indent, c.strip_prefix(' ').unwrap_or(c).to_string()));
        } else if body.starts_with('-') {
            pending.clear();
            skip_below = Some(indent);
        } else if let Some((key, rest)) = body.split_once(':') {
            keys.retain(|(i, _)| *i < indent);
            keys.push((indent, key.to_string()));
            let block: Vec<&str> = pending
                .iter()
                .filter(|(i, _)| *i == indent)
                .map(|(_, c)| c.as_str())
                .collect();
            // A block at another indentation belongs to no key: leave the key undescribed.
            if !block.is_empty() && block.len() == pending.len() {
                let path: Vec<&str> = keys.iter().map(|(_, k)| k.as_str()).collect();
                out.insert(path.join("."), block.join("\n"));
            }
            pending.clear();
            if rest.trim_start().starts_with(['|', '>']) {
                skip_below = Some(indent);
            }
        }
    }
    out
}
