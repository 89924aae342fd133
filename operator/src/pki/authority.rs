//! The operator's own certificate authority, as pure functions of the stored certificates and
//! the time: make a CA, issue a serving certificate, and decide what to renew (at 2/3 of a
//! certificate's validity, like Gatekeeper's cert-controller), with a rollover that keeps the
//! previous CA trusted until it expires.
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use time::OffsetDateTime;
use x509_parser::extensions::ParsedExtension;
use x509_parser::pem::Pem;

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{what}: not a PEM certificate")]
    Unparsable { what: &'static str },
    /// A certificate request asks for names other than the one its requester may have.
    #[error("the request names {requested:?}; only [{allowed:?}] may be issued to this requester")]
    Names {
        requested: Vec<String>,
        allowed: String,
    },
}

/// A certificate with its private key, both PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyCert {
    pub cert: String,
    pub key: String,
}

/// How long certificates are valid.
#[derive(Clone, Copy, Debug)]
pub struct Validity {
    pub ca: Duration,
    pub leaf: Duration,
}

/// What is stored: the CA, the trusted bundle (the current CA first, then a previous one during
/// a rollover), and the serving certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    pub ca: Option<KeyCert>,
    pub bundle: Vec<String>,
    pub leaf: Option<KeyCert>,
    /// When the current CA entered the bundle (unix seconds): a leaf is issued by a new CA only
    /// once its bundle has had time to reach every client.
    pub ca_published_at: Option<i64>,
}

/// The facts of a certificate that the decisions need.
struct Facts {
    not_before: i64,
    not_after: i64,
    /// Subject key identifier (CA) / authority key identifier (leaf).
    ski: Option<Vec<u8>>,
    aki: Option<Vec<u8>>,
    dns: Vec<String>,
}

