//! Who may call the agent. The API can run anything as anyone inside any container on the node,
//! so it is node-root equivalent: every request needs a bearer token.
//!
//! - `TokenReview`: a projected ServiceAccount token with a dedicated audience, checked by the
//!   API server (TokenReview) and pinned to one ServiceAccount (the operator's). Tokens of other
//!   audiences (e.g. a pod's default API token) are refused, so a stolen in-cluster token of
//!   another workload does not work here. Positive results are cached briefly by token hash;
//!   refusals too (shorter), and reviews of tokens not in the cache are rate-limited, so a
//!   caller spraying bad tokens cannot turn the agent into a TokenReview flood on the API server.
//! - `Static`: one shared secret from a file, for tests and clusterless use.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

use crate::error::AgentError;
const CACHE_TTL: Duration = Duration::from_secs(60);
/// A refused token is refused again without asking the API server for this long.
const REFUSAL_TTL: Duration = Duration::from_secs(10);
/// Entries of each cache (bounded: tokens are caller-chosen).
const CACHE_MAX: usize = 4096;
/// Reviews of uncached tokens: a bucket of this many, refilled at this rate per second.
const REVIEW_BURST: f64 = 50.0;
const REVIEW_RATE: f64 = 20.0;

/// What the agent remembers about tokens, and its TokenReview budget. Pure (time is passed in).
struct Memory {
    allowed: HashMap<[u8; 32], Instant>,
    refused: HashMap<[u8; 32], (Instant, String)>,
    tokens: f64,
    refilled: Instant,
}

enum Known {
    Allowed,
    Refused(String),
    /// Not cached, and the review budget is spent.
    Throttled,
    /// Not cached: review it (a review was taken from the budget).
    Review,
}

impl Memory {
    fn new(now: Instant) -> Memory {
        Memory {
            allowed: HashMap::new(),
            refused: HashMap::new(),
            tokens: REVIEW_BURST,
            refilled: now,
        }
    }

    fn lookup(&mut self, key: &[u8; 32], now: Instant) -> Known {
        if self
            .allowed
            .get(key)
            .is_some_and(|t| now.duration_since(*t) < CACHE_TTL)
        {
            return Known::Allowed;
        }
        if let Some((t, why)) = self.refused.get(key) {
            if now.duration_since(*t) < REFUSAL_TTL {
                return Known::Refused(why.clone());
            }
        }
        let dt = now.duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + dt * REVIEW_RATE).min(REVIEW_BURST);
        self.refilled = now;
        if self.tokens < 1.0 {
            return Known::Throttled;
        }
        self.tokens -= 1.0;
        Known::Review
    }

    fn remember(&mut self, key: [u8; 32], verdict: &Result<(), AgentError>, now: Instant) {
        self.allowed
            .retain(|_, t| now.duration_since(*t) < CACHE_TTL);
        self.refused
            .retain(|_, (t, _)| now.duration_since(*t) < REFUSAL_TTL);
        match verdict {
            Ok(()) => {
                if self.allowed.len() < CACHE_MAX {
                    self.allowed.insert(key, now);
                }
            }
            Err(AgentError::Unauthorized(why)) => {
                if self.refused.len() < CACHE_MAX {
                    self.refused.insert(key, (now, why.clone()));
                }
            }
            Err(_) => {} // the API server did not answer: not a verdict on the token
        }
    }
}

pub enum Auth {
    Static { token: String },
    TokenReview(Box<TokenReviewer>),
}

pub struct TokenReviewer {
    pub audience: String,
    /// `system:serviceaccount:<namespace>:<name>`
    pub allowed_user: String,
    reviews: Box<dyn Reviews>,
    memory: Mutex<Memory>,
}

