//! Several scheduler servers over one store: two `scheduler::State`s over one shared
//! `MemStorage`, each served on `127.0.0.1:0` with its own runner under a
//! `cluster::ManualLeadership` the test moves, and a `ClusterView` naming the current leader's
//! URL. Proves that a follower answers as the leader does: writes sent to it are forwarded and
//! placed, its reads and blocking queries follow the leader's commits (a purge included), the status endpoints
//! and leader headers tell the truth, evaluations left by one leader complete on the next,
//! and a real client agent talking to the follower runs tasks whose logs read through either
//! server and that a WebSocket exec through the follower reaches (the reverse channel and
//! upgrades through forwarding).
//!
//! Invariants: every wait is a bounded poll (at most [`WAIT`]); nothing sleeps long; servers,
//! runners and the agent stop when the test's values drop.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use futures::StreamExt as _;
use scheduler::{ClusterView, Config, State};
use serde_json::{Value, json};
use storage::Storage;
use testkit::TestServer;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

/// The bound of every wait (the machine is loaded).
const WAIT: Duration = Duration::from_secs(30);

/// One server of the pair.
struct Server {
    state: State,
    storage: Arc<dyn Storage>,
    server: TestServer,
    runner: cluster::Runner,
    leadership: Arc<cluster::ManualLeadership>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.runner.shutdown_token().cancel();
    }
}

impl Server {
    fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    fn addr(&self) -> String {
        self.server.addr().to_string()
    }

    /// The store both servers share.
    fn state_storage(&self) -> Arc<dyn Storage> {
        self.storage.clone()
    }
}

/// Two servers over one store, and who leads as the membership says.
struct Pair {
    a: Server,
    b: Server,
    leader: Arc<Mutex<Option<String>>>,
    http: reqwest::Client,
}

impl Pair {
    /// Two servers; `a` leads.
    async fn start() -> Pair {
        Pair::with_config(Config::default()).await
    }

    /// Two servers with `config` (its cluster view set here); `a` leads.
    async fn with_config(config: Config) -> Pair {
        let storage: Arc<dyn Storage> = testkit::mem_storage();
        let leader: Arc<Mutex<Option<String>>> = Arc::default();
        let peers: Arc<Mutex<Vec<String>>> = Arc::default();
        let view = {
            let leader = leader.clone();
            let peers = peers.clone();
            ClusterView {
                leader_url: Arc::new(move || leader.lock().expect("leader").clone()),
                peers: Arc::new(move || peers.lock().expect("peers").clone()),
            }
        };
        let config = Config {
            cluster: Some(view),
            ..config
        };
        let a = Server::start(storage.clone(), config.clone(), true).await;
        let b = Server::start(storage, config, false).await;
        *peers.lock().expect("peers") = vec![a.addr(), b.addr()];
        *leader.lock().expect("leader") = Some(a.url(""));
        Pair {
            a,
            b,
            leader,
            http: reqwest::Client::new(),
        }
    }

    /// Leadership moves from `from` to `to`: `from` stops leading, nobody leads for a moment,
    /// then `to` leads and the membership says so.
    fn hand_over(&self, from: &Server, to: &Server) {
        from.leadership.set(false);
        *self.leader.lock().expect("leader") = None;
        to.leadership.set(true);
        *self.leader.lock().expect("leader") = Some(to.url(""));
    }

