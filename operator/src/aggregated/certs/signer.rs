//! The agents' serving certificates, by CertificateSigningRequest: each agent asks for a
//! certificate naming its node (`<node>.agent.<namespace>.svc`) under our signer name; the
//! leader approves and signs it only when the request's API identity proves it comes from a live
//! agent pod of this release on that node. The operator then verifies, on every connection, that
//! the agent it reaches for node N presents N's certificate.
//!
//! Requests from other identities are left alone (another release's operator signs its own
//! agents' requests under the same signer name); requests from our agents' identity that fail a
//! check are Denied with the reason.
use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::ByteString;
use kube::api::{ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use tracing::{info, warn};

use crate::pki::authority::{self, KeyCert};
use crate::pki::overlap::{self, RELOAD_MARGIN};
use crate::pki::{agent_bundle, agent_dns, key_cert, split_pem, text};

/// The signer name agents ask for (one for every release: the requester's identity tells them
/// apart).
pub const SIGNER_NAME: &str = "sandbox.dev/agent-serving";
/// Usages an agent may ask for; "server auth" is required.
const USAGES: [&str; 3] = ["digital signature", "key encipherment", "server auth"];
const NODE_NAME: &str = "authentication.kubernetes.io/node-name";
const POD_NAME: &str = "authentication.kubernetes.io/pod-name";
const POD_UID: &str = "authentication.kubernetes.io/pod-uid";

/// What the leader signs with and for whom.
#[derive(Clone, Debug)]
pub struct Signing {
    pub namespace: String,
    /// `system:serviceaccount:<namespace>:<agent service account>`
    pub agent_user: String,
    /// The agent pods' label selector (with the release's instance label).
    pub agent_selector: String,
    /// The Secret holding the CA (`tls.crt`, `tls.key`), in both certificate modes.
    pub ca_secret: String,
    /// `external` mode: the agents' bundle ConfigMap, which a CA must be settled in before it
    /// signs (cert-manager replaces the CA Secret's CA before anyone trusts the new one).
    pub external_bundle: Option<String>,
    pub validity: Duration,
}

/// What a pending request claims, as the API server recorded it (not as the requester says).
#[derive(Debug, Default, PartialEq)]
pub struct Claim {
    pub username: String,
    pub extra: BTreeMap<String, Vec<String>>,
    pub usages: Vec<String>,
}

/// The decision about a pending request of ours.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Not from our agents: another release's, or nobody's; left alone.
    NotOurs,
    Deny(String),
    /// Sign for this node, if the pod named checks out.
    Node {
        node: String,
        pod: String,
        uid: String,
    },
}

fn one<'a>(extra: &'a BTreeMap<String, Vec<String>>, key: &str) -> Result<&'a str, String> {
    match extra.get(key).map(Vec::as_slice) {
        Some([v]) if !v.is_empty() => Ok(v),
        _ => Err(format!(
            "the requester's token carries no single {key}: request with the agent pod's own \
             (pod-bound) ServiceAccount token"
        )),
    }
}

/// Pure: who asks, and whether what they ask for is within what an agent may have.
pub fn judge(claim: &Claim, agent_user: &str) -> Verdict {
    if claim.username != agent_user {
        return Verdict::NotOurs;
    }
    let (node, pod, uid) = match (
        one(&claim.extra, NODE_NAME),
        one(&claim.extra, POD_NAME),
        one(&claim.extra, POD_UID),
    ) {
        (Ok(n), Ok(p), Ok(u)) => (n, p, u),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return Verdict::Deny(e),
    };
    if !claim.usages.iter().any(|u| u == "server auth") {
        return Verdict::Deny("usages must include \"server auth\"".into());
    }
    if let Some(u) = claim.usages.iter().find(|u| !USAGES.contains(&u.as_str())) {
        return Verdict::Deny(format!("usage {u:?} is not allowed (only {USAGES:?})"));
    }
    Verdict::Node {
        node: node.into(),
        pod: pod.into(),
        uid: uid.into(),
    }
}

/// The leader's loop: watch our signer's requests and answer the pending ones of our agents.
/// One that could not be answered (no CA yet, a new CA still reaching the replicas, a conflict)
/// is retried every few seconds: the agent waits for it.
pub async fn sign_forever(client: Client, s: Signing) {
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.signerName={SIGNER_NAME}"));
    let mut events = watcher::watcher(csrs.clone(), cfg).boxed();
    let mut retry = std::collections::BTreeSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        let names: Vec<String> = tokio::select! {
            ev = events.next() => match ev {
                None => return,
                Some(Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c))) if pending(&c) => {
                    c.metadata.name.into_iter().collect()
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    warn!(error = %e, "watching agent certificate requests; retrying");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    continue;
                }
            },
            _ = tick.tick() => std::mem::take(&mut retry).into_iter().collect(),
        };
        for name in names {
            if let Err(e) = answer(&client, &csrs, &s, &name).await {
                warn!(csr = %name, error = %e, "answering an agent certificate request; retrying");
                retry.insert(name);
            }
        }
    }
}

