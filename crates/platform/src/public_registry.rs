//! The public registry proxy (`/api/registry/public/v1/modules/…`): TFE serves the public
//! module registry's list versions, get a module (a version, or the latest without one) and
//! latest per provider through itself, authenticated like every other endpoint. This file
//! forwards those reads to the upstream registry set by [`crate::Config::public_registry_url`]
//! (default the public Terraform registry), under the upstream's `modules.v1` prefix
//! `/v1/modules/`, and keeps its answers in a short cache.
//!
//! Where it sits: handlers called from `routes.rs`; depends on nothing of the platform but
//! [`State`] (the clock and the configuration) and [`Error`].
//!
//! Invariants:
//! - Only well-formed registry segments are forwarded (namespace, name and provider
//!   `[A-Za-z0-9_-]`, a version `[A-Za-z0-9.+-]`), so a request never reaches another upstream
//!   path; anything else is a 404 as for a missing module.
//! - An answer is served only when it is a JSON object of at most [`MAX_BODY`] bytes; an
//!   unreachable upstream, a timeout ([`crate::Config::public_registry_timeout`]), an error
//!   status other than 404, or a body that is not a registry document is a 502 in the
//!   platform's JSON:API error shape naming the cause; the upstream's 404 is a 404.
//! - The cache holds at most [`CACHE_ENTRIES`] successful answers, each for
//!   [`crate::Config::public_registry_cache_ttl`] on the state's clock; errors are never
//!   cached, so a recovered upstream is seen on the next request.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::extract::{Path, RawQuery, State as AxumState};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{StatusCode, header};

use crate::auth::Caller;
use crate::{Error, State};

/// The upstream's module API prefix (the public registry's discovery `modules.v1`).
const UPSTREAM_MODULES: &str = "/v1/modules/";

/// The most answers the cache keeps.
pub(crate) const CACHE_ENTRIES: usize = 512;

/// The largest upstream answer accepted (a versions list of a busy module is ~100 KiB).
pub(crate) const MAX_BODY: usize = 4 * 1024 * 1024;

/// The proxy's HTTP client (built on first use) and cache.
#[derive(Debug, Default)]
pub(crate) struct PublicRegistry {
    client: tokio::sync::OnceCell<reqwest::Client>,
    cache: Mutex<HashMap<String, Cached>>,
}

#[derive(Debug, Clone)]
struct Cached {
    /// When it was fetched, in the state's Unix milliseconds.
    fetched_ms: u64,
    body: Bytes,
}

impl PublicRegistry {
    /// The cached answer for `path`, if younger than `ttl_ms` at `now_ms`.
    fn cached(&self, path: &str, now_ms: u64, ttl_ms: u64) -> Option<Bytes> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .get(path)
            .filter(|entry| now_ms.saturating_sub(entry.fetched_ms) < ttl_ms)
            .map(|entry| entry.body.clone())
    }

    /// Keeps `body` for `path`; when full, expired answers go first, then the oldest.
    fn remember(&self, path: String, body: Bytes, now_ms: u64, ttl_ms: u64) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHE_ENTRIES && !cache.contains_key(&path) {
            cache.retain(|_, entry| now_ms.saturating_sub(entry.fetched_ms) < ttl_ms);
            if cache.len() >= CACHE_ENTRIES
                && let Some(oldest) = cache
                    .iter()
                    .min_by_key(|(_, entry)| entry.fetched_ms)
                    .map(|(key, _)| key.clone())
            {
                cache.remove(&oldest);
            }
        }
        cache.insert(
            path,
            Cached {
                fetched_ms: now_ms,
                body,
            },
        );
    }

    async fn client(&self, state: &State) -> Result<&reqwest::Client, Error> {
        let timeout = state.config().public_registry_timeout;
        self.client
            .get_or_try_init(|| async move {
                reqwest::Client::builder()
                    .connect_timeout(timeout)
                    .timeout(timeout)
                    .redirect(reqwest::redirect::Policy::limited(3))
                    .build()
                    .map_err(|err| Error::Internal(format!("building the HTTP client: {err}")))
            })
            .await
    }
}

/// `[A-Za-z0-9_-]+`: a namespace, module name or provider.
fn is_segment(segment: &str) -> bool {
    !segment.is_empty()
        && segment.len() <= 128
        && segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `[A-Za-z0-9.+-]+`: a version.
fn is_version(version: &str) -> bool {
    !version.is_empty()
        && version.len() <= 128
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-'))
}

/// The query string forwarded with a list (only its well-formed `offset` and `limit`).
fn forwarded_query(raw: Option<&str>) -> String {
    let Some(raw) = raw else {
        return String::new();
    };
    let kept: Vec<&str> = raw
        .split('&')
        .filter(|pair| {
            pair.split_once('=').is_some_and(|(name, value)| {
                matches!(name, "offset" | "limit")
                    && !value.is_empty()
                    && value.len() <= 9
                    && value.bytes().all(|b| b.is_ascii_digit())
            })
        })
        .collect();
    if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    }
}

fn bad_gateway(state: &State, what: impl std::fmt::Display) -> Error {
    Error::BadGateway(format!(
        "the public module registry at {} {what}",
        state.config().public_registry_url.trim_end_matches('/')
    ))
}

