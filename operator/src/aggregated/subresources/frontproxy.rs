//! Who is asking: the API server's front proxy (aggregation layer) authenticates the user and
//! passes the identity in request headers; we trust those headers only on a connection whose
//! client certificate chains to the request-header CA and names an allowed proxy.
//!
//! The configuration is the one the API server publishes for extension API servers in
//! `kube-system/extension-apiserver-authentication` (what `k8s.io/apiserver`'s
//! `RequestHeaderAuthenticationOptions` reads).
use std::collections::BTreeMap;

use axum::http::HeaderMap;
use k8s_openapi::api::core::v1::ConfigMap;

pub const CONFIGMAP_NAMESPACE: &str = "kube-system";
pub const CONFIGMAP_NAME: &str = "extension-apiserver-authentication";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} has no requestheader-client-ca-file: the API server runs without --requestheader-client-ca-file, so it cannot proxy to extension API servers")]
    NoClientCa,
    #[error(
        "{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}: {key} is not a JSON list of strings: {source}"
    )]
    BadList {
        key: &'static str,
        source: serde_json::Error,
    },
}

/// The request-header authentication settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestHeaderConfig {
    /// PEM bundle the proxy's client certificate must chain to.
    pub client_ca_pem: String,
    /// Common names the proxy's certificate may carry; empty: any.
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub uid_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_headers_prefix: Vec<String>,
}

fn list(data: &BTreeMap<String, String>, key: &'static str) -> Result<Vec<String>, ConfigError> {
    match data.get(key).map(|s| s.trim()) {
        None | Some("") => Ok(Vec::new()),
        Some(s) => serde_json::from_str(s).map_err(|source| ConfigError::BadList { key, source }),
    }
}

impl RequestHeaderConfig {
    pub fn from_configmap(cm: &ConfigMap) -> Result<RequestHeaderConfig, ConfigError> {
        let empty = BTreeMap::new();
        let data = cm.data.as_ref().unwrap_or(&empty);
        let client_ca_pem = data
            .get("requestheader-client-ca-file")
            .filter(|s| !s.trim().is_empty())
            .ok_or(ConfigError::NoClientCa)?
            .clone();
        Ok(RequestHeaderConfig {
            client_ca_pem,
            allowed_names: list(data, "requestheader-allowed-names")?,
            username_headers: list(data, "requestheader-username-headers")?,
            uid_headers: list(data, "requestheader-uid-headers")?,
            group_headers: list(data, "requestheader-group-headers")?,
            extra_headers_prefix: list(data, "requestheader-extra-headers-prefix")?,
        })
    }

    /// Whether a proxy certificate with this common name may assert identities.
    pub fn allows(&self, common_name: Option<&str>) -> bool {
        self.allowed_names.is_empty()
            || common_name.is_some_and(|cn| self.allowed_names.iter().any(|a| a == cn))
    }

    /// The user the proxy asserts; `None` without a username header.
    pub fn user(&self, headers: &HeaderMap) -> Option<UserInfo> {
        let first = |names: &[String]| {
            names
                .iter()
                .find_map(|n| headers.get(n.as_str())?.to_str().ok())
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let username = first(&self.username_headers)?;
        let uid = first(&self.uid_headers);
        let mut groups = Vec::new();
        for n in &self.group_headers {
            for v in headers.get_all(n.as_str()) {
                if let Ok(v) = v.to_str() {
                    groups.push(v.to_string());
                }
            }
        }
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in headers {
            let name = name.as_str();
            let Some(key) = self.extra_headers_prefix.iter().find_map(|p| {
                name.get(..p.len())
                    .filter(|head| head.eq_ignore_ascii_case(p))
                    .map(|_| &name[p.len()..])
            }) else {
                continue;
            };
            if let Ok(v) = value.to_str() {
                // Keys are percent-encoded by the proxy (they may hold '/' and other bytes).
                extra
                    .entry(percent_decode(key).to_ascii_lowercase())
                    .or_default()
                    .push(v.to_string());
            }
        }
        Some(UserInfo {
            username,
            uid,
            groups,
            extra,
        })
    }
}

/// An authenticated user, as the API server saw them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn config() -> RequestHeaderConfig {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "data": {
                "requestheader-client-ca-file": "-----BEGIN CERTIFICATE-----\n...",
                "requestheader-allowed-names": "[\"front-proxy-client\"]",
                "requestheader-username-headers": "[\"X-Remote-User\"]",
                "requestheader-group-headers": "[\"X-Remote-Group\"]",
                "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
            }
        }))
        .unwrap();
        RequestHeaderConfig::from_configmap(&cm).unwrap()
    }

    #[test]
    fn reads_the_published_configmap() {
        let c = config();
        assert_eq!(c.allowed_names, ["front-proxy-client"]);
        assert_eq!(c.username_headers, ["X-Remote-User"]);
        assert!(c.uid_headers.is_empty());
        assert!(c.allows(Some("front-proxy-client")));
        assert!(!c.allows(Some("someone-else")));
        assert!(!c.allows(None));
    }

    #[test]
    fn any_name_when_no_allowed_names() {
        let c = RequestHeaderConfig {
            client_ca_pem: "x".into(),
            ..Default::default()
        };
        assert!(c.allows(None));
    }

    #[test]
    fn missing_ca_is_an_error_naming_the_flag() {
        let e = RequestHeaderConfig::from_configmap(&ConfigMap::default()).unwrap_err();
        assert!(
            e.to_string().contains("--requestheader-client-ca-file"),
            "{e}"
        );
    }

    #[test]
    fn bad_list_names_the_key() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "data": {"requestheader-client-ca-file": "x", "requestheader-username-headers": "X-Remote-User"}
        }))
        .unwrap();
        let e = RequestHeaderConfig::from_configmap(&cm).unwrap_err();
        assert!(
            e.to_string().contains("requestheader-username-headers"),
            "{e}"
        );
    }

    #[test]
    fn user_groups_and_extra_from_headers() {
        let c = config();
        let mut h = HeaderMap::new();
        h.insert("x-remote-user", HeaderValue::from_static("alice"));
        h.append("x-remote-group", HeaderValue::from_static("dev"));
        h.append(
            "x-remote-group",
            HeaderValue::from_static("system:authenticated"),
        );
        h.append(
            "x-remote-extra-authentication.kubernetes.io%2fpod-name",
            HeaderValue::from_static("p1"),
        );
        h.append("x-remote-extra-scopes", HeaderValue::from_static("a"));
        h.append("x-remote-extra-scopes", HeaderValue::from_static("b"));
        let u = c.user(&h).unwrap();
        assert_eq!(u.username, "alice");
        assert_eq!(u.groups, ["dev", "system:authenticated"]);
        assert_eq!(
            u.extra["authentication.kubernetes.io/pod-name"],
            vec!["p1".to_string()]
        );
        assert_eq!(u.extra["scopes"], ["a", "b"]);
    }

    #[test]
    fn no_username_header_no_user() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-group", HeaderValue::from_static("dev"));
        assert_eq!(config().user(&h), None);
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%2Fb%2fc"), "a/b/c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
