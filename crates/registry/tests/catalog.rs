//! API tests for `/v1/catalog/*`: this server's own node, register/deregister with Consul's
//! and py-consul's body spellings, the read shapes, blocking reads, the sessions that node and
//! check changes invalidate, and bad input (a clear 4xx that changes nothing).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use storage::Storage;
use support::{NODE, TestRegistry};

async fn register(registry: &TestRegistry, body: Value) {
    let response = registry.put("/v1/catalog/register", body.to_string()).await;
    response.assert_status(200);
    assert_eq!(response.json(), json!(true));
}

async fn deregister(registry: &TestRegistry, body: Value) {
    let response = registry
        .put("/v1/catalog/deregister", body.to_string())
        .await;
    response.assert_status(200);
    assert_eq!(response.json(), json!(true));
}

async fn node_names(registry: &TestRegistry) -> Vec<String> {
    let response = registry.get("/v1/catalog/nodes").await;
    response.assert_status(200);
    response
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|node| node["Node"].as_str().unwrap().to_owned())
        .collect()
}

async fn create_session(registry: &TestRegistry, body: Value) -> String {
    let response = registry.put("/v1/session/create", body.to_string()).await;
    response.assert_status(200);
    response.json()["ID"].as_str().unwrap().to_owned()
}

async fn session_exists(registry: &TestRegistry, id: &str) -> bool {
    let response = registry.get(&format!("/v1/session/info/{id}")).await;
    response.assert_status(200);
    !response.json().as_array().unwrap().is_empty()
}

// ---------------------------------------------------------------------------------------------
// This server's node

#[tokio::test]
async fn catalog_registers_this_servers_node_with_a_passing_serf_health_check() {
    let registry = TestRegistry::new().await;
    let nodes = registry.get("/v1/catalog/nodes").await;
    nodes.assert_status(200);
    assert!(nodes.index() >= 1);
    let nodes = nodes.json();
    assert_eq!(nodes.as_array().unwrap().len(), 1);
    let node = &nodes[0];
    assert_eq!(node["Node"], NODE);
    assert_eq!(node["Address"], "127.0.0.1");
    assert_eq!(node["Datacenter"], "dc1");
    assert_eq!(node["TaggedAddresses"]["lan"], "127.0.0.1");
    assert!(
        uuid::Uuid::parse_str(node["ID"].as_str().unwrap()).is_ok(),
        "{node}"
    );
    assert!(node["CreateIndex"].as_u64().unwrap() >= 1);

    let checks = registry
        .get(&format!("/v1/health/node/{NODE}"))
        .await
        .json();
    assert_eq!(checks.as_array().unwrap().len(), 1);
    let serf = &checks[0];
    assert_eq!(serf["CheckID"], "serfHealth");
    assert_eq!(serf["Name"], "Serf Health Status");
    assert_eq!(serf["Status"], "passing");
    assert_eq!(serf["Output"], "Agent alive and reachable");
    assert_eq!(serf["ServiceID"], "");
    assert_eq!(serf["Type"], "");

    let services = registry.get("/v1/catalog/services").await.json();
    assert_eq!(services, json!({"consul": []}));
}

#[tokio::test]
async fn catalog_self_registration_is_idempotent_across_restarts() {
    let first = TestRegistry::new().await;
    let before = first.get("/v1/catalog/nodes").await;
    let revision = first.storage.revision().await.unwrap();
    let storage = Arc::clone(&first.storage);
    let clock = first.clock.clone();
    drop(first);
    let second = TestRegistry::open(storage, clock, support::test_config()).await;
    assert_eq!(
        second.storage.revision().await.unwrap(),
        revision,
        "nothing rewritten"
    );
    let after = second.get("/v1/catalog/nodes").await;
    assert_eq!(after.json(), before.json(), "same ID and indexes");
    assert_eq!(after.index(), before.index());
}

