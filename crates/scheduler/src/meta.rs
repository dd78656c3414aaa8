//! What every scheduler request and response shares: query options (`namespace`, `region`,
//! `index`, `wait`, `stale`, paging, `filter`) and the index headers.
//!
//! Where it sits: handlers take [`QueryParams`] and answer reads with [`Indexed`], which sets
//! `X-Scheduler-Index`, `-KnownLeader` and `-LastContact` (sent also as `X-Nomad-*` by the
//! header-alias layer of `routes.rs`).
//!
//! Invariants: an index sent is never 0; query values are parsed the way Nomad parses them
//! (booleans with Go's `ParseBool`, `per_page` as an int32), and a bad value is a 400 naming it.

use axum::Json;
use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderMap, HeaderValue};
use http_kit::blocking::BlockingParams;
use serde::Serialize;

use crate::Error;
use crate::structs::DEFAULT_NAMESPACE;

pub(crate) const INDEX_HEADER: &str = "x-scheduler-index";
pub(crate) const KNOWN_LEADER_HEADER: &str = "x-scheduler-knownleader";
pub(crate) const LAST_CONTACT_HEADER: &str = "x-scheduler-lastcontact";
pub(crate) const NEXT_TOKEN_HEADER: &str = "x-scheduler-nexttoken";

/// The raw query string as ordered pairs, form-decoded.
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
    /// The last value of `name`, if given.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// `?namespace=` (default `default`; `*` means every namespace the token may see).
    pub(crate) fn namespace(&self) -> &str {
        match self.get("namespace") {
            None | Some("") => DEFAULT_NAMESPACE,
            Some(namespace) => namespace,
        }
    }

    /// A boolean parameter, parsed like Go's `strconv.ParseBool`; a bare `?name` is true.
    pub(crate) fn bool(&self, name: &str) -> Result<Option<bool>, Error> {
        match self.get(name) {
            None => Ok(None),
            Some("") => Ok(Some(true)),
            Some(raw) => http_kit::parse_bool(raw).map(Some).ok_or_else(|| {
                Error::BadRequest(format!(
                    "Failed to parse value of {name:?} ({raw}) as a bool: strconv.ParseBool: parsing {raw:?}: invalid syntax"
                ))
            }),
        }
    }

    /// `?index=` and `?wait=`.
    pub(crate) fn blocking(&self) -> Result<BlockingParams, Error> {
        if let Some(stale) = self.get("stale")
            && !stale.is_empty()
            && stale != "true"
            && stale != "false"
        {
            return Err(Error::BadRequest(
                "Expect `true` or `false` for `stale` query string parameter".to_owned(),
            ));
        }
        BlockingParams::parse(self.get("index"), self.get("wait")).map_err(Error::BadRequest)
    }

    /// `?per_page=` (0 or missing: no paging).
    pub(crate) fn per_page(&self) -> Result<usize, Error> {
        match self.get("per_page") {
            None | Some("") => Ok(0),
            Some(raw) => raw
                .parse::<i32>()
                .ok()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    Error::BadRequest("Expect a number for `per_page` query string parameter".to_owned())
                }),
        }
    }
}

/// A read answer with its index headers.
#[derive(Debug)]
pub(crate) struct Indexed<T> {
    pub(crate) index: u64,
    pub(crate) body: T,
    /// `X-Scheduler-NextToken`, when a page was cut.
    pub(crate) next_token: Option<String>,
}

impl<T> Indexed<T> {
    pub(crate) fn new(index: u64, body: T) -> Indexed<T> {
        Indexed {
            index,
            body,
            next_token: None,
        }
    }
}

/// Adds the index headers (index at least 1).
pub(crate) fn index_headers(headers: &mut HeaderMap, index: u64) {
    headers.insert(INDEX_HEADER, HeaderValue::from(index.max(1)));
    headers.insert(KNOWN_LEADER_HEADER, HeaderValue::from_static("true"));
    headers.insert(LAST_CONTACT_HEADER, HeaderValue::from_static("0"));
}

impl<T: Serialize> IntoResponse for Indexed<T> {
    fn into_response(self) -> Response {
        let mut response = Json(self.body).into_response();
        index_headers(response.headers_mut(), self.index);
        if let Some(token) = self.next_token
            && let Ok(value) = HeaderValue::from_str(&token)
        {
            response.headers_mut().insert(NEXT_TOKEN_HEADER, value);
        }
        response
    }
}
