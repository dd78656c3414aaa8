//! API tests for `/v1/kv/*`: Consul's entry shape, flags, raw, recurse, keys and separator,
//! check-and-set, acquire/release semantics (docs/design.md §U8), lock-delays, blocking reads, and bad
//! input.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use support::TestRegistry;

async fn create_session(registry: &TestRegistry, body: &str) -> String {
    let response = registry.put("/v1/session/create", body.to_owned()).await;
    response.assert_status(200);
    response.json()["ID"].as_str().unwrap().to_owned()
}

/// PUT and the JSON `true`/`false` it answers.
async fn put(registry: &TestRegistry, uri: &str, body: &str) -> bool {
    let response = registry.put(uri, body.to_owned()).await;
    response.assert_status(200);
    assert_eq!(response.header("content-type"), Some("application/json"));
    response.json().as_bool().expect("true or false")
}

async fn delete(registry: &TestRegistry, uri: &str) -> bool {
    let response = registry.delete(uri).await;
    response.assert_status(200);
    response.json().as_bool().expect("true or false")
}

async fn entry(registry: &TestRegistry, key: &str) -> Option<Value> {
    let response = registry.get(&format!("/v1/kv/{key}")).await;
    match response.status.as_u16() {
        404 => None,
        200 => {
            let list = response.json();
            assert_eq!(list.as_array().unwrap().len(), 1);
            Some(list[0].clone())
        }
        other => panic!("GET {key}: {other} {}", response.text()),
    }
}

fn b64(text: &str) -> String {
    BASE64.encode(text)
}

// ---------------------------------------------------------------------------------------------
// Shapes

#[tokio::test]
async fn kv_put_then_get_has_consul_shape() {
    let registry = TestRegistry::new().await;
    assert!(put(&registry, "/v1/kv/web/config", "hello").await);
    let response = registry.get("/v1/kv/web/config").await;
    response.assert_status(200);
    let body = response.json();
    let entry = &body[0];
    let object = entry.as_object().unwrap();
    let mut fields: Vec<&str> = object.keys().map(String::as_str).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "CreateIndex",
            "Flags",
            "Key",
            "LockIndex",
            "ModifyIndex",
            "Value"
        ]
    );
    assert_eq!(entry["Key"], "web/config");
    assert_eq!(entry["Value"], b64("hello"));
    assert_eq!(entry["Flags"], 0);
    assert_eq!(entry["LockIndex"], 0);
    let modify = entry["ModifyIndex"].as_u64().unwrap();
    assert_eq!(entry["CreateIndex"], modify);
    assert_eq!(response.index(), modify);

    assert!(put(&registry, "/v1/kv/web/config", "again").await);
    let updated = self::entry(&registry, "web/config").await.unwrap();
    assert_eq!(updated["CreateIndex"], modify);
    assert!(updated["ModifyIndex"].as_u64().unwrap() > modify);
}

#[tokio::test]
async fn kv_missing_key_is_404_with_index_headers() {
    let registry = TestRegistry::new().await;
    let response = registry.get("/v1/kv/nothing/here").await;
    response.assert_status(404);
    assert!(response.body.is_empty());
    assert!(response.index() >= 1);
    assert_eq!(response.header("x-consul-knownleader"), Some("true"));
    let response = registry.get("/v1/kv/nothing?recurse").await;
    response.assert_status(404);
    response.index();
}

#[tokio::test]
async fn kv_empty_value_is_null() {
    let registry = TestRegistry::new().await;
    assert!(put(&registry, "/v1/kv/empty", "").await);
    assert_eq!(
        entry(&registry, "empty").await.unwrap()["Value"],
        Value::Null
    );
}

#[tokio::test]
async fn kv_flags_are_stored_and_validated() {
    let registry = TestRegistry::new().await;
    assert!(put(&registry, "/v1/kv/f?flags=3304740253564472344", "x").await);
    assert_eq!(
        entry(&registry, "f").await.unwrap()["Flags"],
        3_304_740_253_564_472_344u64
    );
    // A plain PUT without flags resets them, as in Consul.
    assert!(put(&registry, "/v1/kv/f", "y").await);
    assert_eq!(entry(&registry, "f").await.unwrap()["Flags"], 0);
    for bad in ["/v1/kv/f?flags=abc", "/v1/kv/f?flags=-1", "/v1/kv/f?cas=x"] {
        registry.put(bad, "z").await.assert_status(400);
    }
    assert_eq!(entry(&registry, "f").await.unwrap()["Value"], b64("y"));
}

