//! Several `cairn server` processes on a three-member etcd cluster started by the test
//! (`support/cluster.rs`): blobs shared through the object store, a leader killed with SIGKILL
//! under a mixed write load, an etcd member stopped under load. A verifier re-reads every
//! acknowledged write from a surviving server; when the etcd member's kill loses a job, the
//! test prints where the job is and is not (each etcd member, each server) before failing.
//!
//! The load goes through the followers (the servers that do not lead) and covers secrets kv
//! writes, registry KV puts and sessions, platform organizations and scheduler job
//! registrations (forwarded by the follower to the leader, whose state writer alone applies
//! them; the load's jobs ask for a datacenter no node is in, so they are stored, evaluated
//! and left blocked, never run). Across the leader's kill, a batch job registered before it
//! with no node to run on is placed and completed after it, once a `cairn agent` joins.
//!
//! Timings (how long after a kill the session TTL, the token expiry and the placement were
//! applied) are printed, not asserted: the bounds only catch a hang on a loaded machine.

#[allow(dead_code, reason = "shared by the cluster_*.rs tests")]
#[path = "support/cluster.rs"]
mod cluster;
#[allow(dead_code, reason = "shared with cli.rs; this binary uses part of it")]
mod support;

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cluster::{EtcdCluster, Servers};
use serde_json::{Value, json};
use support::http;
use tokio::sync::Mutex;

/// The bound on background work resuming after a failover (the goal is 5 s; this only
/// catches a hang).
const RESUME_BOUND: Duration = Duration::from_secs(90);

/// How long a scheduler follower may take to show a commit made through another server.
const FOLLOWER_CATCH_UP: Duration = Duration::from_secs(30);

const JSONAPI: &str = "application/vnd.api+json";

/// One acknowledged write, and how to read it back.
#[derive(Debug, Clone)]
enum Write {
    /// `kv/<key>` in the secrets store (kv version 1) holds `{"n": value}`.
    Secret(String, u64),
    /// Registry KV `load/<key>` holds `value`.
    RegistryKv(String, String),
    /// Registry session `id` exists.
    Session(String),
    /// Platform organization `name` exists.
    Organization(String),
    /// Scheduler job `id` exists; registered through server `via`, acknowledged with
    /// JobModifyIndex `index` (for the diagnosis of a loss).
    Job { id: String, index: u64, via: usize },
}

/// Where a load worker sends its writes and what it got acknowledged.
#[derive(Debug, Default)]
struct Load {
    acked: Mutex<Vec<Write>>,
    failed: AtomicUsize,
    /// Failures by kind: secrets kv, registry KV, sessions, organizations, jobs.
    failed_by_kind: [AtomicUsize; 5],
    stop: AtomicBool,
}

/// The base URLs of one server, for the load.
#[derive(Debug, Clone)]
struct Target {
    /// The server's index in [`Servers`].
    index: usize,
    secrets: String,
    registry: String,
    platform: String,
    scheduler: String,
}

fn target(servers: &Servers, index: usize) -> Target {
    let server = servers.server(index);
    Target {
        index,
        secrets: server.url("secrets", ""),
        registry: server.url("registry", ""),
        platform: server.url("platform", ""),
        scheduler: server.url("scheduler", ""),
    }
}

