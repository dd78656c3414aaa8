//! API tests of per-caller rate limiting (`api-rate-limit`, `api-rate-limiting-enabled`):
//! token owners and anonymous client IPs have separate buckets with a burst of the per-second
//! limit; over it, 429 with `X-RateLimit-Limit`, `X-RateLimit-Reset` (seconds to wait) and
//! `Retry-After`; ping and the signed blob URLs are exempt.
//!
//! Setup runs with the limiter off and switches it on afterwards (the runtime setting), so
//! fixtures do not spend the buckets under test.

mod support;

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{Method, Request};
use platform::Config;
use support::{Answer, ROOT, TestPlatform};

/// More requests than any burst used here, so a loop that never sees 429 fails.
const TRIES: usize = 200;

/// A request from `peer`, with `token` as bearer when given.
fn request(method: Method, uri: &str, token: Option<&str>, peer: &str) -> Request<Body> {
    let mut builder = Request::builder()
        .method(method)
        .uri(uri)
        .header("accept", support::JSONAPI);
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    let mut request = builder.body(Body::empty()).expect("request");
    let peer: SocketAddr = peer.parse().expect("peer");
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

/// Sends GETs of `uri` until one is answered 429; returns how many were not, and the 429.
async fn exhaust(
    platform: &TestPlatform,
    uri: &str,
    token: Option<&str>,
    peer: &str,
) -> (usize, Answer) {
    for passed in 0..TRIES {
        let answer = platform.send(request(Method::GET, uri, token, peer)).await;
        if answer.status.as_u16() == 429 {
            return (passed, answer);
        }
    }
    panic!("no 429 after {TRIES} requests to {uri}");
}

/// A platform with two members (`alice`, `bob`) of organization `acme`, limiter switched on
/// at `limit`.
async fn platform_with_members(limit: u32) -> (TestPlatform, String, String) {
    let platform = TestPlatform::with_config(Config {
        dev_root_token: Some(ROOT.to_owned()),
        api_rate_limit: limit,
        api_rate_limiting_enabled: false,
        ..Config::default()
    })
    .await;
    platform.create_org("acme").await;
    let devs = platform
        .create_team("acme", "devs", serde_json::json!({}))
        .await;
    let alice = platform.member("acme", "alice", &[&devs]).await.token;
    let bob = platform.member("acme", "bob", &[&devs]).await.token;
    platform.state.set_api_rate_limiting_enabled(true);
    (platform, alice, bob)
}

#[tokio::test]
async fn user_token_gets_429_after_the_burst_with_headers_and_a_jsonapi_body() {
    let (platform, alice, _) = platform_with_members(30).await;
    let (passed, answer) = exhaust(
        &platform,
        "/api/v2/account/details",
        Some(&alice),
        "10.0.0.1:1000",
    )
    .await;
    assert!((30..TRIES).contains(&passed), "{passed} passed");
    assert_eq!(answer.headers["x-ratelimit-limit"], "30");
    assert_eq!(
        answer.headers["content-type"],
        support::JSONAPI,
        "{:?}",
        answer.headers
    );
    let retry_after: u64 = answer.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1, "{retry_after}");
    assert_eq!(
        answer.body,
        serde_json::json!({"errors": [{
            "status": "429",
            "title": "Too many requests",
            "detail": "You have exceeded the API's rate limit."
        }]})
    );
}

#[tokio::test]
async fn rate_limit_reset_is_seconds_to_wait_as_a_small_positive_float() {
    let (platform, alice, _) = platform_with_members(30).await;
    let (_, answer) = exhaust(
        &platform,
        "/api/v2/account/details",
        Some(&alice),
        "10.0.0.1:1000",
    )
    .await;
    let reset = answer.headers["x-ratelimit-reset"].to_str().unwrap();
    let reset: f64 = reset.parse().expect("a float");
    // One token comes back every 1/30 s: never a timestamp, never more than a second.
    assert!(reset > 0.0 && reset <= 1.0, "{reset}");
    tokio::time::sleep(std::time::Duration::from_secs_f64(reset + 0.01)).await;
    platform
        .send(request(
            Method::GET,
            "/api/v2/account/details",
            Some(&alice),
            "10.0.0.1:1000",
        ))
        .await
        .expect(200);
}

#[tokio::test]
async fn successful_responses_carry_the_configured_limit() {
    let (platform, alice, _) = platform_with_members(45).await;
    let answer = platform
        .send(request(
            Method::GET,
            "/api/v2/account/details",
            Some(&alice),
            "10.0.0.1:1000",
        ))
        .await
        .expect(200);
    assert_eq!(answer.headers["x-ratelimit-limit"], "45");
    let ping = platform
        .send(request(Method::GET, "/api/v2/ping", None, "10.0.0.1:1000"))
        .await
        .expect(204);
    assert_eq!(ping.headers["x-ratelimit-limit"], "45");
}

