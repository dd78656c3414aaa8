//! API tests for `/v1/agent/*`: this server as a Consul agent (self, members, services and
//! checks of its own node), and the check runner behind it: TTL checks expiring on a manual
//! clock, HTTP checks against a real server on 127.0.0.1, TCP checks against a real listener,
//! and the sessions those checks invalidate.

mod support;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use support::{NODE, TestRegistry};

// ---------------------------------------------------------------------------------------------
// Helpers

async fn checks(registry: &TestRegistry) -> Value {
    let response = registry.get("/v1/agent/checks").await;
    response.assert_status(200);
    response.json()
}

async fn check(registry: &TestRegistry, id: &str) -> Option<Value> {
    checks(registry).await.get(id).cloned()
}

async fn status_of(registry: &TestRegistry, id: &str) -> String {
    check(registry, id).await.expect("check exists")["Status"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn register_check(registry: &TestRegistry, body: Value) {
    registry
        .put("/v1/agent/check/register", body.to_string())
        .await
        .assert_status(200);
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

/// Polls `condition` until it holds or `limit` (real time) passes.
async fn eventually<F, Fut>(limit: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if condition().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A tiny HTTP server on 127.0.0.1:0 answering every request with the status in `code`.
async fn status_server(code: Arc<AtomicU16>) -> String {
    let app = axum::Router::new().fallback(move || {
        let code = Arc::clone(&code);
        async move { http::StatusCode::from_u16(code.load(Ordering::SeqCst)).unwrap() }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/health")
}

// ---------------------------------------------------------------------------------------------
// Self and members

#[tokio::test]
async fn agent_self_reports_config_member_and_consul_version() {
    let registry = TestRegistry::new().await;
    let response = registry.get("/v1/agent/self").await;
    response.assert_status(200);
    let body = response.json();
    let keys: std::collections::BTreeSet<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "Config",
            "Coord",
            "DebugConfig",
            "Member",
            "Meta",
            "Stats",
            "xDS"
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(body["Config"]["NodeName"], NODE);
    assert_eq!(body["Config"]["Datacenter"], "dc1");
    assert_eq!(body["Config"]["Version"], "1.17.0");
    let node = registry
        .get(&format!("/v1/catalog/node/{NODE}"))
        .await
        .json();
    assert_eq!(body["Config"]["NodeID"], node["Node"]["ID"]);
    assert_eq!(body["Member"]["Name"], NODE);
    assert_eq!(body["Member"]["Status"], 1);

    let members = registry.get("/v1/agent/members").await;
    members.assert_status(200);
    assert_eq!(members.json(), json!([body["Member"]]));
    let wan = registry.get("/v1/agent/members?wan=1").await.json();
    assert_eq!(wan[0]["Name"], format!("{NODE}.dc1"));
}

#[tokio::test]
async fn agent_self_rejects_another_datacenter() {
    let registry = TestRegistry::new().await;
    let response = registry.get("/v1/agent/self?dc=dc2").await;
    response.assert_status(400);
    assert_eq!(response.text().trim(), "No path to datacenter");
}

#[tokio::test]
async fn agent_views_hide_serf_health_and_the_consul_service() {
    let registry = TestRegistry::new().await;
    assert_eq!(checks(&registry).await, json!({}));
    assert_eq!(registry.get("/v1/agent/services").await.json(), json!({}));
    // They are in the catalog all the same.
    let node = registry
        .get(&format!("/v1/catalog/node/{NODE}"))
        .await
        .json();
    assert!(node["Services"].get("consul").is_some());
    let health = registry
        .get(&format!("/v1/health/node/{NODE}"))
        .await
        .json();
    assert_eq!(health[0]["CheckID"], "serfHealth");
}

// ---------------------------------------------------------------------------------------------
// TTL checks

#[tokio::test]
async fn agent_ttl_check_starts_critical_and_follows_pass_warn_fail_with_notes_as_output() {
    let registry = TestRegistry::new().await;
    register_check(
        &registry,
        json!({"name": "check", "ttl": "10s", "notes": "foo"}),
    )
    .await;
    let registered = check(&registry, "check").await.expect("registered");
    assert_eq!(registered["Status"], "critical", "Consul's default status");
    assert_eq!(registered["Notes"], "foo");
    assert_eq!(registered["Type"], "ttl");
    assert_eq!(registered["Node"], NODE);
    assert_eq!(registered["Definition"]["TTL"], "10s");

    for (verb, status) in [
        ("warn", "warning"),
        ("fail", "critical"),
        ("pass", "passing"),
    ] {
        registry
            .put(&format!("/v1/agent/check/{verb}/check"), "")
            .await
            .assert_status(200);
        assert_eq!(status_of(&registry, "check").await, status);
        registry
            .put(
                &format!("/v1/agent/check/{verb}/check?note=all+hunky+dory"),
                "",
            )
            .await
            .assert_status(200);
        let updated = check(&registry, "check").await.unwrap();
        assert_eq!(updated["Status"], status);
        assert_eq!(updated["Output"], "all hunky dory");
    }

    registry
        .put(
            "/v1/agent/check/update/check",
            json!({"Status": "warning", "Output": "slow"}).to_string(),
        )
        .await
        .assert_status(200);
    let updated = check(&registry, "check").await.unwrap();
    assert_eq!(
        (updated["Status"].as_str(), updated["Output"].as_str()),
        (Some("warning"), Some("slow"))
    );
    let bad = registry
        .put("/v1/agent/check/update/check", r#"{"Status":"sideways"}"#)
        .await;
    bad.assert_status(400);
    assert!(
        bad.text().contains("Invalid check status"),
        "{}",
        bad.text()
    );
    assert_eq!(status_of(&registry, "check").await, "warning");
}

#[tokio::test]
async fn agent_check_updates_of_unknown_or_non_ttl_checks_are_refused() {
    let registry = TestRegistry::new().await;
    let missing = registry.put("/v1/agent/check/pass/nope", "").await;
    missing.assert_status(404);
    assert!(
        missing.text().starts_with("Unknown check ID \"nope\""),
        "{}",
        missing.text()
    );
    registry
        .put("/v1/agent/check/pass/serfHealth", "")
        .await
        .assert_status(404);
    register_check(
        &registry,
        json!({"Name": "web", "HTTP": "http://127.0.0.1:1/", "Interval": "10s"}),
    )
    .await;
    let not_ttl = registry.put("/v1/agent/check/pass/web", "").await;
    not_ttl.assert_status(400);
    assert!(
        not_ttl.text().contains("does not have associated TTL"),
        "{}",
        not_ttl.text()
    );
    registry
        .put("/v1/agent/check/deregister/nope", "")
        .await
        .assert_status(404);
}

#[tokio::test]
async fn agent_ttl_check_goes_critical_after_its_ttl_and_invalidates_a_bound_session() {
    let mut registry = TestRegistry::new().await;
    registry.start_tasks();
    register_check(
        &registry,
        json!({"Name": "app", "TTL": "10s", "Status": "passing"}),
    )
    .await;
    let bound = create_session(&registry, json!({"NodeChecks": ["serfHealth", "app"]})).await;
    let unbound = create_session(&registry, json!({})).await;

    registry.advance(Duration::from_millis(9_999));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        status_of(&registry, "app").await,
        "passing",
        "not before its TTL"
    );
    assert!(session_exists(&registry, &bound).await);

    registry.advance(Duration::from_millis(2));
    assert!(
        eventually(Duration::from_secs(2), || async {
            status_of(&registry, "app").await == "critical"
        })
        .await,
        "the TTL check expires"
    );
    assert_eq!(
        check(&registry, "app").await.unwrap()["Output"],
        "TTL expired"
    );
    assert!(
        eventually(Duration::from_secs(2), || async {
            !session_exists(&registry, &bound).await
        })
        .await,
        "the bound session is invalidated"
    );
    assert!(session_exists(&registry, &unbound).await);
}

#[tokio::test]
async fn agent_ttl_pass_moves_the_deadline() {
    let mut registry = TestRegistry::new().await;
    registry.start_tasks();
    register_check(&registry, json!({"Name": "app", "TTL": "10s"})).await;
    registry.advance(Duration::from_secs(8));
    registry
        .put("/v1/agent/check/pass/app", "")
        .await
        .assert_status(200);
    registry.advance(Duration::from_secs(8));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        status_of(&registry, "app").await,
        "passing",
        "16 s after register, 8 s after pass"
    );
    registry.advance(Duration::from_secs(3));
    assert!(
        eventually(Duration::from_secs(2), || async {
            status_of(&registry, "app").await == "critical"
        })
        .await
    );
}

#[tokio::test]
async fn agent_ttl_deadline_survives_a_restart() {
    let mut first = TestRegistry::new().await;
    first.start_tasks();
    register_check(
        &first,
        json!({"Name": "app", "TTL": "30s", "Status": "passing"}),
    )
    .await;
    let storage = Arc::clone(&first.storage);
    let clock = first.clock.clone();
    drop(first);

    clock.advance_ms(31_000); // the deadline passes while the server is down
    let mut second = TestRegistry::open(storage, clock, support::test_config()).await;
    second.start_tasks();
    assert!(
        eventually(Duration::from_secs(2), || async {
            status_of(&second, "app").await == "critical"
        })
        .await,
        "the stored deadline is honoured after the restart"
    );
}

// ---------------------------------------------------------------------------------------------
// HTTP and TCP checks

#[tokio::test]
async fn agent_http_check_runs_against_a_real_server_and_follows_its_status() {
    let code = Arc::new(AtomicU16::new(200));
    let url = status_server(Arc::clone(&code)).await;
    let mut registry = TestRegistry::new().await;
    registry.start_tasks();
    register_check(
        &registry,
        json!({"Name": "web", "HTTP": url, "Interval": "1s", "Timeout": "1s"}),
    )
    .await;
    let registered = check(&registry, "web").await.unwrap();
    assert_eq!(registered["Type"], "http");
    assert_eq!(registered["Interval"], "1s");
    assert_eq!(registered["Definition"]["HTTP"], url);
    let bound_to = |status: &'static str| {
        let registry = &registry;
        move || async move { status_of(registry, "web").await == status }
    };
    assert!(eventually(Duration::from_secs(2), bound_to("passing")).await);
    assert_eq!(
        check(&registry, "web").await.unwrap()["Output"],
        format!("HTTP GET {url}: 200 OK")
    );
    let session = create_session(&registry, json!({"NodeChecks": ["serfHealth", "web"]})).await;

    code.store(429, Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(3), bound_to("warning")).await,
        "429 is a warning"
    );
    assert!(session_exists(&registry, &session).await);

    code.store(500, Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(3), bound_to("critical")).await,
        "500 is critical"
    );
    let output = check(&registry, "web").await.unwrap()["Output"].clone();
    assert!(output.as_str().unwrap().contains("500"), "{output}");
    assert!(
        eventually(Duration::from_secs(2), || async {
            !session_exists(&registry, &session).await
        })
        .await,
        "a critical HTTP check invalidates its sessions"
    );
}

#[tokio::test]
async fn agent_tcp_check_passes_while_listening_and_fails_after_close() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut registry = TestRegistry::new().await;
    registry.start_tasks();
    register_check(
        &registry,
        json!({"name": "db", "tcp": addr.to_string(), "interval": "1s", "timeout": "500ms"}),
    )
    .await;
    assert!(
        eventually(Duration::from_secs(2), || async {
            status_of(&registry, "db").await == "passing"
        })
        .await
    );
    assert_eq!(
        check(&registry, "db").await.unwrap()["Output"],
        format!("TCP connect {addr}: Success")
    );
    drop(listener);
    assert!(
        eventually(Duration::from_secs(3), || async {
            status_of(&registry, "db").await == "critical"
        })
        .await
    );
    let output = check(&registry, "db").await.unwrap()["Output"].clone();
    assert!(
        output
            .as_str()
            .unwrap()
            .starts_with(&format!("dial tcp {addr}")),
        "{output}"
    );
}

#[tokio::test]
async fn agent_check_intervals_below_one_second_are_raised_to_one_second() {
    let registry = TestRegistry::new().await;
    register_check(
        &registry,
        json!({"Name": "fast", "HTTP": "http://127.0.0.1:1/", "Interval": "100ms"}),
    )
    .await;
    let fast = check(&registry, "fast").await.unwrap();
    assert_eq!(fast["Interval"], "1s");
    assert_eq!(fast["Timeout"], "10s", "Consul's default timeout");
}

// ---------------------------------------------------------------------------------------------
// Check registration and removal

#[tokio::test]
async fn agent_check_register_rejects_bad_input_and_changes_nothing() {
    let registry = TestRegistry::new().await;
    let revision = storage::Storage::revision(&*registry.storage)
        .await
        .unwrap();
    let cases: &[(&str, &str)] = &[
        ("", "Request decode failed: EOF"),
        ("{", "Request decode failed"),
        ("[1]", "Request decode failed"),
        (
            r#"{"Name":"x","TTL":"10s","Bogus":1}"#,
            "unknown field \"Bogus\"",
        ),
        (r#"{"Name":"x","TTL":10.5e40}"#, "Request decode failed"),
        (r#"{"Name":"x","TTL":"10"}"#, "Request decode failed"),
        (r#"{"Name":5,"TTL":"10s"}"#, "Request decode failed"),
        (r#"{"TTL":"10s"}"#, "Missing check name"),
        (r#"{"Name":"x"}"#, "Must provide TTL"),
        (
            r#"{"Name":"x","HTTP":"http://127.0.0.1:1/"}"#,
            "Must provide TTL",
        ),
        (
            r#"{"Name":"x","HTTP":"not a url","Interval":"1s"}"#,
            "Invalid HTTP check URL",
        ),
        (
            r#"{"Name":"x","HTTP":"ftp://h/","Interval":"1s"}"#,
            "Invalid HTTP check URL",
        ),
        (
            r#"{"Name":"x","TCP":"nohost","Interval":"1s"}"#,
            "Invalid TCP check address",
        ),
        (
            r#"{"Name":"x","TTL":"1s","TCP":"h:1","Interval":"1s"}"#,
            "exactly one of",
        ),
        (
            r#"{"Name":"x","Args":["/bin/true"],"Interval":"10s"}"#,
            "Scripts are disabled",
        ),
        (
            r#"{"Name":"x","GRPC":"h:1","Interval":"10s"}"#,
            "not supported",
        ),
        (
            r#"{"Name":"x","TTL":"10s","Status":"fine"}"#,
            "Invalid check status",
        ),
        (
            r#"{"Name":"x","TTL":"10s","ServiceID":"nope"}"#,
            "ServiceID \"nope\" does not exist",
        ),
        (r#"{"Name":"serfHealth","TTL":"10s"}"#, "reserved"),
    ];
    for (body, expected) in cases {
        let response = registry
            .put("/v1/agent/check/register", body.to_string())
            .await;
        assert_eq!(response.status, 400, "{body}: {}", response.text());
        assert!(
            response.text().contains(expected),
            "{body}: {}",
            response.text()
        );
    }
    assert_eq!(checks(&registry).await, json!({}));
    assert_eq!(
        storage::Storage::revision(&*registry.storage)
            .await
            .unwrap(),
        revision,
        "nothing was written"
    );
}

#[tokio::test]
async fn agent_check_deregister_removes_it_and_invalidates_its_sessions() {
    let registry = TestRegistry::new().await;
    register_check(
        &registry,
        json!({"Name": "app", "ID": "app-1", "TTL": "1m", "Status": "passing"}),
    )
    .await;
    let bound = create_session(&registry, json!({"NodeChecks": ["serfHealth", "app-1"]})).await;
    registry
        .put("/v1/agent/check/deregister/app-1", "")
        .await
        .assert_status(200);
    assert_eq!(checks(&registry).await, json!({}));
    assert!(!session_exists(&registry, &bound).await);
}

#[tokio::test]
async fn agent_check_fail_invalidates_bound_sessions() {
    let registry = TestRegistry::new().await;
    register_check(
        &registry,
        json!({"Name": "app", "TTL": "1m", "Status": "passing"}),
    )
    .await;
    let bound = create_session(&registry, json!({"NodeChecks": ["serfHealth", "app"]})).await;
    registry
        .put("/v1/agent/check/warn/app", "")
        .await
        .assert_status(200);
    assert!(
        session_exists(&registry, &bound).await,
        "warning keeps the session"
    );
    registry
        .put("/v1/agent/check/fail/app", "")
        .await
        .assert_status(200);
    assert!(!session_exists(&registry, &bound).await);
}

// ---------------------------------------------------------------------------------------------
// Services

#[tokio::test]
async fn agent_service_register_names_its_checks_like_consul() {
    let registry = TestRegistry::new().await;
    registry
        .put(
            "/v1/agent/service/register",
            json!({"name": "foo", "id": "foo:1", "tags": ["a"], "port": 8080,
                   "address": "10.10.10.1", "meta": {"v": "1"},
                   "checks": [{"ttl": "10s"}], "enabletagoverride": true})
            .to_string(),
        )
        .await
        .assert_status(200);
    registry
        .put(
            "/v1/agent/service/register",
            json!({"Name": "bar", "Checks": [{"TTL": "10s"}, {"TTL": "20s", "Status": "passing"}]})
                .to_string(),
        )
        .await
        .assert_status(200);
    let services = registry.get("/v1/agent/services").await.json();
    assert_eq!(services["foo:1"]["Service"], "foo");
    assert_eq!(services["foo:1"]["Tags"], json!(["a"]));
    assert_eq!(services["foo:1"]["Port"], 8080);
    assert_eq!(services["foo:1"]["Address"], "10.10.10.1");
    assert_eq!(services["foo:1"]["Meta"], json!({"v": "1"}));
    assert_eq!(services["foo:1"]["EnableTagOverride"], true);
    assert_eq!(services["bar"]["ID"], "bar");

    let all = checks(&registry).await;
    let ids: Vec<&str> = all
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(ids, vec!["service:bar:1", "service:bar:2", "service:foo:1"]);
    let foo = &all["service:foo:1"];
    assert_eq!(foo["Name"], "Service 'foo' check");
    assert_eq!(foo["ServiceID"], "foo:1");
    assert_eq!(foo["ServiceName"], "foo");
    assert_eq!(foo["ServiceTags"], json!(["a"]));
    assert_eq!(foo["Status"], "critical");
    assert_eq!(all["service:bar:2"]["Status"], "passing");

    let one = registry.get("/v1/agent/service/foo:1").await;
    one.assert_status(200);
    assert_eq!(one.json()["ID"], "foo:1");
    assert!(one.json()["ContentHash"].is_string());

    // Deregistering the service takes its checks with it.
    registry
        .put("/v1/agent/service/deregister/foo:1", "")
        .await
        .assert_status(200);
    assert!(check(&registry, "service:foo:1").await.is_none());
    assert!(
        registry
            .get("/v1/agent/services")
            .await
            .json()
            .get("foo:1")
            .is_none()
    );
    let missing = registry.put("/v1/agent/service/deregister/foo:1", "").await;
    missing.assert_status(404);
    assert!(
        missing.text().starts_with("Unknown service ID \"foo:1\""),
        "{}",
        missing.text()
    );
    registry
        .get("/v1/agent/service/foo:1")
        .await
        .assert_status(404);
}

#[tokio::test]
async fn agent_service_reregistration_updates_check_tags_and_can_replace_checks() {
    let registry = TestRegistry::new().await;
    let body = |tags: Value, checks: Value| {
        json!({"Name": "web", "Tags": tags, "Checks": checks}).to_string()
    };
    registry
        .put(
            "/v1/agent/service/register",
            body(json!(["v1"]), json!([{"TTL": "10s"}, {"TTL": "10s"}])),
        )
        .await
        .assert_status(200);
    registry
        .put(
            "/v1/agent/check/register",
            json!({"Name": "extra", "TTL": "10s", "ServiceID": "web"}).to_string(),
        )
        .await
        .assert_status(200);
    // Re-registered with new tags and no checks: existing checks stay, with the new tags.
    registry
        .put("/v1/agent/service/register", body(json!(["v2"]), json!([])))
        .await
        .assert_status(200);
    let all = checks(&registry).await;
    assert_eq!(all.as_object().unwrap().len(), 3);
    assert_eq!(all["extra"]["ServiceTags"], json!(["v2"]));
    // With replace-existing-checks, only the checks in the request remain.
    registry
        .put(
            "/v1/agent/service/register?replace-existing-checks=true",
            body(json!(["v2"]), json!([{"TTL": "10s"}])),
        )
        .await
        .assert_status(200);
    let all = checks(&registry).await;
    let ids: Vec<&str> = all
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(ids, vec!["service:web"]);
}

#[tokio::test]
async fn agent_service_register_rejects_bad_input_and_changes_nothing() {
    let registry = TestRegistry::new().await;
    let revision = storage::Storage::revision(&*registry.storage)
        .await
        .unwrap();
    let cases: &[(&str, &str)] = &[
        ("", "EOF"),
        ("not json", "Request decode failed"),
        (r#"{"Port":80}"#, "Missing service name"),
        (r#"{"Name":"w","Port":-1}"#, "Request decode failed"),
        (r#"{"Name":"w","Port":"80"}"#, "Request decode failed"),
        (r#"{"Name":"w","Tags":"a"}"#, "Request decode failed"),
        (r#"{"Name":"w","Nope":true}"#, "unknown field \"Nope\""),
        (
            r#"{"Name":"w","Meta":{"bad key":"v"}}"#,
            "invalid characters",
        ),
        (r#"{"Name":"w","Meta":{"consul-x":"v"}}"#, "reserved"),
        (
            r#"{"Name":"w","Check":{"HTTP":"http://x/"}}"#,
            "Must provide TTL",
        ),
        (
            r#"{"Name":"w","Checks":[{"TTL":"1s"},{"TTL":"1s","ID":"service:w:1"}]}"#,
            "Duplicate check ID",
        ),
        (r#"{"Name":"consul"}"#, "reserved"),
    ];
    for (body, expected) in cases {
        let response = registry
            .put("/v1/agent/service/register", body.to_string())
            .await;
        assert_eq!(response.status, 400, "{body}: {}", response.text());
        assert!(
            response.text().contains(expected),
            "{body}: {}",
            response.text()
        );
    }
    assert_eq!(registry.get("/v1/agent/services").await.json(), json!({}));
    assert_eq!(
        storage::Storage::revision(&*registry.storage)
            .await
            .unwrap(),
        revision
    );
}

#[tokio::test]
async fn agent_service_critical_longer_than_deregister_after_is_removed() {
    let mut registry = TestRegistry::new().await;
    registry.start_tasks();
    registry
        .put(
            "/v1/agent/service/register",
            json!({"Name": "flaky", "Check": {"TTL": "10s", "DeregisterCriticalServiceAfter": "1m"}})
                .to_string(),
        )
        .await
        .assert_status(200);
    tokio::time::sleep(Duration::from_millis(100)).await;
    registry.advance(Duration::from_secs(59));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        registry
            .get("/v1/agent/services")
            .await
            .json()
            .get("flaky")
            .is_some()
    );
    registry.advance(Duration::from_secs(2));
    assert!(
        eventually(Duration::from_secs(2), || async {
            registry
                .get("/v1/agent/services")
                .await
                .json()
                .get("flaky")
                .is_none()
        })
        .await,
        "the service is reaped a minute after its check went critical"
    );
    assert!(check(&registry, "service:flaky").await.is_none());
}

// ---------------------------------------------------------------------------------------------
// Maintenance

#[tokio::test]
async fn agent_maintenance_mode_adds_and_removes_critical_checks() {
    let registry = TestRegistry::new().await;
    registry
        .put("/v1/agent/maintenance?enable=true&reason=test", "")
        .await
        .assert_status(200);
    let maintenance = check(&registry, "_node_maintenance").await.expect("added");
    assert_eq!(maintenance["Status"], "critical");
    assert_eq!(maintenance["Notes"], "test");
    registry
        .put("/v1/agent/maintenance?enable=false", "")
        .await
        .assert_status(200);
    assert!(check(&registry, "_node_maintenance").await.is_none());
    registry
        .put("/v1/agent/maintenance", "")
        .await
        .assert_status(400);
    registry
        .put("/v1/agent/maintenance?enable=maybe", "")
        .await
        .assert_status(400);

    registry
        .put("/v1/agent/service/register", r#"{"Name":"foo"}"#)
        .await
        .assert_status(200);
    registry
        .put("/v1/agent/service/maintenance/foo?enable=true", "")
        .await
        .assert_status(200);
    let maintenance = check(&registry, "_service_maintenance:foo")
        .await
        .expect("added");
    assert_eq!(maintenance["ServiceID"], "foo");
    assert!(
        maintenance["Notes"]
            .as_str()
            .unwrap()
            .starts_with("Maintenance mode is enabled")
    );
    registry
        .put("/v1/agent/service/maintenance/foo?enable=false", "")
        .await
        .assert_status(200);
    assert!(check(&registry, "_service_maintenance:foo").await.is_none());
    registry
        .put("/v1/agent/service/maintenance/nope?enable=true", "")
        .await
        .assert_status(404);
}

// ---------------------------------------------------------------------------------------------
// ACL

#[tokio::test]
async fn agent_writes_need_write_on_the_checks_service_or_node() {
    let registry = TestRegistry::with_acl().await;
    let token = registry
        .token_with_rules(r#"service "web" { policy = "write" }"#)
        .await;
    registry
        .as_token(
            http::Method::PUT,
            "/v1/agent/service/register",
            &token,
            json!({"Name": "web"}).to_string(),
        )
        .await
        .assert_status(200);
    let denied = registry
        .as_token(
            http::Method::PUT,
            "/v1/agent/service/register",
            &token,
            json!({"Name": "db"}).to_string(),
        )
        .await;
    denied.assert_status(403);
    assert!(
        denied.text().contains("lacks permission 'service:write'"),
        "{}",
        denied.text()
    );
    registry
        .as_token(
            http::Method::PUT,
            "/v1/agent/check/register",
            &token,
            json!({"Name": "web-ttl", "TTL": "10s", "ServiceID": "web"}).to_string(),
        )
        .await
        .assert_status(200);
    let node_check = registry
        .as_token(
            http::Method::PUT,
            "/v1/agent/check/register",
            &token,
            json!({"Name": "node-ttl", "TTL": "10s"}).to_string(),
        )
        .await;
    node_check.assert_status(403);
    assert!(
        node_check.text().contains("lacks permission 'node:write'"),
        "{}",
        node_check.text()
    );
    registry
        .as_token(
            http::Method::PUT,
            "/v1/agent/check/pass/web-ttl",
            &token,
            json!(null).to_string(),
        )
        .await
        .assert_status(200);
    // A token without the rule may not touch the check; reads drop what it may not see.
    let other = registry
        .token_with_rules(r#"service "db" { policy = "write" }"#)
        .await;
    registry
        .as_token(
            http::Method::PUT,
            "/v1/agent/check/fail/web-ttl",
            &other,
            json!(null).to_string(),
        )
        .await
        .assert_status(403);
    let seen = registry
        .as_token(http::Method::GET, "/v1/agent/checks", &other, "")
        .await;
    assert_eq!(seen.json(), json!({}));
    let seen = registry
        .as_token(http::Method::GET, "/v1/agent/services", &token, "")
        .await;
    assert!(seen.json().get("web").is_some());
}

#[tokio::test]
async fn agent_concurrent_registrations_and_heartbeats_all_succeed() {
    let registry = Arc::new(TestRegistry::new().await);
    let mut tasks = Vec::new();
    for n in 0..20 {
        let registry = Arc::clone(&registry);
        tasks.push(tokio::spawn(async move {
            let name = format!("svc-{n}");
            registry
                .put(
                    "/v1/agent/service/register",
                    json!({"Name": name, "Check": {"TTL": "1m"}}).to_string(),
                )
                .await
                .assert_status(200);
            for _ in 0..5 {
                registry
                    .put(&format!("/v1/agent/check/pass/service:{name}"), "")
                    .await
                    .assert_status(200);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let all = checks(&registry).await;
    assert_eq!(all.as_object().unwrap().len(), 20);
    assert!(
        all.as_object()
            .unwrap()
            .values()
            .all(|c| c["Status"] == "passing")
    );
}
