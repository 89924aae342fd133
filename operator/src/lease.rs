//! Leader election with a `coordination.k8s.io/v1` Lease: only the holder reconciles, so two
//! replicas are safe. The Lease is one per cluster (by default `kube-system/
//! sandboxprocesses.sandbox.dev`), not one per release: every operator watches every
//! SandboxProcess, so a second release or an operator started by hand must stand by too, or two
//! controllers would start the same process on two agents and fight over its status.
//! kube-rs has no built-in elector; this is the usual protocol: take the lease when it is free
//! or expired (optimistic concurrency on `resourceVersion`), renew it every
//! `renew_every`, and stop leading when a renewal has not succeeded within the lease duration.
//! A replica shutting down gracefully releases the lease so the next one takes over at once.
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ObjectMeta, PostParams};
use kube::Api;
use tracing::{info, warn};

/// The result of one attempt at the lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// We hold it now.
    Held,
    /// Another operator holds it (its identity; "" when a concurrent writer won the race).
    HeldBy(String),
}

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub identity: String,
    pub duration: Duration,
    pub renew_every: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Ours already: renew.
    Renew,
    /// Free or expired: take it (a new holder).
    Take,
    /// Someone else holds it.
    Wait,
}

/// What to do with a lease we observed at `now`.
pub fn decide(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> Decision {
    let Some(spec) = spec else {
        return Decision::Take;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder == identity {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::Take;
    }
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    match &spec.renew_time {
        Some(MicroTime(renewed)) if *renewed + duration > now => Decision::Wait,
        _ => Decision::Take,
    }
}

pub struct LeaderElector {
    api: Api<Lease>,
    api_namespace: String,
    cfg: LeaseConfig,
}

impl LeaderElector {
    pub fn new(client: kube::Client, namespace: &str, cfg: LeaseConfig) -> LeaderElector {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            api_namespace: namespace.to_string(),
            cfg,
        }
    }

    /// One attempt to take or renew the lease.
    pub async fn try_acquire_or_renew(&self) -> kube::Result<Attempt> {
        let now = Timestamp::now();
        let existing = self.api.get_opt(&self.cfg.name).await?;
        let spec = existing.as_ref().and_then(|l| l.spec.as_ref());
        let decision = decide(spec, &self.cfg.identity, now);
        if decision == Decision::Wait {
            let holder = spec.and_then(|s| s.holder_identity.clone());
            return Ok(Attempt::HeldBy(holder.unwrap_or_default()));
        }
        let transitions = spec.and_then(|s| s.lease_transitions).unwrap_or(0);
        let new_spec = LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(self.cfg.duration.as_secs().max(1) as i32),
            renew_time: Some(MicroTime(now)),
            acquire_time: match decision {
                Decision::Renew => spec.and_then(|s| s.acquire_time.clone()),
                _ => Some(MicroTime(now)),
            },
            lease_transitions: Some(match decision {
                Decision::Take if existing.is_some() => transitions + 1,
                _ => transitions,
            }),
            ..Default::default()
        };
        let result = match existing {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(new_spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                // Carries metadata.resourceVersion: a concurrent writer makes this a 409.
                lease.spec = Some(new_spec);
                self.api
                    .replace(&self.cfg.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(_) => {
                if decision == Decision::Take {
                    info!(lease = %self.where_(), identity = %self.cfg.identity, "became leader");
                }
                Ok(Attempt::Held)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::HeldBy(String::new())),
            Err(e) => Err(e),
        }
    }

    /// `namespace/name` of the Lease, for log lines.
    fn where_(&self) -> String {
        format!("{}/{}", self.api_namespace, self.cfg.name)
    }

    /// Returns once this replica holds the lease. While another operator holds it, says so
    /// (whenever the holder changes, and every minute).
    pub async fn acquire(&self) {
        let mut said: Option<(String, tokio::time::Instant)> = None;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Held) => return,
                Ok(Attempt::HeldBy(holder)) if !holder.is_empty() => {
                    let due = said.as_ref().is_none_or(|(h, at)| {
                        *h != holder || at.elapsed() >= Duration::from_secs(60)
                    });
                    if due {
                        info!(
                            lease = %self.where_(),
                            holder = %holder,
                            "standing by: another operator controls the SandboxProcesses of this \
                             cluster; this one acts only when that one stops or its lease expires"
                        );
                        said = Some((holder, tokio::time::Instant::now()));
                    }
                }
                Ok(Attempt::HeldBy(_)) => {}
                Err(e) => warn!(lease = %self.where_(), error = %e, "leader election"),
            }
            tokio::time::sleep(self.cfg.renew_every.min(Duration::from_secs(2))).await;
        }
    }

    /// Renews the lease until a renewal has failed for the whole lease duration (or another
    /// replica took it); returns then: this replica must stop reconciling.
    pub async fn hold(&self) {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.cfg.renew_every).await;
            // A renewal that hangs counts as failed once the lease could expire for the others:
            // a new leader must never act while this one still does (agent/watch.rs relies on it).
            let left = self.cfg.duration.saturating_sub(last_ok.elapsed());
            let Ok(attempt) = tokio::time::timeout(left, self.try_acquire_or_renew()).await else {
                warn!(lease = %self.where_(), "renewing the lease took too long; stepping down");
                return;
            };
            match attempt {
                Ok(Attempt::Held) => last_ok = tokio::time::Instant::now(),
                Ok(Attempt::HeldBy(holder)) => {
                    warn!(lease = %self.where_(), holder = %holder, "lease taken by another operator");
                    return;
                }
                Err(e) => {
                    warn!(lease = %self.where_(), error = %e, "renewing the lease failed");
                    // Stop before the lease can expire for the others.
                    if last_ok.elapsed() + self.cfg.renew_every >= self.cfg.duration {
                        return;
                    }
                }
            }
        }
    }

    /// Gives the lease up (graceful shutdown), so another replica need not wait for it to expire.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        spec.acquire_time = None;
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(lease = %self.where_(), "released the lease"),
            Err(e) => warn!(lease = %self.where_(), error = %e, "releasing the lease"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, renewed_secs_ago: i64) -> LeaseSpec {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        LeaseSpec {
            holder_identity: holder.map(String::from),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(now - SignedDuration::from_secs(renewed_secs_ago))),
            ..Default::default()
        }
    }

    #[test]
    fn lease_decisions() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        assert_eq!(decide(None, "me", now), Decision::Take);
        assert_eq!(
            decide(Some(&spec(Some("me"), 3)), "me", now),
            Decision::Renew
        );
        assert_eq!(
            decide(Some(&spec(Some("other"), 3)), "me", now),
            Decision::Wait
        );
        assert_eq!(
            decide(Some(&spec(Some("other"), 16)), "me", now),
            Decision::Take
        );
        assert_eq!(decide(Some(&spec(None, 3)), "me", now), Decision::Take);
        assert_eq!(decide(Some(&spec(Some(""), 3)), "me", now), Decision::Take);
    }
}
