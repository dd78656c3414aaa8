//! Requests a server that does not lead sends on to the one that does, end to end with two
//! `cairn server` processes (the built binary) on the local etcd under a prefix of their own:
//!
//! - `sys/step-down` sent to a secrets standby is forwarded to the active server, which steps
//!   down, so the standby leads (Vault 1.x standbys forward it); the answer is the active
//!   server's 204, and a caller without the right token is refused (403) as on the active one;
//! - with TLS listeners (a CA and a certificate made here with rcgen, `tls { ca_file }` naming
//!   the CA): a scheduler write sent to the follower is forwarded over HTTPS and acknowledged;
//!   the client protocol's reverse channel works through the follower (a simulated node polls
//!   for calls and dials back with an upgrade, spliced through the follower to the leader over
//!   TLS, and the call made through the follower gets the node's answer); and a step-down sent
//!   to the secrets standby reaches the active server over HTTPS.
//!
//! Invariants: every wait polls with a deadline (`ha_support::eventually`); prefixes are unique
//! per run; ports are 0; the servers die with their handles.

#[allow(dead_code, reason = "shared with cli.rs; this binary uses part of it")]
mod support;

mod ha_support;

use std::path::Path;
use std::time::{Duration, Instant};

use ha_support::{agreed_leader, eventually, get_json, init, is_active, send_json, unseal};
use reqwest::Method;
use serde_json::{Value, json};
use support::Cairn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_down_sent_to_a_standby_is_forwarded_and_the_active_server_steps_down() {
    let prefix = ha_support::unique_prefix("ha-step-down-standby");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("a")).unwrap();
    std::fs::create_dir_all(dir.path().join("b")).unwrap();
    let a = ha_support::start(&dir.path().join("a"), &prefix).await;
    let b = ha_support::start(&dir.path().join("b"), &prefix).await;
    let (key, root) = init(&a).await;
    unseal(&a, &key).await;
    unseal(&b, &key).await;
    let servers = [&a, &b];
    let first = agreed_leader(&servers, Duration::from_secs(20)).await;
    let (leader, standby) = (servers[first], servers[1 - first]);
    eventually(Duration::from_secs(10), "the leader is active", || async {
        is_active(leader).await.then_some(())
    })
    .await;

    // Refused on the standby as the active server would refuse it.
    let step_down = standby.url("secrets", "/v1/sys/step-down");
    let (status, body) = send_json(Method::PUT, &step_down, None, json!({})).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = send_json(Method::PUT, &step_down, Some("not-a-token"), json!({})).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        is_active(leader).await,
        "a refused step-down changes nothing"
    );

    // With the root token (sudo): forwarded, the active server steps down, the standby leads.
    let asked = Instant::now();
    let (status, body) = send_json(Method::PUT, &step_down, Some(&root), json!({})).await;
    assert_eq!(status, 204, "{body}");
    let took = eventually(Duration::from_secs(5), "the standby leads", || async {
        is_active(standby).await.then(|| asked.elapsed())
    })
    .await;
    eprintln!("the standby led {took:?} after sys/step-down sent to it");
    assert!(
        !is_active(leader).await,
        "the former active server stepped down"
    );
    let (status, _) = get_json(&leader.url("secrets", "/v1/sys/health"), None).await;
    assert_eq!(status, 429, "the server that stepped down is a standby");
    a.stop().await;
    b.stop().await;
}

/// A CA, and a certificate it signed for 127.0.0.1 and localhost, written to `dir`:
/// (ca.pem, cert.pem, key.pem) paths.
fn write_certificates(dir: &Path) -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "cairn test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(&paths.0, ca_cert.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    (
        paths.0.display().to_string(),
        paths.1.display().to_string(),
        paths.2.display().to_string(),
    )
}

