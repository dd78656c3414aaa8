//! Per-caller API rate limiting: TFE's general settings `api-rate-limit` (requests per
//! second, never below [`MIN_RATE_LIMIT`]) and `api-rate-limiting-enabled`.
//!
//! Where it sits: [`RateLimitLayer`] is a plain tower layer over the whole router
//! (`routes.rs`), which also applies the JSON:API content-type rule to the JSON:API routes
//! after the limit (`request::refuse_content_type`) and sets `TFP-API-Version` on every answer:
//! one layer, so one boxed `Route` per request, rather than two `from_fn` middlewares plus a
//! header layer. For a
//! request with a bearer token it resolves the [`Caller`] once, keys the bucket by the token's
//! owner (a user, team or organization id) and leaves the resolution in the request's
//! extensions, where the `Caller` extractor picks it up (no second token lookup). Requests
//! without a bearer token, or with one that resolves to nobody, are keyed by the client IP
//! (`ConnectInfo<SocketAddr>`, inserted by `http_kit`'s server; absent in-process, where all
//! of them share one bucket).
//!
//! The limiter is a keyed token bucket: capacity = the limit, refilled at the limit per
//! second (a burst equal to the per-second limit). A bucket idle for a second is full, so it
//! is forgotten: every [`PRUNE_EVERY`] checks the map drops such buckets (no background task).
//!
//! Answers: over the limit, 429 as a JSON:API error with `X-RateLimit-Limit`,
//! `X-RateLimit-Reset` (seconds to wait, a float — go-tfe adds it to its back-off) and
//! `Retry-After` (whole seconds, rounded up — pytfe sleeps it); otherwise the response gets
//! `X-RateLimit-Limit`. Exempt: `GET /api/v2/ping` (clients probe it, and it sends the header
//! itself) and the signed blob URLs under `/_archivist/` (a large upload must never be cut).
//!
//! Invariants: the limit and the switch are atomics in [`State`], so the site administration
//! settings can change them at runtime; the bucket lock is never held across an await.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request};
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use http::HeaderValue;
use http::header::{HeaderName, RETRY_AFTER};
use tower::{Layer, Service};

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

/// The layer: see the module documentation.
#[derive(Clone)]
pub(crate) struct RateLimitLayer {
    state: State,
}

impl RateLimitLayer {
    pub(crate) fn new(state: State) -> RateLimitLayer {
        RateLimitLayer { state }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            state: self.state.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct RateLimit<S> {
    inner: S,
    state: State,
}

impl<S> Service<Request> for RateLimit<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // The service that was polled ready handles this request; a clone stays for the next.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let state = self.state.clone();
        Box::pin(async move {
            let mut response = rate_limit(&state, inner, request).await;
            response.headers_mut().insert(
                TFP_API_VERSION,
                HeaderValue::from_static(crate::API_VERSION),
            );
            Ok(response)
        })
    }
}

/// The limit itself, around `inner`.
async fn rate_limit<S>(state: &State, mut inner: S, mut request: Request) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    if is_exempt(request.uri().path()) {
        if let Some(refused) = crate::request::refuse_content_type(&request) {
            return refused;
        }
        let Ok(response) = inner.call(request).await;
        return response;
    }
    let limiter = state.rate_limiter();
    let limit = limiter.limit();
    if limiter.enabled() {
        let mut key = None;
        if let Some(secret) = http_kit::bearer_token(request.headers()) {
            let resolved = match Caller::resolve(state, secret).await {
                Ok(resolved) => resolved,
                Err(error) => return error.into_response(),
            };
            key = resolved.as_ref().map(owner_key);
            request.extensions_mut().insert(ResolvedCaller(resolved));
        }
        let key = key.unwrap_or_else(|| {
            request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map_or(Key::Unknown, |info| Key::Ip(info.0.ip()))
        });
        if let Err(wait) = limiter.check(key) {
            return too_many_requests(limit, wait);
        }
    }
    if let Some(refused) = crate::request::refuse_content_type(&request) {
        return refused;
    }
    let Ok(mut response) = inner.call(request).await;
    response
        .headers_mut()
        .insert(X_RATELIMIT_LIMIT, HeaderValue::from(limit));
    response
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
