//! The public registry proxy (`/api/registry/public/v1/modules/…`) against a stub registry on
//! 127.0.0.1 (a small axum server in the test that serves the public registry's module API
//! under `/v1/modules/` and counts its hits): list versions, a module at a version and at its
//! latest, and the latest per provider are the stub's documents; a second read within the
//! cache's lifetime does not reach the stub, one after it does; the stub's 404 is a 404; a
//! stub that is down, answers garbage, fails or is too slow gives a 502 in the JSON:API error
//! shape; a bearer token is required as everywhere else.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use http::Method;
use serde_json::{Value, json};
use support::{ROOT, TestPlatform};
use testkit::{ManualClock, TestServer};

/// What the stub serves and how often it was asked.
#[derive(Clone, Default)]
struct Stub {
    hits: Arc<AtomicUsize>,
}

fn versions_doc() -> Value {
    json!({"modules": [{
        "source": "hashicorp/consul/aws",
        "versions": [
            {"version": "0.1.0", "submodules": [], "root": {"dependencies": [], "providers": [{"name": "aws", "namespace": "", "source": "", "version": ""}]}},
            {"version": "0.2.0", "submodules": [], "root": {"dependencies": [], "providers": []}}
        ]
    }]})
}

fn module_doc(version: &str) -> Value {
    json!({
        "id": format!("hashicorp/consul/aws/{version}"),
        "namespace": "hashicorp", "name": "consul", "provider": "aws",
        "version": version, "verified": true,
        "versions": ["0.1.0", "0.2.0"],
        "root": {"path": "", "inputs": [], "outputs": []}
    })
}

async fn stub_versions(
    State(stub): State<Stub>,
    Path((ns, name, provider)): Path<(String, String, String)>,
) -> (StatusCode, String) {
    stub.hits.fetch_add(1, Ordering::SeqCst);
    match (ns.as_str(), name.as_str(), provider.as_str()) {
        ("hashicorp", "consul", "aws") => (StatusCode::OK, versions_doc().to_string()),
        ("garbage", _, _) => (StatusCode::OK, "<html>not json</html>".to_owned()),
        ("failing", _, _) => (StatusCode::INTERNAL_SERVER_ERROR, "{}".to_owned()),
        ("slow", _, _) => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            (StatusCode::OK, versions_doc().to_string())
        }
        _ => (
            StatusCode::NOT_FOUND,
            json!({"errors": ["Not Found"]}).to_string(),
        ),
    }
}

async fn stub_module(
    State(stub): State<Stub>,
    Path((_, _, _, version)): Path<(String, String, String, String)>,
) -> (StatusCode, String) {
    stub.hits.fetch_add(1, Ordering::SeqCst);
    (StatusCode::OK, module_doc(&version).to_string())
}

async fn stub_latest(State(stub): State<Stub>) -> (StatusCode, String) {
    stub.hits.fetch_add(1, Ordering::SeqCst);
    (StatusCode::OK, module_doc("0.2.0").to_string())
}

