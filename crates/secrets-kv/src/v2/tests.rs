//! kv version 2 through the `Engine` trait, over memory storage and a manual clock: every
//! path family, the answers' exact shapes, and the version lifecycle.

use std::collections::BTreeMap;
use std::sync::Arc;

use secrets_sdk::testing::MemEngineStorage;
use secrets_sdk::{Engine, EngineConfig, EngineError, Operation, Request};
use serde_json::{Value, json};
use stdx::clock::ManualClock;

/// 2024-05-01T10:00:00Z.
const START_MS: i64 = 1_714_557_600_000;
const START: &str = "2024-05-01T10:00:00Z";

struct Kv {
    engine: Arc<dyn Engine>,
    storage: Arc<MemEngineStorage>,
    clock: ManualClock,
}

fn kv() -> Kv {
    kv_over(Arc::new(MemEngineStorage::default()))
}

fn kv_over(storage: Arc<MemEngineStorage>) -> Kv {
    let clock = ManualClock::new(START_MS);
    let engine = crate::factory(EngineConfig {
        mount_point: "secret/".to_owned(),
        storage: storage.clone(),
        options: BTreeMap::from([("version".to_owned(), "2".to_owned())]),
        clock: Arc::new(clock.clone()),
        passwords: Default::default(),
    })
    .unwrap();
    Kv {
        engine,
        storage,
        clock,
    }
}

impl Kv {
    /// One request, its outcome as data: `{"status": .., "data": .., "warnings": ..}` for an
    /// answer (the body of a raw one), `{"status": "none"}` for nothing to say, or
    /// `{"status": 400, "error": ".."}`.
    async fn call(&self, operation: Operation, path: &str, body: Value) -> Value {
        let data = body.as_object().cloned().unwrap_or_default();
        let outcome = self
            .engine
            .handle(Request::new(operation, path).with_data(data))
            .await;
        match outcome {
            Ok(None) => json!({"status": "none"}),
            Ok(Some(response)) => match response.raw {
                Some(raw) => {
                    let body = serde_json::from_slice(&raw.body).unwrap_or(Value::Null);
                    json!({"status": raw.status, "body": body})
                }
                None => json!({
                    "status": 200,
                    "data": response.data.map_or(Value::Null, Value::Object),
                    "warnings": response.warnings,
                }),
            },
            Err(err) => {
                let status = match err {
                    EngineError::BadRequest(_) => 400,
                    EngineError::UnsupportedOperation => 405,
                    _ => 500,
                };
                json!({"status": status, "error": err.to_string()})
            }
        }
    }

    async fn write(&self, path: &str, body: Value) -> Value {
        self.call(Operation::Update, path, body).await
    }

    async fn read(&self, path: &str) -> Value {
        self.call(Operation::Read, path, json!({})).await
    }

    /// Writes `data` to `data/<key>` and asserts it became version `expect_version`.
    async fn put(&self, key: &str, data: Value, expect_version: u64) {
        let answer = self
            .write(&format!("data/{key}"), json!({ "data": data }))
            .await;
        assert_eq!(answer["data"]["version"], expect_version, "{answer}");
    }
}

fn at(secs_after_start: i64) -> String {
    stdx::time::format_rfc3339_nanos((START_MS / 1000 + secs_after_start) * 1_000_000_000)
}

#[tokio::test]
async fn write_answers_the_new_versions_metadata() {
    let kv = kv();
    assert_eq!(
        kv.write(
            "data/app/db",
            json!({"data": {"user": "alice"}, "options": {}})
        )
        .await,
        json!({"status": 200, "warnings": [], "data": {
            "version": 1, "created_time": START, "deletion_time": "", "destroyed": false,
            "custom_metadata": null,
        }})
    );
}

