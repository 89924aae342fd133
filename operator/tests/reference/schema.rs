//! JSON Schema (and OpenAPI v3, the CRD's) as reference rows: the fields depth first, each
//! object's sorted by name (not by the map's order, which serde_json's features decide), with
//! their type and constraints in words.
use serde_json::Value;

use super::markdown::code;

/// Resolves a `$ref` (the chart's `$defs`); the identity for a schema without any.
pub type Resolve<'a> = &'a dyn Fn(&Value) -> Value;

/// One field: its dotted path (`[]` for a list's items), resolved schema and whether its
/// object requires it.
pub struct Field {
    pub path: String,
    pub schema: Value,
    pub required: bool,
}

/// What this module shows or leaves out on purpose. Any other keyword fails the test, so that
/// a new one in a schema is rendered rather than dropped.
const KNOWN: &[&str] = &[
    "$ref",
    // Shown, with the numeric bounds of [`BOUNDS`].
    "type",
    "format",
    "description",
    "default",
    "enum",
    "pattern",
    "uniqueItems",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-int-or-string",
    "items",
    "properties",
    "required",
    "additionalProperties",
    "oneOf",
    "anyOf",
    // The CRD page lists these in a section of their own.
    "x-kubernetes-validations",
    // Every optional CRD field is nullable: the Required column says it.
    "nullable",
    // Only the root's: the kind's name.
    "title",
];

/// The columns of a page's table of fields, after the field's own (its path or the value's).
pub const COLUMNS: &[&str] = &["Type", "Required", "Default", "Constraints", "Description"];

/// A field's row of [`COLUMNS`], its default and description as the page found them.
pub fn field_row(f: &Field, resolve: Resolve, default: &str, description: &str) -> String {
    use super::markdown::{cell, code, row};
    row(&[
        cell(&code(&f.path)),
        cell(&type_name(&f.schema, resolve)),
        if f.required { "yes" } else { "" }.to_string(),
        cell(default),
        cell(&constraints(&f.schema, resolve, &f.path)),
        cell(description),
    ])
}

/// The numeric bounds a schema may set, shown as "KEY VALUE".
const BOUNDS: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
];

/// The fields below an object's schema, `prefix` before their names ("" at the root).
pub fn fields_of(schema: &Value, prefix: &str, resolve: Resolve, out: &mut Vec<Field>) {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = schema["properties"].as_object() {
        let mut names: Vec<&String> = props.keys().collect();
        names.sort();
        for name in names {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            field(
                &props[name],
                path,
                required.contains(&name.as_str()),
                resolve,
                out,
            );
        }
    }
    // The fields of a list's objects are fields too (`spec.env[].name`), and of a map's.
    for (key, suffix) in [("items", "[]"), ("additionalProperties", ".*")] {
        let inner = resolve(&schema[key]);
        if inner["properties"].is_object() {
            field(&inner, format!("{prefix}{suffix}"), false, resolve, out);
        }
    }
}

fn field(schema: &Value, path: String, required: bool, resolve: Resolve, out: &mut Vec<Field>) {
    let schema = resolve(schema);
    let at = out.len();
    out.push(Field {
        path: path.clone(),
        schema: Value::Null,
        required,
    });
    fields_of(&schema, &path, resolve, out);
    out[at].schema = schema;
}