#[tokio::test]
async fn two_users_have_separate_buckets() {
    let (platform, alice, bob) = platform_with_members(30).await;
    // Same client IP: the token owner, not the address, is the key.
    exhaust(
        &platform,
        "/api/v2/account/details",
        Some(&alice),
        "10.0.0.1:1000",
    )
    .await;
    let answer = platform
        .send(request(
            Method::GET,
            "/api/v2/account/details",
            Some(&bob),
            "10.0.0.1:1000",
        ))
        .await
        .expect(200);
    assert_eq!(answer.body["data"]["attributes"]["username"], "bob");
    // Bob's bucket follows his token to another IP; the admin still has a full one.
    let (passed, _) = exhaust(
        &platform,
        "/api/v2/account/details",
        Some(&bob),
        "10.0.0.2:1000",
    )
    .await;
    assert!(passed >= 29, "{passed}");
    platform
        .send(request(
            Method::GET,
            "/api/v2/account/details",
            Some(ROOT),
            "10.0.0.2:1000",
        ))
        .await
        .expect(200);
}

#[tokio::test]
async fn anonymous_requests_are_limited_per_client_ip() {
    let (platform, alice, _) = platform_with_members(30).await;
    // No token: 401 until the IP's bucket is empty, then 429.
    let (passed, answer) =
        exhaust(&platform, "/api/v2/account/details", None, "10.0.0.7:1000").await;
    assert!(passed >= 30, "{passed}");
    assert!(answer.headers.contains_key("x-ratelimit-reset"));
    // An unknown token counts as anonymous too.
    platform
        .send(request(
            Method::GET,
            "/api/v2/account/details",
            Some("not-a-token"),
            "10.0.0.7:2000",
        ))
        .await
        .expect(429);
    // Another IP, and an authenticated user from the same IP, are unaffected.
    platform
        .send(request(
            Method::GET,
            "/api/v2/account/details",
            None,
            "10.0.0.8:1000",
        ))
        .await
        .expect(401);
    platform
        .send(request(
            Method::GET,
            "/api/v2/account/details",
            Some(&alice),
            "10.0.0.7:1000",
        ))
        .await
        .expect(200);
}

#[tokio::test]
async fn disabled_rate_limiting_never_answers_429() {
    let platform = TestPlatform::with_config(Config {
        dev_root_token: Some(ROOT.to_owned()),
        api_rate_limiting_enabled: false,
        ..Config::default()
    })
    .await;
    for _ in 0..TRIES {
        platform
            .send(request(
                Method::GET,
                "/api/v2/account/details",
                Some(ROOT),
                "10.0.0.1:1000",
            ))
            .await
            .expect(200);
    }
    // Switched off at runtime after being on.
    platform.state.set_api_rate_limiting_enabled(true);
    exhaust(
        &platform,
        "/api/v2/account/details",
        Some(ROOT),
        "10.0.0.1:1000",
    )
    .await;
    platform.state.set_api_rate_limiting_enabled(false);
    platform
        .send(request(
            Method::GET,
            "/api/v2/account/details",
            Some(ROOT),
            "10.0.0.1:1000",
        ))
        .await
        .expect(200);
}

#[tokio::test]
async fn a_limit_under_30_is_raised_to_30() {
    let (platform, alice, _) = platform_with_members(5).await;
    assert_eq!(platform.state.api_rate_limit(), 30);
    let (passed, answer) = exhaust(
        &platform,
        "/api/v2/account/details",
        Some(&alice),
        "10.0.0.1:1000",
    )
    .await;
    assert!(passed >= 30, "{passed}");
    assert_eq!(answer.headers["x-ratelimit-limit"], "30");
    platform.state.set_api_rate_limit(1);
    assert_eq!(platform.state.api_rate_limit(), 30);
}

#[tokio::test]
async fn ping_is_exempt() {
    let platform = TestPlatform::with_config(Config {
        dev_root_token: Some(ROOT.to_owned()),
        ..Config::default()
    })
    .await;
    for _ in 0..TRIES {
        // Not even a bad bearer makes ping 401 or 429.
        platform
            .send(request(
                Method::GET,
                "/api/v2/ping",
                Some("not-a-token"),
                "10.0.0.1:1000",
            ))
            .await
            .expect(204);
    }
}

#[tokio::test]
async fn signed_blob_urls_are_exempt() {
    let platform = TestPlatform::with_config(Config {
        dev_root_token: Some(ROOT.to_owned()),
        ..Config::default()
    })
    .await;
    exhaust(&platform, "/api/v2/account/details", None, "10.0.0.1:1000").await;
    // The same exhausted IP, with a bad bearer: the signature decides (404 here), never 429.
    let answer = platform
        .send(request(
            Method::GET,
            "/_archivist/v1/object/bogus/configuration-versions/cv-x",
            Some("not-a-token"),
            "10.0.0.1:1000",
        ))
        .await;
    assert_ne!(answer.status.as_u16(), 429);
    assert_ne!(answer.status.as_u16(), 401);
}