#[tokio::test]
async fn read_returns_the_current_version_or_the_one_asked_for() {
    let kv = kv();
    kv.put("a", json!({"n": 1}), 1).await;
    kv.clock.advance_ms(1_500);
    kv.put("a", json!({"n": 2, "nested": {"x": [1, null]}}), 2)
        .await;
    assert_eq!(
        kv.read("data/a").await,
        json!({"status": 200, "warnings": [], "data": {
            "data": {"n": 2, "nested": {"x": [1, null]}},
            "metadata": {"version": 2, "created_time": "2024-05-01T10:00:01.5Z",
                         "deletion_time": "", "destroyed": false, "custom_metadata": null},
        }})
    );
    let first = kv
        .call(Operation::Read, "data/a", json!({"version": "1"}))
        .await;
    assert_eq!(first["data"]["data"], json!({"n": 1}));
    assert_eq!(first["data"]["metadata"]["version"], 1);
    assert_eq!(
        kv.call(Operation::Read, "data/a", json!({"version": 7}))
            .await,
        json!({"status": "none"})
    );
    assert_eq!(kv.read("data/missing").await, json!({"status": "none"}));
}

#[tokio::test]
async fn write_without_data_is_400_and_bad_fields_are_400() {
    let kv = kv();
    assert_eq!(
        kv.write("data/a", json!({"options": {}})).await,
        json!({"status": 400, "error": "no data provided"})
    );
    assert_eq!(
        kv.write("data/a", json!({"data": "x"})).await["status"],
        400
    );
    assert_eq!(
        kv.call(Operation::Read, "data/a", json!({"version": "abc"}))
            .await["status"],
        400
    );
    assert_eq!(
        kv.write("data/a", json!({"data": {}, "options": {"cas": [1]}}))
            .await,
        json!({"status": 400, "error": "error parsing check-and-set parameter"})
    );
}

#[tokio::test]
async fn check_and_set_must_match_the_current_version() {
    let kv = kv();
    let cas = |cas: Value| json!({"data": {"v": 1}, "options": {"cas": cas}});
    assert_eq!(
        kv.write("data/a", cas(json!(0))).await["data"]["version"],
        1
    );
    assert_eq!(
        kv.write("data/a", cas(json!(0))).await,
        json!({"status": 400, "error": "check-and-set parameter did not match the current version"})
    );
    assert_eq!(kv.write("data/a", cas(json!(-1))).await["status"], 400);
    assert_eq!(
        kv.write("data/a", cas(json!(1))).await["data"]["version"],
        2
    );
}

#[tokio::test]
async fn cas_required_by_the_mount_or_the_key_refuses_writes_without_cas() {
    let kv = kv();
    let required =
        json!({"status": 400, "error": "check-and-set parameter required for this call"});
    kv.write("metadata/k", json!({"cas_required": true})).await;
    assert_eq!(kv.write("data/k", json!({"data": {}})).await, required);
    assert_eq!(
        kv.write("data/other", json!({"data": {}})).await["status"],
        200
    );
    kv.write("config", json!({"cas_required": true})).await;
    assert_eq!(kv.write("data/other", json!({"data": {}})).await, required);
    assert_eq!(
        kv.write("data/other", json!({"data": {}, "options": {"cas": 1}}))
            .await["status"],
        200
    );
}

#[tokio::test]
async fn a_deleted_version_reads_404_with_its_metadata_until_undeleted() {
    let kv = kv();
    kv.put("a", json!({"v": 1}), 1).await;
    kv.clock.advance_ms(2_000);
    assert_eq!(
        kv.call(Operation::Delete, "data/a", json!({})).await,
        json!({"status": "none"})
    );
    let deleted = json!({"status": 404, "body": {
        "request_id": "", "lease_id": "", "renewable": false, "lease_duration": 0,
        "wrap_info": null, "warnings": null, "auth": null,
        "data": {"data": null, "metadata": {"version": 1, "created_time": START,
                 "deletion_time": at(2), "destroyed": false, "custom_metadata": null}},
    }});
    assert_eq!(kv.read("data/a").await, deleted);
    // Deleting again changes nothing.
    kv.clock.advance_ms(1_000);
    kv.call(Operation::Delete, "data/a", json!({})).await;
    assert_eq!(kv.read("data/a").await, deleted);
    assert_eq!(
        kv.write("undelete/a", json!({"versions": [1]})).await,
        json!({"status": "none"})
    );
    assert_eq!(kv.read("data/a").await["data"]["data"], json!({"v": 1}));
}

