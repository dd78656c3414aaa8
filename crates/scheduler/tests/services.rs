//! The scheduler's service registry and client runtime endpoints through the router: a node's
//! runtime report becomes the registrations `GET /v1/services` and `/v1/service/:name` show,
//! a newer report replaces it (deregistration), only the node itself may report, and the
//! allocation endpoints answer Nomad's 404 for unknown allocations and 400 for a bad pause state.

mod support;

use axum::body::Body;
use http::{Method, Request, StatusCode};
use scheduler::Config;
use serde_json::{Value, json};
use support::{Reply, Scheduler};

async fn send(
    scheduler: &Scheduler,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Reply {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(token) = token {
        request = request.header("X-Nomad-Token", token);
    }
    let body = body.map_or_else(Body::empty, |body| Body::from(body.to_string()));
    scheduler.handle(request.body(body).unwrap()).await
}

async fn scheduler_with_node() -> (Scheduler, String, String) {
    let scheduler = Scheduler::open(testkit::mem_storage(), Config::default()).await;
    let (id, secret) = (
        uuid::Uuid::new_v4().to_string(),
        uuid::Uuid::new_v4().to_string(),
    );
    let node = json!({"Node": {
        "ID": id, "SecretID": secret, "Datacenter": "dc1", "Name": "n1", "NodePool": "default",
        "Status": "ready", "Attributes": {"kernel.name": "linux"},
        "NodeResources": {"Cpu": {"CpuShares": 4000}, "Memory": {"MemoryMB": 4096}, "Disk": {"DiskMB": 10000}},
    }});
    send(
        &scheduler,
        Method::PUT,
        "/v1/internal/node/register",
        Some(&secret),
        Some(node),
    )
    .await
    .expect(StatusCode::OK);
    (scheduler, id, secret)
}

fn registration(id: &str, name: &str, port: i64) -> Value {
    json!({"ID": id, "ServiceName": name, "Namespace": "default", "Datacenter": "dc1",
           "JobID": "web", "AllocID": "a1", "Tags": ["v1"], "Address": "127.0.0.1", "Port": port})
}

#[tokio::test]
async fn a_reported_service_is_listed_and_a_new_report_deregisters_it() {
    let (scheduler, node, secret) = scheduler_with_node().await;
    let path = format!("/v1/internal/node/{node}/runtime");
    let report = json!({"Services": [registration("_nomad-task-a1-web-http", "web", 23456)]});
    send(&scheduler, Method::PUT, &path, Some(&secret), Some(report))
        .await
        .expect(StatusCode::OK);

    assert!(scheduler.state.table_indexes().nodes > 0);
    let reply = send(
        &scheduler,
        Method::GET,
        "/v1/service/web?index=1",
        None,
        None,
    )
    .await;
    assert!(reply.index() > 1, "a report moves the runtime index");
    let list = send(&scheduler, Method::GET, "/v1/services", None, None)
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(
        list,
        json!([{"Namespace": "default", "Services": [{"ServiceName": "web", "Tags": ["v1"]}]}])
    );
    let web = send(&scheduler, Method::GET, "/v1/service/web", None, None)
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(web[0]["Port"], 23456);
    assert_eq!(web[0]["NodeID"], node);
    assert!(web[0]["CreateIndex"].as_u64().unwrap() > 0);

    send(
        &scheduler,
        Method::PUT,
        &path,
        Some(&secret),
        Some(json!({})),
    )
    .await
    .expect(StatusCode::OK);
    let web = send(&scheduler, Method::GET, "/v1/service/web", None, None)
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(web, json!([]));
}

#[tokio::test]
async fn only_the_node_itself_may_report() {
    let (scheduler, node, _) = scheduler_with_node().await;
    let path = format!("/v1/internal/node/{node}/runtime");
    send(
        &scheduler,
        Method::PUT,
        &path,
        Some("wrong"),
        Some(json!({})),
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    send(
        &scheduler,
        Method::PUT,
        "/v1/internal/node/nope/runtime",
        Some("x"),
        Some(json!({})),
    )
    .await
    .expect(StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn unknown_allocations_are_404_and_bad_input_is_400() {
    let (scheduler, node, secret) = scheduler_with_node().await;
    let unknown = "7d3a5f55-8b4c-4b1e-9d57-0a3c2b6e1f00";
    for path in [
        format!("/v1/allocation/{unknown}/services"),
        format!("/v1/allocation/{unknown}/checks"),
        format!("/v1/client/allocation/{unknown}/pause?task=web"),
    ] {
        send(&scheduler, Method::GET, &path, None, None)
            .await
            .expect_error(StatusCode::NOT_FOUND, "allocation not found");
    }
    send(
        &scheduler,
        Method::POST,
        &format!("/v1/client/allocation/{unknown}/pause"),
        None,
        Some(json!({"Task": "web", "ScheduleState": "pause"})),
    )
    .await
    .expect(StatusCode::NOT_FOUND);
    let path = format!("/v1/internal/node/{node}/runtime");
    let reply = send(
        &scheduler,
        Method::PUT,
        &path,
        Some(&secret),
        Some(json!({"Services": 3})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let overrides = send(
        &scheduler,
        Method::GET,
        &format!("/v1/internal/node/{node}/overrides"),
        Some(&secret),
        None,
    )
    .await
    .expect(StatusCode::OK)
    .json();
    assert_eq!(overrides["Overrides"], json!([]));
}