/// Answers the upstream's document at `UPSTREAM_MODULES + path`, from the cache when fresh.
async fn proxy(state: &State, path: String) -> Result<Response, Error> {
    let registry = state.public_registry();
    let ttl_ms =
        u64::try_from(state.config().public_registry_cache_ttl.as_millis()).unwrap_or(u64::MAX);
    let body = match registry.cached(&path, state.now_ms(), ttl_ms) {
        Some(body) => body,
        None => {
            let body = fetch(state, &path).await?;
            registry.remember(path, body.clone(), state.now_ms(), ttl_ms);
            body
        }
    };
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// One request to the upstream; see the module invariants for what is accepted.
async fn fetch(state: &State, path: &str) -> Result<Bytes, Error> {
    let client = state.public_registry().client(state).await?;
    let url = format!(
        "{}{UPSTREAM_MODULES}{path}",
        state.config().public_registry_url.trim_end_matches('/')
    );
    let mut response = client
        .get(&url)
        .header(header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|err| {
            if err.is_timeout() {
                bad_gateway(state, "did not answer in time")
            } else {
                bad_gateway(state, format_args!("could not be reached: {err}"))
            }
        })?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Err(Error::NotFound);
    }
    if !status.is_success() {
        return Err(bad_gateway(
            state,
            format_args!("answered {}", status.as_u16()),
        ));
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_BODY {
                    return Err(bad_gateway(
                        state,
                        format_args!("answered more than {MAX_BODY} bytes"),
                    ));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(err) if err.is_timeout() => {
                return Err(bad_gateway(state, "did not answer in time"));
            }
            Err(err) => {
                return Err(bad_gateway(
                    state,
                    format_args!("broke off its answer: {err}"),
                ));
            }
        }
    }
    match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(serde_json::Value::Object(_)) => Ok(Bytes::from(body)),
        _ => Err(bad_gateway(
            state,
            "answered something that is not a registry document",
        )),
    }
}

/// `GET /api/registry/public/v1/modules/:namespace/:name`: the latest version of each provider
/// (`offset` and `limit` are forwarded).
pub(crate) async fn latest_per_provider(
    AxumState(state): AxumState<State>,
    _caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, Error> {
    if !is_segment(&namespace) || !is_segment(&name) {
        return Err(Error::NotFound);
    }
    let query = forwarded_query(query.as_deref());
    proxy(&state, format!("{namespace}/{name}{query}")).await
}

/// `GET /api/registry/public/v1/modules/:namespace/:name/:provider`: the latest version.
pub(crate) async fn latest(
    AxumState(state): AxumState<State>,
    _caller: Caller,
    Path((namespace, name, provider)): Path<(String, String, String)>,
) -> Result<Response, Error> {
    if ![&namespace, &name, &provider].iter().all(|s| is_segment(s)) {
        return Err(Error::NotFound);
    }
    proxy(&state, format!("{namespace}/{name}/{provider}")).await
}

/// `GET /api/registry/public/v1/modules/:namespace/:name/:provider/versions`.
pub(crate) async fn list_versions(
    AxumState(state): AxumState<State>,
    _caller: Caller,
    Path((namespace, name, provider)): Path<(String, String, String)>,
) -> Result<Response, Error> {
    if ![&namespace, &name, &provider].iter().all(|s| is_segment(s)) {
        return Err(Error::NotFound);
    }
    proxy(&state, format!("{namespace}/{name}/{provider}/versions")).await
}

/// `GET /api/registry/public/v1/modules/:namespace/:name/:provider/:version`.
pub(crate) async fn read_version(
    AxumState(state): AxumState<State>,
    _caller: Caller,
    Path((namespace, name, provider, version)): Path<(String, String, String, String)>,
) -> Result<Response, Error> {
    if ![&namespace, &name, &provider].iter().all(|s| is_segment(s)) || !is_version(&version) {
        return Err(Error::NotFound);
    }
    proxy(&state, format!("{namespace}/{name}/{provider}/{version}")).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_registry_segments_and_versions_are_forwarded() {
        assert!(is_segment("terraform-aws-modules"));
        assert!(is_segment("vpc_x"));
        assert!(!is_segment(""));
        assert!(!is_segment(".."));
        assert!(!is_segment("a/b"));
        assert!(!is_segment("a?b"));
        assert!(is_version("5.1.2"));
        assert!(is_version("1.0.0-rc.1+build.5"));
        assert!(!is_version("1.0/../x"));
        assert!(!is_version(""));
    }

    #[test]
    fn only_numeric_offset_and_limit_are_forwarded() {
        assert_eq!(forwarded_query(None), "");
        assert_eq!(
            forwarded_query(Some("offset=5&limit=10&x=y")),
            "?offset=5&limit=10"
        );
        assert_eq!(forwarded_query(Some("offset=-1&limit=a")), "");
        assert_eq!(forwarded_query(Some("limit=1%262")), "");
    }

    #[test]
    fn the_cache_expires_and_stays_bounded() {
        let registry = PublicRegistry::default();
        registry.remember("a".into(), Bytes::from_static(b"{}"), 1_000, 60_000);
        assert!(registry.cached("a", 60_999, 60_000).is_some());
        assert!(registry.cached("a", 61_000, 60_000).is_none());
        for index in 0..CACHE_ENTRIES + 10 {
            registry.remember(
                format!("k{index}"),
                Bytes::from_static(b"{}"),
                2_000 + index as u64,
                60_000,
            );
        }
        let cache = registry.cache.lock().unwrap();
        assert_eq!(cache.len(), CACHE_ENTRIES);
        assert!(cache.contains_key(&format!("k{}", CACHE_ENTRIES + 9)));
        assert!(!cache.contains_key("k0"));
    }
}