/// Starts a server in `dir` with the secrets store and the scheduler (ACLs off) on TLS
/// listeners (port 0) trusting `ca` for the other servers, the store on etcd under `prefix`.
async fn start_tls(dir: &Path, prefix: &str, (ca, cert, key): &(String, String, String)) -> Cairn {
    std::fs::create_dir_all(dir).unwrap();
    let tls = format!(
        "tls {{\n    cert_file = \"{cert}\"\n    key_file = \"{key}\"\n    ca_file = \"{ca}\"\n  }}"
    );
    let path = dir.join("cairn.hcl");
    let text = format!(
        "data_dir = \"{data}\"\n\
         secrets {{\n  address = \"127.0.0.1:0\"\n  {tls}\n}}\n\
         scheduler {{\n  address = \"127.0.0.1:0\"\n  acl {{ enabled = false }}\n  {tls}\n}}\n\
         storage \"etcd\" {{\n  endpoints = [\"{endpoint}\"]\n  prefix = \"{prefix}\"\n}}\n",
        data = dir.join("data").display(),
        endpoint = ha_support::etcd_endpoint(),
    );
    std::fs::write(&path, text).unwrap();
    Cairn::start(&["server", "--config", &path.display().to_string()]).await
}

/// A client that trusts only `ca` (a PEM file).
fn https_client(ca: &str) -> reqwest::Client {
    let pem = std::fs::read(ca).unwrap();
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()])
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// `method url` with a JSON body and optional headers: (status, JSON body or the text).
async fn call(
    client: &reqwest::Client,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, Value) {
    let mut request = client.request(method, url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn node_body(id: &str, secret: &str) -> Value {
    json!({"Node": {
        "ID": id,
        "SecretID": secret,
        "Datacenter": "dc1",
        "Name": "tls-node",
        "NodePool": "default",
        "HTTPAddr": "127.0.0.1:4646",
        "Status": "ready",
        "Attributes": {"kernel.name": "linux", "nomad.version": "1.10.0", "unique.hostname": "tls-node"},
        "NodeResources": {
            "Cpu": {"CpuShares": 8000, "TotalCpuCores": 4},
            "Memory": {"MemoryMB": 16384},
            "Disk": {"DiskMB": 100000},
        },
    }})
}

/// The simulated node behind `follower`: polls its calls through the follower until one
/// comes, then dials back through the follower (an upgrade to `cairn-call`) and answers it
/// with `answer` as the client protocol's head line and JSON body.
async fn answer_one_call(
    client: reqwest::Client,
    follower: String,
    node_id: String,
    secret: String,
    answer: Value,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let call_id = loop {
        assert!(Instant::now() < deadline, "no call reached the node");
        let (status, body) = call(
            &client,
            Method::GET,
            &format!("{follower}/v1/internal/node/{node_id}/calls?wait=2s"),
            &[("X-Nomad-Token", &secret)],
            None,
        )
        .await;
        assert_eq!(status, 200, "polling calls through the follower: {body}");
        if let Some(id) = body["Calls"][0]["ID"].as_str() {
            break id.to_owned();
        }
    };
    let response = client
        .get(format!(
            "{follower}/v1/internal/node/{node_id}/call/{call_id}"
        ))
        .header("X-Nomad-Token", &secret)
        .header(reqwest::header::CONNECTION, "upgrade")
        .header(reqwest::header::UPGRADE, "cairn-call")
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status().as_u16(),
        101,
        "the dial-back upgrades through the follower"
    );
    let mut tunnel = response.upgrade().await.unwrap();
    let mut bytes =
        b"{\"Status\":200,\"Error\":\"\",\"ContentType\":\"application/json\"}\n".to_vec();
    bytes.extend_from_slice(answer.to_string().as_bytes());
    tunnel.write_all(&bytes).await.unwrap();
    tunnel.flush().await.unwrap();
    tunnel.shutdown().await.unwrap();
    // Drain whatever the leader sends until it closes its side.
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tunnel.read_to_end(&mut rest)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_forwards_writes_tunnels_and_step_down_to_a_tls_leader() {
    let prefix = ha_support::unique_prefix("ha-tls-forwarding");
    let dir = tempfile::tempdir().unwrap();
    let files = write_certificates(dir.path());
    let a = start_tls(&dir.path().join("a"), &prefix, &files).await;
    let b = start_tls(&dir.path().join("b"), &prefix, &files).await;
    assert!(a.urls["scheduler"].starts_with("https://"), "{:?}", a.urls);
    let client = https_client(&files.0);

    // Init through one, unseal both (over HTTPS).
    let (status, body) = call(
        &client,
        Method::PUT,
        &a.url("secrets", "/v1/sys/init"),
        &[],
        Some(&json!({"secret_shares": 1, "secret_threshold": 1})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let key = body["keys"][0].as_str().unwrap().to_owned();
    let root = body["root_token"].as_str().unwrap().to_owned();
    for server in [&a, &b] {
        let (status, body) = call(
            &client,
            Method::PUT,
            &server.url("secrets", "/v1/sys/unseal"),
            &[],
            Some(&json!({ "key": key })),
        )
        .await;
        assert_eq!((status, &body["sealed"]), (200, &json!(false)), "{body}");
    }

    // Who leads, once both say the same.
    let servers = [&a, &b];
    let first = eventually(Duration::from_secs(30), "both name one leader", || async {
        let mut named = Vec::new();
        for server in servers {
            let (_, leader) = call(
                &client,
                Method::GET,
                &server.url("scheduler", "/v1/status/leader"),
                &[],
                None,
            )
            .await;
            named.push(leader.as_str()?.to_owned());
        }
        if named[0].is_empty() || named[0] != named[1] {
            return None;
        }
        servers
            .iter()
            .position(|server| server.addr("scheduler") == named[0])
    })
    .await;
    let (leader, follower) = (servers[first], servers[1 - first]);

    // A job registered through the follower: forwarded over HTTPS, acknowledged, on both.
    let job = json!({"Job": {
        "ID": "tls-web", "Name": "tls-web", "Type": "service", "Datacenters": ["nowhere"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sleep", "args": ["1000"]},
            "Resources": {"CPU": 100, "MemoryMB": 64},
        }]}],
    }});
    let (status, body) = call(
        &client,
        Method::POST,
        &follower.url("scheduler", "/v1/jobs"),
        &[],
        Some(&job),
    )
    .await;
    assert_eq!(status, 200, "job register through the follower: {body}");
    for server in servers {
        let (status, body) = call(
            &client,
            Method::GET,
            &server.url("scheduler", "/v1/job/tls-web"),
            &[],
            None,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["ID"], "tls-web");
    }

    // A node registered through the follower; a call to it made through the follower reaches
    // it over its reverse channel, whose dial-back upgrade goes through the follower too.
    let (node_id, secret) = (uuid(), uuid());
    let follower_url = follower.urls["scheduler"].clone();
    let (status, body) = call(
        &client,
        Method::PUT,
        &format!("{follower_url}/v1/internal/node/register"),
        &[("X-Nomad-Token", &secret)],
        Some(&node_body(&node_id, &secret)),
    )
    .await;
    assert_eq!(status, 200, "node register through the follower: {body}");
    let answer = json!({"Timestamp": 42, "Uptime": 7, "from": "the simulated node"});
    let node = tokio::spawn(answer_one_call(
        client.clone(),
        follower_url.clone(),
        node_id.clone(),
        secret.clone(),
        answer.clone(),
    ));
    let stats = eventually(Duration::from_secs(30), "the node's stats", || async {
        let (status, body) = call(
            &client,
            Method::GET,
            &format!("{follower_url}/v1/client/stats?node_id={node_id}"),
            &[],
            None,
        )
        .await;
        // Until the node's first poll reaches the leader it is not reachable yet.
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(stats, answer);
    node.await.unwrap();

    // A step-down sent to the secrets standby reaches the active server over HTTPS.
    let (status, body) = call(
        &client,
        Method::PUT,
        &follower.url("secrets", "/v1/sys/step-down"),
        &[("X-Vault-Token", &root)],
        Some(&json!({})),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    eventually(Duration::from_secs(5), "the standby leads", || async {
        let (status, body) = call(
            &client,
            Method::GET,
            &follower.url("secrets", "/v1/sys/leader"),
            &[],
            None,
        )
        .await;
        (status == 200 && body["is_self"] == true).then_some(())
    })
    .await;
    let (_, body) = call(
        &client,
        Method::GET,
        &leader.url("secrets", "/v1/sys/leader"),
        &[],
        None,
    )
    .await;
    assert_eq!(body["is_self"], false, "{body}");
    a.stop().await;
    b.stop().await;
}

/// A random UUID-shaped ID (the standard library's per-process random hash keys).
fn uuid() -> String {
    use std::hash::{BuildHasher, Hasher};
    let random = || {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    };
    let (high, low) = (random(), random());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        high >> 32,
        (high >> 16) & 0xffff,
        high & 0xfff,
        (low >> 48) & 0xfff,
        low & 0xffff_ffff_ffff
    )
}
