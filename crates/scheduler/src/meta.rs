//! What every scheduler request and response shares: query options (`namespace`, `region`,
//! `index`, `wait`, `stale`, paging, `filter`) and the index headers.
//!
//! Where it sits: Nomad's flavour of `http_kit::query`, which parses the query string and
//! renders the answers. Handlers take [`QueryParams`] and answer reads with [`Indexed`], which
//! sets `X-Scheduler-Index`, `-KnownLeader` and `-LastContact` (sent also as `X-Nomad-*` by the
//! header-alias layer of `routes.rs`).
//!
//! Lists page with [`paginate`] (Nomad's paginator: inclusive tokens, filtering before
//! counting) and filter with [`passes`]; the token helpers (`create_index_token`,
//! `namespace_id_token`, `id_token`) order tokens exactly as the lists are sorted.
//!
//! Invariants: an index sent is never 0; a repeated parameter reads as its first value (Go's
//! `url.Values.Get`, as Nomad); query values are parsed the way Nomad parses them
//! (booleans with Go's `ParseBool`, `per_page` as an int32), and a bad value is a 400 naming it;
//! `reverse` accepts every `ParseBool` spelling (upstream honours only `true`; see
//! docs/compat.md).

use std::cmp::Ordering;
use std::ops::Deref;

use axum::extract::FromRequestParts;
use http::request::Parts;
use http::{HeaderMap, HeaderName};
use http_kit::query::BlockingParams;
use http_kit::query::{QueryError, QueryHeaders};
use serde::Serialize;
use serde_json::Value;

use crate::Error;
use crate::filter::{Filter, FilterError};
use crate::structs::DEFAULT_NAMESPACE;

/// The scheduler's names for the query headers (`X-Nomad-*` through the alias layer).
#[derive(Debug)]
pub(crate) struct SchedulerHeaders;

impl QueryHeaders for SchedulerHeaders {
    const INDEX: HeaderName = HeaderName::from_static("x-scheduler-index");
    const KNOWN_LEADER: HeaderName = HeaderName::from_static("x-scheduler-knownleader");
    const LAST_CONTACT: HeaderName = HeaderName::from_static("x-scheduler-lastcontact");
    const RESULTS_FILTERED: Option<HeaderName> = None;
    const NEXT_TOKEN: Option<HeaderName> = Some(HeaderName::from_static("x-scheduler-nexttoken"));
}

/// The query string (`http_kit::query::QueryParams`: a repeated parameter reads as its first
/// value, as Nomad's `req.URL.Query().Get`), with Nomad's options and error wording.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueryParams(http_kit::query::QueryParams);

impl Deref for QueryParams {
    type Target = http_kit::query::QueryParams;

    fn deref(&self) -> &http_kit::query::QueryParams {
        &self.0
    }
}

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<QueryParams, Error> {
        Ok(QueryParams(http_kit::query::QueryParams::parse(
            parts.uri.query(),
        )))
    }
}

impl QueryParams {
    /// Query parameters from decoded pairs (tests and internal callers).
    #[cfg(test)]
    pub(crate) fn from_pairs(pairs: Vec<(String, String)>) -> QueryParams {
        QueryParams(http_kit::query::QueryParams::from_pairs(pairs))
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
        self.0.bool(name).map_err(|err| match err {
            QueryError::InvalidBool { name, raw } => Error::BadRequest(format!(
                "Failed to parse value of {name:?} ({raw}) as a bool: strconv.ParseBool: parsing {raw:?}: invalid syntax"
            )),
            other => Error::BadRequest(other.to_string()),
        })
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
        self.0
            .blocking()
            .map_err(|err| Error::BadRequest(err.to_string()))
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
                    Error::BadRequest(
                        "Expect a number for `per_page` query string parameter".to_owned(),
                    )
                }),
        }
    }
}

/// A read answer with its index headers (and `X-Scheduler-NextToken` when a page was cut):
/// http-kit's, under the scheduler's header names.
pub(crate) type Indexed<T> = http_kit::query::Indexed<T, SchedulerHeaders>;

/// Adds the index headers (index at least 1).
pub(crate) fn index_headers(headers: &mut HeaderMap, index: u64) {
    http_kit::query::set_index::<SchedulerHeaders>(headers, index);
    http_kit::query::set_leader::<SchedulerHeaders>(headers);
}