fn has(csr: &CertificateSigningRequest, types: &[&str]) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| types.contains(&c.type_.as_str())))
}

/// Not refused and not issued yet. An approved one without a certificate (we stopped between
/// the two writes, or someone approved it by hand) is checked and signed like a new one.
fn pending(csr: &CertificateSigningRequest) -> bool {
    let issued = csr
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty());
    !issued && !has(csr, &["Denied", "Failed"])
}

fn claim_of(csr: &CertificateSigningRequest) -> Claim {
    Claim {
        username: csr.spec.username.clone().unwrap_or_default(),
        extra: csr
            .spec
            .extra
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        usages: csr.spec.usages.clone().unwrap_or_default(),
    }
}

async fn answer(
    client: &Client,
    csrs: &Api<CertificateSigningRequest>,
    s: &Signing,
    name: &str,
) -> anyhow::Result<()> {
    // The current version: a retry's copy would conflict.
    let Some(csr) = csrs.get_opt(name).await? else {
        return Ok(());
    };
    if !pending(&csr) {
        return Ok(());
    }
    let (node, pod, uid) = match judge(&claim_of(&csr), &s.agent_user) {
        Verdict::NotOurs => return Ok(()),
        Verdict::Deny(why) => return decide(csrs, csr, false, &why).await,
        Verdict::Node { node, pod, uid } => (node, pod, uid),
    };
    if let Err(why) = live_agent(client, s, &node, &pod, &uid).await? {
        return decide(csrs, csr, false, &why).await;
    }
    let (ca, rollover_at) = read_ca(client, s).await?;
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    // A certificate from a CA the replicas do not trust yet would fail their checks until their
    // next read of the bundle: wait that long after a rollover (not after the first CA: nothing
    // could reach an agent before it anyway).
    if let Some(wait) = rollover_at
        .map(|t| t + RELOAD_MARGIN - now)
        .filter(|w| *w > 0)
    {
        anyhow::bail!("a new CA is reaching the operator replicas; signing in {wait}s");
    }
    let dns = agent_dns(&node, &s.namespace);
    let request = String::from_utf8_lossy(&csr.spec.request.0).into_owned();
    let cert = match authority::sign_request(&ca, &request, &dns, s.validity, now) {
        Ok(c) => c,
        Err(e) => return decide(csrs, csr, false, &e.to_string()).await,
    };
    if !has(&csr, &["Approved"]) {
        decide(csrs, csr, true, &format!("agent pod {pod} on node {node}")).await?;
    }
    // The approval changed the object: sign the current version.
    let mut current = csrs.get(name).await?;
    current
        .status
        .get_or_insert_with(Default::default)
        .certificate = Some(ByteString(cert.into_bytes()));
    csrs.replace_status(name, &PostParams::default(), &current)
        .await?;
    info!(csr = %name, %node, %pod, "agent certificate issued");
    Ok(())
}

/// Whether `pod` is a live agent pod of this release on `node`, with that uid (`Err(reason)`:
/// deny). A token of a deleted pod is refused by the API server already; this also refuses a pod
/// of ours that is not an agent, and an agent moved elsewhere.
async fn live_agent(
    client: &Client,
    s: &Signing,
    node: &str,
    pod: &str,
    uid: &str,
) -> anyhow::Result<Result<(), String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &s.namespace);
    let found = pods
        .list(
            &ListParams::default()
                .labels(&s.agent_selector)
                .fields(&format!("metadata.name={pod}")),
        )
        .await?;
    let Some(p) = found.items.first() else {
        return Ok(Err(format!(
            "pod {pod} is not an agent pod of this release ({})",
            s.agent_selector
        )));
    };
    if p.metadata.uid.as_deref() != Some(uid) {
        return Ok(Err(format!(
            "pod {pod} has another uid than the requester's"
        )));
    }
    if p.metadata.deletion_timestamp.is_some() {
        return Ok(Err(format!("pod {pod} is being deleted")));
    }
    let on = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
    if on != Some(node) {
        return Ok(Err(format!(
            "pod {pod} runs on {}, not on {node}",
            on.unwrap_or("no node")
        )));
    }
    Ok(Ok(()))
}

