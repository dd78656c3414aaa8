//! The keep-alive scenario every service proves for request bodies it rejects (issue 22), once:
//! each service's `tests/keepalive.rs` names its own rejected requests ([`Rejected`]), body
//! shape and health path, and calls the two checks here against its server on port 0.
//!
//! - [`rejected_bodies_keep_the_connection`]: on one connection, pairs of (a rejected request
//!   with a 50 or 200 KiB body, a health request): every answer has the expected status and
//!   none closes the connection, as pooled clients (hvac, py-consul, python-nomad, pytfe) need.
//! - [`a_large_rejected_body_closes_the_connection`]: a 2 MiB body rejected unread is answered
//!   with `Connection: close` and an orderly close, and a new connection works; a request the
//!   service reads before deciding ([`Rejected::reads_body`]) keeps its connection instead.
//!
//! Invariants: nothing here sleeps; every read has [`crate::READ_TIMEOUT`]; a failure names the
//! pair and the request.

use std::net::SocketAddr;

use crate::{RawConnection, RawResponse};

const KIB: usize = 1024;

/// A request the service answers with `status`.
#[derive(Debug, Clone, Copy)]
pub struct Rejected {
    pub method: &'static str,
    pub path: &'static str,
    pub headers: &'static [(&'static str, &'static str)],
    pub status: u16,
    /// Whether the service reads the whole body before it decides (Vault parses a write's body
    /// before it checks the token or the path), so that nothing is left to drain.
    pub reads_body: bool,
}

/// What a service's scenario is made of.
#[derive(Debug, Clone, Copy)]
pub struct Scenario<'a> {
    pub addr: SocketAddr,
    pub rejected: &'a [Rejected],
    /// A request body of about `size` bytes in the shape the service's clients send.
    pub body_of: fn(usize) -> Vec<u8>,
    /// A path answering `GET` with a 2xx without a token.
    pub health: &'a str,
}

async fn exchange(
    connection: &mut RawConnection,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> RawResponse {
    let response = connection.request(method, path, headers, body).await;
    response.unwrap_or_else(|err| panic!("{method} {path}: {err}"))
}

/// A health answer: any 2xx (TFE's ping is a 204).
fn ok(response: &RawResponse) -> bool {
    (200..300).contains(&response.status)
}

async fn connect(addr: SocketAddr) -> RawConnection {
    RawConnection::connect(addr)
        .await
        .unwrap_or_else(|err| panic!("connect to {addr}: {err}"))
}

/// `pairs` pairs of a rejected request (50 and 200 KiB bodies in turn) and a health request on
/// one connection: each answered as expected, none closing the connection.
pub async fn rejected_bodies_keep_the_connection(scenario: Scenario<'_>, pairs: usize) {
    let mut connection = connect(scenario.addr).await;
    let bodies = [(scenario.body_of)(50 * KIB), (scenario.body_of)(200 * KIB)];
    for pair in 0..pairs {
        let rejected = &scenario.rejected[pair % scenario.rejected.len()];
        let body = &bodies[pair % bodies.len()];
        let answer = exchange(
            &mut connection,
            rejected.method,
            rejected.path,
            rejected.headers,
            body,
        )
        .await;
        assert_eq!(
            answer.status,
            rejected.status,
            "pair {pair}, {} {}: {}",
            rejected.method,
            rejected.path,
            answer.text()
        );
        assert!(!answer.closes(), "pair {pair}: {:?}", answer.headers);
        let next = exchange(&mut connection, "GET", scenario.health, &[], b"").await;
        assert!(ok(&next), "pair {pair}: {} {}", next.status, next.text());
        assert!(!next.closes(), "pair {pair}: {:?}", next.headers);
    }
}

/// Each rejected request with a 2 MiB body on a fresh connection: answered as expected; when
/// the service rejected it unread, with `Connection: close` and an orderly close, after which a
/// new connection works; when it read the body, the same connection serves the next request.
pub async fn a_large_rejected_body_closes_the_connection(scenario: Scenario<'_>) {
    let body = (scenario.body_of)(2 * KIB * KIB);
    for rejected in scenario.rejected {
        let mut connection = connect(scenario.addr).await;
        let answer = exchange(
            &mut connection,
            rejected.method,
            rejected.path,
            rejected.headers,
            &body,
        )
        .await;
        let what = format!("{} {}", rejected.method, rejected.path);
        assert_eq!(answer.status, rejected.status, "{what}: {}", answer.text());
        if rejected.reads_body {
            assert!(!answer.closes(), "{what}: {:?}", answer.headers);
            let next = exchange(&mut connection, "GET", scenario.health, &[], b"").await;
            assert!(ok(&next), "{what}: {} {}", next.status, next.text());
            continue;
        }
        assert!(answer.closes(), "{what}: {:?}", answer.headers);
        connection
            .expect_closed()
            .await
            .unwrap_or_else(|err| panic!("{what}: the connection stays open: {err}"));
        let mut next = connect(scenario.addr).await;
        let health = exchange(&mut next, "GET", scenario.health, &[], b"").await;
        assert!(ok(&health), "{what}: {} {}", health.status, health.text());
    }
}
