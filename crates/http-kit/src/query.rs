//! Consul's and Nomad's query options and read answers, implemented once: [`QueryParams`] (the
//! query string as Go's `url.Values` reads it), [`BlockingParams`] (`index` and `wait`),
//! [`QueryError`] (why a shared option was refused, typed, so each service words it its own
//! way), and [`Indexed`] (a read's JSON body with the index headers, under the service's header
//! names, [`QueryHeaders`]).
//!
//! Where it sits: the registry (Consul) and the scheduler (Nomad) wrap [`QueryParams`] in their
//! own extractor (their error type, their options: `dc`, `ns`, `namespace`, paging) and answer
//! reads with [`Indexed`]; the long poll itself is [`crate::blocking`].
//!
//! Invariants:
//! - A repeated parameter reads as its FIRST value, as Go's `url.Values.Get` (which both
//!   upstreams use) does; [`QueryParams::get_all`] gives every value.
//! - A parameter given without a value (`?recurse`) is present, with the empty value.
//! - An index sent is never 0 (1 instead), so clients never spin.
//! - `wait` is capped at [`MAX_WAIT`]; a missing or zero wait means [`DEFAULT_WAIT`].

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use crate::Json;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

/// The query string as ordered `(name, value)` pairs, form-decoded (`+` is a space, as
/// py-consul and python-nomad send it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryParams {
    pairs: Vec<(String, String)>,
}

impl QueryParams {
    /// Parses a raw query string (`None`: no query string at all). Every string parses, as
    /// with form decoding everywhere: nothing is refused.
    pub fn parse(raw: Option<&str>) -> QueryParams {
        // The pairs serde_urlencoded decodes with form_urlencoded, without its serde pass; form
        // decoding takes any input (invalid UTF-8 becomes U+FFFD), so nothing is refused. A
        // `&`-separated pair with nothing to decode (no `%`, no `+`: most of them) is split and
        // copied as it is; form_urlencoded decodes the others.
        let mut pairs = Vec::new();
        for pair in raw.unwrap_or("").split('&') {
            if pair.is_empty() {
                continue;
            }
            if !pair.bytes().any(|byte| byte == b'%' || byte == b'+') {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                pairs.push((name.to_owned(), value.to_owned()));
                continue;
            }
            pairs.extend(
                form_urlencoded::parse(pair.as_bytes())
                    .map(|(name, value)| (name.into_owned(), value.into_owned())),
            );
        }
        QueryParams { pairs }
    }

    /// Query parameters from decoded pairs, in order.
    pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> QueryParams
    where
        K: Into<String>,
        V: Into<String>,
    {
        QueryParams {
            pairs: pairs
                .into_iter()
                .map(|(name, value)| (name.into(), value.into()))
                .collect(),
        }
    }

    /// The first value of `name`, if present (an empty string for a bare `?name`).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// Every value of a repeated parameter, in order (`?tag=a&tag=b`).
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// Whether `name` is present at all, whatever its value (how both upstreams test flags such
    /// as `?recurse` and `?stale`).
    pub fn has(&self, name: &str) -> bool {
        self.pairs.iter().any(|(key, _)| key == name)
    }

    /// `?index=` and `?wait=`, parsed by [`BlockingParams::parse`].
    pub fn blocking(&self) -> Result<BlockingParams, QueryError> {
        BlockingParams::parse(self.get("index"), self.get("wait"))
    }

    /// A boolean parameter read with Go's `strconv.ParseBool`; a bare `?name` is true.
    pub fn bool(&self, name: &str) -> Result<Option<bool>, QueryError> {
        match self.get(name) {
            None => Ok(None),
            Some("") => Ok(Some(true)),
            Some(raw) => {
                stdx::strconv::parse_bool(raw)
                    .map(Some)
                    .ok_or_else(|| QueryError::InvalidBool {
                        name: name.to_owned(),
                        raw: raw.to_owned(),
                    })
            }
        }
    }

    /// A flag that is never refused: see [`lenient_bool`].
    pub fn lenient_bool(&self, name: &str) -> bool {
        lenient_bool(self.get(name))
    }
}

