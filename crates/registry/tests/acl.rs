//! API tests of the registry's ACL: `/v1/acl/policy*` and `/v1/acl/token*` in Consul's shape,
//! the three ways to present a token, and every rule kind (read, write, deny, exact beats
//! prefix, longest prefix wins) enforced end to end on the KV, session, catalog and agent
//! endpoints, with list filtering and its header.
//!
//! Each test drives `registry::router` in-process (`support::TestRegistry`) over a fresh
//! in-memory store; the restart test opens a second `State` over the same storage.

mod support;

use std::sync::Arc;

use http::{HeaderMap, Method, StatusCode};
use registry::AclConfig;
use serde_json::{Value, json};
use storage::{MemStorage, Storage};
use support::{ROOT, START_MS, TestRegistry, acl_config as acl};
use testkit::ManualClock;

const NODE: &str = "node1";
const GLOBAL_MANAGEMENT_ID: &str = "00000000-0000-0000-0000-000000000001";
const ANONYMOUS_ID: &str = "00000000-0000-0000-0000-000000000002";

/// A registry (`support::TestRegistry`, its node named [`NODE`]) with ACL helpers that answer
/// [`Reply`]s.
struct Registry {
    test: TestRegistry,
}

/// One answer: status, headers and the body as text (without trailing whitespace).
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {:?}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().unwrap())
    }

    #[track_caller]
    fn expect(self, status: StatusCode) -> Reply {
        assert_eq!(self.status, status, "body: {}", self.body);
        self
    }
}

impl Registry {
    /// ACLs on (deny by default) with `ROOT` as the initial management token, as `cairn dev`.
    async fn dev() -> Registry {
        Registry::open(testkit::mem_storage(), acl(false)).await
    }

    async fn open(storage: Arc<MemStorage>, acl: AclConfig) -> Registry {
        let mut config = support::test_config();
        config.node_name = NODE.to_owned();
        config.acl = acl;
        Registry {
            test: TestRegistry::open(storage, ManualClock::new(START_MS), config).await,
        }
    }

    /// Sends a request; `token` goes in `X-Consul-Token` when given.
    async fn send(&self, method: Method, uri: &str, token: Option<&str>, body: &str) -> Reply {
        let mut headers = Vec::new();
        if let Some(token) = token {
            headers.push(("X-Consul-Token", token));
        }
        self.send_with(method, uri, &headers, body).await
    }

    async fn send_with(
        &self,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        let response = self
            .test
            .request(method, uri, headers, body.to_owned())
            .await;
        Reply {
            status: response.status,
            headers: response.headers.clone(),
            // Plain-text errors end with a newline; compare their text.
            body: response.text().trim_end().to_owned(),
        }
    }

    async fn get(&self, uri: &str, token: Option<&str>) -> Reply {
        self.send(Method::GET, uri, token, "").await
    }

    async fn put(&self, uri: &str, token: Option<&str>, body: &str) -> Reply {
        self.send(Method::PUT, uri, token, body).await
    }

    async fn delete(&self, uri: &str, token: Option<&str>) -> Reply {
        self.send(Method::DELETE, uri, token, "").await
    }

    /// Creates a policy named `name` with `rules`; returns its ID.
    async fn policy(&self, name: &str, rules: &str) -> String {
        let body = json!({"Name": name, "Rules": rules}).to_string();
        let reply = self
            .put("/v1/acl/policy", Some(ROOT), &body)
            .await
            .expect(StatusCode::OK);
        reply.json()["ID"].as_str().unwrap().to_owned()
    }

    /// Creates a token linked to one new policy with `rules`; returns its SecretID.
    async fn token_with_rules(&self, rules: &str) -> String {
        self.test.token_with_rules(rules).await
    }

    /// Creates a token linked to `policies`; returns the token JSON.
    async fn token(&self, policies: &[Value]) -> Value {
        let body = json!({"Policies": policies}).to_string();
        self.put("/v1/acl/token", Some(ROOT), &body)
            .await
            .expect(StatusCode::OK)
            .json()
    }

    /// Writes a KV entry as the management token.
    async fn kv_put(&self, key: &str, value: &str) {
        let reply = self
            .put(&format!("/v1/kv/{key}"), Some(ROOT), value)
            .await
            .expect(StatusCode::OK);
        assert_eq!(reply.body, "true");
    }
}

fn sorted(values: Vec<&str>) -> Vec<&str> {
    let mut values = values;
    values.sort_unstable();
    values
}

// ---------------------------------------------------------------------------------------------
// ACLs disabled, management, bootstrap

#[tokio::test]
async fn acl_endpoints_answer_401_when_acls_are_disabled() {
    let registry = Registry::open(testkit::mem_storage(), AclConfig::default()).await;
    for (method, uri) in [
        (Method::GET, "/v1/acl/policies"),
        (Method::PUT, "/v1/acl/policy"),
        (Method::GET, "/v1/acl/policy/name/x"),
        (Method::GET, "/v1/acl/tokens"),
        (Method::PUT, "/v1/acl/token"),
        (Method::GET, "/v1/acl/token/self"),
        (Method::DELETE, &format!("/v1/acl/token/{ANONYMOUS_ID}")),
    ] {
        let reply = registry.send(method.clone(), uri, None, "{}").await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{method} {uri}");
        assert_eq!(reply.body, "ACL support disabled");
        assert!(reply.header("x-consul-index").is_some());
    }
    // With ACLs off every other endpoint is open, whatever token is sent.
    registry
        .put("/v1/kv/a", Some("no-such-token"), "x")
        .await
        .expect(StatusCode::OK);
}