/// Consul reads a query parameter with Go's `url.Values.Get`: the first value wins.
#[tokio::test]
async fn kv_repeated_query_parameters_read_as_their_first_value() {
    let registry = TestRegistry::new().await;
    assert!(put(&registry, "/v1/kv/f?flags=5&flags=7", "x").await);
    assert_eq!(entry(&registry, "f").await.unwrap()["Flags"], 5);
    registry
        .put("/v1/kv/f?flags=5&flags=abc", "x")
        .await
        .assert_status(200);
    registry
        .put("/v1/kv/f?flags=abc&flags=5", "x")
        .await
        .assert_status(400);
}

#[tokio::test]
async fn kv_raw_returns_the_bytes() {
    let registry = TestRegistry::new().await;
    let bytes: Vec<u8> = vec![0, 159, 146, 150, b'\n'];
    registry
        .put("/v1/kv/bin", bytes.clone())
        .await
        .assert_status(200);
    let response = registry.get("/v1/kv/bin?raw").await;
    response.assert_status(200);
    assert_eq!(response.body.as_ref(), bytes.as_slice());
    assert_eq!(response.header("content-type"), Some("text/plain"));
    assert_eq!(response.header("x-content-type-options"), Some("nosniff"));
    response.index();
    let response = registry.get("/v1/kv/bin?raw=true").await;
    assert_eq!(response.body.as_ref(), bytes.as_slice());
}

#[tokio::test]
async fn kv_keys_with_spaces_round_trip() {
    let registry = TestRegistry::new().await;
    assert!(put(&registry, "/v1/kv/a%20b/c:d", "v").await);
    assert_eq!(
        entry(&registry, "a%20b/c:d").await.unwrap()["Key"],
        "a b/c:d"
    );
}

