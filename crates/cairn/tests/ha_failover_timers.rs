//! Timers that live across servers and across a failover, with two `cairn server` processes
//! on the local etcd:
//! - a TTL health check kept passing through the standby stays passing on the leader (which
//!   alone marks TTL checks critical) and turns critical once the passes stop;
//! - a failover with live state: a 10 s session and a 10 s TTL check created and renewed
//!   through the follower, and a 15 s database lease (a role in the real PostgreSQL on
//!   127.0.0.1:5432); the leader is killed with SIGKILL; the survivor leads within 5 s; the
//!   session and the check live on while renewed and expire once renewals stop; the lease is
//!   revoked at its expiry, so the new leader rebuilt every timer.
//!
//! Invariants: every wait polls with a deadline; a renewer is a task stopped through a flag;
//! lower bounds only ("not before its TTL"), never an upper timing assertion beyond the polls'
//! generous deadlines.

#[allow(dead_code, reason = "shared with cli.rs; this binary uses part of it")]
mod support;

mod ha_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ha_support::{
    agreed_leader, eventually, get_json, init, is_active, role_exists, send_json, unseal,
};
use reqwest::Method;
use serde_json::{Value, json};
use support::{Cairn, http};

/// Two servers under a fresh prefix, initialised through the first and both unsealed: the
/// servers, their directory and the root token.
async fn two_unsealed_servers(name: &str) -> (Cairn, Cairn, tempfile::TempDir, String) {
    let prefix = ha_support::unique_prefix(name);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("a")).unwrap();
    std::fs::create_dir_all(dir.path().join("b")).unwrap();
    let a = ha_support::start(&dir.path().join("a"), &prefix).await;
    let b = ha_support::start(&dir.path().join("b"), &prefix).await;
    let (key, root) = init(&a).await;
    unseal(&a, &key).await;
    unseal(&b, &key).await;
    (a, b, dir, root)
}

