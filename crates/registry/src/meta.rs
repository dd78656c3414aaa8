//! What every registry request and response shares: the query options (`dc`, `ns`, `index`,
//! `wait`, `stale`, `consistent`, `token`), namespace resolution, and the index headers.
//!
//! Where it sits: handlers take [`QueryParams`] and call [`QueryParams::options`]; they answer
//! reads with [`Indexed`]; [`layer`] (applied in `routes.rs`) adds `X-Registry-KnownLeader` and
//! `-LastContact` to every response and an `X-Registry-Index` to any response that lacks one
//! (errors and 404s included, which py-consul requires).
//!
//! Invariants: an index sent is never 0; `?stale` with `?consistent` is a 400; a `dc` other
//! than ours is a 400 (Consul: 500 `No path to datacenter`).

use std::time::Duration;

use axum::Json;
use axum::extract::{FromRequestParts, Request, State as AxumState};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderMap, HeaderValue};
use http_kit::blocking::BlockingParams;
use serde::Serialize;

use crate::{Error, State};

pub(crate) const INDEX_HEADER: &str = "x-registry-index";
pub(crate) const KNOWN_LEADER_HEADER: &str = "x-registry-knownleader";
pub(crate) const LAST_CONTACT_HEADER: &str = "x-registry-lastcontact";
pub(crate) const FILTERED_HEADER: &str = "x-registry-results-filtered-by-acls";
pub(crate) const NAMESPACE_HEADER: &str = "x-registry-namespace";

/// The namespace used when nothing names one.
pub(crate) const DEFAULT_NAMESPACE: &str = "default";

/// The raw query string as ordered pairs, form-decoded (py-consul sends `+` for spaces).
/// Consul tests some flags by presence alone (`?recurse`, `?keys`, `?raw`).
#[derive(Debug, Clone, Default)]
pub(crate) struct QueryParams {
    pairs: Vec<(String, String)>,
}

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<QueryParams, Error> {
        let raw = parts.uri.query().unwrap_or("");
        let pairs = serde_urlencoded::from_str::<Vec<(String, String)>>(raw)
            .map_err(|err| Error::BadRequest(format!("Invalid query string: {err}")))?;
        Ok(QueryParams { pairs })
    }
}

impl QueryParams {
    #[cfg(test)]
    pub(crate) fn from_pairs(pairs: &[(&str, &str)]) -> QueryParams {
        QueryParams {
            pairs: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// The first value of `name`, if present (an empty string for a bare `?name`).
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// Every value of a repeated parameter (`?tag=a&tag=b`, `?node-meta=k:v&node-meta=...`).
    pub(crate) fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// Whether `name` is present at all, whatever its value (Consul's test for flags).
    pub(crate) fn has(&self, name: &str) -> bool {
        self.pairs.iter().any(|(key, _)| key == name)
    }

    /// An unsigned integer parameter; a malformed one is a 400 naming it.
    pub(crate) fn u64(&self, name: &str) -> Result<Option<u64>, Error> {
        match self.get(name) {
            None | Some("") => Ok(None),
            Some(raw) => raw.parse::<u64>().map(Some).map_err(|_| {
                Error::BadRequest(format!(
                    "Invalid {name}: {raw:?} is not an unsigned integer"
                ))
            }),
        }
    }

    /// The options every endpoint shares, validated.
    pub(crate) fn options(&self, state: &State) -> Result<QueryOptions, Error> {
        if let Some(dc) = self.get("dc")
            && !dc.is_empty()
            && dc != state.config().datacenter
        {
            return Err(Error::UnknownDatacenter(dc.to_owned()));
        }
        if self.has("stale") && self.has("consistent") {
            return Err(Error::BadRequest(
                "Cannot specify ?stale with ?consistent, conflicting semantics.".to_owned(),
            ));
        }
        let index = self.get("index");
        if let Some(raw) = index
            && !raw.is_empty()
            && raw.parse::<u64>().is_err()
        {
            return Err(Error::BadRequest("Invalid index".to_owned()));
        }
        let wait = self.get("wait").filter(|w| !w.is_empty());
        let blocking = BlockingParams::parse(index, wait).map_err(|err| {
            if wait.is_some() && err.to_lowercase().contains("wait") {
                Error::BadRequest("Invalid wait time".to_owned())
            } else {
                Error::BadRequest(err)
            }
        })?;
        Ok(QueryOptions { blocking })
    }
}

/// The validated common options.
#[derive(Debug, Clone)]
pub(crate) struct QueryOptions {
    pub(crate) blocking: BlockingParams,
}

impl QueryOptions {
    #[allow(dead_code, reason = "non-blocking endpoints ignore it")]
    pub(crate) fn wait(&self) -> Duration {
        self.blocking.wait
    }
}

/// Which namespace(s) a request addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Namespace {
    One(String),
    /// `ns=*` on list endpoints.
    All,
}

impl Namespace {
    pub(crate) fn contains(&self, namespace: &str) -> bool {
        match self {
            Namespace::One(name) => name == namespace,
            Namespace::All => true,
        }
    }