/// `true` for a bare flag and for Go's `ParseBool` true spellings; anything else (missing,
/// false, garbage) is false. For the flags both upstreams never reject (`?wan`,
/// `?replace-existing-checks`, Nomad's `?reverse` and `?all`).
pub fn lenient_bool(raw: Option<&str>) -> bool {
    match raw {
        Some("") => true,
        Some(raw) => stdx::strconv::parse_bool(raw).unwrap_or(false),
        None => false,
    }
}

/// The wait when the client gives none (or zero), as in Consul and Nomad.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5 * 60);

/// The longest wait honored, as in Consul and Nomad; longer ones are cut to this.
pub const MAX_WAIT: Duration = Duration::from_secs(10 * 60);

/// The `index` and `wait` query parameters of a blocking query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockingParams {
    /// The index the client already has; 0 means "do not block".
    pub index: u64,
    /// How long to wait for a newer index, without jitter; at most [`MAX_WAIT`].
    pub wait: Duration,
}

impl Default for BlockingParams {
    fn default() -> BlockingParams {
        BlockingParams {
            index: 0,
            wait: DEFAULT_WAIT,
        }
    }
}

impl BlockingParams {
    /// Parses the raw `index` and `wait` values. `index` is a non-negative integer (missing or
    /// empty: 0). `wait` is a Go duration (`"20ms"`, `"10s"`, `"5m"`, `"1m30s"`) or a bare
    /// number of seconds; missing, empty or zero means [`DEFAULT_WAIT`], and anything above
    /// [`MAX_WAIT`] is cut to it.
    pub fn parse(index: Option<&str>, wait: Option<&str>) -> Result<BlockingParams, QueryError> {
        let index = match index.map(str::trim) {
            None | Some("") => 0,
            Some(index) => index.parse::<u64>().map_err(|_| QueryError::InvalidIndex {
                raw: index.to_owned(),
            })?,
        };
        let wait = match wait.map(str::trim) {
            None | Some("") => DEFAULT_WAIT,
            Some(wait) => parse_wait(wait)?,
        };
        Ok(BlockingParams { index, wait })
    }

    /// Whether the client asked to block (a non-zero index).
    pub fn is_blocking(&self) -> bool {
        self.index > 0
    }
}

fn parse_wait(wait: &str) -> Result<Duration, QueryError> {
    let bare_seconds = wait
        .bytes()
        .all(|byte| byte.is_ascii_digit() || byte == b'.');
    let invalid = |cause| QueryError::InvalidWait {
        raw: wait.to_owned(),
        cause,
    };
    let parsed = if bare_seconds {
        stdx::duration::parse_go(&format!("{wait}s")).map_err(|_| invalid(None))?
    } else {
        stdx::duration::parse_go(wait).map_err(|err| invalid(Some(err)))?
    };
    Ok(if parsed.is_zero() {
        DEFAULT_WAIT
    } else {
        parsed.min(MAX_WAIT)
    })
}

/// The blocking-query parameters as a query-string struct, for `#[serde(flatten)]` into a
/// handler's query type or use on its own with [`ApiQuery`](crate::ApiQuery).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct BlockingQuery {
    pub index: Option<String>,
    pub wait: Option<String>,
}

impl BlockingQuery {
    pub fn params(&self) -> Result<BlockingParams, QueryError> {
        BlockingParams::parse(self.index.as_deref(), self.wait.as_deref())
    }
}

/// Why a query option shared by Consul and Nomad was refused. The Display is a fair default
/// message; a service matches the variant to answer in its upstream's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// `?index=` is not a non-negative integer (`raw` as given, trimmed).
    #[error("invalid index {raw:?}: must be a non-negative integer")]
    InvalidIndex { raw: String },
    /// `?wait=` is neither a Go duration nor a number of seconds (`raw` as given, trimmed).
    #[error("{}", wait_message(.raw, .cause.as_ref()))]
    InvalidWait {
        raw: String,
        /// Why the Go duration was refused; `None` for a bare number that is not one.
        cause: Option<stdx::duration::DurationError>,
    },
    /// A boolean parameter is not one of Go's `ParseBool` spellings.
    #[error("invalid value for {name:?}: {raw:?} is not a boolean")]
    InvalidBool { name: String, raw: String },
}