/// The CA, and when it entered the bundle if that was a rollover (mode self: the bundle still
/// holds the previous CA; mode external: the agents' bundle gained it).
async fn read_ca(client: &Client, s: &Signing) -> anyhow::Result<(KeyCert, Option<i64>)> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &s.namespace);
    let sec = secrets
        .get_opt(&s.ca_secret)
        .await?
        .ok_or_else(|| anyhow::anyhow!("CA Secret {} does not exist (yet)", s.ca_secret))?;
    let ca = key_cert(&sec, "tls.crt", "tls.key")
        .ok_or_else(|| anyhow::anyhow!("CA Secret {} has no tls.crt/tls.key (yet)", s.ca_secret))?;
    if let Some(name) = &s.external_bundle {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &s.namespace);
        let (published, at) = agent_bundle(cms.get_opt(name).await?.as_ref());
        anyhow::ensure!(
            overlap::contains(&published, &ca.cert),
            "the CA in Secret {} is not in the agents' bundle {name} yet",
            s.ca_secret
        );
        return Ok((ca, at));
    }
    let published = sec
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(super::PUBLISHED_AT)?.parse().ok());
    let cas = text(&sec, "ca-bundle.crt")
        .map(|b| split_pem(&b).len())
        .unwrap_or(0);
    Ok((ca, published.filter(|_| cas > 1)))
}

/// Approves or denies through the approval subresource (update: conflicts are retried by the
/// next watch event).
async fn decide(
    csrs: &Api<CertificateSigningRequest>,
    mut csr: CertificateSigningRequest,
    approve: bool,
    message: &str,
) -> anyhow::Result<()> {
    let name = csr.metadata.name.clone().unwrap_or_default();
    let (type_, reason) = if approve {
        ("Approved", "AgentOfNode")
    } else {
        ("Denied", "NotAnAgentOfNode")
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    csr.status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: type_.into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some(message.chars().take(1024).collect()),
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
    csrs.replace_subresource("approval", &name, &PostParams::default(), &csr)
        .await?;
    if !approve {
        warn!(csr = %name, reason = message, "agent certificate request denied");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: &str = "system:serviceaccount:sandbox-system:sandbox-process-operator-agent";

    fn claim(user: &str, extra: &[(&str, &[&str])], usages: &[&str]) -> Claim {
        Claim {
            username: user.into(),
            extra: extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
                .collect(),
            usages: usages.iter().map(|s| s.to_string()).collect(),
        }
    }

    const BOUND: &[(&str, &[&str])] = &[
        (NODE_NAME, &["n1"]),
        (POD_NAME, &["agent-x"]),
        (POD_UID, &["u1"]),
    ];

    #[test]
    fn only_our_agents_pod_bound_requests_for_serving_are_signed() {
        let ok = claim(AGENT, BOUND, &USAGES);
        assert_eq!(
            judge(&ok, AGENT),
            Verdict::Node {
                node: "n1".into(),
                pod: "agent-x".into(),
                uid: "u1".into()
            }
        );
        // Another release's agents, or anyone else: not ours to answer.
        let other = claim(
            "system:serviceaccount:other:sandbox-process-operator-agent",
            BOUND,
            &USAGES,
        );
        assert_eq!(judge(&other, AGENT), Verdict::NotOurs);
        assert_eq!(
            judge(&claim("alice", BOUND, &USAGES), AGENT),
            Verdict::NotOurs
        );
        // Our identity, but not pod-bound, bound to two nodes, or asking for more.
        let deny = |c: &Claim| matches!(judge(c, AGENT), Verdict::Deny(_));
        assert!(deny(&claim(AGENT, &[], &USAGES)));
        assert!(deny(&claim(
            AGENT,
            &[
                (NODE_NAME, &["n1", "n2"]),
                (POD_NAME, &["a"]),
                (POD_UID, &["u"])
            ],
            &USAGES
        )));
        assert!(deny(&claim(
            AGENT,
            BOUND,
            &["digital signature", "client auth", "server auth"]
        )));
        assert!(deny(&claim(AGENT, BOUND, &["digital signature"])));
        assert!(!deny(&claim(AGENT, BOUND, &["server auth"])));
    }

    #[test]
    fn decided_or_issued_requests_are_not_pending() {
        let mut csr = CertificateSigningRequest::default();
        assert!(pending(&csr));
        csr.status = Some(Default::default());
        csr.status.as_mut().unwrap().conditions = Some(vec![CertificateSigningRequestCondition {
            type_: "Denied".into(),
            status: "True".into(),
            ..Default::default()
        }]);
        assert!(!pending(&csr));
        csr.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].type_ = "Approved".into();
        assert!(pending(&csr), "approved but not signed: still to sign");
        csr.status.as_mut().unwrap().certificate = Some(ByteString(b"x".to_vec()));
        assert!(!pending(&csr));
    }
}
