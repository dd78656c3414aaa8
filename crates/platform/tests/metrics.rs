//! API tests of `GET /api/v2/metrics` (cairn's own endpoint; TFE has none): the Prometheus
//! text for a site administrator, with this service's request figures (recorded by
//! `http_kit::layers`, as `cairn` wires it) and the platform's gauges; 401 without a token and
//! TFE's 404 for admin endpoints to any other token.

mod support;

use axum::body::Body;
use http::StatusCode;
use http_kit::metrics::Metrics;
use platform::Config;
use serde_json::json;
use support::{JSONAPI, ROOT, TestPlatform};

/// A test platform recording into a fresh registry, and its router behind `http_kit::layers`.
async fn serve() -> (TestPlatform, axum::Router) {
    let metrics = Metrics::new();
    let platform = TestPlatform::with_config(Config {
        dev_root_token: Some(ROOT.to_owned()),
        api_rate_limiting_enabled: false,
        metrics: metrics.clone(),
        ..Config::default()
    })
    .await;
    let options = http_kit::HttpOptions {
        metrics: Some(metrics.requests("platform")),
        ..http_kit::HttpOptions::default()
    };
    let router = platform::router_with(platform.state.clone(), &options);
    (platform, router)
}

async fn get(router: &axum::Router, path: &str, token: Option<&str>) -> testkit::Response {
    let mut request = testkit::request("GET", path).header("accept", JSONAPI);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    testkit::call(router, request.body(Body::empty()).unwrap()).await
}

#[tokio::test]
async fn site_admin_reads_prometheus_text_with_requests_and_platform_gauges() {
    let (platform, router) = serve().await;
    platform.create_org("acme").await;
    let workspace = json!({"data": {"type": "workspaces", "attributes": {"name": "web"}}});
    platform
        .post("/api/v2/organizations/acme/workspaces", ROOT, workspace)
        .await
        .expect(201);
    get(&router, "/api/v2/organizations/acme", Some(ROOT)).await;

    let scraped = get(&router, "/api/v2/metrics", Some(ROOT)).await;
    assert_eq!(scraped.status, StatusCode::OK, "{}", scraped.text());
    assert_eq!(
        scraped.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = scraped.text();
    for line in [
        r#"cairn_http_requests_total{service="platform",route="/api/v2/organizations/{name}",method="GET",status="200"} 1"#,
        "cairn_platform_organizations 1",
        "cairn_platform_workspaces 1",
        r#"cairn_platform_runs{status="pending"} 0"#,
        r#"cairn_platform_runs{status="applied"} 0"#,
    ] {
        assert!(
            text.lines().any(|got| got == line),
            "no {line:?} in:\n{text}"
        );
    }
    assert!(!text.contains("acme"), "raw URIs are never labels:\n{text}");
}

#[tokio::test]
async fn metrics_need_a_site_administrator() {
    let (platform, router) = serve().await;
    platform.create_org("acme").await;
    let minted = platform
        .post(
            "/api/v2/organizations/acme/authentication-token",
            ROOT,
            json!({}),
        )
        .await
        .expect(201);
    let organization_token = minted.body["data"]["attributes"]["token"]
        .as_str()
        .expect("token")
        .to_owned();

    let anonymous = get(&router, "/api/v2/metrics", None).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let other = get(&router, "/api/v2/metrics", Some(&organization_token)).await;
    assert_eq!(other.status, StatusCode::NOT_FOUND, "{}", other.text());
    assert_eq!(other.json()["errors"][0]["status"], "404");
}
