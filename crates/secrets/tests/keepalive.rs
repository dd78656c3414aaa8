//! Keep-alive across request bodies the secrets service rejects unread (issue 22), on a real
//! server (`testkit::TestServer`, port 0, through `http_kit::serve`) with a raw HTTP/1.1 client
//! (`testkit::RawConnection`) on one connection, as pooled clients such as hvac reuse it: a
//! rejected request with a 50 or 200 KiB body (a bad token, an unknown path, a verb Vault does
//! not serve) never costs the next request its connection; a 2 MiB one rejected unread is
//! answered with `Connection: close` and an orderly close, and the next connection works. How the server
//! decides is http-kit's (docs/compat.md, "Unread request bodies").
//!
//! Invariant: nothing here sleeps; the server stops when its `TestServer` drops.

mod support;

use testkit::{RawConnection, RawResponse, TestServer};

const ROOT: &str = "root";
const KIB: usize = 1024;
const PAIRS: usize = 1_000;

/// A request the service answers with `status`; `reads_body` when it reads the body before it
/// decides (Vault parses a write's body before it checks the token or the path).
struct Rejected {
    method: &'static str,
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    status: u16,
    reads_body: bool,
}

const REJECTED: [Rejected; 3] = [
    Rejected {
        method: "PUT",
        path: "/v1/secret/data/app",
        headers: &[("X-Vault-Token", "not-a-token")],
        status: 403,
        reads_body: true,
    },
    Rejected {
        method: "PUT",
        path: "/v1/no-such-mount/app",
        headers: &[("X-Vault-Token", ROOT)],
        status: 404,
        reads_body: true,
    },
    Rejected {
        method: "COPY",
        path: "/v1/secret/data/app",
        headers: &[("X-Vault-Token", ROOT)],
        status: 405,
        reads_body: false,
    },
];

/// A JSON write of about `size` bytes, as hvac sends a large secret.
fn secret_of(size: usize) -> Vec<u8> {
    format!(r#"{{"data":{{"value":"{}"}}}}"#, "x".repeat(size)).into_bytes()
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

async fn health(connection: &mut RawConnection) -> RawResponse {
    exchange(connection, "GET", "/v1/sys/health", &[], b"").await
}

#[tokio::test]
async fn rejected_bodies_up_to_200_kib_keep_the_connection_for_the_next_request() {
    let server = TestServer::start(support::dev(ROOT).await).await;
    let mut connection = RawConnection::connect(server.addr()).await.unwrap();
    let bodies = [secret_of(50 * KIB), secret_of(200 * KIB)];
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
        assert_eq!(next.status, 200, "pair {pair}: {}", next.text());
        assert!(!next.closes(), "pair {pair}: {:?}", next.headers);
    }
}

#[tokio::test]
async fn a_2_mib_body_rejected_unread_is_answered_with_connection_close() {
    let server = TestServer::start(support::dev(ROOT).await).await;
    for rejected in &REJECTED {
        let mut connection = RawConnection::connect(server.addr()).await.unwrap();
        let answer = exchange(
            &mut connection,
            rejected.method,
            rejected.path,
            rejected.headers,
            &secret_of(2 * KIB * KIB),
        )
        .await;
        assert_eq!(answer.status, rejected.status, "{}", answer.text());
        if rejected.reads_body {
            // Read to decide, as Vault does: nothing is left, the connection stays.
            assert!(!answer.closes(), "{:?}", answer.headers);
            assert_eq!(health(&mut connection).await.status, 200);
            continue;
        }
        assert!(answer.closes(), "{:?}", answer.headers);
        connection.expect_closed().await.unwrap();

        let mut next = RawConnection::connect(server.addr()).await.unwrap();
        assert_eq!(health(&mut next).await.status, 200);
    }
}
