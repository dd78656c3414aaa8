//! API tests for `/v1/session/*`: every endpoint, every row of the reference's error matrix
//! (§1.7) with this project's decisions (400 where Consul answers 500; a malformed UUID on
//! destroy is a 400), TTL expiry and renew with a manual clock, invalidation by destroy, by
//! checks and by node deregistration (both behaviours, lock-delays), namespaces, blocking
//! queries, bad input, and restart survival of TTL deadlines and lock-delays.

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use http::Method;
use serde_json::{Value, json};
use support::{NODE, TestRegistry, test_config};

// ---------------------------------------------------------------------------------------------
// Helpers

async fn create(registry: &TestRegistry, body: &str) -> String {
    let response = registry.put("/v1/session/create", body.to_owned()).await;
    response.assert_status(200);
    let id = response.json()["ID"]
        .as_str()
        .expect("ID is a string")
        .to_owned();
    assert_eq!(id.len(), 36, "{id}");
    id
}

/// The session as `info` returns it, or `None` for `[]`.
async fn info(registry: &TestRegistry, id: &str) -> Option<Value> {
    let response = registry.get(&format!("/v1/session/info/{id}")).await;
    response.assert_status(200);
    let list = response.json();
    let list = list.as_array().expect("info is an array");
    assert!(list.len() <= 1);
    list.first().cloned()
}

async fn list_ids(registry: &TestRegistry, uri: &str) -> Vec<String> {
    let response = registry.get(uri).await;
    response.assert_status(200);
    response
        .json()
        .as_array()
        .expect("array")
        .iter()
        .map(|session| session["ID"].as_str().unwrap().to_owned())
        .collect()
}

async fn register(registry: &TestRegistry, body: Value) {
    registry
        .put("/v1/catalog/register", body.to_string())
        .await
        .assert_status(200);
}

/// Registers check `id` on [`NODE`] with `status`.
async fn register_check(registry: &TestRegistry, id: &str, status: &str) {
    register(
        registry,
        json!({
            "Node": NODE,
            "Address": "127.0.0.1",
            "SkipNodeUpdate": true,
            "Check": {"Node": NODE, "CheckID": id, "Name": id, "Status": status},
        }),
    )
    .await;
}

async fn kv_put(registry: &TestRegistry, uri: &str, body: &str) -> Value {
    let response = registry.put(uri, body.to_owned()).await;
    response.assert_status(200);
    response.json()
}

async fn kv_entry(registry: &TestRegistry, key: &str) -> Option<Value> {
    let response = registry.get(&format!("/v1/kv/{key}")).await;
    match response.status.as_u16() {
        404 => None,
        200 => Some(response.json()[0].clone()),
        other => panic!("kv get {key}: {other} {}", response.text()),
    }
}