/// Asks the API server about a token: the `status` of a TokenReview for `audience` (`Err`: no
/// answer, which is not a verdict on the token). A trait so that the whole admission decision
/// (cache, budget, verdict) has table tests without an API server.
pub trait Reviews: Send + Sync {
    fn status<'a>(
        &'a self,
        token: &'a str,
        audience: &'a str,
    ) -> BoxFuture<'a, Result<TokenReviewStatus, AgentError>>;
}

/// The API server's TokenReview endpoint, called with the agent's own token.
struct ApiServer {
    reviews: Api<TokenReview>,
}

impl TokenReviewer {
    /// Reviews through the API server, with the agent's own client.
    pub fn new(
        client: kube::Client,
        audience: String,
        allowed_user: String,
    ) -> Result<Self, AgentError> {
        let api = ApiServer {
            reviews: Api::all(client),
        };
        Self::with_reviews(Box::new(api), audience, allowed_user)
    }

    pub fn with_reviews(
        reviews: Box<dyn Reviews>,
        audience: String,
        allowed_user: String,
    ) -> Result<Self, AgentError> {
        if !allowed_user.starts_with("system:serviceaccount:")
            || allowed_user.split(':').count() != 4
        {
            return Err(AgentError::InvalidRequest(format!(
                "--allowed-user {allowed_user:?}: must be system:serviceaccount:<namespace>:<name>"
            )));
        }
        Ok(TokenReviewer {
            audience,
            allowed_user,
            reviews,
            memory: Mutex::new(Memory::new(Instant::now())),
        })
    }

    async fn review(&self, token: &str) -> Result<(), AgentError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let known = self.memory.lock().unwrap().lookup(&key, Instant::now());
        match known {
            Known::Allowed => return Ok(()),
            Known::Refused(why) => return Err(AgentError::Unauthorized(why)),
            Known::Throttled => {
                return Err(AgentError::TooManyRequests(
                    "too many unknown tokens to review; retry later".into(),
                ))
            }
            Known::Review => {}
        }
        let verdict = self
            .reviews
            .status(token, &self.audience)
            .await
            .and_then(|st| judge(&st, &self.audience, &self.allowed_user));
        self.memory
            .lock()
            .unwrap()
            .remember(key, &verdict, Instant::now());
        verdict
    }
}

impl Reviews for ApiServer {
    fn status<'a>(
        &'a self,
        token: &'a str,
        audience: &'a str,
    ) -> BoxFuture<'a, Result<TokenReviewStatus, AgentError>> {
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token.to_string()),
                    audiences: Some(vec![audience.to_string()]),
                },
                ..Default::default()
            };
            let interrupted =
                |e: String| AgentError::OperationInterrupted(format!("TokenReview: {e}"));
            let created = tokio::time::timeout(
                Duration::from_secs(10),
                self.reviews.create(&PostParams::default(), &review),
            )
            .await
            .map_err(|_| interrupted("no answer within 10s".into()))?
            .map_err(|e| interrupted(e.to_string()))?;
            Ok(created.status.unwrap_or_default())
        })
    }
}

/// The verdict on a TokenReview's `status`: authenticated, for our audience, and the one allowed
/// user (pure, so every refusal has a table test).
fn judge(st: &TokenReviewStatus, audience: &str, allowed_user: &str) -> Result<(), AgentError> {
    if st.authenticated != Some(true) {
        return Err(AgentError::Unauthorized(format!(
            "token not authenticated for audience {audience}: {}",
            st.error.as_deref().unwrap_or("")
        )));
    }
    let user = st
        .user
        .as_ref()
        .and_then(|u| u.username.as_deref())
        .unwrap_or("");
    if user != allowed_user {
        return Err(AgentError::Unauthorized(format!(
            "{user} is not {allowed_user}"
        )));
    }
    let auds = st.audiences.as_deref().unwrap_or_default();
    if !auds.iter().any(|a| a == audience) {
        return Err(AgentError::Unauthorized(format!(
            "token audiences {auds:?} lack {audience}"
        )));
    }
    Ok(())
}