/// Performs write number `n` (its kind chosen by `n`) against `to`; `Some` when acknowledged.
async fn write_once(
    client: &reqwest::Client,
    to: &Target,
    servers_tokens: &(String, String),
    worker: usize,
    n: u64,
    kinds: u64,
) -> Option<Write> {
    let (root, platform) = servers_tokens;
    let name = format!("w{worker}-{n}");
    match n % kinds {
        0 => {
            let answer = client
                .put(format!("{}/v1/kv/{name}", to.secrets))
                .header("X-Vault-Token", root)
                .json(&json!({"n": n}))
                .send()
                .await
                .ok()?;
            answer
                .status()
                .is_success()
                .then_some(Write::Secret(name, n))
        }
        1 => {
            let value = format!("value-{n}");
            let answer = client
                .put(format!("{}/v1/kv/load/{name}", to.registry))
                .body(value.clone())
                .send()
                .await
                .ok()?;
            let ok = answer.status().is_success() && answer.text().await.ok()? == "true";
            ok.then_some(Write::RegistryKv(name, value))
        }
        2 => {
            let answer = client
                .put(format!("{}/v1/session/create", to.registry))
                .json(&json!({"Name": name}))
                .send()
                .await
                .ok()?;
            if !answer.status().is_success() {
                return None;
            }
            let body: Value = answer.json().await.ok()?;
            Some(Write::Session(body["ID"].as_str()?.to_owned()))
        }
        3 => {
            let answer = client
                .post(format!("{}/api/v2/organizations", to.platform))
                .bearer_auth(platform)
                .header("Content-Type", JSONAPI)
                .body(
                    json!({"data": {"type": "organizations",
                        "attributes": {"name": name, "email": "ops@example.com"}}})
                    .to_string(),
                )
                .send()
                .await
                .ok()?;
            (answer.status().as_u16() == 201).then_some(Write::Organization(name))
        }
        _ => {
            // A datacenter no node is in: the job is stored and evaluated, never run.
            let body = job(&name, "service", "nowhere", 1, &["-c", "sleep 300"]);
            let answer = client
                .put(format!("{}/v1/jobs", to.scheduler))
                .json(&body)
                .send()
                .await
                .ok()?;
            if !answer.status().is_success() {
                static SHOWN: AtomicUsize = AtomicUsize::new(0);
                if SHOWN.fetch_add(1, Ordering::Relaxed) < 3 {
                    let status = answer.status();
                    eprintln!(
                        "job {name}: {status} {}",
                        answer.text().await.unwrap_or_default()
                    );
                }
                return None;
            }
            let body: Value = answer.json().await.ok()?;
            body["EvalID"].as_str().is_some().then(|| Write::Job {
                id: name,
                index: body["JobModifyIndex"].as_u64().unwrap_or(0),
                via: to.index,
            })
        }
    }
}

/// A Nomad job of `count` raw_exec tasks running `/bin/sh args` in `datacenter`.
fn job(id: &str, kind: &str, datacenter: &str, count: u32, args: &[&str]) -> Value {
    json!({"Job": {
        "ID": id,
        "Name": id,
        "Type": kind,
        "Datacenters": [datacenter],
        "TaskGroups": [{
            "Name": "g",
            "Count": count,
            "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
            "Tasks": [{
                "Name": "t",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": args},
                "Resources": {"CPU": 20, "MemoryMB": 16},
            }],
        }],
    }})
}

