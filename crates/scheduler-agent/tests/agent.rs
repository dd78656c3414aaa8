//! End-to-end tests of the client agent against a fake scheduler server: an in-memory axum
//! router implementing the four `/v1/internal/*` client endpoints (a test double of the network
//! peer). Tasks are real processes run by the raw_exec driver.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use scheduler_agent::{Agent, AgentConfig, ControlError};
use scheduler_structs::{
    AllocClientUpdate, Allocation, Job, Node, RestartPolicy, Task, TaskGroup, TaskState,
};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------------------------
// The fake server.

#[derive(Debug, Default)]
struct FakeState {
    nodes: HashMap<String, Node>,
    registrations: u64,
    heartbeats: u64,
    allocs: BTreeMap<String, Allocation>,
    /// Every update received, in order.
    updates: Vec<AllocClientUpdate>,
    update_requests: u64,
    /// Tokens seen on calls other than registration, which must be the node's SecretID.
    bad_tokens: u64,
}

#[derive(Debug)]
struct Fake {
    state: Mutex<FakeState>,
    index: watch::Sender<u64>,
}

impl Fake {
    fn bump(&self) -> u64 {
        let mut next = 0;
        self.index.send_modify(|index| {
            *index += 1;
            next = *index;
        });
        next
    }

    /// Counts calls for a known node without its SecretID.
    fn check_token(&self, state: &mut FakeState, headers: &HeaderMap, node_id: &str) {
        let token = headers
            .get("X-Nomad-Token")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        if let Some(node) = state.nodes.get(node_id)
            && node.secret_id != token
        {
            state.bad_tokens += 1;
        }
    }
}

async fn register(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let Ok(node) = serde_json::from_value::<Node>(body["Node"].clone()) else {
        return (StatusCode::BAD_REQUEST, "bad node").into_response();
    };
    let token = headers
        .get("X-Nomad-Token")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let index = fake.bump();
    let mut state = fake.state.lock().unwrap();
    if token != node.secret_id {
        state.bad_tokens += 1;
    }
    state.registrations += 1;
    state.nodes.insert(node.id.clone(), node);
    Json(json!({"HeartbeatTTL": 2_000_000_000_i64, "Index": index})).into_response()
}

async fn heartbeat(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    let mut state = fake.state.lock().unwrap();
    if !state.nodes.contains_key(&id) {
        return (StatusCode::NOT_FOUND, "node not found").into_response();
    }
    fake.check_token(&mut state, &headers, &id);
    state.heartbeats += 1;
    Json(json!({"HeartbeatTTL": 2_000_000_000_i64})).into_response()
}

async fn allocations(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let asked: u64 = query.get("index").and_then(|i| i.parse().ok()).unwrap_or(0);
    let wait = query
        .get("wait")
        .map_or(Duration::from_secs(1), |w| parse_wait(w))
        .min(Duration::from_secs(5));
    let mut index = fake.index.subscribe();
    let _ = tokio::time::timeout(wait, index.wait_for(|current| *current > asked)).await;
    let current = *fake.index.borrow();
    let mut state = fake.state.lock().unwrap();
    if !state.nodes.contains_key(&id) {
        return (StatusCode::NOT_FOUND, "node not found").into_response();
    }
    fake.check_token(&mut state, &headers, &id);
    let allocs: Vec<&Allocation> = state
        .allocs
        .values()
        .filter(|alloc| alloc.node_id == id)
        .collect();
    // As the server: with `since`, the allocations the agent holds come as stubs.
    let Some(since) = query
        .get("since")
        .and_then(|since| since.parse::<u64>().ok())
    else {
        return Json(json!({"Allocs": allocs, "Index": current})).into_response();
    };
    let (held, newer): (Vec<&Allocation>, Vec<&Allocation>) = allocs
        .into_iter()
        .partition(|alloc| alloc.alloc_modify_index <= since);
    let stubs: Vec<Value> = held
        .iter()
        .map(|alloc| {
            json!({
                "ID": alloc.id,
                "AllocModifyIndex": alloc.alloc_modify_index,
                "DesiredStatus": alloc.desired_status,
            })
        })
        .collect();
    Json(json!({"Allocs": newer, "Index": current, "Unchanged": stubs})).into_response()
}