impl Auth {
    pub async fn check(&self, authorization: Option<&str>) -> Result<(), AgentError> {
        let token = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| AgentError::Unauthorized("missing bearer token".into()))?;
        match self {
            Auth::Static { token: want } => {
                // Compare digests so timing does not leak the secret's prefix.
                let (a, b) = (
                    Sha256::digest(token.as_bytes()),
                    Sha256::digest(want.as_bytes()),
                );
                if a == b {
                    Ok(())
                } else {
                    Err(AgentError::Unauthorized("wrong token".into()))
                }
            }
            Auth::TokenReview(r) => r.review(token).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::UserInfo;

    /// A TokenReview's status as the API server fills it.
    fn status(auth: bool, user: &str, auds: &[&str]) -> TokenReviewStatus {
        TokenReviewStatus {
            authenticated: Some(auth),
            user: Some(UserInfo {
                username: Some(user.to_string()),
                ..Default::default()
            }),
            audiences: Some(auds.iter().map(|a| a.to_string()).collect()),
            error: (!auth).then(|| "token expired".to_string()),
        }
    }

    fn key(b: u8) -> [u8; 32] {
        [b; 32]
    }

    #[test]
    fn verdicts_are_remembered_for_their_time() {
        let t0 = Instant::now();
        let mut m = Memory::new(t0);
        assert!(matches!(m.lookup(&key(1), t0), Known::Review));
        m.remember(key(1), &Ok(()), t0);
        assert!(matches!(
            m.lookup(&key(1), t0 + Duration::from_secs(59)),
            Known::Allowed
        ));
        assert!(matches!(m.lookup(&key(1), t0 + CACHE_TTL), Known::Review));

        m.remember(
            key(2),
            &Err(AgentError::Unauthorized("not the operator".into())),
            t0,
        );
        match m.lookup(&key(2), t0 + Duration::from_secs(9)) {
            Known::Refused(why) => assert_eq!(why, "not the operator"),
            _ => panic!("a refusal is remembered"),
        }
        assert!(matches!(m.lookup(&key(2), t0 + REFUSAL_TTL), Known::Review));

        // An unanswered review says nothing about the token.
        m.remember(
            key(3),
            &Err(AgentError::OperationInterrupted("timeout".into())),
            t0,
        );
        assert!(matches!(m.lookup(&key(3), t0), Known::Review));
    }

    #[test]
    fn reviews_of_unknown_tokens_are_rate_limited_known_ones_are_not() {
        let t0 = Instant::now();
        let mut m = Memory::new(t0);
        m.remember(key(0), &Ok(()), t0);
        let mut reviews = 0;
        for i in 0..200u32 {
            let k: [u8; 32] = Sha256::digest(i.to_le_bytes()).into();
            if matches!(m.lookup(&k, t0), Known::Review) {
                reviews += 1;
            }
        }
        assert_eq!(reviews, REVIEW_BURST as usize, "the burst, then throttled");
        assert!(
            matches!(m.lookup(&key(0), t0), Known::Allowed),
            "the operator is never throttled"
        );
        // One second later: REVIEW_RATE more.
        let t1 = t0 + Duration::from_secs(1);
        let more = (0..100u32)
            .filter(|i| {
                let k: [u8; 32] = Sha256::digest((1000 + i).to_le_bytes()).into();
                matches!(m.lookup(&k, t1), Known::Review)
            })
            .count();
        assert_eq!(more, REVIEW_RATE as usize);
    }

    /// Every way a TokenReview answer refuses, and the one it admits.
    #[test]
    fn review_verdicts() {
        const OP: &str = "system:serviceaccount:sandbox-system:operator";
        let cases = [
            (status(true, OP, &["sandbox-agent"]), None),
            (
                status(false, OP, &["sandbox-agent"]),
                Some("not authenticated"),
            ),
            (
                status(true, "system:serviceaccount:x:y", &["sandbox-agent"]),
                Some("is not system:serviceaccount:sandbox-system:operator"),
            ),
            (
                status(true, OP, &["https://kubernetes.default.svc"]),
                Some("lack sandbox-agent"),
            ),
            (TokenReviewStatus::default(), Some("not authenticated")),
        ];
        for (st, want) in cases {
            match (judge(&st, "sandbox-agent", OP), want) {
                (Ok(()), None) => {}
                (Err(AgentError::Unauthorized(why)), Some(w)) => {
                    assert!(why.contains(w), "{why} lacks {w}")
                }
                (got, want) => panic!("{st:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn caches_are_bounded() {
        let t0 = Instant::now();
        let mut m = Memory::new(t0);
        for i in 0..(CACHE_MAX as u32 + 100) {
            let k: [u8; 32] = Sha256::digest(i.to_le_bytes()).into();
            m.remember(k, &Err(AgentError::Unauthorized("no".into())), t0);
        }
        assert_eq!(m.refused.len(), CACHE_MAX);
    }

    /// An API server that answers from a table and counts the questions.
    struct Answers {
        by_token: HashMap<&'static str, Result<TokenReviewStatus, ()>>,
        asked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Reviews for Answers {
        fn status<'a>(
            &'a self,
            token: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<TokenReviewStatus, AgentError>> {
            self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let answer = match self.by_token.get(token) {
                Some(Ok(v)) => Ok(v.clone()),
                _ => Err(AgentError::OperationInterrupted("no answer".into())),
            };
            Box::pin(async move { answer })
        }
    }

    /// The whole admission decision through `Auth::check`: header parsing, the API server's
    /// verdict, what is remembered and what is asked again.
    #[tokio::test]
    async fn admission_through_token_review() {
        const OP: &str = "system:serviceaccount:sandbox-system:operator";
        let ok = |user: &str| status(true, user, &["sandbox-agent"]);
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let answers = Answers {
            by_token: HashMap::from([
                ("op", Ok(ok(OP))),
                ("other", Ok(ok("system:serviceaccount:default:app"))),
                (
                    "bogus",
                    Ok(TokenReviewStatus {
                        authenticated: Some(false),
                        error: Some("invalid".into()),
                        ..Default::default()
                    }),
                ),
            ]),
            asked: asked.clone(),
        };
        let reviewer =
            TokenReviewer::with_reviews(Box::new(answers), "sandbox-agent".into(), OP.into())
                .unwrap();
        let auth = Auth::TokenReview(Box::new(reviewer));
        let n = || asked.load(std::sync::atomic::Ordering::SeqCst);
        let cases: &[(Option<&str>, Option<&str>, usize)] = &[
            // (Authorization header, expected error code, API server questions so far)
            (None, Some("Unauthorized"), 0),
            (Some("Basic op"), Some("Unauthorized"), 0),
            (Some("Bearer "), Some("Unauthorized"), 0),
            (Some("Bearer op"), None, 1),
            (Some("Bearer op"), None, 1), // remembered
            (Some("Bearer other"), Some("Unauthorized"), 2),
            (Some("Bearer other"), Some("Unauthorized"), 2), // refusal remembered
            (Some("Bearer bogus"), Some("Unauthorized"), 3),
            // No answer from the API server: not a verdict, asked again next time.
            (Some("Bearer down"), Some("OperationInterrupted"), 4),
            (Some("Bearer down"), Some("OperationInterrupted"), 5),
        ];
        for (header, want, questions) in cases {
            let got = auth.check(*header).await.err().map(|e| e.code().as_str());
            assert_eq!(got, *want, "{header:?}");
            assert_eq!(n(), *questions, "{header:?}");
        }
        assert!(TokenReviewer::with_reviews(
            Box::new(Answers {
                by_token: HashMap::new(),
                asked,
            }),
            "a".into(),
            "operator".into()
        )
        .is_err());
    }
}
