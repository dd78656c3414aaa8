//! API tests of `GET /v1/agent/metrics` (Consul's agent metrics): the Prometheus text with
//! `format=prometheus`, go-metrics' JSON summary otherwise, this service's request figures
//! (recorded by `http_kit::layers`, as `cairn` wires it), the registry's gauges, and Consul's
//! `agent:read` rule when ACLs are on.
//!
//! Each test serves `registry::router` in-process behind `http_kit::layers` with a fresh
//! registry over fresh memory storage.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use http::StatusCode;
use http_kit::metrics::Metrics;
use serde_json::json;

const ROOT: &str = "root-secret-0000";

async fn serve(acl_enabled: bool) -> Router {
    let metrics = Metrics::new();
    let mut config = registry::Config::new(SocketAddr::from(([127, 0, 0, 1], 8500)));
    config.node_name = "node-1".to_owned();
    config.metrics = metrics.clone();
    if acl_enabled {
        config.acl = registry::AclConfig {
            enabled: true,
            initial_management_token: Some(ROOT.to_owned()),
            default_policy_allow: false,
        };
    }
    let state = registry::State::open(
        testkit::mem_storage(),
        config,
        Arc::new(registry::SystemClock),
    )
    .await
    .expect("open");
    let options = http_kit::HttpOptions {
        metrics: Some(metrics.requests("registry")),
        ..http_kit::HttpOptions::default()
    };
    http_kit::layers(registry::router(state), &options)
}

async fn get(router: &Router, path: &str, token: Option<&str>) -> testkit::Response {
    let mut request = testkit::request("GET", path);
    if let Some(token) = token {
        request = request.header("X-Consul-Token", token);
    }
    testkit::call(router, request.body(Body::empty()).unwrap()).await
}

#[tokio::test]
async fn prometheus_format_reports_requests_and_registry_gauges() {
    let router = serve(false).await;
    let register = json!({
        "Name": "web", "ID": "web-1", "Port": 80,
        "Check": {"CheckID": "web-ttl", "TTL": "30s", "Status": "passing"},
    });
    let registered = testkit::call(
        &router,
        testkit::json_request("PUT", "/v1/agent/service/register", &register),
    )
    .await;
    assert_eq!(registered.status, StatusCode::OK, "{}", registered.text());
    get(&router, "/v1/kv/some/key", None).await;

    let scraped = get(&router, "/v1/agent/metrics?format=prometheus", None).await;
    assert_eq!(scraped.status, StatusCode::OK, "{}", scraped.text());
    assert_eq!(
        scraped.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = scraped.text();
    for line in [
        r#"cairn_http_requests_total{service="registry",route="/v1/agent/service/register",method="PUT",status="200"} 1"#,
        r#"cairn_http_requests_total{service="registry",route="/v1/kv/{*key}",method="GET",status="404"} 1"#,
        "cairn_registry_nodes 1",
        // This server's own `consul` service, and web-1.
        "cairn_registry_services 2",
        // serfHealth and web-ttl.
        r#"cairn_registry_checks{status="passing"} 2"#,
        r#"cairn_registry_checks{status="critical"} 0"#,
        "cairn_registry_sessions 0",
    ] {
        assert!(
            text.lines().any(|got| got == line),
            "no {line:?} in:\n{text}"
        );
    }
    assert!(
        !text.contains("some/key"),
        "raw URIs are never labels:\n{text}"
    );
}

#[tokio::test]
async fn without_prometheus_format_the_answer_is_the_go_metrics_json_summary() {
    let router = serve(false).await;
    let scraped = get(&router, "/v1/agent/metrics", None).await;
    assert_eq!(scraped.status, StatusCode::OK);
    assert_eq!(scraped.headers["content-type"], "application/json");
    let summary = scraped.json();
    let gauges = summary["Gauges"].as_array().expect("Gauges");
    assert!(
        gauges
            .iter()
            .any(|gauge| gauge["Name"] == "cairn_registry_nodes" && gauge["Value"] == 1.0),
        "{summary}"
    );
    assert!(summary["Counters"].is_array() && summary["Samples"].is_array());
}

#[tokio::test]
async fn with_acls_on_metrics_need_agent_read() {
    let router = serve(true).await;
    let anonymous = get(&router, "/v1/agent/metrics?format=prometheus", None).await;
    assert_eq!(
        anonymous.status,
        StatusCode::FORBIDDEN,
        "{}",
        anonymous.text()
    );
    let managed = get(&router, "/v1/agent/metrics?format=prometheus", Some(ROOT)).await;
    assert_eq!(managed.status, StatusCode::OK, "{}", managed.text());
}