async fn stub_per_provider(
    State(stub): State<Stub>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> (StatusCode, String) {
    stub.hits.fetch_add(1, Ordering::SeqCst);
    let body = json!({
        "meta": {"limit": 15, "current_offset": 0, "query": query},
        "modules": [module_doc("0.2.0")]
    });
    (StatusCode::OK, body.to_string())
}

async fn start_stub() -> (TestServer, Stub) {
    let stub = Stub::default();
    let router = Router::new()
        .route("/v1/modules/{ns}/{name}", get(stub_per_provider))
        .route("/v1/modules/{ns}/{name}/{provider}", get(stub_latest))
        .route(
            "/v1/modules/{ns}/{name}/{provider}/versions",
            get(stub_versions),
        )
        .route(
            "/v1/modules/{ns}/{name}/{provider}/{version}",
            get(stub_module),
        )
        .with_state(stub.clone());
    (TestServer::start(router).await, stub)
}

/// A platform proxying `upstream` (a base URL) on a manual clock.
async fn platform_for(upstream: &str, clock: &ManualClock) -> TestPlatform {
    let config = platform::Config {
        public_registry_url: upstream.to_owned(),
        public_registry_timeout: Duration::from_secs(1),
        ..TestPlatform::test_config()
    };
    TestPlatform::with_config_and_clock(config, clock).await
}

const BASE: &str = "/api/registry/public/v1/modules";

#[tokio::test]
async fn the_upstream_documents_are_served_as_plain_json() {
    let (server, stub) = start_stub().await;
    let clock = ManualClock::new(1_700_000_000_000);
    let platform = platform_for(&server.url(""), &clock).await;

    let versions = platform
        .get(&format!("{BASE}/hashicorp/consul/aws/versions"), ROOT)
        .await
        .expect(200);
    assert_eq!(versions.headers["content-type"], "application/json");
    assert_eq!(versions.body, versions_doc());

    let at = platform
        .get(&format!("{BASE}/hashicorp/consul/aws/0.1.0"), ROOT)
        .await
        .expect(200);
    assert_eq!(at.body, module_doc("0.1.0"));

    let latest = platform
        .get(&format!("{BASE}/hashicorp/consul/aws"), ROOT)
        .await
        .expect(200);
    assert_eq!(latest.body["version"], "0.2.0");

    let per_provider = platform
        .get(
            &format!("{BASE}/hashicorp/consul?offset=0&limit=5&x=1"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(per_provider.body["modules"][0]["provider"], "aws");
    // Only the paging parameters are forwarded.
    assert_eq!(per_provider.body["meta"]["query"], "offset=0&limit=5");
    assert_eq!(stub.hits.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn answers_are_cached_for_their_lifetime_then_fetched_again() {
    let (server, stub) = start_stub().await;
    let clock = ManualClock::new(1_700_000_000_000);
    let platform = platform_for(&server.url(""), &clock).await;
    let path = format!("{BASE}/hashicorp/consul/aws/versions");

    platform.get(&path, ROOT).await.expect(200);
    platform.get(&path, ROOT).await.expect(200);
    clock.advance(Duration::from_secs(59));
    platform.get(&path, ROOT).await.expect(200);
    assert_eq!(stub.hits.load(Ordering::SeqCst), 1, "served from the cache");

    clock.advance(Duration::from_secs(2));
    let again = platform.get(&path, ROOT).await.expect(200);
    assert_eq!(again.body, versions_doc());
    assert_eq!(stub.hits.load(Ordering::SeqCst), 2, "fetched after expiry");

    // Another document is its own entry.
    platform
        .get(&format!("{BASE}/hashicorp/consul/aws/0.1.0"), ROOT)
        .await
        .expect(200);
    assert_eq!(stub.hits.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_module_the_upstream_lacks_is_404() {
    let (server, _stub) = start_stub().await;
    let clock = ManualClock::new(1_700_000_000_000);
    let platform = platform_for(&server.url(""), &clock).await;
    let missing = platform
        .get(&format!("{BASE}/nobody/nothing/aws/versions"), ROOT)
        .await
        .expect(404);
    assert_eq!(missing.error()["status"], "404");
    // Malformed segments never reach the upstream.
    platform
        .get(&format!("{BASE}/hashicorp/consul/aws/1.0.0%2F..%2Fx"), ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_in_the_jsonapi_shape() {
    let (server, _stub) = start_stub().await;
    let url = server.url("");
    server.stop().await;
    let clock = ManualClock::new(1_700_000_000_000);
    let platform = platform_for(&url, &clock).await;
    let answer = platform
        .get(&format!("{BASE}/hashicorp/consul/aws/versions"), ROOT)
        .await
        .expect(502);
    assert_eq!(answer.headers["content-type"], "application/vnd.api+json");
    let error = answer.error();
    assert_eq!(error["status"], "502");
    assert_eq!(error["title"], "bad gateway");
    let detail = error["detail"].as_str().unwrap();
    assert!(detail.contains("could not be reached"), "{detail}");
    assert!(detail.contains(url.trim_end_matches('/')), "{detail}");
}

#[tokio::test]
async fn garbage_a_failure_or_a_timeout_upstream_is_a_502_and_not_cached() {
    let (server, stub) = start_stub().await;
    let clock = ManualClock::new(1_700_000_000_000);
    let platform = platform_for(&server.url(""), &clock).await;
    for (namespace, expected) in [
        ("garbage", "not a registry document"),
        ("failing", "answered 500"),
        ("slow", "did not answer in time"),
    ] {
        let answer = platform
            .get(&format!("{BASE}/{namespace}/consul/aws/versions"), ROOT)
            .await
            .expect(502);
        let detail = answer.error()["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains(expected), "{namespace}: {detail}");
    }
    let before = stub.hits.load(Ordering::SeqCst);
    platform
        .get(&format!("{BASE}/garbage/consul/aws/versions"), ROOT)
        .await
        .expect(502);
    assert_eq!(
        stub.hits.load(Ordering::SeqCst),
        before + 1,
        "errors are not cached"
    );
}

#[tokio::test]
async fn the_proxy_needs_a_token() {
    let (server, stub) = start_stub().await;
    let clock = ManualClock::new(1_700_000_000_000);
    let platform = platform_for(&server.url(""), &clock).await;
    platform
        .call(
            Method::GET,
            &format!("{BASE}/hashicorp/consul/aws/versions"),
            None,
            None,
        )
        .await
        .expect(401);
    assert_eq!(stub.hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_default_upstream_is_the_public_terraform_registry() {
    assert_eq!(
        platform::Config::default().public_registry_url,
        "https://registry.terraform.io"
    );
}