/// Starts `workers` writers, each cycling through `targets` and through the first `kinds` kinds
/// of write (5: all; 4: all but scheduler jobs), until [`Load::stop`].
fn start_load(
    load: &Arc<Load>,
    targets: Vec<Target>,
    tokens: (String, String),
    workers: usize,
    kinds: u64,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..workers)
        .map(|worker| {
            let load = Arc::clone(load);
            let targets = targets.clone();
            let tokens = tokens.clone();
            tokio::spawn(async move {
                let client = http();
                let mut n = 0u64;
                while !load.stop.load(Ordering::Relaxed) {
                    let to = &targets[(n as usize + worker) % targets.len()];
                    match write_once(&client, to, &tokens, worker, n, kinds).await {
                        Some(write) => load.acked.lock().await.push(write),
                        None => {
                            load.failed.fetch_add(1, Ordering::Relaxed);
                            load.failed_by_kind[(n % kinds) as usize]
                                .fetch_add(1, Ordering::Relaxed);
                            // Failures cluster around a failover; don't spin on them.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                    n += 1;
                }
            })
        })
        .collect()
}

/// The failures by kind, for the report.
fn failures(load: &Load) -> String {
    let [kv, registry, sessions, orgs, jobs] = &load.failed_by_kind;
    format!(
        "secrets kv {}, registry KV {}, sessions {}, organizations {}, jobs {}",
        kv.load(Ordering::Relaxed),
        registry.load(Ordering::Relaxed),
        sessions.load(Ordering::Relaxed),
        orgs.load(Ordering::Relaxed),
        jobs.load(Ordering::Relaxed)
    )
}

/// Waits until at least `count` writes were acknowledged.
async fn wait_acked(load: &Load, count: usize) {
    let started = Instant::now();
    while load.acked.lock().await.len() < count {
        assert!(
            started.elapsed() < RESUME_BOUND,
            "only {} writes acknowledged ({} failed)",
            load.acked.lock().await.len(),
            load.failed.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Re-reads every acknowledged write through `from`; panics naming the first one missing.
async fn verify(load: &Load, from: &Target, tokens: &(String, String)) -> usize {
    let (verified, missing) = missing_writes(load, from, tokens).await;
    assert!(
        missing.is_empty(),
        "acknowledged writes are lost: {missing:?}"
    );
    verified
}

/// Re-reads every acknowledged write through `from`: how many there were, and the ones
/// missing.
async fn missing_writes(
    load: &Load,
    from: &Target,
    tokens: &(String, String),
) -> (usize, Vec<Write>) {
    let client = http();
    let acked = load.acked.lock().await.clone();
    let mut missing = Vec::new();
    for write in &acked {
        let found = match write {
            Write::Secret(name, n) => {
                let body: Value = client
                    .get(format!("{}/v1/kv/{name}", from.secrets))
                    .header("X-Vault-Token", &tokens.0)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap_or_default();
                body["data"]["n"] == *n
            }
            Write::RegistryKv(name, value) => {
                let answer = client
                    .get(format!("{}/v1/kv/load/{name}?raw", from.registry))
                    .send()
                    .await
                    .unwrap();
                answer.status().is_success() && answer.text().await.unwrap() == *value
            }
            Write::Session(id) => {
                let body: Value = client
                    .get(format!("{}/v1/session/info/{id}", from.registry))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap_or_default();
                body[0]["ID"] == id.as_str()
            }
            Write::Organization(name) => {
                let answer = client
                    .get(format!("{}/api/v2/organizations/{name}", from.platform))
                    .bearer_auth(&tokens.1)
                    .send()
                    .await
                    .unwrap();
                let status = answer.status().as_u16();
                if status != 200 {
                    eprintln!(
                        "organization {name}: {status} {}",
                        answer.text().await.unwrap()
                    );
                }
                status == 200
            }
            Write::Job { id, .. } => {
                // The scheduler's followers hold another server's commits from the store's
                // watch (read-your-writes holds on the server written to); one whose watch
                // broke with the etcd member reloads within a few seconds.
                let started = Instant::now();
                loop {
                    let (_, body) = get_json(&format!("{}/v1/job/{id}", from.scheduler)).await;
                    if body["ID"] == id.as_str() {
                        break true;
                    }
                    if started.elapsed() > FOLLOWER_CATCH_UP {
                        break false;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        if !found {
            missing.push(write.clone());
        }
    }
    (acked.len(), missing)
}

/// GET `url`: the status and the JSON body (null when not JSON).
async fn get_json(url: &str) -> (u16, Value) {
    let answer = http().get(url).send().await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or_default())
}

/// Mounts kv version 1 at `kv/` through server `index`.
async fn mount_kv(servers: &Servers, index: usize) {
    let answer = http()
        .post(servers.server(index).url("secrets", "/v1/sys/mounts/kv"))
        .header("X-Vault-Token", &servers.root_token)
        .json(&json!({"type": "kv"}))
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success(), "{}", answer.status());
}

fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, path, *content).unwrap();
    }
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(&builder.into_inner().unwrap()).unwrap();
    encoder.finish().unwrap()
}

/// A JSON:API request of the platform with the site administrator's token.
fn platform_request(
    servers: &Servers,
    method: reqwest::Method,
    url: String,
    body: Option<Value>,
) -> reqwest::RequestBuilder {
    let request = http()
        .request(method, url)
        .bearer_auth(&servers.platform_token)
        .header("Content-Type", JSONAPI);
    match body {
        Some(body) => request.body(body.to_string()),
        None => request,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_archive_uploaded_through_one_server_downloads_through_another() {
    let etcd = EtcdCluster::start(3).await;
    let servers = Servers::start(&etcd, 2).await;
    let (one, two) = (servers.server(0), servers.server(1));
    let created = platform_request(
        &servers,
        reqwest::Method::POST,
        one.url("platform", "/api/v2/organizations"),
        Some(json!({"data": {"type": "organizations",
            "attributes": {"name": "blobs", "email": "ops@example.com"}}})),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    let workspace: Value = platform_request(
        &servers,
        reqwest::Method::POST,
        one.url("platform", "/api/v2/organizations/blobs/workspaces"),
        Some(json!({"data": {"type": "workspaces", "attributes": {"name": "w"}}})),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let workspace_id = workspace["data"]["id"].as_str().unwrap().to_owned();
    let cv: Value = platform_request(
        &servers,
        reqwest::Method::POST,
        one.url(
            "platform",
            &format!("/api/v2/workspaces/{workspace_id}/configuration-versions"),
        ),
        Some(json!({"data": {"type": "configuration-versions",
            "attributes": {"auto-queue-runs": false}}})),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let cv_id = cv["data"]["id"].as_str().unwrap().to_owned();
    let upload_url = cv["data"]["attributes"]["upload-url"].as_str().unwrap();
    // Larger than one S3 part, so the upload is a multipart one.
    let filler: Vec<u8> = (0..6 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let archive = tar_gz(&[
        ("main.tf", b"resource \"null_resource\" \"one\" {}\n"),
        ("data.bin", &filler),
    ]);
    let uploaded = http()
        .put(upload_url)
        .body(archive.clone())
        .send()
        .await
        .unwrap();
    assert!(uploaded.status().is_success(), "{}", uploaded.status());
    // Through the other server: the version is uploaded and its archive downloads whole.
    let read: Value = platform_request(
        &servers,
        reqwest::Method::GET,
        two.url(
            "platform",
            &format!("/api/v2/configuration-versions/{cv_id}"),
        ),
        None,
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(read["data"]["attributes"]["status"], "uploaded", "{read}");
    let download = platform_request(
        &servers,
        reqwest::Method::GET,
        two.url(
            "platform",
            &format!("/api/v2/configuration-versions/{cv_id}/download"),
        ),
        None,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(download.status().as_u16(), 200);
    let bytes = download.bytes().await.unwrap();
    assert!(bytes.as_ref() == archive.as_slice(), "the archive differs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_leader_under_load_loses_no_acknowledged_write_and_background_work_resumes() {
    let etcd = EtcdCluster::start(3).await;
    let mut servers = Servers::start(&etcd, 3).await;
    let leader = servers.wait_leader(&etcd).await;
    let followers: Vec<usize> = servers
        .running()
        .into_iter()
        .filter(|i| *i != leader)
        .collect();
    mount_kv(&servers, followers[0]).await;
    let tokens = (servers.root_token.clone(), servers.platform_token.clone());
    let load = Arc::new(Load::default());
    let targets = followers.iter().map(|i| target(&servers, *i)).collect();
    let workers = start_load(&load, targets, tokens.clone(), 6, 5);
    wait_acked(&load, 200).await;

    // Background work started before the kill: a session with the shortest TTL and a token
    // that expires, both created through a follower.
    let follower = servers.server(followers[0]);
    let session: Value = http()
        .put(follower.url("registry", "/v1/session/create"))
        .json(&json!({"Name": "short", "TTL": "10s"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session_id = session["ID"].as_str().unwrap().to_owned();
    let session_created = Instant::now();
    let token: Value = http()
        .post(follower.url("secrets", "/v1/auth/token/create"))
        .header("X-Vault-Token", &servers.root_token)
        .json(&json!({"ttl": "6s", "policies": ["default"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let accessor = token["auth"]["accessor"].as_str().unwrap().to_owned();
    let token_created = Instant::now();
    // A batch job with no node to run on yet: its evaluation is blocked when the leader dies,
    // and the next leader places it once a node joins.
    let registered = http()
        .put(follower.url("scheduler", "/v1/jobs"))
        .json(&job("across", "batch", "dc1", 2, &["-c", "exit 0"]))
        .send()
        .await
        .unwrap();
    assert!(registered.status().is_success(), "{}", registered.status());
    let (_, allocs) = get_json(&follower.url("scheduler", "/v1/job/across/allocations")).await;
    assert_eq!(allocs, json!([]), "nothing to place on before the kill");

    let before_kill = load.acked.lock().await.len();
    servers.kill(leader).await;
    let killed = Instant::now();
    let new_leader = servers.wait_leader(&etcd).await;
    let handover = killed.elapsed();
    assert_ne!(new_leader, leader);
    // The load goes on through the survivors.
    wait_acked(&load, before_kill + 400).await;

    let survivor = target(&servers, followers[1]);
    let client = http();
    // The scheduler's client joins through the survivors after the kill; the job registered
    // before it is placed by the new leader and its allocations complete.
    let agent_dir = tempfile::tempdir().unwrap();
    let agent_servers = followers
        .iter()
        .map(|i| servers.server(*i).cairn.addr("scheduler"))
        .collect::<Vec<_>>()
        .join(",");
    let agent = support::Cairn::start(&[
        "agent",
        "--servers",
        &agent_servers,
        "--data-dir",
        agent_dir.path().to_str().unwrap(),
        "--node-name",
        "failover-node",
    ])
    .await;
    let started = Instant::now();
    loop {
        let (_, allocs) =
            get_json(&format!("{}/v1/job/across/allocations", survivor.scheduler)).await;
        let complete = allocs
            .as_array()
            .map(|a| a.iter().filter(|a| a["ClientStatus"] == "complete").count())
            .unwrap_or(0);
        if complete == 2 {
            break;
        }
        assert!(
            started.elapsed() < RESUME_BOUND,
            "the job registered before the kill was not placed and completed: {allocs}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let placed_after_kill = killed.elapsed();
    agent.stop().await;

    // The expired token is revoked by the new leader's expiry loop (listing accessors does
    // not revoke lazily as a lookup would).
    let started = Instant::now();
    loop {
        let listed: Value = client
            .request(
                reqwest::Method::from_bytes(b"LIST").unwrap(),
                format!("{}/v1/auth/token/accessors", survivor.secrets),
            )
            .header("X-Vault-Token", &servers.root_token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap_or_default();
        let keys = listed["data"]["keys"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !keys.iter().any(|k| k == accessor.as_str()) {
            break;
        }
        assert!(
            started.elapsed() < RESUME_BOUND,
            "the expired token was never revoked after the failover"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let token_gone = token_created.elapsed();
    // The session's TTL runs out on the new leader (Consul allows up to twice the TTL), which
    // follows the sessions every server creates.
    let started = Instant::now();
    loop {
        let info: Value = client
            .get(format!(
                "{}/v1/session/info/{session_id}",
                survivor.registry
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap_or_default();
        if info.as_array().is_some_and(Vec::is_empty) {
            break;
        }
        assert!(
            started.elapsed() < RESUME_BOUND,
            "the TTL session was never invalidated after the failover"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let session_gone = session_created.elapsed();

    load.stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    let verified = verify(&load, &survivor, &tokens).await;
    eprintln!(
        "leader killed: new leader after {handover:?}; {verified} acknowledged writes verified, \
         {} failed during the run ({}); the 6 s token was revoked {token_gone:?} after its creation; \
         the 10 s session was invalidated {session_gone:?} after its creation; the job \
         registered before the kill had both allocations complete {placed_after_kill:?} after \
         the kill (the agent joined after the new leader)",
        load.failed.load(Ordering::Relaxed),
        failures(&load)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stopping_one_etcd_member_under_load_loses_no_acknowledged_write() {
    let mut etcd = EtcdCluster::start(3).await;
    let servers = Servers::start(&etcd, 2).await;
    mount_kv(&servers, 0).await;
    let tokens = (servers.root_token.clone(), servers.platform_token.clone());
    let load = Arc::new(Load::default());
    let targets = vec![target(&servers, 0), target(&servers, 1)];
    let workers = start_load(&load, targets, tokens.clone(), 6, 5);
    wait_acked(&load, 200).await;
    // The etcd leader is the hardest member to lose: the others elect a new one.
    let member = etcd.leader().await.unwrap_or(0);
    let before_stop = load.acked.lock().await.len();
    etcd.stop(member, true).await;
    let stopped = load.acked.lock().await.len();
    wait_acked(&load, stopped + 300).await;
    etcd.restart(member).await;
    let restarted = load.acked.lock().await.len();
    wait_acked(&load, restarted + 100).await;
    load.stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    let (verified, missing) = missing_writes(&load, &target(&servers, 1), &tokens).await;
    if !missing.is_empty() {
        diagnose_lost(
            &load,
            &etcd,
            &servers,
            &missing,
            [before_stop, stopped, restarted],
        )
        .await;
    }
    assert!(
        missing.is_empty(),
        "acknowledged writes are lost: {missing:?}"
    );
    eprintln!(
        "etcd member {member} killed and restarted: {verified} acknowledged writes verified, {} \
         failed during the run ({})",
        load.failed.load(Ordering::Relaxed),
        failures(&load)
    );
}

/// Prints where each lost job is and is not: on every etcd member (a serializable read of
/// that member alone), through every server, and when it was acknowledged relative to the
/// member's kill (`marks`: writes acknowledged before the kill began, when it ended, when the
/// member was back).
async fn diagnose_lost(
    load: &Load,
    etcd: &EtcdCluster,
    servers: &Servers,
    missing: &[Write],
    marks: [usize; 3],
) {
    let acked = load.acked.lock().await.clone();
    let index_key = format!("{}scheduler/index", servers.prefix);
    for write in missing {
        let position = acked
            .iter()
            .position(|w| format!("{w:?}") == format!("{write:?}"));
        eprintln!("LOST {write:?}: acknowledged as write {position:?} (marks {marks:?})");
        let Write::Job { id, index, via } = write else {
            continue;
        };
        eprintln!("  registered through server {via}");
        for member in 0..etcd.size() {
            let jobs = etcd
                .keys_on(
                    member,
                    &format!("{}scheduler/jobs/default\0{id}\0", servers.prefix),
                )
                .await;
            let evals = etcd
                .keys_on(
                    member,
                    &format!("{}scheduler/evals/{index:020}/", servers.prefix),
                )
                .await;
            let stored_index = etcd.keys_on(member, &index_key).await;
            eprintln!(
                "  etcd member {member}: job keys {jobs:?}; evals created at {index}: {evals:?}; \
                 scheduler/index {stored_index:?}"
            );
        }
        for server in servers.running() {
            let (status, body) = get_json(
                &servers
                    .server(server)
                    .url("scheduler", &format!("/v1/job/{id}")),
            )
            .await;
            let (_, jobs) = get_json(&servers.server(server).url("scheduler", "/v1/jobs")).await;
            eprintln!(
                "  server {server}: GET job {status} (ModifyIndex {}); {} jobs listed",
                body["JobModifyIndex"],
                jobs.as_array().map_or(0, Vec::len)
            );
        }
        let leader = servers.leader(etcd).await;
        eprintln!("  leading server now: {leader:?}");
    }
}