/// Registers the TTL check `id` (TTL 10 s) through `server`'s agent endpoint.
async fn register_ttl_check(server: &Cairn, id: &str) {
    let response = http()
        .put(server.url("registry", "/v1/agent/check/register"))
        .json(&json!({"Name": id, "CheckID": id, "TTL": "10s"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
}

/// The status of check `id` as `server` reports it (`/v1/health/state/any`).
async fn check_status(server: &Cairn, id: &str) -> Option<String> {
    let (_, checks) = get_json(&server.url("registry", "/v1/health/state/any"), None).await;
    checks
        .as_array()?
        .iter()
        .find(|check| check["CheckID"] == id)
        .and_then(|check| check["Status"].as_str().map(str::to_owned))
}

/// Whether `server` still knows session `id`.
async fn session_alive(server: &Cairn, id: &str) -> bool {
    let (_, body) = get_json(
        &server.url("registry", &format!("/v1/session/info/{id}")),
        None,
    )
    .await;
    body.as_array().is_some_and(|sessions| sessions.len() == 1)
}

/// Every 2 s, through `server`: passes check `check` and renews session `session` (when
/// given), until `stop` is set. Every renewal must succeed.
fn renew_until(
    server: &Cairn,
    check: &str,
    session: Option<&str>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let pass = server.url("registry", &format!("/v1/agent/check/pass/{check}"));
    let renew = session.map(|id| server.url("registry", &format!("/v1/session/renew/{id}")));
    tokio::spawn(async move {
        while !stop.load(Ordering::SeqCst) {
            let response = http().put(&pass).send().await.unwrap();
            assert_eq!(response.status(), 200, "check pass");
            if let Some(renew) = &renew {
                let response = http().put(renew).send().await.unwrap();
                assert_eq!(response.status(), 200, "session renewal");
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_check_passed_through_the_standby_stays_passing_on_the_leader() {
    let (a, b, _dir, _root) = two_unsealed_servers("ha-ttl-check").await;
    let servers = [&a, &b];
    let first = agreed_leader(&servers, Duration::from_secs(20)).await;
    let (leader, standby) = (servers[first], servers[1 - first]);

    register_ttl_check(standby, "beat").await;
    let stop = Arc::new(AtomicBool::new(false));
    let renewer = renew_until(standby, "beat", None, stop.clone());
    let started = Instant::now();
    eventually(Duration::from_secs(10), "the check passes", || async {
        (check_status(leader, "beat").await.as_deref() == Some("passing")).then_some(())
    })
    .await;
    // Past the 10 s TTL, passed only through the standby: the leader keeps it passing.
    while started.elapsed() < Duration::from_secs(16) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        for server in servers {
            assert_eq!(
                check_status(server, "beat").await.as_deref(),
                Some("passing"),
                "{:?} after the first pass",
                started.elapsed()
            );
        }
    }
    stop.store(true, Ordering::SeqCst);
    renewer.await.unwrap();
    let stopped = Instant::now();
    let after = eventually(
        Duration::from_secs(30),
        "the check turns critical",
        || async {
            (check_status(standby, "beat").await.as_deref() == Some("critical"))
                .then(|| stopped.elapsed())
        },
    )
    .await;
    eprintln!("the check turned critical {after:?} after the last pass");
    assert!(
        after >= Duration::from_secs(7),
        "not before its TTL: {after:?}"
    );
    a.stop().await;
    b.stop().await;
}

/// Mounts `database/` through `server` (PostgreSQL, role `short` with 15 s leases) and reads a
/// credential: (lease id, the PostgreSQL role's name).
async fn database_lease(server: &Cairn, root: &str) -> (String, String) {
    let post = |path: &str, body: Value| {
        let url = server.url("secrets", path);
        let root = root.to_owned();
        async move { send_json(Method::POST, &url, Some(&root), body).await }
    };
    let (status, body) = post("/v1/sys/mounts/database", json!({"type": "database"})).await;
    assert_eq!(status, 204, "{body}");
    let (status, body) = post(
        "/v1/database/config/pg",
        json!({
            "plugin_name": "postgresql-database-plugin",
            "connection_url": "postgresql://postgres@127.0.0.1:5432/test",
            "allowed_roles": "*",
        }),
    )
    .await;
    assert!((200..300).contains(&status), "{body}");
    let (status, body) = post(
        "/v1/database/roles/short",
        json!({
            "db_name": "pg",
            "creation_statements": [
                "CREATE ROLE \"{{name}}\" WITH LOGIN PASSWORD '{{password}}' VALID UNTIL '{{expiration}}';"
            ],
            "default_ttl": "15s",
            "max_ttl": "1h",
        }),
    )
    .await;
    assert!((200..300).contains(&status), "{body}");
    let (status, creds) = get_json(
        &server.url("secrets", "/v1/database/creds/short"),
        Some(root),
    )
    .await;
    assert_eq!(status, 200, "{creds}");
    assert_eq!(creds["lease_duration"], 15, "{creds}");
    let username = creds["data"]["username"].as_str().unwrap().to_owned();
    assert!(role_exists(&username), "{username} created");
    (creds["lease_id"].as_str().unwrap().to_owned(), username)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_leaders_sigkill_the_survivor_keeps_renewed_timers_and_expires_the_rest() {
    let (a, b, _dir, root) = two_unsealed_servers("ha-failover-timers").await;
    let servers = [&a, &b];
    let first = agreed_leader(&servers, Duration::from_secs(20)).await;
    let (leader, follower) = if first == 0 { (a, b) } else { (b, a) };

    // Live state, all made through the follower.
    let response = http()
        .put(follower.url("registry", "/v1/session/create"))
        .json(&json!({"TTL": "10s", "Behavior": "delete"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let created: Value = response.json().await.unwrap();
    let session = created["ID"].as_str().unwrap().to_owned();
    register_ttl_check(&follower, "heartbeat").await;
    let (lease_id, username) = database_lease(&follower, &root).await;
    let issued = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let renewer = renew_until(&follower, "heartbeat", Some(&session), stop.clone());
    eventually(Duration::from_secs(10), "the check passes", || async {
        (check_status(&follower, "heartbeat").await.as_deref() == Some("passing")).then_some(())
    })
    .await;

    // SIGKILL the leader: the follower leads within 5 s.
    let killed = Instant::now();
    let status = leader.signal_and_wait("KILL").await;
    assert!(!status.success());
    let took = eventually(Duration::from_secs(5), "the survivor leads", || async {
        is_active(&follower).await.then(|| killed.elapsed())
    })
    .await;
    eprintln!("the survivor led {took:?} after the leader's SIGKILL");

    // The lease, issued before the kill, is revoked by the new leader at its expiry.
    let lease_known = || async {
        let (status, body) = send_json(
            Method::PUT,
            &follower.url("secrets", "/v1/sys/leases/lookup"),
            Some(&root),
            json!({ "lease_id": lease_id }),
        )
        .await;
        match status {
            200 => true,
            400 => false,
            other => panic!("lease lookup: {other} {body}"),
        }
    };
    let revoked_after = eventually(Duration::from_secs(45), "the lease is revoked", || async {
        (!lease_known().await && !role_exists(&username)).then(|| issued.elapsed())
    })
    .await;
    eprintln!("the 15 s lease was revoked {revoked_after:?} after issue");
    assert!(
        revoked_after >= Duration::from_secs(14),
        "not before its expiry: {revoked_after:?}"
    );

    // Renewed past their 10 s TTL on the new leader: both still alive.
    while killed.elapsed() < Duration::from_secs(16) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        session_alive(&follower, &session).await,
        "the renewed session lives"
    );
    assert_eq!(
        check_status(&follower, "heartbeat").await.as_deref(),
        Some("passing"),
        "the renewed check passes"
    );

    // Renewals stop: the check turns critical, the session is invalidated.
    stop.store(true, Ordering::SeqCst);
    renewer.await.unwrap();
    let stopped = Instant::now();
    let critical = eventually(
        Duration::from_secs(30),
        "the check turns critical",
        || async {
            (check_status(&follower, "heartbeat").await.as_deref() == Some("critical"))
                .then(|| stopped.elapsed())
        },
    )
    .await;
    let reaped = eventually(
        Duration::from_secs(40),
        "the session is invalidated",
        || async { (!session_alive(&follower, &session).await).then(|| stopped.elapsed()) },
    )
    .await;
    eprintln!(
        "after the last renewal: the check critical after {critical:?}, the session gone after {reaped:?}"
    );
    assert!(
        critical >= Duration::from_secs(7),
        "not before its TTL: {critical:?}"
    );
    assert!(
        reaped >= Duration::from_secs(7),
        "not before its TTL: {reaped:?}"
    );
    follower.stop().await;
}