#[tokio::test]
async fn kv_recurse_lists_the_prefix_in_order() {
    let registry = TestRegistry::new().await;
    for key in ["app/b", "app/a", "app/sub/c", "apple", "other"] {
        assert!(put(&registry, &format!("/v1/kv/{key}"), key).await);
    }
    let response = registry.get("/v1/kv/app/?recurse").await;
    response.assert_status(200);
    let keys: Vec<String> = response
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys, ["app/a", "app/b", "app/sub/c"]);
    let all = registry.get("/v1/kv/?recurse=true").await;
    all.assert_status(200);
    assert_eq!(all.json().as_array().unwrap().len(), 5);
    let prefix = registry.get("/v1/kv/app?recurse").await;
    assert_eq!(prefix.json().as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn kv_keys_lists_names_and_groups_by_separator() {
    let registry = TestRegistry::new().await;
    for key in ["app/a", "app/b", "app/sub/c", "app/sub/d", "top"] {
        assert!(put(&registry, &format!("/v1/kv/{key}"), "").await);
    }
    let response = registry.get("/v1/kv/app/?keys").await;
    response.assert_status(200);
    assert_eq!(
        response.json(),
        json!(["app/a", "app/b", "app/sub/c", "app/sub/d"])
    );
    let response = registry.get("/v1/kv/app/?keys=True&separator=/").await;
    assert_eq!(response.json(), json!(["app/a", "app/b", "app/sub/"]));
    let response = registry.get("/v1/kv/?keys&separator=/").await;
    assert_eq!(response.json(), json!(["app/", "top"]));
    // The historic misspelling works too.
    let response = registry.get("/v1/kv/?keys&seperator=/").await;
    assert_eq!(response.json(), json!(["app/", "top"]));
    // An empty prefix with no keys is not an error; a named one is a 404.
    registry.delete("/v1/kv/?recurse").await.assert_status(200);
    let response = registry.get("/v1/kv/?keys").await;
    response.assert_status(200);
    assert_eq!(response.json(), json!([]));
    registry.get("/v1/kv/app/?keys").await.assert_status(404);
}

#[tokio::test]
async fn kv_get_index_moves_only_when_the_key_changes() {
    let registry = TestRegistry::new().await;
    assert!(put(&registry, "/v1/kv/watched", "1").await);
    let index = registry.get("/v1/kv/watched").await.index();
    assert!(put(&registry, "/v1/kv/elsewhere", "1").await);
    create_session(&registry, "").await;
    assert_eq!(registry.get("/v1/kv/watched").await.index(), index);
    assert!(put(&registry, "/v1/kv/watched", "2").await);
    assert!(registry.get("/v1/kv/watched").await.index() > index);
}

// ---------------------------------------------------------------------------------------------
// CAS and delete

#[tokio::test]
async fn kv_cas_put_succeeds_only_on_a_matching_index() {
    let registry = TestRegistry::new().await;
    assert!(put(&registry, "/v1/kv/c?cas=0", "first").await);
    assert!(!put(&registry, "/v1/kv/c?cas=0", "second").await);
    let modify = entry(&registry, "c").await.unwrap()["ModifyIndex"]
        .as_u64()
        .unwrap();
    assert!(
        !put(
            &registry,
            &format!("/v1/kv/c?cas={}", modify + 100),
            "third"
        )
        .await
    );
    assert!(put(&registry, &format!("/v1/kv/c?cas={modify}"), "fourth").await);
    assert!(!put(&registry, &format!("/v1/kv/c?cas={modify}"), "fifth").await);
    assert_eq!(entry(&registry, "c").await.unwrap()["Value"], b64("fourth"));
    assert!(!put(&registry, "/v1/kv/new?cas=5", "x").await);
    assert!(entry(&registry, "new").await.is_none());
}

#[tokio::test]
async fn kv_delete_single_recursive_and_cas() {
    let registry = TestRegistry::new().await;
    for key in ["d/a", "d/b", "d/c/e", "keep"] {
        assert!(put(&registry, &format!("/v1/kv/{key}"), "v").await);
    }
    assert!(delete(&registry, "/v1/kv/d/a").await);
    assert!(entry(&registry, "d/a").await.is_none());
    assert!(
        delete(&registry, "/v1/kv/d/a").await,
        "missing key deletes fine"
    );
    let modify = entry(&registry, "d/b").await.unwrap()["ModifyIndex"]
        .as_u64()
        .unwrap();
    assert!(!delete(&registry, &format!("/v1/kv/d/b?cas={}", modify + 1)).await);
    assert!(delete(&registry, &format!("/v1/kv/d/b?cas={modify}")).await);
    assert!(entry(&registry, "d/b").await.is_none());
    assert!(delete(&registry, "/v1/kv/d?recurse").await);
    assert!(entry(&registry, "d/c/e").await.is_none());
    assert!(entry(&registry, "keep").await.is_some());
    let response = registry.delete("/v1/kv/keep?recurse&cas=1").await;
    response.assert_status(400);
    assert!(response.text().starts_with("Conflicting flags"));
}

#[tokio::test]
async fn kv_missing_key_name_is_400() {
    let registry = TestRegistry::new().await;
    for response in [
        registry.put("/v1/kv/", "x").await,
        registry.get("/v1/kv/").await,
        registry.delete("/v1/kv/").await,
    ] {
        response.assert_status(400);
        assert_eq!(response.text().trim_end(), "Missing key name");
    }
}

// ---------------------------------------------------------------------------------------------
// Acquire and release

#[tokio::test]
async fn kv_acquire_and_release_follow_consul() {
    let registry = TestRegistry::new().await;
    let s1 = create_session(&registry, "").await;
    let s2 = create_session(&registry, "").await;

    // New key: LockIndex 1, Session set.
    assert!(put(&registry, &format!("/v1/kv/lock?acquire={s1}"), "one").await);
    let held = entry(&registry, "lock").await.unwrap();
    assert_eq!(held["LockIndex"], 1);
    assert_eq!(held["Session"], s1);
    assert_eq!(held["Value"], b64("one"));

    // The holder re-acquires: value updated, LockIndex unchanged.
    assert!(
        put(
            &registry,
            &format!("/v1/kv/lock?acquire={s1}&flags=7"),
            "two"
        )
        .await
    );
    let held = entry(&registry, "lock").await.unwrap();
    assert_eq!(held["LockIndex"], 1);
    assert_eq!(held["Value"], b64("two"));
    assert_eq!(held["Flags"], 7);

    // Another session cannot take it, nor release it.
    assert!(!put(&registry, &format!("/v1/kv/lock?acquire={s2}"), "three").await);
    assert!(!put(&registry, &format!("/v1/kv/lock?release={s2}"), "").await);
    assert!(!put(&registry, "/v1/kv/lock?release=foo", "").await);
    assert_eq!(entry(&registry, "lock").await.unwrap()["Value"], b64("two"));

    // The holder releases: Session cleared, LockIndex kept, value from the body.
    assert!(put(&registry, &format!("/v1/kv/lock?release={s1}"), "released").await);
    let free = entry(&registry, "lock").await.unwrap();
    assert!(free.get("Session").is_none());
    assert_eq!(free["LockIndex"], 1);
    assert_eq!(free["Value"], b64("released"));

    // Release sets no lock-delay: the other session acquires at once, LockIndex + 1.
    assert!(put(&registry, &format!("/v1/kv/lock?acquire={s2}"), "").await);
    assert_eq!(entry(&registry, "lock").await.unwrap()["LockIndex"], 2);
}

#[tokio::test]
async fn kv_acquire_unknown_session_is_400() {
    let registry = TestRegistry::new().await;
    for session in ["foo", "6e3f2c1a-8b9d-4e5f-a1b2-c3d4e5f60718"] {
        let response = registry
            .put(&format!("/v1/kv/lock?acquire={session}"), "v")
            .await;
        response.assert_status(400);
        assert_eq!(
            response.text().trim_end(),
            format!("invalid session \"{session}\"")
        );
    }
    assert!(entry(&registry, "lock").await.is_none());
    let response = registry.put("/v1/kv/lock?acquire=", "v").await;
    response.assert_status(400);
    assert_eq!(response.text().trim_end(), "missing session");
}

#[tokio::test]
async fn kv_release_of_missing_key_is_false() {
    let registry = TestRegistry::new().await;
    let s1 = create_session(&registry, "").await;
    assert!(!put(&registry, &format!("/v1/kv/none?release={s1}"), "").await);
    assert!(entry(&registry, "none").await.is_none());
}

#[tokio::test]
async fn kv_conflicting_put_flags_are_400() {
    let registry = TestRegistry::new().await;
    let s1 = create_session(&registry, "").await;
    for uri in [
        format!("/v1/kv/k?cas=0&acquire={s1}"),
        format!("/v1/kv/k?acquire={s1}&release={s1}"),
    ] {
        let response = registry.put(&uri, "v").await;
        response.assert_status(400);
        assert!(response.text().starts_with("Conflicting flags: "));
    }
    assert!(entry(&registry, "k").await.is_none());
}

#[tokio::test]
async fn kv_plain_writes_ignore_and_keep_locks() {
    let registry = TestRegistry::new().await;
    let s1 = create_session(&registry, "").await;
    let s2 = create_session(&registry, "").await;
    assert!(put(&registry, &format!("/v1/kv/lock?acquire={s1}"), "v").await);
    // Locks are advisory: a plain PUT succeeds and keeps Session and LockIndex.
    assert!(put(&registry, "/v1/kv/lock", "overwritten").await);
    let held = entry(&registry, "lock").await.unwrap();
    assert_eq!(held["Session"], s1);
    assert_eq!(held["LockIndex"], 1);
    // A plain DELETE removes the key and sets no lock-delay.
    assert!(delete(&registry, "/v1/kv/lock").await);
    assert!(put(&registry, &format!("/v1/kv/lock?acquire={s2}"), "").await);
    assert_eq!(entry(&registry, "lock").await.unwrap()["LockIndex"], 1);
    // Destroying s1 now leaves s2's lock alone.
    registry
        .put(&format!("/v1/session/destroy/{s1}"), "")
        .await
        .assert_status(200);
    assert_eq!(entry(&registry, "lock").await.unwrap()["Session"], s2);
}

#[tokio::test]
async fn kv_lock_delay_blocks_acquire_then_expires() {
    let registry = TestRegistry::new().await;
    let s1 = create_session(&registry, r#"{"LockDelay":"3s"}"#).await;
    let s2 = create_session(&registry, "").await;
    assert!(put(&registry, &format!("/v1/kv/lock?acquire={s1}"), "").await);
    registry
        .put(&format!("/v1/session/destroy/{s1}"), "")
        .await
        .assert_status(200);
    assert!(!put(&registry, &format!("/v1/kv/lock?acquire={s2}"), "").await);
    // Lock-delay is checked before the session: even an unknown session gets `false`.
    assert!(
        !put(
            &registry,
            "/v1/kv/lock?acquire=6e3f2c1a-8b9d-4e5f-a1b2-c3d4e5f60718",
            ""
        )
        .await
    );
    registry.advance(Duration::from_millis(2_999));
    assert!(!put(&registry, &format!("/v1/kv/lock?acquire={s2}"), "").await);
    registry.advance(Duration::from_millis(1));
    assert!(put(&registry, &format!("/v1/kv/lock?acquire={s2}"), "").await);
    // Plain writes are never delayed.
    assert!(put(&registry, "/v1/kv/lock", "plain").await);
}

// ---------------------------------------------------------------------------------------------
// Blocking reads

#[tokio::test]
async fn kv_blocking_get_returns_promptly_after_a_put() {
    let registry = Arc::new(TestRegistry::new().await);
    assert!(put(&registry, "/v1/kv/watched", "1").await);
    let index = registry.get("/v1/kv/watched").await.index();
    let waiter = {
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            let started = Instant::now();
            let response = registry
                .get(&format!("/v1/kv/watched?index={index}&wait=10s"))
                .await;
            (response, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(put(&registry, "/v1/kv/watched", "2").await);
    let (response, elapsed) = waiter.await.unwrap();
    response.assert_status(200);
    assert!(response.index() > index);
    assert_eq!(response.json()[0]["Value"], b64("2"));
    assert!(elapsed >= Duration::from_millis(90), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn kv_blocking_get_times_out_with_the_same_index() {
    let registry = TestRegistry::new().await;
    assert!(put(&registry, "/v1/kv/still", "1").await);
    let index = registry.get("/v1/kv/still").await.index();
    let started = Instant::now();
    let response = registry
        .get(&format!("/v1/kv/still?index={index}&wait=200ms"))
        .await;
    response.assert_status(200);
    assert_eq!(response.index(), index);
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn kv_blocking_get_on_a_missing_key_wakes_when_it_is_created() {
    let registry = Arc::new(TestRegistry::new().await);
    let missing = registry.get("/v1/kv/later").await;
    missing.assert_status(404);
    let index = missing.index();
    let waiter = {
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            registry
                .get(&format!("/v1/kv/later?index={index}&wait=10s"))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(put(&registry, "/v1/kv/later", "now").await);
    let response = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken")
        .unwrap();
    response.assert_status(200);
    assert!(response.index() > index);
}

#[tokio::test]
async fn kv_blocking_recurse_wakes_on_a_write_under_the_prefix() {
    let registry = Arc::new(TestRegistry::new().await);
    assert!(put(&registry, "/v1/kv/dir/a", "1").await);
    let index = registry.get("/v1/kv/dir/?recurse").await.index();
    let waiter = {
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            registry
                .get(&format!("/v1/kv/dir/?recurse&index={index}&wait=10s"))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(put(&registry, "/v1/kv/dir/b", "2").await);
    let response = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken")
        .unwrap();
    assert_eq!(response.json().as_array().unwrap().len(), 2);
}

// ---------------------------------------------------------------------------------------------
// Bad input

#[tokio::test]
async fn kv_value_over_512_kib_is_413_and_not_stored() {
    let registry = TestRegistry::new().await;
    let response = registry.put("/v1/kv/big", vec![b'x'; 512 * 1024 + 1]).await;
    response.assert_status(413);
    assert!(entry(&registry, "big").await.is_none());
    registry
        .put("/v1/kv/big", vec![b'x'; 512 * 1024])
        .await
        .assert_status(200);
}

#[tokio::test]
async fn kv_other_datacenter_and_wildcard_namespace_are_400() {
    let registry = TestRegistry::new().await;
    registry
        .put("/v1/kv/k?dc=dc2", "v")
        .await
        .assert_status(400);
    registry.get("/v1/kv/k?dc=dc2").await.assert_status(400);
    registry.put("/v1/kv/k?ns=*", "v").await.assert_status(400);
    assert!(entry(&registry, "k").await.is_none());
}

#[tokio::test]
async fn kv_namespaces_are_separate() {
    let registry = TestRegistry::new().await;
    assert!(put(&registry, "/v1/kv/shared?ns=team-a", "a").await);
    assert!(entry(&registry, "shared").await.is_none());
    let response = registry.get("/v1/kv/shared?ns=team-a").await;
    response.assert_status(200);
    assert_eq!(response.json()[0]["Value"], b64("a"));
}

#[tokio::test]
async fn kv_wrong_method_is_405() {
    let registry = TestRegistry::new().await;
    registry
        .request(http::Method::POST, "/v1/kv/k", &[], "v")
        .await
        .assert_status(405);
}

// ---------------------------------------------------------------------------------------------
// Invalidation racing acquires

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_acquires_racing_a_destroy_never_leave_a_dead_holder() {
    for _round in 0..5 {
        let registry = Arc::new(TestRegistry::new().await);
        let session = create_session(&registry, r#"{"LockDelay":0}"#).await;
        let mut acquires = Vec::new();
        for n in 0..20 {
            let registry = Arc::clone(&registry);
            let session = session.clone();
            acquires.push(tokio::spawn(async move {
                let response = registry
                    .put(&format!("/v1/kv/race/{n}?acquire={session}"), "v")
                    .await;
                // Before the destroy: true; after it: 400 invalid session.
                assert!(
                    matches!(response.status.as_u16(), 200 | 400),
                    "{}",
                    response.text()
                );
            }));
        }
        registry
            .put(&format!("/v1/session/destroy/{session}"), "")
            .await
            .assert_status(200);
        for acquire in acquires {
            acquire.await.unwrap();
        }
        let response = registry.get("/v1/kv/race/?recurse").await;
        if response.status.as_u16() == 200 {
            for entry in response.json().as_array().unwrap() {
                assert!(
                    entry.get("Session").is_none(),
                    "key {} still held by a destroyed session",
                    entry["Key"]
                );
            }
        }
    }
}

#[tokio::test]
async fn kv_invalidation_releases_keys_in_other_namespaces() {
    let registry = TestRegistry::new().await;
    let session = create_session(&registry, r#"{"LockDelay":0}"#).await;
    assert!(
        put(
            &registry,
            &format!("/v1/kv/lock?ns=team-a&acquire={session}"),
            "v"
        )
        .await
    );
    registry
        .put(&format!("/v1/session/destroy/{session}"), "")
        .await
        .assert_status(200);
    let response = registry.get("/v1/kv/lock?ns=team-a").await;
    response.assert_status(200);
    assert!(response.json()[0].get("Session").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_writers_of_one_key_all_succeed_and_the_last_write_is_read() {
    // Consul's plain PUT never fails for contention: writers of one hot key queue.
    let registry = Arc::new(TestRegistry::new().await);
    let writers: Vec<_> = (0..64)
        .map(|writer| {
            let registry = registry.clone();
            tokio::spawn(async move {
                for round in 0..20 {
                    let response = registry
                        .put("/v1/kv/hot", format!("{writer}-{round}"))
                        .await;
                    response.assert_status(200);
                    assert_eq!(response.json(), json!(true));
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let entry = entry(&registry, "hot").await.expect("the key");
    let value =
        String::from_utf8(BASE64.decode(entry["Value"].as_str().unwrap()).unwrap()).unwrap();
    assert!(value.ends_with("-19"), "{value}");
}