async fn update_allocations(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let Ok(updates) = serde_json::from_value::<Vec<AllocClientUpdate>>(body["Allocs"].clone())
    else {
        return (StatusCode::BAD_REQUEST, "bad updates").into_response();
    };
    let index = fake.bump();
    let mut state = fake.state.lock().unwrap();
    state.update_requests += 1;
    for update in updates {
        fake.check_token(&mut state, &headers, &update.node_id.clone());
        if let Some(alloc) = state.allocs.get_mut(&update.id) {
            alloc.client_status.clone_from(&update.client_status);
            alloc
                .client_description
                .clone_from(&update.client_description);
            alloc.task_states = update.task_states.clone();
            alloc.modify_index = index;
        }
        state.updates.push(update);
    }
    Json(json!({"Index": index})).into_response()
}

fn parse_wait(text: &str) -> Duration {
    if let Some(ms) = text.strip_suffix("ms") {
        return Duration::from_millis(ms.parse().unwrap_or(1000));
    }
    text.strip_suffix('s')
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(Duration::from_secs(1), Duration::from_secs_f64)
}

struct Server {
    url: String,
    fake: Arc<Fake>,
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    async fn start() -> Server {
        let fake = Arc::new(Fake {
            state: Mutex::new(FakeState::default()),
            index: watch::channel(1).0,
        });
        let app = Router::new()
            .route("/v1/internal/node/register", put(register))
            .route("/v1/internal/node/{id}/heartbeat", put(heartbeat))
            .route("/v1/internal/node/{id}/allocations", get(allocations))
            .route("/v1/internal/allocations", put(update_allocations))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Server { url, fake, task }
    }

    fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        f(&mut self.fake.state.lock().unwrap())
    }

    fn add_alloc(&self, mut alloc: Allocation) -> String {
        let index = self.fake.bump();
        alloc.create_index = index;
        alloc.modify_index = index;
        alloc.alloc_modify_index = index;
        let id = alloc.id.clone();
        self.with(|state| state.allocs.insert(id.clone(), alloc));
        id
    }

    fn set_desired(&self, id: &str, desired: &str) {
        let index = self.fake.bump();
        self.with(|state| {
            let alloc = state.allocs.get_mut(id).unwrap();
            alloc.desired_status = desired.to_owned();
            alloc.alloc_modify_index = index;
            alloc.modify_index = index;
        });
    }

    fn remove_alloc(&self, id: &str) {
        self.fake.bump();
        self.with(|state| state.allocs.remove(id));
    }

    fn alloc(&self, id: &str) -> Allocation {
        self.with(|state| state.allocs[id].clone())
    }

    async fn wait_for(&self, what: &str, mut condition: impl FnMut(&FakeState) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.with(|state| condition(state)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {:#?}",
                self.with(|s| s.allocs.clone())
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn wait_status(&self, id: &str, status: &str) -> Allocation {
        self.wait_for(&format!("alloc {id} {status}"), |state| {
            state
                .allocs
                .get(id)
                .is_some_and(|alloc| alloc.client_status == status)
        })
        .await;
        self.alloc(id)
    }
}

// ---------------------------------------------------------------------------------------------
// Jobs, allocations and agents.

fn task(name: &str, script: &str) -> Task {
    Task {
        name: name.to_owned(),
        driver: "raw_exec".to_owned(),
        config: BTreeMap::from([
            ("command".to_owned(), json!("/bin/sh")),
            ("args".to_owned(), json!(["-c", script])),
        ]),
        kill_timeout: 1_000_000_000,
        ..Task::default()
    }
}

fn policy(attempts: i64, delay_ms: i64) -> RestartPolicy {
    RestartPolicy {
        attempts,
        interval: 600_000_000_000,
        delay: delay_ms * 1_000_000,
        mode: "fail".to_owned(),
        render_templates: false,
    }
}

fn job(job_type: &str, tasks: Vec<Task>, restart: RestartPolicy) -> Job {
    Job {
        id: "example".to_owned(),
        name: "example".to_owned(),
        region: "global".to_owned(),
        namespace: "default".to_owned(),
        job_type: job_type.to_owned(),
        datacenters: vec!["dc1".to_owned()],
        task_groups: vec![TaskGroup {
            name: "group".to_owned(),
            count: 1,
            tasks,
            restart_policy: Some(restart),
            ..TaskGroup::default()
        }],
        meta: BTreeMap::from([("team".to_owned(), "blue".to_owned())]),
        ..Job::default()
    }
}

fn alloc_for(node_id: &str, job: Job) -> Allocation {
    Allocation {
        id: uuid::Uuid::new_v4().to_string(),
        namespace: "default".to_owned(),
        name: format!("{}.group[0]", job.id),
        node_id: node_id.to_owned(),
        job_id: job.id.clone(),
        job_type: job.job_type.clone(),
        task_group: "group".to_owned(),
        desired_status: "run".to_owned(),
        client_status: "pending".to_owned(),
        job: Some(Box::new(job)),
        ..Allocation::default()
    }
}

struct RunningAgent {
    node_id: String,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), scheduler_agent::AgentError>>,
    controls: scheduler_agent::AllocControls,
}

impl RunningAgent {
    async fn start(server: &Server, data_dir: &Path) -> RunningAgent {
        let mut config = AgentConfig::new(vec![server.url.clone()], data_dir.to_path_buf());
        config.node_name = "test-node".to_owned();
        config.http_addr = "127.0.0.1:4646".to_owned();
        config.alloc_query_wait = Duration::from_secs(2);
        config.update_interval = Duration::from_millis(50);
        config.reattach_poll_interval = Duration::from_millis(50);
        config.meta.insert("rack".to_owned(), "r7".to_owned());
        let agent = Agent::new(config).unwrap();
        let node_id = agent.node_id().to_owned();
        let controls = agent.controls();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(agent.run(shutdown.clone()));
        server
            .wait_for("registration", |state| state.nodes.contains_key(&node_id))
            .await;
        RunningAgent {
            node_id,
            shutdown,
            task,
            controls,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the agent stops promptly")
            .unwrap()
            .unwrap();
    }
}

fn events(state: &TaskState) -> Vec<&str> {
    state
        .events
        .iter()
        .map(|event| event.event_type.as_str())
        .collect()
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn pid_alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit(')')
        .next()
        .unwrap_or_default()
        .trim_start()
        .chars()
        .next();
    !matches!(state, None | Some('Z' | 'X'))
}

async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn alloc_dir(data_dir: &Path, alloc_id: &str) -> PathBuf {
    data_dir.join("alloc").join(alloc_id)
}

// ---------------------------------------------------------------------------------------------
// Tests.

#[tokio::test]
async fn registers_a_fingerprinted_node_and_heartbeats() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(&server, dir.path()).await;
    let node = server.with(|state| state.nodes[&agent.node_id].clone());
    assert_eq!(node.name, "test-node");
    assert_eq!(node.datacenter, "dc1");
    assert_eq!(node.node_pool, "default");
    assert_eq!(node.status, "ready");
    assert_eq!(node.http_addr, "127.0.0.1:4646");
    assert_eq!(node.meta["rack"], "r7");
    assert!(node.drivers["raw_exec"].detected && node.drivers["raw_exec"].healthy);
    assert_eq!(node.attributes["driver.raw_exec"], "1");
    assert!(node.node_resources.cpu.cpu_shares > 0);
    assert!(node.node_resources.memory.memory_mb > 0);
    // A 2 s TTL means a heartbeat about every second.
    server
        .wait_for("a heartbeat", |state| state.heartbeats >= 1)
        .await;

    // The server forgets the node: the next heartbeat gets a 404 and the agent registers again.
    server.with(|state| state.nodes.clear());
    server
        .wait_for("re-registration", |state| state.registrations >= 2)
        .await;
    assert_eq!(server.with(|state| state.bad_tokens), 0);
    agent.stop().await;

    // Same data dir, same node.
    let again = RunningAgent::start(&server, dir.path()).await;
    assert_eq!(again.node_id, agent_id(&server));
    again.stop().await;
}

fn agent_id(server: &Server) -> String {
    server.with(|state| state.nodes.keys().next().cloned().unwrap())
}

#[tokio::test]
async fn a_service_job_runs_with_its_environment_and_stops_on_request() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(&server, dir.path()).await;

    let mut web = task(
        "web",
        "env > \"$NOMAD_TASK_DIR/env\"; echo \"$NOMAD_ALLOC_ID $CAIRN_ALLOC_ID ${GREETING}\" > \"$NOMAD_ALLOC_DIR/data/ids\"; \
         echo $$ > \"$NOMAD_TASK_DIR/pid\"; echo started; exec sleep 30",
    );
    web.env.insert(
        "GREETING".to_owned(),
        "hi-${node.unique.name}-${meta.rack}".to_owned(),
    );
    let id = server.add_alloc(alloc_for(
        &agent.node_id,
        job("service", vec![web], policy(2, 100)),
    ));
    let alloc = server.wait_status(&id, "running").await;
    assert_eq!(alloc.client_description, "Tasks are running");
    let state = &alloc.task_states["web"];
    assert_eq!(events(state), ["Received", "Task Setup", "Started"]);
    assert_eq!(state.state, "running");
    assert!(state.started_at.is_some());
    assert_eq!(state.events[0].display_message, "Task received by client");

    let adir = alloc_dir(dir.path(), &id);
    wait_until("the task's files", || {
        read(adir.join("alloc/data/ids")).ends_with('\n')
    })
    .await;
    assert_eq!(
        read(adir.join("alloc/data/ids")),
        format!("{id} {id} hi-test-node-r7\n")
    );
    let env = read(adir.join("web/local/env"));
    for expected in [
        format!("NOMAD_ALLOC_ID={id}"),
        format!("CAIRN_ALLOC_ID={id}"),
        "NOMAD_JOB_ID=example".to_owned(),
        "NOMAD_TASK_NAME=web".to_owned(),
        "NOMAD_GROUP_NAME=group".to_owned(),
        "NOMAD_ALLOC_INDEX=0".to_owned(),
        "NOMAD_ALLOC_NAME=example.group[0]".to_owned(),
        "NOMAD_DC=dc1".to_owned(),
        "NOMAD_REGION=global".to_owned(),
        "NOMAD_NAMESPACE=default".to_owned(),
        "NOMAD_META_team=blue".to_owned(),
        "CAIRN_META_TEAM=blue".to_owned(),
        format!("NOMAD_TASK_DIR={}", adir.join("web/local").display()),
        format!("NOMAD_SECRETS_DIR={}", adir.join("web/secrets").display()),
    ] {
        assert!(
            env.lines().any(|line| line == expected),
            "{expected} missing from:\n{env}"
        );
    }
    wait_until("stdout", || {
        read(adir.join("alloc/logs/web.stdout.0")) == "started\n"
    })
    .await;
    let pid: i32 = read(adir.join("web/local/pid")).trim().parse().unwrap();
    assert!(pid_alive(pid));

    server.set_desired(&id, "stop");
    let alloc = server.wait_status(&id, "complete").await;
    let state = &alloc.task_states["web"];
    assert_eq!(
        events(state),
        [
            "Received",
            "Task Setup",
            "Started",
            "Killing",
            "Terminated",
            "Killed"
        ]
    );
    assert_eq!(
        state.events[3].display_message,
        "Sent interrupt. Waiting 1s before force killing"
    );
    assert_eq!(
        state.events[4].exit_code, 130,
        "SIGINT, raw_exec's default kill signal"
    );
    assert_eq!(state.events[4].signal, 2);
    assert_eq!(state.state, "dead");
    assert!(!state.failed);
    assert!(state.finished_at.is_some());
    assert_eq!(alloc.client_description, "All tasks have completed");
    wait_until("the process to be gone", || !pid_alive(pid)).await;
    assert_eq!(server.with(|state| state.bad_tokens), 0);
    agent.stop().await;
}

