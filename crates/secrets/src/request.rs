//! HTTP request → logical request, as Vault's `buildLogicalRequestNoAuth`
//! (`internal/http/logical.go`; docs/design.md §U1), and the per-request context every backend
//! gets.
//!
//! Called by `dispatch.rs` for every `/v1/*` path that has no explicit route.
//!
//! Verbs: `GET` read (`?list=<strconv.ParseBool>` makes it a list; a bad value is 400), `LIST`
//! list, `POST`/`PUT` update (dispatch may turn it into create through the engine's existence
//! check), `DELETE` delete, `PATCH` patch (only with `Content-Type:
//! application/merge-patch+json`, else 415), `HEAD` read without a body, `OPTIONS` answered by
//! dispatch itself; any other verb is 405. A list path always ends in `/`.
//!
//! Data: `GET`/`DELETE`/`LIST`/`HEAD` take the query string (one value → string, several →
//! array; `help` and `list` are dropped); `POST`/`PUT`/`PATCH` take only the body: a JSON
//! object, or a form when `Content-Type: application/x-www-form-urlencoded` and the first
//! non-space byte is not `{` or `[` (repeated form keys are joined with `,`, as Vault). An empty
//! body (or JSON `null`) is no data. Top-level JSON `null` fields are dropped (= absent).
//!
//! Token: `X-Secrets-Token` (the header-alias layer copies `X-Vault-Token` there), else
//! `Authorization: Bearer <token>`.
//!
//! Wrapping: `X-Secrets-Wrap-TTL` (or `X-Vault-Wrap-TTL`) asks for the response to be wrapped
//! (`wrapping.rs`): seconds or a Go duration (`"60"`, `"5m"`), as Vault's
//! `ParseDurationSecond`; a negative or unparsable value is 400 `error parsing X-Vault-Wrap-TTL
//! header: ...`; an empty header is no wrapping.
//!
//! Invariants: the body is read within the body limit in force (413 beyond it); every parse
//! failure is a 4xx in Vault's `{"errors":[...]}` shape, never a panic.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequest, Request};
use http::{HeaderMap, HeaderName, header};
use secrets_sdk::{Data, Operation};
use serde_json::Value;

use crate::Error;
use crate::policy::Acl;
use crate::tokens::TokenEntry;

/// The token header (canonical spelling; `X-Vault-Token` is aliased onto it).
pub(crate) const TOKEN_HEADER: HeaderName = HeaderName::from_static("x-secrets-token");

/// The wrap TTL header (canonical spelling; `X-Vault-Wrap-TTL` is aliased onto it).
pub(crate) const WRAP_TTL_HEADER: HeaderName = HeaderName::from_static("x-secrets-wrap-ttl");

/// The content type `PATCH` requires.
pub(crate) const MERGE_PATCH: &str = "application/merge-patch+json";

/// Who is calling, resolved by dispatch before the backend runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestContext {
    /// The token as the client sent it (`None`: no token header).
    pub(crate) client_token: Option<String>,
    /// The token's entry, when the token is valid (`None` on unauthenticated paths called
    /// without a valid token).
    pub(crate) token: Option<Arc<TokenEntry>>,
    /// The ACL built from the token's policies (`None` exactly when `token` is `None`).
    pub(crate) acl: Option<Arc<Acl>>,
    /// The wrap TTL the request asked for (`None`: no wrap TTL header).
    pub(crate) wrap_ttl: Option<Duration>,
}

/// The HTTP verb after parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    /// A logical operation.
    Op(Operation),
    /// `HEAD`: a read whose body is dropped.
    Head,
    /// `OPTIONS`: answered without a backend.
    Options,
}

/// A parsed `/v1/*` request.
#[derive(Debug, Clone)]
pub(crate) struct LogicalRequest {
    pub(crate) verb: Verb,
    /// The logical operation (`Read` for `HEAD` and `OPTIONS`).
    pub(crate) operation: Operation,
    /// The path after `/v1/`, without a leading slash; ends in `/` for lists.
    pub(crate) path: String,
    pub(crate) data: Data,
    pub(crate) client_token: Option<String>,
    /// The wrap TTL header's value (`Some(ZERO)` for `0`, which wraps nothing).
    pub(crate) wrap_ttl: Option<Duration>,
}

