//! Certificate helpers shared by the operator's CA (`certs`) and its agent client (`agent`): the
//! pure certificate authority ([`authority`]), cert-manager mode's CA overlap ([`overlap`]), PEM text out of Secrets, and the name an agent's
//! certificate carries. A leaf: it imports nothing else of the crate.
pub mod authority;
pub mod overlap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use authority::KeyCert;

/// On the CA Secret (self mode) and on the agents' bundle ConfigMap: when the bundle last gained a
/// CA (unix seconds), i.e. when a rollover began.
pub const PUBLISHED_AT: &str = "sandbox.dev/ca-published-at";

/// The agents' bundle ConfigMap as published: its CAs (key `ca.crt`) and when it last gained one.
pub fn agent_bundle(cm: Option<&ConfigMap>) -> (Vec<String>, Option<i64>) {
    let Some(cm) = cm else { return (vec![], None) };
    let cas = cm
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .map(|b| split_pem(b))
        .unwrap_or_default();
    let at = cm
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PUBLISHED_AT)?.parse().ok());
    (cas, at)
}

/// The DNS name an agent's certificate carries for its node.
pub fn agent_dns(node: &str, namespace: &str) -> String {
    format!("{node}.agent.{namespace}.svc")
}

/// A Secret's value as text (`None`: missing or not UTF-8).
pub fn text(s: &Secret, key: &str) -> Option<String> {
    let b = s.data.as_ref()?.get(key)?;
    String::from_utf8(b.0.clone()).ok()
}

/// A certificate and its key from two keys of a Secret (`tls.crt`, `tls.key` in ours).
pub fn key_cert(s: &Secret, cert: &str, key: &str) -> Option<KeyCert> {
    Some(KeyCert {
        cert: text(s, cert)?,
        key: text(s, key)?,
    })
}

/// The certificates of a PEM bundle, each with its END line.
pub fn split_pem(bundle: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    bundle
        .split_inclusive(END)
        .map(|c| c.trim_start().to_string())
        .filter(|c| c.ends_with(END))
        .map(|c| c + "\n")
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_split_into_certificates() {
        let a = "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n";
        let b = "-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\n";
        assert_eq!(split_pem(&format!("{a}{b}")), [a, b]);
        assert_eq!(split_pem(""), Vec::<String>::new());
        assert_eq!(split_pem(&format!("{a}\n\n{b}junk")), [a, b]);
    }
}
