//! API tests of the scheduler's ACL (`/v1/acl/*`) and namespaces (`/v1/namespace*`) in Nomad's
//! shape, and of ACL enforcement on the jobs endpoints: bootstrap, the dev root token, client
//! tokens with namespace policies (globs, deny precedence), anonymous requests, unknown tokens,
//! policy validation, namespace CRUD with ACL-filtered lists, and ACLs disabled.
//!
//! Each test drives `scheduler::router` in-process (`support::Scheduler`, over
//! `testkit::call`) over a fresh `MemStorage`, with `scheduler::start_tasks` running so job
//! writes apply. Policy evaluation itself (glob ranking, merging) is unit-tested beside the code
//! in `src/acl/`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::FromRequestParts;
use http::{Method, Request, StatusCode};
use scheduler::Config;
use scheduler::acl::{Authz, Capability};
use serde_json::{Value, json};
use storage::Storage;
use support::{Reply, Scheduler};

const ROOT: &str = "s.root-token-for-tests";

/// How a request presents its token.
#[derive(Debug, Clone, Copy)]
enum Token<'a> {
    None,
    Scheduler(&'a str),
    Nomad(&'a str),
    Bearer(&'a str),
}

impl Token<'_> {
    /// Every way a request can present `secret`.
    fn every_form(secret: &str) -> [Token<'_>; 3] {
        [
            Token::Scheduler(secret),
            Token::Nomad(secret),
            Token::Bearer(secret),
        ]
    }
}

impl Scheduler {
    /// ACLs on with `ROOT` as the dev root token, as `cairn dev`.
    async fn dev() -> Scheduler {
        Scheduler::with_acl(testkit::mem_storage(), true, Some(ROOT)).await
    }

    async fn with_acl(
        storage: Arc<dyn Storage>,
        acl_enabled: bool,
        root: Option<&str>,
    ) -> Scheduler {
        let config = Config {
            acl_enabled,
            dev_root_token: root.map(str::to_owned),
            ..Config::default()
        };
        Scheduler::open(storage, config).await
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Token<'_>,
        body: Option<Value>,
    ) -> Reply {
        let mut request = testkit::request(method.as_str(), path);
        request = match token {
            Token::None => request,
            Token::Scheduler(secret) => request.header("X-Scheduler-Token", secret),
            Token::Nomad(secret) => request.header("X-Nomad-Token", secret),
            Token::Bearer(secret) => request.header("Authorization", format!("Bearer {secret}")),
        };
        let body = match body {
            Some(value) => Body::from(value.to_string()),
            None => Body::empty(),
        };
        self.handle(request.body(body).expect("request")).await
    }

    async fn get(&self, path: &str, token: Token<'_>) -> Reply {
        self.call(Method::GET, path, token, None).await
    }

    async fn post(&self, path: &str, token: Token<'_>, body: Value) -> Reply {
        self.call(Method::POST, path, token, Some(body)).await
    }

    async fn delete(&self, path: &str, token: Token<'_>) -> Reply {
        self.call(Method::DELETE, path, token, None).await
    }

    /// Writes policy `name` with `rules` as root.
    async fn policy(&self, name: &str, rules: &str) {
        self.post(
            &format!("/v1/acl/policy/{name}"),
            Token::Scheduler(ROOT),
            json!({"Name": name, "Description": "test", "Rules": rules}),
        )
        .await
        .expect(StatusCode::OK);
    }

    /// Creates a client token holding `policies` as root; returns its SecretID.
    async fn client_token(&self, policies: &[&str]) -> String {
        let reply = self
            .post(
                "/v1/acl/token",
                Token::Scheduler(ROOT),
                json!({"Name": "client", "Type": "client", "Policies": policies}),
            )
            .await
            .expect(StatusCode::OK);
        reply.json()["SecretID"]
            .as_str()
            .expect("SecretID")
            .to_owned()
    }

    /// Writes policy `name` with `rules` and creates a client token holding only it; returns
    /// its SecretID.
    async fn client_token_with(&self, name: &str, rules: &str) -> String {
        self.policy(name, rules).await;
        self.client_token(&[name]).await
    }

    /// Creates namespace `name` as root.
    async fn namespace(&self, name: &str) {
        self.post(
            "/v1/namespace",
            Token::Scheduler(ROOT),
            json!({"Name": name, "Description": format!("{name} team")}),
        )
        .await
        .expect(StatusCode::OK);
    }

    /// The authority `secret` resolves to, straight from the extractor.
    async fn authz(&self, secret: Option<&str>) -> Result<Authz, scheduler::Error> {
        let mut request = Request::builder().uri("/");
        if let Some(secret) = secret {
            request = request.header("x-scheduler-token", secret);
        }
        let (mut parts, ()) = request.body(()).expect("request").into_parts();
        Authz::from_request_parts(&mut parts, &self.state).await
    }
}

/// A small raw_exec service job.
fn job(id: &str, namespace: &str) -> Value {
    json!({
        "Job": {
            "ID": id,
            "Name": id,
            "Namespace": namespace,
            "Type": "service",
            "Datacenters": ["dc1"],
            "TaskGroups": [{
                "Name": "group",
                "Count": 1,
                "Tasks": [{
                    "Name": "task",
                    "Driver": "raw_exec",
                    "Config": {"command": "/bin/sleep", "args": ["60"]}
                }]
            }]
        }
    })
}

fn ids(list: &Value, field: &str) -> Vec<String> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|item| item[field].as_str().unwrap_or_default().to_owned())
        .collect()
}

