//! docs/reference/sandboxprocess.md: every field of the SandboxProcess CRD, its CEL rules and
//! printer columns, from the CRD `crdgen` prints (the committed crds/sandboxprocess.yaml).
use serde_json::Value;

use super::markdown::{cell, code, generated_by, head, row};
use super::schema::{field_row, fields_of, literal, Field, COLUMNS};

pub const PAGE: &str = "docs/reference/sandboxprocess.md";

pub fn page(command: &str) -> String {
    let crd: Value =
        serde_yaml_ng::from_str(&sandbox_operator::crdgen::yaml()).expect("crdgen prints YAML");
    let versions = crd["spec"]["versions"].as_array().expect("versions");
    // One page per version would be needed with more: fail rather than document one of them.
    assert_eq!(versions.len(), 1, "the page documents one CRD version");
    let version = &versions[0];
    let schema = &version["schema"]["openAPIV3Schema"];
    let none = |s: &Value| s.clone();
    let mut fields = vec![];
    fields_of(schema, "", &none, &mut fields);
    fields.retain(|f| f.path != "apiVersion" && f.path != "kind" && f.path != "metadata");
    let mut out = generated_by(command);
    out += &intro(&crd, version);
    out += "\n## Fields\n\n";
    out += &head(&[&["Field"], COLUMNS].concat());
    for f in &fields {
        out += &row_of(f, &none);
    }
    out += &validations(&fields);
    out += &printer_columns(version);
    out
}

fn intro(crd: &Value, version: &Value) -> String {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let list = |v: &Value| -> String {
        let items: Vec<String> = v
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).map(code).collect())
            .unwrap_or_default();
        items.join(", ")
    };
    format!(
        "# {kind}\n\n\
         `{group}/{version}`, kind `{kind}`, plural {plural}, short names {short}, categories \
         {categories}, {scope}. Every field of its `spec` and `status`, from the CRD's \
         openAPIV3Schema (`{crd_path}`); `[]` stands for each item of a list. The `{process}` \
         resource (`{process_gv}`) has the same `spec` and `status`.\n",
        kind = literal(&names["kind"]),
        group = literal(&spec["group"]),
        version = literal(&version["name"]),
        plural = code(&literal(&names["plural"])),
        short = list(&names["shortNames"]),
        categories = list(&names["categories"]),
        scope = literal(&spec["scope"]).to_lowercase(),
        crd_path = sandbox_operator::crdgen::CRD_PATH,
        process = sandbox_operator::aggregated::processes::KIND,
        process_gv = sandbox_operator::aggregated::processes::GROUP_VERSION,
    )
}

fn row_of(f: &Field, resolve: super::schema::Resolve) -> String {
    let s = &f.schema;
    let default = match &s["default"] {
        Value::Null => String::new(),
        d => code(&literal(d)),
    };
    let description = s["description"].as_str().unwrap_or_default();
    field_row(f, resolve, &default, description)
}

/// The `x-kubernetes-validations` (CEL) rules, where each sits and the field it names.
fn validations(fields: &[Field]) -> String {
    let mut out = String::from(
        "\n## Validation rules\n\n\
         The CEL rules (`x-kubernetes-validations`) the API server checks, with the object they \
         sit on, the field an error names (`fieldPath`, when set) and the message it gives. \
         Rules that use `oldSelf` apply to updates only.\n\n",
    );
    out += &head(&["On", "Field", "Message", "Rule"]);
    for f in fields {
        for rule in f.schema["x-kubernetes-validations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let field = match rule["fieldPath"].as_str() {
                Some(p) => code(&format!("{}{p}", f.path)),
                None => String::new(),
            };
            let message = rule["message"]
                .as_str()
                .map(str::to_string)
                .or_else(|| rule["messageExpression"].as_str().map(code))
                .unwrap_or_default();
            out += &row(&[
                cell(&code(&f.path)),
                cell(&field),
                cell(&message),
                cell(&code(rule["rule"].as_str().unwrap_or_default())),
            ]);
        }
    }
    out
}

fn printer_columns(version: &Value) -> String {
    let mut out = String::from(
        "\n## Printer columns\n\n\
         What `kubectl get sandboxprocesses` shows (priority 0: always; higher: with `-o wide`).\n\n",
    );
    out += &head(&["Name", "Type", "JSONPath", "Priority", "Description"]);
    for c in version["additionalPrinterColumns"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out += &row(&[
            cell(&literal(&c["name"])),
            cell(&literal(&c["type"])),
            cell(&code(c["jsonPath"].as_str().unwrap_or_default())),
            cell(&c["priority"].as_i64().unwrap_or(0).to_string()),
            cell(c["description"].as_str().unwrap_or_default()),
        ]);
    }
    out
}