#[tokio::test]
async fn acl_endpoints_need_a_management_token() {
    let registry = Registry::dev().await;
    let limited = registry
        .token_with_rules(r#"key_prefix "" { policy = "write" }"#)
        .await;
    let anonymous_token = format!("/v1/acl/token/{ANONYMOUS_ID}");
    let requests = [
        (Method::GET, "/v1/acl/tokens", "acl:read"),
        (Method::PUT, "/v1/acl/token", "acl:write"),
        (Method::GET, anonymous_token.as_str(), "acl:read"),
        (Method::PUT, anonymous_token.as_str(), "acl:write"),
        (Method::DELETE, anonymous_token.as_str(), "acl:write"),
        (
            Method::PUT,
            "/v1/acl/token/00000000-0000-0000-0000-000000000002/clone",
            "acl:write",
        ),
        (Method::GET, "/v1/acl/policies", "acl:read"),
        (Method::PUT, "/v1/acl/policy", "acl:write"),
        (
            Method::GET,
            "/v1/acl/policy/name/global-management",
            "acl:read",
        ),
        (
            Method::GET,
            "/v1/acl/policy/00000000-0000-0000-0000-000000000001",
            "acl:read",
        ),
        (
            Method::DELETE,
            "/v1/acl/policy/00000000-0000-0000-0000-000000000001",
            "acl:write",
        ),
    ];
    for token in [None, Some("anonymous"), Some(limited.as_str())] {
        for (method, uri, permission) in &requests {
            let reply = registry.send(method.clone(), uri, token, "{}").await;
            assert_eq!(
                reply.status,
                StatusCode::FORBIDDEN,
                "{method} {uri} {token:?}"
            );
            assert!(
                reply
                    .body
                    .starts_with("Permission denied: token with AccessorID '")
                    && reply
                        .body
                        .ends_with(&format!("lacks permission '{permission}'")),
                "{method} {uri}: {}",
                reply.body
            );
        }
    }
}

#[tokio::test]
async fn bootstrap_creates_the_builtin_policy_and_tokens() {
    let registry = Registry::dev().await;
    let policies = registry
        .get("/v1/acl/policies", Some(ROOT))
        .await
        .expect(StatusCode::OK);
    assert!(policies.header("x-consul-index").is_some());
    let policies = policies.json();
    let management = &policies.as_array().unwrap()[0];
    assert_eq!(management["ID"], GLOBAL_MANAGEMENT_ID);
    assert_eq!(management["Name"], "global-management");
    assert!(management.get("Rules").is_none(), "stubs carry no rules");

    let tokens = registry.get("/v1/acl/tokens", Some(ROOT)).await.json();
    let tokens = tokens.as_array().unwrap();
    assert_eq!(tokens.len(), 2);
    let anonymous = tokens
        .iter()
        .find(|token| token["AccessorID"] == ANONYMOUS_ID)
        .unwrap();
    assert_eq!(anonymous["SecretID"], "anonymous");
    assert_eq!(anonymous["Description"], "Anonymous Token");
    assert!(anonymous.get("Policies").is_none());
    let root = tokens
        .iter()
        .find(|token| token["SecretID"] == ROOT)
        .unwrap();
    assert_eq!(root["Description"], "Initial Management Token");
    assert_eq!(
        root["Policies"],
        json!([{"ID": GLOBAL_MANAGEMENT_ID, "Name": "global-management"}])
    );
    assert_eq!(root["Local"], false);
    assert_eq!(root["CreateTime"], "2023-11-14T22:13:20.000Z");
    assert_eq!(root["Hash"].as_str().unwrap().len(), 44);
    assert!(root["CreateIndex"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn bootstrap_with_the_management_token_survives_a_restart() {
    let storage = testkit::mem_storage();
    let first = Registry::open(storage.clone(), acl(false)).await;
    let created = first.token(&[]).await;
    let secret = created["SecretID"].as_str().unwrap();
    first.kv_put("kept", "1").await;
    let revision = storage.revision().await.unwrap();
    drop(first);

    let second = Registry::open(storage.clone(), acl(false)).await;
    // Nothing to bootstrap the second time: no write at all.
    assert_eq!(storage.revision().await.unwrap(), revision);
    let tokens = second
        .get("/v1/acl/tokens", Some(ROOT))
        .await
        .expect(StatusCode::OK);
    let tokens = tokens.json();
    let roots = tokens
        .as_array()
        .unwrap()
        .iter()
        .filter(|token| token["SecretID"] == ROOT)
        .count();
    assert_eq!(roots, 1);
    second
        .get(
            &format!("/v1/acl/token/{}", created["AccessorID"].as_str().unwrap()),
            Some(ROOT),
        )
        .await
        .expect(StatusCode::OK);
    // The token created before the restart still resolves (and, without rules, is denied).
    second
        .get("/v1/kv/kept", Some(secret))
        .await
        .expect(StatusCode::FORBIDDEN);
    second
        .get("/v1/kv/kept", Some(ROOT))
        .await
        .expect(StatusCode::OK);

    // A restart with another root token adds a second management token; the first stays.
    let mut config = acl(false);
    config.initial_management_token = Some("new-root".to_owned());
    let third = Registry::open(storage, config).await;
    third
        .get("/v1/kv/kept", Some("new-root"))
        .await
        .expect(StatusCode::OK);
    third
        .get("/v1/kv/kept", Some(ROOT))
        .await
        .expect(StatusCode::OK);
}

// ---------------------------------------------------------------------------------------------
// Policies

#[tokio::test]
async fn policy_crud_round_trips_in_consuls_shape() {
    let registry = Registry::dev().await;
    // py-consul sends lowercase keys.
    let created = registry
        .put(
            "/v1/acl/policy",
            Some(ROOT),
            r#"{"name": "kv-read", "description": "reads", "rules": "key_prefix \"\" { policy = \"read\" }"}"#,
        )
        .await
        .expect(StatusCode::OK)
        .json();
    let id = created["ID"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 36);
    assert_eq!(created["Name"], "kv-read");
    assert_eq!(created["Description"], "reads");
    assert_eq!(created["Rules"], "key_prefix \"\" { policy = \"read\" }");
    assert!(created.get("Datacenters").is_none());
    assert_eq!(created["CreateIndex"], created["ModifyIndex"]);

    let read = registry
        .get(&format!("/v1/acl/policy/{id}"), Some(ROOT))
        .await
        .expect(StatusCode::OK);
    assert_eq!(read.json(), created);
    assert_eq!(
        read.header("x-consul-index").unwrap(),
        created["ModifyIndex"].to_string()
    );
    let by_name = registry
        .get("/v1/acl/policy/name/KV-READ", Some(ROOT))
        .await
        .expect(StatusCode::OK);
    assert_eq!(by_name.json()["ID"], id.as_str());

    let updated = registry
        .put(
            &format!("/v1/acl/policy/{id}"),
            Some(ROOT),
            r#"{"Name": "kv-all", "Rules": "key_prefix \"\" { policy = \"write\" }", "Datacenters": ["dc1"]}"#,
        )
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(updated["ID"], id.as_str());
    assert_eq!(updated["Name"], "kv-all");
    assert_eq!(updated["Description"], "");
    assert_eq!(updated["Datacenters"], json!(["dc1"]));
    assert_eq!(updated["CreateIndex"], created["CreateIndex"]);
    assert!(updated["ModifyIndex"].as_u64() > created["ModifyIndex"].as_u64());
    assert_ne!(updated["Hash"], created["Hash"]);
    // The old name is free again; the new one resolves.
    registry
        .get("/v1/acl/policy/name/kv-read", Some(ROOT))
        .await
        .expect(StatusCode::FORBIDDEN);
    registry
        .get("/v1/acl/policy/name/kv-all", Some(ROOT))
        .await
        .expect(StatusCode::OK);

    let list = registry.get("/v1/acl/policies", Some(ROOT)).await.json();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|policy| policy["Name"].as_str().unwrap())
        .collect();
    assert_eq!(sorted(names), vec!["global-management", "kv-all"]);

    let deleted = registry
        .delete(&format!("/v1/acl/policy/{id}"), Some(ROOT))
        .await
        .expect(StatusCode::OK);
    assert_eq!(deleted.body, "true");
    // Unknown policies: reads are 403 `ACL not found` (Consul; py-consul expects an error),
    // deletes succeed.
    let missing = registry
        .get(&format!("/v1/acl/policy/{id}"), Some(ROOT))
        .await
        .expect(StatusCode::FORBIDDEN);
    assert_eq!(missing.body, "ACL not found");
    registry
        .delete(&format!("/v1/acl/policy/{id}"), Some(ROOT))
        .await
        .expect(StatusCode::OK);
}

#[tokio::test]
async fn policy_validation_errors_are_400_with_consuls_messages() {
    let registry = Registry::dev().await;
    let existing = registry.policy("taken", "").await;
    let gm = format!("/v1/acl/policy/{GLOBAL_MANAGEMENT_ID}");
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "/v1/acl/policy",
            "{}",
            "Invalid Policy: no Name is set",
            "missing name",
        ),
        (
            "/v1/acl/policy",
            r#"{"Name": "a b"}"#,
            "Invalid Policy: invalid Name. Only alphanumeric characters, '-' and '_' are allowed",
            "bad name",
        ),
        (
            "/v1/acl/policy",
            r#"{"Name": "TAKEN"}"#,
            "Invalid Policy: A Policy with Name \"TAKEN\" already exists",
            "duplicate name, ignoring case",
        ),
        (
            "/v1/acl/policy",
            r#"{"Name": "x", "Rules": "key \"a\" { policy = \"admin\" }"}"#,
            "Failed to parse policy: Invalid key policy \"admin\" on \"a\": must be read, write, list or deny",
            "bad policy value",
        ),
        (
            "/v1/acl/policy",
            r#"{"Name": "x", "Rules": "key \"a\" {"}"#,
            "Failed to parse policy: line 1",
            "bad syntax",
        ),
        (
            "/v1/acl/policy",
            r#"{"ID": "5e52a099-4c90-c067-5478-980f06be9bd8", "Name": "x"}"#,
            "Cannot specify the ID when creating a new policy",
            "ID on create",
        ),
        (
            "/v1/acl/policy",
            r#"{"Name": 5}"#,
            "Policy decoding failed: ",
            "wrong type",
        ),
        (
            "/v1/acl/policy",
            "{nope",
            "Policy decoding failed: ",
            "malformed JSON",
        ),
        (
            &gm,
            r#"{"Name": "global-management", "Rules": ""}"#,
            "Changing the Rules for the builtin global-management policy is not permitted",
            "builtin rules",
        ),
        (
            "/v1/acl/policy/5e52a099-4c90-c067-5478-980f06be9bd8",
            r#"{"Name": "x"}"#,
            "Cannot find policy 5e52a099-4c90-c067-5478-980f06be9bd8",
            "unknown policy",
        ),
        (
            &format!("/v1/acl/policy/{existing}"),
            r#"{"ID": "5e52a099-4c90-c067-5478-980f06be9bd8", "Name": "x"}"#,
            "Policy ID in URL and payload do not match",
            "ID mismatch",
        ),
    ];
    for (uri, body, message, case) in cases {
        let reply = registry.put(uri, Some(ROOT), body).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{case}: {}",
            reply.body
        );
        assert!(reply.body.starts_with(message), "{case}: {}", reply.body);
    }
    let reply = registry
        .delete(&gm, Some(ROOT))
        .await
        .expect(StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.body,
        "Delete operation not permitted on the builtin global-management policy"
    );
    // Renaming the builtin policy is allowed (as in Consul), keeping its rules.
    let current = registry.get(&gm, Some(ROOT)).await.json();
    let body = json!({"Name": "all-powerful", "Rules": current["Rules"]}).to_string();
    registry
        .put(&gm, Some(ROOT), &body)
        .await
        .expect(StatusCode::OK);
    let root = registry.get("/v1/acl/token/self", Some(ROOT)).await.json();
    assert_eq!(root["Policies"][0]["Name"], "all-powerful");
    // Nothing invalid was stored.
    let list = registry.get("/v1/acl/policies", Some(ROOT)).await.json();
    assert_eq!(list.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn policy_rules_accept_consuls_json_form() {
    let registry = Registry::dev().await;
    // py-consul's `acl.policy.create(rules={...})` sends `json.dumps(rules)`.
    let rules = json!({"key_prefix": {"app/": {"policy": "write"}}}).to_string();
    let id = registry.policy("json", &rules).await;
    let token = registry.token(&[json!({"ID": id})]).await;
    let secret = token["SecretID"].as_str().unwrap();
    registry
        .put("/v1/kv/app/x", Some(secret), "1")
        .await
        .expect(StatusCode::OK);
    registry
        .put("/v1/kv/other", Some(secret), "1")
        .await
        .expect(StatusCode::FORBIDDEN);
}

// ---------------------------------------------------------------------------------------------
// Tokens

#[tokio::test]
async fn token_crud_round_trips_in_consuls_shape() {
    let registry = Registry::dev().await;
    let policy = registry
        .policy("kv-read", r#"key_prefix "" { policy = "read" }"#)
        .await;
    let accessor = "00000000-dead-beef-0000-000000000000";
    let secret = "5e52a099-4c90-c067-5478-980f06be9bd8";
    let body = json!({
        "AccessorID": accessor,
        "SecretID": secret,
        "Description": "some token!",
        "Policies": [{"Name": "kv-read"}, {"ID": policy}],
    });
    let created = registry
        .put("/v1/acl/token", Some(ROOT), &body.to_string())
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(created["AccessorID"], accessor);
    assert_eq!(created["SecretID"], secret);
    assert_eq!(created["Description"], "some token!");
    assert_eq!(
        created["Policies"],
        json!([{"ID": policy, "Name": "kv-read"}])
    );
    assert_eq!(created["Local"], false);
    assert_eq!(created["CreateIndex"], created["ModifyIndex"]);

    let read = registry
        .get(&format!("/v1/acl/token/{accessor}"), Some(ROOT))
        .await
        .expect(StatusCode::OK);
    assert_eq!(read.json(), created);
    let own = registry
        .get("/v1/acl/token/self", Some(secret))
        .await
        .expect(StatusCode::OK);
    assert_eq!(own.json()["AccessorID"], accessor);

    // An update replaces Description and Policies.
    let updated = registry
        .put(
            &format!("/v1/acl/token/{accessor}"),
            Some(ROOT),
            r#"{"description": "updated"}"#,
        )
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(updated["Description"], "updated");
    assert_eq!(updated["SecretID"], secret);
    assert!(updated.get("Policies").is_none());
    assert_eq!(updated["CreateTime"], created["CreateTime"]);
    assert_eq!(updated["CreateIndex"], created["CreateIndex"]);

    let cloned = registry
        .put(
            &format!("/v1/acl/token/{accessor}/clone"),
            Some(ROOT),
            r#"{"Description": "cloned"}"#,
        )
        .await
        .expect(StatusCode::OK)
        .json();
    assert_ne!(cloned["AccessorID"], accessor);
    assert_ne!(cloned["SecretID"], secret);
    assert_eq!(cloned["Description"], "cloned");

    // Generated IDs are UUIDs.
    let generated = registry.token(&[json!({"ID": policy})]).await;
    assert!(uuid::Uuid::try_parse(generated["AccessorID"].as_str().unwrap()).is_ok());
    assert!(uuid::Uuid::try_parse(generated["SecretID"].as_str().unwrap()).is_ok());
    let filtered = registry
        .get(&format!("/v1/acl/tokens?policy={policy}"), Some(ROOT))
        .await
        .json();
    assert_eq!(filtered.as_array().unwrap().len(), 1);
    assert_eq!(filtered[0]["AccessorID"], generated["AccessorID"]);
    let all = registry.get("/v1/acl/tokens", Some(ROOT)).await.json();
    assert_eq!(all.as_array().unwrap().len(), 5);

    registry
        .delete(&format!("/v1/acl/token/{accessor}"), Some(ROOT))
        .await
        .expect(StatusCode::OK);
    let gone = registry
        .get(&format!("/v1/acl/token/{accessor}"), Some(ROOT))
        .await
        .expect(StatusCode::FORBIDDEN);
    assert_eq!(gone.body, "ACL not found");
    // Its secret no longer resolves; deleting it again succeeds.
    let unknown = registry
        .get("/v1/kv/x", Some(secret))
        .await
        .expect(StatusCode::FORBIDDEN);
    assert_eq!(unknown.body, "ACL not found");
    registry
        .delete(&format!("/v1/acl/token/{accessor}"), Some(ROOT))
        .await
        .expect(StatusCode::OK);
}

#[tokio::test]
async fn token_validation_errors_are_400_with_consuls_messages() {
    let registry = Registry::dev().await;
    let taken = registry.token(&[]).await;
    let taken_accessor = taken["AccessorID"].as_str().unwrap();
    let taken_secret = taken["SecretID"].as_str().unwrap();
    let cases: Vec<(Method, String, String, &str)> = vec![
        (
            Method::PUT,
            "/v1/acl/token".to_owned(),
            r#"{"AccessorID": "unknown"}"#.to_owned(),
            "Invalid Token: AccessorID is not a valid UUID",
        ),
        (
            Method::PUT,
            "/v1/acl/token".to_owned(),
            r#"{"SecretID": "00000000-0000-0000-0000-000000000099"}"#.to_owned(),
            "Invalid Token: UUIDs with the prefix",
        ),
        (
            Method::PUT,
            "/v1/acl/token".to_owned(),
            json!({"AccessorID": taken_accessor}).to_string(),
            "Invalid Token: AccessorID is already in use",
        ),
        (
            Method::PUT,
            "/v1/acl/token".to_owned(),
            json!({"SecretID": taken_secret}).to_string(),
            "Invalid Token: SecretID is already in use",
        ),
        (
            Method::PUT,
            "/v1/acl/token".to_owned(),
            r#"{"Policies": [{"ID": "5e52a099-4c90-c067-5478-980f06be9bd8"}]}"#.to_owned(),
            "No such ACL policy with ID \"5e52a099-4c90-c067-5478-980f06be9bd8\"",
        ),
        (
            Method::PUT,
            "/v1/acl/token".to_owned(),
            r#"{"Policies": [{"Name": "nope"}]}"#.to_owned(),
            "No such ACL policy with name \"nope\"",
        ),
        (
            Method::PUT,
            "/v1/acl/token".to_owned(),
            r#"{"Roles": [{"Name": "r"}]}"#.to_owned(),
            "Invalid Token: Roles are not supported",
        ),
        (
            Method::PUT,
            "/v1/acl/token".to_owned(),
            r#"{"Policies": "x"}"#.to_owned(),
            "Token decoding failed: ",
        ),
        (
            Method::PUT,
            "/v1/acl/token/unknown".to_owned(),
            "{}".to_owned(),
            "Cannot find token \"unknown\"",
        ),
        (
            Method::PUT,
            format!("/v1/acl/token/{taken_accessor}"),
            r#"{"SecretID": "5e52a099-4c90-c067-5478-980f06be9bd8"}"#.to_owned(),
            "Changing a token's SecretID is not permitted",
        ),
        (
            Method::PUT,
            format!("/v1/acl/token/{taken_accessor}"),
            r#"{"Local": true}"#.to_owned(),
            "Cannot toggle local mode of",
        ),
        (
            Method::PUT,
            format!("/v1/acl/token/{taken_accessor}"),
            json!({"AccessorID": ANONYMOUS_ID}).to_string(),
            "Token Accessor ID in URL and payload do not match",
        ),
        (
            Method::PUT,
            "/v1/acl/token/unknown/clone".to_owned(),
            "{}".to_owned(),
            "Cannot find token \"unknown\"",
        ),
        (
            Method::DELETE,
            format!("/v1/acl/token/{ANONYMOUS_ID}"),
            String::new(),
            "Delete operation not permitted on the anonymous token",
        ),
    ];
    for (method, uri, body, message) in cases {
        let reply = registry.send(method.clone(), &uri, Some(ROOT), &body).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{method} {uri} {body}: {}",
            reply.body
        );
        assert!(
            reply.body.starts_with(message),
            "{method} {uri} {body}: {}",
            reply.body
        );
    }
    // A management token cannot delete itself.
    let root = registry.get("/v1/acl/token/self", Some(ROOT)).await.json();
    let reply = registry
        .delete(
            &format!("/v1/acl/token/{}", root["AccessorID"].as_str().unwrap()),
            Some(ROOT),
        )
        .await
        .expect(StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.body,
        "Deletion of the request's authorization token is not permitted"
    );
    // Nothing invalid was stored.
    let all = registry.get("/v1/acl/tokens", Some(ROOT)).await.json();
    assert_eq!(all.as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn token_self_without_a_token_is_the_anonymous_token() {
    let registry = Registry::dev().await;
    let own = registry
        .get("/v1/acl/token/self", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(own.json()["AccessorID"], ANONYMOUS_ID);
    let unknown = registry
        .get("/v1/acl/token/self", Some("no-such-secret"))
        .await
        .expect(StatusCode::FORBIDDEN);
    assert_eq!(unknown.body, "ACL not found");
}

#[tokio::test]
async fn token_list_blocks_until_a_token_changes() {
    let registry = Arc::new(Registry::dev().await);
    let first = registry.get("/v1/acl/tokens", Some(ROOT)).await;
    let index: u64 = first.header("x-consul-index").unwrap().parse().unwrap();
    let waiter = {
        let registry = registry.clone();
        tokio::spawn(async move {
            registry
                .get(&format!("/v1/acl/tokens?index={index}&wait=5s"), Some(ROOT))
                .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!waiter.is_finished());
    registry.token(&[]).await;
    let woken = tokio::time::timeout(std::time::Duration::from_secs(2), waiter)
        .await
        .expect("the write wakes the blocking list")
        .unwrap();
    let new_index: u64 = woken.header("x-consul-index").unwrap().parse().unwrap();
    assert!(new_index > index);
    assert_eq!(woken.json().as_array().unwrap().len(), 3);
}

// ---------------------------------------------------------------------------------------------
// Presenting a token

#[tokio::test]
async fn token_is_read_from_each_of_the_three_sources() {
    let registry = Registry::dev().await;
    registry.kv_put("a", "1").await;
    let reader = registry
        .token_with_rules(r#"key "a" { policy = "read" }"#)
        .await;
    let bearer = format!("Bearer {reader}");
    let sources: Vec<(String, Vec<(&str, &str)>)> = vec![
        (format!("/v1/kv/a?token={reader}"), vec![]),
        ("/v1/kv/a".to_owned(), vec![("X-Registry-Token", &reader)]),
        ("/v1/kv/a".to_owned(), vec![("X-Consul-Token", &reader)]),
        ("/v1/kv/a".to_owned(), vec![("Authorization", &bearer)]),
    ];
    for (uri, headers) in &sources {
        let reply = registry.send_with(Method::GET, uri, headers, "").await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{uri} {headers:?}: {}",
            reply.body
        );
    }
    // Without a token the anonymous token (no policies, deny default) is refused.
    registry
        .get("/v1/kv/a", None)
        .await
        .expect(StatusCode::FORBIDDEN);
    // First match wins: `?token=` over the header, the header over Bearer.
    let reply = registry
        .send_with(
            Method::GET,
            "/v1/kv/a?token=anonymous",
            &[("X-Consul-Token", &reader)],
            "",
        )
        .await
        .expect(StatusCode::FORBIDDEN);
    assert!(reply.body.contains(ANONYMOUS_ID), "{}", reply.body);
    registry
        .send_with(
            Method::GET,
            "/v1/kv/a",
            &[
                ("X-Consul-Token", &reader),
                ("Authorization", "Bearer anonymous"),
            ],
            "",
        )
        .await
        .expect(StatusCode::OK);
    // A percent-encoded query token is decoded.
    let encoded = registry.get("/v1/kv/a?token=root%2Dtoken", None).await;
    assert_eq!(encoded.status, StatusCode::OK, "{}", encoded.body);
}

#[tokio::test]
async fn unknown_token_is_403_acl_not_found() {
    let registry = Registry::dev().await;
    for (method, uri) in [
        (Method::GET, "/v1/kv/a"),
        (Method::PUT, "/v1/kv/a"),
        (Method::GET, "/v1/session/list"),
        (Method::GET, "/v1/catalog/nodes"),
        (Method::GET, "/v1/acl/tokens"),
    ] {
        let reply = registry
            .send(method.clone(), uri, Some("no-such-token"), "")
            .await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{method} {uri}");
        assert_eq!(reply.body, "ACL not found", "{method} {uri}");
        assert!(reply.header("x-consul-index").is_some());
    }
}

#[tokio::test]
async fn status_endpoints_need_no_token() {
    let registry = Registry::dev().await;
    registry
        .get("/v1/status/leader", None)
        .await
        .expect(StatusCode::OK);
    registry
        .get("/v1/status/peers", None)
        .await
        .expect(StatusCode::OK);
}

// ---------------------------------------------------------------------------------------------
// Rules, end to end

/// The status of a KV request made with `token`.
async fn kv_status(registry: &Registry, method: Method, key: &str, token: &str) -> StatusCode {
    registry
        .send(method, &format!("/v1/kv/{key}"), Some(token), "v")
        .await
        .status
}

#[tokio::test]
async fn key_rules_enforce_read_write_deny_and_precedence() {
    let registry = Registry::dev().await;
    for key in ["app/a", "app/secret/x", "app/exact", "other", "ro/x"] {
        registry.kv_put(key, "v").await;
    }
    let token = registry
        .token_with_rules(
            r#"
key_prefix "app/" { policy = "write" }
key_prefix "app/secret/" { policy = "deny" }
key "app/exact" { policy = "read" }
key_prefix "ro/" { policy = "list" }
"#,
        )
        .await;
    use Method as M;
    use StatusCode as S;
    let cases: &[(Method, &str, StatusCode)] = &[
        // Write implies read.
        (M::GET, "app/a", S::OK),
        (M::PUT, "app/a", S::OK),
        (M::DELETE, "app/a", S::OK),
        // The longest prefix (a deny) wins over a shorter write.
        (M::GET, "app/secret/x", S::FORBIDDEN),
        (M::PUT, "app/secret/x", S::FORBIDDEN),
        // An exact rule beats the prefix: read only.
        (M::GET, "app/exact", S::OK),
        (M::PUT, "app/exact", S::FORBIDDEN),
        // `list` reads.
        (M::GET, "ro/x", S::OK),
        (M::PUT, "ro/x", S::FORBIDDEN),
        // No rule: the default (deny).
        (M::GET, "other", S::FORBIDDEN),
        (M::PUT, "other", S::FORBIDDEN),
    ];
    for (method, key, expected) in cases {
        let status = kv_status(&registry, method.clone(), key, &token).await;
        assert_eq!(status, *expected, "{method} {key}");
    }
    let denied = registry.put("/v1/kv/other", Some(&token), "v").await;
    assert!(
        denied
            .body
            .starts_with("Permission denied: token with AccessorID '")
            && denied
                .body
                .ends_with("lacks permission 'key:write' on \"other\""),
        "{}",
        denied.body
    );
}

#[tokio::test]
async fn kv_recursive_delete_is_refused_when_a_rule_beneath_denies_write() {
    let registry = Registry::dev().await;
    for key in ["app/a", "app/secret/x", "tmp/a"] {
        registry.kv_put(key, "v").await;
    }
    let token = registry
        .token_with_rules(
            "key_prefix \"app/\" { policy = \"write\" }\nkey_prefix \"app/secret/\" { policy = \"deny\" }\nkey_prefix \"tmp/\" { policy = \"write\" }",
        )
        .await;
    let refused = registry
        .send(Method::DELETE, "/v1/kv/app/?recurse", Some(&token), "")
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    assert_eq!(
        kv_status(&registry, Method::GET, "app/a", ROOT).await,
        StatusCode::OK
    );
    let allowed = registry
        .send(Method::DELETE, "/v1/kv/tmp/?recurse", Some(&token), "")
        .await;
    assert_eq!(allowed.status, StatusCode::OK, "{}", allowed.body);
    assert_eq!(
        kv_status(&registry, Method::GET, "tmp/a", ROOT).await,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn kv_lists_drop_unreadable_entries_and_say_so_in_both_headers() {
    let registry = Registry::dev().await;
    for key in ["app/a", "app/b", "app/secret/x"] {
        registry.kv_put(key, "v").await;
    }
    let token = registry
        .token_with_rules(
            "key_prefix \"app/\" { policy = \"read\" }\nkey_prefix \"app/secret/\" { policy = \"deny\" }",
        )
        .await;
    for query in ["recurse", "keys"] {
        let reply = registry
            .get(&format!("/v1/kv/app/?{query}"), Some(&token))
            .await
            .expect(StatusCode::OK);
        assert_eq!(
            reply.header("x-registry-results-filtered-by-acls"),
            Some("true")
        );
        assert_eq!(
            reply.header("x-consul-results-filtered-by-acls"),
            Some("true")
        );
        assert!(!reply.body.contains("secret"), "{query}: {}", reply.body);
        assert!(reply.body.contains("app/b"), "{query}: {}", reply.body);
    }
    // Nothing dropped: no header.
    let all = registry
        .get("/v1/kv/app/?keys", Some(ROOT))
        .await
        .expect(StatusCode::OK);
    assert!(all.header("x-consul-results-filtered-by-acls").is_none());
    assert!(all.body.contains("secret"));
}

/// Creates a session on `NODE` with `token`; returns the reply.
async fn create_session(registry: &Registry, token: &str) -> Reply {
    registry.put("/v1/session/create", Some(token), "").await
}

#[tokio::test]
async fn session_rules_apply_to_the_sessions_node() {
    let registry = Registry::dev().await;
    let writer = registry
        .token_with_rules(&format!(r#"session "{NODE}" {{ policy = "write" }}"#))
        .await;
    let reader = registry
        .token_with_rules(r#"session_prefix "node" { policy = "read" }"#)
        .await;
    let denied = registry
        .token_with_rules(
            "session_prefix \"\" { policy = \"write\" }\nsession_prefix \"node\" { policy = \"deny\" }",
        )
        .await;
    let created = create_session(&registry, &writer)
        .await
        .expect(StatusCode::OK);
    let id = created.json()["ID"].as_str().unwrap().to_owned();
    create_session(&registry, &reader)
        .await
        .expect(StatusCode::FORBIDDEN);
    create_session(&registry, &denied)
        .await
        .expect(StatusCode::FORBIDDEN);

    // Reads: the writer and the reader see it, the denied token gets a filtered list.
    for token in [&writer, &reader] {
        let list = registry
            .get("/v1/session/list", Some(token))
            .await
            .expect(StatusCode::OK);
        assert_eq!(list.json().as_array().unwrap().len(), 1);
        assert!(list.header("x-consul-results-filtered-by-acls").is_none());
    }
    let list = registry
        .get("/v1/session/list", Some(&denied))
        .await
        .expect(StatusCode::OK);
    assert_eq!(list.json(), json!([]));
    assert_eq!(
        list.header("x-registry-results-filtered-by-acls"),
        Some("true")
    );
    assert_eq!(
        list.header("x-consul-results-filtered-by-acls"),
        Some("true")
    );
    let node = registry
        .get(&format!("/v1/session/node/{NODE}"), Some(&denied))
        .await
        .expect(StatusCode::OK);
    assert_eq!(node.json(), json!([]));
    assert_eq!(
        node.header("x-consul-results-filtered-by-acls"),
        Some("true")
    );

    registry
        .put(&format!("/v1/session/renew/{id}"), Some(&reader), "")
        .await
        .expect(StatusCode::FORBIDDEN);
    registry
        .put(&format!("/v1/session/renew/{id}"), Some(&writer), "")
        .await
        .expect(StatusCode::OK);
    registry
        .put(&format!("/v1/session/destroy/{id}"), Some(&reader), "")
        .await
        .expect(StatusCode::FORBIDDEN);
    registry
        .put(&format!("/v1/session/destroy/{id}"), Some(&writer), "")
        .await
        .expect(StatusCode::OK);
}

#[tokio::test]
async fn node_and_service_rules_guard_the_catalog() {
    let registry = Registry::dev().await;
    let register = |node: &str, service: Option<&str>| {
        let mut body = json!({"Node": node, "Address": "10.0.0.1"});
        if let Some(service) = service {
            body["Service"] = json!({"Service": service});
        }
        body.to_string()
    };
    registry
        .put("/v1/catalog/register", Some(ROOT), &register("web-1", None))
        .await
        .expect(StatusCode::OK);
    registry
        .put("/v1/catalog/register", Some(ROOT), &register("db-1", None))
        .await
        .expect(StatusCode::OK);
    let token = registry
        .token_with_rules(
            r#"
node_prefix "web-" { policy = "write" }
node "db-1" { policy = "read" }
service_prefix "" { policy = "write" }
service "billing" { policy = "deny" }
"#,
        )
        .await;
    // Node write on web-*, not on db-1.
    registry
        .put(
            "/v1/catalog/register",
            Some(&token),
            &register("web-2", Some("api")),
        )
        .await
        .expect(StatusCode::OK);
    registry
        .put(
            "/v1/catalog/register",
            Some(&token),
            &register("db-1", None),
        )
        .await
        .expect(StatusCode::FORBIDDEN);
    // Service write needs the service rule too: denied for billing.
    registry
        .put(
            "/v1/catalog/register",
            Some(&token),
            &register("web-2", Some("billing")),
        )
        .await
        .expect(StatusCode::FORBIDDEN);

    // The node list drops what the token may not read (this server's own node) and says so.
    let nodes = registry
        .get("/v1/catalog/nodes", Some(&token))
        .await
        .expect(StatusCode::OK);
    let names: Vec<String> = nodes
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|node| node["Node"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        sorted(names.iter().map(String::as_str).collect()),
        vec!["db-1", "web-1", "web-2"]
    );
    assert_eq!(
        nodes.header("x-registry-results-filtered-by-acls"),
        Some("true")
    );
    assert_eq!(
        nodes.header("x-consul-results-filtered-by-acls"),
        Some("true")
    );
}

#[tokio::test]
async fn agent_rules_guard_the_agent_endpoints() {
    let registry = Registry::dev().await;
    let reader = registry
        .token_with_rules(&format!(r#"agent "{NODE}" {{ policy = "read" }}"#))
        .await;
    let other = registry
        .token_with_rules(r#"agent_prefix "other" { policy = "write" }"#)
        .await;
    registry
        .get("/v1/agent/self", Some(&reader))
        .await
        .expect(StatusCode::OK);
    let denied = registry
        .get("/v1/agent/self", Some(&other))
        .await
        .expect(StatusCode::FORBIDDEN);
    assert!(
        denied.body.contains("lacks permission 'agent:read'"),
        "{}",
        denied.body
    );
}

#[tokio::test]
async fn policy_changes_apply_from_the_next_request() {
    let registry = Registry::dev().await;
    registry.kv_put("a", "1").await;
    let id = registry.policy("p", r#"key "a" { policy = "read" }"#).await;
    let token = registry.token(&[json!({"ID": id})]).await;
    let secret = token["SecretID"].as_str().unwrap();
    let accessor = token["AccessorID"].as_str().unwrap();
    assert_eq!(
        kv_status(&registry, Method::PUT, "a", secret).await,
        StatusCode::FORBIDDEN
    );

    // Widening the policy lets the same token write at once.
    let body = json!({"Name": "p2", "Rules": r#"key "a" { policy = "write" }"#}).to_string();
    registry
        .put(&format!("/v1/acl/policy/{id}"), Some(ROOT), &body)
        .await
        .expect(StatusCode::OK);
    assert_eq!(
        kv_status(&registry, Method::PUT, "a", secret).await,
        StatusCode::OK
    );
    // The token shows the new name.
    let read = registry
        .get(&format!("/v1/acl/token/{accessor}"), Some(ROOT))
        .await
        .json();
    assert_eq!(read["Policies"], json!([{"ID": id, "Name": "p2"}]));

    // Deleting the policy unlinks it: the token can no longer read.
    registry
        .delete(&format!("/v1/acl/policy/{id}"), Some(ROOT))
        .await
        .expect(StatusCode::OK);
    assert_eq!(
        kv_status(&registry, Method::GET, "a", secret).await,
        StatusCode::FORBIDDEN
    );
    let read = registry
        .get(&format!("/v1/acl/token/{accessor}"), Some(ROOT))
        .await
        .json();
    assert!(read.get("Policies").is_none());

    // Linking global-management makes it a management token.
    let body = json!({"Policies": [{"Name": "global-management"}]}).to_string();
    registry
        .put(&format!("/v1/acl/token/{accessor}"), Some(ROOT), &body)
        .await
        .expect(StatusCode::OK);
    registry
        .get("/v1/acl/tokens", Some(secret))
        .await
        .expect(StatusCode::OK);
}

#[tokio::test]
async fn several_policies_merge_with_deny_winning() {
    let registry = Registry::dev().await;
    registry.kv_put("shared/x", "1").await;
    registry.kv_put("mine/x", "1").await;
    let writer = registry
        .policy("writer", r#"key_prefix "" { policy = "write" }"#)
        .await;
    let deny = registry
        .policy("deny", r#"key_prefix "shared/" { policy = "deny" }"#)
        .await;
    let reader = registry
        .policy("reader", r#"key_prefix "shared/" { policy = "read" }"#)
        .await;
    let token = registry
        .token(&[
            json!({"ID": writer}),
            json!({"ID": deny}),
            json!({"ID": reader}),
        ])
        .await;
    let secret = token["SecretID"].as_str().unwrap();
    assert_eq!(
        kv_status(&registry, Method::GET, "shared/x", secret).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        kv_status(&registry, Method::PUT, "mine/x", secret).await,
        StatusCode::OK
    );
}

#[tokio::test]
async fn default_allow_lets_tokens_without_rules_read_and_write() {
    let registry = Registry::open(testkit::mem_storage(), acl(true)).await;
    registry
        .put("/v1/kv/a", None, "1")
        .await
        .expect(StatusCode::OK);
    registry.get("/v1/kv/a", None).await.expect(StatusCode::OK);
    // A deny rule still denies; ACL endpoints still need management.
    let token = registry
        .token_with_rules(r#"key "a" { policy = "deny" }"#)
        .await;
    assert_eq!(
        kv_status(&registry, Method::GET, "a", &token).await,
        StatusCode::FORBIDDEN
    );
    registry
        .get("/v1/acl/tokens", None)
        .await
        .expect(StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn anonymous_token_policies_apply_to_requests_without_a_token() {
    let registry = Registry::dev().await;
    registry.kv_put("public/a", "1").await;
    registry
        .get("/v1/kv/public/a", None)
        .await
        .expect(StatusCode::FORBIDDEN);
    let id = registry
        .policy("public", r#"key_prefix "public/" { policy = "read" }"#)
        .await;
    let body = json!({"Description": "Anonymous Token", "Policies": [{"ID": id}]}).to_string();
    registry
        .put(&format!("/v1/acl/token/{ANONYMOUS_ID}"), Some(ROOT), &body)
        .await
        .expect(StatusCode::OK);
    registry
        .get("/v1/kv/public/a", None)
        .await
        .expect(StatusCode::OK);
    registry
        .put("/v1/kv/public/a", None, "2")
        .await
        .expect(StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn policies_for_other_datacenters_grant_nothing_here() {
    let registry = Registry::dev().await;
    registry.kv_put("a", "1").await;
    let body = json!({"Name": "dc2-only", "Rules": r#"key "a" { policy = "read" }"#, "Datacenters": ["dc2"]});
    let id = registry
        .put("/v1/acl/policy", Some(ROOT), &body.to_string())
        .await
        .expect(StatusCode::OK)
        .json()["ID"]
        .as_str()
        .unwrap()
        .to_owned();
    let token = registry.token(&[json!({"ID": id})]).await;
    let secret = token["SecretID"].as_str().unwrap();
    assert_eq!(
        kv_status(&registry, Method::GET, "a", secret).await,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_created_while_their_policy_changes_end_with_its_final_rules() {
    let registry = Arc::new(Registry::dev().await);
    let id = registry
        .policy("moving", r#"key "k0" { policy = "write" }"#)
        .await;
    let updates = {
        let registry = registry.clone();
        let id = id.clone();
        tokio::spawn(async move {
            for round in 1..=5 {
                let rules = format!(r#"key "k{round}" {{ policy = "write" }}"#);
                let body = json!({"Name": "moving", "Rules": rules}).to_string();
                registry
                    .put(&format!("/v1/acl/policy/{id}"), Some(ROOT), &body)
                    .await
                    .expect(StatusCode::OK);
            }
        })
    };
    let creates: Vec<_> = (0..20)
        .map(|_| {
            let registry = registry.clone();
            let id = id.clone();
            tokio::spawn(async move {
                registry.token(&[json!({"ID": id})]).await["SecretID"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
        })
        .collect();
    updates.await.unwrap();
    for create in creates {
        let secret = create.await.unwrap();
        assert_eq!(
            kv_status(&registry, Method::PUT, "k5", &secret).await,
            StatusCode::OK
        );
        assert_eq!(
            kv_status(&registry, Method::PUT, "k4", &secret).await,
            StatusCode::FORBIDDEN
        );
    }
}