fn facts(pem: &str) -> Option<Facts> {
    let (_, p): (_, Pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = p.parse_x509().ok()?;
    let mut f = Facts {
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        ski: None,
        aki: None,
        dns: vec![],
    };
    for ext in cert.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(k) => f.ski = Some(k.0.to_vec()),
            ParsedExtension::AuthorityKeyIdentifier(a) => {
                f.aki = a.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            ParsedExtension::SubjectAlternativeName(san) => {
                for n in &san.general_names {
                    if let x509_parser::extensions::GeneralName::DNSName(d) = n {
                        f.dns.push(d.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    Some(f)
}

/// Renewal is due once 2/3 of the certificate's validity has passed (or it cannot be read).
pub fn due(pem: &str, now: i64) -> bool {
    match facts(pem) {
        Some(f) => now >= f.not_before + (f.not_after - f.not_before) * 2 / 3,
        None => true,
    }
}

/// Whether the certificate has expired (or cannot be read).
pub fn expired(pem: &str, now: i64) -> bool {
    facts(pem).is_none_or(|f| now >= f.not_after)
}

/// The certificate's expiry (unix seconds).
pub fn not_after(pem: &str) -> Option<i64> {
    facts(pem).map(|f| f.not_after)
}

/// Whether `leaf` was issued by `ca` (its authority key identifier is the CA's key).
pub fn issued_by(leaf: &str, ca: &str) -> bool {
    match (facts(leaf), facts(ca)) {
        (Some(l), Some(c)) => l.aki.is_some() && l.aki == c.ski,
        _ => false,
    }
}

fn window(now: i64, validity: Duration) -> (OffsetDateTime, OffsetDateTime) {
    // A little backdating absorbs clock skew between the operator and the API server.
    let start = OffsetDateTime::from_unix_timestamp(now - 60).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    (start, start + validity + Duration::from_secs(60))
}

pub fn new_ca(name: &str, validity: Duration, now: i64) -> Result<KeyCert, CertError> {
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    (p.not_before, p.not_after) = window(now, validity);
    let cert = p.self_signed(&key)?;
    Ok(KeyCert {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A serving certificate for `dns` names, issued by `ca`.
pub fn issue(
    ca: &KeyCert,
    dns: &[String],
    validity: Duration,
    now: i64,
) -> Result<KeyCert, CertError> {
    let issuer = issuer(ca)?;
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(dns.to_vec())?;
    p.distinguished_name
        .push(DnType::CommonName, dns.first().cloned().unwrap_or_default());
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.use_authority_key_identifier_extension = true;
    (p.not_before, p.not_after) = window(now, validity);
    let cert = p.signed_by(&key, &issuer)?;
    Ok(KeyCert {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A client certificate (TLS client authentication) for `cn`, issued by `ca`: the operator's
/// identity towards the agents.
pub fn issue_client(
    ca: &KeyCert,
    cn: &str,
    validity: Duration,
    now: i64,
) -> Result<KeyCert, CertError> {
    let issuer = issuer(ca)?;
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name.push(DnType::CommonName, cn);
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.use_authority_key_identifier_extension = true;
    (p.not_before, p.not_after) = clamped(window(now, validity), &ca.cert);
    let cert = p.signed_by(&key, &issuer)?;
    Ok(KeyCert {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Signs a PKCS#10 request (PEM) whose only name is `dns`, as a serving certificate. Only the
/// request's public key is taken from it (its signature checked): names, usages and validity are
/// ours, and no certificate outlives the CA.
pub fn sign_request(
    ca: &KeyCert,
    request_pem: &str,
    dns: &str,
    validity: Duration,
    now: i64,
) -> Result<String, CertError> {
    let req = rcgen::CertificateSigningRequestParams::from_pem(request_pem)?;
    let requested: Vec<String> = req
        .params
        .subject_alt_names
        .iter()
        .map(|n| match n {
            rcgen::SanType::DnsName(d) => d.as_str().to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    if requested != [dns] {
        return Err(CertError::Names {
            requested,
            allowed: dns.to_string(),
        });
    }
    let issuer = issuer(ca)?;
    let mut p = CertificateParams::new(vec![dns.to_string()])?;
    p.distinguished_name.push(DnType::CommonName, dns);
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.use_authority_key_identifier_extension = true;
    (p.not_before, p.not_after) = clamped(window(now, validity), &ca.cert);
    let signed = rcgen::CertificateSigningRequestParams {
        params: p,
        public_key: req.public_key,
    }
    .signed_by(&issuer)?;
    Ok(signed.pem())
}

fn issuer(ca: &KeyCert) -> Result<Issuer<'static, KeyPair>, CertError> {
    Ok(Issuer::from_ca_cert_pem(
        &ca.cert,
        KeyPair::from_pem(&ca.key)?,
    )?)
}

/// A validity window cut at the CA's expiry: a certificate never outlives its issuer.
fn clamped(
    (start, end): (OffsetDateTime, OffsetDateTime),
    ca_pem: &str,
) -> (OffsetDateTime, OffsetDateTime) {
    let ca_end = not_after(ca_pem).and_then(|t| OffsetDateTime::from_unix_timestamp(t).ok());
    match ca_end {
        Some(c) if c < end => (start, c),
        _ => (start, end),
    }
}

/// The next stored state, or `None` when nothing is due. One step at a time: a new CA enters
/// the bundle first (with the previous one still trusted), and the serving certificate moves to
/// it only `publish_delay` later, once the bundle has reached the clients; a previous CA leaves
/// the bundle when it expires.
pub fn plan(
    stored: &Stored,
    name: &str,
    dns: &[String],
    validity: Validity,
    publish_delay: Duration,
    now: i64,
) -> Result<Option<Stored>, CertError> {
    let mut next = stored.clone();
    match &stored.ca {
        Some(ca) if !due(&ca.cert, now) => {}
        old => {
            let ca = new_ca(name, validity.ca, now)?;
            next.bundle = std::iter::once(ca.cert.clone())
                .chain(old.iter().map(|o| o.cert.clone()))
                .filter(|c| !expired(c, now))
                .collect();
            next.ca = Some(ca);
            next.ca_published_at = Some(now);
        }
    }
    let ca = next.ca.clone().expect("set above");
    next.bundle.retain(|c| *c == ca.cert || !expired(c, now));
    if next.bundle.first() != Some(&ca.cert) {
        next.bundle.retain(|c| *c != ca.cert);
        next.bundle.insert(0, ca.cert.clone());
    }
    let published_for = now - next.ca_published_at.unwrap_or(i64::MIN / 2);
    let reissue = match &next.leaf {
        None => true,
        // Unusable: expired, for other names, or chained to no trusted CA any more.
        Some(l)
            if expired(&l.cert, now)
                || facts(&l.cert).is_none_or(|f| f.dns != dns)
                || !next.bundle.iter().any(|c| issued_by(&l.cert, c)) =>
        {
            true
        }
        // A new CA is still reaching the clients: the current leaf (valid) stays until then.
        Some(_) if published_for < publish_delay.as_secs() as i64 => false,
        Some(l) => due(&l.cert, now) || !issued_by(&l.cert, &ca.cert),
    };
    if reissue {
        next.leaf = Some(issue(&ca, dns, validity.leaf, now)?);
    }
    Ok((next != *stored).then_some(next))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn dns() -> Vec<String> {
        vec!["api.ns.svc".into(), "api.ns".into()]
    }

    fn validity() -> Validity {
        Validity {
            ca: 9 * MIN,
            leaf: 3 * MIN,
        }
    }

    fn step(s: &Stored, now: i64) -> Option<Stored> {
        plan(s, "test-ca", &dns(), validity(), MIN, now).unwrap()
    }

    #[test]
    fn a_leaf_is_issued_by_its_ca_for_its_names() {
        let s = step(&Stored::default(), 1_000_000).unwrap();
        let (ca, leaf) = (s.ca.as_ref().unwrap(), s.leaf.as_ref().unwrap());
        assert!(issued_by(&leaf.cert, &ca.cert));
        assert!(!issued_by(&ca.cert, &leaf.cert));
        assert_eq!(s.bundle, std::slice::from_ref(&ca.cert));
        assert_eq!(facts(&leaf.cert).unwrap().dns, dns());
        // rustls accepts the pair: the leaf chains to the bundle for the service name.
        let mut roots = rustls::RootCertStore::empty();
        use rustls::client::danger::ServerCertVerifier;
        use rustls::pki_types::pem::PemObject;
        let ca_der = rustls::pki_types::CertificateDer::from_pem_slice(ca.cert.as_bytes()).unwrap();
        roots.add(ca_der).unwrap();
        let leaf_der =
            rustls::pki_types::CertificateDer::from_pem_slice(leaf.cert.as_bytes()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let now = rustls::pki_types::UnixTime::since_unix_epoch(Duration::from_secs(1_000_010));
        let name = rustls::pki_types::ServerName::try_from("api.ns.svc").unwrap();
        verifier
            .verify_server_cert(&leaf_der, &[], &name, &[], now)
            .unwrap();
        // Nothing is due right after.
        assert_eq!(step(&s, 1_000_000 + 10), None);
    }

    /// The lifecycle with a 9-minute CA and 3-minute leaves (each backdated a minute and a
    /// minute longer): leaf renewals at 2/3, then a CA rollover in two steps with both CAs
    /// trusted meanwhile, then the old CA dropped at its expiry.
    #[test]
    fn renewals_and_a_rollover() {
        let t0 = 1_000_000;
        let s0 = step(&Stored::default(), t0).unwrap();
        let ca0 = s0.ca.clone().unwrap();
        let leaf = |s: &Stored| s.leaf.clone().unwrap().cert;
        // The first leaf lives 240 s from t0-60: due at t0+100; same CA.
        assert_eq!(step(&s0, t0 + 90), None);
        let s1 = step(&s0, t0 + 150).unwrap();
        assert_eq!(s1.ca, s0.ca);
        assert_ne!(leaf(&s1), leaf(&s0));
        let s2 = step(&s1, t0 + 260).unwrap();
        assert_ne!(leaf(&s2), leaf(&s1));
        // The CA (600 s from t0-60) is due at t0+340: a new CA enters the bundle first.
        let t_ca = t0 + 345;
        let s3 = step(&s2, t_ca).unwrap();
        let ca1 = s3.ca.clone().unwrap();
        assert_ne!(ca1, ca0);
        assert_eq!(s3.bundle, [ca1.cert.clone(), ca0.cert.clone()]);
        assert_eq!(
            leaf(&s3),
            leaf(&s2),
            "the leaf waits for the new bundle to be out"
        );
        // Due meanwhile, but the bundle is not out long enough: kept (still valid).
        assert_eq!(step(&s3, t_ca + 25), None);
        // After the publish delay the leaf moves to the new CA; both CAs stay trusted.
        let s4 = step(&s3, t_ca + 61).unwrap();
        assert!(issued_by(&leaf(&s4), &ca1.cert));
        assert_eq!(s4.bundle.len(), 2);
        // The old CA leaves the bundle at its expiry.
        let s5 = step(&s4, t0 + 541).unwrap();
        assert_eq!(s5.bundle, std::slice::from_ref(&ca1.cert));
        assert!(issued_by(&leaf(&s5), &ca1.cert));
    }

    fn request(dns: &[&str]) -> (KeyPair, String) {
        let key = KeyPair::generate().unwrap();
        let p =
            CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>()).unwrap();
        let pem = p.serialize_request(&key).unwrap().pem().unwrap();
        (key, pem)
    }

    /// An agent's request is signed for its one name, never beyond the CA's expiry; a request for
    /// any other name (or more names) is refused, naming them.
    #[test]
    fn requests_are_signed_for_exactly_the_allowed_name() {
        let now = 1_000_000;
        let ca = new_ca("test-ca", 10 * MIN, now).unwrap();
        let (_, req) = request(&["n1.agent.ns.svc"]);
        let cert = sign_request(&ca, &req, "n1.agent.ns.svc", 60 * MIN, now).unwrap();
        assert!(issued_by(&cert, &ca.cert));
        let f = facts(&cert).unwrap();
        assert_eq!(f.dns, ["n1.agent.ns.svc"]);
        assert_eq!(Some(f.not_after), not_after(&ca.cert), "clamped to the CA");
        for names in [
            &["n2.agent.ns.svc"][..],
            &["n1.agent.ns.svc", "n2.agent.ns.svc"],
            &[],
        ] {
            let (_, req) = request(names);
            let e = sign_request(&ca, &req, "n1.agent.ns.svc", MIN, now).unwrap_err();
            assert!(matches!(e, CertError::Names { .. }), "{names:?}: {e}");
        }
        assert!(sign_request(&ca, "garbage", "n1.agent.ns.svc", MIN, now).is_err());
    }

    #[test]
    fn client_certificates_chain_to_the_ca() {
        let ca = new_ca("test-ca", 10 * MIN, 1_000_000).unwrap();
        let c = issue_client(&ca, "operator", 60 * MIN, 1_000_000).unwrap();
        assert!(issued_by(&c.cert, &ca.cert));
        assert_eq!(not_after(&c.cert), not_after(&ca.cert));
    }

    #[test]
    fn unreadable_or_renamed_is_reissued() {
        let s = step(&Stored::default(), 1_000_000).unwrap();
        let mut broken = s.clone();
        broken.leaf.as_mut().unwrap().cert = "garbage".into();
        assert!(issued_by(
            &step(&broken, 1_000_001).unwrap().leaf.unwrap().cert,
            &s.ca.as_ref().unwrap().cert
        ));
        let renamed = plan(
            &s,
            "test-ca",
            &["other.ns.svc".into()],
            validity(),
            MIN,
            1_000_001,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            facts(&renamed.leaf.unwrap().cert).unwrap().dns,
            ["other.ns.svc"]
        );
    }
}
