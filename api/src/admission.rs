//! The one rewrite the operator's mutating webhook makes: quantities written as JSON numbers
//! that are not integers (`cpu: 1.5`). A Pod takes them; a CRD cannot, because a structural
//! schema can say integer-or-string but not number, and the API server refuses the number
//! before any CEL rule runs. Rewritten as the text a Pod's decoder reads them as, they then meet
//! the same pattern and bounds as any quantity.
use serde::Deserialize;
use serde_json::Value;

use crate::quantity::Quantity;

/// Every quantity in a SandboxProcess, as a JSON pointer. A test walks the generated CRD
/// schema and fails when a quantity field is not listed here.
pub const QUANTITY_FIELDS: &[&str] = &[
    "/spec/resources/limits/cpu",
    "/spec/resources/limits/memory",
];

/// The quantity fields of `object` that hold a non-integer number, with the text to put there.
pub fn quantity_numbers(object: &Value) -> Vec<(&'static str, String)> {
    QUANTITY_FIELDS
        .iter()
        .filter_map(|&field| {
            let v = object.pointer(field)?;
            // Integers already pass `x-kubernetes-int-or-string`; strings are text.
            if !v.is_f64() {
                return None;
            }
            let text = Quantity::deserialize(v).ok()?.0;
            Some((field, text))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::SandboxProcess;
    use kube::CustomResourceExt;
    use serde_json::json;

    #[test]
    fn only_non_integer_numbers_are_rewritten() {
        let cases = [
            (
                json!({"cpu": 1.5}),
                vec![("/spec/resources/limits/cpu", "1.5")],
            ),
            (
                json!({"cpu": 0.25, "memory": 1.5}),
                vec![
                    ("/spec/resources/limits/cpu", "0.25"),
                    ("/spec/resources/limits/memory", "1.5"),
                ],
            ),
            (json!({"cpu": 2, "memory": "64Mi"}), vec![]),
            (json!({"cpu": "1.5"}), vec![]),
            (
                json!({"cpu": 1e20}),
                vec![("/spec/resources/limits/cpu", "100000000000000000000")],
            ),
            (
                json!({"cpu": -0.5}),
                vec![("/spec/resources/limits/cpu", "-0.5")],
            ),
            (json!({"cpu": {"a": 1.5}}), vec![]),
            (json!({}), vec![]),
        ];
        for (limits, want) in cases {
            let obj = json!({"spec": {"resources": {"limits": limits}}});
            let got = quantity_numbers(&obj);
            let got: Vec<(&str, &str)> = got.iter().map(|(f, t)| (*f, t.as_str())).collect();
            assert_eq!(got, want, "{limits}");
        }
        assert!(quantity_numbers(&json!({"spec": {"resources": 1.5}})).is_empty());
    }

    /// Every schema node that takes a quantity (int-or-string with the quantity pattern).
    fn quantity_nodes(schema: &Value, at: String, out: &mut Vec<String>) {
        if schema.get("pattern").and_then(Value::as_str) == Some(crate::quantity::PATTERN)
            && schema.get("x-kubernetes-int-or-string") == Some(&json!(true))
        {
            out.push(at.clone());
        }
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (name, s) in props {
                quantity_nodes(s, format!("{at}/{name}"), out);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(s) = schema.get(key).filter(|s| s.is_object()) {
                quantity_nodes(s, format!("{at}/*"), out);
            }
        }
    }

    #[test]
    fn every_quantity_in_the_schema_is_listed() {
        let crd = serde_json::to_value(SandboxProcess::crd()).unwrap();
        let mut found = Vec::new();
        for v in crd["spec"]["versions"].as_array().unwrap() {
            quantity_nodes(&v["schema"]["openAPIV3Schema"], String::new(), &mut found);
        }
        found.sort();
        found.dedup();
        let mut listed: Vec<String> = QUANTITY_FIELDS.iter().map(|s| s.to_string()).collect();
        listed.sort();
        assert_eq!(found, listed);
    }
}