/// `invalid wait "5x": unknown unit "x"`: the duration error, said of the wait.
fn wait_message(raw: &str, cause: Option<&stdx::duration::DurationError>) -> String {
    match cause {
        // `DurationError` reads `invalid duration "<raw>": <reason>`.
        Some(cause) => cause.to_string().replacen("duration", "wait", 1),
        None => format!("invalid wait {raw:?}"),
    }
}

/// The names a service gives the headers of a read's answer (Consul's `X-Consul-Index`, ...),
/// each in lowercase, as `HeaderName::from_static` constants (a `&str` name would be parsed
/// and hashed again on every response).
pub trait QueryHeaders: 'static {
    /// The index of what the read saw (`X-Consul-Index`).
    const INDEX: HeaderName;
    /// Whether the cluster has a leader (`X-Consul-KnownLeader`): always `true` here.
    const KNOWN_LEADER: HeaderName;
    /// How stale the answering server is, in ms (`X-Consul-LastContact`): always `0` here.
    const LAST_CONTACT: HeaderName;
    /// Set to `true` when ACLs dropped entries from the answer, where the API has it.
    const RESULTS_FILTERED: Option<HeaderName>;
    /// Where the next page starts (`X-Nomad-NextToken`), where the API pages its lists.
    const NEXT_TOKEN: Option<HeaderName>;
}

/// A read's answer: the body as JSON with the index headers under `H`'s names.
///
/// Headers are written in this order: index, results-filtered (when set), known leader, last
/// contact, next token (when set).
pub struct Indexed<T, H> {
    pub index: u64,
    pub body: T,
    /// ACLs dropped entries from `body`.
    pub filtered: bool,
    /// The token of the first entry left out of a page.
    pub next_token: Option<String>,
    headers: PhantomData<fn() -> H>,
}

impl<T, H> Indexed<T, H> {
    pub fn new(index: u64, body: T) -> Indexed<T, H> {
        Indexed {
            index,
            body,
            filtered: false,
            next_token: None,
            headers: PhantomData,
        }
    }

    /// Says whether ACLs dropped entries from the body.
    pub fn filtered(mut self, filtered: bool) -> Indexed<T, H> {
        self.filtered = filtered;
        self
    }

    /// Says where the next page starts, if a page was cut.
    pub fn next_token(mut self, next_token: Option<String>) -> Indexed<T, H> {
        self.next_token = next_token;
        self
    }
}

impl<T: fmt::Debug, H> fmt::Debug for Indexed<T, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Indexed")
            .field("index", &self.index)
            .field("body", &self.body)
            .field("filtered", &self.filtered)
            .field("next_token", &self.next_token)
            .finish()
    }
}

impl<T: Serialize, H: QueryHeaders> IntoResponse for Indexed<T, H> {
    fn into_response(self) -> Response {
        let mut response = Json(self.body).into_response();
        let headers = response.headers_mut();
        set_index::<H>(headers, self.index);
        if self.filtered
            && let Some(name) = H::RESULTS_FILTERED
        {
            headers.insert(name, HeaderValue::from_static("true"));
        }
        set_leader::<H>(headers);
        if let Some(token) = self.next_token
            && let Some(name) = H::NEXT_TOKEN
            && let Ok(value) = HeaderValue::from_str(&token)
        {
            headers.insert(name, value);
        }
        response
    }
}

/// Sets the index header (never 0: 1 instead).
pub fn set_index<H: QueryHeaders>(headers: &mut HeaderMap, index: u64) {
    headers.insert(H::INDEX, HeaderValue::from(index.max(1)));
}

