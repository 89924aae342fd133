//! Fields a create's body has that the spec does not know, found as the API server's strict
//! decoding finds them (`fieldValidation=Strict` refuses them, else a `Warning` names them): a
//! typo (`comand`) is never silently dropped from a process that then runs without it.
use serde_json::Value;

/// The paths (`spec.comand`, `spec.readiness.tcpSocket.prot`) in `sent` that `kept` (the same
/// object after a decode and an encode) lacks. A `null` sent is no field.
pub fn unknown_fields(sent: &Value, kept: &Value, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    walk(sent, kept, path, &mut out);
    out
}

fn walk(sent: &Value, kept: &Value, path: &str, out: &mut Vec<String>) {
    match (sent, kept) {
        (Value::Object(s), Value::Object(k)) => {
            for (key, v) in s {
                let p = format!("{path}.{key}");
                match k.get(key) {
                    None if !v.is_null() => out.push(p),
                    None => {}
                    Some(kv) => walk(v, kv, &p, out),
                }
            }
        }
        (Value::Array(s), Value::Array(k)) => {
            for (i, (v, kv)) in s.iter().zip(k).enumerate() {
                walk(v, kv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_api::crd::SandboxProcessSpec;
    use serde_json::json;

    fn unknown(spec: Value) -> Vec<String> {
        let decoded: SandboxProcessSpec = serde_json::from_value(spec.clone()).unwrap();
        unknown_fields(&spec, &serde_json::to_value(decoded).unwrap(), "spec")
    }

    #[test]
    fn unknown_fields_are_named_by_path() {
        assert!(unknown(json!({"podName": "p", "command": ["true"]})).is_empty());
        assert!(
            unknown(json!({"podName": "p", "command": ["true"], "workingDir": null})).is_empty()
        );
        assert_eq!(
            unknown(json!({"podName": "p", "command": ["true"], "comand": ["x"]})),
            ["spec.comand"]
        );
        assert_eq!(
            unknown(json!({"podName": "p", "command": ["true"],
                "env": [{"name": "A", "value": "1", "vaule": "2"}],
                "readiness": {"tcpSocket": {"port": 80, "prot": 1}}})),
            ["spec.env[0].vaule", "spec.readiness.tcpSocket.prot"]
        );
    }
}
