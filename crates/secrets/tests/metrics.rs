//! API tests of `sys/metrics` (Vault's telemetry endpoint): the Prometheus text with
//! `format=prometheus`, go-metrics' JSON summary without `format`, 400 for another format,
//! this service's request figures (recorded by `http_kit::layers`, as `cairn` wires it), the
//! store's gauges, and Vault's rule that only a token with `read` on `sys/metrics` may read it.
//!
//! Each test serves a dev-mode `secrets::router` in-process behind `http_kit::layers` with a
//! fresh registry over fresh memory storage.

mod support;

use axum::Router;
use http::StatusCode;
use http_kit::metrics::Metrics;
use secrets::{Config, State};
use serde_json::json;
use support::{call, create_token, put_policy, send};

const ROOT: &str = "metrics-root";

/// A dev-mode state and the shared layer's options, both recording into one fresh registry.
async fn state_and_options() -> (State, http_kit::HttpOptions) {
    let metrics = Metrics::new();
    let config = Config {
        metrics: metrics.clone(),
        ..support::dev_config(ROOT, None)
    };
    let state = State::open(testkit::mem_storage(), config).await.unwrap();
    let options = http_kit::HttpOptions {
        metrics: Some(metrics.requests("secrets")),
        ..http_kit::HttpOptions::default()
    };
    (state, options)
}

async fn serve() -> Router {
    let (state, options) = state_and_options().await;
    http_kit::layers(secrets::router(state), &options)
}

#[tokio::test]
async fn prometheus_format_reports_requests_and_store_gauges() {
    let app = serve().await;
    let (status, _) = call(&app, "GET", "/v1/sys/health", None, None).await;
    assert_eq!(status, StatusCode::OK);

    let scraped = send(
        &app,
        "GET",
        "/v1/sys/metrics?format=prometheus",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(scraped.status, StatusCode::OK, "{}", scraped.text());
    assert_eq!(
        scraped.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = scraped.text();
    for line in [
        r#"cairn_http_requests_total{service="secrets",route="/v1/sys/health",method="GET",status="200"} 1"#,
        "cairn_secrets_sealed 0",
        "cairn_secrets_leases 0",
        // The dev root token.
        "cairn_secrets_tokens 1",
    ] {
        assert!(
            text.lines().any(|got| got == line),
            "no {line:?} in:\n{text}"
        );
    }
}

/// What a server serves: the router with its hooks inside the shared layer.
async fn serve_with_hooks() -> Router {
    let (state, options) = state_and_options().await;
    secrets::router_with(state, &options)
}

#[tokio::test]
async fn engine_requests_are_labelled_with_the_dispatch_route_and_other_paths_unmatched() {
    let app = serve_with_hooks().await;
    let (status, _) = call(&app, "GET", "/v1/secret/data/missing", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&app, "GET", "/v1/auth/token/lookup-self", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(&app, "GET", "/elsewhere", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&app, "GET", "/v1/", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let text = send(
        &app,
        "GET",
        "/v1/sys/metrics?format=prometheus",
        Some(ROOT),
        None,
    )
    .await
    .text();
    for line in [
        r#"cairn_http_requests_total{service="secrets",route="/v1/{*path}",method="GET",status="404"} 1"#,
        r#"cairn_http_requests_total{service="secrets",route="/v1/{*path}",method="GET",status="200"} 1"#,
        r#"cairn_http_requests_total{service="secrets",route="unmatched",method="GET",status="404"} 2"#,
    ] {
        assert!(
            text.lines().any(|got| got == line),
            "no {line:?} in:\n{text}"
        );
    }
}

#[tokio::test]
async fn without_format_the_answer_is_the_go_metrics_json_summary_unwrapped() {
    let app = serve().await;
    let scraped = send(&app, "GET", "/v1/sys/metrics", Some(ROOT), None).await;
    assert_eq!(scraped.status, StatusCode::OK);
    assert_eq!(scraped.headers["content-type"], "application/json");
    let summary = scraped.json();
    assert!(
        summary.get("data").is_none(),
        "no Vault envelope: {summary}"
    );
    let gauges = summary["Gauges"].as_array().expect("Gauges");
    assert!(
        gauges
            .iter()
            .any(|gauge| gauge["Name"] == "cairn_secrets_sealed" && gauge["Value"] == 0.0),
        "{summary}"
    );
}

#[tokio::test]
async fn an_unknown_format_is_refused_in_plain_text() {
    let app = serve().await;
    let refused = send(&app, "GET", "/v1/sys/metrics?format=xml", Some(ROOT), None).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused.headers["content-type"], "text/plain");
    assert_eq!(refused.text(), r#"metric response format "xml" unknown"#);
}

#[tokio::test]
async fn metrics_need_a_token_with_read_on_sys_metrics() {
    let app = serve().await;
    let (status, _) = call(&app, "GET", "/v1/sys/metrics", None, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    put_policy(
        &app,
        ROOT,
        "other",
        r#"path "secret/*" { capabilities = ["read"] }"#,
    )
    .await;
    put_policy(
        &app,
        ROOT,
        "scraper",
        r#"path "sys/metrics" { capabilities = ["read"] }"#,
    )
    .await;
    let (other, _) = create_token(&app, ROOT, json!({"policies": ["other"]})).await;
    let (scraper, _) = create_token(&app, ROOT, json!({"policies": ["scraper"]})).await;
    let (status, _) = call(&app, "GET", "/v1/sys/metrics", Some(&other), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let allowed = send(
        &app,
        "GET",
        "/v1/sys/metrics?format=prometheus",
        Some(&scraper),
        None,
    )
    .await;
    assert_eq!(allowed.status, StatusCode::OK, "{}", allowed.text());
}
