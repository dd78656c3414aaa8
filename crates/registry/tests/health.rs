//! API tests for `/v1/health/*`: checks by node, by service and by state, service entries with
//! their node and checks (`passing`, `tag`, `node-meta`, `peer` filters), blocking reads woken
//! by status changes, and indexes that stay still when nothing they read changes.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{NODE, ROOT, TestRegistry};

async fn register(registry: &TestRegistry, body: Value) {
    registry
        .put("/v1/catalog/register", body.to_string())
        .await
        .assert_status(200);
}

async fn agent_service(registry: &TestRegistry, body: Value) {
    registry
        .put("/v1/agent/service/register", body.to_string())
        .await
        .assert_status(200);
}

fn service_ids(entries: &Value) -> Vec<String> {
    entries
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["Service"]["ID"].as_str().unwrap().to_owned())
        .collect()
}

fn field(list: &Value, name: &str) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|item| item[name].as_str().unwrap().to_owned())
        .collect()
}

/// Two instances of `web` on two nodes, one passing, one critical, plus a node check on n2.
async fn two_instances(registry: &TestRegistry) {
    register(
        registry,
        json!({"Node": "n1", "Address": "10.0.0.1", "NodeMeta": {"zone": "a"},
               "Service": {"ID": "web-1", "Service": "web", "Tags": ["primary"], "Port": 80},
               "Check": {"CheckID": "web-1-alive", "Name": "alive", "Status": "passing", "ServiceID": "web-1"}}),
    )
    .await;
    register(
        registry,
        json!({"Node": "n2", "Address": "10.0.0.2", "NodeMeta": {"zone": "b"},
        "Service": {"ID": "web-2", "Service": "web", "Port": 80},
        "Checks": [
            {"CheckID": "web-2-alive", "Name": "alive", "Status": "passing", "ServiceID": "web-2"},
            {"CheckID": "disk", "Name": "disk", "Status": "critical", "Output": "full"}
        ]}),
    )
    .await;
}

#[tokio::test]
async fn health_node_lists_the_nodes_checks_and_nothing_for_an_unknown_node() {
    let registry = TestRegistry::new().await;
    two_instances(&registry).await;
    let response = registry.get("/v1/health/node/n2").await;
    response.assert_status(200);
    let checks = response.json();
    assert_eq!(field(&checks, "CheckID"), vec!["disk", "web-2-alive"]);
    let disk = &checks[0];
    for (name, expected) in [
        ("Node", json!("n2")),
        ("Name", json!("disk")),
        ("Status", json!("critical")),
        ("Output", json!("full")),
        ("Notes", json!("")),
        ("ServiceID", json!("")),
        ("ServiceName", json!("")),
        ("ServiceTags", json!([])),
        ("Type", json!("")),
        ("Definition", json!({})),
    ] {
        assert_eq!(disk[name], expected, "{name}");
    }
    assert!(disk["CreateIndex"].as_u64().unwrap() >= 1);
    let unknown = registry.get("/v1/health/node/nobody").await;
    unknown.assert_status(200);
    assert_eq!(unknown.json(), json!([]));
    assert!(unknown.index() >= 1);
}

#[tokio::test]
async fn health_checks_lists_the_checks_of_a_services_instances() {
    let registry = TestRegistry::new().await;
    two_instances(&registry).await;
    let checks = registry.get("/v1/health/checks/web").await.json();
    assert_eq!(
        field(&checks, "CheckID"),
        vec!["web-1-alive", "web-2-alive"]
    );
    assert_eq!(checks[0]["ServiceName"], "web");
    assert_eq!(checks[0]["ServiceTags"], json!(["primary"]));
    assert_eq!(
        registry.get("/v1/health/checks/none").await.json(),
        json!([])
    );
}

