//! Keep-alive across request bodies the platform rejects unread (issue 22), on a real server
//! (`testkit::TestServer`, port 0, through `http_kit::serve`) with a raw HTTP/1.1 client
//! (`testkit::RawConnection`) on one connection, as pooled clients such as go-tfe reuse it: a
//! rejected request with a 50 or 200 KiB body (a bad token, an upload to a wrong URL, a verb
//! TFE does not serve there) never costs the next request its connection; a 2 MiB one rejected
//! unread is answered with `Connection: close` and an orderly close, and the next connection
//! works. How the server decides is http-kit's (docs/compat.md, "Unread request bodies").
//!
//! Invariant: nothing here sleeps; the server stops when its `TestServer` drops.

mod support;

use support::TestPlatform;
use testkit::{RawConnection, RawResponse, TestServer};

/// `Authorization` with the test platform's root token (`support::ROOT`).
const BEARER_ROOT: &str = "Bearer test-root-token";
const KIB: usize = 1024;
const PAIRS: usize = 1_000;

/// A request the service answers with `status` without reading its body.
struct Rejected {
    method: &'static str,
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    status: u16,
}

const REJECTED: [Rejected; 3] = [
    Rejected {
        method: "POST",
        path: "/api/v2/organizations",
        headers: &[
            ("Authorization", "Bearer not-a-token"),
            ("Content-Type", "application/vnd.api+json"),
        ],
        status: 401,
    },
    Rejected {
        method: "PUT",
        path: "/api/v2/no/such/upload",
        headers: &[("Authorization", BEARER_ROOT)],
        status: 404,
    },
    Rejected {
        method: "PUT",
        path: "/api/v2/ping",
        headers: &[("Authorization", BEARER_ROOT)],
        status: 405,
    },
];

/// A JSON:API document of about `size` bytes.
fn body_of(size: usize) -> Vec<u8> {
    let blob = "x".repeat(size);
    format!(r#"{{"data":{{"type":"organizations","attributes":{{"name":"{blob}"}}}}}}"#)
        .into_bytes()
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

/// `GET /api/v2/ping`: 204 with no body.
async fn health(connection: &mut RawConnection) -> RawResponse {
    exchange(connection, "GET", "/api/v2/ping", &[], b"").await
}

#[tokio::test]
async fn rejected_bodies_up_to_200_kib_keep_the_connection_for_the_next_request() {
    let platform = TestPlatform::new().await;
    let server = TestServer::start(platform::router(platform.state.clone())).await;
    let mut connection = RawConnection::connect(server.addr()).await.unwrap();
    let bodies = [body_of(50 * KIB), body_of(200 * KIB)];
    for pair in 0..PAIRS {
        let rejected = &REJECTED[pair % REJECTED.len()];
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
            "pair {pair}: {}",
            answer.text()
        );
        assert!(!answer.closes(), "pair {pair}: {:?}", answer.headers);
        let next = health(&mut connection).await;
        assert_eq!(next.status, 204, "pair {pair}: {}", next.text());
        assert!(!next.closes(), "pair {pair}: {:?}", next.headers);
    }
}

#[tokio::test]
async fn a_2_mib_body_rejected_unread_is_answered_with_connection_close() {
    let platform = TestPlatform::new().await;
    let server = TestServer::start(platform::router(platform.state.clone())).await;
    for rejected in &REJECTED {
        let mut connection = RawConnection::connect(server.addr()).await.unwrap();
        let answer = exchange(
            &mut connection,
            rejected.method,
            rejected.path,
            rejected.headers,
            &body_of(2 * KIB * KIB),
        )
        .await;
        assert_eq!(answer.status, rejected.status, "{}", answer.text());
        assert!(answer.closes(), "{:?}", answer.headers);
        connection.expect_closed().await.unwrap();

        let mut next = RawConnection::connect(server.addr()).await.unwrap();
        assert_eq!(health(&mut next).await.status, 204);
    }
}