#[tokio::test]
async fn a_failing_task_is_restarted_per_policy_then_the_alloc_fails() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(&server, dir.path()).await;
    let id = server.add_alloc(alloc_for(
        &agent.node_id,
        job(
            "service",
            vec![task("web", "echo boom >&2; exit 3")],
            policy(1, 100),
        ),
    ));
    let alloc = server.wait_status(&id, "failed").await;
    assert_eq!(alloc.client_description, "Failed tasks");
    let state = &alloc.task_states["web"];
    assert_eq!(
        events(state),
        [
            "Received",
            "Task Setup",
            "Started",
            "Terminated",
            "Restarting",
            "Started",
            "Terminated",
            "Not Restarting"
        ]
    );
    assert_eq!(state.events[3].exit_code, 3);
    assert_eq!(state.events[3].display_message, "Exit Code: 3");
    assert_eq!(state.restarts, 1);
    assert!(state.failed);
    assert_eq!(
        state.events[7].display_message,
        "Exceeded allowed attempts 1 in interval 10m0s and mode is \"fail\""
    );
    let stderr = read(alloc_dir(dir.path(), &id).join("alloc/logs/web.stderr.0"));
    assert_eq!(stderr, "boom\nboom\n");
    agent.stop().await;
}

#[tokio::test]
async fn a_batch_job_completes_without_restarts() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(&server, dir.path()).await;
    let id = server.add_alloc(alloc_for(
        &agent.node_id,
        job("batch", vec![task("work", "echo done")], policy(3, 100)),
    ));
    let alloc = server.wait_status(&id, "complete").await;
    let state = &alloc.task_states["work"];
    assert_eq!(
        events(state),
        ["Received", "Task Setup", "Started", "Terminated"]
    );
    assert_eq!(state.restarts, 0);
    assert!(!state.failed);
    // The final status is reported once, not repeated.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let completes = server.with(|state| {
        state
            .updates
            .iter()
            .filter(|update| update.id == id && update.client_status == "complete")
            .count()
    });
    assert_eq!(completes, 1);
    agent.stop().await;
}

