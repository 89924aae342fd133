//! The subresource API's certificates, rendered by nobody: the chart holds no key material, so
//! `helm template` is deterministic and GitOps tools see no drift.
//!
//! - `self` mode: the leader owns a CA ([`authority`]) and keeps two Secrets: the CA (with the
//!   trusted bundle, the previous CA included during a rollover) and the serving certificate;
//!   it publishes the bundle into the APIService's `caBundle`. Renewal at 2/3 of validity.
//! - `external` mode (cert-manager): something else writes the CA and serving Secrets and the
//!   APIService's `caBundle`; the operator publishes the agents' bundle, keeping every CA it saw
//!   until it expires, since cert-manager replaces its CA with no overlap.
//!
//! Every replica reloads the serving Secret and the API server's request-header CA while it
//! runs ([`reload`]): new connections get the new certificate, open ones keep theirs.
pub mod reload;
pub mod signer;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use k8s_openapi::ByteString;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use tracing::{debug, info, warn};

use crate::pki::authority::{self, Stored, Validity};
use crate::pki::{agent_bundle, key_cert, overlap, split_pem, text};

const FIELD_MANAGER: &str = "sandbox-operator-certs";
pub(crate) use crate::pki::PUBLISHED_AT;

/// What the leader keeps.
#[derive(Clone, Debug)]
pub struct Issuing {
    pub namespace: String,
    pub ca_secret: String,
    pub serving_secret: String,
    /// The APIServices whose `caBundle` carries the bundle (none without the subresource API).
    pub api_services: Vec<String>,
    /// The MutatingWebhookConfiguration served by the same server (none without it).
    pub webhook: Option<String>,
    /// The serving certificate's names (the Service's DNS names).
    pub dns: Vec<String>,
    /// The ConfigMap (key `ca.crt`) the agents read the bundle from, to verify our client
    /// certificates.
    pub agent_bundle: String,
    pub validity: Validity,
}

impl Issuing {
    /// How often the leader looks (three GETs): a Secret or caBundle removed by someone else (a
    /// Helm upgrade from a chart that rendered them) is back within this.
    fn tick(&self) -> Duration {
        (self.validity.leaf / 20).clamp(Duration::from_secs(5), Duration::from_secs(10))
    }

    /// How long a new CA is in the bundle before the serving certificate moves to it: the
    /// API server reads the APIService at once; replicas reload within their poll period.
    fn publish_delay(&self) -> Duration {
        (self.validity.leaf / 10).clamp(Duration::from_secs(20), Duration::from_secs(600))
    }
}

/// The leader's loop: renew what is due, publish the bundle. Errors are logged and retried.
pub async fn issue_forever(client: Client, s: Issuing) {
    loop {
        if let Err(e) = issue_once(&client, &s).await {
            warn!(error = %e, "certificates: will retry");
        }
        tokio::time::sleep(s.tick()).await;
    }
}

pub async fn issue_once(client: &Client, s: &Issuing) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &s.namespace);
    let ca = secrets.get_opt(&s.ca_secret).await?;
    let serving = secrets.get_opt(&s.serving_secret).await?;
    let stored = Stored {
        ca: ca.as_ref().and_then(|c| key_cert(c, "tls.crt", "tls.key")),
        bundle: ca
            .as_ref()
            .and_then(|c| text(c, "ca-bundle.crt"))
            .map(|b| split_pem(&b))
            .unwrap_or_default(),
        leaf: serving
            .as_ref()
            .and_then(|c| key_cert(c, "tls.crt", "tls.key")),
        ca_published_at: ca.as_ref().and_then(|c| {
            c.metadata
                .annotations
                .as_ref()?
                .get(PUBLISHED_AT)?
                .parse()
                .ok()
        }),
    };
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let next = authority::plan(
        &stored,
        &s.ca_secret,
        &s.dns,
        s.validity,
        s.publish_delay(),
        now,
    )?;
    let state = match next {
        None => stored,
        Some(next) => {
            write(&secrets, s, &next).await?;
            info!(
                leaf_expires = authority::not_after(&next.leaf.as_ref().unwrap().cert),
                trusted_cas = next.bundle.len(),
                "certificates renewed"
            );
            next
        }
    };
    // A rollover's mark only while the previous CA is still in the bundle, as the signer reads it.
    let at = state.ca_published_at.filter(|_| state.bundle.len() > 1);
    publish_agent_bundle(client, s, &state.bundle.concat(), at).await?;
    if let Some(name) = &s.webhook {
        publish_webhook_bundle(client, name, &state.bundle.concat()).await?;
    }
    for name in &s.api_services {
        publish_bundle(client, s, name, &state.bundle.concat()).await?;
    }
    Ok(())
}