/// Polls `condition` until it holds or `limit` (real time) passes.
async fn eventually<F, Fut>(limit: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if condition().await {
            return true;
        }
        if started.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Gives the reaper loop time to act on a clock advance (it wakes at once; this is slack).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

const UNKNOWN_ID: &str = "6e3f2c1a-8b9d-4e5f-a1b2-c3d4e5f60718";

// ---------------------------------------------------------------------------------------------
// Create

#[tokio::test]
async fn session_create_without_body_uses_consul_defaults() {
    let registry = TestRegistry::new().await;
    let id = create(&registry, "").await;
    let session = info(&registry, &id).await.expect("session exists");
    assert_eq!(session["ID"], id);
    assert_eq!(session["Name"], "");
    assert_eq!(session["Node"], NODE);
    assert_eq!(session["LockDelay"], 15_000_000_000u64);
    assert_eq!(session["Behavior"], "release");
    assert_eq!(session["TTL"], "");
    assert_eq!(session["NodeChecks"], json!(["serfHealth"]));
    assert_eq!(session["ServiceChecks"], Value::Null);
    assert!(session.get("Checks").is_none(), "{session}");
    assert_eq!(session["Namespace"], "default");
    let create_index = session["CreateIndex"].as_u64().unwrap();
    assert!(create_index > 0);
    assert_eq!(session["ModifyIndex"], create_index);
}

#[tokio::test]
async fn session_create_reads_lowercase_keys_like_py_consul() {
    let registry = TestRegistry::new().await;
    let id = create(
        &registry,
        r#"{"name":"my-lock","node":"test-node","lockdelay":"5s","behavior":"delete","ttl":"20s","unknown":1}"#,
    )
    .await;
    let session = info(&registry, &id).await.unwrap();
    assert_eq!(session["Name"], "my-lock");
    assert_eq!(session["LockDelay"], 5_000_000_000u64);
    assert_eq!(session["Behavior"], "delete");
    assert_eq!(session["TTL"], "20s");
}

#[tokio::test]
async fn session_create_lock_delay_numbers_below_1000_are_seconds() {
    let registry = TestRegistry::new().await;
    for (body, expected) in [
        (r#"{"LockDelay": 20}"#, 20_000_000_000u64),
        (r#"{"LockDelay": 5000}"#, 5_000),
        (r#"{"LockDelay": "20ns"}"#, 20_000_000_000),
        (r#"{"LockDelay": "1m"}"#, 60_000_000_000),
        (r#"{"LockDelay": 0}"#, 0),
        (r#"{"LockDelay": "0s"}"#, 0),
        (r#"{"LockDelay": null}"#, 15_000_000_000),
    ] {
        let id = create(&registry, body).await;
        let session = info(&registry, &id).await.unwrap();
        assert_eq!(session["LockDelay"], expected, "{body}");
    }
}

#[tokio::test]
async fn session_create_lock_delay_without_unit_is_a_decode_error() {
    let registry = TestRegistry::new().await;
    let response = registry
        .put("/v1/session/create", r#"{"LockDelay":"20"}"#)
        .await;
    response.assert_status(400);
    assert_eq!(
        response.text().trim_end(),
        r#"Request decode failed: time: missing unit in duration "20""#
    );
}

#[tokio::test]
async fn session_create_ttl_out_of_range_is_400_with_consul_text() {
    let registry = TestRegistry::new().await;
    for (ttl, nanos) in [
        ("5s", "5000000000"),
        ("25h", "90000000000000"),
        ("86401s", "86401000000000"),
    ] {
        let response = registry
            .put("/v1/session/create", format!(r#"{{"TTL":"{ttl}"}}"#))
            .await;
        response.assert_status(400);
        assert_eq!(
            response.text().trim_end(),
            format!("Invalid Session TTL '{nanos}', must be between [10s=24h0m0s]"),
        );
    }
    let response = registry.put("/v1/session/create", r#"{"TTL":"10"}"#).await;
    response.assert_status(400);
    assert_eq!(
        response.text().trim_end(),
        r#"Session TTL '10' invalid: time: missing unit in duration "10""#
    );
    let response = registry.put("/v1/session/create", r#"{"TTL":"5x"}"#).await;
    response.assert_status(400);
    assert_eq!(
        response.text().trim_end(),
        r#"Session TTL '5x' invalid: time: unknown unit "x" in duration "5x""#
    );
    assert!(list_ids(&registry, "/v1/session/list").await.is_empty());
}

#[tokio::test]
async fn session_create_ttl_bounds_and_zero_are_accepted() {
    let registry = TestRegistry::new().await;
    for ttl in ["10s", "86400s", "24h", "1m", "0s", "0", ""] {
        let id = create(&registry, &format!(r#"{{"TTL":"{ttl}"}}"#)).await;
        assert_eq!(info(&registry, &id).await.unwrap()["TTL"], ttl);
    }
}

#[tokio::test]
async fn session_create_ttl_min_follows_config_in_the_message() {
    let mut config = test_config();
    config.session_ttl_min = Duration::from_secs(180);
    let registry = TestRegistry::with_config(config).await;
    let response = registry.put("/v1/session/create", r#"{"TTL":"15s"}"#).await;
    response.assert_status(400);
    assert_eq!(
        response.text().trim_end(),
        "Invalid Session TTL '15000000000', must be between [3m0s=24h0m0s]"
    );
}

#[tokio::test]
async fn session_create_invalid_behavior_is_400() {
    let registry = TestRegistry::new().await;
    let response = registry
        .put("/v1/session/create", r#"{"Behavior":"foo"}"#)
        .await;
    response.assert_status(400);
    assert_eq!(response.text().trim_end(), "Invalid Behavior setting 'foo'");
}

#[tokio::test]
async fn session_create_unregistered_node_is_400_not_404() {
    let registry = TestRegistry::new().await;
    let response = registry.put("/v1/session/create", r#"{"Node":"n2"}"#).await;
    response.assert_status(400);
    assert_eq!(response.text().trim_end(), "Missing node registration");
    let response = registry.put("/v1/session/create", r#"{"Node":""}"#).await;
    response.assert_status(400);
    assert_eq!(response.text().trim_end(), "Must provide Node");
}

#[tokio::test]
async fn session_create_on_another_registered_node() {
    let registry = TestRegistry::new().await;
    register(&registry, json!({"Node": "n2", "Address": "10.0.0.2"})).await;
    // n2 has no serfHealth check: the default NodeChecks fails, an empty list works.
    let response = registry.put("/v1/session/create", r#"{"Node":"n2"}"#).await;
    response.assert_status(400);
    assert_eq!(
        response.text().trim_end(),
        "Missing check 'serfHealth' registration"
    );
    let id = create(&registry, r#"{"Node":"n2","NodeChecks":[]}"#).await;
    let session = info(&registry, &id).await.unwrap();
    assert_eq!(session["Node"], "n2");
    assert_eq!(session["NodeChecks"], json!([]));
}

#[tokio::test]
async fn session_create_missing_or_critical_check_is_400() {
    let registry = TestRegistry::new().await;
    let response = registry
        .put("/v1/session/create", r#"{"Checks":["web"]}"#)
        .await;
    response.assert_status(400);
    assert_eq!(
        response.text().trim_end(),
        "Missing check 'web' registration"
    );

    register_check(&registry, "web", "critical").await;
    let response = registry
        .put(
            "/v1/session/create",
            r#"{"NodeChecks":["serfHealth","web"]}"#,
        )
        .await;
    response.assert_status(400);
    assert_eq!(
        response.text().trim_end(),
        "Check 'web' is in critical state"
    );
    assert!(list_ids(&registry, "/v1/session/list").await.is_empty());
}

#[tokio::test]
async fn session_create_checks_fixup_matches_consul() {
    let registry = TestRegistry::new().await;
    register_check(&registry, "web", "passing").await;
    let cases = [
        // An explicit empty Checks list removes the default node check.
        (r#"{"Checks":[]}"#, None, json!([])),
        // Checks equal to the default is dropped; NodeChecks keeps the default.
        (r#"{"Checks":["serfHealth"]}"#, None, json!(["serfHealth"])),
        // An empty NodeChecks drops the default Checks too.
        (r#"{"NodeChecks":[]}"#, None, json!([])),
        // Other Checks are kept beside the default NodeChecks.
        (
            r#"{"Checks":["web"]}"#,
            Some(json!(["web"])),
            json!(["serfHealth"]),
        ),
        (r#"{"NodeChecks":["web"]}"#, None, json!(["web"])),
        (r#"{"checks":null}"#, None, json!([])),
    ];
    for (body, checks, node_checks) in cases {
        let id = create(&registry, body).await;
        let session = info(&registry, &id).await.unwrap();
        assert_eq!(session.get("Checks").cloned(), checks, "{body}");
        assert_eq!(session["NodeChecks"], node_checks, "{body}");
    }
    let id = create(
        &registry,
        r#"{"NodeChecks":[],"ServiceChecks":[{"id":"web","namespace":""}]}"#,
    )
    .await;
    let session = info(&registry, &id).await.unwrap();
    assert_eq!(
        session["ServiceChecks"],
        json!([{"ID": "web", "Namespace": ""}])
    );
}

#[tokio::test]
async fn session_create_bad_json_is_400_and_changes_nothing() {
    let registry = TestRegistry::new().await;
    for (body, expected) in [
        ("{\"Name\":", "Request decode failed: "),
        (
            r#"{"TTL": 30}"#,
            "Request decode failed: json: cannot unmarshal number into Go struct field Session.TTL of type string",
        ),
        (
            r#"{"Checks": "serfHealth"}"#,
            "Request decode failed: json: cannot unmarshal string into Go struct field Session.Checks of type []types.CheckID",
        ),
        (
            r#"{"LockDelay": true}"#,
            "Request decode failed: json: cannot unmarshal bool into Go struct field Session.LockDelay of type time.Duration",
        ),
        (
            "[]",
            "Request decode failed: json: cannot unmarshal array into Go value of type structs.Session",
        ),
    ] {
        let response = registry.put("/v1/session/create", body).await;
        response.assert_status(400);
        assert!(
            response.text().starts_with(expected),
            "{body}: {:?}",
            response.text()
        );
    }
    assert!(list_ids(&registry, "/v1/session/list").await.is_empty());
}

#[tokio::test]
async fn session_create_huge_body_is_413_and_changes_nothing() {
    let registry = TestRegistry::new().await;
    let name = "x".repeat(3 * 1024 * 1024);
    let response = registry
        .put("/v1/session/create", format!(r#"{{"Name":"{name}"}}"#))
        .await;
    response.assert_status(413);
    assert!(list_ids(&registry, "/v1/session/list").await.is_empty());
}

#[tokio::test]
async fn session_create_in_another_datacenter_is_400() {
    let registry = TestRegistry::new().await;
    let response = registry.put("/v1/session/create?dc=dc2", "").await;
    response.assert_status(400);
    assert_eq!(response.text().trim_end(), "No path to datacenter");
    registry
        .put("/v1/session/create?dc=dc1", "")
        .await
        .assert_status(200);
    for uri in [
        "/v1/session/list?dc=dc2",
        "/v1/session/node/test-node?dc=dc2",
        &format!("/v1/session/info/{UNKNOWN_ID}?dc=dc2"),
    ] {
        registry.get(uri).await.assert_status(400);
    }
    registry
        .put(&format!("/v1/session/renew/{UNKNOWN_ID}?dc=dc2"), "")
        .await
        .assert_status(400);
    registry
        .put(&format!("/v1/session/destroy/{UNKNOWN_ID}?dc=dc2"), "")
        .await
        .assert_status(400);
}

#[tokio::test]
async fn session_wrong_method_is_405() {
    let registry = TestRegistry::new().await;
    registry.get("/v1/session/create").await.assert_status(405);
    registry
        .put("/v1/session/list", "")
        .await
        .assert_status(405);
}

// ---------------------------------------------------------------------------------------------
// Destroy, info, node, list, renew

#[tokio::test]
async fn session_destroy_removes_the_session_and_is_idempotent() {
    let registry = TestRegistry::new().await;
    let id = create(&registry, "").await;
    let response = registry.put(&format!("/v1/session/destroy/{id}"), "").await;
    response.assert_status(200);
    assert_eq!(response.json(), json!(true));
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert!(info(&registry, &id).await.is_none());
    // Unknown or already destroyed: still 200 true.
    let response = registry.put(&format!("/v1/session/destroy/{id}"), "").await;
    response.assert_status(200);
    assert_eq!(response.json(), json!(true));
    registry
        .put(&format!("/v1/session/destroy/{UNKNOWN_ID}"), "")
        .await
        .assert_status(200);
}

#[tokio::test]
async fn session_destroy_malformed_uuid_is_400() {
    let registry = TestRegistry::new().await;
    let malformed = "1".repeat(36);
    let response = registry
        .put(&format!("/v1/session/destroy/{malformed}"), "")
        .await;
    response.assert_status(400);
    assert!(
        response.text().starts_with("Invalid session ID"),
        "{}",
        response.text()
    );
    response.index();
    let response = registry.put("/v1/session/destroy/", "").await;
    response.assert_status(400);
    assert_eq!(response.text().trim_end(), "Missing session");
}

#[tokio::test]
async fn session_info_unknown_or_malformed_is_empty_list_with_index() {
    let registry = TestRegistry::new().await;
    for id in [UNKNOWN_ID.to_owned(), "1".repeat(36), "x".to_owned()] {
        let response = registry.get(&format!("/v1/session/info/{id}")).await;
        response.assert_status(200);
        assert_eq!(response.json(), json!([]));
        assert!(response.index() >= 1);
        assert_eq!(response.header("x-consul-knownleader"), Some("true"));
        assert_eq!(response.header("x-consul-lastcontact"), Some("0"));
    }
    let response = registry.get("/v1/session/info/").await;
    response.assert_status(400);
    assert_eq!(response.text().trim_end(), "Missing session");
}

#[tokio::test]
async fn session_info_accepts_uppercase_ids() {
    let registry = TestRegistry::new().await;
    let id = create(&registry, "").await;
    let session = info(&registry, &id.to_uppercase()).await.unwrap();
    assert_eq!(session["ID"], id);
}

#[tokio::test]
async fn session_renew_unknown_or_malformed_is_404_with_consul_text() {
    let registry = TestRegistry::new().await;
    for id in [UNKNOWN_ID.to_owned(), "1".repeat(36)] {
        let response = registry.put(&format!("/v1/session/renew/{id}"), "").await;
        response.assert_status(404);
        assert_eq!(
            response.text().trim_end(),
            format!("Session id '{id}' not found")
        );
        response.index();
    }
    registry
        .put("/v1/session/renew/", "")
        .await
        .assert_status(400);
}

#[tokio::test]
async fn session_renew_returns_the_session() {
    let registry = TestRegistry::new().await;
    let id = create(&registry, r#"{"behavior":"delete","ttl":"20s"}"#).await;
    let response = registry.put(&format!("/v1/session/renew/{id}"), "").await;
    response.assert_status(200);
    let list = response.json();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["ID"], id);
    assert_eq!(list[0]["Behavior"], "delete");
    assert_eq!(list[0]["TTL"], "20s");
    // A session without TTL renews too.
    let plain = create(&registry, "").await;
    registry
        .put(&format!("/v1/session/renew/{plain}"), "")
        .await
        .assert_status(200);
}

#[tokio::test]
async fn session_renew_does_not_move_the_sessions_index() {
    let registry = TestRegistry::new().await;
    let id = create(&registry, r#"{"TTL":"10s"}"#).await;
    let before = registry.get("/v1/session/list").await.index();
    let modify_before = info(&registry, &id).await.unwrap()["ModifyIndex"].clone();
    for _ in 0..3 {
        registry
            .put(&format!("/v1/session/renew/{id}"), "")
            .await
            .assert_status(200);
    }
    assert_eq!(registry.get("/v1/session/list").await.index(), before);
    assert_eq!(
        info(&registry, &id).await.unwrap()["ModifyIndex"],
        modify_before
    );
}

#[tokio::test]
async fn session_node_lists_the_nodes_sessions_by_name_or_id() {
    let registry = TestRegistry::new().await;
    register(&registry, json!({"Node": "n2", "Address": "10.0.0.2"})).await;
    let mine = create(&registry, "").await;
    let other = create(&registry, r#"{"Node":"n2","Checks":[]}"#).await;
    assert_eq!(
        list_ids(&registry, &format!("/v1/session/node/{NODE}")).await,
        vec![mine.clone()]
    );
    assert_eq!(
        list_ids(&registry, "/v1/session/node/n2").await,
        vec![other.clone()]
    );
    assert!(
        list_ids(&registry, "/v1/session/node/nobody")
            .await
            .is_empty()
    );
    let node = registry.get("/v1/catalog/node/n2").await;
    node.assert_status(200);
    let node_id = node.json()["Node"]["ID"].as_str().unwrap().to_owned();
    assert_eq!(
        list_ids(&registry, &format!("/v1/session/node/{node_id}")).await,
        vec![other]
    );
    let response = registry.get("/v1/session/node/").await;
    response.assert_status(400);
    assert_eq!(response.text().trim_end(), "Missing node name");
}

#[tokio::test]
async fn session_list_returns_every_session_and_moves_its_index() {
    let registry = TestRegistry::new().await;
    let empty = registry.get("/v1/session/list").await;
    empty.assert_status(200);
    assert_eq!(empty.json(), json!([]));
    let a = create(&registry, "").await;
    let after_a = registry.get("/v1/session/list").await.index();
    let b = create(&registry, "").await;
    let mut ids = list_ids(&registry, "/v1/session/list").await;
    ids.sort();
    let mut expected = vec![a.clone(), b.clone()];
    expected.sort();
    assert_eq!(ids, expected);
    let after_b = registry.get("/v1/session/list").await.index();
    assert!(after_b > after_a);
    // KV writes do not move the sessions index.
    kv_put(&registry, "/v1/kv/unrelated", "x").await;
    assert_eq!(registry.get("/v1/session/list").await.index(), after_b);
}

// ---------------------------------------------------------------------------------------------
// Blocking queries

#[tokio::test]
async fn session_list_blocking_returns_promptly_after_a_create() {
    let registry = Arc::new(TestRegistry::new().await);
    let index = registry.get("/v1/session/list").await.index();
    let waiter = {
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            let started = Instant::now();
            let response = registry
                .get(&format!("/v1/session/list?index={index}&wait=10s"))
                .await;
            (response, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let id = create(&registry, "").await;
    let (response, elapsed) = waiter.await.unwrap();
    response.assert_status(200);
    assert!(response.index() > index);
    assert_eq!(response.json()[0]["ID"], id);
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn session_info_blocking_times_out_with_the_same_index() {
    let registry = TestRegistry::new().await;
    let id = create(&registry, "").await;
    let index = registry
        .get(&format!("/v1/session/info/{id}"))
        .await
        .index();
    let started = Instant::now();
    let response = registry
        .get(&format!("/v1/session/info/{id}?index={index}&wait=200ms"))
        .await;
    response.assert_status(200);
    assert_eq!(response.index(), index);
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn session_info_blocking_wakes_when_the_session_is_destroyed() {
    let registry = Arc::new(TestRegistry::new().await);
    let id = create(&registry, "").await;
    let index = registry
        .get(&format!("/v1/session/info/{id}"))
        .await
        .index();
    let waiter = {
        let registry = Arc::clone(&registry);
        let id = id.clone();
        tokio::spawn(async move {
            registry
                .get(&format!("/v1/session/info/{id}?index={index}&wait=10s"))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    registry
        .put(&format!("/v1/session/destroy/{id}"), "")
        .await
        .assert_status(200);
    let response = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken")
        .unwrap();
    assert_eq!(response.json(), json!([]));
    assert!(response.index() > index);
}

#[tokio::test]
async fn session_blocking_bad_index_or_wait_is_400() {
    let registry = TestRegistry::new().await;
    let response = registry.get("/v1/session/list?index=abc").await;
    response.assert_status(400);
    assert_eq!(response.text().trim_end(), "Invalid index");
    let response = registry.get("/v1/session/list?index=1&wait=soon").await;
    response.assert_status(400);
    assert_eq!(response.text().trim_end(), "Invalid wait time");
}

// ---------------------------------------------------------------------------------------------
// Namespaces

#[tokio::test]
async fn session_namespaces_separate_sessions_and_star_spans_them() {
    let registry = TestRegistry::new().await;
    let default = create(&registry, "").await;
    let response = registry.put("/v1/session/create?ns=team-a", "").await;
    response.assert_status(200);
    let team = response.json()["ID"].as_str().unwrap().to_owned();
    let response = registry
        .request(
            Method::PUT,
            "/v1/session/create",
            &[("X-Registry-Namespace", "team-b")],
            Body::empty(),
        )
        .await;
    response.assert_status(200);
    let team_b = response.json()["ID"].as_str().unwrap().to_owned();

    assert_eq!(
        list_ids(&registry, "/v1/session/list").await,
        vec![default.clone()]
    );
    assert_eq!(
        list_ids(&registry, "/v1/session/list?ns=team-a").await,
        vec![team.clone()]
    );
    let mut all = list_ids(&registry, "/v1/session/list?ns=*").await;
    all.sort();
    let mut expected = vec![default.clone(), team.clone(), team_b.clone()];
    expected.sort();
    assert_eq!(all, expected);
    let mut on_node = list_ids(&registry, &format!("/v1/session/node/{NODE}?ns=*")).await;
    on_node.sort();
    assert_eq!(on_node, expected);

    // The session belongs to its namespace only.
    assert!(info(&registry, &team).await.is_none());
    let response = registry
        .get(&format!("/v1/session/info/{team}?ns=team-a"))
        .await;
    assert_eq!(response.json()[0]["Namespace"], "team-a");
    registry
        .put(&format!("/v1/session/renew/{team}"), "")
        .await
        .assert_status(404);
    registry
        .put(&format!("/v1/session/destroy/{team}"), "")
        .await
        .assert_status(200);
    assert_eq!(
        list_ids(&registry, "/v1/session/list?ns=team-a").await,
        vec![team.clone()]
    );
    registry
        .put(&format!("/v1/session/destroy/{team}?ns=team-a"), "")
        .await
        .assert_status(200);
    assert!(
        list_ids(&registry, "/v1/session/list?ns=team-a")
            .await
            .is_empty()
    );

    // A wildcard or malformed namespace cannot be written to.
    registry
        .put("/v1/session/create?ns=*", "")
        .await
        .assert_status(400);
    registry
        .put("/v1/session/create?ns=a/b", "")
        .await
        .assert_status(400);
}

// ---------------------------------------------------------------------------------------------
// TTL expiry (manual clock)

#[tokio::test]
async fn session_ttl_expires_not_before_ttl_and_within_a_second_after() {
    let mut registry = TestRegistry::new().await;
    registry.start_tasks();
    let id = create(&registry, r#"{"TTL":"10s"}"#).await;
    registry.advance(Duration::from_millis(9_999));
    settle().await;
    assert!(
        info(&registry, &id).await.is_some(),
        "expired before its TTL"
    );
    registry.advance(Duration::from_millis(1));
    assert!(
        eventually(Duration::from_secs(1), || async {
            info(&registry, &id).await.is_none()
        })
        .await,
        "not invalidated at its TTL"
    );
}

#[tokio::test]
async fn session_renew_extends_ttl() {
    let mut registry = TestRegistry::new().await;
    registry.start_tasks();
    let id = create(&registry, r#"{"TTL":"10s"}"#).await;
    registry.advance(Duration::from_secs(6));
    registry
        .put(&format!("/v1/session/renew/{id}"), "")
        .await
        .assert_status(200);
    // 12 s after create, 6 s after the renew.
    registry.advance(Duration::from_secs(6));
    settle().await;
    assert!(info(&registry, &id).await.is_some(), "renew did not extend");
    registry.advance(Duration::from_millis(3_999));
    settle().await;
    assert!(info(&registry, &id).await.is_some());
    registry.advance(Duration::from_millis(1));
    assert!(
        eventually(Duration::from_secs(1), || async {
            info(&registry, &id).await.is_none()
        })
        .await
    );
    registry
        .put(&format!("/v1/session/renew/{id}"), "")
        .await
        .assert_status(404);
}

#[tokio::test]
async fn session_renew_after_the_deadline_is_404_even_before_reaping() {
    // No background tasks: the deadline passes but nothing reaps it.
    let registry = TestRegistry::new().await;
    let id = create(&registry, r#"{"TTL":"10s"}"#).await;
    registry.advance(Duration::from_secs(10));
    registry
        .put(&format!("/v1/session/renew/{id}"), "")
        .await
        .assert_status(404);
}

#[tokio::test]
async fn session_ttl_expiry_applies_behavior_and_lock_delay() {
    let mut registry = TestRegistry::new().await;
    registry.start_tasks();
    let release = create(&registry, r#"{"TTL":"10s","LockDelay":"5s"}"#).await;
    let delete = create(&registry, r#"{"TTL":"10s","Behavior":"delete"}"#).await;
    assert_eq!(
        kv_put(&registry, &format!("/v1/kv/a?acquire={release}"), "1").await,
        json!(true)
    );
    assert_eq!(
        kv_put(&registry, &format!("/v1/kv/b?acquire={delete}"), "2").await,
        json!(true)
    );
    registry.advance(Duration::from_secs(10));
    assert!(
        eventually(Duration::from_secs(1), || async {
            info(&registry, &release).await.is_none() && info(&registry, &delete).await.is_none()
        })
        .await
    );
    let a = kv_entry(&registry, "a").await.expect("released key kept");
    assert!(a.get("Session").is_none());
    assert!(kv_entry(&registry, "b").await.is_none(), "delete behavior");
    let other = create(&registry, "").await;
    assert_eq!(
        kv_put(&registry, &format!("/v1/kv/a?acquire={other}"), "").await,
        json!(false)
    );
    registry.advance(Duration::from_secs(5));
    assert_eq!(
        kv_put(&registry, &format!("/v1/kv/a?acquire={other}"), "").await,
        json!(true)
    );
}

// ---------------------------------------------------------------------------------------------
// Invalidation: destroy, checks, node

#[tokio::test]
async fn session_destroy_release_behavior_keeps_key_and_sets_lock_delay() {
    let registry = TestRegistry::new().await;
    let holder = create(&registry, "").await;
    let other = create(&registry, "").await;
    assert_eq!(
        kv_put(&registry, &format!("/v1/kv/lock?acquire={holder}"), "v").await,
        json!(true)
    );
    let before = kv_entry(&registry, "lock").await.unwrap();
    assert_eq!(before["Session"], holder);
    assert_eq!(before["LockIndex"], 1);
    registry
        .put(&format!("/v1/session/destroy/{holder}"), "")
        .await
        .assert_status(200);
    let after = kv_entry(&registry, "lock").await.expect("key kept");
    assert!(after.get("Session").is_none());
    assert_eq!(after["LockIndex"], 1);
    assert_eq!(after["Value"], before["Value"]);
    assert!(after["ModifyIndex"].as_u64() > before["ModifyIndex"].as_u64());
    // The default lock-delay is 15 s.
    assert_eq!(
        kv_put(&registry, &format!("/v1/kv/lock?acquire={other}"), "").await,
        json!(false)
    );
    registry.advance(Duration::from_millis(14_999));
    assert_eq!(
        kv_put(&registry, &format!("/v1/kv/lock?acquire={other}"), "").await,
        json!(false)
    );
    registry.advance(Duration::from_millis(1));
    assert_eq!(
        kv_put(&registry, &format!("/v1/kv/lock?acquire={other}"), "").await,
        json!(true)
    );
    assert_eq!(kv_entry(&registry, "lock").await.unwrap()["LockIndex"], 2);
}

#[tokio::test]
async fn session_destroy_delete_behavior_removes_keys() {
    let registry = TestRegistry::new().await;
    let holder = create(&registry, r#"{"Behavior":"delete"}"#).await;
    for key in ["x/1", "x/2"] {
        assert_eq!(
            kv_put(&registry, &format!("/v1/kv/{key}?acquire={holder}"), "v").await,
            json!(true)
        );
    }
    kv_put(&registry, "/v1/kv/x/3", "unlocked").await;
    registry
        .put(&format!("/v1/session/destroy/{holder}"), "")
        .await
        .assert_status(200);
    assert!(kv_entry(&registry, "x/1").await.is_none());
    assert!(kv_entry(&registry, "x/2").await.is_none());
    assert!(kv_entry(&registry, "x/3").await.is_some());
}

#[tokio::test]
async fn session_lock_delay_is_capped_at_sixty_seconds() {
    let registry = TestRegistry::new().await;
    let holder = create(&registry, r#"{"LockDelay":"10m"}"#).await;
    let other = create(&registry, "").await;
    kv_put(&registry, &format!("/v1/kv/k?acquire={holder}"), "").await;
    registry
        .put(&format!("/v1/session/destroy/{holder}"), "")
        .await
        .assert_status(200);
    registry.advance(Duration::from_millis(59_999));
    assert_eq!(
        kv_put(&registry, &format!("/v1/kv/k?acquire={other}"), "").await,
        json!(false)
    );
    registry.advance(Duration::from_millis(1));
    assert_eq!(
        kv_put(&registry, &format!("/v1/kv/k?acquire={other}"), "").await,
        json!(true)
    );
}

#[tokio::test]
async fn session_zero_lock_delay_sets_none() {
    let registry = TestRegistry::new().await;
    let holder = create(&registry, r#"{"LockDelay":0}"#).await;
    let other = create(&registry, "").await;
    kv_put(&registry, &format!("/v1/kv/k?acquire={holder}"), "").await;
    registry
        .put(&format!("/v1/session/destroy/{holder}"), "")
        .await
        .assert_status(200);
    assert_eq!(
        kv_put(&registry, &format!("/v1/kv/k?acquire={other}"), "").await,
        json!(true)
    );
}

/// The revisions of session `id`'s lock records, by stored key.
async fn lock_records(registry: &TestRegistry, id: &str) -> Vec<(String, u64)> {
    use storage::StorageExt;
    let prefix = format!("registry/session-locks/{id}/");
    let scanned = registry
        .storage
        .scan_prefix(prefix.as_bytes())
        .await
        .unwrap();
    scanned
        .kvs
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(&kv.key).into_owned(),
                kv.mod_revision,
            )
        })
        .collect()
}

#[tokio::test]
async fn session_reacquire_after_release_writes_only_the_entry() {
    let registry = TestRegistry::new().await;
    let holder = create(&registry, "").await;
    let acquire = format!("/v1/kv/lock?acquire={holder}");
    let release = format!("/v1/kv/lock?release={holder}");
    assert_eq!(kv_put(&registry, &acquire, "v").await, json!(true));
    let recorded = lock_records(&registry, &holder).await;
    assert_eq!(recorded.len(), 1);
    for _ in 0..3 {
        assert_eq!(kv_put(&registry, &release, "v").await, json!(true));
        assert_eq!(kv_put(&registry, &acquire, "v").await, json!(true));
    }
    // The lock record written by the first acquire stays, untouched.
    assert_eq!(lock_records(&registry, &holder).await, recorded);
    let entry = kv_entry(&registry, "lock").await.unwrap();
    assert_eq!(entry["Session"], holder);
    assert_eq!(entry["LockIndex"], 4);
    assert!(entry.get("LockRecord").is_none() && entry.as_object().unwrap().len() == 7);
}

#[tokio::test]
async fn session_destroy_after_release_leaves_the_key_alone() {
    let registry = TestRegistry::new().await;
    let holder = create(&registry, "").await;
    let other = create(&registry, "").await;
    kv_put(&registry, &format!("/v1/kv/lock?acquire={holder}"), "v").await;
    kv_put(&registry, &format!("/v1/kv/lock?release={holder}"), "v").await;
    let released = kv_entry(&registry, "lock").await.unwrap();
    registry
        .put(&format!("/v1/session/destroy/{holder}"), "")
        .await
        .assert_status(200);
    assert_eq!(kv_entry(&registry, "lock").await.unwrap(), released);
    assert!(lock_records(&registry, &holder).await.is_empty());
    // No lock-delay: the destroyed session did not hold the key.
    assert_eq!(
        kv_put(&registry, &format!("/v1/kv/lock?acquire={other}"), "").await,
        json!(true)
    );
}

#[tokio::test]
async fn session_destroy_releases_a_key_acquired_again_after_a_release() {
    let registry = TestRegistry::new().await;
    let holder = create(&registry, "").await;
    for query in ["acquire", "release", "acquire"] {
        let uri = format!("/v1/kv/lock?{query}={holder}");
        assert_eq!(kv_put(&registry, &uri, "v").await, json!(true));
    }
    registry
        .put(&format!("/v1/session/destroy/{holder}"), "")
        .await
        .assert_status(200);
    let entry = kv_entry(&registry, "lock").await.unwrap();
    assert!(entry.get("Session").is_none());
    assert_eq!(entry["LockIndex"], 2);
    assert!(lock_records(&registry, &holder).await.is_empty());
}

#[tokio::test]
async fn kv_delete_removes_the_lock_record_of_a_released_key() {
    let registry = TestRegistry::new().await;
    let holder = create(&registry, "").await;
    kv_put(&registry, &format!("/v1/kv/lock?acquire={holder}"), "v").await;
    kv_put(&registry, &format!("/v1/kv/lock?release={holder}"), "v").await;
    registry.delete("/v1/kv/lock").await.assert_status(200);
    assert!(lock_records(&registry, &holder).await.is_empty());
    // Created again, the key has no record of the session: acquiring writes a new one.
    kv_put(&registry, &format!("/v1/kv/lock?acquire={holder}"), "v").await;
    assert_eq!(lock_records(&registry, &holder).await.len(), 1);
}

#[tokio::test]
async fn session_check_going_critical_invalidates_it() {
    let registry = TestRegistry::new().await;
    register_check(&registry, "web", "passing").await;
    let bound = create(&registry, r#"{"Checks":["web"]}"#).await;
    let unbound = create(&registry, "").await;
    kv_put(&registry, &format!("/v1/kv/lock?acquire={bound}"), "v").await;
    register_check(&registry, "web", "warning").await;
    assert!(
        info(&registry, &bound).await.is_some(),
        "warning keeps sessions"
    );
    register_check(&registry, "web", "critical").await;
    assert!(
        info(&registry, &bound).await.is_none(),
        "critical check invalidates"
    );
    assert!(info(&registry, &unbound).await.is_some());
    let entry = kv_entry(&registry, "lock").await.unwrap();
    assert!(entry.get("Session").is_none());
}

#[tokio::test]
async fn session_check_deregistered_invalidates_it() {
    let registry = TestRegistry::new().await;
    register_check(&registry, "web", "passing").await;
    let bound = create(&registry, r#"{"NodeChecks":["serfHealth","web"]}"#).await;
    registry
        .put(
            "/v1/catalog/deregister",
            json!({"Node": NODE, "CheckID": "web"}).to_string(),
        )
        .await
        .assert_status(200);
    assert!(info(&registry, &bound).await.is_none());
}

#[tokio::test]
async fn session_node_deregistered_invalidates_its_sessions() {
    let registry = TestRegistry::new().await;
    register(&registry, json!({"Node": "n2", "Address": "10.0.0.2"})).await;
    let on_n2 = create(&registry, r#"{"Node":"n2","Checks":[]}"#).await;
    let mine = create(&registry, "").await;
    registry
        .put("/v1/catalog/deregister", json!({"Node": "n2"}).to_string())
        .await
        .assert_status(200);
    assert!(info(&registry, &on_n2).await.is_none());
    assert!(info(&registry, &mine).await.is_some());
}

// ---------------------------------------------------------------------------------------------
// Restart survival

#[tokio::test]
async fn session_ttl_survives_a_crash_restart() {
    let mut first = TestRegistry::new().await;
    first.start_tasks();
    let id = create(&first, r#"{"TTL":"10s"}"#).await;
    let storage = Arc::clone(&first.storage);
    let clock = first.clock.clone();
    drop(first); // no final checkpoint: a crash

    let mut second = TestRegistry::open(storage, clock, test_config()).await;
    second.start_tasks();
    second.advance(Duration::from_millis(9_999));
    settle().await;
    assert!(
        info(&second, &id).await.is_some(),
        "expired early after restart"
    );
    second.advance(Duration::from_millis(1));
    assert!(
        eventually(Duration::from_secs(1), || async {
            info(&second, &id).await.is_none()
        })
        .await,
        "TTL lost across restart"
    );
}

#[tokio::test]
async fn session_renewed_ttl_survives_a_crash_restart_never_early() {
    let mut first = TestRegistry::new().await;
    first.start_tasks();
    let id = create(&first, r#"{"TTL":"10s"}"#).await;
    first.advance(Duration::from_secs(5));
    first
        .put(&format!("/v1/session/renew/{id}"), "")
        .await
        .assert_status(200);
    let storage = Arc::clone(&first.storage);
    let clock = first.clock.clone();
    drop(first);

    let mut second = TestRegistry::open(storage, clock, test_config()).await;
    second.start_tasks();
    // The renew moved the deadline to create + 15 s.
    second.advance(Duration::from_millis(9_999));
    settle().await;
    assert!(
        info(&second, &id).await.is_some(),
        "renewal lost across a crash"
    );
    second.advance(Duration::from_millis(1));
    assert!(
        eventually(Duration::from_secs(1), || async {
            info(&second, &id).await.is_none()
        })
        .await
    );
}

#[tokio::test]
async fn session_ttl_after_clean_shutdown_is_exact() {
    let mut first = TestRegistry::new().await;
    first.start_tasks();
    let id = create(&first, r#"{"TTL":"10s"}"#).await;
    first.advance(Duration::from_secs(1));
    settle().await;
    for _ in 0..3 {
        first.advance(Duration::from_secs(1));
        first
            .put(&format!("/v1/session/renew/{id}"), "")
            .await
            .assert_status(200);
    }
    // Last renew at create + 4 s: the deadline is create + 14 s.
    first.stop_tasks().await;
    let storage = Arc::clone(&first.storage);
    let clock = first.clock.clone();
    drop(first);

    let mut second = TestRegistry::open(storage, clock, test_config()).await;
    second.start_tasks();
    second.advance(Duration::from_millis(9_999));
    settle().await;
    assert!(info(&second, &id).await.is_some());
    second.advance(Duration::from_millis(1));
    assert!(
        eventually(Duration::from_secs(1), || async {
            info(&second, &id).await.is_none()
        })
        .await,
        "a clean shutdown must keep the exact deadline"
    );
}

#[tokio::test]
async fn session_lock_delay_survives_a_restart() {
    let first = TestRegistry::new().await;
    let holder = create(&first, "").await;
    kv_put(&first, &format!("/v1/kv/lock?acquire={holder}"), "").await;
    first
        .put(&format!("/v1/session/destroy/{holder}"), "")
        .await
        .assert_status(200);
    let storage = Arc::clone(&first.storage);
    let clock = first.clock.clone();
    drop(first);

    let second = TestRegistry::open(storage, clock, test_config()).await;
    let other = create(&second, "").await;
    assert_eq!(
        kv_put(&second, &format!("/v1/kv/lock?acquire={other}"), "").await,
        json!(false)
    );
    second.advance(Duration::from_secs(15));
    assert_eq!(
        kv_put(&second, &format!("/v1/kv/lock?acquire={other}"), "").await,
        json!(true)
    );
}