/// The type in Go's words, as `kubectl explain` gives it: `[]string`, `map[string]string`,
/// `integer (int64)`.
pub fn type_name(schema: &Value, resolve: Resolve) -> String {
    if schema["x-kubernetes-int-or-string"] == true {
        return "int-or-string".into();
    }
    if let Some(variants) = schema["oneOf"].as_array().or(schema["anyOf"].as_array()) {
        let names: Vec<String> = variants
            .iter()
            .map(|v| type_name(&resolve(v), resolve))
            .collect();
        return names.join(" or ");
    }
    let base = match &schema["type"] {
        Value::String(t) => t.clone(),
        Value::Array(types) => {
            let names: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
            names.join(" or ")
        }
        // An enum without a type: the type its values share.
        _ => match schema["enum"].as_array() {
            Some(values) if values.iter().all(Value::is_string) => "string".into(),
            _ => "any".into(),
        },
    };
    let inner = |key: &str| match &schema[key] {
        Value::Null | Value::Bool(_) => "any".to_string(),
        s => match type_name(&resolve(s), resolve) {
            either if either.contains(" or ") => format!("({either})"),
            one => one,
        },
    };
    match (base.as_str(), schema["format"].as_str()) {
        ("array", _) => format!("[]{}", inner("items")),
        ("object", _) if schema["additionalProperties"].is_object() => {
            format!("map[string]{}", inner("additionalProperties"))
        }
        (_, Some(format)) => format!("{base} ({format})"),
        _ => base,
    }
}

/// The schema's constraints as Markdown, `; `-separated: bounds, lengths, patterns, enums; a
/// list's or a map's scalar values' after `items:` or `values:`, `, `-separated.
pub fn constraints(schema: &Value, resolve: Resolve, at: &str) -> String {
    check_known(schema, resolve, at);
    let mut out = own_constraints(schema);
    for (key, what) in [("items", "items"), ("additionalProperties", "values")] {
        let inner = resolve(&schema[key]);
        if inner.is_object() && !inner["properties"].is_object() {
            check_known(&inner, resolve, &format!("{at} {what}"));
            let theirs = own_constraints(&inner);
            if !theirs.is_empty() {
                out.push(format!("{what}: {}", theirs.join(", ")));
            }
        }
    }
    out.join("; ")
}

fn own_constraints(schema: &Value) -> Vec<String> {
    let mut out = vec![];
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| code(&literal(v))).collect();
        out.push(format!("one of {}", values.join(", ")));
    }
    for &key in BOUNDS {
        if schema[key].is_number() {
            out.push(format!("{key} {}", literal(&schema[key])));
        }
    }
    if let Some(p) = schema["pattern"].as_str() {
        out.push(format!("pattern {}", code(p)));
    }
    if schema["uniqueItems"] == true {
        out.push("unique items".into());
    }
    if let Some(t) = schema["x-kubernetes-list-type"].as_str() {
        let keys: Vec<String> = schema["x-kubernetes-list-map-keys"]
            .as_array()
            .map(|k| k.iter().filter_map(Value::as_str).map(code).collect())
            .unwrap_or_default();
        let by = if keys.is_empty() {
            String::new()
        } else {
            format!(" keyed by {}", keys.join(", "))
        };
        out.push(format!("list type {}{by}", code(t)));
    }
    out
}

/// Fails on a keyword this module does not know (in the schema or a `oneOf` variant of it).
fn check_known(schema: &Value, resolve: Resolve, at: &str) {
    let Some(map) = schema.as_object() else {
        return;
    };
    for key in map.keys() {
        assert!(
            KNOWN.contains(&key.as_str()) || BOUNDS.contains(&key.as_str()),
            "{at}: schema keyword {key:?} is not shown in the reference; teach \
             operator/tests/reference/schema.rs to show it (or to leave it out, in KNOWN)"
        );
    }
    for variant in schema["oneOf"]
        .as_array()
        .into_iter()
        .chain(schema["anyOf"].as_array())
        .flatten()
    {
        let variant = resolve(variant);
        check_known(&variant, resolve, at);
        assert!(
            own_constraints(&variant).is_empty(),
            "{at}: the constraints of a oneOf/anyOf variant are not shown; teach \
             operator/tests/reference/schema.rs to show them"
        );
    }
}

/// A value as its YAML would spell it: strings bare (but the empty one, `""`), others as JSON.
pub fn literal(v: &Value) -> String {
    match v {
        Value::String(s) if !s.is_empty() => s.clone(),
        Value::Number(n) if n.is_f64() => number(n.as_f64().unwrap_or_default()),
        other => other.to_string(),
    }
}

/// A number without the `.0` a YAML float bound gets (`maximum: 2147483647.0`).
fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}
