//! Header spellings (product decision 1): the spec's names are canonical, upstream's are
//! accepted on requests and also sent on responses; and `Authorization: Bearer` tokens.
//!
//! Where it sits: each service names its prefix pairs (`("x-registry-", "x-consul-")`,
//! `("x-scheduler-", "x-nomad-")`, `("x-secrets-", "x-vault-")`) in its `Hooks`, and the shared
//! layer (`layers.rs`) calls [`copy_prefixed`] with them on every request and response;
//! handlers read and write only canonical names.
//!
//! Invariants:
//! - On requests, a header sent only under the upstream prefix is copied (every value) to the
//!   canonical name; a canonical header the client sent is never overwritten.
//! - On responses, every canonical header is also sent under the upstream prefix, unless the
//!   handler already set that upstream header itself.
//! - Prefixes match case-insensitively (header names are lowercase on the wire in `http`).

use http::{HeaderMap, HeaderName, HeaderValue, header};

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
    use super::*;

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
