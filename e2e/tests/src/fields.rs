//! Reading an object as a user reads it with jsonpath: one field as text, a condition as
//! `STATUS/REASON`. Assertions compare these strings, so a failure shows what kubectl shows.
use serde::Serialize;
use serde_json::Value;

/// The field at a JSON pointer (`/status/exit/code`) as text: '' when absent, strings
/// unquoted, anything else as JSON.
pub fn field(o: &impl Serialize, pointer: &str) -> String {
    let v = serde_json::to_value(o).unwrap_or(Value::Null);
    match v.pointer(pointer) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Whether a process has ended: phase Exited or Error.
pub fn is_final(o: &impl Serialize) -> bool {
    matches!(field(o, "/status/phase").as_str(), "Exited" | "Error")
}

/// A condition of `.status.conditions` as `STATUS/REASON` ("/" when absent), as the bash
/// suites' `cond` read it.
pub fn cond(o: &impl Serialize, type_: &str) -> String {
    let v = serde_json::to_value(o).unwrap_or(Value::Null);
    let found = v
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_));
    let text = |c: &Value, k: &str| c[k].as_str().unwrap_or_default().to_string();
    found.map_or_else(
        || "/".into(),
        |c| format!("{}/{}", text(c, "status"), text(c, "reason")),
    )
}

/// A condition's message ('' when absent).
pub fn cond_message(o: &impl Serialize, type_: &str) -> String {
    let v = serde_json::to_value(o).unwrap_or(Value::Null);
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_read_as_jsonpath_prints_them() {
        let o = json!({"status": {"phase": "Exited", "exit": {"code": 7}, "rootExited": false,
            "conditions": [{"type": "Ready", "status": "False", "reason": "TimedOut", "message": "m"}]}});
        assert_eq!(field(&o, "/status/phase"), "Exited");
        assert_eq!(field(&o, "/status/exit/code"), "7");
        assert_eq!(field(&o, "/status/rootExited"), "false");
        assert_eq!(field(&o, "/status/exit/signal"), "");
        assert_eq!(cond(&o, "Ready"), "False/TimedOut");
        assert_eq!(cond(&o, "Stalled"), "/");
        assert_eq!(cond_message(&o, "Ready"), "m");
    }
}
