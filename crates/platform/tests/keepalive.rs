//! Keep-alive across request bodies the platform rejects unread (issue 22), on a real server
//! (`testkit::TestServer`, port 0, through `http_kit::serve`) with a raw HTTP/1.1 client
//! (`testkit::RawConnection`) on one connection, as pooled clients such as go-tfe reuse it: a
//! rejected request with a 50 or 200 KiB body (a bad token, an upload to a wrong URL, a verb
//! TFE does not serve there) never costs the next request its connection; a 2 MiB one rejected
//! unread is answered with `Connection: close` and an orderly close, and the next connection
//! works. How the server decides is http-kit's (docs/compat.md, "Unread request bodies").
//!
//! The scenario itself is `testkit::keep_alive`'s, shared by every service.
//!
//! Invariant: nothing here sleeps; the server stops when its `TestServer` drops.

mod support;

use support::TestPlatform;
use testkit::TestServer;
use testkit::keep_alive::{self, Rejected, Scenario};

/// `Authorization` with the test platform's root token (`support::ROOT`).
const BEARER_ROOT: &str = "Bearer test-root-token";
const PAIRS: usize = 1_000;

const REJECTED: [Rejected; 3] = [
    Rejected {
        method: "POST",
        path: "/api/v2/organizations",
        headers: &[
            ("Authorization", "Bearer not-a-token"),
            ("Content-Type", "application/vnd.api+json"),
        ],
        status: 401,
        reads_body: false,
    },
    Rejected {
        method: "PUT",
        path: "/api/v2/no/such/upload",
        headers: &[("Authorization", BEARER_ROOT)],
        status: 404,
        reads_body: false,
    },
    Rejected {
        method: "PUT",
        path: "/api/v2/ping",
        headers: &[("Authorization", BEARER_ROOT)],
        status: 405,
        reads_body: false,
    },
];

/// A JSON:API document of about `size` bytes.
fn body_of(size: usize) -> Vec<u8> {
    let blob = "x".repeat(size);
    format!(r#"{{"data":{{"type":"organizations","attributes":{{"name":"{blob}"}}}}}}"#)
        .into_bytes()
}

/// `GET /api/v2/ping`: 204 with no body.
fn scenario(server: &TestServer) -> Scenario<'static> {
    Scenario {
        addr: server.addr(),
        rejected: &REJECTED,
        body_of,
        health: "/api/v2/ping",
    }
}

#[tokio::test]
async fn rejected_bodies_up_to_200_kib_keep_the_connection_for_the_next_request() {
    let platform = TestPlatform::new().await;
    let server = TestServer::start(platform::router(platform.state.clone())).await;
    keep_alive::rejected_bodies_keep_the_connection(scenario(&server), PAIRS).await;
}

#[tokio::test]
async fn a_2_mib_body_rejected_unread_is_answered_with_connection_close() {
    let platform = TestPlatform::new().await;
    let server = TestServer::start(platform::router(platform.state.clone())).await;
    keep_alive::a_large_rejected_body_closes_the_connection(scenario(&server)).await;
}