/// Parses an HTTP request under `/v1/`.
pub(crate) async fn parse(request: Request) -> Result<LogicalRequest, Error> {
    let method = request.method().clone();
    let raw_path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let client_token = token_from_headers(request.headers());
    let wrap_ttl = wrap_ttl_from_headers(request.headers())?;

    let mut path = raw_path
        .strip_prefix("/v1/")
        .or_else(|| raw_path.strip_prefix("/v1"))
        .unwrap_or(&raw_path)
        .trim_start_matches('/')
        .to_owned();
    path = percent_decode(&path);

    let (verb, operation, data) = match method.as_str() {
        "GET" => {
            let mut pairs = query_pairs(&query)?;
            let list = match pairs.iter().find(|(k, _)| k == "list") {
                Some((_, raw)) => stdx::strconv::parse_bool(raw).ok_or_else(|| {
                    Error::InvalidParameter(format!("invalid value for \"list\": {raw:?}"))
                })?,
                None => false,
            };
            pairs.retain(|(k, _)| k != "list");
            if list {
                (
                    Verb::Op(Operation::List),
                    Operation::List,
                    query_data(pairs),
                )
            } else {
                (
                    Verb::Op(Operation::Read),
                    Operation::Read,
                    query_data(pairs),
                )
            }
        }
        "LIST" => {
            let mut pairs = query_pairs(&query)?;
            pairs.retain(|(k, _)| k != "list");
            (
                Verb::Op(Operation::List),
                Operation::List,
                query_data(pairs),
            )
        }
        "DELETE" => (
            Verb::Op(Operation::Delete),
            Operation::Delete,
            query_data(query_pairs(&query)?),
        ),
        "HEAD" => (
            Verb::Head,
            Operation::Read,
            query_data(query_pairs(&query)?),
        ),
        "OPTIONS" => (Verb::Options, Operation::Read, Data::new()),
        "POST" | "PUT" => {
            // Only a body-carrying request needs its headers after the body is taken.
            let headers = request.headers().clone();
            let body = read_body(request).await?;
            (
                Verb::Op(Operation::Update),
                Operation::Update,
                body_data(&headers, &body)?,
            )
        }
        "PATCH" => {
            let content_type = media_type(request.headers());
            if content_type != MERGE_PATCH {
                return Err(Error::UnsupportedMediaType(format!(
                    "PATCH requires Content-Type of {MERGE_PATCH}, provided {content_type}"
                )));
            }
            let body = read_body(request).await?;
            (
                Verb::Op(Operation::Patch),
                Operation::Patch,
                json_data(&body)?,
            )
        }
        _ => return Err(Error::UnsupportedOperation),
    };
    if operation == Operation::List && !path.ends_with('/') {
        path.push('/');
    }
    Ok(LogicalRequest {
        verb,
        operation,
        path,
        data,
        client_token,
        wrap_ttl,
    })
}

/// The requested wrap TTL (module docs): `None` without the header.
pub(crate) fn wrap_ttl_from_headers(headers: &HeaderMap) -> Result<Option<Duration>, Error> {
    let Some(value) = headers.get(WRAP_TTL_HEADER) else {
        return Ok(None);
    };
    let invalid = |why: &str| {
        Error::InvalidParameter(format!("error parsing X-Vault-Wrap-TTL header: {why}"))
    };
    let raw = value
        .to_str()
        .map_err(|_| invalid("not valid text"))?
        .trim();
    if raw.is_empty() {
        return Ok(None);
    }
    if raw.starts_with('-') {
        return Err(invalid("requested wrap ttl cannot be negative"));
    }
    secrets_sdk::fields::parse_duration(raw)
        .map(Some)
        .map_err(|why| invalid(&why))
}

/// The client token: `X-Secrets-Token` (or its `X-Vault-Token` alias), else a bearer token.
pub(crate) fn token_from_headers(headers: &HeaderMap) -> Option<String> {
    headers
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .or_else(|| http_kit::bearer_token(headers))
        .map(str::to_owned)
}

async fn read_body(request: Request) -> Result<bytes::Bytes, Error> {
    let body = http_kit::RawBody::<Error>::from_request(request, &()).await?;
    Ok(body.into_inner())
}