#[tokio::test]
async fn catalog_self_registration_repairs_a_failed_serf_health_check() {
    let first = TestRegistry::new().await;
    register(
        &first,
        json!({"Node": NODE, "Address": "127.0.0.1", "SkipNodeUpdate": true,
               "Check": {"CheckID": "serfHealth", "Name": "Serf Health Status", "Status": "critical"}}),
    )
    .await;
    let storage = Arc::clone(&first.storage);
    let clock = first.clock.clone();
    drop(first);
    let second = TestRegistry::open(storage, clock, support::test_config()).await;
    let checks = second.get(&format!("/v1/health/node/{NODE}")).await.json();
    assert_eq!(checks[0]["Status"], "passing");
}

// ---------------------------------------------------------------------------------------------
// Register and read

#[tokio::test]
async fn catalog_register_accepts_py_consul_lowercase_bodies_with_a_write_request() {
    let registry = TestRegistry::new().await;
    let body = json!({
        "node": "n1",
        "address": "10.1.10.11",
        "service": {"service": "s1"},
        "check": {"name": "c1"},
        "WriteRequest": {"Token": "anything"},
    });
    let response = registry
        .put("/v1/catalog/register?token=anything", body.to_string())
        .await;
    response.assert_status(200);
    assert_eq!(response.json(), json!(true));
    register(
        &registry,
        json!({"node": "n1", "address": "10.1.10.11", "service": {"service": "s2"}}),
    )
    .await;
    register(
        &registry,
        json!({"node": "n2", "address": "10.1.10.12", "service": {"service": "s1", "tags": ["master"]}}),
    )
    .await;

    assert_eq!(node_names(&registry).await, vec!["n1", "n2", NODE]);
    let services = registry.get("/v1/catalog/services").await.json();
    assert_eq!(services, json!({"consul": [], "s1": ["master"], "s2": []}));
    let n1 = registry.get("/v1/catalog/node/n1").await.json();
    let ids: Vec<&str> = n1["Services"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(ids, vec!["s1", "s2"]);
    let checks = registry.get("/v1/health/node/n1").await.json();
    assert_eq!(checks[0]["CheckID"], "c1");
    assert_eq!(checks[0]["Name"], "c1");
    assert_eq!(
        checks[0]["Status"], "critical",
        "Consul's default check status"
    );

    let s1 = registry.get("/v1/catalog/service/s1").await.json();
    let nodes: Vec<&str> = s1
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, vec!["n1", "n2"]);
    let tagged = registry
        .get("/v1/catalog/service/s1?tag=master")
        .await
        .json();
    assert_eq!(tagged.as_array().unwrap().len(), 1);
    assert_eq!(tagged[0]["Node"], "n2");

    // Deregister a check, then a service, then the nodes.
    deregister(&registry, json!({"node": "n1", "checkid": "c1"})).await;
    deregister(&registry, json!({"node": "n2", "serviceid": "s1"})).await;
    assert_eq!(node_names(&registry).await, vec!["n1", "n2", NODE]);
    assert!(
        registry
            .get("/v1/health/node/n1")
            .await
            .json()
            .as_array()
            .unwrap()
            .is_empty()
    );
    let s1 = registry.get("/v1/catalog/service/s1").await.json();
    assert_eq!(s1.as_array().unwrap().len(), 1);
    assert_eq!(s1[0]["Node"], "n1");
    deregister(&registry, json!({"node": "n1"})).await;
    deregister(&registry, json!({"node": "n2"})).await;
    assert_eq!(node_names(&registry).await, vec![NODE]);
    assert_eq!(
        registry.get("/v1/catalog/services").await.json(),
        json!({"consul": []})
    );
    // Deregistering what does not exist is still `true`.
    deregister(&registry, json!({"Node": "n1"})).await;
}

