//! Leadership of several `cairn server` processes on the local etcd, as Vault's HA clients see
//! it: `sys/step-down` on the active server hands leadership to the other within 5 s and every
//! status endpoint agrees; `sys/leader`'s `active_time` is the start of the active server's
//! term; a leader sealed through `sys/seal` gives leadership to an unsealed peer, whose lease
//! expiry loop then revokes a database lease (a role in the real PostgreSQL on 127.0.0.1:5432)
//! at its expiry; a limited-use token used concurrently through both servers answers exactly
//! its `num_uses` requests.
//!
//! Invariants: every wait polls with a deadline (`ha_support::eventually`); prefixes are unique
//! per run; the servers die with their handles.

#[allow(dead_code, reason = "shared with cli.rs; this binary uses part of it")]
mod support;

mod ha_support;

use std::time::{Duration, Instant};

use ha_support::{
    agreed_leader, eventually, get_json, init, is_active, role_exists, send_json, unseal,
};
use reqwest::Method;
use serde_json::json;
use support::Cairn;

const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Two servers under a fresh prefix, initialised through the first and both unsealed: the
/// servers, their directory, the root token and the unseal key.
async fn two_unsealed_servers(name: &str) -> (Cairn, Cairn, tempfile::TempDir, String, String) {
    let prefix = ha_support::unique_prefix(name);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("a")).unwrap();
    std::fs::create_dir_all(dir.path().join("b")).unwrap();
    let a = ha_support::start(&dir.path().join("a"), &prefix).await;
    let b = ha_support::start(&dir.path().join("b"), &prefix).await;
    let (key, root) = init(&a).await;
    unseal(&a, &key).await;
    unseal(&b, &key).await;
    (a, b, dir, root, key)
}