/// The annotation by which the chart hands an APIService's `caBundle` to this operator (mode
/// `self`): `<namespace>/<CA Secret>`. Without it the field is someone else's: a `helm rollback`
/// to a release that rendered its own caBundle (overwriting that kept the aggregated API
/// unverifiable after the rollback: e2e/suites/upgrade), or cert-manager's cainjector.
pub const CA_BUNDLE_FROM: &str = "sandbox.dev/ca-bundle-from";

/// Whether the APIService's annotations hand its caBundle to the operator keeping `ca_secret`.
fn bundle_is_ours(annotations: Option<&BTreeMap<String, String>>, s: &Issuing) -> bool {
    let want = format!("{}/{}", s.namespace, s.ca_secret);
    annotations.and_then(|a| a.get(CA_BUNDLE_FROM)) == Some(&want)
}

/// `external` mode: the CAs cert-manager put in the CA and serving Secrets, published for the
/// agents and the replicas with every CA seen before kept until it expires ([`overlap`]).
pub async fn mirror_forever(client: Client, s: Issuing) {
    loop {
        if let Err(e) = mirror_once(&client, &s).await {
            warn!(error = %e, "publishing the agents' CA bundle; will retry");
        }
        tokio::time::sleep(s.tick()).await;
    }
}

async fn mirror_once(client: &Client, s: &Issuing) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &s.namespace);
    let mut seen = Vec::new();
    for (name, keys) in [
        (&s.ca_secret, &["tls.crt", "ca.crt"][..]),
        (&s.serving_secret, &["ca.crt"][..]),
    ] {
        if let Some(sec) = secrets.get_opt(name).await? {
            for k in keys {
                seen.extend(text(&sec, k).map(|b| split_pem(&b)).unwrap_or_default());
            }
        }
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &s.namespace);
    let (kept, previous) = agent_bundle(cms.get_opt(&s.agent_bundle).await?.as_ref());
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let next = overlap::union(&seen, &kept, now);
    if next.is_empty() {
        return Ok(()); // nothing issued yet
    }
    let at = overlap::published_at(&next, &kept, previous, now);
    publish_agent_bundle(client, s, &next.concat(), at).await
}

/// The agents' copy of the bundle, when it differs (server-side apply, our field manager), with
/// when it last gained a CA (`PUBLISHED_AT`), which the signer and the replicas wait on.
async fn publish_agent_bundle(
    client: &Client,
    s: &Issuing,
    bundle: &str,
    published_at: Option<i64>,
) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &s.namespace);
    let have = api.get_opt(&s.agent_bundle).await?;
    let same = have.as_ref().is_some_and(|c| {
        c.data
            .as_ref()
            .and_then(|d| d.get("ca.crt"))
            .map(String::as_str)
            == Some(bundle)
            && agent_bundle(Some(c)).1 == published_at
    });
    if same {
        return Ok(());
    }
    let annotations: BTreeMap<String, String> = published_at
        .map(|t| (PUBLISHED_AT.to_string(), t.to_string()))
        .into_iter()
        .collect();
    let cm = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": s.agent_bundle,
            "namespace": s.namespace,
            "labels": {"app.kubernetes.io/managed-by": "sandbox-operator"},
            "annotations": annotations,
        },
        "data": {"ca.crt": bundle},
    });
    api.patch(
        &s.agent_bundle,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await?;
    info!(configmap = %s.agent_bundle, cas = split_pem(bundle).len(), "agents' CA bundle published");
    Ok(())
}

async fn write(secrets: &Api<Secret>, s: &Issuing, next: &Stored) -> anyhow::Result<()> {
    let ca = next.ca.as_ref().expect("a plan always has a CA");
    let leaf = next.leaf.as_ref().expect("a plan always has a leaf");
    let bundle = next.bundle.concat();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    // The CA first: a crash between the two writes leaves a leaf the next look reissues.
    let ca_secret = secret(
        &s.ca_secret,
        &s.namespace,
        [
            ("tls.crt", ca.cert.as_str()),
            ("tls.key", ca.key.as_str()),
            ("ca-bundle.crt", bundle.as_str()),
        ],
        next.ca_published_at
            .map(|t| (PUBLISHED_AT.to_string(), t.to_string())),
    );
    secrets
        .patch(&s.ca_secret, &params, &Patch::Apply(&ca_secret))
        .await?;
    let serving = secret(
        &s.serving_secret,
        &s.namespace,
        [
            ("tls.crt", leaf.cert.as_str()),
            ("tls.key", leaf.key.as_str()),
            ("ca.crt", bundle.as_str()),
        ],
        None,
    );
    secrets
        .patch(&s.serving_secret, &params, &Patch::Apply(&serving))
        .await?;
    Ok(())
}

