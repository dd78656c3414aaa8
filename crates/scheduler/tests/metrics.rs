//! API tests of `GET /v1/metrics` (Nomad's metrics endpoint): the Prometheus text with
//! `format=prometheus`, go-metrics' JSON summary otherwise, this service's request figures
//! (recorded by `http_kit::layers`, as `cairn` wires it) and the scheduler's own gauges.
//!
//! Each test serves `scheduler::router` in-process behind `http_kit::layers` with a fresh
//! registry, with the scheduler's loops running (registrations are applied for real).

use axum::Router;
use http::StatusCode;
use http_kit::metrics::Metrics;
use serde_json::{Value, json};

/// A scheduler behind the shared layers, recording into `metrics`; stops its loops on drop.
struct Served {
    router: Router,
    runner: cluster::Runner,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.runner.shutdown_token().cancel();
    }
}

async fn serve(acl_enabled: bool) -> Served {
    let metrics = Metrics::new();
    let config = scheduler::Config {
        acl_enabled,
        dev_root_token: Some("root".to_owned()),
        metrics: metrics.clone(),
        ..scheduler::Config::default()
    };
    let state = scheduler::State::open(testkit::mem_storage(), config)
        .await
        .expect("open");
    let runner = cluster::Runner::embedded(tokio_util::sync::CancellationToken::new());
    scheduler::start_tasks(&state, &runner);
    let options = http_kit::HttpOptions {
        metrics: Some(metrics.requests("scheduler")),
        ..http_kit::HttpOptions::default()
    };
    Served {
        router: http_kit::layers(scheduler::router(state), &options),
        runner,
    }
}

async fn get(served: &Served, path: &str) -> testkit::Response {
    let request = testkit::request("GET", path)
        .body(axum::body::Body::empty())
        .unwrap();
    testkit::call(&served.router, request).await
}

fn job(id: &str) -> Value {
    json!({"Job": {
        "ID": id, "Name": id, "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/true"},
            "Resources": {"CPU": 100, "MemoryMB": 64},
        }]}],
    }})
}

#[tokio::test]
async fn prometheus_format_reports_requests_and_scheduler_gauges() {
    let served = serve(false).await;
    let registered = testkit::call(
        &served.router,
        testkit::json_request("POST", "/v1/jobs", &job("web")),
    )
    .await;
    assert_eq!(registered.status, StatusCode::OK, "{}", registered.text());
    get(&served, "/v1/job/web").await;
    get(&served, "/v1/job/nope").await;

    let scraped = get(&served, "/v1/metrics?format=prometheus").await;
    assert_eq!(scraped.status, StatusCode::OK);
    assert_eq!(
        scraped.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = scraped.text();
    for line in [
        "# TYPE cairn_http_requests_total counter",
        r#"cairn_http_requests_total{service="scheduler",route="/v1/jobs",method="POST",status="200"} 1"#,
        r#"cairn_http_requests_total{service="scheduler",route="/v1/job/{job_id}",method="GET",status="200"} 1"#,
        r#"cairn_http_requests_total{service="scheduler",route="/v1/job/{job_id}",method="GET",status="404"} 1"#,
        "# TYPE cairn_http_request_duration_seconds histogram",
        r#"cairn_scheduler_jobs{status="pending"} 1"#,
        r#"cairn_scheduler_nodes{status="ready"} 0"#,
        r#"cairn_scheduler_allocations{client_status="running"} 0"#,
        "# TYPE cairn_scheduler_evaluations gauge",
    ] {
        assert!(
            text.lines().any(|got| got == line),
            "no {line:?} in:\n{text}"
        );
    }
    assert!(
        !text.contains("/v1/job/web"),
        "raw URIs are never labels:\n{text}"
    );
}

#[tokio::test]
async fn without_format_the_answer_is_the_go_metrics_json_summary() {
    let served = serve(false).await;
    for query in ["", "?format=json"] {
        let scraped = get(&served, &format!("/v1/metrics{query}")).await;
        assert_eq!(scraped.status, StatusCode::OK);
        assert_eq!(scraped.headers["content-type"], "application/json");
        let summary = scraped.json();
        for key in ["Timestamp", "Gauges", "Points", "Counters", "Samples"] {
            assert!(summary.get(key).is_some(), "no {key} in {summary}");
        }
        let gauges = summary["Gauges"].as_array().unwrap();
        assert!(
            gauges
                .iter()
                .any(|gauge| gauge["Name"] == "cairn_scheduler_jobs"
                    && gauge["Labels"] == json!({"status": "running"})
                    && gauge["Value"] == 0.0),
            "{summary}"
        );
    }
}

#[tokio::test]
async fn metrics_need_no_token_even_with_acls_on() {
    let served = serve(true).await;
    assert_eq!(get(&served, "/v1/jobs").await.status, StatusCode::FORBIDDEN);
    assert_eq!(get(&served, "/v1/metrics").await.status, StatusCode::OK);
}

#[tokio::test]
async fn consuls_agent_metrics_path_answers_the_same_figures() {
    let served = serve(false).await;
    let scraped = get(&served, "/v1/agent/metrics?format=prometheus").await;
    assert_eq!(scraped.status, StatusCode::OK);
    assert!(
        scraped
            .text()
            .lines()
            .any(|line| line == r#"cairn_scheduler_nodes{status="ready"} 0"#),
        "{}",
        scraped.text()
    );
}