// ---- bootstrap ----

#[tokio::test]
async fn bootstrap_with_a_dev_root_token_is_already_done() {
    let scheduler = Scheduler::dev().await;
    let reply = scheduler
        .post("/v1/acl/bootstrap", Token::None, json!({}))
        .await
        .expect_error(
            StatusCode::BAD_REQUEST,
            "ACL bootstrap already done (reset index: ",
        );
    assert!(reply.body.trim_end().ends_with(')'), "{}", reply.body);
}

#[tokio::test]
async fn bootstrap_creates_one_management_token_then_refuses() {
    let scheduler = Scheduler::with_acl(testkit::mem_storage(), true, None).await;
    let reply = scheduler
        .call(Method::POST, "/v1/acl/bootstrap", Token::None, None)
        .await
        .expect(StatusCode::OK);
    let token = reply.json();
    assert_eq!(token["Type"], "management");
    assert_eq!(token["Name"], "Bootstrap Token");
    assert_eq!(token["Global"], true);
    assert!(token["Policies"].is_null());
    let index = token["CreateIndex"].as_u64().expect("CreateIndex");
    assert_eq!(reply.index(), index);
    let secret = token["SecretID"].as_str().expect("SecretID").to_owned();
    assert_eq!(secret.len(), 36);
    assert!(
        token["CreateTime"]
            .as_str()
            .is_some_and(|time| time.ends_with('Z'))
    );

    scheduler
        .post("/v1/acl/bootstrap", Token::None, json!({}))
        .await
        .expect_error(
            StatusCode::BAD_REQUEST,
            &format!("ACL bootstrap already done (reset index: {index})"),
        );
    // The bootstrap token is a management token.
    let list = scheduler
        .get("/v1/acl/tokens", Token::Nomad(&secret))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(ids(&list, "Name"), vec!["Bootstrap Token"]);
}

#[tokio::test]
async fn bootstrap_accepts_a_chosen_uuid_secret_only() {
    let scheduler = Scheduler::with_acl(testkit::mem_storage(), true, None).await;
    scheduler
        .post(
            "/v1/acl/bootstrap",
            Token::None,
            json!({"BootstrapSecret": "not-a-uuid"}),
        )
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid acl token");
    let secret = "2b778dd9-f5f1-6f29-b4b4-9a5fa948757a";
    let token = scheduler
        .post(
            "/v1/acl/bootstrap",
            Token::None,
            json!({"BootstrapSecret": secret}),
        )
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(token["SecretID"], secret);
    scheduler
        .get("/v1/acl/token/self", Token::Scheduler(secret))
        .await
        .expect(StatusCode::OK);
}

// ---- the root token ----

#[tokio::test]
async fn root_token_can_do_everything() {
    let scheduler = Scheduler::dev().await;
    for token in Token::every_form(ROOT) {
        let me = scheduler
            .get("/v1/acl/token/self", token)
            .await
            .expect(StatusCode::OK)
            .json();
        assert_eq!(me["Type"], "management");
        assert_eq!(me["SecretID"], ROOT);
    }
    scheduler
        .client_token_with("readers", r#"namespace "default" { policy = "read" }"#)
        .await;
    scheduler.namespace("team-a").await;
    scheduler
        .post("/v1/jobs", Token::Scheduler(ROOT), job("web", "team-a"))
        .await
        .expect(StatusCode::OK);
    scheduler
        .get("/v1/jobs?namespace=team-a", Token::Bearer(ROOT))
        .await
        .expect(StatusCode::OK);
    // The root token is listed (stored on first use) and has an accessor.
    let tokens = scheduler
        .get("/v1/acl/tokens", Token::Scheduler(ROOT))
        .await
        .expect(StatusCode::OK)
        .json();
    let root = tokens
        .as_array()
        .and_then(|list| list.iter().find(|token| token["Type"] == "management"))
        .cloned()
        .expect("root token listed");
    assert!(
        root.get("SecretID").is_none(),
        "stubs carry no secret: {root}"
    );
    let accessor = root["AccessorID"].as_str().expect("accessor");
    scheduler
        .delete(&format!("/v1/acl/token/{accessor}"), Token::Scheduler(ROOT))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "dev root token cannot be deleted");
    let authz = scheduler.authz(Some(ROOT)).await.expect("root resolves");
    assert!(authz.is_management());
    assert!(authz.allows_namespace("anything", Capability::AllocNodeExec));
}