/// The APIService's `caBundle`, when it differs (the API server verifies us with it) and the
/// APIService hands it to us ([`CA_BUNDLE_FROM`]).
async fn publish_bundle(
    client: &Client,
    s: &Issuing,
    name: &str,
    bundle: &str,
) -> anyhow::Result<()> {
    let api: Api<APIService> = Api::all(client.clone());
    let Some(current) = api.get_opt(name).await? else {
        debug!(
            apiservice = name,
            "no such APIService: no caBundle to publish"
        );
        return Ok(());
    };
    if !bundle_is_ours(current.metadata.annotations.as_ref(), s) {
        debug!(
            apiservice = name,
            "caBundle left alone: not handed to us ({CA_BUNDLE_FROM})"
        );
        return Ok(());
    }
    let have = current
        .spec
        .as_ref()
        .and_then(|s| s.ca_bundle.as_ref())
        .map(|b| b.0.as_slice());
    if have == Some(bundle.as_bytes()) {
        return Ok(());
    }
    // With the version read: a write in between (a rollback taking the field back) wins.
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": current.metadata.resource_version},
        "spec": {"caBundle": ByteString(bundle.as_bytes().to_vec())},
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    info!(apiservice = name, "caBundle published");
    Ok(())
}

/// Every webhook's `caBundle` in the MutatingWebhookConfiguration, when it differs.
async fn publish_webhook_bundle(client: &Client, name: &str, bundle: &str) -> anyhow::Result<()> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let current = api.get(name).await?;
    let ops: Vec<serde_json::Value> = (current.webhooks.iter().flatten().enumerate())
        .filter(|(_, w)| {
            w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle.as_bytes())
        })
        .map(|(i, _)| {
            serde_json::json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"),
                "value": ByteString(bundle.as_bytes().to_vec())})
        })
        .collect();
    if ops.is_empty() {
        return Ok(());
    }
    // The index test guards against a reorder between our GET and this PATCH.
    let mut guarded = vec![
        serde_json::json!({"op": "test", "path": "/metadata/resourceVersion",
        "value": current.metadata.resource_version}),
    ];
    guarded.extend(ops);
    let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(guarded))?;
    api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await?;
    info!(webhook = name, "caBundle published");
    Ok(())
}

fn secret<const N: usize>(
    name: &str,
    namespace: &str,
    data: [(&str, &str); N],
    annotation: Option<(String, String)>,
) -> serde_json::Value {
    let data: BTreeMap<&str, ByteString> = data
        .into_iter()
        .map(|(k, v)| (k, ByteString(v.as_bytes().to_vec())))
        .collect();
    let annotations: BTreeMap<String, String> = annotation.into_iter().collect();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": annotations,
            "labels": {"app.kubernetes.io/managed-by": "sandbox-operator"},
        },
        // The type of the Secret the chart used to render (immutable): an upgrade finds it.
        "type": "kubernetes.io/tls",
        "data": data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_is_ours_only_when_the_apiservice_hands_it_to_our_ca_secret() {
        let s = Issuing {
            namespace: "sandbox-system".into(),
            ca_secret: "spo-ca".into(),
            serving_secret: "spo-serving".into(),
            api_services: vec!["v1alpha1.subresources.sandbox.dev".into()],
            webhook: None,
            dns: vec![],
            agent_bundle: "spo-ca-bundle".into(),
            validity: Validity {
                ca: Duration::from_secs(3600),
                leaf: Duration::from_secs(600),
            },
        };
        let with = |v: &str| BTreeMap::from([(CA_BUNDLE_FROM.to_string(), v.to_string())]);
        let cases: [(Option<BTreeMap<String, String>>, bool); 5] = [
            (Some(with("sandbox-system/spo-ca")), true),
            // a release before the annotation (a rollback to it), or cert-manager's
            (None, false),
            (Some(BTreeMap::new()), false),
            (Some(with("other-ns/spo-ca")), false),
            (Some(with("sandbox-system/other-ca")), false),
        ];
        for (annotations, want) in cases {
            assert_eq!(
                bundle_is_ours(annotations.as_ref(), &s),
                want,
                "{annotations:?}"
            );
        }
    }
}