/// Sets the known-leader (`true`) and last-contact (`0`) headers: one server, always the
/// leader as far as clients can tell.
pub fn set_leader<H: QueryHeaders>(headers: &mut HeaderMap) {
    headers.insert(H::KNOWN_LEADER, HeaderValue::from_static("true"));
    headers.insert(H::LAST_CONTACT, HeaderValue::from_static("0"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params_decode_as_serde_urlencoded_does() {
        let queries = [
            "",
            "a",
            "a=",
            "=b",
            "a=1&&b=2&",
            "a=1&a=2",
            "a=b=c",
            "acquire=0f0e0d0c-0b0a-4908-8706-050403020100",
            "k+ey=v+al%20ue%2B",
            "x=%FF%fe&y=%zz&z=%",
            "caf%C3%A9=%E2%9C%93",
            "recurse&separator=%2F&index=7&wait=1m",
            "&&=&==&a==b&;c=d;e",
        ];
        for query in queries {
            let expected: Vec<(String, String)> = serde_urlencoded::from_str(query).unwrap();
            assert_eq!(
                QueryParams::parse(Some(query)),
                QueryParams::from_pairs(expected),
                "{query:?}"
            );
        }
        assert_eq!(QueryParams::parse(None), QueryParams::default());
    }

    struct Test;

    impl QueryHeaders for Test {
        const INDEX: HeaderName = HeaderName::from_static("x-test-index");
        const KNOWN_LEADER: HeaderName = HeaderName::from_static("x-test-knownleader");
        const LAST_CONTACT: HeaderName = HeaderName::from_static("x-test-lastcontact");
        const RESULTS_FILTERED: Option<HeaderName> =
            Some(HeaderName::from_static("x-test-filtered"));
        const NEXT_TOKEN: Option<HeaderName> = Some(HeaderName::from_static("x-test-nexttoken"));
    }

    #[track_caller]
    fn check_parse(
        index: Option<&str>,
        wait: Option<&str>,
        expected: Result<(u64, Duration), &str>,
    ) {
        let parsed = BlockingParams::parse(index, wait)
            .map(|p| (p.index, p.wait))
            .map_err(|err| err.to_string());
        assert_eq!(
            parsed,
            expected.map_err(str::to_owned),
            "index {index:?}, wait {wait:?}"
        );
    }

    #[test]
    fn parse_defaults_to_no_index_and_five_minutes() {
        check_parse(None, None, Ok((0, DEFAULT_WAIT)));
        check_parse(Some(""), Some(""), Ok((0, DEFAULT_WAIT)));
    }

    #[test]
    fn parse_accepts_go_durations_and_bare_seconds() {
        check_parse(
            Some("42"),
            Some("20ms"),
            Ok((42, Duration::from_millis(20))),
        );
        check_parse(Some("1"), Some("10s"), Ok((1, Duration::from_secs(10))));
        check_parse(Some("1"), Some("5m"), Ok((1, Duration::from_secs(300))));
        check_parse(Some("1"), Some("1m30s"), Ok((1, Duration::from_secs(90))));
        check_parse(Some("1"), Some("30"), Ok((1, Duration::from_secs(30))));
        check_parse(Some("1"), Some("1.5"), Ok((1, Duration::from_millis(1500))));
    }

    #[test]
    fn parse_caps_wait_at_ten_minutes() {
        check_parse(Some("1"), Some("1h"), Ok((1, MAX_WAIT)));
        check_parse(Some("1"), Some("3600"), Ok((1, MAX_WAIT)));
    }

    #[test]
    fn parse_zero_wait_means_default() {
        check_parse(Some("1"), Some("0"), Ok((1, DEFAULT_WAIT)));
        check_parse(Some("1"), Some("0s"), Ok((1, DEFAULT_WAIT)));
    }

    #[test]
    fn parse_rejects_bad_values() {
        check_parse(
            Some("abc"),
            None,
            Err(r#"invalid index "abc": must be a non-negative integer"#),
        );
        check_parse(
            Some("-1"),
            None,
            Err(r#"invalid index "-1": must be a non-negative integer"#),
        );
        check_parse(
            None,
            Some("soon"),
            Err(r#"invalid wait "soon": expected a number"#),
        );
        check_parse(
            None,
            Some("5x"),
            Err(r#"invalid wait "5x": unknown unit "x""#),
        );
        check_parse(None, Some("1.2.3"), Err(r#"invalid wait "1.2.3""#));
    }

    #[test]
    fn blocking_query_struct_parses_from_a_query_string() {
        let query: BlockingQuery = serde_urlencoded::from_str("index=7&wait=1m&recurse").unwrap();
        assert_eq!(
            query.params(),
            Ok(BlockingParams {
                index: 7,
                wait: Duration::from_secs(60)
            })
        );
    }

    fn query(raw: &str) -> QueryParams {
        QueryParams::parse(Some(raw))
    }

    #[test]
    fn repeated_parameters_read_as_their_first_value_as_go_does() {
        let query = query("index=7&tag=a&index=9&tag=b");
        assert_eq!(query.get("index"), Some("7"));
        assert_eq!(query.get_all("tag").collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(query.blocking().map(|params| params.index), Ok(7));
    }

    #[test]
    fn bare_parameters_are_present_and_empty() {
        let query = query("recurse&keys=&name=a+b");
        assert!(query.has("recurse"));
        assert_eq!(query.get("recurse"), Some(""));
        assert_eq!(query.get("keys"), Some(""));
        assert_eq!(query.get("name"), Some("a b"));
        assert!(!query.has("raw"));
        assert_eq!(QueryParams::parse(None), QueryParams::default());
    }

    #[test]
    fn bool_reads_go_spellings_and_names_a_bad_one() {
        let query = query("a&b=True&c=0&d=yes");
        assert_eq!(query.bool("a"), Ok(Some(true)));
        assert_eq!(query.bool("b"), Ok(Some(true)));
        assert_eq!(query.bool("c"), Ok(Some(false)));
        assert_eq!(query.bool("missing"), Ok(None));
        assert_eq!(
            query.bool("d"),
            Err(QueryError::InvalidBool {
                name: "d".to_owned(),
                raw: "yes".to_owned()
            })
        );
    }

    #[test]
    fn lenient_bool_accepts_go_spellings_and_ignores_garbage() {
        let query = query("a&b=1&c=yes&d=false");
        assert!(query.lenient_bool("a"));
        assert!(query.lenient_bool("b"));
        assert!(!query.lenient_bool("c"));
        assert!(!query.lenient_bool("d"));
        assert!(!query.lenient_bool("missing"));
    }

    #[test]
    fn blocking_errors_are_typed_and_worded() {
        let index = query("index=x").blocking().unwrap_err();
        assert!(matches!(&index, QueryError::InvalidIndex { raw } if raw == "x"));
        assert_eq!(
            index.to_string(),
            r#"invalid index "x": must be a non-negative integer"#
        );
        let wait = query("index=1&wait=5x").blocking().unwrap_err();
        assert!(matches!(&wait, QueryError::InvalidWait { raw, cause: Some(_) } if raw == "5x"));
        assert_eq!(wait.to_string(), r#"invalid wait "5x": unknown unit "x""#);
        let bare = query("wait=1.2.3").blocking().unwrap_err();
        assert!(matches!(&bare, QueryError::InvalidWait { cause: None, .. }));
        assert_eq!(bare.to_string(), r#"invalid wait "1.2.3""#);
        assert_eq!(
            query("wait=90").blocking().map(|params| params.wait),
            Ok(Duration::from_secs(90))
        );
    }

    #[test]
    fn indexed_answers_carry_the_headers_in_order() {
        let answer = Indexed::<_, Test>::new(0, vec![1])
            .filtered(true)
            .next_token(Some("7.x".to_owned()))
            .into_response();
        let names: Vec<&str> = answer.headers().keys().map(|name| name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "content-type",
                "x-test-index",
                "x-test-filtered",
                "x-test-knownleader",
                "x-test-lastcontact",
                "x-test-nexttoken"
            ]
        );
        assert_eq!(answer.headers()["x-test-index"], "1");
        let plain = Indexed::<_, Test>::new(5, ()).into_response();
        assert_eq!(plain.headers()["x-test-index"], "5");
        assert!(!plain.headers().contains_key("x-test-filtered"));
        assert!(!plain.headers().contains_key("x-test-nexttoken"));
    }
}
