//! Certificate helpers shared by the operator's CA (`certs`) and its agent client (`agent`): the
//! pure certificate authority ([`authority`]), PEM text out of Secrets, and the name an agent's
//! certificate carries. A leaf: it imports nothing else of the crate.
pub mod authority;

use k8s_openapi::api::core::v1::Secret;

use authority::KeyCert;

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
