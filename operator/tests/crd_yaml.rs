//! The committed CRD must be exactly what `crdgen` prints, and the chart's copy the same, so the
//! YAML users apply (by kubectl or Helm) never drifts from the types the operator uses.
use std::path::PathBuf;

#[test]
fn committed_crd_matches_crdgen() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(sandbox_operator::crdgen::CRD_PATH);
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let generated = sandbox_operator::crdgen::yaml();
    assert!(
        committed == generated,
        "{} is out of date; regenerate it with\n  cargo run -q -p sandbox-operator --bin crdgen > {}",
        path.display(),
        sandbox_operator::crdgen::CRD_PATH
    );
    // Helm reads only files inside the chart: it carries a copy, which must be the same.
    let copy = "charts/sandbox-process-operator/files/crds/sandboxprocess.yaml";
    let in_chart = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(copy),
    )
    .unwrap_or_else(|e| panic!("reading {copy}: {e}"));
    assert!(
        in_chart == committed,
        "{copy} differs from {}; copy it: cp {} {copy}",
        sandbox_operator::crdgen::CRD_PATH,
        sandbox_operator::crdgen::CRD_PATH
    );
}

/// `kubectl explain sandboxprocess.spec.<field>` (and `.status.<field>`) shows a description for
/// every field: the CRD's descriptions come from the Rust doc comments, and an undocumented field
/// would print an empty DESCRIPTION.
#[test]
fn every_field_has_a_description() {
    let crd: serde_json::Value =
        serde_yaml_ng::from_str(&sandbox_operator::crdgen::yaml()).unwrap();
    let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
    let mut missing = Vec::new();
    for top in ["spec", "status"] {
        walk(&root[top], top.to_string(), &mut missing);
    }
    assert!(
        missing.is_empty(),
        "fields without a description (add a /// doc comment in api/src/crd.rs): {missing:?}"
    );
}

fn walk(schema: &serde_json::Value, path: String, missing: &mut Vec<String>) {
    let described = schema["description"]
        .as_str()
        .is_some_and(|d| !d.trim().is_empty());
    if !described {
        missing.push(path.clone());
    }
    if let Some(props) = schema["properties"].as_object() {
        for (name, child) in props {
            walk(child, format!("{path}.{name}"), missing);
        }
    }
    // The items of an object list are fields too (`spec.env[].name`); a list of strings has none.
    if let Some(props) = schema["items"]["properties"].as_object() {
        for (name, child) in props {
            walk(child, format!("{path}[].{name}"), missing);
        }
    }
}
