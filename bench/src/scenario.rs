//! Built-in multi-request scenarios for `loadgen --scenario NAME`: the registry operations of
//! issue 3 on cairn, and their etcd anchors through etcd's JSON gateway (grpc-gateway, etcd
//! 3.4 paths under `/v3/`).
//!
//! Where it sits: pure pieces (scenario names, request paths and bodies, response checks,
//! the per-connection random source) used by the `loadgen` binary, which owns the
//! connections, the clock and the counters. Kept here so the parsing is unit-tested.
//!
//! One *iteration* is one reported op and may take several requests:
//!
//! | scenario | setup per connection (untimed) | one op |
//! |---|---|---|
//! | `session-create-destroy` | – | `PUT /v1/session/create {}`, then `PUT /v1/session/destroy/<ID>` |
//! | `session-renew` | one session, `{"TTL":"30s"}` | `PUT /v1/session/renew/<ID>` |
//! | `kv-acquire-release` | one session | `PUT /v1/kv/bench/<conn>?acquire=<ID>` (256 B), then `?release=<ID>` |
//! | `kv-acquire-release-hot` | one session | the same on a random one of `--hot-keys` shared keys `bench/hot/NN`; a `false` acquire is a *contended* attempt (no op, retried at once on another key) |
//! | `etcd-lease-grant-revoke` | – | `POST /v3/lease/grant {"TTL":30}`, then `POST /v3/lease/revoke {"ID":…}` |
//! | `etcd-lease-keepalive` | one lease, TTL 30 | `POST /v3/lease/keepalive {"ID":…}` (one request message, one response line) |
//! | `etcd-put` | – | `POST /v3/kv/put`, 8-character random key, 256 B value |
//! | `etcd-lock-hot` | one lease, TTL 30 | `POST /v3/kv/txn` (create_revision == 0 → put with the lease, else range) on a random one of `--hot-keys` keys `lock/NN`; if it succeeded `POST /v3/kv/deleterange`, else a contended attempt |
//!
//! The etcd ops mirror the etcd gRPC anchor recorded in docs/performance.md (which drove
//! etcd's gRPC API with etcd-client), except that they go through the HTTP/JSON gateway.
//!
//! Invariants:
//! - A response counts as a success only if its status and body are what the step expects
//!   (e.g. cairn's literal `true`, etcd's `"succeeded":true`); anything else is an error with
//!   a message naming the step and quoting the start of the body.
//! - Nothing here does I/O.

use std::fmt;

use base64::prelude::{BASE64_STANDARD, Engine as _};
use serde_json::Value;

use crate::target::ParseError;

/// Size of the value written by the put and acquire scenarios, as in the etcd anchor.
pub const VALUE_LEN: usize = 256;

/// Which server a scenario talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// cairn's registry (Consul API).
    Cairn,
    /// etcd's JSON gateway on its client port.
    Etcd,
}

/// A built-in scenario; see the module doc for what each one does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    SessionCreateDestroy,
    SessionRenew,
    KvAcquireRelease,
    KvAcquireReleaseHot,
    EtcdLeaseGrantRevoke,
    EtcdLeaseKeepalive,
    EtcdPut,
    EtcdLockHot,
}

impl Scenario {
    /// Every scenario, in the order they are documented.
    pub const ALL: [Scenario; 8] = [
        Scenario::SessionCreateDestroy,
        Scenario::SessionRenew,
        Scenario::KvAcquireRelease,
        Scenario::KvAcquireReleaseHot,
        Scenario::EtcdLeaseGrantRevoke,
        Scenario::EtcdLeaseKeepalive,
        Scenario::EtcdPut,
        Scenario::EtcdLockHot,
    ];

