//! Helpers shared by the `ha_*` tests that run several `cairn server` processes (the built
//! binary) on the local etcd (127.0.0.1:2379, or the first of `CAIRN_ETCD_ENDPOINTS`) under a
//! prefix of their own: config, start, init once and unseal each, polling with a deadline,
//! and small JSON requests.
//!
//! Where it sits: `mod ha_support;` next to `mod support;` (the process harness) in each
//! `ha_*.rs` test binary.
//!
//! Invariants: ports are 0 (each server prints its bound addresses); every prefix is unique
//! (`cairn-test/<name>-<pid>-<nanos>/`), so runs never see each other's keys; every wait polls
//! with a deadline and never asserts on timing.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Cairn, http};

pub(crate) fn etcd_endpoint() -> String {
    std::env::var("CAIRN_ETCD_ENDPOINTS")
        .ok()
        .and_then(|list| list.split(',').next().map(str::to_owned))
        .unwrap_or_else(|| "127.0.0.1:2379".to_owned())
}

pub(crate) fn unique_prefix(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("cairn-test/{name}-{}-{nanos}/", std::process::id())
}

/// Starts a server in `dir`: secrets and registry (ACL off) on port 0, the store on etcd
/// under `prefix`.
pub(crate) async fn start(dir: &Path, prefix: &str) -> Cairn {
    let path = dir.join("cairn.hcl");
    let text = format!(
        "data_dir = \"{data}\"\n\
         secrets {{ address = \"127.0.0.1:0\" }}\n\
         registry {{\n  address = \"127.0.0.1:0\"\n  acl {{ enabled = false }}\n}}\n\
         storage \"etcd\" {{\n  endpoints = [\"{endpoint}\"]\n  prefix = \"{prefix}\"\n}}\n",
        data = dir.join("data").display(),
        endpoint = etcd_endpoint(),
    );
    std::fs::write(&path, text).unwrap();
    Cairn::start(&["server", "--config", &path.display().to_string()]).await
}

/// Polls `check` every 50 ms until it returns `Some`; fails after `limit`.
pub(crate) async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET url` with an optional Vault token: (status, JSON body or null).
pub(crate) async fn get_json(url: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = http().get(url);
    if let Some(token) = token {
        request = request.header("X-Vault-Token", token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// `method url` with a JSON body and an optional Vault token: (status, JSON body or null).
pub(crate) async fn send_json(
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Value,
) -> (u16, Value) {
    let mut request = http().request(method, url).json(&body);
    if let Some(token) = token {
        request = request.header("X-Vault-Token", token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// `sys/init` through `first` (one share): (unseal key, root token).
pub(crate) async fn init(first: &Cairn) -> (String, String) {
    let (status, body) = send_json(
        reqwest::Method::PUT,
        &first.url("secrets", "/v1/sys/init"),
        None,
        json!({"secret_shares": 1, "secret_threshold": 1}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    (
        body["keys"][0].as_str().unwrap().to_owned(),
        body["root_token"].as_str().unwrap().to_owned(),
    )
}

/// Unseals `server` with `key`.
pub(crate) async fn unseal(server: &Cairn, key: &str) {
    let (status, body) = send_json(
        reqwest::Method::PUT,
        &server.url("secrets", "/v1/sys/unseal"),
        None,
        json!({ "key": key }),
    )
    .await;
    assert_eq!((status, &body["sealed"]), (200, &json!(false)), "{body}");
}

/// Which of `servers` leads, once every one of them names the same non-empty registry
/// leader (`/v1/status/leader`): its index.
pub(crate) async fn agreed_leader(servers: &[&Cairn], limit: Duration) -> usize {
    eventually(limit, "every server names one leader", || async {
        let mut named = None;
        for server in servers {
            let (_, leader) = get_json(&server.url("registry", "/v1/status/leader"), None).await;
            let leader = leader.as_str()?.to_owned();
            if leader.is_empty() || named.as_ref().is_some_and(|n| *n != leader) {
                return None;
            }
            named = Some(leader);
        }
        let named = named?;
        servers.iter().position(|s| s.addr("registry") == named)
    })
    .await
}

/// Whether `server` says it is the active secrets node (`sys/leader` `is_self`).
pub(crate) async fn is_active(server: &Cairn) -> bool {
    let (status, body) = get_json(&server.url("secrets", "/v1/sys/leader"), None).await;
    status == 200 && body["is_self"] == true
}

/// One SQL query through `psql` as `postgres` on 127.0.0.1:5432, database `test`.
pub(crate) fn psql(sql: &str) -> String {
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
        "psql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Whether PostgreSQL has a role named `name`.
pub(crate) fn role_exists(name: &str) -> bool {
    psql(&format!(
        "SELECT count(*) FROM pg_roles WHERE rolname = '{name}'"
    )) == "1"
}
