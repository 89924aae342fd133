//! The CA overlap of `external` (cert-manager) mode. cert-manager replaces its CA at once: the
//! CA Secret holds the new CA the moment it renews, while leaves from the old one (the agents'
//! serving certificates, our replicas' client certificates, the serving certificate) live on.
//! So the operator keeps every CA it has seen in the agents' bundle until it expires, as self
//! mode keeps the previous CA, and a new CA is used for what others must trust only once it has
//! been in that bundle for a reload period. Pure: the callers read and write the objects.
use super::authority;

/// At most this many CAs are trusted at once: the current ones and recent predecessors. A CA
/// renewed faster than this many times per CA lifetime drops its oldest predecessor early.
pub const MAX_CAS: usize = 4;

/// Replicas re-read their trust every 5 s and agents watch the bundle: a margin over that.
pub const RELOAD_MARGIN: i64 = 12;

/// The bundle to publish: the CAs `seen` now (the CA Secret's, the serving Secret's `ca.crt`)
/// first, then those already `kept`, each once, none expired or unreadable, at most [`MAX_CAS`].
pub fn union(seen: &[String], kept: &[String], now: i64) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in seen.iter().chain(kept) {
        if out.len() < MAX_CAS && !authority::expired(c, now) && !contains(&out, c) {
            out.push(c.clone());
        }
    }
    out
}

/// Whether `bundle` holds `ca` (by content: PEM line endings and spacing may differ).
pub fn contains(bundle: &[String], ca: &str) -> bool {
    let key = |s: &str| s.split_whitespace().collect::<String>();
    let want = key(ca);
    bundle.iter().any(|c| key(c) == want)
}

/// When the published bundle last gained a CA: `now` if this publish adds one to a bundle that
/// had any (a rollover), the `previous` mark if it adds none, `None` for the first bundle
/// (nothing could have reached an agent before it).
pub fn published_at(
    next: &[String],
    kept: &[String],
    previous: Option<i64>,
    now: i64,
) -> Option<i64> {
    if kept.is_empty() {
        None
    } else if next.iter().any(|c| !contains(kept, c)) {
        Some(now)
    } else {
        previous
    }
}

/// Whether `ca` may sign what others verify with the `published` bundle: it is in it, and the
/// bundle gained its last CA at least [`RELOAD_MARGIN`] ago (or is the first).
pub fn settled(published: &[String], published_at: Option<i64>, ca: &str, now: i64) -> bool {
    contains(published, ca) && published_at.is_none_or(|t| now >= t + RELOAD_MARGIN)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::pki::authority::new_ca;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_renewed_ca_joins_the_old_one_which_stays_until_it_expires() {
        let t0 = 1_000_000;
        let old = new_ca("ca", HOUR, t0).unwrap().cert;
        let new = new_ca("ca", 2 * HOUR, t0 + 60).unwrap().cert;
        // First bundle: the one CA, no rollover mark.
        let b0 = union(std::slice::from_ref(&old), &[], t0);
        assert_eq!(b0, std::slice::from_ref(&old));
        assert_eq!(published_at(&b0, &[], None, t0), None);
        assert!(settled(&b0, None, &old, t0));
        // cert-manager renewed: the CA Secret holds the new CA, the serving Secret the old.
        let seen = [new.clone(), old.clone()];
        let b1 = union(&seen, &b0, t0 + 100);
        assert_eq!(b1, [new.clone(), old.clone()]);
        let at = published_at(&b1, &b0, None, t0 + 100);
        assert_eq!(at, Some(t0 + 100));
        assert!(
            !settled(&b1, at, &new, t0 + 100),
            "not before the replicas reloaded"
        );
        assert!(settled(&b1, at, &new, t0 + 100 + RELOAD_MARGIN));
        // The serving certificate moved too: only the new CA is seen; the old one stays
        // trusted (agents' and replicas' certificates from it live on) and the mark stays.
        let b2 = union(std::slice::from_ref(&new), &b1, t0 + 200);
        assert!(contains(&b2, &old) && contains(&b2, &new), "{b2:?}");
        assert_eq!(published_at(&b2, &b1, at, t0 + 200), at);
        // Until it expires (validity 1 h, backdated 60 s).
        let b3 = union(std::slice::from_ref(&new), &b2, t0 + 3700);
        assert_eq!(b3, std::slice::from_ref(&new));
    }

    #[test]
    fn the_bundle_is_bounded_deduplicated_and_ignores_what_is_not_a_certificate() {
        let t0 = 1_000_000;
        let cas: Vec<String> = (0..6)
            .map(|i| new_ca("ca", HOUR, t0 + i).unwrap().cert)
            .collect();
        let b = union(&cas, &cas, t0 + 10);
        assert_eq!(b.len(), MAX_CAS);
        assert_eq!(b[..], cas[..MAX_CAS]);
        // The same CA with other line endings is the same CA.
        let crlf = cas[0].replace('\n', "\r\n");
        assert_eq!(union(&[crlf, cas[0].clone()], &[], t0).len(), 1);
        assert!(union(&["junk".into()], &[], t0).is_empty());
        assert!(
            !settled(&b, None, &cas[5], t0),
            "a CA outside the bundle is never settled"
        );
    }
}