#[tokio::test]
async fn a_task_that_fails_for_good_kills_its_siblings() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(&server, dir.path()).await;
    let tasks = vec![
        task("bad", "sleep 0.3; exit 1"),
        task("good", "exec sleep 30"),
    ];
    let id = server.add_alloc(alloc_for(
        &agent.node_id,
        job("service", tasks, policy(0, 100)),
    ));
    server.wait_status(&id, "failed").await;
    server
        .wait_for("the sibling to die", |state| {
            state.allocs[&id].task_states["good"].state == "dead"
        })
        .await;
    let alloc = server.alloc(&id);
    let bad = &alloc.task_states["bad"];
    assert!(bad.failed);
    assert_eq!(events(bad).last(), Some(&"Not Restarting"));
    assert_eq!(
        bad.events.last().unwrap().display_message,
        "Policy allows no restarts"
    );
    let good = &alloc.task_states["good"];
    assert_eq!(
        events(good),
        [
            "Received",
            "Task Setup",
            "Started",
            "Sibling Task Failed",
            "Killing",
            "Terminated",
            "Killed"
        ]
    );
    assert_eq!(
        good.events[3].display_message,
        "Task's sibling \"bad\" failed"
    );
    assert_eq!(good.events[3].failed_sibling, "bad");
    assert!(!good.failed);
    assert_eq!(alloc.client_status, "failed");
    agent.stop().await;
}

