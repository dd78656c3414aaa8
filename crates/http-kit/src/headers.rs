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
//! - Prefixes match case-insensitively: header names are lowercase in `http`, and the
//!   prefixes services name must be lowercase too.

use std::cell::RefCell;

use http::{HeaderMap, HeaderName, HeaderValue, header};

/// How many translated names each thread remembers. The first ones translated are kept (the
/// few a service sets on every response come first); later ones are built each time, so
/// headers a client makes up cannot grow the memo.
const NAME_MEMO_LIMIT: usize = 32;

thread_local! {
    /// `(source name, target prefix, target name)` for names already translated on this
    /// thread, searched linearly (a handful of entries: cheaper than hashing the name): the
    /// same few headers (`x-registry-index`, ...) are aliased on every response, and building
    /// a custom `HeaderName` allocates.
    static NAME_MEMO: RefCell<Vec<(HeaderName, &'static str, HeaderName)>> =
        const { RefCell::new(Vec::new()) };
}

/// Copies every header named `from_prefix` + rest to `to_prefix` + rest, unless the target
/// name is already present.
pub(crate) fn copy_prefixed(headers: &mut HeaderMap, from_prefix: &str, to_prefix: &'static str) {
    // One look at the names first: most requests carry nothing to copy, and most responses
    // no target name yet (then no target needs looking up).
    let mut sources = 0;
    let mut targets_present = false;
    // Both prefixes start with `x-`: any other name (most of them) is passed over at once.
    let both_x = from_prefix.starts_with("x-") && to_prefix.starts_with("x-");
    for name in headers.keys() {
        let name = name.as_str();
        if both_x && !name.starts_with("x-") {
            continue;
        }
        if strip_prefix_ignore_case(name, from_prefix).is_some() {
            sources += 1;
        }
        if strip_prefix_ignore_case(name, to_prefix).is_some() {
            targets_present = true;
        }
    }
    if sources == 0 {
        return;
    }
    // Most responses carry two or three such headers: the first four wait on the stack.
    let mut few: [Option<(HeaderName, HeaderValue)>; 4] = Default::default();
    let mut more: Vec<(HeaderName, HeaderValue)> = Vec::new();
    let mut count = 0;
    for (name, value) in headers.iter() {
        let Some(rest) = strip_prefix_ignore_case(name.as_str(), from_prefix) else {
            continue;
        };
        let Some(target) = translated(name, rest, to_prefix) else {
            continue;
        };
        if !targets_present || !headers.contains_key(&target) {
            match few.get_mut(count) {
                Some(slot) => *slot = Some((target, value.clone())),
                None => more.push((target, value.clone())),
            }
            count += 1;
        }
    }
    headers.reserve(count);
    for (name, value) in few.into_iter().flatten().chain(more) {
        headers.append(name, value);
    }
}

/// `name` (whose part after its prefix is `rest`) under `to_prefix`, remembered per thread;
/// `None` when the rest is empty, too long, or not a valid name.
fn translated(name: &HeaderName, rest: &str, to_prefix: &'static str) -> Option<HeaderName> {
    let known = NAME_MEMO.with(|memo| {
        memo.borrow()
            .iter()
            .find(|(source, prefix, _)| source == name && *prefix == to_prefix)
            .map(|(_, _, target)| target.clone())
    });
    if known.is_some() {
        return known;
    }
    // Names are built in a stack buffer: `HeaderName::from_bytes` copies what it keeps.
    let mut buffer = [0u8; 128];
    let length = to_prefix.len() + rest.len();
    if rest.is_empty() || length > buffer.len() {
        return None;
    }
    buffer[..to_prefix.len()].copy_from_slice(to_prefix.as_bytes());
    buffer[to_prefix.len()..length].copy_from_slice(rest.as_bytes());
    buffer[..length].make_ascii_lowercase();
    let target = HeaderName::from_bytes(&buffer[..length]).ok()?;
    NAME_MEMO.with(|memo| {
        let mut memo = memo.borrow_mut();
        if memo.len() < NAME_MEMO_LIMIT {
            memo.push((name.clone(), to_prefix, target.clone()));
        }
    });
    Some(target)
}

/// `name` without `prefix`. Header names are lowercase in `http`, and so are the prefixes
/// services name (checked in debug builds): a plain byte comparison is a case-insensitive one.
fn strip_prefix_ignore_case<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    debug_assert!(
        !prefix.bytes().any(|byte| byte.is_ascii_uppercase()),
        "header prefix {prefix:?} is not lowercase"
    );
    name.strip_prefix(prefix)
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
    fn copied_names_are_the_same_when_remembered_and_the_memo_stays_bounded() {
        for round in 0..2 {
            let mut headers = HeaderMap::new();
            headers.insert("x-registry-index", HeaderValue::from_static("7"));
            headers.insert("x-consul-knownleader", HeaderValue::from_static("false"));
            copy_prefixed(&mut headers, "x-registry-", "x-consul-");
            assert_eq!(headers["x-consul-index"], "7", "round {round}");
            // A target the handler set itself is kept.
            assert_eq!(headers["x-consul-knownleader"], "false");
            assert_eq!(headers.len(), 3);
        }
        for i in 0..(NAME_MEMO_LIMIT * 2) {
            let mut headers = HeaderMap::new();
            let name = HeaderName::from_bytes(format!("x-consul-h{i}").as_bytes()).unwrap();
            headers.insert(name, HeaderValue::from_static("v"));
            copy_prefixed(&mut headers, "x-consul-", "x-registry-");
            assert_eq!(headers[format!("x-registry-h{i}").as_str()], "v");
        }
        NAME_MEMO.with(|memo| assert!(memo.borrow().len() <= NAME_MEMO_LIMIT));
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
