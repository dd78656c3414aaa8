//! What the client allocation tests (`alloc_ops.rs`, `exec.rs`) share: a real scheduler served
//! on `127.0.0.1:0` (`testkit::TestServer`) with a real client agent (`scheduler-agent`)
//! registered to it over HTTP, running raw_exec tasks as real processes in a temporary data
//! dir, and an HTTP client for the API.
//!
//! Invariants: every wait is a bounded poll (every 50 ms, at most [`WAIT`]); dropping a
//! [`Cluster`] stops the agent and kills every task process it started, so no test leaves a
//! process behind.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use scheduler::{Config, State};
use serde_json::{Value, json};
use testkit::TestServer;
use tokio_util::sync::CancellationToken;

/// The bound of every wait.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// The dev root token when ACLs are on.
pub(crate) const ROOT: &str = "root-token-for-alloc-ops";

/// A scheduler and one client node, both running.
pub(crate) struct Cluster {
    pub(crate) state: State,
    pub(crate) server: TestServer,
    pub(crate) http: reqwest::Client,
    /// The token sent on every request (`None`: none).
    pub(crate) token: Option<String>,
    runner: cluster::Runner,
    agent_stop: CancellationToken,
    agent: Option<tokio::task::JoinHandle<()>>,
    data_dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.agent_stop.cancel();
        if let Some(agent) = self.agent.take() {
            agent.abort();
        }
        scheduler_agent::kill_leftover_tasks(self.data_dir.path());
        self.runner.shutdown_token().cancel();
    }
}

impl Cluster {
    /// A scheduler (ACLs on with [`ROOT`] as management token when `acl`) and a client.
    pub(crate) async fn start(acl: bool) -> Cluster {
        let config = Config {
            acl_enabled: acl,
            dev_root_token: acl.then(|| ROOT.to_owned()),
            ..Config::default()
        };
        let state = State::open(testkit::mem_storage(), config)
            .await
            .expect("open the scheduler");
        let runner = cluster::Runner::embedded(CancellationToken::new());
        scheduler::start_tasks(&state, &runner);
        let server = TestServer::start(scheduler::router(state.clone())).await;
        let data_dir = tempfile::tempdir().expect("a data dir");
        let mut agent_config =
            scheduler_agent::AgentConfig::new(vec![server.url("")], data_dir.path().to_path_buf());
        agent_config.node_name = "alloc-ops".to_owned();
        agent_config.http_addr = server.addr().to_string();
        let agent = scheduler_agent::Agent::new(agent_config).expect("an agent");
        let agent_stop = CancellationToken::new();
        let stop = agent_stop.clone();
        let agent = tokio::spawn(async move {
            let _ = agent.run(stop).await;
        });
        let cluster = Cluster {
            state,
            server,
            http: reqwest::Client::new(),
            token: acl.then(|| ROOT.to_owned()),
            runner,
            agent_stop,
            agent: Some(agent),
            data_dir,
        };
        cluster
            .poll("the client node ready", || async {
                let nodes = cluster.get("/v1/nodes").await.1;
                nodes
                    .as_array()
                    .is_some_and(|nodes| nodes.iter().any(|node| node["Status"] == "ready"))
                    .then_some(())
            })
            .await;
        cluster
    }

    pub(crate) fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    /// `ws://127.0.0.1:PORT` followed by `path`.
    pub(crate) fn ws_url(&self, path: &str) -> String {
        format!("ws://{}{path}", self.server.addr())
    }

    fn with_token(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.header("X-Nomad-Token", token),
            None => request,
        }
    }

    /// Sends a request: the status and the body as text.
    pub(crate) async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, String) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self
            .with_token(self.http.request(method, self.url(path)))
            .timeout(WAIT);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    /// A GET: the status and the body as JSON (`Null` when it is not JSON).
    pub(crate) async fn get(&self, path: &str) -> (u16, Value) {
        let (status, body) = self.send("GET", path, None).await;
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// Polls `check` until it gives a value; panics after [`WAIT`].
    pub(crate) async fn poll<T, F, Fut>(&self, what: &str, mut check: F) -> T
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

    /// Registers `job` and returns the ID of its allocation once it runs.
    pub(crate) async fn run_job(&self, job: Value) -> String {
        let job_id = job["ID"].as_str().expect("a job ID").to_owned();
        let (status, body) = self
            .send("POST", "/v1/jobs", Some(&json!({ "Job": job })))
            .await;
        assert_eq!(status, 200, "register: {body}");
        self.poll("the allocation running", || async {
            let (_, allocs) = self.get(&format!("/v1/job/{job_id}/allocations")).await;
            allocs.as_array()?.iter().find_map(|alloc| {
                (alloc["ClientStatus"] == "running" && alloc["DesiredStatus"] == "run")
                    .then(|| alloc["ID"].as_str().unwrap_or_default().to_owned())
            })
        })
        .await
    }

    /// The allocation as the API reads it.
    pub(crate) async fn alloc(&self, alloc_id: &str) -> Value {
        let (status, alloc) = self.get(&format!("/v1/allocation/{alloc_id}")).await;
        assert_eq!(status, 200, "{alloc}");
        alloc
    }

    /// The event types of `task` of the allocation, oldest first.
    pub(crate) async fn event_types(&self, alloc_id: &str, task: &str) -> Vec<String> {
        let alloc = self.alloc(alloc_id).await;
        alloc["TaskStates"][task]["Events"]
            .as_array()
            .map(|events| {
                events
                    .iter()
                    .map(|event| event["Type"].as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits until the task's events end with `tail`; returns every event.
    pub(crate) async fn wait_events(
        &self,
        alloc_id: &str,
        task: &str,
        tail: &[&str],
    ) -> Vec<Value> {
        self.poll(&format!("events ending with {tail:?}"), || async {
            let alloc = self.alloc(alloc_id).await;
            let events = alloc["TaskStates"][task]["Events"].as_array()?.clone();
            let types: Vec<&str> = events
                .iter()
                .map(|event| event["Type"].as_str().unwrap_or_default())
                .collect();
            types.ends_with(tail).then_some(events)
        })
        .await
    }

    /// Creates a client token holding a policy with `rules`; returns its secret.
    pub(crate) async fn token_with(&self, name: &str, rules: &str) -> String {
        let (status, body) = self
            .send(
                "POST",
                &format!("/v1/acl/policy/{name}"),
                Some(&json!({ "Name": name, "Rules": rules })),
            )
            .await;
        assert_eq!(status, 200, "policy: {body}");
        let (status, body) = self
            .send(
                "POST",
                "/v1/acl/token",
                Some(&json!({ "Name": name, "Type": "client", "Policies": [name] })),
            )
            .await;
        assert_eq!(status, 200, "token: {body}");
        let token: Value = serde_json::from_str(&body).expect("a token");
        token["SecretID"].as_str().expect("a secret").to_owned()
    }
}

/// A service job of one raw_exec task `t` running `/bin/sh -c script`.
pub(crate) fn shell_job(id: &str, script: &str) -> Value {
    json!({
        "ID": id,
        "Name": id,
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g",
            "Count": 1,
            "Tasks": [{
                "Name": "t",
                "Driver": "raw_exec",
                "Config": { "command": "/bin/sh", "args": ["-c", script] },
                "KillTimeout": 2_000_000_000_i64,
                "Resources": { "CPU": 100, "MemoryMB": 32 },
            }],
        }],
    })
}