#[tokio::test]
async fn bad_allocations_fail_without_stopping_the_agent() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(&server, dir.path()).await;

    let mut docker = task("web", "true");
    docker.driver = "docker".to_owned();
    let id = server.add_alloc(alloc_for(
        &agent.node_id,
        job("service", vec![docker], policy(2, 100)),
    ));
    let alloc = server.wait_status(&id, "failed").await;
    let state = &alloc.task_states["web"];
    assert_eq!(
        events(state),
        ["Received", "Task Setup", "Driver Failure", "Not Restarting"]
    );
    assert_eq!(state.events[3].display_message, "Error was unrecoverable");

    let mut no_command = task("web", "true");
    no_command.config.remove("command");
    let id = server.add_alloc(alloc_for(
        &agent.node_id,
        job("service", vec![no_command], policy(2, 100)),
    ));
    let alloc = server.wait_status(&id, "failed").await;
    assert_eq!(events(&alloc.task_states["web"])[2], "Failed Validation");

    let mut missing_group = alloc_for(
        &agent.node_id,
        job("service", vec![task("web", "true")], policy(2, 100)),
    );
    missing_group.task_group = "nope".to_owned();
    let id = server.add_alloc(missing_group);
    let alloc = server.wait_status(&id, "failed").await;
    assert!(
        alloc.client_description.contains("\"nope\""),
        "{}",
        alloc.client_description
    );

    let mut no_job = alloc_for(
        &agent.node_id,
        job("service", vec![task("web", "true")], policy(2, 100)),
    );
    no_job.job = None;
    let id = server.add_alloc(no_job);
    server.wait_status(&id, "failed").await;

    // Still serving.
    let id = server.add_alloc(alloc_for(
        &agent.node_id,
        job("batch", vec![task("ok", "true")], policy(0, 100)),
    ));
    server.wait_status(&id, "complete").await;
    agent.stop().await;
}

#[tokio::test]
async fn a_restarted_agent_re_attaches_to_its_running_tasks() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(&server, dir.path()).await;
    let script = "echo $$ > \"$NOMAD_TASK_DIR/pid\"; n=0; while [ ! -e \"$NOMAD_TASK_DIR/go\" ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done; exit 0";
    let id = server.add_alloc(alloc_for(
        &agent.node_id,
        job("batch", vec![task("work", script)], policy(0, 100)),
    ));
    server.wait_status(&id, "running").await;
    let local = alloc_dir(dir.path(), &id).join("work/local");
    wait_until("the pid file", || read(local.join("pid")).ends_with('\n')).await;
    let pid: i32 = read(local.join("pid")).trim().parse().unwrap();
    agent.stop().await;
    assert!(pid_alive(pid), "shutdown leaves tasks running");

    let agent = RunningAgent::start(&server, dir.path()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let alloc = server.alloc(&id);
    assert_eq!(alloc.client_status, "running");
    assert_eq!(
        events(&alloc.task_states["work"]),
        ["Received", "Task Setup", "Started"]
    );
    assert!(pid_alive(pid), "re-attached, not restarted");

    std::fs::write(local.join("go"), "").unwrap();
    let alloc = server.wait_status(&id, "complete").await;
    let state = &alloc.task_states["work"];
    assert_eq!(
        events(state),
        ["Received", "Task Setup", "Started", "Terminated"]
    );
    assert_eq!(state.events[3].exit_code, 0);
    assert!(!state.failed);
    agent.stop().await;
}

#[tokio::test]
async fn a_task_that_exited_while_the_agent_was_down_is_accounted_for() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(&server, dir.path()).await;
    let script = "echo $$ >> \"$NOMAD_TASK_DIR/pids\"; n=0; while [ ! -e \"$NOMAD_TASK_DIR/go\" ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done; exit 9";
    let id = server.add_alloc(alloc_for(
        &agent.node_id,
        job("service", vec![task("work", script)], policy(1, 100)),
    ));
    server.wait_status(&id, "running").await;
    let local = alloc_dir(dir.path(), &id).join("work/local");
    wait_until("the pid file", || read(local.join("pids")).ends_with('\n')).await;
    let pid: i32 = read(local.join("pids")).trim().parse().unwrap();
    agent.stop().await;

    std::fs::write(local.join("go"), "").unwrap();
    wait_until("the task to exit", || !pid_alive(pid)).await;

    let agent = RunningAgent::start(&server, dir.path()).await;
    let alloc = server.wait_status(&id, "failed").await;
    let state = &alloc.task_states["work"];
    assert_eq!(
        events(state),
        [
            "Received",
            "Task Setup",
            "Started",
            "Terminated",
            "Restarting",
            "Started",
            "Terminated",
            "Not Restarting"
        ]
    );
    assert_eq!(
        state.events[3].exit_code, 9,
        "the exit code survives the agent restart"
    );
    assert_eq!(state.events[6].exit_code, 9);
    assert_eq!(read(local.join("pids")).lines().count(), 2);
    agent.stop().await;
}

