//! Per-caller API rate limiting: TFE's general settings `api-rate-limit` (requests per
//! second, never below [`MIN_RATE_LIMIT`]) and `api-rate-limiting-enabled`.
//!
//! Where it sits: [`admit`] and [`finish`] are the platform's `http_kit::Hooks` (`routes.rs`),
//! run inside `http_kit`'s one shared layer rather than a layer of their own (each
//! `Router::layer` boxes every route once more, which every request pays for). [`admit`] takes
//! the limit and then applies the JSON:API content-type rule to the JSON:API routes
//! (`request::refuse_content_type`); [`finish`] sets `TFP-API-Version` on every answer. For a
//! request with a bearer token it resolves the [`Caller`] once (from the auth cache without an
//! await when it can), keys the bucket by the token's owner (a user, team or organization id)
//! and leaves the resolution in the request's extensions, where the `Caller` extractor picks it
//! up (no second token lookup). Requests without a bearer token, or with one that resolves to
//! nobody, are keyed by the client IP (`ConnectInfo<SocketAddr>`, inserted by `http_kit`'s
//! server; absent in-process, where all of them share one bucket).
//!
//! The limiter is a keyed token bucket: capacity = the limit, refilled at the limit per
//! second (a burst equal to the per-second limit). A bucket idle for a second is full, so it
//! is forgotten: every [`PRUNE_EVERY`] checks the map drops such buckets (no background task).
//!
//! Answers: over the limit, 429 as a JSON:API error with `X-RateLimit-Limit`,
//! `X-RateLimit-Reset` (seconds to wait, a float — go-tfe adds it to its back-off) and
//! `Retry-After` (whole seconds, rounded up — pytfe sleeps it); every other response gets
//! `X-RateLimit-Limit` too. Exempt from the limit: `GET /api/v2/ping` (clients probe it) and the
//! signed blob URLs under `/_archivist/` (a large upload must never be cut).
//!
//! Invariants: the limit and the switch are atomics in [`State`], so the site administration
//! settings can change them at runtime; the bucket lock is never held across an await.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request};
use axum::response::{IntoResponse, Response};
use http::header::{HeaderName, RETRY_AFTER};
use http::{Extensions, HeaderValue};
use http_kit::{Admission, Admit, Finish};

use crate::auth::{Caller, ResolvedCaller, Subject};
use crate::{Error, State};

/// The lowest rate limit, in requests per second; lower settings are raised to it (TFE's rule).
pub const MIN_RATE_LIMIT: u32 = 30;

/// Buckets are pruned once every this many checks.
const PRUNE_EVERY: u64 = 1024;

const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Whom a bucket belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    User(String),
    Team(String),
    Organization(String),
    /// An anonymous client (or one whose token resolved to nobody), by IP.
    Ip(IpAddr),
    /// An anonymous client whose address is unknown (in-process requests).
    Unknown,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// The keyed token-bucket limiter and its live settings.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    limit: AtomicU32,
    enabled: AtomicBool,
    checks: AtomicU64,
    buckets: Mutex<HashMap<Key, Bucket>>,
}

impl RateLimiter {
    pub(crate) fn new(limit: u32, enabled: bool) -> RateLimiter {
        RateLimiter {
            limit: AtomicU32::new(limit.max(MIN_RATE_LIMIT)),
            enabled: AtomicBool::new(enabled),
            checks: AtomicU64::new(0),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// The effective limit, in requests per second.
    pub(crate) fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Sets the limit; values under [`MIN_RATE_LIMIT`] are raised to it.
    pub(crate) fn set_limit(&self, limit: u32) {
        self.limit
            .store(limit.max(MIN_RATE_LIMIT), Ordering::Relaxed);
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub(crate) fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    /// Takes one request from `key`'s bucket: `Ok` when allowed, else how long until one
    /// request would be.
    pub(crate) fn check(&self, key: Key) -> Result<(), Duration> {
        self.check_at(key, Instant::now())
    }

    fn check_at(&self, key: Key, now: Instant) -> Result<(), Duration> {
        let rate = f64::from(self.limit());
        let prune = self.checks.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1;
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if prune {
            // Idle a second or more: full again, same as a fresh bucket.
            buckets.retain(|_, bucket| {
                now.saturating_duration_since(bucket.last) < Duration::from_secs(1)
            });
        }
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: rate,
            last: now,
        });
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            // Rounded up to the microsecond, so waiting this long always suffices.
            let micros = ((1.0 - bucket.tokens) / rate * 1e6).ceil();
            Err(Duration::from_micros(micros as u64))
        }
    }
}

/// Whether `path` is never limited.
fn is_exempt(path: &str) -> bool {
    path == "/api/v2/ping" || path.starts_with("/_archivist/")
}

const TFP_API_VERSION: HeaderName = HeaderName::from_static("tfp-api-version");

/// The platform's admission check (see the module documentation), run by `http_kit`'s shared
/// layer before each handler.
pub(crate) fn admit(state: State) -> Admit {
    Arc::new(move |request: &mut Request| admission(&state, request))
}

