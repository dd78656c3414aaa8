//! Keep-alive across request bodies the registry rejects unread (issue 22), on a real server
//! (`testkit::TestServer`, port 0, through `http_kit::serve`) with a raw HTTP/1.1 client
//! (`testkit::RawConnection`) on one connection, as pooled clients such as py-consul reuse it:
//! a rejected request with a 50 or 200 KiB body (a bad token, an unknown path, a verb Consul
//! does not serve there) never costs the next request its connection; a 2 MiB one rejected
//! unread is answered with `Connection: close` and an orderly close, and the next connection
//! works. How the server decides is http-kit's (docs/compat.md, "Unread request bodies").
//!
//! The scenario itself is `testkit::keep_alive`'s, shared by every service.
//!
//! Invariant: nothing here sleeps; the server stops when its `TestServer` drops.

mod support;

use support::{ROOT, TestRegistry};
use testkit::TestServer;
use testkit::keep_alive::{self, Rejected, Scenario};

const PAIRS: usize = 1_000;

const REJECTED: [Rejected; 3] = [
    Rejected {
        method: "PUT",
        path: "/v1/kv/app/config",
        headers: &[("X-Consul-Token", "not-a-token")],
        status: 403,
        reads_body: false,
    },
    Rejected {
        method: "PUT",
        path: "/v1/no/such/endpoint",
        headers: &[("X-Consul-Token", ROOT)],
        status: 404,
        reads_body: false,
    },
    Rejected {
        method: "POST",
        path: "/v1/status/leader",
        headers: &[("X-Consul-Token", ROOT)],
        status: 405,
        reads_body: false,
    },
];

/// A value of `size` bytes, as py-consul puts a large KV value.
fn body_of(size: usize) -> Vec<u8> {
    vec![b'x'; size]
}

fn scenario(server: &TestServer) -> Scenario<'static> {
    Scenario {
        addr: server.addr(),
        rejected: &REJECTED,
        body_of,
        health: "/v1/status/leader",
    }
}

#[tokio::test]
async fn rejected_bodies_up_to_200_kib_keep_the_connection_for_the_next_request() {
    let registry = TestRegistry::with_acl().await;
    let server = TestServer::start(registry::router(registry.state.clone())).await;
    keep_alive::rejected_bodies_keep_the_connection(scenario(&server), PAIRS).await;
}

#[tokio::test]
async fn a_2_mib_body_rejected_unread_is_answered_with_connection_close() {
    let registry = TestRegistry::with_acl().await;
    let server = TestServer::start(registry::router(registry.state.clone())).await;
    keep_alive::a_large_rejected_body_closes_the_connection(scenario(&server)).await;
}
