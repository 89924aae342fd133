//! `env[].valueFrom`: values read from Secrets and ConfigMaps of the object's namespace when the
//! process starts. They go into the start request only: never into the status, Events or logs
//! (messages name the variable, the object and the key, never a value).
use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use sandbox_api::crd::SandboxProcessSpec;

/// Every reason of [`Unresolved`].
pub const REASONS: &[&str] = &[
    "SecretNotFound",
    "ConfigMapNotFound",
    "KeyNotFound",
    "InvalidEnvValue",
    "EnvSourceUnreadable",
];

/// Why the values cannot be read yet: the process stays `Pending` with this reason until they
/// can, or its start deadline passes.
#[derive(Debug, PartialEq, Eq)]
pub struct Unresolved {
    pub reason: &'static str,
    pub message: String,
}

/// One referenced object's data: key → bytes (Secret `data`, ConfigMap `data` + `binaryData`);
/// `None` when the object does not exist.
type Data = Option<BTreeMap<String, Vec<u8>>>;

/// The value of every `valueFrom` variable that can be read, by variable name (an optional one
/// that is missing is left out).
pub async fn resolve(
    client: &Client,
    ns: &str,
    spec: &SandboxProcessSpec,
) -> Result<BTreeMap<String, String>, Unresolved> {
    let mut fetched: HashMap<(&'static str, String), Data> = HashMap::new();
    for e in &spec.env {
        let Some((kind, r)) = e.value_from.as_ref().and_then(|f| f.reference()) else {
            continue;
        };
        let key = (kind, r.name.clone());
        if !fetched.contains_key(&key) {
            let data = fetch(client, ns, kind, &r.name)
                .await
                .map_err(|error| Unresolved {
                    reason: "EnvSourceUnreadable",
                    message: format!("env {}: reading {kind} {:?}: {error}", e.name, r.name),
                })?;
            fetched.insert(key.clone(), data);
        }
    }
    pick(spec, &fetched)
}

/// The values from what was fetched (pure: the rules of missing objects, keys and bad bytes).
pub fn pick(
    spec: &SandboxProcessSpec,
    fetched: &HashMap<(&'static str, String), Data>,
) -> Result<BTreeMap<String, String>, Unresolved> {
    let mut out = BTreeMap::new();
    for e in &spec.env {
        let Some((kind, r)) = e.value_from.as_ref().and_then(|f| f.reference()) else {
            continue;
        };
        let data = fetched
            .get(&(kind, r.name.clone()))
            .and_then(Option::as_ref);
        let what = format!("env {}: key {:?} of {kind} {:?}", e.name, r.key, r.name);
        let bytes = match data {
            None if r.optional => continue,
            None => {
                return Err(Unresolved {
                    reason: if kind == "Secret" {
                        "SecretNotFound"
                    } else {
                        "ConfigMapNotFound"
                    },
                    message: format!("{what}: the {kind} does not exist (yet)"),
                })
            }
            Some(d) => match d.get(&r.key) {
                None if r.optional => continue,
                None => {
                    return Err(Unresolved {
                        reason: "KeyNotFound",
                        message: format!("{what}: no such key (yet)"),
                    })
                }
                Some(b) => b,
            },
        };
        let value = String::from_utf8(bytes.clone()).map_err(|_| Unresolved {
            reason: "InvalidEnvValue",
            message: format!("{what}: the value is not UTF-8"),
        })?;
        if value.contains('\0') {
            return Err(Unresolved {
                reason: "InvalidEnvValue",
                message: format!("{what}: the value contains a NUL character"),
            });
        }
        out.insert(e.name.clone(), value);
    }
    Ok(out)
}

async fn fetch(client: &Client, ns: &str, kind: &str, name: &str) -> Result<Data, kube::Error> {
    Ok(if kind == "Secret" {
        Api::<Secret>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await?
            .map(|s| {
                s.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect()
            })
    } else {
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await?
            .map(|c| {
                let mut d: BTreeMap<String, Vec<u8>> = c
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect();
                d.extend(
                    c.binary_data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0)),
                );
                d
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(env: &str) -> SandboxProcessSpec {
        serde_yaml_ng::from_str(&format!("podName: p\ncommand: [x]\nenv: {env}\n")).unwrap()
    }

    fn data(pairs: &[(&str, &[u8])]) -> Data {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_vec()))
                .collect(),
        )
    }

    #[test]
    fn values_by_name_optional_left_out_missing_waits() {
        let s = spec(
            "[{name: A, value: lit}, {name: T, valueFrom: {secretKeyRef: {name: s, key: token}}}, \
             {name: C, valueFrom: {configMapKeyRef: {name: c, key: k}}}, \
             {name: O, valueFrom: {secretKeyRef: {name: gone, key: x, optional: true}}}, \
             {name: K, valueFrom: {secretKeyRef: {name: s, key: nokey, optional: true}}}]",
        );
        let mut f = HashMap::new();
        f.insert(("Secret", "s".to_string()), data(&[("token", b"t0p")]));
        f.insert(("ConfigMap", "c".to_string()), data(&[("k", b"v")]));
        f.insert(("Secret", "gone".to_string()), None);
        let got = pick(&s, &f).unwrap();
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            vec![("C".into(), "v".into()), ("T".into(), "t0p".into())]
        );
        f.insert(("Secret", "s".to_string()), None);
        let e = pick(&s, &f).unwrap_err();
        assert_eq!(e.reason, "SecretNotFound");
        assert!(
            e.message.contains("env T") && !e.message.contains("t0p"),
            "{e:?}"
        );
        f.insert(("Secret", "s".to_string()), data(&[("other", b"x")]));
        assert_eq!(pick(&s, &f).unwrap_err().reason, "KeyNotFound");
        f.insert(("Secret", "s".to_string()), data(&[("token", b"a\0b")]));
        let e = pick(&s, &f).unwrap_err();
        assert_eq!(e.reason, "InvalidEnvValue");
        assert!(!e.message.contains("a\0b"));
    }
}
