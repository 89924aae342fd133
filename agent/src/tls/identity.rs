//! The agent's serving certificate: kept in `<state-dir>/tls/` (0600) so a restart serves at
//! once with a still-good one, and requested from the operator's signer by a
//! CertificateSigningRequest when there is none, it names another node, or 2/3 of its validity
//! has passed.
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use rcgen::{CertificateParams, KeyPair};
use tokio::sync::watch;
use tracing::{info, warn};
use x509_parser::extensions::{GeneralName, ParsedExtension};

use super::TlsError;

/// A certificate with its key, both PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyCert {
    pub cert: String,
    pub key: String,
}

pub struct Identity {
    /// CertificateSigningRequests, with the pod's own token (create, get).
    pub csrs: Api<CertificateSigningRequest>,
    pub node: String,
    pub namespace: String,
    pub signer: String,
    pub dir: PathBuf,
}

/// Validity, names and key identifiers of a certificate.
struct Facts {
    not_before: i64,
    not_after: i64,
    dns: Vec<String>,
    /// Subject key identifier (a CA's) / authority key identifier (who issued it).
    ski: Option<Vec<u8>>,
    aki: Option<Vec<u8>>,
}

fn facts(pem: &str) -> Option<Facts> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = p.parse_x509().ok()?;
    let (mut dns, mut ski, mut aki) = (vec![], None, None);
    for ext in cert.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::SubjectAlternativeName(san) => {
                for n in &san.general_names {
                    if let GeneralName::DNSName(d) = n {
                        dns.push(d.to_string());
                    }
                }
            }
            ParsedExtension::SubjectKeyIdentifier(k) => ski = Some(k.0.to_vec()),
            ParsedExtension::AuthorityKeyIdentifier(a) => {
                aki = a.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => {}
        }
    }
    Some(Facts {
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        dns,
        ski,
        aki,
    })
}

/// When `cert` (PEM) expires, in seconds since the epoch (`None`: unreadable).
pub fn not_after(cert: &str) -> Option<i64> {
    facts(cert).map(|f| f.not_after)
}

/// Whether one of the bundle's CAs issued `cert` (a certificate kept from another CA — a
/// reinstalled release, a CA replaced outright — is of no use: the operator would refuse it).
pub fn issued_by_one_of(cert: &str, bundle: &str) -> bool {
    let Some(aki) = facts(cert).and_then(|f| f.aki) else {
        return false;
    };
    bundle
        .split_inclusive("-----END CERTIFICATE-----")
        .filter_map(|c| facts(c.trim_start()))
        .any(|ca| ca.ski.as_deref() == Some(aki.as_slice()))
}

/// Pure: how long `cert` serves as ours before it is renewed (`None`: not usable now — unreadable,
/// for another name, expired, or at 2/3 of its validity).
pub fn renew_in(cert: &str, dns: &str, now: i64) -> Option<Duration> {
    let f = facts(cert)?;
    if f.dns != [dns] {
        return None;
    }
    let due = f.not_before + (f.not_after - f.not_before) * 2 / 3;
    (now < due && now < f.not_after).then(|| Duration::from_secs((due - now) as u64))
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Identity {
    pub fn dns(&self) -> String {
        format!("{}.agent.{}.svc", self.node, self.namespace)
    }

    fn load(&self) -> Option<KeyCert> {
        let read = |f: &str| std::fs::read_to_string(self.dir.join(f)).ok();
        Some(KeyCert {
            cert: read("tls.crt")?,
            key: read("tls.key")?,
        })
    }

    fn store(&self, kc: &KeyCert) -> Result<(), TlsError> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let io = |what: String| move |e| TlsError::Io(what, e);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(io(format!("creating {}", self.dir.display())))?;
        // Key before certificate, each written whole then renamed: a crash leaves the old pair
        // or a certificate the next start finds unusable for its key (and requests again).
        for (name, body) in [("tls.key", &kc.key), ("tls.crt", &kc.cert)] {
            let tmp = self.dir.join(format!(".{name}.tmp"));
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io(format!("writing {}", tmp.display())))?;
            f.write_all(body.as_bytes())
                .and_then(|_| f.sync_all())
                .map_err(io(format!("writing {}", tmp.display())))?;
            std::fs::rename(&tmp, self.dir.join(name))
                .map_err(io(format!("renaming {}", tmp.display())))?;
        }
        Ok(())
    }

    /// A new key and a certificate for it from the signer (waits for the operator's answer).
    async fn request(&self) -> Result<KeyCert, TlsError> {
        let key = KeyPair::generate()?;
        let dns = self.dns();
        let mut p = CertificateParams::new(vec![dns.clone()])?;
        p.distinguished_name.push(rcgen::DnType::CommonName, &dns);
        let csr = p.serialize_request(&key)?.pem()?;
        // A name the API server accepts whatever the node name's length.
        let prefix: String = format!("sandbox-agent-{}", self.node)
            .chars()
            .take(200)
            .collect();
        let csr = CertificateSigningRequest {
            metadata: ObjectMeta {
                generate_name: Some(format!("{prefix}-")),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(csr.into_bytes()),
                signer_name: self.signer.clone(),
                usages: Some(
                    ["digital signature", "key encipherment", "server auth"]
                        .map(String::from)
                        .to_vec(),
                ),
                ..Default::default()
            },
            status: None,
        };
        let created = call(self.csrs.create(&PostParams::default(), &csr)).await?;
        let name = created.metadata.name.unwrap_or_default();
        info!(csr = %name, %dns, "serving certificate requested");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let status = call(self.csrs.get(&name)).await?.status.unwrap_or_default();
            if let Some(c) = status
                .conditions
                .iter()
                .flatten()
                .find(|c| matches!(c.type_.as_str(), "Denied" | "Failed"))
            {
                return Err(TlsError::Refused {
                    name,
                    reason: c.message.clone().unwrap_or_default(),
                });
            }
            if let Some(issued) = status.certificate.filter(|c| !c.0.is_empty()) {
                let cert = String::from_utf8(issued.0)
                    .map_err(|_| TlsError::Api(format!("{name}: certificate not PEM")))?;
                return Ok(KeyCert {
                    cert,
                    key: key.serialize_pem(),
                });
            }
            if tokio::time::Instant::now() > deadline {
                return Err(TlsError::Refused {
                    name,
                    reason: "no answer within 120s (is the operator running, with the signer?)"
                        .into(),
                });
            }
        }
    }
}