#[tokio::test]
async fn health_service_returns_entries_with_node_service_and_checks() {
    let registry = TestRegistry::new().await;
    two_instances(&registry).await;
    let entries = registry.get("/v1/health/service/web").await.json();
    assert_eq!(service_ids(&entries), vec!["web-1", "web-2"]);
    let second = &entries[1];
    assert_eq!(second["Node"]["Node"], "n2");
    assert_eq!(second["Node"]["Address"], "10.0.0.2");
    assert_eq!(second["Service"]["Service"], "web");
    assert_eq!(second["Service"]["Port"], 80);
    assert_eq!(
        field(&second["Checks"], "CheckID"),
        vec!["disk", "web-2-alive"],
        "the node's checks and the instance's, not other instances'"
    );

    // `passing`: only instances whose every check passes.
    let passing = registry
        .get("/v1/health/service/web?passing=1")
        .await
        .json();
    assert_eq!(service_ids(&passing), vec!["web-1"]);
    let passing = registry.get("/v1/health/service/web?passing").await.json();
    assert_eq!(service_ids(&passing), vec!["web-1"]);
    let all = registry
        .get("/v1/health/service/web?passing=false")
        .await
        .json();
    assert_eq!(service_ids(&all), vec!["web-1", "web-2"]);
    registry
        .get("/v1/health/service/web?passing=maybe")
        .await
        .assert_status(400);

    let tagged = registry
        .get("/v1/health/service/web?tag=primary")
        .await
        .json();
    assert_eq!(service_ids(&tagged), vec!["web-1"]);
    let zone = registry
        .get("/v1/health/service/web?node-meta=zone:b")
        .await
        .json();
    assert_eq!(service_ids(&zone), vec!["web-2"]);
    let peer = registry
        .get("/v1/health/service/web?peer=elsewhere")
        .await
        .json();
    assert_eq!(peer, json!([]));
    assert_eq!(
        registry.get("/v1/health/service/none").await.json(),
        json!([])
    );
    assert_eq!(
        registry.get("/v1/health/connect/web").await.json(),
        json!([])
    );
    assert_eq!(
        registry.get("/v1/health/ingress/web").await.json(),
        json!([])
    );
}