#[tokio::test]
async fn catalog_reads_have_consuls_shapes() {
    let registry = TestRegistry::new().await;
    let id = "40e4a748-2192-161a-0510-9bf59fe950b5";
    register(
        &registry,
        json!({
            "ID": id,
            "Node": "web-1",
            "Address": "192.168.10.10",
            "TaggedAddresses": {"lan": "192.168.10.10", "wan": "10.0.10.10"},
            "NodeMeta": {"rack": "r1"},
            "Service": {"ID": "redis1", "Service": "redis", "Tags": ["primary", "v1"],
                        "Address": "127.0.0.1", "Port": 8000, "Meta": {"redis_version": "4.0"}},
            "Checks": [
                {"Node": "web-1", "CheckID": "service:redis1", "Name": "Redis health check",
                 "Notes": "Script based health check", "Status": "passing", "ServiceID": "redis1",
                 "Definition": {"TCP": "localhost:8888", "Interval": "5s", "Timeout": "1s",
                                "DeregisterCriticalServiceAfter": "30s"}},
                {"CheckID": "mem", "Name": "Memory", "Status": "warning", "Output": "90%"}
            ],
        }),
    )
    .await;

    let node = registry.get("/v1/catalog/node/web-1").await;
    node.assert_status(200);
    let node = node.json();
    assert_eq!(node["Node"]["ID"], id);
    assert_eq!(node["Node"]["Meta"], json!({"rack": "r1"}));
    assert_eq!(node["Node"]["TaggedAddresses"]["wan"], "10.0.10.10");
    let redis = &node["Services"]["redis1"];
    assert_eq!(redis["Service"], "redis");
    assert_eq!(redis["Tags"], json!(["primary", "v1"]));
    assert_eq!(redis["Port"], 8000);
    assert_eq!(redis["Address"], "127.0.0.1");
    assert_eq!(redis["Meta"], json!({"redis_version": "4.0"}));
    assert_eq!(redis["Weights"], json!({"Passing": 1, "Warning": 1}));
    assert!(redis["CreateIndex"].as_u64().unwrap() >= 1);

    let instances = registry.get("/v1/catalog/service/redis").await.json();
    let instance = &instances[0];
    for (field, expected) in [
        ("ID", json!(id)),
        ("Node", json!("web-1")),
        ("Address", json!("192.168.10.10")),
        ("Datacenter", json!("dc1")),
        ("NodeMeta", json!({"rack": "r1"})),
        ("ServiceID", json!("redis1")),
        ("ServiceName", json!("redis")),
        ("ServiceTags", json!(["primary", "v1"])),
        ("ServiceAddress", json!("127.0.0.1")),
        ("ServicePort", json!(8000)),
        ("ServiceMeta", json!({"redis_version": "4.0"})),
        ("ServiceEnableTagOverride", json!(false)),
    ] {
        assert_eq!(instance[field], expected, "{field}");
    }

    let checks = registry.get("/v1/health/node/web-1").await.json();
    let redis_check = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["CheckID"] == "service:redis1")
        .unwrap();
    assert_eq!(redis_check["ServiceName"], "redis");
    assert_eq!(redis_check["ServiceTags"], json!(["primary", "v1"]));
    assert_eq!(redis_check["Notes"], "Script based health check");
    assert_eq!(
        redis_check["Definition"],
        json!({"TCP": "localhost:8888", "Interval": "5s", "Timeout": "1s",
               "DeregisterCriticalServiceAfter": "30s"})
    );

    let datacenters = registry.get("/v1/catalog/datacenters").await;
    datacenters.assert_status(200);
    assert_eq!(datacenters.json(), json!(["dc1"]));

    let meta = registry
        .get("/v1/catalog/nodes?node-meta=rack:r1")
        .await
        .json();
    assert_eq!(meta.as_array().unwrap().len(), 1);
    assert_eq!(meta[0]["Node"], "web-1");
    let none = registry
        .get("/v1/catalog/service/redis?node-meta=rack:r2")
        .await
        .json();
    assert_eq!(none, json!([]));
    assert_eq!(
        registry
            .get("/v1/catalog/services?node-meta=rack:r1")
            .await
            .json(),
        json!({"redis": ["primary", "v1"]})
    );
}

