//! The database engine's leases through the secrets core, against the real PostgreSQL on
//! 127.0.0.1:5432 (trust auth, user `postgres`, database `test`): a dynamic credential's
//! database role is dropped when its lease expires (on the service's manual clock, with the
//! background loops running), when the token that read it is revoked, and when it expires
//! after a restart of the core over the same store; `sys/leases/renew` runs the role's
//! renew statements and is capped by its `max_ttl`. Whether a role exists is asked of the
//! server with the `psql` client, independently of cairn.

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use http::StatusCode;
use secrets::State;
use serde_json::{Value, json};
use support::{call, create_token, dev_config, dev_on_clock};
use testkit::ManualClock;

const ROOT: &str = "root";
const PG_URL: &str = "postgresql://postgres@127.0.0.1:5432/test";

/// One SQL statement through `psql` as `postgres`; the unaligned, tuples-only output.
fn psql(sql: &str) -> String {
    let out = std::process::Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "test",
            "-tAc",
            sql,
        ])
        .output()
        .expect("the psql client");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Whether PostgreSQL has role `name` (role names here are alphanumerics and dashes).
fn role_exists(name: &str) -> bool {
    psql(&format!(
        "SELECT count(*) FROM pg_roles WHERE rolname = '{name}'"
    )) == "1"
}