    async fn send(
        &self,
        method: &str,
        url: String,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> reqwest::Response {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self.http.request(method, url).timeout(WAIT + WAIT);
        if let Some(token) = token {
            request = request.header("X-Nomad-Token", token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        request.send().await.expect("the server answers")
    }

    /// A GET: the status and the body as JSON (`Null` when it is not JSON).
    async fn get(&self, server: &Server, path: &str) -> (u16, Value) {
        let response = self.send("GET", server.url(path), None, None).await;
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// Registers a fake client node through `server` (the client protocol).
    async fn add_node(&self, server: &Server, name: &str) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        let secret = uuid::Uuid::new_v4().to_string();
        let response = self
            .send(
                "PUT",
                server.url("/v1/internal/node/register"),
                Some(&secret),
                Some(&node_body(&id, &secret, name)),
            )
            .await;
        let status = response.status().as_u16();
        assert_eq!(
            status,
            200,
            "register node: {}",
            response.text().await.unwrap_or_default()
        );
        id
    }

    /// Registers `job` through `server`; the answer's body.
    async fn register(&self, server: &Server, job: Value) -> Value {
        let response = self
            .send(
                "POST",
                server.url("/v1/jobs"),
                None,
                Some(&json!({ "Job": job })),
            )
            .await;
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        assert_eq!(status, 200, "register job: {body}");
        serde_json::from_str(&body).expect("JSON")
    }

    /// The IDs of the job's allocations the server wants running, once there are `count`.
    async fn wait_placed(&self, server: &Server, job_id: &str, count: usize) -> Vec<String> {
        poll(&format!("{count} allocations of {job_id}"), || async {
            let (_, allocs) = self
                .get(server, &format!("/v1/job/{job_id}/allocations"))
                .await;
            let mut ids: Vec<String> = allocs
                .as_array()?
                .iter()
                .filter(|alloc| alloc["DesiredStatus"] == "run")
                .filter_map(|alloc| alloc["ID"].as_str().map(str::to_owned))
                .collect();
            ids.sort();
            (ids.len() == count).then_some(ids)
        })
        .await
    }
}

impl Server {
    async fn start(storage: Arc<dyn Storage>, config: Config, leading: bool) -> Server {
        let state = State::open(storage.clone(), config)
            .await
            .expect("open the scheduler");
        let leadership = Arc::new(cluster::ManualLeadership::new(leading));
        let runner = cluster::Runner::new(leadership.clone(), CancellationToken::new());
        scheduler::start_tasks(&state, &runner);
        let server = TestServer::start(scheduler::router(state.clone())).await;
        Server {
            state,
            storage,
            server,
            runner,
            leadership,
        }
    }
}

/// Polls `check` until it gives a value; panics after [`WAIT`].
async fn poll<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(start.elapsed() < WAIT, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A node with `raw_exec` healthy and room for many small allocations.
fn node_body(id: &str, secret: &str, name: &str) -> Value {
    json!({"Node": {
        "ID": id,
        "SecretID": secret,
        "Datacenter": "dc1",
        "Name": name,
        "NodePool": "default",
        "HTTPAddr": "127.0.0.1:4646",
        "Status": "ready",
        "Attributes": {
            "kernel.name": "linux",
            "os.name": "ubuntu",
            "nomad.version": "1.10.0",
            "driver.raw_exec": "1",
            "unique.hostname": name,
        },
        "NodeResources": {
            "Cpu": {"CpuShares": 8000, "TotalCpuCores": 4},
            "Memory": {"MemoryMB": 16384},
            "Disk": {"DiskMB": 100000},
            "MinDynamicPort": 20000,
            "MaxDynamicPort": 32000,
        },
        "Drivers": {"raw_exec": {"Detected": true, "Healthy": true, "HealthDescription": "Healthy"}},
    }})
}

/// A raw_exec service job.
fn service_job(id: &str, count: i64) -> Value {
    json!({
        "ID": id,
        "Name": id,
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "web",
            "Count": count,
            "Tasks": [{
                "Name": "server",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/sleep", "args": ["1000"]},
                "Resources": {"CPU": 100, "MemoryMB": 64},
            }],
        }],
    })
}

#[tokio::test]
async fn a_job_registered_through_the_follower_is_placed_and_reads_the_same_on_both() {
    let pair = Pair::start().await;
    pair.add_node(&pair.b, "node-1").await;
    let answer = pair.register(&pair.b, service_job("web", 2)).await;
    let eval_id = answer["EvalID"].as_str().expect("an evaluation").to_owned();

    // Read-your-writes on the follower: the job is there as soon as the write answered.
    let (status, job) = pair.get(&pair.b, "/v1/job/web").await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["ID"], "web");

    let on_b = pair.wait_placed(&pair.b, "web", 2).await;
    let on_a = pair.wait_placed(&pair.a, "web", 2).await;
    assert_eq!(on_a, on_b, "both servers see the same allocations");
    for id in &on_b {
        let (status, alloc) = pair.get(&pair.b, &format!("/v1/allocation/{id}")).await;
        assert_eq!(status, 200, "{alloc}");
        assert_eq!(alloc["JobID"], "web");
    }
    let (_, eval_on_a) = pair
        .get(&pair.a, &format!("/v1/evaluation/{eval_id}"))
        .await;
    let eval_on_b = poll("the evaluation complete on the follower", || async {
        let (_, eval) = pair
            .get(&pair.b, &format!("/v1/evaluation/{eval_id}"))
            .await;
        (eval["Status"] == "complete").then_some(eval)
    })
    .await;
    assert_eq!(eval_on_b["ID"], eval_on_a["ID"]);

    // The same table indexes on both once the follower caught up.
    poll("the same indexes", || async {
        (pair.a.state.table_indexes() == pair.b.state.table_indexes()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_purge_whose_versions_allocations_still_reference_removes_the_job_on_the_follower() {
    let pair = Pair::start().await;
    pair.add_node(&pair.a, "node-1").await;
    pair.register(&pair.a, service_job("purged", 1)).await;
    pair.wait_placed(&pair.b, "purged", 1).await;

    // Purged through the follower: the leader keeps the version its allocation references,
    // so no job record changes in the store.
    let response = pair
        .send(
            "DELETE",
            pair.b.url("/v1/job/purged?purge=true"),
            None,
            None,
        )
        .await;
    assert_eq!(response.status().as_u16(), 200);
    for server in [&pair.a, &pair.b] {
        let (status, body) = pair.get(server, "/v1/job/purged").await;
        assert_eq!(status, 404, "{body}");
        let (_, jobs) = pair.get(server, "/v1/jobs").await;
        assert_eq!(jobs, json!([]));
    }
    // A server that loads the state anew (a restart, a new leader's reload) agrees.
    let reopened = State::open(pair.a.state_storage(), Config::default())
        .await
        .expect("reopen the state");
    let router = scheduler::router(reopened);
    let response = testkit::call(
        &router,
        testkit::request("GET", "/v1/job/purged")
            .body(axum::body::Body::empty())
            .expect("a request"),
    )
    .await;
    assert_eq!(response.status.as_u16(), 404, "{}", response.text());

    // A stop (no purge) keeps the job, stopped, on both.
    pair.register(&pair.a, service_job("stopped", 1)).await;
    let response = pair
        .send("DELETE", pair.b.url("/v1/job/stopped"), None, None)
        .await;
    assert_eq!(response.status().as_u16(), 200);
    for server in [&pair.a, &pair.b] {
        let (status, job) = pair.get(server, "/v1/job/stopped").await;
        assert_eq!(status, 200, "{job}");
        assert_eq!(job["Stop"], true);
    }
}

#[tokio::test]
async fn a_write_through_the_follower_waits_out_an_unreachable_leader_and_reaches_the_next() {
    let pair = Pair::start().await;
    // The membership still names a leader that is gone (nothing listens at its address).
    let gone = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        format!("http://{}", listener.local_addr().expect("an address"))
    };
    *pair.leader.lock().expect("leader") = Some(gone);
    let named = {
        let leader = pair.leader.clone();
        let next = pair.a.url("");
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            *leader.lock().expect("leader") = Some(next);
        })
    };
    let answer = pair.register(&pair.b, service_job("patient", 1)).await;
    assert!(
        answer["EvalID"].as_str().is_some_and(|id| !id.is_empty()),
        "{answer}"
    );
    named.await.expect("the membership task");
    let (status, job) = pair.get(&pair.b, "/v1/job/patient").await;
    assert_eq!(status, 200, "{job}");
}

#[tokio::test]
async fn a_new_leader_gives_nodes_the_failover_ttl_before_marking_them_down() {
    let pair = Pair::with_config(Config {
        heartbeat_ttl: Duration::from_secs(1),
        heartbeat_grace: Duration::from_secs(1),
        failover_heartbeat_ttl: Duration::from_secs(120),
        ..Config::default()
    })
    .await;
    let node = pair.add_node(&pair.b, "quiet").await;
    pair.hand_over(&pair.a, &pair.b);
    // Silent for longer than TTL plus grace: the new leader still counts the node live.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, read) = pair.get(&pair.b, &format!("/v1/node/{node}")).await;
    assert_eq!(read["Status"], "ready", "{read}");
}

#[tokio::test]
async fn two_writers_at_once_never_commit_on_a_state_they_have_not_seen() {
    let pair = Pair::start().await;
    // Both lead for a while (a former leader that has not noticed yet).
    pair.b.leadership.set(true);
    poll("the second term started", || async {
        let (_, agent) = pair.get(&pair.b, "/v1/agent/self").await;
        (agent["stats"]["nomad"]["leader"] == "true").then_some(())
    })
    .await;
    /// Registers through `server`, once more if a commit was fenced; the job's modify index.
    async fn register(pair: &Pair, server: &Server, id: &str) -> u64 {
        for _ in 0..2 {
            let response = pair
                .send(
                    "POST",
                    server.url("/v1/jobs"),
                    None,
                    Some(&json!({"Job": service_job(id, 1)})),
                )
                .await;
            if response.status().as_u16() == 200 {
                let body: Value = response.json().await.expect("JSON");
                return body["JobModifyIndex"].as_u64().expect("an index");
            }
        }
        panic!("{id} was not registered after a reload");
    }
    let first = register(&pair, &pair.a, "one").await;
    let second = register(&pair, &pair.b, "two").await;
    let third = register(&pair, &pair.a, "three").await;
    assert!(
        first < second && second < third,
        "{first} < {second} < {third}"
    );
    let (_, jobs) = pair.get(&pair.a, "/v1/jobs").await;
    let mut ids: Vec<&str> = jobs
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|job| job["ID"].as_str())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["one", "three", "two"]);
}

