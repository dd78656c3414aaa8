//! Keep-alive across request bodies the secrets service rejects unread (issue 22), on a real
//! server (`testkit::TestServer`, port 0, through `http_kit::serve`) with a raw HTTP/1.1 client
//! (`testkit::RawConnection`) on one connection, as pooled clients such as hvac reuse it: a
//! rejected request with a 50 or 200 KiB body (a bad token, an unknown path, a verb Vault does
//! not serve) never costs the next request its connection; a 2 MiB one rejected unread is
//! answered with `Connection: close` and an orderly close, and the next connection works. How the server
//! decides is http-kit's (docs/compat.md, "Unread request bodies").
//!
//! The scenario itself is `testkit::keep_alive`'s, shared by every service.
//!
//! Invariant: nothing here sleeps; the server stops when its `TestServer` drops.

mod support;

use testkit::TestServer;
use testkit::keep_alive::{self, Rejected, Scenario};

const ROOT: &str = "root";
const PAIRS: usize = 1_000;

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

fn scenario(server: &TestServer) -> Scenario<'static> {
    Scenario {
        addr: server.addr(),
        rejected: &REJECTED,
        body_of: secret_of,
        health: "/v1/sys/health",
    }
}

#[tokio::test]
async fn rejected_bodies_up_to_200_kib_keep_the_connection_for_the_next_request() {
    let server = TestServer::start(support::dev(ROOT).await).await;
    keep_alive::rejected_bodies_keep_the_connection(scenario(&server), PAIRS).await;
}

#[tokio::test]
async fn a_2_mib_body_rejected_unread_is_answered_with_connection_close() {
    let server = TestServer::start(support::dev(ROOT).await).await;
    keep_alive::a_large_rejected_body_closes_the_connection(scenario(&server)).await;
}