#[tokio::test]
async fn catalog_unknown_node_is_null_and_unknown_service_is_empty_with_an_index() {
    let registry = TestRegistry::new().await;
    let node = registry.get("/v1/catalog/node/nobody").await;
    node.assert_status(200);
    assert_eq!(node.json(), Value::Null);
    assert!(node.index() >= 1);
    let service = registry.get("/v1/catalog/service/nothing").await;
    service.assert_status(200);
    assert_eq!(service.json(), json!([]));
    assert!(service.index() >= 1);
}

#[tokio::test]
async fn catalog_register_keeps_the_node_id_and_skip_node_update_keeps_the_node() {
    let registry = TestRegistry::new().await;
    register(&registry, json!({"Node": "n1", "Address": "10.0.0.1"})).await;
    let first = registry.get("/v1/catalog/node/n1").await.json();
    let id = first["Node"]["ID"].as_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&id).is_ok());
    register(&registry, json!({"Node": "n1", "Address": "10.0.0.2"})).await;
    let second = registry.get("/v1/catalog/node/n1").await.json();
    assert_eq!(second["Node"]["ID"], id.as_str(), "the ID is kept");
    assert_eq!(second["Node"]["Address"], "10.0.0.2");
    register(
        &registry,
        json!({"Node": "n1", "Address": "10.0.0.3", "SkipNodeUpdate": true,
               "Service": {"Service": "web"}}),
    )
    .await;
    let third = registry.get("/v1/catalog/node/n1").await.json();
    assert_eq!(
        third["Node"]["Address"], "10.0.0.2",
        "SkipNodeUpdate leaves the node"
    );
    assert!(third["Services"].get("web").is_some());

    // Another node may not take the same ID.
    let taken = registry
        .put(
            "/v1/catalog/register",
            json!({"ID": id, "Node": "n2", "Address": "10.0.0.9"}).to_string(),
        )
        .await;
    taken.assert_status(400);
    assert!(
        taken.text().contains("already registered"),
        "{}",
        taken.text()
    );
}

#[tokio::test]
async fn catalog_register_of_identical_records_does_not_move_indexes() {
    let registry = TestRegistry::new().await;
    let body = json!({"Node": "n1", "Address": "10.0.0.1", "Service": {"Service": "web", "Port": 80},
                      "Check": {"CheckID": "c", "Name": "c", "Status": "passing", "ServiceID": "web"}});
    register(&registry, body.clone()).await;
    let nodes = registry.get("/v1/catalog/nodes").await.index();
    let services = registry.get("/v1/catalog/services").await.index();
    let health = registry.get("/v1/health/service/web").await.index();
    let revision = registry.storage.revision().await.unwrap();
    register(&registry, body).await;
    assert_eq!(registry.storage.revision().await.unwrap(), revision);
    assert_eq!(registry.get("/v1/catalog/nodes").await.index(), nodes);
    assert_eq!(registry.get("/v1/catalog/services").await.index(), services);
    assert_eq!(registry.get("/v1/health/service/web").await.index(), health);
    // A service change moves the services index but not the nodes index.
    register(
        &registry,
        json!({"Node": "n1", "Address": "10.0.0.1", "Service": {"Service": "web", "Port": 81}}),
    )
    .await;
    assert_eq!(registry.get("/v1/catalog/nodes").await.index(), nodes);
    assert!(registry.get("/v1/catalog/services").await.index() > services);
}

// ---------------------------------------------------------------------------------------------
// Blocking reads