#[tokio::test]
async fn delete_marks_only_the_listed_versions() {
    let kv = kv();
    for n in 1..=3 {
        kv.put("a", json!({"v": n}), n).await;
    }
    kv.write("delete/a", json!({"versions": "1,3,9"})).await;
    let meta = kv.read("metadata/a").await;
    let deletion = |n: &str| meta["data"]["versions"][n]["deletion_time"].clone();
    assert_eq!(
        (deletion("1"), deletion("2"), deletion("3")),
        (json!(START), json!(""), json!(START))
    );
    assert_eq!(kv.read("data/a").await["status"], 404);
    assert_eq!(
        kv.call(Operation::Read, "data/a", json!({"version": 2}))
            .await["data"]["data"],
        json!({"v": 2})
    );
    assert_eq!(
        kv.write("delete/a", json!({"versions": []})).await,
        json!({"status": 400, "error": "No version number provided"})
    );
    assert_eq!(
        kv.write("delete/unknown", json!({"versions": [1]})).await,
        json!({"status": "none"})
    );
}

#[tokio::test]
async fn destroy_removes_the_data_for_good() {
    let kv = kv();
    kv.put("a", json!({"v": 1}), 1).await;
    kv.put("a", json!({"v": 2}), 2).await;
    assert_eq!(
        kv.write("destroy/a", json!({"versions": [2, 5]})).await,
        json!({"status": "none"})
    );
    let read = kv.read("data/a").await;
    assert_eq!(read["status"], 404);
    assert_eq!(read["body"]["data"]["metadata"]["destroyed"], true);
    assert_eq!(read["body"]["data"]["metadata"]["deletion_time"], "");
    assert!(
        !kv.storage
            .keys()
            .iter()
            .any(|k| k.starts_with("_kv2/versions/2/"))
    );
    // A destroyed version cannot be undeleted or deleted.
    kv.write("undelete/a", json!({"versions": [2]})).await;
    kv.write("delete/a", json!({"versions": [2]})).await;
    assert_eq!(kv.read("data/a").await, read);
    assert_eq!(
        kv.write("destroy/a", json!({})).await,
        json!({"status": 400, "error": "no version number provided"})
    );
}