/// The media type of `Content-Type`, lower-cased, without parameters (`""` when absent).
fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// A `POST`/`PUT` body: JSON, or a form (see the module docs).
fn body_data(headers: &HeaderMap, body: &[u8]) -> Result<Data, Error> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    let is_form = media_type(headers) == "application/x-www-form-urlencoded"
        && !matches!(first, Some(b'{' | b'['));
    if is_form {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
            .map_err(|err| Error::InvalidParameter(format!("failed to parse form input: {err}")))?;
        Ok(form_data(pairs))
    } else {
        json_data(body)
    }
}

/// A JSON body: an object (top-level nulls dropped), or nothing for an empty body or `null`.
pub(crate) fn json_data(body: &[u8]) -> Result<Data, Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Data::new());
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| Error::Rejected(http_kit::Rejection::MalformedJson(err.to_string())))?;
    match value {
        Value::Null => Ok(Data::new()),
        Value::Object(mut map) => {
            map.retain(|_, v| !v.is_null());
            Ok(map)
        }
        other => Err(Error::Rejected(http_kit::Rejection::MalformedJson(
            format!(
                "expected a JSON object, got {}",
                match other {
                    Value::Array(_) => "an array",
                    Value::String(_) => "a string",
                    Value::Number(_) => "a number",
                    _ => "a bool",
                }
            ),
        ))),
    }
}

fn query_pairs(query: &str) -> Result<Vec<(String, String)>, Error> {
    serde_urlencoded::from_str(query)
        .map_err(|err| Error::Rejected(http_kit::Rejection::InvalidQuery(err.to_string())))
}

/// Query parameters as data: one value → string, several → array; `help` dropped.
fn query_data(pairs: Vec<(String, String)>) -> Data {
    let mut data = Data::new();
    for (key, value) in pairs {
        if key == "help" {
            continue;
        }
        match data.get_mut(&key) {
            None => {
                data.insert(key, Value::String(value));
            }
            Some(Value::Array(items)) => items.push(Value::String(value)),
            Some(existing) => {
                let first = existing.take();
                *existing = Value::Array(vec![first, Value::String(value)]);
            }
        }
    }
    data
}

/// Form fields as data: repeated keys joined with `,` (Vault's `parseFormRequest`).
fn form_data(pairs: Vec<(String, String)>) -> Data {
    let mut data = Data::new();
    for (key, value) in pairs {
        match data.get_mut(&key) {
            Some(Value::String(existing)) => {
                existing.push(',');
                existing.push_str(&value);
            }
            _ => {
                data.insert(key, Value::String(value));
            }
        }
    }
    data
}

/// Decodes `%XX` escapes in a URL path (invalid escapes are kept as they are).
fn percent_decode(path: &str) -> String {
    if !path.contains('%') {
        return path.to_owned();
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(byte) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| path.to_owned())
}

#[cfg(test)]
mod tests {
    use axum::body::Body;

    use super::*;

    async fn parse_req(req: http::Request<Body>) -> Result<LogicalRequest, Error> {
        parse(req).await
    }

    fn get(uri: &str) -> http::Request<Body> {
        http::Request::get(uri).body(Body::empty()).unwrap()
    }

    #[tokio::test]
    async fn get_list_spellings_become_list_with_trailing_slash() {
        for spelling in ["true", "True", "TRUE", "t", "T", "1"] {
            let req = parse_req(get(&format!("/v1/secret/foo?list={spelling}")))
                .await
                .unwrap();
            assert_eq!(req.operation, Operation::List, "{spelling}");
            assert_eq!(req.path, "secret/foo/");
            assert!(req.data.is_empty());
        }
        let req = parse_req(get("/v1/secret/foo?list=false")).await.unwrap();
        assert_eq!(req.operation, Operation::Read);
        assert_eq!(req.path, "secret/foo");
    }

    #[tokio::test]
    async fn get_list_bad_value_is_400() {
        let err = parse_req(get("/v1/secret?list=maybe")).await.unwrap_err();
        assert_eq!(http_kit::ApiError::status(&err), 400);
    }

    #[tokio::test]
    async fn get_query_becomes_data_and_repeats_become_arrays() {
        let req = parse_req(get("/v1/x?a=1&b=2&b=3&help=1")).await.unwrap();
        assert_eq!(req.data["a"], "1");
        assert_eq!(req.data["b"], serde_json::json!(["2", "3"]));
        assert!(!req.data.contains_key("help"));
    }