// ---- client tokens ----

#[tokio::test]
async fn read_policy_on_default_lists_jobs_but_cannot_submit() {
    let scheduler = Scheduler::dev().await;
    let secret = scheduler
        .client_token_with("readers", r#"namespace "default" { policy = "read" }"#)
        .await;
    for token in Token::every_form(&secret) {
        scheduler
            .get("/v1/jobs", token)
            .await
            .expect(StatusCode::OK);
        scheduler
            .post("/v1/jobs", token, job("web", "default"))
            .await
            .expect_error(StatusCode::FORBIDDEN, "Permission denied");
    }
    // Other namespaces are out of reach.
    scheduler
        .get("/v1/jobs?namespace=other", Token::Scheduler(&secret))
        .await
        .expect_error(StatusCode::FORBIDDEN, "Permission denied");
    // ACL administration needs a management token.
    scheduler
        .get("/v1/acl/tokens", Token::Scheduler(&secret))
        .await
        .expect_error(StatusCode::FORBIDDEN, "Permission denied");
    scheduler
        .post(
            "/v1/acl/policy/mine",
            Token::Scheduler(&secret),
            json!({"Name": "mine", "Rules": r#"namespace "*" { policy = "write" }"#}),
        )
        .await
        .expect_error(StatusCode::FORBIDDEN, "Permission denied");
    scheduler
        .post(
            "/v1/namespace",
            Token::Scheduler(&secret),
            json!({"Name": "mine"}),
        )
        .await
        .expect_error(StatusCode::FORBIDDEN, "Permission denied");
}

#[tokio::test]
async fn write_policy_lets_a_client_token_submit_jobs() {
    let scheduler = Scheduler::dev().await;
    let secret = scheduler
        .client_token_with("writers", r#"namespace "default" { policy = "write" }"#)
        .await;
    scheduler
        .post("/v1/jobs", Token::Nomad(&secret), job("web", "default"))
        .await
        .expect(StatusCode::OK);
    let list = scheduler
        .get("/v1/jobs", Token::Nomad(&secret))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(ids(&list, "ID"), vec!["web"]);
}

#[tokio::test]
async fn glob_rules_rank_by_specificity_and_deny_wins() {
    let scheduler = Scheduler::dev().await;
    for namespace in ["dev", "prod-web", "prod-api"] {
        scheduler.namespace(namespace).await;
    }
    scheduler
        .policy(
            "layered",
            r#"
            namespace "*"        { policy = "write" }
            namespace "prod-*"   { policy = "deny" }
            namespace "prod-api" { policy = "read" }
            "#,
        )
        .await;
    // A second policy cannot lift a deny at the same key.
    scheduler
        .policy("lift", r#"namespace "prod-*" { policy = "write" }"#)
        .await;
    let secret = scheduler.client_token(&["layered", "lift"]).await;

    scheduler
        .post(
            "/v1/jobs?namespace=dev",
            Token::Nomad(&secret),
            job("a", "dev"),
        )
        .await
        .expect(StatusCode::OK);
    scheduler
        .post(
            "/v1/jobs?namespace=prod-web",
            Token::Nomad(&secret),
            job("b", "prod-web"),
        )
        .await
        .expect_error(StatusCode::FORBIDDEN, "Permission denied");
    scheduler
        .post(
            "/v1/jobs?namespace=prod-api",
            Token::Nomad(&secret),
            job("c", "prod-api"),
        )
        .await
        .expect_error(StatusCode::FORBIDDEN, "Permission denied");
    scheduler
        .get("/v1/jobs?namespace=prod-web", Token::Nomad(&secret))
        .await
        .expect(StatusCode::FORBIDDEN);
    scheduler
        .get("/v1/jobs?namespace=prod-api", Token::Nomad(&secret))
        .await
        .expect(StatusCode::OK);

    let authz = scheduler.authz(Some(&secret)).await.expect("resolves");
    assert!(authz.allows_namespace("anything-else", Capability::SubmitJob));
    assert!(!authz.allows_namespace("prod-db", Capability::ReadJob));
    assert!(!authz.allows_any_in_namespace("prod-db"));
    assert!(authz.allows_namespace("prod-api", Capability::ReadJob));
    assert!(!authz.allows_namespace("prod-api", Capability::SubmitJob));
    assert!(!authz.is_management());
}

#[tokio::test]
async fn explicit_capabilities_grant_exactly_what_they_name() {
    let scheduler = Scheduler::dev().await;
    let secret = scheduler
        .client_token_with(
            "ops",
            r#"namespace "default" { capabilities = ["alloc-lifecycle", "alloc-node-exec", "policy-engine-override"] }
               node { policy = "read" }
               agent { policy = "write" }"#,
        )
        .await;
    let authz = scheduler.authz(Some(&secret)).await.expect("resolves");
    assert!(authz.allows_namespace("default", Capability::AllocLifecycle));
    assert!(authz.allows_namespace("default", Capability::AllocNodeExec));
    assert!(authz.allows_namespace("default", Capability::PolicyOverride));
    assert!(!authz.allows_namespace("default", Capability::ListJobs));
    assert!(authz.allow_node_read().is_ok());
    assert!(authz.allow_node_write().is_err());
    assert!(authz.allow_agent_write().is_ok());
    assert!(authz.allow_operator_read().is_err());
}

#[tokio::test]
async fn missing_token_is_denied_unless_an_anonymous_policy_allows() {
    let scheduler = Scheduler::dev().await;
    scheduler
        .get("/v1/jobs", Token::None)
        .await
        .expect_error(StatusCode::FORBIDDEN, "Permission denied");
    let me = scheduler
        .get("/v1/acl/token/self", Token::None)
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(me["AccessorID"], "anonymous");
    assert_eq!(me["Policies"], json!(["anonymous"]));

    scheduler
        .policy("anonymous", r#"namespace "default" { policy = "read" }"#)
        .await;
    scheduler
        .get("/v1/jobs", Token::None)
        .await
        .expect(StatusCode::OK);
    scheduler
        .post("/v1/jobs", Token::None, job("web", "default"))
        .await
        .expect_error(StatusCode::FORBIDDEN, "Permission denied");
    // Anyone may read the anonymous policy.
    scheduler
        .get("/v1/acl/policy/anonymous", Token::None)
        .await
        .expect(StatusCode::OK);
}

#[tokio::test]
async fn unknown_token_is_403_acl_token_not_found() {
    let scheduler = Scheduler::dev().await;
    for token in [
        Token::Scheduler("2b778dd9-f5f1-6f29-b4b4-9a5fa948757a"),
        Token::Nomad("garbage"),
        Token::Bearer("s.nope"),
    ] {
        scheduler
            .get("/v1/jobs", token)
            .await
            .expect_error(StatusCode::FORBIDDEN, "ACL token not found");
    }
    assert!(matches!(
        scheduler.authz(Some("nope")).await,
        Err(scheduler::Error::TokenNotFound)
    ));
}

#[tokio::test]
async fn deleted_policies_and_tokens_stop_granting_at_once() {
    let scheduler = Scheduler::dev().await;
    let secret = scheduler
        .client_token_with("readers", r#"namespace "default" { policy = "read" }"#)
        .await;
    scheduler
        .get("/v1/jobs", Token::Nomad(&secret))
        .await
        .expect(StatusCode::OK);
    scheduler
        .delete("/v1/acl/policy/readers", Token::Scheduler(ROOT))
        .await
        .expect(StatusCode::OK);
    scheduler
        .get("/v1/jobs", Token::Nomad(&secret))
        .await
        .expect(StatusCode::FORBIDDEN);

    let me = scheduler
        .get("/v1/acl/token/self", Token::Nomad(&secret))
        .await
        .expect(StatusCode::OK)
        .json();
    let accessor = me["AccessorID"].as_str().expect("accessor").to_owned();
    scheduler
        .delete(&format!("/v1/acl/token/{accessor}"), Token::Scheduler(ROOT))
        .await
        .expect(StatusCode::OK);
    scheduler
        .get("/v1/jobs", Token::Nomad(&secret))
        .await
        .expect_error(StatusCode::FORBIDDEN, "ACL token not found");
    scheduler
        .delete(&format!("/v1/acl/token/{accessor}"), Token::Scheduler(ROOT))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "Cannot delete nonexistent tokens");
}

// ---- policies ----

#[tokio::test]
async fn policy_with_bad_rules_is_400_naming_the_problem() {
    let scheduler = Scheduler::dev().await;
    let cases = [
        (
            r#"namespace "default" { policy = "read" "#,
            "Failed to parse ACL Policy",
        ),
        (
            r#"namespace "default" { policy = "admin" }"#,
            "Invalid namespace policy \"admin\"",
        ),
        (
            r#"namespace "default" { capabilities = ["fly"] }"#,
            "Invalid namespace capability 'fly'",
        ),
        (
            r#"jobs { policy = "read" }"#,
            "Invalid or duplicate policy keys: jobs",
        ),
    ];
    for (rules, problem) in cases {
        scheduler
            .post(
                "/v1/acl/policy/bad",
                Token::Scheduler(ROOT),
                json!({"Name": "bad", "Rules": rules}),
            )
            .await
            .expect_error(StatusCode::BAD_REQUEST, problem);
    }
    scheduler
        .post(
            "/v1/acl/policy/bad_name",
            Token::Scheduler(ROOT),
            json!({"Name": "bad_name", "Rules": r#"node { policy = "read" }"#}),
        )
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid name 'bad_name'");
    scheduler
        .post(
            "/v1/acl/policy/one",
            Token::Scheduler(ROOT),
            json!({"Name": "two", "Rules": r#"node { policy = "read" }"#}),
        )
        .await
        .expect_error(
            StatusCode::BAD_REQUEST,
            "ACL policy name does not match request path",
        );
    scheduler
        .post(
            "/v1/acl/policy/one",
            Token::Scheduler(ROOT),
            json!("not an object"),
        )
        .await
        .expect(StatusCode::BAD_REQUEST);
    // Nothing was stored.
    let list = scheduler
        .get("/v1/acl/policies", Token::Scheduler(ROOT))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(list, json!([]));
}

#[tokio::test]
async fn policy_crud_round_trips_with_indexes_and_rules_json() {
    let scheduler = Scheduler::dev().await;
    let rules = r#"namespace "default" { policy = "read" }"#;
    let written = scheduler
        .post(
            "/v1/acl/policy/readers",
            Token::Nomad(ROOT),
            json!({"Name": "readers", "Description": "read only", "Rules": rules}),
        )
        .await
        .expect(StatusCode::OK);
    assert!(written.body.is_empty());
    let index: u64 = written
        .header("x-nomad-index")
        .and_then(|value| value.parse().ok())
        .expect("X-Nomad-Index");
    let policy = scheduler
        .get("/v1/acl/policy/readers", Token::Nomad(ROOT))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(policy["Rules"], rules);
    assert_eq!(policy["Description"], "read only");
    assert_eq!(policy["CreateIndex"], index);
    assert_eq!(policy["ModifyIndex"], index);
    assert_eq!(policy["RulesJSON"]["Namespaces"][0]["Name"], "default");
    assert_eq!(policy["RulesJSON"]["Namespaces"][0]["Policy"], "read");

    scheduler
        .post(
            "/v1/acl/policy/readers",
            Token::Nomad(ROOT),
            json!({"Name": "readers", "Description": "changed", "Rules": rules}),
        )
        .await
        .expect(StatusCode::OK);
    let list = scheduler
        .get("/v1/acl/policies", Token::Nomad(ROOT))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(list[0]["Name"], "readers");
    assert_eq!(list[0]["Description"], "changed");
    assert_eq!(list[0]["CreateIndex"], index);
    assert!(
        list[0]["ModifyIndex"]
            .as_u64()
            .is_some_and(|modify| modify > index)
    );
    assert!(list[0].get("Rules").is_none());

    scheduler
        .delete("/v1/acl/policy/readers", Token::Nomad(ROOT))
        .await
        .expect(StatusCode::OK);
    scheduler
        .get("/v1/acl/policy/readers", Token::Nomad(ROOT))
        .await
        .expect_error(StatusCode::NOT_FOUND, "ACL policy not found");
}

#[tokio::test]
async fn client_token_sees_only_the_policies_it_holds() {
    let scheduler = Scheduler::dev().await;
    scheduler
        .policy("mine", r#"namespace "default" { policy = "read" }"#)
        .await;
    scheduler
        .policy("theirs", r#"namespace "other" { policy = "read" }"#)
        .await;
    let secret = scheduler.client_token(&["mine"]).await;
    let list = scheduler
        .get("/v1/acl/policies", Token::Nomad(&secret))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(ids(&list, "Name"), vec!["mine"]);
    scheduler
        .get("/v1/acl/policy/mine", Token::Nomad(&secret))
        .await
        .expect(StatusCode::OK);
    scheduler
        .get("/v1/acl/policy/theirs", Token::Nomad(&secret))
        .await
        .expect_error(StatusCode::FORBIDDEN, "Permission denied");
}

#[tokio::test]
async fn blocking_policy_list_wakes_on_a_write() {
    let scheduler = Arc::new(Scheduler::dev().await);
    // A first write, so the table's index is past the floor of 1 that empty tables report.
    scheduler
        .policy("early", r#"node { policy = "read" }"#)
        .await;
    let first = scheduler
        .get("/v1/acl/policies", Token::Scheduler(ROOT))
        .await
        .expect(StatusCode::OK);
    let index: u64 = first.index();
    let waiter = {
        let scheduler = Arc::clone(&scheduler);
        tokio::spawn(async move {
            scheduler
                .get(
                    &format!("/v1/acl/policies?index={index}&wait=10s"),
                    Token::Scheduler(ROOT),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "the query should block");
    scheduler
        .policy("late", r#"node { policy = "read" }"#)
        .await;
    let reply = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken")
        .expect("task")
        .expect(StatusCode::OK);
    assert_eq!(ids(&reply.json(), "Name"), vec!["early", "late"]);
}

// ---- tokens ----

#[tokio::test]
async fn token_crud_keeps_secrets_from_stubs_and_other_clients() {
    let scheduler = Scheduler::dev().await;
    scheduler
        .policy("readers", r#"namespace "default" { policy = "read" }"#)
        .await;
    let created = scheduler
        .post(
            "/v1/acl/token",
            Token::Scheduler(ROOT),
            json!({"Name": "ci", "Type": "client", "Policies": ["readers"], "ExpirationTTL": "1h"}),
        )
        .await
        .expect(StatusCode::OK)
        .json();
    let accessor = created["AccessorID"].as_str().expect("accessor").to_owned();
    let secret = created["SecretID"].as_str().expect("secret").to_owned();
    assert_eq!(created["ExpirationTTL"], "1h0m0s");
    assert!(created["ExpirationTime"].as_str().is_some());
    assert_eq!(created["Policies"], json!(["readers"]));

    let read = scheduler
        .get(&format!("/v1/acl/token/{accessor}"), Token::Scheduler(ROOT))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(read["SecretID"], secret.as_str());
    // A client token may read itself, not others.
    scheduler
        .get(&format!("/v1/acl/token/{accessor}"), Token::Nomad(&secret))
        .await
        .expect(StatusCode::OK);
    let other = scheduler.client_token(&["readers"]).await;
    scheduler
        .get(&format!("/v1/acl/token/{accessor}"), Token::Nomad(&other))
        .await
        .expect_error(StatusCode::FORBIDDEN, "Permission denied");

    let list = scheduler
        .get("/v1/acl/tokens", Token::Scheduler(ROOT))
        .await
        .expect(StatusCode::OK)
        .json();
    assert!(
        list.as_array()
            .is_some_and(|tokens| tokens.iter().all(|token| token.get("SecretID").is_none()))
    );
    assert!(ids(&list, "AccessorID").contains(&accessor));

    let updated = scheduler
        .post(
            &format!("/v1/acl/token/{accessor}"),
            Token::Scheduler(ROOT),
            json!({"AccessorID": accessor, "Name": "ci-renamed", "Type": "client", "Policies": ["readers"]}),
        )
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(updated["Name"], "ci-renamed");
    assert_eq!(updated["SecretID"], secret.as_str());
    assert_eq!(updated["CreateIndex"], created["CreateIndex"]);
    assert_eq!(updated["ExpirationTime"], created["ExpirationTime"]);
    scheduler
        .post(
            &format!("/v1/acl/token/{accessor}"),
            Token::Scheduler(ROOT),
            json!({"AccessorID": "other", "Name": "x", "Type": "client", "Policies": ["readers"]}),
        )
        .await
        .expect_error(
            StatusCode::BAD_REQUEST,
            "ACL token accessor does not match request path",
        );
    scheduler
        .get(
            "/v1/acl/token/00000000-0000-0000-0000-000000000000",
            Token::Scheduler(ROOT),
        )
        .await
        .expect_error(StatusCode::NOT_FOUND, "ACL token not found");
}

#[tokio::test]
async fn invalid_tokens_are_refused_with_upstream_messages() {
    let scheduler = Scheduler::dev().await;
    let cases = [
        (
            json!({"Type": "client"}),
            "client token missing policies or roles",
        ),
        (
            json!({"Type": "management", "Policies": ["x"]}),
            "management token cannot be associated with policies or roles",
        ),
        (
            json!({"Type": "root", "Policies": ["x"]}),
            "token type must be client or management",
        ),
        (
            json!({"Type": "client", "Policies": ["x"], "ExpirationTTL": "10s"}),
            "expiration time cannot be less than 1m0s in the future",
        ),
        (
            json!({"Type": "client", "Policies": ["x"], "ExpirationTTL": "48h"}),
            "expiration time cannot be more than 24h0m0s in the future",
        ),
        (
            json!({"Type": "client", "Policies": ["x"], "ExpirationTTL": "-1h"}),
            "should not be negative",
        ),
        (
            json!({"Type": "client", "Policies": ["x"], "Roles": [{"Name": "ops"}]}),
            "cannot find role ops",
        ),
        (
            json!({"AccessorID": "nope", "Type": "client", "Policies": ["x"]}),
            "cannot find token nope",
        ),
        (
            json!({"Type": "client", "Policies": ["x"], "Name": "n".repeat(257)}),
            "token name too long",
        ),
    ];
    for (body, problem) in cases {
        scheduler
            .post("/v1/acl/token", Token::Scheduler(ROOT), body)
            .await
            .expect_error(StatusCode::BAD_REQUEST, problem);
    }
    scheduler
        .call(Method::POST, "/v1/acl/token", Token::Scheduler(ROOT), None)
        .await
        .expect(StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn tokens_survive_a_restart() {
    let storage: Arc<dyn Storage> = testkit::mem_storage();
    let secret = {
        let scheduler = Scheduler::with_acl(Arc::clone(&storage), true, Some(ROOT)).await;
        scheduler
            .client_token_with("readers", r#"namespace "default" { policy = "read" }"#)
            .await
    };
    let scheduler = Scheduler::with_acl(storage, true, Some("s.another-root")).await;
    scheduler
        .get("/v1/jobs", Token::Nomad(&secret))
        .await
        .expect(StatusCode::OK);
    // The old root token is dead once the root token changes.
    scheduler
        .get("/v1/jobs", Token::Nomad(ROOT))
        .await
        .expect_error(StatusCode::FORBIDDEN, "ACL token not found");
    scheduler
        .get("/v1/acl/tokens", Token::Nomad("s.another-root"))
        .await
        .expect(StatusCode::OK);
}

// ---- namespaces ----

#[tokio::test]
async fn namespace_crud_round_trips() {
    let scheduler = Scheduler::dev().await;
    let default = scheduler
        .get("/v1/namespace/default", Token::Nomad(ROOT))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(default["Description"], "Default shared namespace");

    let written = scheduler
        .post(
            "/v1/namespace/team-a",
            Token::Nomad(ROOT),
            json!({"Name": "team-a", "Description": "A", "Meta": {"owner": "a"},
                   "Capabilities": {"EnabledTaskDrivers": ["raw_exec"]}}),
        )
        .await
        .expect(StatusCode::OK);
    assert!(written.header("x-scheduler-index").is_some());
    let namespace = scheduler
        .get("/v1/namespace/team-a", Token::Nomad(ROOT))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(namespace["Name"], "team-a");
    assert_eq!(namespace["Meta"], json!({"owner": "a"}));
    assert_eq!(
        namespace["Capabilities"]["EnabledTaskDrivers"],
        json!(["raw_exec"])
    );
    assert_eq!(namespace["Quota"], "");
    let created = namespace["CreateIndex"].as_u64().expect("CreateIndex");

    scheduler
        .post(
            "/v1/namespace",
            Token::Nomad(ROOT),
            json!({"name": "team-a", "description": "B"}),
        )
        .await
        .expect(StatusCode::OK);
    let namespace = scheduler
        .get("/v1/namespace/team-a", Token::Nomad(ROOT))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(namespace["Description"], "B");
    assert_eq!(namespace["CreateIndex"], created);
    assert!(
        namespace["ModifyIndex"]
            .as_u64()
            .is_some_and(|modify| modify > created)
    );

    let list = scheduler
        .get("/v1/namespaces", Token::Nomad(ROOT))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(ids(&list, "Name"), vec!["default", "team-a"]);
    let list = scheduler
        .get("/v1/namespaces?prefix=team", Token::Nomad(ROOT))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(ids(&list, "Name"), vec!["team-a"]);

    scheduler
        .delete("/v1/namespace/team-a", Token::Nomad(ROOT))
        .await
        .expect(StatusCode::OK);
    scheduler
        .get("/v1/namespace/team-a", Token::Nomad(ROOT))
        .await
        .expect_error(StatusCode::NOT_FOUND, "Namespace not found");
    scheduler
        .delete("/v1/namespace/default", Token::Nomad(ROOT))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "can not delete default namespace");
}

#[tokio::test]
async fn invalid_namespaces_are_refused() {
    let scheduler = Scheduler::dev().await;
    for (path, body, problem) in [
        (
            "/v1/namespace",
            json!({"Name": "bad name"}),
            "invalid name \"bad name\"",
        ),
        ("/v1/namespace", json!({"Name": ""}), "invalid name \"\""),
        (
            "/v1/namespace",
            json!({"Name": "a", "Description": "d".repeat(257)}),
            "description longer than 256",
        ),
        (
            "/v1/namespace/one",
            json!({"Name": "two"}),
            "Namespace name does not match request path",
        ),
        (
            "/v1/namespace",
            json!({"Name": 7}),
            "Request body is invalid",
        ),
    ] {
        scheduler
            .post(path, Token::Nomad(ROOT), body)
            .await
            .expect_error(StatusCode::BAD_REQUEST, problem);
    }
    let list = scheduler
        .get("/v1/namespaces", Token::Nomad(ROOT))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(ids(&list, "Name"), vec!["default"]);
}

#[tokio::test]
async fn jobs_need_an_existing_namespace_and_keep_it_from_deletion() {
    let scheduler = Scheduler::dev().await;
    scheduler
        .post("/v1/jobs", Token::Nomad(ROOT), job("web", "missing"))
        .await
        .expect(StatusCode::BAD_REQUEST);
    scheduler.namespace("team-a").await;
    scheduler
        .post("/v1/jobs", Token::Nomad(ROOT), job("web", "team-a"))
        .await
        .expect(StatusCode::OK);
    scheduler
        .delete("/v1/namespace/team-a", Token::Nomad(ROOT))
        .await
        .expect_error(
            StatusCode::BAD_REQUEST,
            "namespace \"team-a\" has non-terminal jobs in regions: [global]",
        );
    scheduler
        .get("/v1/namespace/team-a", Token::Nomad(ROOT))
        .await
        .expect(StatusCode::OK);
}

#[tokio::test]
async fn namespace_lists_show_only_namespaces_the_token_may_use() {
    let scheduler = Scheduler::dev().await;
    for namespace in ["team-a", "team-b", "secret"] {
        scheduler.namespace(namespace).await;
        scheduler
            .post(
                &format!("/v1/jobs?namespace={namespace}"),
                Token::Nomad(ROOT),
                job(&format!("job-{namespace}"), namespace),
            )
            .await
            .expect(StatusCode::OK);
    }
    let secret = scheduler
        .client_token_with(
            "teams",
            r#"namespace "team-*" { policy = "read" }
               namespace "team-b" { policy = "deny" }"#,
        )
        .await;

    let list = scheduler
        .get("/v1/namespaces", Token::Nomad(&secret))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(ids(&list, "Name"), vec!["team-a"]);
    scheduler
        .get("/v1/namespace/team-a", Token::Nomad(&secret))
        .await
        .expect(StatusCode::OK);
    scheduler
        .get("/v1/namespace/secret", Token::Nomad(&secret))
        .await
        .expect_error(StatusCode::FORBIDDEN, "Permission denied");

    let jobs = scheduler
        .get("/v1/jobs?namespace=*", Token::Nomad(&secret))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(ids(&jobs, "ID"), vec!["job-team-a"]);
    let all = scheduler
        .get("/v1/jobs?namespace=*", Token::Nomad(ROOT))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(all.as_array().map(Vec::len), Some(3));

    let authz = scheduler.authz(Some(&secret)).await.expect("resolves");
    assert!(authz.allows_namespace("*", Capability::ListJobs));
    assert!(authz.allows_namespace("team-a", Capability::ListJobs));
    assert!(!authz.allows_namespace("team-b", Capability::ListJobs));
    assert!(!authz.allows_namespace("secret", Capability::ListJobs));
}

// ---- ACLs disabled ----

#[tokio::test]
async fn acl_disabled_allows_everything() {
    let scheduler = Scheduler::with_acl(testkit::mem_storage(), false, None).await;
    scheduler
        .post("/v1/namespace", Token::None, json!({"Name": "free"}))
        .await
        .expect(StatusCode::OK);
    scheduler
        .post("/v1/jobs?namespace=free", Token::None, job("web", "free"))
        .await
        .expect(StatusCode::OK);
    scheduler
        .get("/v1/jobs?namespace=free", Token::Nomad("whatever"))
        .await
        .expect(StatusCode::OK);
    let list = scheduler
        .get("/v1/namespaces", Token::None)
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(ids(&list, "Name"), vec!["default", "free"]);
    let authz = scheduler
        .authz(Some("not-a-token"))
        .await
        .expect("resolves");
    assert!(authz.is_management());
    assert!(authz.allows_namespace("anything", Capability::AllocNodeExec));
    // The ACL endpoints themselves say ACLs are off, as upstream.
    scheduler
        .get("/v1/acl/policies", Token::None)
        .await
        .expect_error(StatusCode::BAD_REQUEST, "ACL support disabled");
    scheduler
        .post("/v1/acl/bootstrap", Token::None, json!({}))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "ACL support disabled");
    let me = scheduler
        .get("/v1/acl/token/self", Token::None)
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(me["AccessorID"], "acls-disabled");
}
