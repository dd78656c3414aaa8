//! Keep-alive across request bodies the scheduler rejects unread (issue 22), on a real server
//! (`testkit::TestServer`, port 0, through `http_kit::serve`) with a raw HTTP/1.1 client
//! (`testkit::RawConnection`) on one connection, as pooled clients such as python-nomad reuse
//! it: a rejected request with a 50 or 200 KiB body (a bad token, an unknown path, a verb Nomad
//! does not serve there) never costs the next request its connection; a 2 MiB one rejected
//! unread is answered with `Connection: close` and an orderly close, and the next connection
//! works. How the server decides is http-kit's (docs/compat.md, "Unread request bodies").
//!
//! The scenario itself is `testkit::keep_alive`'s, shared by every service.
//!
//! Invariant: nothing here sleeps; the server stops when its `TestServer` drops.

#[allow(dead_code, reason = "this binary uses only `Scheduler::open`")]
mod support;

use scheduler::Config;
use support::Scheduler;
use testkit::TestServer;
use testkit::keep_alive::{self, Rejected, Scenario};

const ROOT: &str = "s.root-token-for-tests";
const PAIRS: usize = 1_000;

const REJECTED: [Rejected; 3] = [
    Rejected {
        method: "PUT",
        path: "/v1/jobs",
        headers: &[("X-Nomad-Token", "not-a-token")],
        status: 403,
        reads_body: false,
    },
    Rejected {
        method: "PUT",
        path: "/v1/no/such/endpoint",
        headers: &[("X-Nomad-Token", ROOT)],
        status: 404,
        reads_body: false,
    },
    Rejected {
        method: "PUT",
        path: "/v1/status/leader",
        headers: &[("X-Nomad-Token", ROOT)],
        status: 405,
        reads_body: false,
    },
];

/// A job registration of about `size` bytes, as python-nomad sends a large job.
fn body_of(size: usize) -> Vec<u8> {
    let meta = "x".repeat(size);
    format!(r#"{{"Job":{{"ID":"web","Meta":{{"blob":"{meta}"}}}}}}"#).into_bytes()
}

/// A scheduler with ACLs on and [`ROOT`] as its management token.
async fn with_acls() -> Scheduler {
    let config = Config {
        acl_enabled: true,
        dev_root_token: Some(ROOT.to_owned()),
        ..Config::default()
    };
    Scheduler::open(testkit::mem_storage(), config).await
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
    let scheduler = with_acls().await;
    let server = TestServer::start(scheduler.router.clone()).await;
    keep_alive::rejected_bodies_keep_the_connection(scenario(&server), PAIRS).await;
}

#[tokio::test]
async fn a_2_mib_body_rejected_unread_is_answered_with_connection_close() {
    let scheduler = with_acls().await;
    let server = TestServer::start(scheduler.router.clone()).await;
    keep_alive::a_large_rejected_body_closes_the_connection(scenario(&server)).await;
}