/// Polls (in 100 ms steps, up to 5 s) until `name` is no longer a PostgreSQL role.
async fn dropped_soon(name: &str) -> bool {
    for _ in 0..50 {
        if !role_exists(name) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Mounts `database` at `mount`, a connection to the local PostgreSQL and role `role` with
/// `extra` fields (TTLs, renew statements).
async fn database(app: &Router, mount: &str, role: &str, extra: Value) {
    let root = Some(ROOT);
    let (status, body) = call(
        app,
        "POST",
        &format!("/v1/sys/mounts/{mount}"),
        root,
        Some(json!({"type": "database"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call(
        app,
        "POST",
        &format!("/v1/{mount}/config/pg"),
        root,
        Some(json!({
            "plugin_name": "postgresql-database-plugin",
            "connection_url": PG_URL,
            "allowed_roles": "*",
        })),
    )
    .await;
    assert!(status.is_success(), "{body}");
    let mut fields = json!({
        "db_name": "pg",
        "creation_statements": [
            "CREATE ROLE \"{{name}}\" WITH LOGIN PASSWORD '{{password}}' VALID UNTIL '{{expiration}}';"
        ],
    });
    fields
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let (status, body) = call(
        app,
        "POST",
        &format!("/v1/{mount}/roles/{role}"),
        root,
        Some(fields),
    )
    .await;
    assert!(status.is_success(), "{body}");
}

/// Reads `creds/role` as `token`: (lease id, lease duration, username), the role asserted to
/// exist in PostgreSQL.
async fn creds(app: &Router, mount: &str, role: &str, token: &str) -> (String, u64, String) {
    let (status, body) = call(
        app,
        "GET",
        &format!("/v1/{mount}/creds/{role}"),
        Some(token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let username = body["data"]["username"].as_str().unwrap().to_owned();
    assert!(role_exists(&username), "{username} created");
    (
        body["lease_id"].as_str().unwrap().to_owned(),
        body["lease_duration"].as_u64().unwrap(),
        username,
    )
}

/// The service's background loops (lease expiry among them), as `cairn` starts them.
fn start(state: &State) -> cluster::Runner {
    let runner = cluster::Runner::embedded(tokio_util::sync::CancellationToken::new());
    secrets::start_tasks(state, &runner);
    runner
}

#[tokio::test]
async fn an_expired_lease_drops_its_database_role() {
    let (state, clock) = dev_on_clock(ROOT).await;
    let app = secrets::router(state.clone());
    let runner = start(&state);
    database(
        &app,
        "db",
        "short",
        json!({"default_ttl": "1h", "max_ttl": "2h"}),
    )
    .await;
    let (lease_id, ttl, user) = creds(&app, "db", "short", ROOT).await;
    assert_eq!(ttl, 3600);
    assert!(lease_id.starts_with("db/creds/short/"), "{lease_id}");

    clock.advance(Duration::from_secs(1800));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(role_exists(&user), "not expired yet");

    clock.advance(Duration::from_secs(1801));
    assert!(dropped_soon(&user).await, "{user} dropped at expiry");
    // The role is dropped first and the lease record deleted right after, by the same
    // expiry: between the two a lookup still finds the lease with a TTL of 0.
    let mut answer = (StatusCode::OK, Value::Null);
    for _ in 0..50 {
        answer = call(
            &app,
            "PUT",
            "/v1/sys/leases/lookup",
            Some(ROOT),
            Some(json!({"lease_id": lease_id})),
        )
        .await;
        if answer.0 != StatusCode::OK {
            break;
        }
        assert_eq!(answer.1["data"]["ttl"], 0, "expired: {}", answer.1);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        answer.0,
        StatusCode::BAD_REQUEST,
        "the lease is gone: {}",
        answer.1
    );
    runner.shutdown_and_wait().await;
}

#[tokio::test]
async fn revoking_the_token_drops_the_roles_it_read_and_only_those() {
    let app = support::dev(ROOT).await;
    database(&app, "db", "app", json!({"default_ttl": "1h"})).await;
    let (token, _) = create_token(&app, ROOT, json!({"ttl": "1h"})).await;
    let (_, _, first) = creds(&app, "db", "app", &token).await;
    let (_, _, second) = creds(&app, "db", "app", &token).await;
    let (kept_lease, _, kept) = creds(&app, "db", "app", ROOT).await;

    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/token/revoke",
        Some(ROOT),
        Some(json!({"token": token})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert!(dropped_soon(&first).await, "{first} dropped with its token");
    assert!(
        dropped_soon(&second).await,
        "{second} dropped with its token"
    );
    assert!(role_exists(&kept), "root's credential stays");

    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/leases/revoke",
        Some(ROOT),
        Some(json!({"lease_id": kept_lease})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert!(!role_exists(&kept), "an explicit revoke drops it at once");
}

#[tokio::test]
async fn a_lease_issued_before_a_restart_drops_its_role_when_it_expires_after() {
    let mut store = testkit::TempStore::new();
    let key_file = store.dir().join("unseal.key");
    let clock = ManualClock::at_system_time();
    let open = async |storage, clock: &ManualClock| {
        State::open_with_clock(
            storage,
            dev_config(ROOT, Some(key_file.clone())),
            Arc::new(clock.clone()),
        )
        .await
        .unwrap()
    };

    // First life: issue a credential, stop.
    let state = open(store.storage(), &clock).await;
    let app = secrets::router(state.clone());
    let runner = start(&state);
    database(&app, "db", "kept", json!({"default_ttl": "1h"})).await;
    let (lease_id, _, user) = creds(&app, "db", "kept", ROOT).await;
    runner.shutdown_and_wait().await;
    drop((app, state));

    // Second life over the same store: the lease is there, its timer rebuilt from storage.
    store.reopen().await;
    let state = open(store.storage(), &clock).await;
    let app = secrets::router(state.clone());
    let runner = start(&state);
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/leases/lookup",
        Some(ROOT),
        Some(json!({"lease_id": lease_id})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(role_exists(&user), "nothing is revoked by a restart");

    clock.advance(Duration::from_secs(3601));
    assert!(dropped_soon(&user).await, "{user} dropped at expiry");
    runner.shutdown_and_wait().await;
}

#[tokio::test]
async fn renew_runs_the_renew_statements_and_is_capped_by_max_ttl() {
    let (state, clock) = dev_on_clock(ROOT).await;
    let app = secrets::router(state.clone());
    database(
        &app,
        "db",
        "renewable",
        json!({
            "default_ttl": "1h",
            "max_ttl": "2h",
            "renew_statements": [
                "ALTER ROLE \"{{name}}\" VALID UNTIL '{{expiration}}'; COMMENT ON ROLE \"{{name}}\" IS 'renewed until {{expiration}}';"
            ],
        }),
    )
    .await;
    let (lease_id, _, user) = creds(&app, "db", "renewable", ROOT).await;
    let valid_until = || {
        psql(&format!(
            "SELECT extract(epoch FROM rolvaliduntil)::bigint FROM pg_roles WHERE rolname = '{user}'"
        ))
        .parse::<i64>()
        .unwrap()
    };
    let comment = || {
        psql(&format!(
            "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = '{user}'"
        ))
    };
    let now = || {
        use testkit::Clock as _;
        clock.now_ms() / 1000
    };
    assert_eq!(comment(), "", "not renewed yet");

    // Half an hour in, a renewal for 30 minutes: granted, the statements move the expiry.
    clock.advance(Duration::from_secs(1800));
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/leases/renew",
        Some(ROOT),
        Some(json!({"lease_id": lease_id, "increment": "30m"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["lease_duration"], 1800, "{body}");
    let until = valid_until();
    assert!(
        (now() + 1800 + 5..=now() + 1800 + 6).contains(&until),
        "{}",
        until - now()
    );
    assert!(comment().starts_with("renewed until "), "{}", comment());

    // Asking for 3 hours 20 minutes later: capped by max_ttl (2h from issue: 70 minutes left).
    clock.advance(Duration::from_secs(1200));
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/leases/renew",
        Some(ROOT),
        Some(json!({"lease_id": lease_id, "increment": "3h"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["lease_duration"], 4200, "{body}");
    let until = valid_until();
    assert!(
        (now() + 4200 + 5..=now() + 4200 + 6).contains(&until),
        "{}",
        until - now()
    );
    let (_, lookup) = call(
        &app,
        "PUT",
        "/v1/sys/leases/lookup",
        Some(ROOT),
        Some(json!({"lease_id": lease_id})),
    )
    .await;
    assert_eq!(lookup["data"]["ttl"], 4200, "{lookup}");

    let (status, _) = call(
        &app,
        "PUT",
        "/v1/sys/leases/revoke",
        Some(ROOT),
        Some(json!({"lease_id": lease_id})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(!role_exists(&user));
}
