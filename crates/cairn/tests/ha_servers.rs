//! Two `cairn server` processes (the built binary) over the local etcd (127.0.0.1:2379, a
//! prefix of their own): membership and status agree on both, the secrets barrier works on
//! both (init once, unseal each; a keyring rotation, a mount, a token and its revocation made
//! on one are seen by the other), the registry's KV and blocking queries work across them, and
//! when the leader is killed with SIGKILL the other leads within 5 s and says so.
//!
//! Invariants: every wait polls with a deadline; ports are 0 (each server prints its bound
//! addresses); the prefix is unique per run (`cairn-test/ha-<pid>-<nanos>/`), so runs never see
//! each other's keys.

mod ha_support;
#[allow(dead_code, reason = "shared with cli.rs; this binary uses part of it")]
mod support;

use std::time::{Duration, Instant};

use ha_support::{eventually, get_json, start};
use serde_json::{Value, json};
use support::{Cairn, http};

async fn send(method: reqwest::Method, url: &str, token: &str, body: Value) -> u16 {
    http()
        .request(method, url)
        .header("X-Vault-Token", token)
        .json(&body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// The registry leader both servers name, once they agree on a non-empty one.
async fn agreed_registry_leader(a: &Cairn, b: &Cairn) -> String {
    eventually(Duration::from_secs(20), "both name one leader", || async {
        let (_, from_a) = get_json(&a.url("registry", "/v1/status/leader"), None).await;
        let (_, from_b) = get_json(&b.url("registry", "/v1/status/leader"), None).await;
        let leader = from_a.as_str()?.to_owned();
        (!leader.is_empty() && Some(leader.as_str()) == from_b.as_str()).then_some(leader)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_etcd_share_state_agree_on_the_leader_and_fail_over() {
    let prefix = ha_support::unique_prefix("ha");
    let dir_a = tempfile::tempdir().unwrap();
    let dir_b = tempfile::tempdir().unwrap();
    let a = start(dir_a.path(), &prefix).await;
    let b = start(dir_b.path(), &prefix).await;

    // Init once (on A); B sees the store initialised; each server unseals with the key.
    let (status, init) = {
        let response = http()
            .put(a.url("secrets", "/v1/sys/init"))
            .json(&json!({"secret_shares": 1, "secret_threshold": 1}))
            .send()
            .await
            .unwrap();
        (
            response.status().as_u16(),
            response.json::<Value>().await.unwrap(),
        )
    };
    assert_eq!(status, 200, "{init}");
    let key = init["keys"][0].as_str().unwrap().to_owned();
    let root = init["root_token"].as_str().unwrap().to_owned();
    let (_, initialized) = get_json(&b.url("secrets", "/v1/sys/init"), None).await;
    assert_eq!(initialized["initialized"], true, "B sees A's init");
    let (status, _) = get_json(&b.url("secrets", "/v1/sys/leader"), None).await;
    assert_eq!(status, 503, "a sealed server answers sys/leader with 503");
    let (status, _) = get_json(&b.url("secrets", "/v1/sys/health"), None).await;
    assert_eq!(status, 503, "a sealed server's health is 503");
    for server in [&a, &b] {
        let response = http()
            .put(server.url("secrets", "/v1/sys/unseal"))
            .json(&json!({"key": key}))
            .send()
            .await
            .unwrap();
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["sealed"], false, "{body}");
    }

    // Status agrees on both servers: registry, secrets, headers, peers.
    let leader_addr = agreed_registry_leader(&a, &b).await;
    let (leader, standby) = if leader_addr == a.addr("registry") {
        (&a, &b)
    } else {
        assert_eq!(
            leader_addr,
            b.addr("registry"),
            "the leader is one of the two"
        );
        (&b, &a)
    };
    for server in [&a, &b] {
        let response = http()
            .get(server.url("registry", "/v1/status/peers"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.headers()["x-consul-knownleader"], "true");
        let mut peers: Vec<String> = response.json().await.unwrap();
        peers.sort();
        let mut expected = vec![a.addr("registry"), b.addr("registry")];
        expected.sort();
        assert_eq!(peers, expected, "both servers are peers");
        let (status, body) = get_json(&server.url("secrets", "/v1/sys/leader"), None).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["ha_enabled"], true);
        assert_eq!(body["leader_address"], leader.urls["secrets"].as_str());
        assert_eq!(body["is_self"], std::ptr::eq(server, leader));
    }
    let (status, health) = get_json(&standby.url("secrets", "/v1/sys/health"), None).await;
    assert_eq!(status, 429, "a standby's health: {health}");
    assert_eq!(health["standby"], true);
    let (status, _) = get_json(
        &standby.url("secrets", "/v1/sys/health?standbyok=true"),
        None,
    )
    .await;
    assert_eq!(
        status, 200,
        "standbyok turns a standby's 429 into the active code"
    );
    let (status, health) = get_json(&leader.url("secrets", "/v1/sys/health"), None).await;
    assert_eq!((status, &health["standby"]), (200, &json!(false)));
    let (status, ha) = get_json(&a.url("secrets", "/v1/sys/ha-status"), Some(&root)).await;
    assert_eq!(status, 200, "{ha}");
    let nodes = ha["data"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{ha}");
    let active: Vec<&Value> = nodes.iter().filter(|n| n["active_node"] == true).collect();
    assert_eq!(active.len(), 1, "{ha}");
    assert_eq!(active[0]["api_address"], leader.urls["secrets"].as_str());

    // A kv v2 mount and a secret made on A are served by B.
    let put = reqwest::Method::PUT;
    let status = send(
        put.clone(),
        &a.url("secrets", "/v1/sys/mounts/kv"),
        &root,
        json!({"type": "kv-v2"}),
    )
    .await;
    assert_eq!(status, 204);
    let secret_on_a = a.url("secrets", "/v1/kv/data/app");
    assert_eq!(
        send(
            put.clone(),
            &secret_on_a,
            &root,
            json!({"data": {"v": "1"}})
        )
        .await,
        200
    );
    let read_on_b = b.url("secrets", "/v1/kv/data/app");
    eventually(Duration::from_secs(10), "B reads A's secret", || async {
        let (status, body) = get_json(&read_on_b, Some(&root)).await;
        (status == 200 && body["data"]["data"]["v"] == "1").then_some(())
    })
    .await;

    // A keyring rotation on A reaches B; a write on A with the new term is read on B.
    assert_eq!(
        send(
            put.clone(),
            &a.url("secrets", "/v1/sys/rotate"),
            &root,
            json!({})
        )
        .await,
        204
    );
    eventually(
        Duration::from_secs(10),
        "B's active term moves to 2",
        || async {
            let (_, status) = get_json(&b.url("secrets", "/v1/sys/key-status"), Some(&root)).await;
            (status["term"] == 2).then_some(())
        },
    )
    .await;
    assert_eq!(
        send(
            put.clone(),
            &secret_on_a,
            &root,
            json!({"data": {"v": "2"}})
        )
        .await,
        200
    );
    let (status, body) = get_json(&read_on_b, Some(&root)).await;
    assert_eq!(
        (status, &body["data"]["data"]["v"]),
        (200, &json!("2")),
        "{body}"
    );

    // A token created on A works on B; revoked on A, B refuses it.
    let response = http()
        .post(a.url("secrets", "/v1/auth/token/create"))
        .header("X-Vault-Token", &root)
        .json(&json!({"policies": ["default"], "ttl": "1h"}))
        .send()
        .await
        .unwrap();
    let created: Value = response.json().await.unwrap();
    let token = created["auth"]["client_token"].as_str().unwrap().to_owned();
    let (status, _) = get_json(
        &b.url("secrets", "/v1/auth/token/lookup-self"),
        Some(&token),
    )
    .await;
    assert_eq!(status, 200, "B serves A's token");
    let status = send(
        put.clone(),
        &a.url("secrets", "/v1/auth/token/revoke"),
        &root,
        json!({"token": token}),
    )
    .await;
    assert_eq!(status, 204);
    eventually(
        Duration::from_secs(10),
        "B refuses the revoked token",
        || async {
            let (status, _) = get_json(
                &b.url("secrets", "/v1/auth/token/lookup-self"),
                Some(&token),
            )
            .await;
            (status == 403).then_some(())
        },
    )
    .await;

    // Registry KV: a write on A is read on B; a blocking query on B wakes for a write on A.
    let kv_a = a.url("registry", "/v1/kv/app/config");
    let response = http().put(&kv_a).body("one").send().await.unwrap();
    assert_eq!(response.status(), 200);
    let response = http()
        .get(b.url("registry", "/v1/kv/app/config?raw"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let index: u64 = response.headers()["x-consul-index"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(response.text().await.unwrap(), "one");
    let blocking_url = b.url(
        "registry",
        &format!("/v1/kv/app/config?raw&index={index}&wait=30s"),
    );
    let blocked = tokio::spawn(async move {
        let started = Instant::now();
        let response = reqwest::Client::new()
            .get(&blocking_url)
            .send()
            .await
            .unwrap();
        (started.elapsed(), response.text().await.unwrap())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let response = http().put(&kv_a).body("two").send().await.unwrap();
    assert_eq!(response.status(), 200);
    let (waited, body) = tokio::time::timeout(Duration::from_secs(25), blocked)
        .await
        .expect("the blocking query on B woke for A's write")
        .unwrap();
    assert_eq!(body, "two", "woke after {waited:?}");

    // Kill the leader: the other leads within 5 s, and its status says so.
    let (survivor, dead) = if std::ptr::eq(leader, &a) {
        (b, a)
    } else {
        (a, b)
    };
    let killed_at = Instant::now();
    let status = dead.signal_and_wait("KILL").await;
    assert!(!status.success());
    let own_addr = survivor.addr("registry");
    let took = eventually(Duration::from_secs(5), "the survivor leads", || async {
        let (_, body) = get_json(&survivor.url("secrets", "/v1/sys/leader"), None).await;
        (body["is_self"] == true).then(|| killed_at.elapsed())
    })
    .await;
    eprintln!("the survivor led {took:?} after the leader's SIGKILL");
    eventually(
        Duration::from_secs(10),
        "status names the survivor alone",
        || async {
            let (_, leader) = get_json(&survivor.url("registry", "/v1/status/leader"), None).await;
            let (_, peers) = get_json(&survivor.url("registry", "/v1/status/peers"), None).await;
            (leader == json!(own_addr) && peers == json!([own_addr])).then_some(())
        },
    )
    .await;
    let (status, _) = get_json(&survivor.url("secrets", "/v1/sys/health"), None).await;
    assert_eq!(status, 200, "the new leader is active");
    survivor.stop().await;
}

/// The registry's session TTLs across servers: a session created and renewed on the standby is
/// kept alive by those renewals on the leader (which alone reaps), and reaped once they stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_created_and_renewed_on_the_standby_lives_by_its_renewals() {
    let prefix = ha_support::unique_prefix("ha");
    let dir_a = tempfile::tempdir().unwrap();
    let dir_b = tempfile::tempdir().unwrap();
    let a = start(dir_a.path(), &prefix).await;
    let b = start(dir_b.path(), &prefix).await;
    let leader_addr = agreed_registry_leader(&a, &b).await;
    let standby = if leader_addr == a.addr("registry") {
        &b
    } else {
        &a
    };

    let response = http()
        .put(standby.url("registry", "/v1/session/create"))
        .json(&json!({"TTL": "10s", "Behavior": "delete"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let created: Value = response.json().await.unwrap();
    let id = created["ID"].as_str().unwrap().to_owned();
    let info = |server: &Cairn| server.url("registry", &format!("/v1/session/info/{id}"));
    let alive = |url: String| async move {
        let (_, body) = get_json(&url, None).await;
        body.as_array().is_some_and(|sessions| sessions.len() == 1)
    };
    let created_at = Instant::now();
    // Renew on the standby every 3 s for 15 s: past the 10 s TTL (and Consul's 2x grace).
    while created_at.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let response = http()
            .put(standby.url("registry", &format!("/v1/session/renew/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "renewed on the standby");
    }
    assert!(
        alive(info(&a)).await && alive(info(&b)).await,
        "kept alive by the standby's renewals"
    );
    // No more renewals: the leader reaps it (TTL 10 s, reaped within Consul's 2x).
    eventually(Duration::from_secs(30), "the session is reaped", || async {
        (!alive(info(&a)).await && !alive(info(&b)).await).then_some(())
    })
    .await;
    a.stop().await;
    b.stop().await;
}