/// `true` for Go's `ParseBool` true spellings; anything else (missing, false, garbage) is
/// false. Used where Nomad never rejects the value (`reverse`, `all`); we accept every
/// `ParseBool` spelling (python-nomad sends `True`) where upstream only honours `true`.
pub(crate) use http_kit::query::lenient_bool;

impl QueryParams {
    /// A boolean parameter that defaults to `default` when absent; a bad value is a 400.
    pub(crate) fn flag(&self, name: &str, default: bool) -> Result<bool, Error> {
        Ok(self.bool(name)?.unwrap_or(default))
    }

    /// `?prefix=` (empty when missing).
    pub(crate) fn prefix(&self) -> &str {
        self.get("prefix").unwrap_or("")
    }

    /// `?reverse=`: see [`lenient_bool`].
    pub(crate) fn reverse(&self) -> bool {
        lenient_bool(self.get("reverse"))
    }

    /// `?filter=`, parsed (a bad expression is a 400).
    pub(crate) fn filter(&self) -> Result<Option<Filter>, Error> {
        match self.get("filter") {
            None | Some("") => Ok(None),
            Some(raw) => Filter::parse(raw).map(Some).map_err(filter_error),
        }
    }

    /// `?per_page=`, `?next_token=` and `?reverse=` together.
    pub(crate) fn paging(&self) -> Result<Paging, Error> {
        Ok(Paging {
            per_page: self.per_page()?,
            next_token: self
                .get("next_token")
                .filter(|token| !token.is_empty())
                .map(str::to_owned),
            reverse: self.reverse(),
        })
    }
}

/// A filter error as Nomad words it: a bad expression, or an evaluation error (a missing
/// struct field).
pub(crate) fn filter_error(err: FilterError) -> Error {
    match err {
        FilterError::Parse(message) => {
            Error::BadRequest(format!("failed to read filter expression: {message}"))
        }
        FilterError::Eval(message) => Error::BadRequest(format!(
            "failed to read result page: error finding value in datum: {message}"
        )),
    }
}

/// Whether `value` passes `filter` (no filter: everything passes).
pub(crate) fn passes(
    filter: Option<&Filter>,
    value: impl FnOnce() -> Value,
    map_fields: &[&str],
) -> Result<bool, Error> {
    match filter {
        None => Ok(true),
        Some(filter) => filter.matches(&value(), map_fields).map_err(filter_error),
    }
}

/// The body of a write as JSON; malformed JSON is a 400 naming serde's complaint.
pub(crate) fn json_body(bytes: &[u8]) -> Result<Value, Error> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(bytes)
        .map_err(|err| Error::BadRequest(format!("failed to parse JSON input: {err}")))
}

/// Paging options of a list (Nomad's paginator).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Paging {
    /// 0: no paging.
    pub(crate) per_page: usize,
    /// The inclusive token where the page starts.
    pub(crate) next_token: Option<String>,
    /// Walk the list backwards (the caller reverses the order; the token check flips).
    pub(crate) reverse: bool,
}

/// One page of a list and the token of the first item left out.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Page<S> {
    pub(crate) items: Vec<S>,
    pub(crate) next_token: Option<String>,
}

/// Nomad's paginator over `items` (already in list order, reversed when `paging.reverse`):
/// items before the token (after it, in reverse) are skipped, then `keep` filters (filter
/// expression, namespace), then up to `per_page` items are rendered with `stub`; the token of
/// the first item beyond the page is returned and that item is not.
///
/// `token(item)` gives the item's token and how it compares with the target token.
pub(crate) fn paginate<T, S>(
    items: impl IntoIterator<Item = T>,
    paging: &Paging,
    token: impl Fn(&T, &str) -> (String, Ordering),
    mut keep: impl FnMut(&T) -> Result<bool, Error>,
    mut stub: impl FnMut(T) -> S,
) -> Result<Page<S>, Error> {
    let mut out = Vec::new();
    let mut token_found = paging.next_token.is_none();
    for item in items {
        if !token_found {
            let target = paging.next_token.as_deref().unwrap_or("");
            let (_, compared) = token(&item, target);
            let passed = if paging.reverse {
                compared == Ordering::Greater
            } else {
                compared == Ordering::Less
            };
            if passed {
                continue;
            }
        }
        if !keep(&item)? {
            continue;
        }
        token_found = true;
        if paging.per_page != 0 && out.len() == paging.per_page {
            let (next, _) = token(&item, "");
            return Ok(Page {
                items: out,
                next_token: Some(next),
            });
        }
        out.push(stub(item));
    }
    Ok(Page {
        items: out,
        next_token: None,
    })
}