/// The leader's and the standby's `sys/leader` bodies agree on `leader`.
async fn status_names(servers: [&Cairn; 2], leader: &Cairn) {
    let index = agreed_leader(&servers, Duration::from_secs(10)).await;
    assert!(
        std::ptr::eq(servers[index], leader),
        "the registry names the new leader"
    );
    for server in servers {
        let (status, body) = get_json(&server.url("secrets", "/v1/sys/leader"), None).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["leader_address"],
            leader.urls["secrets"].as_str(),
            "{body}"
        );
        assert_eq!(body["is_self"], std::ptr::eq(server, leader), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_down_on_the_leader_hands_leadership_to_the_other_server_within_5s() {
    let (a, b, _dir, root, _key) = two_unsealed_servers("ha-step-down").await;
    let servers = [&a, &b];
    let first = agreed_leader(&servers, Duration::from_secs(20)).await;
    let (leader, standby) = (servers[first], servers[1 - first]);

    // active_time: the leader's term start (RFC 3339, this century); a standby's zero time.
    let (_, body) = get_json(&leader.url("secrets", "/v1/sys/leader"), None).await;
    let active_time = body["active_time"].as_str().unwrap().to_owned();
    assert!(
        active_time != ZERO_TIME && active_time.starts_with("20") && active_time.ends_with('Z'),
        "{body}"
    );
    let (_, body) = get_json(&standby.url("secrets", "/v1/sys/leader"), None).await;
    assert_eq!(body["active_time"], ZERO_TIME, "{body}");

    // Step-down needs a token with sudo; the root token has it.
    let step_down = leader.url("secrets", "/v1/sys/step-down");
    let (status, body) = send_json(Method::PUT, &step_down, None, json!({})).await;
    assert_eq!(status, 403, "{body}");
    let asked = Instant::now();
    let (status, body) = send_json(Method::PUT, &step_down, Some(&root), json!({})).await;
    assert_eq!(status, 204, "{body}");
    let took = eventually(Duration::from_secs(5), "the standby leads", || async {
        is_active(standby).await.then(|| asked.elapsed())
    })
    .await;
    eprintln!("the standby led {took:?} after sys/step-down");
    status_names(servers, standby).await;
    let (_, body) = get_json(&standby.url("secrets", "/v1/sys/leader"), None).await;
    assert_ne!(body["active_time"], ZERO_TIME, "{body}");
    assert_ne!(body["active_time"].as_str(), Some(active_time.as_str()));
    let (status, _) = get_json(&leader.url("secrets", "/v1/sys/health"), None).await;
    assert_eq!(status, 429, "the server that stepped down is a standby");

    // A step-down sent to a standby is forwarded to the active server: ha_forwarding.rs.
    a.stop().await;
    b.stop().await;
}

/// Mounts `database/` through `server` with a PostgreSQL connection and the role `short`
/// (leases of `ttl`).
async fn mount_database(server: &Cairn, root: &str, ttl: &str) {
    let (status, body) = send_json(
        Method::POST,
        &server.url("secrets", "/v1/sys/mounts/database"),
        Some(root),
        json!({"type": "database"}),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    let (status, body) = send_json(
        Method::POST,
        &server.url("secrets", "/v1/database/config/pg"),
        Some(root),
        json!({
            "plugin_name": "postgresql-database-plugin",
            "connection_url": "postgresql://postgres@127.0.0.1:5432/test",
            "allowed_roles": "*",
        }),
    )
    .await;
    assert!((200..300).contains(&status), "{body}");
    let (status, body) = send_json(
        Method::POST,
        &server.url("secrets", "/v1/database/roles/short"),
        Some(root),
        json!({
            "db_name": "pg",
            "creation_statements": [
                "CREATE ROLE \"{{name}}\" WITH LOGIN PASSWORD '{{password}}' VALID UNTIL '{{expiration}}';"
            ],
            "default_ttl": ttl,
            "max_ttl": "1h",
        }),
    )
    .await;
    assert!((200..300).contains(&status), "{body}");
}

/// Whether `sys/leases/lookup` through `server` still knows `lease_id`.
async fn lease_known(server: &Cairn, root: &str, lease_id: &str) -> bool {
    let (status, body) = send_json(
        Method::PUT,
        &server.url("secrets", "/v1/sys/leases/lookup"),
        Some(root),
        json!({ "lease_id": lease_id }),
    )
    .await;
    match status {
        200 => true,
        400 => false,
        other => panic!("lease lookup: {other} {body}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_sealed_through_sys_seal_hands_over_and_the_unsealed_peer_expires_a_lease() {
    let (a, b, _dir, root, key) = two_unsealed_servers("ha-sealed-leader").await;
    let servers = [&a, &b];
    let first = agreed_leader(&servers, Duration::from_secs(20)).await;
    let (leader, peer) = (servers[first], servers[1 - first]);

    mount_database(leader, &root, "8s").await;
    let (status, creds) = get_json(
        &leader.url("secrets", "/v1/database/creds/short"),
        Some(&root),
    )
    .await;
    assert_eq!(status, 200, "{creds}");
    let issued = Instant::now();
    let lease_id = creds["lease_id"].as_str().unwrap().to_owned();
    let username = creds["data"]["username"].as_str().unwrap().to_owned();
    assert!(role_exists(&username), "{username} created");

    // Seal the leader: the unsealed peer leads within 5 s, and status agrees.
    let sealed_at = Instant::now();
    let (status, body) = send_json(
        Method::PUT,
        &leader.url("secrets", "/v1/sys/seal"),
        Some(&root),
        json!({}),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    let took = eventually(
        Duration::from_secs(5),
        "the unsealed peer leads",
        || async { is_active(peer).await.then(|| sealed_at.elapsed()) },
    )
    .await;
    eprintln!("the unsealed peer led {took:?} after sys/seal on the leader");
    let index = agreed_leader(&servers, Duration::from_secs(10)).await;
    assert!(
        std::ptr::eq(servers[index], peer),
        "the registry names the unsealed peer"
    );
    let (status, _) = get_json(&leader.url("secrets", "/v1/sys/leader"), None).await;
    assert_eq!(status, 503, "the sealed server answers sys/leader with 503");

    // The new leader's expiry loop revokes the lease at its expiry: the role is dropped.
    let (revoked_after, _) = eventually(
        Duration::from_secs(40),
        "the lease is revoked and its role dropped",
        || async {
            (!lease_known(peer, &root, &lease_id).await && !role_exists(&username))
                .then(|| (issued.elapsed(), ()))
        },
    )
    .await;
    eprintln!("the 8 s lease was revoked {revoked_after:?} after issue");
    assert!(
        revoked_after >= Duration::from_secs(7),
        "not before its expiry: {revoked_after:?}"
    );

    // Unsealing the old leader again does not take leadership back.
    unseal(leader, &key).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(is_active(peer).await, "the peer still leads");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_use_token_used_through_both_servers_at_once_answers_exactly_num_uses() {
    let (a, b, _dir, root, _key) = two_unsealed_servers("ha-token-uses").await;
    let (status, created) = send_json(
        Method::POST,
        &a.url("secrets", "/v1/auth/token/create"),
        Some(&root),
        json!({"policies": ["default"], "num_uses": 20}),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    let token = created["auth"]["client_token"].as_str().unwrap().to_owned();
    let mut uses = tokio::task::JoinSet::new();
    for i in 0..80 {
        let url = [&a, &b][i % 2].url("secrets", "/v1/auth/token/lookup-self");
        let token = token.clone();
        uses.spawn(async move { get_json(&url, Some(&token)).await });
    }
    let mut accepted = 0;
    while let Some(joined) = uses.join_next().await {
        let (status, body) = joined.unwrap();
        match status {
            200 => accepted += 1,
            403 => assert_eq!(body, json!({"errors": ["permission denied"]})),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    eprintln!("80 concurrent uses over two servers: {accepted} accepted");
    assert_eq!(accepted, 20, "a num_uses=20 token over two servers");
    a.stop().await;
    b.stop().await;
}