/// A service allocation whose task `web` sleeps, placed on `agent` and running: its id, its
/// allocation directory and the task's pid.
async fn sleeping_web(server: &Server, agent: &RunningAgent, dir: &Path) -> (String, PathBuf, i32) {
    let id = server.add_alloc(alloc_for(
        &agent.node_id,
        job(
            "service",
            vec![task(
                "web",
                "echo $$ > \"$NOMAD_TASK_DIR/pid\"; exec sleep 30",
            )],
            policy(2, 100),
        ),
    ));
    server.wait_status(&id, "running").await;
    let adir = alloc_dir(dir, &id);
    wait_until("the pid file", || {
        read(adir.join("web/local/pid")).ends_with('\n')
    })
    .await;
    let pid: i32 = read(adir.join("web/local/pid")).trim().parse().unwrap();
    (id, adir, pid)
}

#[tokio::test]
async fn a_garbage_collected_alloc_is_destroyed() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(&server, dir.path()).await;
    let (id, adir, pid) = sleeping_web(&server, &agent, dir.path()).await;

    server.remove_alloc(&id);
    wait_until("the process to be killed", || !pid_alive(pid)).await;
    wait_until("the alloc dir to be removed", || !adir.exists()).await;
    wait_until("the state to be removed", || {
        !dir.path().join("client/allocs").join(&id).exists()
    })
    .await;
    agent.stop().await;
}

#[tokio::test]
async fn an_allocation_the_server_holds_otherwise_than_the_agent_is_read_whole_again() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(&server, dir.path()).await;
    let (id, _, pid) = sleeping_web(&server, &agent, dir.path()).await;
    // A newer allocation moves the agent's `since` past the first one's.
    let other = server.add_alloc(alloc_for(
        &agent.node_id,
        job(
            "service",
            vec![task("web", "exec sleep 30")],
            policy(2, 100),
        ),
    ));
    server.wait_status(&other, "running").await;

    // The server's state went back: the first allocation, stopped, with an older
    // `AllocModifyIndex` than the agent holds, so it comes as a stub that differs.
    let held = server.alloc(&id).alloc_modify_index;
    let index = server.fake.bump();
    server.with(|state| {
        let alloc = state.allocs.get_mut(&id).unwrap();
        alloc.desired_status = "stop".to_owned();
        alloc.alloc_modify_index = held - 1;
        alloc.modify_index = index;
    });
    server.wait_status(&id, "complete").await;
    wait_until("the process to be gone", || !pid_alive(pid)).await;
    assert_eq!(server.alloc(&other).client_status, "running");
    agent.stop().await;
}