#[tokio::test]
async fn catalog_nodes_blocking_read_wakes_on_a_registration() {
    let registry = Arc::new(TestRegistry::new().await);
    let index = registry.get("/v1/catalog/nodes").await.index();
    let reader = {
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            let started = Instant::now();
            let response = registry
                .get(&format!("/v1/catalog/nodes?index={index}&wait=5s"))
                .await;
            (response, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    register(&registry, json!({"Node": "n9", "Address": "10.0.0.9"})).await;
    let (response, elapsed) = reader.await.unwrap();
    response.assert_status(200);
    assert!(response.index() > index);
    assert_eq!(response.json().as_array().unwrap().len(), 2);
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn catalog_blocking_read_returns_the_same_index_when_nothing_changes() {
    let registry = TestRegistry::new().await;
    let index = registry
        .get(&format!("/v1/catalog/node/{NODE}"))
        .await
        .index();
    // A change elsewhere (another node) does not move this node's index.
    register(&registry, json!({"Node": "other", "Address": "10.0.0.5"})).await;
    let started = Instant::now();
    let response = registry
        .get(&format!("/v1/catalog/node/{NODE}?index={index}&wait=200ms"))
        .await;
    response.assert_status(200);
    assert_eq!(response.index(), index);
    assert!(started.elapsed() >= Duration::from_millis(200));
    registry
        .get("/v1/catalog/nodes?index=abc")
        .await
        .assert_status(400);
    registry
        .get("/v1/catalog/nodes?wait=soon&index=1")
        .await
        .assert_status(400);
}

// ---------------------------------------------------------------------------------------------
// Sessions

#[tokio::test]
async fn catalog_node_deregister_invalidates_the_nodes_sessions() {
    let registry = TestRegistry::new().await;
    register(&registry, json!({"Node": "n2", "Address": "10.0.0.2"})).await;
    let on_n2 = create_session(&registry, json!({"Node": "n2", "NodeChecks": []})).await;
    let mine = create_session(&registry, json!({})).await;
    deregister(&registry, json!({"Node": "n2"})).await;
    assert!(!session_exists(&registry, &on_n2).await);
    assert!(session_exists(&registry, &mine).await);
}

#[tokio::test]
async fn catalog_check_written_critical_or_removed_with_its_service_invalidates_sessions() {
    let registry = TestRegistry::new().await;
    let with_check = |status: &str| {
        json!({"Node": NODE, "Address": "127.0.0.1", "SkipNodeUpdate": true,
               "Service": {"Service": "web"},
               "Check": {"CheckID": "web-alive", "Name": "web", "Status": status, "ServiceID": "web"}})
    };
    register(&registry, with_check("passing")).await;
    let first = create_session(
        &registry,
        json!({"NodeChecks": ["serfHealth", "web-alive"]}),
    )
    .await;
    register(&registry, with_check("warning")).await;
    assert!(session_exists(&registry, &first).await);
    register(&registry, with_check("critical")).await;
    assert!(!session_exists(&registry, &first).await);

    register(&registry, with_check("passing")).await;
    let second = create_session(
        &registry,
        json!({"NodeChecks": ["serfHealth", "web-alive"]}),
    )
    .await;
    deregister(&registry, json!({"Node": NODE, "ServiceID": "web"})).await;
    assert!(
        !session_exists(&registry, &second).await,
        "the service's check went with it"
    );
}

// ---------------------------------------------------------------------------------------------
// Bad input

#[tokio::test]
async fn catalog_register_rejects_bad_input_and_changes_nothing() {
    let registry = TestRegistry::new().await;
    let revision = registry.storage.revision().await.unwrap();
    let cases: &[(&str, &str, u16)] = &[
        ("", "Request decode failed: EOF", 400),
        ("{\"Node\":", "Request decode failed", 400),
        ("[]", "Request decode failed", 400),
        (
            r#"{"Node":"n","Address":"a","Extra":1}"#,
            "unknown field \"Extra\"",
            400,
        ),
        (
            r#"{"Node":"n","Address":"a","Service":{"Service":"s","Bogus":1}}"#,
            "unknown field \"Bogus\" in Service",
            400,
        ),
        (r#"{"Node":1,"Address":"a"}"#, "Request decode failed", 400),
        (
            r#"{"Node":"n","Address":"a","Service":{"Service":"s","Port":70000}}"#,
            "Request decode failed",
            400,
        ),
        (
            r#"{"Node":"n","Address":"a","Service":"web"}"#,
            "must be a JSON object",
            400,
        ),
        (
            r#"{"Node":"n","Address":"a","Checks":{"CheckID":"c"}}"#,
            "must be a list",
            400,
        ),
        (r#"{"Address":"a"}"#, "Must provide node", 400),
        (r#"{"Node":"a/b","Address":"a"}"#, "Invalid node name", 400),
        (r#"{"Node":"n"}"#, "Must provide address", 400),
        (
            r#"{"Node":"n","Address":"a","ID":"not-a-uuid"}"#,
            "must be a UUID",
            400,
        ),
        (
            r#"{"Node":"n","Address":"a","Datacenter":"dc2"}"#,
            "No path to datacenter",
            400,
        ),
        (
            r#"{"Node":"n","Address":"a","NodeMeta":{"a b":"c"}}"#,
            "invalid characters",
            400,
        ),
        (
            r#"{"Node":"n","Address":"a","Service":{"Port":1}}"#,
            "Must provide service name",
            400,
        ),
        (
            r#"{"Node":"n","Address":"a","Check":{"Name":"c","Status":"fine"}}"#,
            "Invalid check status",
            400,
        ),
        (
            r#"{"Node":"n","Address":"a","Check":{"Name":"c","ServiceID":"nope"}}"#,
            "Missing service registration",
            400,
        ),
        (
            r#"{"Node":"n","Address":"a","Check":{"Node":"m","Name":"c"}}"#,
            "doesn't match",
            400,
        ),
        (
            r#"{"Node":"n","Address":"a","Check":{"Status":"passing"}}"#,
            "Must provide check ID",
            400,
        ),
        (
            r#"{"Node":"n","Address":"a","Checks":[{"Name":"c"},{"Name":"c"}]}"#,
            "Duplicate check ID",
            400,
        ),
    ];
    for (body, expected, status) in cases {
        let response = registry.put("/v1/catalog/register", body.to_string()).await;
        assert_eq!(response.status, *status, "{body}: {}", response.text());
        assert!(
            response.text().contains(expected),
            "{body}: {}",
            response.text()
        );
        response.index();
    }
    let huge = format!(r#"{{"Node":"n","Address":"{}"}}"#, "a".repeat(3 << 20));
    let response = registry.put("/v1/catalog/register", huge).await;
    assert_eq!(response.status, 413, "{}", response.text());
    registry
        .put(
            "/v1/catalog/register?dc=dc2",
            r#"{"Node":"n","Address":"a"}"#,
        )
        .await
        .assert_status(400);
    assert_eq!(
        registry.storage.revision().await.unwrap(),
        revision,
        "nothing was written"
    );
    assert_eq!(node_names(&registry).await, vec![NODE]);
}

#[tokio::test]
async fn catalog_deregister_rejects_bad_input() {
    let registry = TestRegistry::new().await;
    for (body, expected) in [
        ("", "EOF"),
        ("{}", "Must provide node"),
        (
            r#"{"Node":"n","Datacenter":"dc9"}"#,
            "No path to datacenter",
        ),
        (r#"{"Node":"n","Nope":1}"#, "unknown field"),
    ] {
        let response = registry
            .put("/v1/catalog/deregister", body.to_owned())
            .await;
        assert_eq!(response.status, 400, "{body}");
        assert!(
            response.text().contains(expected),
            "{body}: {}",
            response.text()
        );
    }
    registry
        .get("/v1/catalog/register")
        .await
        .assert_status(405);
    registry.get("/v1/catalog/node/").await.assert_status(400);
    registry
        .get("/v1/catalog/nodes?dc=dc2")
        .await
        .assert_status(400);
}