/// The platform's response finisher: `TFP-API-Version` on every answer, and
/// `X-RateLimit-Limit` unless the answer set its own (ping, a 429).
pub(crate) fn finish(state: State) -> Finish {
    Arc::new(move |response: &mut Response| {
        let limit = state.rate_limiter().limit();
        let headers = response.headers_mut();
        headers.insert(
            TFP_API_VERSION,
            HeaderValue::from_static(crate::API_VERSION),
        );
        headers
            .entry(X_RATELIMIT_LIMIT)
            .or_insert_with(|| HeaderValue::from(limit));
        None
    })
}

/// The limit, then the JSON:API content-type rule, for one request. A bearer token the auth
/// cache knows is decided here; one it does not is looked up in an [`Admission::Later`].
fn admission(state: &State, request: &mut Request) -> Admission {
    let refused = crate::request::refuse_content_type(request);
    let limiter = state.rate_limiter();
    if is_exempt(request.uri().path()) || !limiter.enabled() {
        return refused.map_or(Admission::Pass, Admission::Refuse);
    }
    let anonymous = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(Key::Unknown, |info| Key::Ip(info.0.ip()));
    let Some(secret) = http_kit::bearer_token(request.headers()) else {
        return decide(state, anonymous, refused).map_or(Admission::Pass, Admission::Refuse);
    };
    if let Some(resolved) = Caller::resolve_cached(state, secret) {
        let key = resolved.as_ref().map_or(anonymous, owner_key);
        request.extensions_mut().insert(ResolvedCaller(resolved));
        return decide(state, key, refused).map_or(Admission::Pass, Admission::Refuse);
    }
    let state = state.clone();
    let secret = secret.to_owned();
    Admission::Later(Box::pin(async move {
        let resolved = Caller::resolve(&state, &secret)
            .await
            .map_err(IntoResponse::into_response)?;
        let key = resolved.as_ref().map_or(anonymous, owner_key);
        if let Some(answer) = decide(&state, key, refused) {
            return Err(answer);
        }
        let mut extensions = Extensions::new();
        extensions.insert(ResolvedCaller(resolved));
        Ok(extensions)
    }))
}

/// Takes one request from `key`'s bucket: the 429 when it is empty, else the content-type
/// refusal if there is one.
fn decide(state: &State, key: Key, refused: Option<Response>) -> Option<Response> {
    let limiter = state.rate_limiter();
    match limiter.check(key) {
        Err(wait) => Some(too_many_requests(limiter.limit(), wait)),
        Ok(()) => refused,
    }
}

/// The bucket of a resolved caller: the token's owner.
fn owner_key(caller: &Caller) -> Key {
    match &caller.subject {
        Subject::User(user) => Key::User(user.id.clone()),
        Subject::Team(team) => Key::Team(team.id.clone()),
        Subject::Organization(name) => Key::Organization(name.clone()),
    }
}

/// The 429 answer with its three headers.
fn too_many_requests(limit: u32, wait: Duration) -> Response {
    let seconds = wait.as_secs_f64().max(0.001);
    let mut response = Error::TooManyRequests.into_response();
    let headers = response.headers_mut();
    headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(limit));
    if let Ok(value) = HeaderValue::from_str(&format!("{seconds:.3}")) {
        headers.insert(X_RATELIMIT_RESET, value);
    }
    // Whole seconds, rounded up: at least 1.
    let retry_after = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    headers.insert(RETRY_AFTER, HeaderValue::from(retry_after.max(1)));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_a_burst_of_the_limit_then_refills_at_the_limit_per_second() {
        let limiter = RateLimiter::new(30, true);
        let start = Instant::now();
        for _ in 0..30 {
            assert!(limiter.check_at(Key::Unknown, start).is_ok());
        }
        let wait = limiter.check_at(Key::Unknown, start).unwrap_err();
        assert!((wait.as_secs_f64() - 1.0 / 30.0).abs() < 2e-6, "{wait:?}");
        assert!(limiter.check_at(Key::Unknown, start + wait).is_ok());
        assert!(limiter.check_at(Key::Unknown, start + wait).is_err());
        assert!(
            limiter
                .check_at(Key::Unknown, start + Duration::from_secs(2))
                .is_ok()
        );
    }

    #[test]
    fn idle_buckets_are_pruned() {
        let limiter = RateLimiter::new(30, true);
        let start = Instant::now();
        for i in 0..PRUNE_EVERY {
            let ip = IpAddr::from([10, 0, (i >> 8) as u8, i as u8]);
            let _ = limiter.check_at(Key::Ip(ip), start);
        }
        let later = start + Duration::from_secs(2);
        for _ in 0..PRUNE_EVERY {
            let _ = limiter.check_at(Key::Unknown, later);
        }
        assert_eq!(limiter.buckets.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_limit_under_the_minimum_is_raised() {
        let limiter = RateLimiter::new(5, true);
        assert_eq!(limiter.limit(), MIN_RATE_LIMIT);
        limiter.set_limit(100);
        assert_eq!(limiter.limit(), 100);
        limiter.set_limit(0);
        assert_eq!(limiter.limit(), MIN_RATE_LIMIT);
    }
}
