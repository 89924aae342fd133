//! Reading the shared cases of `clients/conformance/` (see clients/CONFORMANCE.md), which the
//! Python client's unit tests run too.
use sandbox_api::crd::SandboxProcess;
use serde_json::Value;

/// The `cases` (or another list) of a conformance file, refusing a table that lost its cases.
pub fn cases<'a>(doc: &'a Value, list: &str, at_least: usize) -> &'a [Value] {
    let cases = doc[list].as_array().expect("a list of cases");
    assert!(cases.len() >= at_least, "the table lost its cases");
    cases
}

/// The object of a case: its `status` (`null`: none yet) over a minimal spec, with the case's
/// `spec` fields.
pub fn object(case: &Value) -> SandboxProcess {
    let mut o = serde_json::json!({
        "apiVersion": "sandbox.dev/v1alpha1", "kind": "SandboxProcess",
        "metadata": {"name": "p"}, "spec": {"podName": "w", "command": ["x"]},
    });
    if let Some(s) = case.get("spec") {
        for (k, v) in s.as_object().expect("spec is an object") {
            o["spec"][k] = v.clone();
        }
    }
    if let Some(s) = case.get("status").filter(|s| !s.is_null()) {
        o["status"] = s.clone();
    }
    serde_json::from_value(o).expect("a SandboxProcess")
}
