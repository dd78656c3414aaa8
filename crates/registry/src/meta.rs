//! What every registry request and response shares: the query options (`dc`, `ns`, `index`,
//! `wait`, `stale`, `consistent`, `token`), namespace resolution, blocking reads, and the index
//! headers.
//!
//! Where it sits: Consul's flavour of `http_kit::query` (which parses the query string and
//! renders [`Indexed`] answers) and `http_kit::blocking`. Handlers take [`QueryParams`] and call
//! [`QueryParams::options`], run their reads through [`QueryOptions::read`] or
//! [`QueryOptions::block`] and answer with [`Indexed`]; [`finish`] (a hook of the shared layer,
//! named in `routes.rs`) adds
//! `X-Registry-KnownLeader` and `-LastContact` to every response and an `X-Registry-Index` to
//! any response that lacks one (errors and 404s included, which py-consul requires).
//!
//! Invariants: an index sent is never 0; a repeated parameter reads as its first value (as
//! Consul's `r.URL.Query().Get`); `?stale` with `?consistent` is a 400; a `dc` other than ours
//! is a 400 (Consul: 500 `No path to datacenter`); a bad `index` or `wait` is Consul's
//! `Invalid index` / `Invalid wait time`.

use std::future::Future;
use std::ops::Deref;

use axum::extract::FromRequestParts;
use axum::response::Response;
use http::request::Parts;
use http::{HeaderMap, HeaderName};
use http_kit::query::BlockingParams;
use http_kit::query::{QueryError, QueryHeaders};
use storage::{KeyRange, Storage};
use tokio_util::sync::CancellationToken;

use crate::{Error, State};

pub(crate) const NAMESPACE_HEADER: HeaderName = HeaderName::from_static("x-registry-namespace");

/// The namespace used when nothing names one.
pub(crate) const DEFAULT_NAMESPACE: &str = "default";

/// The registry's names for the query headers (`X-Consul-*` through the alias layer).
#[derive(Debug)]
pub(crate) struct RegistryHeaders;

impl QueryHeaders for RegistryHeaders {
    const INDEX: HeaderName = HeaderName::from_static("x-registry-index");
    const KNOWN_LEADER: HeaderName = HeaderName::from_static("x-registry-knownleader");
    const LAST_CONTACT: HeaderName = HeaderName::from_static("x-registry-lastcontact");
    const RESULTS_FILTERED: Option<HeaderName> = Some(HeaderName::from_static(
        "x-registry-results-filtered-by-acls",
    ));
    const NEXT_TOKEN: Option<HeaderName> = None;
}

/// A read's answer: the body as JSON, with its index and, when an ACL dropped entries, the
/// filtered-results header.
pub(crate) type Indexed<T> = http_kit::query::Indexed<T, RegistryHeaders>;

/// The request's query string (Consul tests some flags by presence alone: `?recurse`, `?keys`,
/// `?raw`), and the server's shutdown token, which ends a long poll early.
#[derive(Debug, Clone)]
pub(crate) struct QueryParams {
    params: http_kit::query::QueryParams,
    shutdown: CancellationToken,
}

impl Deref for QueryParams {
    type Target = http_kit::query::QueryParams;

    fn deref(&self) -> &http_kit::query::QueryParams {
        &self.params
    }
}

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<QueryParams, Error> {
        let params = http_kit::query::QueryParams::parse(parts.uri.query());
        let shutdown = parts
            .extensions
            .get::<http_kit::Shutdown>()
            .map_or_else(CancellationToken::new, |shutdown| shutdown.0.clone());
        Ok(QueryParams { params, shutdown })
    }
}