#[tokio::test]
async fn status_and_leader_headers_tell_who_leads() {
    let pair = Pair::start().await;
    for server in [&pair.a, &pair.b] {
        let (status, leader) = pair.get(server, "/v1/status/leader").await;
        assert_eq!(status, 200);
        assert_eq!(leader, json!(pair.a.addr()));
        let (_, peers) = pair.get(server, "/v1/status/peers").await;
        assert_eq!(peers, json!([pair.a.addr(), pair.b.addr()]));
    }
    let response = pair.send("GET", pair.b.url("/v1/jobs"), None, None).await;
    let headers = response.headers();
    assert_eq!(headers["x-nomad-knownleader"], "true");
    let last_contact: u64 = headers["x-nomad-lastcontact"]
        .to_str()
        .expect("text")
        .parse()
        .expect("a number of ms");
    assert!(
        last_contact < 60_000,
        "the follower is in contact: {last_contact}"
    );

    // No leader known: the follower says so, and a write waits, then fails as Nomad's.
    pair.a.leadership.set(false);
    *pair.leader.lock().expect("leader") = None;
    let (_, leader) = pair.get(&pair.b, "/v1/status/leader").await;
    assert_eq!(leader, json!(""));
    let response = pair.send("GET", pair.b.url("/v1/jobs"), None, None).await;
    assert_eq!(response.headers()["x-nomad-knownleader"], "false");
    let response = pair
        .send(
            "POST",
            pair.b.url("/v1/jobs"),
            None,
            Some(&json!({"Job": service_job("nobody", 1)})),
        )
        .await;
    assert_eq!(response.status().as_u16(), 500);
    assert_eq!(
        response.text().await.unwrap_or_default().trim(),
        "No cluster leader"
    );
}