    /// The single namespace, or an error where `*` is not allowed.
    pub(crate) fn single(&self) -> Result<&str, Error> {
        match self {
            Namespace::One(name) => Ok(name),
            Namespace::All => Err(Error::BadRequest(
                "Invalid namespace \"*\": wildcards are only allowed on list endpoints".to_owned(),
            )),
        }
    }
}

/// Resolves the namespace: the `ns` query, then `X-Registry-Namespace` (or its
/// `X-Consul-Namespace` alias), then the request token's namespace, then `default`.
pub(crate) fn resolve_namespace(
    query: &QueryParams,
    headers: &HeaderMap,
    token_namespace: Option<&str>,
) -> Result<Namespace, Error> {
    let named = query
        .get("ns")
        .filter(|ns| !ns.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            headers
                .get(NAMESPACE_HEADER)
                .and_then(|v| v.to_str().ok())
                .filter(|ns| !ns.is_empty())
                .map(str::to_owned)
        })
        .or_else(|| token_namespace.map(str::to_owned));
    match named.as_deref() {
        None => Ok(Namespace::One(DEFAULT_NAMESPACE.to_owned())),
        Some("*") => Ok(Namespace::All),
        Some(name) if valid_namespace(name) => Ok(Namespace::One(name.to_owned())),
        Some(name) => Err(Error::BadRequest(format!("Invalid namespace {name:?}"))),
    }
}

/// Namespace names: 1 to 64 of `a-z A-Z 0-9 - _` (they become storage key segments).
fn valid_namespace(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A read's answer: the body as JSON, with its index and, when an ACL dropped entries, the
/// filtered-results header.
#[derive(Debug)]
pub(crate) struct Indexed<T> {
    pub(crate) index: u64,
    pub(crate) body: T,
    pub(crate) filtered: bool,
}

impl<T> Indexed<T> {
    pub(crate) fn new(index: u64, body: T) -> Indexed<T> {
        Indexed {
            index,
            body,
            filtered: false,
        }
    }

    pub(crate) fn filtered(mut self, filtered: bool) -> Indexed<T> {
        self.filtered = filtered;
        self
    }
}

impl<T: Serialize> IntoResponse for Indexed<T> {
    fn into_response(self) -> Response {
        let mut response = Json(self.body).into_response();
        set_index(response.headers_mut(), self.index);
        if self.filtered {
            response
                .headers_mut()
                .insert(FILTERED_HEADER, HeaderValue::from_static("true"));
        }
        response
    }
}

/// Sets `X-Registry-Index` (never 0).
pub(crate) fn set_index(headers: &mut HeaderMap, index: u64) {
    headers.insert(INDEX_HEADER, HeaderValue::from(index.max(1)));
}

/// Adds the leader headers to every response, and an index to any that lacks one (writes,
/// errors, unknown paths): the store's current revision, which is O(1) to read. Reads set
/// their own, narrower index.
pub(crate) fn layer(router: axum::Router, state: State) -> axum::Router {
    router.layer(middleware::from_fn_with_state(state, add_meta_headers))
}

async fn add_meta_headers(
    AxumState(state): AxumState<State>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(KNOWN_LEADER_HEADER, HeaderValue::from_static("true"));
    headers.insert(LAST_CONTACT_HEADER, HeaderValue::from_static("0"));
    if !headers.contains_key(INDEX_HEADER) {
        let index = state.storage().revision().await.unwrap_or(1);
        set_index(response.headers_mut(), index);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_are_validated() {
        assert!(valid_namespace("team-a_1"));
        assert!(!valid_namespace("a/b"));
        assert!(!valid_namespace(""));
        assert!(!valid_namespace(&"x".repeat(65)));
    }
}
