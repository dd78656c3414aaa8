//! Test support for several servers: a three-member etcd cluster started by the test (Debian's
//! `/usr/bin/etcd`, members on free 127.0.0.1 ports in one temporary directory, at etcd's
//! default transaction limits) and `cairn server` processes on it (the built binary, each with its own config file, data dir and
//! free ports, all under one unique etcd prefix and one fresh bucket on the local S3 emulator,
//! moto on 127.0.0.1:9020, for the platform's blobs).
//!
//! Where it sits: included by the `cluster_*.rs` tests (`#[path = "support/cluster.rs"] mod
//! cluster;`) next to `support/mod.rs`, whose [`Cairn`] runs and reads each server.
//!
//! Invariants:
//! - every process started here is killed when its handle drops (`kill_on_drop`), and the
//!   temporary directories go with the handles, so a failing test leaks nothing;
//! - a member stopped or killed keeps its data directory, so [`EtcdCluster::restart`] brings it
//!   back as the same member (`--initial-cluster-state existing`);
//! - waits poll with generous deadlines and never assert on timings; the timings tests report
//!   are printed, not asserted.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::support::{Cairn, free_port, http};

/// How long the cluster, a member or a server may take to get healthy on a loaded machine.
const HEALTH_BOUND: Duration = Duration::from_secs(60);

/// The encryption password every test server's platform uses.
pub(crate) const PLATFORM_PASSWORD: &str = "cluster-test-password";

/// One etcd member.
#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    child: Option<Child>,
}