#[tokio::test]
async fn a_blocking_query_on_the_follower_wakes_on_a_leader_commit() {
    let pair = Pair::start().await;
    let response = pair.send("GET", pair.b.url("/v1/jobs"), None, None).await;
    let index: u64 = response.headers()["x-nomad-index"]
        .to_str()
        .expect("text")
        .parse()
        .expect("a number");
    let waiting = {
        let url = pair.b.url(&format!("/v1/jobs?index={index}&wait=60s"));
        let http = pair.http.clone();
        tokio::spawn(async move {
            let response = http.get(url).send().await.expect("an answer");
            let woke_at: u64 = response.headers()["x-nomad-index"]
                .to_str()
                .expect("text")
                .parse()
                .expect("a number");
            let body: Value = response.json().await.expect("JSON");
            (woke_at, body)
        })
    };
    // Written on the leader directly: only the follower's watch can wake the query.
    pair.register(&pair.a, service_job("woken", 1)).await;
    let (woke_at, jobs) = tokio::time::timeout(WAIT, waiting)
        .await
        .expect("the blocking query woke before its wait ran out")
        .expect("the query task");
    assert!(woke_at > index, "{woke_at} > {index}");
    assert!(
        jobs.as_array()
            .is_some_and(|jobs| jobs.iter().any(|job| job["ID"] == "woken")),
        "{jobs}"
    );
}

#[tokio::test]
async fn evaluations_left_by_one_leader_complete_on_the_next() {
    let pair = Pair::start().await;
    // No node yet: the first job's evaluation is blocked on the first leader.
    pair.register(&pair.a, service_job("early", 1)).await;
    poll("the early job blocked", || async {
        let (_, evals) = pair.get(&pair.a, "/v1/job/early/evaluations").await;
        evals
            .as_array()?
            .iter()
            .any(|eval| eval["Status"] == "blocked")
            .then_some(())
    })
    .await;
    // A burst of registrations, and leadership moves as soon as the last one is acknowledged:
    // whatever the first leader's workers had not finished is pending in the store.
    let node = pair.add_node(&pair.a, "node-1").await;
    for i in 0..5 {
        pair.register(&pair.a, service_job(&format!("burst-{i}"), 1))
            .await;
    }
    pair.hand_over(&pair.a, &pair.b);

    pair.wait_placed(&pair.b, "early", 1).await;
    for i in 0..5 {
        let job = format!("burst-{i}");
        pair.wait_placed(&pair.b, &job, 1).await;
        pair.wait_placed(&pair.a, &job, 1).await;
    }
    // Every evaluation completes, on both views; the node stayed up through the failover.
    poll("no evaluation left pending", || async {
        let (_, evals) = pair.get(&pair.a, "/v1/evaluations").await;
        evals
            .as_array()?
            .iter()
            .all(|eval| eval["Status"] == "complete" || eval["Status"] == "canceled")
            .then_some(())
    })
    .await;
    let (_, node) = pair.get(&pair.a, &format!("/v1/node/{node}")).await;
    assert_eq!(node["Status"], "ready");

    // The old leader follows again: a write through it lands on the new leader.
    pair.register(&pair.a, service_job("after", 1)).await;
    pair.wait_placed(&pair.a, "after", 1).await;
    pair.wait_placed(&pair.b, "after", 1).await;
}