/// The token `<CreateIndex>.<ID>` and its order against `target` (index compared as a number;
/// a target that is not `<number>.<rest>` is compared as a string), Nomad's
/// `CreateIndexAndIDTokenizer`.
pub(crate) fn create_index_token(create_index: u64, id: &str, target: &str) -> (String, Ordering) {
    let token = format!("{create_index}.{id}");
    let parsed = target
        .split_once('.')
        .and_then(|(index, rest)| index.parse::<u64>().ok().map(|index| (index, rest)));
    let compared = match parsed {
        Some((target_index, target_id)) => create_index
            .cmp(&target_index)
            .then_with(|| id.cmp(target_id)),
        None => token.as_str().cmp(target),
    };
    (token, compared)
}

/// The token `<namespace>.<ID>` and its order against `target`, compared as the pair the list
/// is sorted by (namespace names cannot contain `.`, so the first `.` splits the target).
pub(crate) fn namespace_id_token(namespace: &str, id: &str, target: &str) -> (String, Ordering) {
    let token = format!("{namespace}.{id}");
    let compared = match target.split_once('.') {
        Some((target_namespace, target_id)) => (namespace, id).cmp(&(target_namespace, target_id)),
        None => token.as_str().cmp(target),
    };
    (token, compared)
}

/// The token `<ID>` and its order against `target` (Nomad's `IDTokenizer`).
pub(crate) fn id_token(id: &str, target: &str) -> (String, Ordering) {
    (id.to_owned(), id.cmp(target))
}

/// Checks an ID prefix the way Nomad's UUID index does (it decodes the prefix to bytes):
/// at most 36 characters, at most 4 hyphens, an even number of hex digits. Returns the
/// prefix in lowercase, ready to compare with IDs.
pub(crate) fn uuid_prefix(prefix: &str, table: &str) -> Result<String, Error> {
    let fail =
        |reason: String| Error::BadRequest(format!("{table} lookup failed: index error: {reason}"));
    if prefix.len() > 36 {
        return Err(fail(format!(
            "Invalid UUID length. UUID have 36 characters; got {}",
            prefix.len()
        )));
    }
    let hyphens = prefix.matches('-').count();
    if hyphens > 4 {
        return Err(fail(format!(
            "UUID should have maximum of 4 \"-\"; got {hyphens}"
        )));
    }
    let digits: String = prefix.chars().filter(|c| *c != '-').collect();
    if !digits.len().is_multiple_of(2) {
        return Err(fail(
            "Input (without hyphens) must be even length".to_owned(),
        ));
    }
    if let Some(bad) = digits.chars().find(|c| !c.is_ascii_hexdigit()) {
        return Err(fail(format!(
            "Invalid UUID: encoding/hex: invalid byte: U+{:04X} {bad:?}",
            u32::from(bad)
        )));
    }
    Ok(prefix.to_ascii_lowercase())
}

