//! Header spellings (product decision 1): the spec's names are canonical, upstream's are
//! accepted on requests and also sent on responses; and `Authorization: Bearer` tokens.
//!
//! Where it sits: each service names its prefix pairs (`("x-registry-", "x-consul-")`,
//! `("x-scheduler-", "x-nomad-")`, `("x-secrets-", "x-vault-")`) in its `Hooks`, which the
//! shared layer (`layers.rs`) applies, or wraps its router in [`header_aliases`]; handlers read
//! and write only canonical names.
//!
//! Invariants:
//! - On requests, a header sent only under the upstream prefix is copied (every value) to the
//!   canonical name; a canonical header the client sent is never overwritten.
//! - On responses, every canonical header is also sent under the upstream prefix, unless the
//!   handler already set that upstream header itself.
//! - Prefixes match case-insensitively (header names are lowercase on the wire in `http`).

use axum::Router;
use http::{HeaderMap, HeaderName, HeaderValue, header};

/// Wraps `router` so that each `(canonical prefix, upstream prefix)` pair in `pairs` works in
/// both spellings; see the module docs. In production the pairs go into the shared layer
/// instead (`layers_with_hooks`), which avoids a second boxed `Route` per request.
pub fn header_aliases<S>(
    router: Router<S>,
    pairs: &'static [(&'static str, &'static str)],
) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    crate::layers::hooks(
        router,
        crate::layers::Hooks {
            aliases: pairs,
            finish: None,
        },
    )
}

/// Copies every header named `from_prefix` + rest to `to_prefix` + rest, unless the target
/// name is already present.
pub(crate) fn copy_prefixed(headers: &mut HeaderMap, from_prefix: &str, to_prefix: &str) {
    let mut additions: Vec<(HeaderName, HeaderValue)> = Vec::new();
    // Names are built in a stack buffer: `HeaderName::from_bytes` copies what it keeps.
    let mut buffer = [0u8; 128];
    for (name, value) in headers.iter() {
        let name = name.as_str();
        let Some(rest) = strip_prefix_ignore_case(name, from_prefix) else {
            continue;
        };
        let length = to_prefix.len() + rest.len();
        if rest.is_empty() || length > buffer.len() {
            continue;
        }
        buffer[..to_prefix.len()].copy_from_slice(to_prefix.as_bytes());
        buffer[to_prefix.len()..length].copy_from_slice(rest.as_bytes());
        buffer[..length].make_ascii_lowercase();
        let Ok(target) = HeaderName::from_bytes(&buffer[..length]) else {
            continue;
        };
        if !headers.contains_key(&target) {
            additions.push((target, value.clone()));
        }
    }
    for (name, value) in additions {
        headers.append(name, value);
    }
}

fn strip_prefix_ignore_case<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let head = name.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &name[prefix.len()..])
}

/// The token of an `Authorization: Bearer <token>` header; the scheme matches in any case.
/// `None` for a missing header, another scheme, or an empty token.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim_start().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::response::Response;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;
    use crate::error::tests::body_text;

    const PAIRS: &[(&str, &str)] = &[("x-registry-", "x-consul-"), ("x-secrets-", "x-vault-")];

    /// Echoes the request's `x-registry-token` and `x-secrets-token` values, and sets
    /// `X-Registry-Index: 7` and `X-Registry-KnownLeader: true` on the response (plus
    /// `X-Consul-KnownLeader: false` when asked, to show a handler's own value wins).
    fn app() -> Router {
        let router = Router::new().route(
            "/",
            get(|headers: HeaderMap| async move {
                let tokens: Vec<_> = headers
                    .get_all("x-registry-token")
                    .iter()
                    .chain(headers.get_all("x-secrets-token"))
                    .map(|value| value.to_str().unwrap().to_owned())
                    .collect();
                let mut response = Response::new(Body::from(tokens.join(",")));
                let response_headers = response.headers_mut();
                response_headers.insert("X-Registry-Index", HeaderValue::from_static("7"));
                response_headers.insert("X-Registry-KnownLeader", HeaderValue::from_static("true"));
                if headers.contains_key("x-test-own-upstream") {
                    response_headers
                        .insert("X-Consul-KnownLeader", HeaderValue::from_static("false"));
                }
                response
            }),
        );
        header_aliases(router, PAIRS)
    }

    async fn send(headers: &[(&str, &str)]) -> Response {
        let mut request = http::Request::get("/");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        app()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn request_upstream_header_is_copied_to_canonical() {
        let response = send(&[("X-Consul-Token", "abc")]).await;
        assert_eq!(body_text(response).await, "abc");
    }

    #[tokio::test]
    async fn request_every_pair_is_aliased() {
        let response = send(&[("X-Consul-Token", "abc"), ("X-Vault-Token", "s.1")]).await;
        assert_eq!(body_text(response).await, "abc,s.1");
    }

    #[tokio::test]
    async fn request_canonical_header_wins_over_upstream() {
        let response = send(&[
            ("X-Registry-Token", "canonical"),
            ("X-Consul-Token", "upstream"),
        ])
        .await;
        assert_eq!(body_text(response).await, "canonical");
    }

    #[tokio::test]
    async fn request_multi_valued_upstream_header_keeps_every_value() {
        let response = send(&[("X-Consul-Token", "one"), ("X-Consul-Token", "two")]).await;
        assert_eq!(body_text(response).await, "one,two");
    }

    #[tokio::test]
    async fn response_canonical_headers_are_also_sent_upstream() {
        let response = send(&[]).await;
        let headers = response.headers();
        assert_eq!(headers["x-registry-index"], "7");
        assert_eq!(headers["x-consul-index"], "7");
        assert_eq!(headers["x-consul-knownleader"], "true");
        assert!(!headers.contains_key("x-vault-index"));
    }

    #[tokio::test]
    async fn response_upstream_header_set_by_handler_is_kept() {
        let response = send(&[("x-test-own-upstream", "1")]).await;
        assert_eq!(response.headers()["x-consul-knownleader"], "false");
        assert_eq!(
            response
                .headers()
                .get_all("x-consul-knownleader")
                .iter()
                .count(),
            1
        );
    }

    #[test]
    fn copy_prefixed_ignores_the_bare_prefix() {
        let mut headers = HeaderMap::new();
        headers.insert("x-consul-", HeaderValue::from_static("x"));
        copy_prefixed(&mut headers, "x-consul-", "x-registry-");
        assert_eq!(headers.len(), 1);
    }

    fn authorization(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn bearer_token_reads_the_token() {
        assert_eq!(bearer_token(&authorization("Bearer s.abc")), Some("s.abc"));
    }

    #[test]
    fn bearer_token_scheme_is_case_insensitive() {
        assert_eq!(bearer_token(&authorization("bearer s.abc")), Some("s.abc"));
        assert_eq!(
            bearer_token(&authorization("BEARER  s.abc ")),
            Some("s.abc")
        );
    }

    #[test]
    fn bearer_token_other_scheme_or_empty_is_none() {
        assert_eq!(bearer_token(&authorization("Basic dXNlcjpwdw==")), None);
        assert_eq!(bearer_token(&authorization("Bearer ")), None);
        assert_eq!(bearer_token(&authorization("Bearer")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }
}