/// A three-member etcd cluster on 127.0.0.1.
#[derive(Debug)]
pub(crate) struct EtcdCluster {
    members: Vec<Member>,
    initial_cluster: String,
    token: String,
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `size` members and waits until every one is healthy (has a leader).
    pub(crate) async fn start(size: usize) -> EtcdCluster {
        let dir = tempfile::tempdir().unwrap();
        let members: Vec<Member> = (0..size)
            .map(|index| Member {
                name: format!("m{index}"),
                client_port: free_port(),
                peer_port: free_port(),
                data_dir: dir.path().join(format!("m{index}")),
                child: None,
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            members,
            initial_cluster,
            token: format!("cairn-test-{}-{}", std::process::id(), rand_suffix()),
            dir,
        };
        for index in 0..size {
            cluster.spawn(index, "new");
        }
        for index in 0..size {
            cluster.wait_healthy(index).await;
        }
        cluster
    }

    fn spawn(&mut self, index: usize, state: &str) {
        let member = &self.members[index];
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{}.log", member.name)))
            .unwrap();
        let client = format!("http://127.0.0.1:{}", member.client_port);
        let peer = format!("http://127.0.0.1:{}", member.peer_port);
        let child = Command::new("/usr/bin/etcd")
            .arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(&member.data_dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-token", &self.token])
            .args(["--initial-cluster-state", state])
            // A loaded test machine: elections tolerate slow heartbeats.
            .args(["--heartbeat-interval", "200", "--election-timeout", "2000"])
            // etcd's default --max-txn-ops and --max-request-bytes: the scheduler's writer
            // splits its commits to fit them (docs/running-several-servers.md).
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("/usr/bin/etcd runs (Debian's etcd-server; scripts/services installs it)");
        self.members[index].child = Some(child);
    }

    /// The client URLs of every member (stopped ones included: clients skip them).
    pub(crate) fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The client URL of a running member.
    fn running_endpoint(&self) -> String {
        let member = self
            .members
            .iter()
            .find(|m| m.child.is_some())
            .expect("a member runs");
        format!("http://127.0.0.1:{}", member.client_port)
    }

    /// Waits until member `index` answers `/health` with `"health":"true"`.
    pub(crate) async fn wait_healthy(&self, index: usize) {
        let url = format!(
            "http://127.0.0.1:{}/health",
            self.members[index].client_port
        );
        let started = Instant::now();
        loop {
            if let Ok(response) = http().get(&url).send().await
                && let Ok(body) = response.json::<Value>().await
                && body["health"] == "true"
            {
                return;
            }
            assert!(
                started.elapsed() < HEALTH_BOUND,
                "etcd member {index} did not get healthy; its log:\n{}",
                self.log(index)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The member's log so far.
    pub(crate) fn log(&self, index: usize) -> String {
        std::fs::read_to_string(
            self.dir
                .path()
                .join(format!("{}.log", self.members[index].name)),
        )
        .unwrap_or_default()
    }

    /// Sends `signal` (`TERM`, `KILL`, `STOP`, `CONT`) to member `index`.
    pub(crate) fn signal(&self, index: usize, signal: &str) {
        let pid = self.members[index]
            .child
            .as_ref()
            .and_then(Child::id)
            .expect("the member runs");
        crate::support::kill(pid, signal);
    }

    /// Stops member `index` (SIGTERM, or SIGKILL when `kill`) and waits for it to exit; its
    /// data directory stays for [`EtcdCluster::restart`].
    pub(crate) async fn stop(&mut self, index: usize, kill: bool) {
        self.signal(index, if kill { "KILL" } else { "TERM" });
        let mut child = self.members[index].child.take().unwrap();
        tokio::time::timeout(HEALTH_BOUND, child.wait())
            .await
            .expect("the etcd member exits")
            .unwrap();
    }

    /// Starts a stopped member again from its data directory and waits for it to be healthy.
    pub(crate) async fn restart(&mut self, index: usize) {
        assert!(self.members[index].child.is_none(), "member {index} runs");
        self.spawn(index, "existing");
        self.wait_healthy(index).await;
    }

    /// Which member leads the etcd cluster now (by `/v3/maintenance/status`).
    pub(crate) async fn leader(&self) -> Option<usize> {
        for (index, member) in self.members.iter().enumerate() {
            if member.child.is_none() {
                continue;
            }
            let url = format!(
                "http://127.0.0.1:{}/v3/maintenance/status",
                member.client_port
            );
            let Ok(response) = http().post(&url).json(&json!({})).send().await else {
                continue;
            };
            let Ok(status) = response.json::<Value>().await else {
                continue;
            };
            let (Some(leader), Some(this)) = (
                status["leader"].as_str(),
                status["header"]["member_id"].as_str(),
            ) else {
                continue;
            };
            if leader == this {
                return Some(index);
            }
        }
        None
    }

    /// The value of etcd key `key`, through the v3 JSON gateway of a running member.
    pub(crate) async fn get(&self, key: &str) -> Option<Vec<u8>> {
        let url = format!("{}/v3/kv/range", self.running_endpoint());
        let body = json!({ "key": BASE64.encode(key.as_bytes()) });
        let response: Value = http()
            .post(&url)
            .json(&body)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let value = response["kvs"][0]["value"].as_str()?;
        BASE64.decode(value).ok()
    }

    /// The keys under `prefix` with their mod revisions, read from member `index` alone
    /// (a serializable range: what that member has applied, not what the cluster agreed);
    /// `None` when the member does not answer.
    pub(crate) async fn keys_on(&self, index: usize, prefix: &str) -> Option<Vec<(String, i64)>> {
        let url = format!(
            "http://127.0.0.1:{}/v3/kv/range",
            self.members[index].client_port
        );
        let mut end = prefix.as_bytes().to_vec();
        *end.last_mut()? += 1;
        let body = json!({
            "key": BASE64.encode(prefix.as_bytes()),
            "range_end": BASE64.encode(&end),
            "keys_only": true,
            "serializable": true,
        });
        let response: Value = http()
            .post(&url)
            .json(&body)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let kvs = response["kvs"].as_array().cloned().unwrap_or_default();
        Some(
            kvs.iter()
                .filter_map(|kv| {
                    let key = BASE64.decode(kv["key"].as_str()?).ok()?;
                    let revision = kv["mod_revision"].as_str()?.parse().ok()?;
                    Some((String::from_utf8_lossy(&key).into_owned(), revision))
                })
                .collect(),
        )
    }

    /// The number of members (running or not).
    pub(crate) fn size(&self) -> usize {
        self.members.len()
    }
}

fn rand_suffix() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// A fresh bucket on the local S3 emulator (moto on 127.0.0.1:9020, `scripts/services`).
pub(crate) async fn moto_bucket() -> String {
    let bucket = format!("cairn-cluster-{}", rand_suffix());
    let created = http()
        .put(format!("http://127.0.0.1:9020/{bucket}"))
        .send()
        .await
        .expect("moto runs on 127.0.0.1:9020 (scripts/services)");
    assert!(created.status().is_success(), "{}", created.status());
    bucket
}

/// One `cairn server` of a test cluster.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) cairn: Cairn,
    /// The config file and data dir.
    _dir: tempfile::TempDir,
    /// `platform bootstrap token` from the banner: only the first server of a store has one.
    pub(crate) platform_bootstrap_token: Option<String>,
}

impl Server {
    pub(crate) fn url(&self, service: &str, path: &str) -> String {
        self.cairn.url(service, path)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.cairn.pid()
    }
}

/// Several `cairn server` processes over one etcd cluster and one prefix.
#[derive(Debug)]
pub(crate) struct Servers {
    /// `None` once a server was killed.
    pub(crate) servers: Vec<Option<Server>>,
    pub(crate) prefix: String,
    pub(crate) bucket: String,
    /// The platform's site-administrator token (from the first server's banner).
    pub(crate) platform_token: String,
    /// The secrets store's root token and unseal key (one share).
    pub(crate) root_token: String,
    pub(crate) unseal_key: String,
}

impl Servers {
    /// Starts `count` servers on `etcd` (one after the other, the first creating the store and
    /// turning the platform's rate limiting off), then initializes the secrets store through the first and unseals it on every server.
    /// The registry and the scheduler run without ACLs.
    pub(crate) async fn start(etcd: &EtcdCluster, count: usize) -> Servers {
        let prefix = format!("cairn-test-{}/", rand_suffix());
        let bucket = moto_bucket().await;
        let first = start_server(etcd, &prefix, &bucket).await;
        let platform_token = first
            .platform_bootstrap_token
            .clone()
            .expect("the first server of a new store prints the platform bootstrap token");
        // Load tests send far more than TFE's 30 requests per second per token: rate limiting
        // off, stored before the other servers start (each applies it when it opens).
        let settings = http()
            .patch(first.url("platform", "/api/v2/admin/general-settings"))
            .bearer_auth(&platform_token)
            .header("Content-Type", "application/vnd.api+json")
            .body(
                json!({"data": {"type": "general-settings",
                    "attributes": {"api-rate-limiting-enabled": false}}})
                .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert!(
            settings.status().is_success(),
            "general settings: {}",
            settings.status()
        );
        let mut servers = vec![Some(first)];
        for _ in 1..count {
            servers.push(Some(start_server(etcd, &prefix, &bucket).await));
        }
        let first = servers[0].as_ref().unwrap();
        let init = http()
            .put(first.url("secrets", "/v1/sys/init"))
            .json(&json!({"secret_shares": 1, "secret_threshold": 1}))
            .send()
            .await
            .unwrap();
        assert!(init.status().is_success(), "sys/init: {}", init.status());
        let init: Value = init.json().await.unwrap();
        let cluster = Servers {
            servers,
            prefix,
            bucket,
            platform_token,
            root_token: init["root_token"].as_str().unwrap().to_owned(),
            unseal_key: init["keys_base64"][0].as_str().unwrap().to_owned(),
        };
        for index in 0..count {
            cluster.unseal(index).await;
        }
        cluster
    }

    /// Unseals the secrets store on server `index` (polling: a server may still be reading
    /// the keyring another wrote).
    pub(crate) async fn unseal(&self, index: usize) {
        let server = self.server(index);
        let started = Instant::now();
        loop {
            let answer = http()
                .put(server.url("secrets", "/v1/sys/unseal"))
                .json(&json!({"key": self.unseal_key}))
                .send()
                .await;
            if let Ok(answer) = answer {
                let status = answer.status();
                let body: Value = answer.json().await.unwrap_or_default();
                if status.is_success() && body["sealed"] == false {
                    return;
                }
                assert!(
                    started.elapsed() < HEALTH_BOUND,
                    "server {index} did not unseal: {status} {body}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) fn server(&self, index: usize) -> &Server {
        self.servers[index].as_ref().expect("the server runs")
    }

    /// The indexes of the servers still running.
    pub(crate) fn running(&self) -> Vec<usize> {
        (0..self.servers.len())
            .filter(|i| self.servers[*i].is_some())
            .collect()
    }

    /// The index of the server that leads now: the one whose campaign id (`cairn-<pid>-...`)
    /// is the value of the store's leader key, `<prefix>meta/leader`.
    pub(crate) async fn leader(&self, etcd: &EtcdCluster) -> Option<usize> {
        let value = etcd.get(&format!("{}meta/leader", self.prefix)).await?;
        let id = String::from_utf8(value).ok()?;
        let pid: u32 = id.split('-').nth(1)?.parse().ok()?;
        self.running()
            .into_iter()
            .find(|i| self.server(*i).pid() == pid)
    }

    /// Waits for a running server to lead and returns it.
    pub(crate) async fn wait_leader(&self, etcd: &EtcdCluster) -> usize {
        let started = Instant::now();
        loop {
            if let Some(index) = self.leader(etcd).await {
                return index;
            }
            assert!(started.elapsed() < HEALTH_BOUND, "no server leads");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills server `index` with SIGKILL (no resignation: its lease must expire).
    pub(crate) async fn kill(&mut self, index: usize) {
        let server = self.servers[index].take().expect("the server runs");
        let _ = server.cairn.signal_and_wait("KILL").await;
    }
}

/// Starts one `cairn server` with every service on a free port over `etcd` under `prefix`,
/// blobs in `bucket`.
pub(crate) async fn start_server(etcd: &EtcdCluster, prefix: &str, bucket: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let endpoints = etcd
        .endpoints()
        .iter()
        .map(|e| format!("\"{e}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let config = format!(
        r#"data_dir = "{data}"
secrets {{ address = "127.0.0.1:{secrets}" }}
registry {{
  address = "127.0.0.1:{registry}"
  acl {{ enabled = false }}
}}
scheduler {{
  address = "127.0.0.1:{scheduler}"
  acl {{ enabled = false }}
}}
platform {{
  address = "127.0.0.1:{platform}"
  encryption_password = "{PLATFORM_PASSWORD}"
}}
storage "etcd" {{
  endpoints = [{endpoints}]
  prefix    = "{prefix}"
}}
object_store "s3" {{
  bucket            = "{bucket}"
  endpoint          = "http://127.0.0.1:9020"
  access_key_id     = "testing"
  secret_access_key = "testing"
  prefix            = "{prefix}"
}}
"#,
        data = dir.path().join("data").display(),
        secrets = free_port(),
        registry = free_port(),
        scheduler = free_port(),
        platform = free_port(),
    );
    let path = dir.path().join("cairn.hcl");
    std::fs::write(&path, config).unwrap();
    let cairn = Cairn::start(&["server", "--config", path.to_str().unwrap()]).await;
    let platform_bootstrap_token = cairn.banner_value("platform bootstrap token");
    Server {
        cairn,
        _dir: dir,
        platform_bootstrap_token,
    }
}