#[tokio::test]
async fn max_versions_prunes_the_oldest_versions_data() {
    let kv = kv();
    kv.write("config", json!({"max_versions": 2})).await;
    for n in 1..=3 {
        kv.put("a", json!({"v": n}), n).await;
    }
    let meta = kv.read("metadata/a").await;
    assert_eq!(meta["data"]["oldest_version"], 2);
    assert_eq!(meta["data"]["current_version"], 3);
    assert_eq!(
        meta["data"]["versions"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        vec!["2", "3"]
    );
    assert_eq!(
        kv.call(Operation::Read, "data/a", json!({"version": 1}))
            .await,
        json!({"status": "none"})
    );
    let versions: Vec<String> = kv
        .storage
        .keys()
        .into_iter()
        .filter(|k| k.starts_with("_kv2/versions/"))
        .collect();
    assert_eq!(versions, vec!["_kv2/versions/2/a", "_kv2/versions/3/a"]);
}

#[tokio::test]
async fn the_default_window_keeps_ten_versions() {
    let kv = kv();
    for n in 1..=11 {
        kv.put("a", json!({"v": n}), n).await;
    }
    let meta = kv.read("metadata/a").await;
    assert_eq!(meta["data"]["oldest_version"], 2);
    assert_eq!(meta["data"]["versions"].as_object().unwrap().len(), 10);
}

#[tokio::test]
async fn metadata_read_shows_every_version_and_the_keys_settings() {
    let kv = kv();
    kv.put("a", json!({"v": 1}), 1).await;
    kv.clock.advance_ms(5_000);
    kv.put("a", json!({"v": 2}), 2).await;
    assert_eq!(
        kv.write(
            "metadata/a",
            json!({"max_versions": 5, "delete_version_after": "1h", "custom_metadata": {"team": "x", "n": 2}})
        )
        .await,
        json!({"status": "none"})
    );
    assert_eq!(
        kv.read("metadata/a").await,
        json!({"status": 200, "warnings": [], "data": {
            "versions": {
                "1": {"created_time": START, "deletion_time": "", "destroyed": false},
                "2": {"created_time": at(5), "deletion_time": "", "destroyed": false},
            },
            "current_version": 2, "oldest_version": 0,
            "created_time": START, "updated_time": at(5),
            "max_versions": 5, "cas_required": false, "delete_version_after": "1h0m0s",
            "custom_metadata": {"n": "2", "team": "x"},
        }})
    );
    assert_eq!(
        kv.read("data/a").await["data"]["metadata"]["custom_metadata"],
        json!({"n": "2", "team": "x"})
    );
}

#[tokio::test]
async fn metadata_write_creates_a_key_without_versions() {
    let kv = kv();
    kv.write("metadata/new", json!({"cas_required": true}))
        .await;
    let meta = kv.read("metadata/new").await;
    assert_eq!(meta["data"]["versions"], json!({}));
    assert_eq!(meta["data"]["current_version"], 0);
    assert_eq!(meta["data"]["created_time"], START);
    assert_eq!(kv.read("data/new").await, json!({"status": "none"}));
    // Nothing sent: nothing written.
    assert_eq!(
        kv.write("metadata/other", json!({})).await,
        json!({"status": "none"})
    );
    assert_eq!(kv.read("metadata/other").await, json!({"status": "none"}));
    assert_eq!(
        kv.write("metadata/", json!({"max_versions": 1})).await,
        json!({"status": 400, "error": "missing path"})
    );
}

#[tokio::test]
async fn metadata_write_warns_when_the_mount_requires_cas() {
    let kv = kv();
    kv.write("config", json!({"cas_required": true})).await;
    assert_eq!(
        kv.write("metadata/a", json!({"cas_required": false})).await,
        json!({"status": 200, "data": null, "warnings": [
            "\"cas_required\" set to false, but is mandated by backend config. This value will be ignored."
        ]})
    );
}

#[tokio::test]
async fn custom_metadata_is_validated() {
    let kv = kv();
    let answer = kv
        .write("metadata/a", json!({"custom_metadata": {"k": ""}}))
        .await;
    assert_eq!(
        answer,
        json!({"status": 400, "error": "1 error occurred:\n\t* custom_metadata validation failed: length of value for key \"k\" is 0 but must be 0 < len(value) <= 512\n\n"})
    );
}

#[tokio::test]
async fn metadata_list_shows_immediate_children() {
    let kv = kv();
    for key in ["app/db", "app/web/x", "top"] {
        kv.put(key, json!({"v": 1}), 1).await;
    }
    let keys = |answer: Value| answer["data"]["keys"].clone();
    assert_eq!(
        keys(kv.call(Operation::List, "metadata/", json!({})).await),
        json!(["app/", "top"])
    );
    assert_eq!(
        keys(kv.call(Operation::List, "metadata/app/", json!({})).await),
        json!(["db", "web/"])
    );
    assert_eq!(
        keys(
            kv.call(Operation::List, "metadata/nothing/", json!({}))
                .await
        ),
        json!([])
    );
}

#[tokio::test]
async fn metadata_delete_removes_every_version_and_the_metadata() {
    let kv = kv();
    kv.put("a", json!({"v": 1}), 1).await;
    kv.put("a", json!({"v": 2}), 2).await;
    kv.put("b", json!({"v": 1}), 1).await;
    assert_eq!(
        kv.call(Operation::Delete, "metadata/a", json!({})).await,
        json!({"status": "none"})
    );
    assert_eq!(kv.read("metadata/a").await, json!({"status": "none"}));
    assert_eq!(
        kv.storage.keys(),
        vec!["_kv2/metadata/b", "_kv2/upgraded", "_kv2/versions/1/b"]
    );
    // Writing again starts at version 1.
    kv.put("a", json!({"v": 3}), 1).await;
}

#[tokio::test]
async fn metadata_patch_merges_custom_metadata() {
    let kv = kv();
    kv.write(
        "metadata/a",
        json!({"custom_metadata": {"a": "1", "b": "2"}}),
    )
    .await;
    assert_eq!(
        kv.call(
            Operation::Patch,
            "metadata/a",
            json!({"custom_metadata": {"a": null, "c": "3"}, "max_versions": 4})
        )
        .await,
        json!({"status": "none"})
    );
    let meta = kv.read("metadata/a").await;
    assert_eq!(meta["data"]["custom_metadata"], json!({"b": "2", "c": "3"}));
    assert_eq!(meta["data"]["max_versions"], 4);
    assert_eq!(
        kv.call(
            Operation::Patch,
            "metadata/none",
            json!({"max_versions": 1})
        )
        .await,
        json!({"status": 404, "body": null})
    );
}

#[tokio::test]
async fn delete_version_after_sets_a_deadline_the_clock_reaches() {
    let kv = kv();
    kv.write("config", json!({"delete_version_after": "60s"}))
        .await;
    let written = kv.write("data/a", json!({"data": {"v": 1}})).await;
    assert_eq!(written["data"]["deletion_time"], at(60));
    kv.clock.advance_ms(59_000);
    assert_eq!(kv.read("data/a").await["data"]["data"], json!({"v": 1}));
    kv.clock.advance_ms(1_000);
    assert_eq!(kv.read("data/a").await["status"], 404);
    // A key's own, shorter setting wins; undelete restarts the clock.
    kv.write("metadata/a", json!({"delete_version_after": "10s"}))
        .await;
    kv.write("undelete/a", json!({"versions": [1]})).await;
    assert_eq!(
        kv.read("metadata/a").await["data"]["versions"]["1"]["deletion_time"],
        at(70)
    );
    // Turned off for the mount: new versions never expire.
    kv.write("config", json!({"delete_version_after": "-5s"}))
        .await;
    assert_eq!(
        kv.write("data/b", json!({"data": {}})).await["data"]["deletion_time"],
        ""
    );
}

#[tokio::test]
async fn config_reads_defaults_and_keeps_what_was_written() {
    let kv = kv();
    let config = |max: u32, cas: bool, after: &str| {
        json!({"status": 200, "warnings": [], "data": {
            "max_versions": max, "cas_required": cas, "delete_version_after": after}})
    };
    assert_eq!(kv.read("config").await, config(0, false, "0s"));
    assert_eq!(
        kv.write(
            "config",
            json!({"max_versions": 10, "delete_version_after": "30m"})
        )
        .await,
        json!({"status": "none"})
    );
    assert_eq!(kv.read("config").await, config(10, false, "30m0s"));
    kv.write(
        "config",
        json!({"cas_required": "true", "delete_version_after": -30}),
    )
    .await;
    assert_eq!(kv.read("config").await, config(10, true, "-1s"));
    kv.write("config", json!({"delete_version_after": 0})).await;
    assert_eq!(kv.read("config").await, config(10, true, "0s"));
}

#[tokio::test]
async fn subkeys_show_the_shape_without_values() {
    let kv = kv();
    kv.put("a", json!({"user": "x", "db": {"host": "h", "port": 1}}), 1)
        .await;
    assert_eq!(
        kv.read("subkeys/a").await,
        json!({"status": 200, "warnings": [], "data": {
            "subkeys": {"user": null, "db": {"host": null, "port": null}},
            "metadata": {"version": 1, "created_time": START, "deletion_time": "",
                         "destroyed": false, "custom_metadata": null},
        }})
    );
    let shallow = kv
        .call(Operation::Read, "subkeys/a", json!({"depth": 1}))
        .await;
    assert_eq!(
        shallow["data"]["subkeys"],
        json!({"user": null, "db": null})
    );
    kv.call(Operation::Delete, "data/a", json!({})).await;
    let deleted = kv.read("subkeys/a").await;
    assert_eq!(deleted["status"], 404);
    assert_eq!(deleted["body"]["data"]["subkeys"], Value::Null);
}

#[tokio::test]
async fn patch_merges_into_the_current_version() {
    let kv = kv();
    kv.put("a", json!({"keep": 1, "drop": 2, "nested": {"x": 1}}), 1)
        .await;
    let patched = kv
        .call(
            Operation::Patch,
            "data/a",
            json!({"data": {"drop": null, "new": 3, "nested": {"y": 2}}, "options": {"cas": 1}}),
        )
        .await;
    assert_eq!(patched["data"]["version"], 2);
    assert_eq!(
        kv.read("data/a").await["data"]["data"],
        json!({"keep": 1, "new": 3, "nested": {"x": 1, "y": 2}})
    );
    assert_eq!(
        kv.call(Operation::Patch, "data/missing", json!({"data": {"a": 1}}))
            .await,
        json!({"status": 404, "body": null})
    );
    kv.call(Operation::Delete, "data/a", json!({})).await;
    let deleted = kv
        .call(Operation::Patch, "data/a", json!({"data": {"a": 1}}))
        .await;
    assert_eq!(deleted["status"], 404);
    assert_eq!(deleted["body"]["data"]["version"], 2);
    assert_eq!(deleted["body"]["data"]["deletion_time"], START);
    assert_eq!(
        kv.call(Operation::Patch, "data/a", json!({})).await,
        json!({"status": 400, "error": "no data provided"})
    );
}

#[tokio::test]
async fn paths_outside_kv_v2_answer_404_with_upstreams_warning() {
    let kv = kv();
    let warned = |warning: &str| {
        json!({"status": 404, "body": {
            "request_id": "", "lease_id": "", "renewable": false, "lease_duration": 0,
            "data": null, "wrap_info": null, "warnings": [warning], "auth": null}})
    };
    let invalid = |command: &str| {
        warned(&format!(
            "Invalid path for a versioned K/V secrets engine. See the API docs for the appropriate API endpoints to use. If using the Vault CLI, use 'vault kv {command}' for this operation."
        ))
    };
    assert_eq!(kv.read("foo").await, invalid("get"));
    assert_eq!(kv.write("foo/bar", json!({"a": 1})).await, invalid("put"));
    assert_eq!(
        kv.call(Operation::List, "data/", json!({})).await,
        invalid("list")
    );
    assert_eq!(
        kv.read("data").await,
        warned("Non-listing operations on the root of a K/V v2 mount are not supported.")
    );
    assert_eq!(
        kv.call(Operation::List, "data/a", json!({})).await,
        json!({"status": 405, "error": "unsupported operation"})
    );
}

#[tokio::test]
async fn unknown_fields_are_ignored_with_a_warning() {
    let kv = kv();
    let written = kv
        .write(
            "data/a",
            json!({"data": {"v": 1}, "extra": true, "path": "other"}),
        )
        .await;
    assert_eq!(
        written["warnings"],
        json!([
            "Endpoint ignored these unrecognized parameters: [extra]",
            "Endpoint replaced the value of these parameters with the values captured from the endpoint's path: [path]",
        ])
    );
    assert_eq!(kv.read("data/a").await["data"]["data"], json!({"v": 1}));
}

#[tokio::test]
async fn existence_check_tells_create_from_update_on_data_and_metadata() {
    let kv = kv();
    let update = |path: &str| Request::new(Operation::Update, path);
    assert_eq!(kv.engine.exists(&update("data/a")).await, Ok(Some(false)));
    assert_eq!(
        kv.engine.exists(&update("metadata/a")).await,
        Ok(Some(false))
    );
    assert_eq!(kv.engine.exists(&update("config")).await, Ok(None));
    kv.put("a", json!({}), 1).await;
    assert_eq!(kv.engine.exists(&update("data/a")).await, Ok(Some(true)));
    assert_eq!(
        kv.engine.exists(&update("metadata/a")).await,
        Ok(Some(true))
    );
}

#[tokio::test]
async fn a_version_1_mount_is_upgraded_on_first_use() {
    let storage = Arc::new(MemEngineStorage::default());
    let v1 = crate::factory(EngineConfig {
        mount_point: "secret/".to_owned(),
        storage: storage.clone(),
        options: BTreeMap::new(),
        clock: Arc::new(ManualClock::new(START_MS)),
        passwords: Default::default(),
    })
    .unwrap();
    for (path, value) in [("a", json!({"x": 1})), ("dir/b", json!({"y": 2}))] {
        let data = value.as_object().unwrap().clone();
        v1.handle(Request::new(Operation::Create, path).with_data(data))
            .await
            .unwrap();
    }
    let kv = kv_over(storage);
    assert_eq!(
        kv.read("data/dir/b").await["data"],
        json!({"data": {"y": 2}, "metadata": {"version": 1, "created_time": START,
               "deletion_time": "", "destroyed": false, "custom_metadata": null}})
    );
    assert_eq!(kv.read("metadata/a").await["data"]["oldest_version"], 1);
    assert!(
        kv.storage.keys().iter().all(|k| k.starts_with("_kv2/")),
        "{:?}",
        kv.storage.keys()
    );
    assert_eq!(kv.read("data/a").await["data"]["data"], json!({"x": 1}));
}