    #[tokio::test]
    async fn json_body_drops_top_level_nulls() {
        let req = http::Request::post("/v1/x?ignored=1")
            .body(Body::from(r#"{"a":null,"b":{"c":null},"d":1}"#))
            .unwrap();
        let req = parse_req(req).await.unwrap();
        assert_eq!(req.operation, Operation::Update);
        assert_eq!(
            Value::Object(req.data),
            serde_json::json!({"b":{"c":null},"d":1})
        );
    }

    #[tokio::test]
    async fn form_body_is_parsed_unless_it_looks_like_json() {
        let form = http::Request::put("/v1/x")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from("a=1&b=x&b=y"))
            .unwrap();
        let req = parse_req(form).await.unwrap();
        assert_eq!(req.data["a"], "1");
        assert_eq!(req.data["b"], "x,y");
        let json = http::Request::put("/v1/x")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(r#" {"a":true}"#))
            .unwrap();
        assert_eq!(parse_req(json).await.unwrap().data["a"], true);
    }

    #[tokio::test]
    async fn malformed_json_and_non_objects_are_400() {
        for body in ["{", "[1]", "\"x\""] {
            let req = http::Request::post("/v1/x").body(Body::from(body)).unwrap();
            let err = parse_req(req).await.unwrap_err();
            assert_eq!(http_kit::ApiError::status(&err), 400, "{body}");
        }
    }

    #[tokio::test]
    async fn patch_needs_merge_patch_content_type() {
        let req = http::Request::patch("/v1/x")
            .header("content-type", "application/json")
            .body(Body::from("{}"))
            .unwrap();
        let err = parse_req(req).await.unwrap_err();
        assert_eq!(http_kit::ApiError::status(&err), 415);
        let req = http::Request::patch("/v1/x")
            .header("content-type", "application/merge-patch+json")
            .body(Body::from(r#"{"a":1}"#))
            .unwrap();
        assert_eq!(parse_req(req).await.unwrap().operation, Operation::Patch);
    }

    #[tokio::test]
    async fn unknown_verbs_are_405() {
        let req = http::Request::builder()
            .method("BREW")
            .uri("/v1/x")
            .body(Body::empty())
            .unwrap();
        let err = parse_req(req).await.unwrap_err();
        assert_eq!(http_kit::ApiError::status(&err), 405);
    }

    #[test]
    fn wrap_ttl_takes_seconds_or_durations_and_refuses_negatives() {
        let parse = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(WRAP_TTL_HEADER, value.parse().unwrap());
            wrap_ttl_from_headers(&headers)
        };
        assert_eq!(wrap_ttl_from_headers(&HeaderMap::new()).unwrap(), None);
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(parse("60").unwrap(), Some(Duration::from_secs(60)));
        assert_eq!(parse("5m").unwrap(), Some(Duration::from_secs(300)));
        assert_eq!(parse("0").unwrap(), Some(Duration::ZERO));
        for (bad, message) in [
            (
                "-5",
                "error parsing X-Vault-Wrap-TTL header: requested wrap ttl cannot be negative",
            ),
            (
                "soon",
                "error parsing X-Vault-Wrap-TTL header: invalid duration \"soon\"",
            ),
        ] {
            let err = parse(bad).unwrap_err();
            assert_eq!(http_kit::ApiError::status(&err), 400, "{bad}");
            assert_eq!(err.to_string(), message, "{bad}");
        }
    }

    #[test]
    fn token_comes_from_header_or_bearer() {
        let mut headers = HeaderMap::new();
        assert_eq!(token_from_headers(&headers), None);
        headers.insert("authorization", "Bearer abc".parse().unwrap());
        assert_eq!(token_from_headers(&headers).as_deref(), Some("abc"));
        headers.insert(TOKEN_HEADER, "xyz".parse().unwrap());
        assert_eq!(token_from_headers(&headers).as_deref(), Some("xyz"));
    }

    #[test]
    fn percent_escapes_in_paths_are_decoded() {
        assert_eq!(percent_decode("a%20b/c"), "a b/c");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("plain"), "plain");
    }
}
