//! Keep-alive across request bodies the registry rejects unread (issue 22), on a real server
//! (`testkit::TestServer`, port 0, through `http_kit::serve`) with a raw HTTP/1.1 client
//! (`testkit::RawConnection`) on one connection, as pooled clients such as py-consul reuse it:
//! a rejected request with a 50 or 200 KiB body (a bad token, an unknown path, a verb Consul
//! does not serve there) never costs the next request its connection; a 2 MiB one rejected
//! unread is answered with `Connection: close` and an orderly close, and the next connection
//! works. How the server decides is http-kit's (docs/compat.md, "Unread request bodies").
//!
//! Invariant: nothing here sleeps; the server stops when its `TestServer` drops.

mod support;

use support::{ROOT, TestRegistry};
use testkit::{RawConnection, RawResponse, TestServer};

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
        method: "PUT",
        path: "/v1/kv/app/config",
        headers: &[("X-Consul-Token", "not-a-token")],
        status: 403,
    },
    Rejected {
        method: "PUT",
        path: "/v1/no/such/endpoint",
        headers: &[("X-Consul-Token", ROOT)],
        status: 404,
    },
    Rejected {
        method: "POST",
        path: "/v1/status/leader",
        headers: &[("X-Consul-Token", ROOT)],
        status: 405,
    },
];

/// A value of `size` bytes, as py-consul puts a large KV value.
fn body_of(size: usize) -> Vec<u8> {
    vec![b'x'; size]
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
    exchange(connection, "GET", "/v1/status/leader", &[], b"").await
}

#[tokio::test]
async fn rejected_bodies_up_to_200_kib_keep_the_connection_for_the_next_request() {
    let registry = TestRegistry::with_acl().await;
    let server = TestServer::start(registry::router(registry.state.clone())).await;
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
        assert_eq!(next.status, 200, "pair {pair}: {}", next.text());
        assert!(!next.closes(), "pair {pair}: {:?}", next.headers);
    }
}

#[tokio::test]
async fn a_2_mib_body_rejected_unread_is_answered_with_connection_close() {
    let registry = TestRegistry::with_acl().await;
    let server = TestServer::start(registry::router(registry.state.clone())).await;
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
        assert_eq!(health(&mut next).await.status, 200);
    }
}
