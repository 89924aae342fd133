//! Names as the API server checks them: a name no object can have would wait as not found until
//! the start deadline, a label no pod can carry would never match. Written without backslashes
//! so the CRD's CEL rules (`self.matches('…')`) use the very same patterns.
/// A DNS-1123 subdomain (pod, Secret and ConfigMap names), at most [`SUBDOMAIN_MAX`] bytes.
pub const SUBDOMAIN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
pub const SUBDOMAIN_MAX: usize = 253;
pub const SUBDOMAIN_RULE: &str = "a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters";
/// A DNS-1123 label (container names), at most 63 bytes.
pub const LABEL: &str = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";
pub const LABEL_RULE: &str = "a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters";
/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 bytes.
pub const LABEL_KEY: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$";
pub const LABEL_KEY_RULE: &str = "a label key: an optional DNS subdomain prefix and '/', then 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit";
/// A label value: empty, or at most 63 bytes of the label name alphabet.
pub const LABEL_VALUE: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$";
pub const LABEL_VALUE_RULE: &str = "a label value: empty, or 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit";

/// An object's labels and annotation keys as the API server checks them (annotation values are
/// free text, bounded by the object's size): `Err((field, message))` for the first that is not.
pub fn object_meta(
    labels: &std::collections::BTreeMap<String, String>,
    annotations: &std::collections::BTreeMap<String, String>,
) -> Result<(), (&'static str, String)> {
    for (k, v) in labels {
        check(k, LABEL_KEY, LABEL_KEY_RULE).map_err(|m| ("metadata.labels", m))?;
        check(v, LABEL_VALUE, LABEL_VALUE_RULE)
            .map_err(|m| ("metadata.labels", format!("{k}: {m}")))?;
    }
    for k in annotations.keys() {
        check(k, LABEL_KEY, LABEL_KEY_RULE).map_err(|m| ("metadata.annotations", m))?;
    }
    Ok(())
}

/// `Err(message)` unless `value` matches `pattern` (and a label key's prefix is a subdomain
/// of at most 253 bytes, which the pattern cannot count).
pub fn check(value: &str, pattern: &str, rule: &str) -> Result<(), String> {
    let ok = regex_lite::Regex::new(pattern).is_ok_and(|re| re.is_match(value))
        && (pattern != SUBDOMAIN || value.len() <= SUBDOMAIN_MAX)
        && (pattern != LABEL_KEY
            || value
                .rsplit_once('/')
                .is_none_or(|(prefix, _)| prefix.len() <= SUBDOMAIN_MAX));
    if ok {
        Ok(())
    } else {
        Err(format!("{value:?} is not {rule}"))
    }
}

#[cfg(test)]
mod tests {
    use super::object_meta;
    use std::collections::BTreeMap;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn labels_and_annotation_keys_as_the_api_server_checks_them() {
        let ok = map(&[
            ("app", "web"),
            ("example.com/tier", ""),
            ("a.b_c-d", "x.y_z-1"),
        ]);
        assert_eq!(object_meta(&ok, &ok), Ok(()));
        let long = "v".repeat(64);
        let bad_labels = [
            map(&[("-app", "x")]),
            map(&[("app", "has space")]),
            map(&[("app", long.as_str())]),
            map(&[("Example.com/x", "y")]),
            map(&[("app", "x\n")]),
        ];
        for l in &bad_labels {
            let (field, _) = object_meta(l, &BTreeMap::new()).unwrap_err();
            assert_eq!(field, "metadata.labels", "{l:?}");
        }
        let notes = map(&[("note", "any text\nat all")]);
        assert_eq!(object_meta(&BTreeMap::new(), &notes), Ok(()));
        let (field, message) = object_meta(&BTreeMap::new(), &map(&[("bad key", "")])).unwrap_err();
        assert_eq!(field, "metadata.annotations");
        assert!(message.contains("bad key"), "{message}");
    }
}