impl QueryParams {
    #[cfg(test)]
    pub(crate) fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> QueryParams {
        QueryParams {
            params: http_kit::query::QueryParams::from_pairs(pairs),
            shutdown: CancellationToken::new(),
        }
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
        // Consul's `ParseUint` takes the value as sent, spaces included.
        if let Some(raw) = self.get("index")
            && !raw.is_empty()
            && raw.parse::<u64>().is_err()
        {
            return Err(Error::BadRequest("Invalid index".to_owned()));
        }
        let blocking = self.blocking().map_err(|err| match err {
            QueryError::InvalidIndex { .. } => Error::BadRequest("Invalid index".to_owned()),
            QueryError::InvalidWait { .. } => Error::BadRequest("Invalid wait time".to_owned()),
            other => Error::BadRequest(other.to_string()),
        })?;
        Ok(QueryOptions {
            blocking,
            shutdown: self.shutdown.clone(),
        })
    }
}

/// The validated common options.
#[derive(Debug, Clone)]
pub(crate) struct QueryOptions {
    pub(crate) blocking: BlockingParams,
    shutdown: CancellationToken,
}

impl QueryOptions {
    /// Runs `read` as a blocking query over `range`: its index is the last change to `range`.
    pub(crate) async fn read<T, F, Fut>(
        &self,
        storage: &dyn Storage,
        range: KeyRange,
        read: F,
    ) -> Result<(T, u64), Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        http_kit::blocking::block_range(storage, range, &self.blocking, Some(&self.shutdown), read)
            .await
    }

    /// Runs `query` as a blocking query woken by changes in `watched`; `query` returns its
    /// value with the index of what it read (a narrower range, or several).
    pub(crate) async fn block<T, F, Fut>(
        &self,
        storage: &dyn Storage,
        watched: KeyRange,
        query: F,
    ) -> Result<(T, u64), Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(T, u64), Error>>,
    {
        http_kit::blocking::block(
            storage,
            watched,
            &self.blocking,
            Some(&self.shutdown),
            query,
        )
        .await
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
    let named = requested_namespace(query, headers).or(token_namespace);
    match named {
        None => Ok(Namespace::One(DEFAULT_NAMESPACE.to_owned())),
        Some("*") => Ok(Namespace::All),
        Some(name) if valid_namespace(name) => Ok(Namespace::One(name.to_owned())),
        Some(name) => Err(Error::BadRequest(format!("Invalid namespace {name:?}"))),
    }
}

/// The namespace a request names itself: `ns`, then `X-Registry-Namespace` (or its
/// `X-Consul-Namespace` alias); empty values count as absent.
pub(crate) fn requested_namespace<'a>(
    query: &'a QueryParams,
    headers: &'a HeaderMap,
) -> Option<&'a str> {
    query.get("ns").filter(|ns| !ns.is_empty()).or_else(|| {
        headers
            .get(NAMESPACE_HEADER)
            .and_then(|value| value.to_str().ok())
            .filter(|ns| !ns.is_empty())
    })
}

/// Namespace names: 1 to 64 of `a-z A-Z 0-9 - _` (they become storage key segments).
pub(crate) fn valid_namespace(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Sets `X-Registry-Index` (never 0).
pub(crate) fn set_index(headers: &mut HeaderMap, index: u64) {
    http_kit::query::set_index::<RegistryHeaders>(headers, index);
}

/// The registry's response finisher (run by the shared layer on every response): adds the
/// leader headers to every response, and an index to any that lacks one (writes, errors,
/// unknown paths): the store's current revision, read in place where the store keeps it in
/// memory (no future to box), else asked for. Reads set their own, narrower index.
pub(crate) fn finish(state: State) -> http_kit::Finish {
    std::sync::Arc::new(move |response: &mut Response| {
        let headers = response.headers_mut();
        http_kit::query::set_leader::<RegistryHeaders>(headers);
        if !state.knows_leader() {
            headers.insert(
                RegistryHeaders::KNOWN_LEADER,
                http::HeaderValue::from_static("false"),
            );
        }
        if headers.contains_key(RegistryHeaders::INDEX) {
            return None;
        }
        if let Some(index) = state.storage().known_revision() {
            set_index(headers, index);
            return None;
        }
        let state = state.clone();
        Some(Box::pin(async move {
            let index = state.storage().revision().await.unwrap_or(1);
            let mut headers = HeaderMap::new();
            set_index(&mut headers, index);
            headers
        }))
    })
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