#[tokio::test]
async fn an_agent_on_the_follower_runs_tasks_whose_logs_read_through_either_server_and_exec_through_the_follower()
 {
    let pair = Pair::start().await;
    let data_dir = tempfile::tempdir().expect("a data dir");
    let mut agent_config =
        scheduler_agent::AgentConfig::new(vec![pair.b.url("")], data_dir.path().to_path_buf());
    agent_config.node_name = "ha-agent".to_owned();
    agent_config.http_addr = pair.b.addr();
    let agent = scheduler_agent::Agent::new(agent_config).expect("an agent");
    let agent_stop = CancellationToken::new();
    let stop = agent_stop.clone();
    let agent = tokio::spawn(async move {
        let _ = agent.run(stop).await;
    });
    let _cleanup = Cleanup {
        stop: agent_stop,
        data_dir: data_dir.path().to_path_buf(),
    };

    let job = json!({
        "ID": "hello",
        "Name": "hello",
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g",
            "Count": 1,
            "Tasks": [{
                "Name": "t",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", "echo hello from ha; exec sleep 300"]},
                "Resources": {"CPU": 100, "MemoryMB": 64},
            }],
        }],
    });
    pair.register(&pair.b, job).await;
    let alloc_id = poll("the allocation running", || async {
        let (_, allocs) = pair.get(&pair.a, "/v1/job/hello/allocations").await;
        allocs.as_array()?.iter().find_map(|alloc| {
            (alloc["ClientStatus"] == "running")
                .then(|| alloc["ID"].as_str().unwrap_or_default().to_owned())
        })
    })
    .await;
    for server in [&pair.a, &pair.b] {
        let path = format!("/v1/client/fs/logs/{alloc_id}?task=t&type=stdout&plain=true");
        let logs = poll("the task's output", || async {
            let response = pair.send("GET", server.url(&path), None, None).await;
            let text = response.text().await.unwrap_or_default();
            text.contains("hello from ha").then_some(text)
        })
        .await;
        assert!(logs.starts_with("hello from ha"), "{logs:?}");
    }

    // exec through the follower: the caller's WebSocket and the agent's dial-back tunnel are
    // both upgrades spliced through it.
    let command = r#"["/bin/sh","-c","echo exec via $0"]"#
        .bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() {
                (byte as char).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect::<String>();
    let url = format!(
        "ws://{}/v1/client/allocation/{alloc_id}/exec?task=t&command={command}",
        pair.b.addr()
    );
    let (mut socket, response) = tokio_tungstenite::connect_async(url)
        .await
        .expect("the upgrade through the follower");
    assert_eq!(response.status(), 101);
    let mut stdout = Vec::new();
    let mut exit_code = None;
    let deadline = tokio::time::Instant::now() + WAIT;
    while exit_code.is_none() {
        let message = tokio::time::timeout_at(deadline, socket.next())
            .await
            .expect("the exec session ends");
        let Some(Ok(Message::Text(text))) = message else {
            match message {
                Some(Ok(_)) => continue,
                _ => break,
            }
        };
        let frame: Value = serde_json::from_str(text.as_str()).expect("JSON frames");
        if let Some(data) = frame["stdout"]["data"].as_str() {
            stdout.extend(BASE64.decode(data).expect("base64"));
        }
        if frame["exited"] == true {
            exit_code = frame["result"]["exit_code"].as_i64().or(Some(0));
        }
    }
    assert_eq!(exit_code, Some(0));
    assert_eq!(String::from_utf8_lossy(&stdout), "exec via /bin/sh\n");
    drop(agent);
}

/// Stops the agent and kills what it started when the test ends, passed or not.
struct Cleanup {
    stop: CancellationToken,
    data_dir: std::path::PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.stop.cancel();
        scheduler_agent::kill_leftover_tasks(&self.data_dir);
    }
}