#[tokio::test]
async fn controls_signal_and_restart_running_tasks() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(&server, dir.path()).await;
    let script = "trap 'echo hup >> \"$NOMAD_TASK_DIR/log\"' HUP; echo start >> \"$NOMAD_TASK_DIR/log\"; n=0; while [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done";
    let id = server.add_alloc(alloc_for(
        &agent.node_id,
        job("service", vec![task("web", script)], policy(0, 100)),
    ));
    server.wait_status(&id, "running").await;
    let log = alloc_dir(dir.path(), &id).join("web/local/log");
    wait_until("the task to start", || read(&log).contains("start")).await;

    assert_eq!(agent.controls.allocations(), vec![id.clone()]);
    agent
        .controls
        .signal(&id, Some("web"), "SIGHUP")
        .await
        .unwrap();
    wait_until("the signal", || read(&log).contains("hup")).await;
    assert_eq!(
        agent.controls.signal(&id, Some("nope"), "SIGHUP").await,
        Err(ControlError::UnknownTask)
    );
    assert_eq!(
        agent.controls.signal("no-such-alloc", None, "SIGHUP").await,
        Err(ControlError::UnknownAllocation("no-such-alloc".to_owned()))
    );

    agent.controls.restart(&id, Some("web")).await.unwrap();
    wait_until("the restart", || read(&log).matches("start").count() == 2).await;
    server
        .wait_for("the restarted task to report running", |state| {
            let task = &state.allocs[&id].task_states["web"];
            task.state == "running" && task.restarts == 1
        })
        .await;
    let state = server.alloc(&id).task_states["web"].clone();
    assert_eq!(
        events(&state),
        [
            "Received",
            "Task Setup",
            "Started",
            "Signaling",
            "Restart Signaled",
            "Terminated",
            "Restarting",
            "Started"
        ]
    );
    assert_eq!(state.events[3].details["signal"], "SIGHUP");
    assert_eq!(
        state.events[4].display_message,
        "User requested task to restart"
    );

    // Stop the allocation so no process outlives the test; a stopped task is not running.
    server.set_desired(&id, "stop");
    server.wait_status(&id, "complete").await;
    let restart = agent.controls.restart(&id, Some("web")).await;
    assert!(
        matches!(
            restart,
            Err(ControlError::NotRunning | ControlError::UnknownAllocation(_))
        ),
        "{restart:?}"
    );
    agent.stop().await;
}

#[tokio::test]
async fn status_updates_are_batched() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(&server, dir.path()).await;
    let ids: Vec<String> = (0..8)
        .map(|_| {
            server.add_alloc(alloc_for(
                &agent.node_id,
                job("batch", vec![task("work", "true")], policy(0, 100)),
            ))
        })
        .collect();
    for id in &ids {
        server.wait_status(id, "complete").await;
    }
    let (requests, updates) = server.with(|state| (state.update_requests, state.updates.len()));
    assert!(
        requests < updates as u64,
        "{requests} requests for {updates} updates"
    );
    agent.stop().await;
}

#[tokio::test]
async fn changes_made_while_the_agent_was_down_apply_when_it_returns() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(&server, dir.path()).await;
    let script = "echo $$ > \"$NOMAD_TASK_DIR/pid\"; exec sleep 30";
    let stopped = server.add_alloc(alloc_for(
        &agent.node_id,
        job("service", vec![task("web", script)], policy(2, 100)),
    ));
    let collected = server.add_alloc(alloc_for(
        &agent.node_id,
        job("service", vec![task("web", script)], policy(2, 100)),
    ));
    server.wait_status(&stopped, "running").await;
    server.wait_status(&collected, "running").await;
    let pid_of = |id: &str| {
        let path = alloc_dir(dir.path(), id).join("web/local/pid");
        move || read(&path).trim().parse::<i32>().ok()
    };
    let (stopped_pid, collected_pid) = (pid_of(&stopped), pid_of(&collected));
    wait_until("the pid files", || {
        stopped_pid().is_some() && collected_pid().is_some()
    })
    .await;
    let (stopped_pid, collected_pid) = (stopped_pid().unwrap(), collected_pid().unwrap());
    agent.stop().await;

    server.set_desired(&stopped, "stop");
    server.remove_alloc(&collected);
    assert!(pid_alive(stopped_pid) && pid_alive(collected_pid));

    let agent = RunningAgent::start(&server, dir.path()).await;
    let alloc = server.wait_status(&stopped, "complete").await;
    assert_eq!(
        events(&alloc.task_states["web"]),
        [
            "Received",
            "Task Setup",
            "Started",
            "Killing",
            "Terminated",
            "Killed"
        ]
    );
    wait_until("the stopped task to be killed", || !pid_alive(stopped_pid)).await;
    wait_until("the collected task to be killed", || {
        !pid_alive(collected_pid)
    })
    .await;
    wait_until("the collected alloc's files to go", || {
        !alloc_dir(dir.path(), &collected).exists()
    })
    .await;
    assert!(
        alloc_dir(dir.path(), &stopped).exists(),
        "a stopped alloc keeps its files until GC"
    );
    agent.stop().await;
}
