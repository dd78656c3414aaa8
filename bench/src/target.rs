//! Parsing of `loadgen`'s target and request flags: the URL (loopback only), `--header`
//! values and the `--expect` status matcher.
//!
//! Where it sits: pure functions used by the `loadgen` binary before it opens any
//! connection, kept in the library so they can be unit-tested.
//!
//! Invariants:
//! - A [`Target`] always connects to a loopback socket address (127.0.0.0/8 or ::1). Host
//!   names other than `localhost` are refused rather than resolved, so no flag can point the
//!   generator at another machine.
//! - Only `http://` is accepted (no TLS); the request target is the URL's path and query.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use hyper::Uri;
use hyper::header::{HeaderName, HeaderValue};

/// Where `loadgen` connects and what it puts in the request line and `Host` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The loopback socket address every connection goes to.
    pub addr: SocketAddr,
    /// The value of the `Host` header (the URL's authority).
    pub host: String,
    /// The origin-form request target, e.g. `/v1/sys/health?standbyok=true`.
    pub path_and_query: String,
}

/// Why a flag value was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError(msg.into()))
}

impl Target {
    /// Parses an `http://` URL whose host is a loopback address or `localhost`.
    pub fn parse(url: &str) -> Result<Self, ParseError> {
        let uri: Uri = match url.parse() {
            Ok(u) => u,
            Err(e) => return err(format!("bad URL {url:?}: {e}")),
        };
        if uri.scheme_str() != Some("http") {
            return err(format!("only http:// URLs are supported, got {url:?}"));
        }
        let Some(authority) = uri.authority() else {
            return err(format!("URL {url:?} has no host"));
        };
        if authority.as_str().contains('@') {
            return err(format!("URL {url:?} must not carry user info"));
        }
        let host = authority.host();
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let ip: IpAddr = if bare.eq_ignore_ascii_case("localhost") {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            match bare.parse() {
                Ok(ip) => ip,
                Err(_) => {
                    return err(format!(
                        "host {host:?} is not an IP literal; only loopback targets (127.0.0.0/8, [::1], localhost) are allowed"
                    ));
                }
            }
        };
        if !ip.is_loopback() {
            return err(format!(
                "refusing non-loopback target {ip}; only 127.0.0.0/8, [::1] and localhost are allowed"
            ));
        }
        let port = authority.port_u16().unwrap_or(80);
        let path_and_query = uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |pq| pq.as_str().to_owned());
        let path_and_query = if path_and_query.is_empty() {
            "/".to_owned()
        } else {
            path_and_query
        };
        Ok(Self {
            addr: SocketAddr::new(ip, port),
            host: authority.as_str().to_owned(),
            path_and_query,
        })
    }
}

/// Parses a `--header 'Name: value'` flag.
pub fn parse_header(s: &str) -> Result<(HeaderName, HeaderValue), ParseError> {
    let Some((name, value)) = s.split_once(':') else {
        return err(format!("header {s:?} is not 'Name: value'"));
    };
    let name = match HeaderName::from_bytes(name.trim().as_bytes()) {
        Ok(n) => n,
        Err(e) => return err(format!("bad header name in {s:?}: {e}")),
    };
    let value = match HeaderValue::from_str(value.trim()) {
        Ok(v) => v,
        Err(e) => return err(format!("bad header value in {s:?}: {e}")),
    };
    Ok((name, value))
}

/// Which response statuses count as successes; every other status is an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// A whole class, e.g. `2xx` is `Class(2)`.
    Class(u16),
    /// Any of these exact codes, e.g. `200,204`.
    Codes(Vec<u16>),
}

impl Expect {
    /// Parses `2xx`-style classes or a comma-separated list of codes.
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        let s = s.trim();
        let lower = s.to_ascii_lowercase();
        if let Some(d) = lower.strip_suffix("xx") {
            return match d.parse::<u16>() {
                Ok(c @ 1..=5) if d.len() == 1 => Ok(Self::Class(c)),
                _ => err(format!("bad status class {s:?}, want 1xx..5xx")),
            };
        }
        let mut codes = Vec::new();
        for part in s.split(',') {
            match part.trim().parse::<u16>() {
                Ok(c @ 100..=599) => codes.push(c),
                _ => return err(format!("bad status code {part:?} in {s:?}")),
            }
        }
        Ok(Self::Codes(codes))
    }

    /// Whether `status` counts as a success.
    pub fn matches(&self, status: u16) -> bool {
        match self {
            Self::Class(c) => status / 100 == *c,
            Self::Codes(codes) => codes.contains(&status),
        }
    }
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Class(c) => write!(f, "{c}xx"),
            Self::Codes(codes) => {
                let s: Vec<String> = codes.iter().map(u16::to_string).collect();
                f.write_str(&s.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_targets_are_accepted() {
        let t = Target::parse("http://127.0.0.1:8200/v1/sys/health?standbyok=true").unwrap();
        assert_eq!(t.addr, "127.0.0.1:8200".parse().unwrap());
        assert_eq!(t.host, "127.0.0.1:8200");
        assert_eq!(t.path_and_query, "/v1/sys/health?standbyok=true");

        let t = Target::parse("http://localhost:4646").unwrap();
        assert_eq!(t.addr, "127.0.0.1:4646".parse().unwrap());
        assert_eq!(t.path_and_query, "/");

        let t = Target::parse("http://[::1]:8500/v1/status/leader").unwrap();
        assert_eq!(t.addr, "[::1]:8500".parse().unwrap());

        let t = Target::parse("http://127.9.9.9/").unwrap();
        assert_eq!(t.addr.port(), 80);
    }

    #[test]
    fn other_targets_are_refused() {
        for url in [
            "http://10.0.0.1:8200/",
            "http://192.168.1.1/",
            "http://8.8.8.8/",
            "http://example.com/",
            "http://[2001:db8::1]/",
            "https://127.0.0.1/",
            "127.0.0.1:8200",
            "http://user@127.0.0.1/",
        ] {
            assert!(Target::parse(url).is_err(), "{url} should be refused");
        }
    }

    #[test]
    fn headers_and_expect() {
        let (n, v) = parse_header("X-Vault-Token: t0k3n").unwrap();
        assert_eq!(n.as_str(), "x-vault-token");
        assert_eq!(v, "t0k3n");
        assert!(parse_header("no colon").is_err());

        let e = Expect::parse("2xx").unwrap();
        assert!(e.matches(200) && e.matches(204) && !e.matches(404) && !e.matches(500));
        let e = Expect::parse("204, 404").unwrap();
        assert!(e.matches(204) && e.matches(404) && !e.matches(200));
        assert_eq!(e.to_string(), "204,404");
        assert!(Expect::parse("6xx").is_err());
        assert!(Expect::parse("20").is_err());
        assert!(Expect::parse("abc").is_err());
    }
}