    /// The name used on the command line and in RESULT lines.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::SessionCreateDestroy => "session-create-destroy",
            Scenario::SessionRenew => "session-renew",
            Scenario::KvAcquireRelease => "kv-acquire-release",
            Scenario::KvAcquireReleaseHot => "kv-acquire-release-hot",
            Scenario::EtcdLeaseGrantRevoke => "etcd-lease-grant-revoke",
            Scenario::EtcdLeaseKeepalive => "etcd-lease-keepalive",
            Scenario::EtcdPut => "etcd-put",
            Scenario::EtcdLockHot => "etcd-lock-hot",
        }
    }

    /// Parses a scenario name (exact, lowercase).
    pub fn parse(s: &str) -> Result<Scenario, ParseError> {
        Scenario::ALL
            .into_iter()
            .find(|sc| sc.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Scenario::ALL.iter().map(|sc| sc.name()).collect();
                ParseError(format!(
                    "unknown scenario {s:?}; known: {}",
                    names.join(", ")
                ))
            })
    }

    /// The server this scenario drives.
    pub fn system(self) -> System {
        match self {
            Scenario::SessionCreateDestroy
            | Scenario::SessionRenew
            | Scenario::KvAcquireRelease
            | Scenario::KvAcquireReleaseHot => System::Cairn,
            Scenario::EtcdLeaseGrantRevoke
            | Scenario::EtcdLeaseKeepalive
            | Scenario::EtcdPut
            | Scenario::EtcdLockHot => System::Etcd,
        }
    }

    /// Whether an attempt can lose to another connection (hot-key variants).
    pub fn contended(self) -> bool {
        matches!(self, Scenario::KvAcquireReleaseHot | Scenario::EtcdLockHot)
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// ------------------------------------------------------------------ cairn requests

/// `PUT /v1/session/create` bodies.
pub const SESSION_CREATE_BODY: &str = "{}";
/// The TTL session each `session-renew` connection creates during setup.
pub const SESSION_CREATE_TTL_BODY: &str = r#"{"TTL":"30s"}"#;

pub fn session_destroy_path(id: &str) -> String {
    format!("/v1/session/destroy/{id}")
}

pub fn session_renew_path(id: &str) -> String {
    format!("/v1/session/renew/{id}")
}

/// The per-connection key of `kv-acquire-release`.
pub fn kv_conn_key(conn: u32) -> String {
    format!("bench/{conn}")
}

/// Hot key `i` of `kv-acquire-release-hot`.
pub fn kv_hot_key(i: u32) -> String {
    format!("bench/hot/{i:02}")
}

pub fn kv_acquire_path(key: &str, session: &str) -> String {
    format!("/v1/kv/{key}?acquire={session}")
}

pub fn kv_release_path(key: &str, session: &str) -> String {
    format!("/v1/kv/{key}?release={session}")
}

// ------------------------------------------------------------------ etcd requests

pub const ETCD_LEASE_GRANT_PATH: &str = "/v3/lease/grant";
pub const ETCD_LEASE_REVOKE_PATH: &str = "/v3/lease/revoke";
pub const ETCD_LEASE_KEEPALIVE_PATH: &str = "/v3/lease/keepalive";
pub const ETCD_PUT_PATH: &str = "/v3/kv/put";
pub const ETCD_TXN_PATH: &str = "/v3/kv/txn";
pub const ETCD_DELETE_RANGE_PATH: &str = "/v3/kv/deleterange";
/// Lease grant body: TTL 30 s, as in the etcd anchor.
pub const ETCD_LEASE_GRANT_BODY: &str = r#"{"TTL":30}"#;

/// `{"ID":"<id>"}`, the body of lease revoke and keepalive (int64 as a JSON string, as the
/// gateway prints it).
pub fn etcd_lease_id_body(id: &str) -> String {
    format!(r#"{{"ID":"{id}"}}"#)
}

/// Hot key `i` of `etcd-lock-hot`, as in the etcd anchor.
pub fn etcd_hot_key(i: u32) -> String {
    format!("lock/{i:02}")
}

pub fn etcd_put_body(key: &[u8], value: &[u8]) -> String {
    format!(
        r#"{{"key":"{}","value":"{}"}}"#,
        BASE64_STANDARD.encode(key),
        BASE64_STANDARD.encode(value)
    )
}

/// The lock attempt: if `key` does not exist, put `value` on it with `lease`; else read it.
pub fn etcd_lock_txn_body(key: &[u8], value: &[u8], lease: &str) -> String {
    let k = BASE64_STANDARD.encode(key);
    let v = BASE64_STANDARD.encode(value);
    format!(
        r#"{{"compare":[{{"key":"{k}","target":"CREATE","create_revision":"0"}}],"success":[{{"request_put":{{"key":"{k}","value":"{v}","lease":"{lease}"}}}}],"failure":[{{"request_range":{{"key":"{k}"}}}}]}}"#
    )
}

pub fn etcd_delete_body(key: &[u8]) -> String {
    format!(r#"{{"key":"{}"}}"#, BASE64_STANDARD.encode(key))
}

// ------------------------------------------------------------------ response checks

/// Why a response did not satisfy its step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unexpected(pub String);

impl fmt::Display for Unexpected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unexpected {}

/// At most 120 characters of a body, for error messages.
pub fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut s: String = text.chars().take(120).collect();
    if text.chars().count() > 120 {
        s.push('…');
    }
    s
}

fn unexpected(step: &str, status: u16, body: &[u8]) -> Unexpected {
    Unexpected(format!("{step}: status {status}, body {:?}", snippet(body)))
}

/// Requires status 200.
pub fn expect_ok(step: &str, status: u16, body: &[u8]) -> Result<(), Unexpected> {
    if status == 200 {
        Ok(())
    } else {
        Err(unexpected(step, status, body))
    }
}

/// A cairn boolean answer (`true` / `false`, JSON) with status 200.
pub fn expect_bool(step: &str, status: u16, body: &[u8]) -> Result<bool, Unexpected> {
    expect_ok(step, status, body)?;
    match body.trim_ascii() {
        b"true" => Ok(true),
        b"false" => Ok(false),
        _ => Err(unexpected(step, status, body)),
    }
}

fn json(step: &str, status: u16, body: &[u8]) -> Result<Value, Unexpected> {
    expect_ok(step, status, body)?;
    serde_json::from_slice(body).map_err(|_| unexpected(step, status, body))
}

/// A JSON id field as a string: cairn's session `ID` is a string, etcd's lease `ID` an int64
/// that the gateway prints as a string (a bare number is accepted too). Empty and `"0"` are
/// refused.
fn id_of(v: &Value) -> Option<String> {
    let id = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    (!id.is_empty() && id != "0").then_some(id)
}

/// The `ID` of a session create (`{"ID":"<uuid>"}`) or an etcd lease grant.
pub fn expect_id(step: &str, status: u16, body: &[u8]) -> Result<String, Unexpected> {
    let v = json(step, status, body)?;
    v.get("ID")
        .and_then(id_of)
        .ok_or_else(|| unexpected(step, status, body))
}

/// A session renew answer: a one-element array holding the session `id`.
pub fn expect_renewed(step: &str, status: u16, body: &[u8], id: &str) -> Result<(), Unexpected> {
    let v = json(step, status, body)?;
    match v.as_array().map(Vec::as_slice) {
        Some([s]) if s.get("ID").and_then(Value::as_str) == Some(id) => Ok(()),
        _ => Err(unexpected(step, status, body)),
    }
}

/// An etcd keepalive answer: `{"result":{…,"ID":…,"TTL":"30"}}`. A lease that is gone
/// answers without `TTL` (0 is omitted), which is an error here.
pub fn expect_keepalive(step: &str, status: u16, body: &[u8]) -> Result<(), Unexpected> {
    let v = json(step, status, body)?;
    let result = v.get("result");
    let ttl = result.and_then(|r| r.get("TTL")).and_then(id_of);
    if result.and_then(|r| r.get("ID")).is_some() && ttl.is_some() {
        Ok(())
    } else {
        Err(unexpected(step, status, body))
    }
}

/// An etcd write answer (put, revoke, deleterange): 200 with a `header` and no `error`.
pub fn expect_etcd_ok(step: &str, status: u16, body: &[u8]) -> Result<(), Unexpected> {
    let v = json(step, status, body)?;
    if v.get("header").is_some() && v.get("error").is_none() {
        Ok(())
    } else {
        Err(unexpected(step, status, body))
    }
}

/// An etcd txn answer: whether it `succeeded` (the gateway omits `false`).
pub fn expect_txn(step: &str, status: u16, body: &[u8]) -> Result<bool, Unexpected> {
    let v = json(step, status, body)?;
    if v.get("header").is_none() || v.get("error").is_some() {
        return Err(unexpected(step, status, body));
    }
    match v.get("succeeded") {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(unexpected(step, status, body)),
    }
}

// ------------------------------------------------------------------ randomness

/// SplitMix64: a tiny, fast, seedable generator for key choice; not for anything secret.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant for n this small).
    pub fn below(&mut self, n: u32) -> u32 {
        (self.next_u64() % u64::from(n.max(1))) as u32
    }

    /// `len` random ASCII alphanumerics (the etcd anchor's 8-character put keys).
    pub fn alnum(&mut self, len: usize) -> Vec<u8> {
        const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        (0..len)
            .map(|_| CHARS[(self.next_u64() % CHARS.len() as u64) as usize])
            .collect()
    }
}

/// The fixed 256-byte value a connection writes (printable, different per connection).
pub fn value_for(conn: u32) -> Vec<u8> {
    let mut rng = Rng::new(0xC0FF_EE00 ^ u64::from(conn));
    rng.alnum(VALUE_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for sc in Scenario::ALL {
            assert_eq!(Scenario::parse(sc.name()).unwrap(), sc);
            assert_eq!(sc.to_string(), sc.name());
        }
        let e = Scenario::parse("session-create").unwrap_err();
        assert!(e.0.contains("session-create-destroy"), "{e}");
        assert!(Scenario::parse("").is_err());
        assert!(Scenario::parse("ETCD-PUT").is_err());
        assert_eq!(Scenario::EtcdPut.system(), System::Etcd);
        assert_eq!(Scenario::KvAcquireRelease.system(), System::Cairn);
        assert!(Scenario::EtcdLockHot.contended() && !Scenario::EtcdPut.contended());
    }

    #[test]
    fn request_shapes() {
        assert_eq!(kv_hot_key(3), "bench/hot/03");
        assert_eq!(
            kv_acquire_path(&kv_conn_key(7), "abc"),
            "/v1/kv/bench/7?acquire=abc"
        );
        assert_eq!(kv_release_path("k", "s"), "/v1/kv/k?release=s");
        assert_eq!(session_destroy_path("x"), "/v1/session/destroy/x");
        assert_eq!(session_renew_path("x"), "/v1/session/renew/x");
        assert_eq!(etcd_lease_id_body("42"), r#"{"ID":"42"}"#);
        assert_eq!(
            etcd_put_body(b"foo", b"bar"),
            r#"{"key":"Zm9v","value":"YmFy"}"#
        );
        assert_eq!(etcd_delete_body(b"lock/00"), r#"{"key":"bG9jay8wMA=="}"#);
        let txn: Value = serde_json::from_str(&etcd_lock_txn_body(b"hot", b"x", "7")).unwrap();
        assert_eq!(txn["compare"][0]["key"], "aG90");
        assert_eq!(txn["compare"][0]["target"], "CREATE");
        assert_eq!(txn["success"][0]["request_put"]["lease"], "7");
        assert_eq!(txn["success"][0]["request_put"]["value"], "eA==");
        assert_eq!(txn["failure"][0]["request_range"]["key"], "aG90");
        for body in [
            SESSION_CREATE_BODY,
            SESSION_CREATE_TTL_BODY,
            ETCD_LEASE_GRANT_BODY,
        ] {
            serde_json::from_str::<Value>(body).unwrap();
        }
    }

    #[test]
    fn cairn_answers() {
        assert_eq!(expect_bool("acquire", 200, b"true"), Ok(true));
        assert_eq!(expect_bool("acquire", 200, b"false\n"), Ok(false));
        assert!(expect_bool("acquire", 200, b"yes").is_err());
        let e = expect_bool("acquire", 403, b"Permission denied").unwrap_err();
        assert!(
            e.0.contains("acquire: status 403") && e.0.contains("Permission denied"),
            "{e}"
        );
        assert_eq!(
            expect_id(
                "create",
                200,
                br#"{"ID":"adf4238a-882b-9ddc-4a9d-5b6758e4159e"}"#
            )
            .unwrap(),
            "adf4238a-882b-9ddc-4a9d-5b6758e4159e"
        );
        assert!(expect_id("create", 200, br#"{"id":"x"}"#).is_err());
        assert!(expect_id("create", 200, br#"{"ID":""}"#).is_err());
        assert!(expect_id("create", 500, br#"{"ID":"x"}"#).is_err());
        assert!(expect_renewed("renew", 200, br#"[{"ID":"s1","TTL":"30s"}]"#, "s1").is_ok());
        assert!(expect_renewed("renew", 200, br#"[{"ID":"s2"}]"#, "s1").is_err());
        assert!(expect_renewed("renew", 200, b"[]", "s1").is_err());
        assert!(expect_renewed("renew", 404, b"Session id 's1' not found", "s1").is_err());
    }

    #[test]
    fn etcd_answers() {
        // Bodies as etcd 3.4.23's gateway printed them.
        let grant = br#"{"header":{"cluster_id":"1","member_id":"2","revision":"1","raft_term":"2"},"ID":"4111120159367317253","TTL":"30"}"#;
        assert_eq!(
            expect_id("grant", 200, grant).unwrap(),
            "4111120159367317253"
        );
        assert_eq!(expect_id("grant", 200, br#"{"ID":7}"#).unwrap(), "7");
        let alive =
            br#"{"result":{"header":{"revision":"1"},"ID":"4111120159367317255","TTL":"30"}}"#;
        assert!(expect_keepalive("keepalive", 200, alive).is_ok());
        let gone = br#"{"result":{"header":{"revision":"4"},"ID":"4111120159367317255"}}"#;
        assert!(expect_keepalive("keepalive", 200, gone).is_err());
        let revoked = br#"{"header":{"cluster_id":"1","revision":"1","raft_term":"2"}}"#;
        assert!(expect_etcd_ok("revoke", 200, revoked).is_ok());
        let not_found = br#"{"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5}"#;
        assert!(expect_etcd_ok("revoke", 404, not_found).is_err());
        assert!(expect_etcd_ok("revoke", 200, not_found).is_err());
        let won = br#"{"header":{"revision":"3"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"3"}}}]}"#;
        assert_eq!(expect_txn("txn", 200, won), Ok(true));
        let lost = br#"{"header":{"revision":"3"},"responses":[{"response_range":{"count":"1"}}]}"#;
        assert_eq!(expect_txn("txn", 200, lost), Ok(false));
        assert!(expect_txn("txn", 200, br#"{"header":{},"succeeded":"yes"}"#).is_err());
        assert!(expect_txn("txn", 200, b"{}").is_err());
    }

    #[test]
    fn rng_and_values() {
        let mut a = Rng::new(1);
        let mut b = Rng::new(1);
        assert_eq!(a.next_u64(), b.next_u64());
        let key = a.alnum(8);
        assert_eq!(key.len(), 8);
        assert!(key.iter().all(u8::is_ascii_alphanumeric));
        let mut seen = [false; 8];
        for _ in 0..1000 {
            seen[a.below(8) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(value_for(3).len(), VALUE_LEN);
        assert_eq!(value_for(3), value_for(3));
        assert_ne!(value_for(3), value_for(4));
        assert!(snippet(&[b'x'; 500]).ends_with('…'));
    }
}