/// A write's answer: `body` with the index headers (`X-Scheduler-Index`).
pub(crate) fn written<T: Serialize>(index: u64, body: T) -> Indexed<T> {
    Indexed::new(index, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paging(per_page: usize, next_token: Option<&str>, reverse: bool) -> Paging {
        Paging {
            per_page,
            next_token: next_token.map(str::to_owned),
            reverse,
        }
    }

    fn page_of(items: &[u64], paging: &Paging) -> Page<u64> {
        paginate(
            items.iter().copied(),
            paging,
            |item, target| create_index_token(*item, "x", target),
            |item| Ok(item % 10 != 5),
            |item| item,
        )
        .unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn paginate_cuts_pages_and_returns_the_first_left_out_token() {
        let items = [1, 2, 3, 4, 6];
        let first = page_of(&items, &paging(2, None, false));
        assert_eq!(first.items, vec![1, 2]);
        assert_eq!(first.next_token.as_deref(), Some("3.x"));
        let second = page_of(&items, &paging(2, Some("3.x"), false));
        assert_eq!(second.items, vec![3, 4]);
        assert_eq!(second.next_token.as_deref(), Some("6.x"));
        let last = page_of(&items, &paging(2, Some("6.x"), false));
        assert_eq!(last.items, vec![6]);
        assert_eq!(last.next_token, None);
    }

    #[test]
    fn paginate_filters_before_counting() {
        let items = [4, 5, 6, 15, 7];
        let page = page_of(&items, &paging(3, None, false));
        assert_eq!(page.items, vec![4, 6, 7]);
        assert_eq!(page.next_token, None);
    }

    #[test]
    fn paginate_exact_page_has_no_token() {
        let page = page_of(&[1, 2], &paging(2, None, false));
        assert_eq!(page.items, vec![1, 2]);
        assert_eq!(page.next_token, None);
    }

    #[test]
    fn paginate_reverse_skips_items_after_the_token() {
        let items = [9, 8, 7, 6];
        let page = page_of(&items, &paging(2, Some("8.x"), true));
        assert_eq!(page.items, vec![8, 7]);
        assert_eq!(page.next_token.as_deref(), Some("6.x"));
    }

    #[test]
    fn paginate_token_between_items_starts_at_the_next_one() {
        let page = page_of(&[10, 20, 30], &paging(0, Some("15.zzz"), false));
        assert_eq!(page.items, vec![20, 30]);
    }

    #[test]
    fn create_index_token_compares_numerically() {
        assert_eq!(create_index_token(12, "a", "102.a").1, Ordering::Less);
        assert_eq!(create_index_token(102, "a", "12.a").1, Ordering::Greater);
        assert_eq!(create_index_token(12, "b", "12.a").1, Ordering::Greater);
        assert_eq!(
            create_index_token(12, "a", "12.a"),
            ("12.a".to_owned(), Ordering::Equal)
        );
        // Not `<number>.<id>`: compared as strings.
        assert_eq!(create_index_token(12, "a", "zz").1, Ordering::Less);
    }

    #[test]
    fn namespace_id_token_orders_by_namespace_then_id() {
        assert_eq!(namespace_id_token("a", "x", "a-b.y").1, Ordering::Less);
        assert_eq!(
            namespace_id_token("default", "web.1", "default.web.1").1,
            Ordering::Equal
        );
        assert_eq!(
            namespace_id_token("default", "b", "default.a").1,
            Ordering::Greater
        );
    }

    #[test]
    fn uuid_prefix_accepts_even_hex_with_hyphens() {
        assert_eq!(uuid_prefix("ABcd", "alloc").ok().as_deref(), Some("abcd"));
        assert!(uuid_prefix("abcdef01-23", "alloc").is_ok());
        assert!(uuid_prefix("", "alloc").is_ok());
    }

    #[test]
    fn uuid_prefix_rejects_odd_length_and_non_hex() {
        let odd = uuid_prefix("abc", "alloc").err().map(|err| err.to_string());
        assert_eq!(
            odd.as_deref(),
            Some("alloc lookup failed: index error: Input (without hyphens) must be even length")
        );
        let bad = uuid_prefix("zz", "alloc").err().map(|err| err.to_string());
        assert_eq!(
            bad.as_deref(),
            Some(
                "alloc lookup failed: index error: Invalid UUID: encoding/hex: invalid byte: U+007A 'z'"
            )
        );
        assert!(uuid_prefix(&"a".repeat(38), "alloc").is_err());
        assert!(uuid_prefix("a-b-c-d-e-f0", "alloc").is_err());
    }

    #[test]
    fn repeated_query_parameters_read_as_their_first_value_as_nomad_does() {
        let query = QueryParams::from_pairs(vec![
            ("namespace".to_owned(), "a".to_owned()),
            ("namespace".to_owned(), "b".to_owned()),
            ("per_page".to_owned(), "2".to_owned()),
            ("per_page".to_owned(), "x".to_owned()),
        ]);
        assert_eq!(query.namespace(), "a");
        assert_eq!(query.per_page().ok(), Some(2));
    }

    #[test]
    fn lenient_bool_accepts_go_spellings_and_ignores_garbage() {
        assert!(lenient_bool(Some("True")));
        assert!(lenient_bool(Some("1")));
        assert!(lenient_bool(Some("")));
        assert!(!lenient_bool(Some("yes")));
        assert!(!lenient_bool(None));
    }

    #[test]
    fn json_body_reports_malformed_input() {
        assert!(json_body(b"{").is_err());
        assert_eq!(json_body(b"  ").ok(), Some(Value::Null));
    }
}