#[tokio::test]
async fn health_service_passing_follows_agent_ttl_checks() {
    let registry = TestRegistry::new().await;
    agent_service(
        &registry,
        json!({"name": "foo", "id": "foo:1", "check": {"ttl": "10s"}, "tags": ["tag:foo:1"]}),
    )
    .await;
    agent_service(
        &registry,
        json!({"name": "foo", "id": "foo:2", "check": {"ttl": "10s"}}),
    )
    .await;
    let entries = registry.get("/v1/health/service/foo").await.json();
    assert_eq!(service_ids(&entries), vec!["foo:1", "foo:2"]);
    let checks: Vec<String> = entries[0]["Checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["CheckID"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(checks, vec!["serfHealth", "service:foo:1"]);
    assert_eq!(
        registry
            .get("/v1/health/service/foo?passing=1")
            .await
            .json(),
        json!([])
    );
    registry
        .put("/v1/agent/check/pass/service:foo:1", "")
        .await
        .assert_status(200);
    registry
        .put("/v1/agent/check/pass/service:foo:2", "")
        .await
        .assert_status(200);
    let passing = registry
        .get("/v1/health/service/foo?passing=1")
        .await
        .json();
    assert_eq!(service_ids(&passing), vec!["foo:1", "foo:2"]);
    registry
        .put("/v1/agent/service/deregister/foo:1", "")
        .await
        .assert_status(200);
    registry
        .put("/v1/agent/service/deregister/foo:2", "")
        .await
        .assert_status(200);
    assert_eq!(
        registry.get("/v1/health/service/foo").await.json(),
        json!([])
    );
}

#[tokio::test]
async fn health_state_filters_checks_by_status() {
    let registry = TestRegistry::new().await;
    two_instances(&registry).await;
    let any = registry.get("/v1/health/state/any").await.json();
    assert_eq!(
        field(&any, "CheckID"),
        vec!["web-1-alive", "disk", "web-2-alive", "serfHealth"]
    );
    let critical = registry.get("/v1/health/state/critical").await.json();
    assert_eq!(field(&critical, "CheckID"), vec!["disk"]);
    let passing = registry.get("/v1/health/state/passing").await.json();
    assert_eq!(field(&passing, "ServiceID"), vec!["web-1", "web-2", ""]);
    assert_eq!(
        registry.get("/v1/health/state/warning").await.json(),
        json!([])
    );
    let bad = registry.get("/v1/health/state/sideways").await;
    bad.assert_status(400);
    assert!(bad.text().contains("Invalid check state"), "{}", bad.text());
    registry
        .get("/v1/health/state/Passing")
        .await
        .assert_status(400);
}

#[tokio::test]
async fn health_service_blocking_read_wakes_on_a_status_change() {
    let registry = Arc::new(TestRegistry::new().await);
    agent_service(&registry, json!({"Name": "api", "Check": {"TTL": "1m"}})).await;
    let index = registry
        .get("/v1/health/service/api?passing=1")
        .await
        .index();
    let reader = {
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            let started = Instant::now();
            let response = registry
                .get(&format!(
                    "/v1/health/service/api?passing=1&index={index}&wait=5s"
                ))
                .await;
            (response, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    registry
        .put("/v1/agent/check/pass/service:api", "")
        .await
        .assert_status(200);
    let (response, elapsed) = reader.await.unwrap();
    assert!(response.index() > index);
    assert_eq!(service_ids(&response.json()), vec!["api"]);
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn health_indexes_do_not_move_on_a_ttl_heartbeat_that_changes_nothing() {
    let registry = TestRegistry::new().await;
    agent_service(&registry, json!({"Name": "api", "Check": {"TTL": "1m"}})).await;
    registry
        .put("/v1/agent/check/pass/service:api", "")
        .await
        .assert_status(200);
    let checks = registry.get("/v1/health/checks/api").await.index();
    let node = registry
        .get(&format!("/v1/health/node/{NODE}"))
        .await
        .index();
    let service = registry.get("/v1/health/service/api").await.index();
    registry
        .put("/v1/agent/check/pass/service:api", "")
        .await
        .assert_status(200);
    assert_eq!(registry.get("/v1/health/checks/api").await.index(), checks);
    assert_eq!(
        registry
            .get(&format!("/v1/health/node/{NODE}"))
            .await
            .index(),
        node
    );
    assert_eq!(
        registry.get("/v1/health/service/api").await.index(),
        service
    );
    // A change of output does move them.
    registry
        .put("/v1/agent/check/pass/service:api?note=ok", "")
        .await
        .assert_status(200);
    assert!(registry.get("/v1/health/checks/api").await.index() > checks);

    // A blocking read on an unchanged index waits out its wait.
    let started = Instant::now();
    let again = registry
        .get(&format!(
            "/v1/health/node/n-unknown?index={node}&wait=150ms"
        ))
        .await;
    again.assert_status(200);
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn health_endpoints_reject_another_datacenter_and_missing_names() {
    let registry = TestRegistry::new().await;
    for uri in [
        "/v1/health/node/x?dc=dc2",
        "/v1/health/checks/x?dc=dc2",
        "/v1/health/service/x?dc=dc2",
        "/v1/health/state/any?dc=dc2",
        "/v1/health/service/",
        "/v1/health/node/",
        "/v1/health/service/x?node-meta=novalue",
        "/v1/health/service/x?index=x",
    ] {
        let response = registry.get(uri).await;
        assert_eq!(response.status, 400, "{uri}: {}", response.text());
        response.index();
    }
}

// ---------------------------------------------------------------------------------------------
// ACL

#[tokio::test]
async fn health_lists_drop_what_the_token_may_not_read() {
    let registry = TestRegistry::with_acl().await;
    for (node, service) in [("n1", "web"), ("n2", "db")] {
        registry
            .as_token(
                http::Method::PUT,
                "/v1/catalog/register",
                ROOT,
                json!({"Node": node, "Address": "10.0.0.1", "Service": {"Service": service},
                   "Check": {"CheckID": format!("{service}-alive"), "Name": "alive",
                             "Status": "passing", "ServiceID": service}})
                .to_string(),
            )
            .await
            .assert_status(200);
    }
    let token = registry
        .token_with_rules(
            r#"
node_prefix "" { policy = "read" }
service "web" { policy = "read" }
"#,
        )
        .await;
    let get = |uri: &'static str| registry.as_token(http::Method::GET, uri, &token, String::new());

    let any = get("/v1/health/state/any").await;
    any.assert_status(200);
    assert_eq!(
        field(&any.json(), "CheckID"),
        vec!["web-alive", "serfHealth"]
    );
    assert_eq!(
        any.header("x-registry-results-filtered-by-acls"),
        Some("true")
    );
    assert_eq!(
        any.header("x-consul-results-filtered-by-acls"),
        Some("true")
    );

    let web = get("/v1/health/service/web").await;
    assert_eq!(service_ids(&web.json()), vec!["web"]);
    assert_eq!(web.header("x-registry-results-filtered-by-acls"), None);
    let db = get("/v1/health/service/db").await;
    db.assert_status(200);
    assert_eq!(db.json(), json!([]));
    assert_eq!(
        db.header("x-registry-results-filtered-by-acls"),
        Some("true")
    );
    assert_eq!(get("/v1/health/checks/db").await.json(), json!([]));
    let n2 = get("/v1/health/node/n2").await;
    assert_eq!(n2.json(), json!([]), "db's check needs service:read on db");
    assert_eq!(
        n2.header("x-registry-results-filtered-by-acls"),
        Some("true")
    );

    let services = get("/v1/catalog/services").await;
    assert_eq!(services.json(), json!({"web": []}));
    assert_eq!(
        services.header("x-registry-results-filtered-by-acls"),
        Some("true")
    );
    let node = get("/v1/catalog/node/n2").await.json();
    assert_eq!(node["Services"], json!({}));

    // Anonymous requests see nothing under a deny-by-default policy.
    let anonymous = registry.get("/v1/health/state/any").await;
    anonymous.assert_status(200);
    assert_eq!(anonymous.json(), json!([]));
}

#[tokio::test]
async fn health_and_catalog_reads_accept_bexpr_filters() {
    let registry = TestRegistry::new().await;
    agent_service(
        &registry,
        json!({"name": "foo", "id": "foo:1", "check": {"ttl": "10s"}, "tags": ["tag:foo:1"]}),
    )
    .await;
    agent_service(
        &registry,
        json!({"name": "foo", "id": "foo:2", "check": {"ttl": "10s"}, "tags": ["tag:foo:2"]}),
    )
    .await;
    let get = |uri: String| {
        let registry = &registry;
        async move {
            let response = registry.get(&uri).await;
            response.assert_status(200);
            response.json()
        }
    };
    let q = |expression: &str| serde_urlencoded::to_string([("filter", expression)]).unwrap();
    let tagged = get(format!(
        "/v1/health/service/foo?{}",
        q(r#""tag:foo:1" in Service.Tags"#)
    ))
    .await;
    assert_eq!(service_ids(&tagged), vec!["foo:1"]);
    let none = get(format!(
        "/v1/health/service/foo?{}",
        q(r#""tag:does:not:exist" in Service.Tags"#)
    ))
    .await;
    assert_eq!(none, json!([]));
    registry
        .put("/v1/agent/check/pass/service:foo:1", "")
        .await
        .assert_status(200);
    let passing = get(format!(
        "/v1/health/state/passing?{}",
        q(r#"ServiceID == "foo:1""#)
    ))
    .await;
    assert_eq!(field(&passing, "ServiceID"), vec!["foo:1"]);
    let checks = get(format!(
        "/v1/health/checks/foo?{}",
        q(r#"CheckID == "service:foo:2""#)
    ))
    .await;
    assert_eq!(field(&checks, "CheckID"), vec!["service:foo:2"]);
    let node = get(format!(
        "/v1/health/node/{NODE}?{}",
        q(r#"Node == "does-not-exist""#)
    ))
    .await;
    assert_eq!(node, json!([]));
    let nodes = get(format!(
        "/v1/catalog/nodes?{}",
        q(&format!("Node == `{NODE}`"))
    ))
    .await;
    assert_eq!(field(&nodes, "Node"), vec![NODE]);
    let instances = get(format!(
        "/v1/catalog/service/foo?{}",
        q("ServicePort == 0 and ServiceID != `foo:1`")
    ))
    .await;
    assert_eq!(field(&instances, "ServiceID"), vec!["foo:2"]);
    let agent_checks = get(format!("/v1/agent/checks?{}", q(r#"Status == "passing""#))).await;
    assert_eq!(
        agent_checks.as_object().unwrap().keys().collect::<Vec<_>>(),
        vec!["service:foo:1"]
    );
    let agent_services = get(format!(
        "/v1/agent/services?{}",
        q(r#""tag:foo:2" in Tags"#)
    ))
    .await;
    assert_eq!(
        agent_services
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        vec!["foo:2"]
    );

    let bad = registry
        .get(&format!("/v1/health/service/foo?{}", q("Service.Tags ===")))
        .await;
    bad.assert_status(400);
    assert!(bad.text().contains("filter"), "{}", bad.text());

    // Consul's go-bexpr: a selector through `Checks` matches when any check does, `matches`
    // takes a regular expression, and an unknown selector is refused.
    let critical = get(format!(
        "/v1/health/service/foo?{}",
        q(r#"Checks.Status == "critical""#)
    ))
    .await;
    assert_eq!(service_ids(&critical), vec!["foo:2"]);
    let matched = get(format!(
        "/v1/catalog/service/foo?{}",
        q(r#"ServiceID matches "2$""#)
    ))
    .await;
    assert_eq!(field(&matched, "ServiceID"), vec!["foo:2"]);
    let unknown = registry
        .get(&format!("/v1/health/service/foo?{}", q(r#"Nope == "x""#)))
        .await;
    unknown.assert_status(400);
    assert_eq!(
        unknown.text(),
        "Failed to create boolean expression evaluator: /Nope at part 0: couldn't find key: \
         struct field with name \"Nope\" in filter \"Nope == \\\"x\\\"\"\n"
    );
}