/// One API call, bounded in time.
async fn call<T>(
    fut: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, TlsError> {
    tokio::time::timeout(Duration::from_secs(15), fut)
        .await
        .map_err(|_| TlsError::Api("no answer within 15s".into()))?
        .map_err(|e| TlsError::Api(e.to_string()))
}

/// Keeps a usable certificate in `tx`, forever: the stored one while it is good and issued by a
/// CA of the current bundle, a new one requested at 2/3 of its validity or when the bundle no
/// longer has its CA (retried with backoff; the current one serves meanwhile).
pub async fn keep(
    id: Identity,
    mut bundle: watch::Receiver<Option<String>>,
    tx: watch::Sender<Option<KeyCert>>,
) {
    let dns = id.dns();
    // Which CA is ours is known only with the bundle (needed to serve anyway).
    if bundle.wait_for(Option::is_some).await.is_err() {
        return;
    }
    let usable = |kc: &KeyCert, bundle: &watch::Receiver<Option<String>>| {
        let trusted = bundle
            .borrow()
            .as_deref()
            .is_some_and(|b| issued_by_one_of(&kc.cert, b));
        renew_in(&kc.cert, &dns, now()).filter(|_| trusted)
    };
    if let Some(kc) = id.load().filter(|kc| usable(kc, &bundle).is_some()) {
        info!(%dns, "serving with the stored certificate");
        let _ = tx.send(Some(kc));
    }
    let mut backoff = Duration::from_secs(2);
    loop {
        let current = tx.borrow().clone();
        if let Some(wait) = current.as_ref().and_then(|kc| usable(kc, &bundle)) {
            // Wake at renewal time or when the bundle changes (a CA gone).
            tokio::select! {
                _ = tokio::time::sleep(wait.min(Duration::from_secs(3600))) => {}
                r = bundle.changed() => if r.is_err() { return },
            }
            continue;
        }
        match id.request().await {
            Ok(kc) if renew_in(&kc.cert, &dns, now()).is_some() => {
                if let Err(e) = id.store(&kc) {
                    warn!(error = %e, "storing the serving certificate (serving it anyway)");
                }
                info!(%dns, "serving certificate issued");
                let _ = tx.send(Some(kc));
                backoff = Duration::from_secs(2);
                continue;
            }
            Ok(_) => warn!(%dns, "the issued certificate is not usable for our name; asking again"),
            Err(e) => warn!(error = %e, "requesting the serving certificate; retrying"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(60));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(dns: &str, secs: i64, now: i64) -> String {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec![dns.to_string()]).unwrap();
        p.not_before = time_of(now);
        p.not_after = time_of(now + secs);
        p.self_signed(&key).unwrap().pem()
    }

    fn time_of(t: i64) -> time::OffsetDateTime {
        time::OffsetDateTime::from_unix_timestamp(t).unwrap()
    }

    #[test]
    fn a_certificate_serves_until_two_thirds_and_only_for_our_name() {
        let t = 1_700_000_000;
        let c = self_signed("n1.agent.ns.svc", 300, t);
        assert_eq!(
            renew_in(&c, "n1.agent.ns.svc", t),
            Some(Duration::from_secs(200))
        );
        assert_eq!(
            renew_in(&c, "n1.agent.ns.svc", t + 199),
            Some(Duration::from_secs(1))
        );
        assert_eq!(renew_in(&c, "n1.agent.ns.svc", t + 200), None);
        assert_eq!(renew_in(&c, "n2.agent.ns.svc", t), None);
        assert_eq!(renew_in("garbage", "n1.agent.ns.svc", t), None);
    }

    #[test]
    fn a_kept_certificate_counts_only_under_a_ca_of_the_bundle() {
        let ca = |cn: &str| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let cert = p.self_signed(&key).unwrap();
            (cert.pem(), rcgen::Issuer::new(p, key))
        };
        let (old_pem, old) = ca("old");
        let (new_pem, _) = ca("new");
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec!["n1.agent.ns.svc".to_string()]).unwrap();
        p.use_authority_key_identifier_extension = true;
        let leaf = p.signed_by(&key, &old).unwrap().pem();
        assert!(issued_by_one_of(&leaf, &old_pem));
        assert!(issued_by_one_of(&leaf, &format!("{new_pem}{old_pem}")));
        assert!(!issued_by_one_of(&leaf, &new_pem));
        assert!(!issued_by_one_of("garbage", &old_pem));
    }
}
