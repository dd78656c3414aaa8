//! API tests of the scheduler's jobs, allocations, evaluations, nodes, node pools, agent and
//! client-protocol endpoints, named after behaviour, including the error paths and bad input
//! (which must answer 4xx and change nothing).
//!
//! Each test drives `scheduler::router` in-process (`support::Scheduler`, over
//! `testkit::call`) over a fresh `MemStorage`, with `scheduler::start_tasks` running, so
//! registrations are evaluated and placed for real. Fake client nodes register and heartbeat
//! through the `/v1/internal/*` client protocol with `raw_exec` healthy and plenty of
//! resources; nothing runs processes.
//!
//! Tests whose names end in `_placed` (and the assertions marked "placement") need the
//! placement core (`placement::compute`) to place allocations; everything else holds with a
//! placement that places nothing. Polls wait at most a few seconds; no test sleeps long.

mod support;

use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use scheduler::Config;
use serde_json::{Value, json};
use support::{Reply, Scheduler};
use tokio::time::Instant;

/// How long a poll for an asynchronous outcome (placement, heartbeat expiry) may take.
const POLL_LIMIT: Duration = Duration::from_secs(5);

/// A fake client node: its ID and secret.
#[derive(Debug, Clone)]
struct FakeNode {
    id: String,
    secret: String,
}

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A node with `raw_exec` healthy and room for many small allocations.
fn node_body(node: &FakeNode, name: &str) -> Value {
    json!({"Node": {
        "ID": node.id,
        "SecretID": node.secret,
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
        "Meta": {"rack": "r1"},
    }})
}

/// A raw_exec service job in the API's JSON form, as python-nomad sends it.
fn service_job(id: &str, count: i64) -> Value {
    json!({
        "ID": id,
        "Name": id,
        "Type": "service",
        "Datacenters": ["dc1"],
        "Meta": {"team": "infra"},
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

impl Scheduler {
    async fn new() -> Scheduler {
        Scheduler::with_config(Config::default()).await
    }

    async fn with_config(config: Config) -> Scheduler {
        Scheduler::open(testkit::mem_storage(), config).await
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<String>,
    ) -> Reply {
        let mut request = testkit::request(method.as_str(), path);
        if let Some(token) = token {
            request = request.header("X-Nomad-Token", token);
        }
        let body = body.map_or_else(axum::body::Body::empty, axum::body::Body::from);
        self.handle(request.body(body).expect("request")).await
    }

    async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, None, None).await
    }

    async fn put(&self, path: &str, body: Value) -> Reply {
        self.send(Method::PUT, path, None, Some(body.to_string()))
            .await
    }

    async fn post(&self, path: &str, body: Value) -> Reply {
        self.send(Method::POST, path, None, Some(body.to_string()))
            .await
    }

    async fn delete(&self, path: &str) -> Reply {
        self.send(Method::DELETE, path, None, None).await
    }

    /// Registers a fake node through the client protocol.
    async fn add_node(&self, name: &str) -> FakeNode {
        let node = FakeNode {
            id: uuid(),
            secret: uuid(),
        };
        self.send(
            Method::PUT,
            "/v1/internal/node/register",
            Some(&node.secret),
            Some(node_body(&node, name).to_string()),
        )
        .await
        .expect(StatusCode::OK);
        node
    }

    /// Registers `job` (a Job object) with `POST /v1/jobs`.
    async fn register(&self, job: Value) -> Value {
        self.post("/v1/jobs", json!({"Job": job}))
            .await
            .expect(StatusCode::OK)
            .json()
    }

    /// The job list, as IDs.
    async fn job_ids(&self, query: &str) -> Vec<String> {
        ids(&self
            .get(&format!("/v1/jobs{query}"))
            .await
            .expect(StatusCode::OK)
            .json())
    }

    /// Polls `path` until `done` holds for its JSON (at most [`POLL_LIMIT`]).
    async fn poll(&self, path: &str, mut done: impl FnMut(&Value) -> bool) -> Value {
        let deadline = Instant::now() + POLL_LIMIT;
        loop {
            let reply = self.get(path).await;
            if reply.status == StatusCode::OK {
                let value = reply.json();
                if done(&value) {
                    return value;
                }
                if Instant::now() > deadline {
                    panic!("gave up waiting on {path}: last answer {value}");
                }
            } else if Instant::now() > deadline {
                panic!("gave up waiting on {path}: {} {}", reply.status, reply.body);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the job has `count` live allocations (placement).
    async fn wait_placed(&self, job_id: &str, count: usize) -> Vec<Value> {
        let path = format!("/v1/job/{job_id}/allocations");
        let allocs = self.poll(&path, |allocs| live(allocs).len() == count).await;
        live(&allocs)
    }

    /// The index of the last write to the jobs table (evaluation processing never moves it).
    fn jobs_index(&self) -> u64 {
        self.state.table_indexes().jobs
    }
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item["ID"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The allocations of a list that the server still wants running.
fn live(allocs: &Value) -> Vec<Value> {
    allocs
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|alloc| alloc["DesiredStatus"] == "run")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Register, read, list

#[tokio::test]
async fn register_answers_eval_and_indexes_and_the_job_reads_back() {
    let s = Scheduler::new().await;
    let reply = s
        .post("/v1/jobs", json!({"Job": service_job("web", 1)}))
        .await
        .expect(StatusCode::OK);
    let index = reply.index();
    let body = reply.json();
    assert!(!body["EvalID"].as_str().unwrap_or("").is_empty(), "{body}");
    assert_eq!(body["Index"], index);
    assert_eq!(body["JobModifyIndex"], index);
    assert!(body["EvalCreateIndex"].as_u64().is_some());
    assert_eq!(body["KnownLeader"], true);

    let job = s.get("/v1/job/web").await.expect(StatusCode::OK).json();
    assert_eq!(job["ID"], "web");
    assert_eq!(job["Namespace"], "default");
    assert_eq!(job["Region"], "global");
    assert_eq!(job["NodePool"], "default");
    assert_eq!(job["Version"], 0);
    assert_eq!(job["TaskGroups"][0]["Count"], 1);
    // Without nodes the evaluation ends blocked (pending) or finished (dead), depending on when
    // the worker gets to it.
    assert!(
        ["pending", "dead"].contains(&job["Status"].as_str().unwrap_or("")),
        "{job}"
    );
    let eval = s
        .get(&format!(
            "/v1/evaluation/{}",
            body["EvalID"].as_str().unwrap_or("")
        ))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(eval["TriggeredBy"], "job-register");
    assert_eq!(eval["JobID"], "web");
}

#[tokio::test]
async fn register_defaults_datacenters_to_star_and_name_to_id() {
    let s = Scheduler::new().await;
    let mut job = service_job("batchy", 1);
    job["Datacenters"] = json!([]);
    job.as_object_mut().map(|object| object.remove("Name"));
    job["Type"] = json!("batch");
    s.register(job).await;
    let job = s.get("/v1/job/batchy").await.expect(StatusCode::OK).json();
    assert_eq!(job["Datacenters"], json!(["*"]));
    assert_eq!(job["Name"], "batchy");
    assert_eq!(job["Type"], "batch");
}

#[tokio::test]
async fn register_evaluates_and_places_allocations_placed() {
    let s = Scheduler::new().await;
    s.add_node("node-1").await;
    s.add_node("node-2").await;
    s.register(service_job("web", 3)).await;
    let allocs = s.wait_placed("web", 3).await;
    for alloc in &allocs {
        assert_eq!(alloc["JobID"], "web");
        assert_eq!(alloc["TaskGroup"], "web");
        assert!(!alloc["NodeID"].as_str().unwrap_or("").is_empty());
    }
    let job = s
        .poll("/v1/job/web", |job| job["Status"] == "running")
        .await;
    assert_eq!(job["Status"], "running");
    let summary = s
        .get("/v1/job/web/summary")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(summary["Summary"]["web"]["Starting"], 3);
}

/// python-nomad's `example.json` (upstream's API job with nulls, `Update`, a service with a
/// check, a network with `Public`, task `DiskMB`).
const PYTHON_NOMAD_EXAMPLE: &str = r#"{"Job": {
    "Region": "global", "ID": "example", "Name": "example", "Type": "service", "Priority": 50,
    "AllAtOnce": false, "Datacenters": ["dc1"],
    "Constraints": [{"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="}],
    "TaskGroups": [{
        "Name": "cache", "Count": 1, "Constraints": null,
        "Tasks": [{
            "Name": "redis", "Driver": "docker", "User": "",
            "Config": {"image": "redis:latest", "port_map": [{"db": 6379}]},
            "Constraints": null, "Env": null,
            "Services": [{"Id": "", "Name": "cache-redis", "Tags": ["global", "cache"], "PortLabel": "db",
                "Checks": [{"Id": "", "Name": "alive", "Type": "tcp", "Command": "", "Args": null, "Path": "",
                    "Protocol": "", "Interval": 10000000000, "Timeout": 2000000000}]}],
            "Resources": {"CPU": 500, "MemoryMB": 256, "DiskMB": 300, "IOPS": 0,
                "Networks": [{"Public": false, "CIDR": "", "ReservedPorts": null,
                    "DynamicPorts": [{"Label": "db", "Value": 0}], "IP": "", "MBits": 10}]},
            "Meta": null, "KillTimeout": 5000000000,
            "LogConfig": {"MaxFiles": 10, "MaxFileSizeMB": 10}, "Artifacts": null
        }],
        "RestartPolicy": {"Interval": 300000000000, "Attempts": 10, "Delay": 25000000000, "Mode": "delay"},
        "Meta": null
    }],
    "Update": {"Stagger": 10000000000, "MaxParallel": 1},
    "Periodic": null, "Meta": null, "Status": "", "StatusDescription": "", "CreateIndex": 0, "ModifyIndex": 0
}}"#;

#[tokio::test]
async fn register_accepts_python_nomads_example_job() {
    let s = Scheduler::new().await;
    s.send(
        Method::POST,
        "/v1/job/example",
        None,
        Some(PYTHON_NOMAD_EXAMPLE.to_owned()),
    )
    .await
    .expect(StatusCode::OK);
    let job = s.get("/v1/job/example").await.expect(StatusCode::OK).json();
    assert_eq!(job["TaskGroups"][0]["RestartPolicy"]["Mode"], "delay");
    assert_eq!(
        job["TaskGroups"][0]["Tasks"][0]["Services"][0]["Name"],
        "cache-redis"
    );
    assert_eq!(job["Constraints"][0]["Operand"], "=");
}

#[tokio::test]
async fn register_at_path_requires_the_same_id() {
    let s = Scheduler::new().await;
    s.put("/v1/job/other", json!({"Job": service_job("web", 1)}))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "Job ID does not match name");
    s.put("/v1/job/web", json!({"Job": service_job("web", 1)}))
        .await
        .expect(StatusCode::OK);
    assert_eq!(s.job_ids("").await, vec!["web"]);
}

#[tokio::test]
async fn register_without_job_or_id_is_400() {
    let s = Scheduler::new().await;
    s.post("/v1/jobs", json!({}))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "Job must be specified");
    s.post("/v1/jobs", json!({"Job": null}))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "Job must be specified");
    let mut job = service_job("x", 1);
    job.as_object_mut().map(|object| object.remove("ID"));
    s.post("/v1/jobs", json!({"Job": job}))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "Job ID hasn't been provided");
    assert!(s.job_ids("").await.is_empty());
}

#[tokio::test]
async fn register_into_a_missing_namespace_is_400() {
    let s = Scheduler::new().await;
    s.post(
        "/v1/jobs?namespace=nope",
        json!({"Job": service_job("web", 1)}),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "namespace \"nope\" not found");
    assert!(s.job_ids("?namespace=*").await.is_empty());
}

#[tokio::test]
async fn enforce_index_registers_only_at_the_given_modify_index() {
    let s = Scheduler::new().await;
    let first = s
        .post(
            "/v1/jobs",
            json!({"Job": service_job("web", 1), "EnforceIndex": true, "JobModifyIndex": 0}),
        )
        .await
        .expect(StatusCode::OK)
        .json();
    let modify_index = first["JobModifyIndex"].as_u64().expect("JobModifyIndex");
    s.post(
        "/v1/jobs",
        json!({"Job": service_job("web", 2), "EnforceIndex": true, "JobModifyIndex": 0}),
    )
    .await
    .expect_error(
        StatusCode::BAD_REQUEST,
        "Enforcing job modify index 0: job already exists",
    );
    s.post(
        "/v1/jobs",
        json!({"Job": service_job("web", 2), "EnforceIndex": true, "JobModifyIndex": modify_index + 100}),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "conflicting job modify index");
    assert_eq!(
        s.get("/v1/job/web").await.json()["TaskGroups"][0]["Count"],
        1,
        "refused writes changed nothing"
    );
    s.post(
        "/v1/jobs",
        json!({"Job": service_job("web", 2), "EnforceIndex": true, "JobModifyIndex": modify_index}),
    )
    .await
    .expect(StatusCode::OK);
    assert_eq!(
        s.get("/v1/job/web").await.json()["TaskGroups"][0]["Count"],
        2
    );
    s.post(
        "/v1/jobs",
        json!({"Job": service_job("fresh", 1), "EnforceIndex": true, "JobModifyIndex": 5}),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "job does not exist");
}

#[tokio::test]
async fn preserve_counts_keeps_the_existing_group_counts() {
    let s = Scheduler::new().await;
    s.register(service_job("web", 2)).await;
    let mut changed = service_job("web", 7);
    changed["Meta"] = json!({"team": "platform"});
    s.post("/v1/jobs", json!({"Job": changed, "PreserveCounts": true}))
        .await
        .expect(StatusCode::OK);
    let job = s.get("/v1/job/web").await.expect(StatusCode::OK).json();
    assert_eq!(job["TaskGroups"][0]["Count"], 2);
    assert_eq!(job["Meta"]["team"], "platform");
    assert_eq!(job["Version"], 1);
}

#[tokio::test]
async fn eval_priority_out_of_range_is_400() {
    let s = Scheduler::new().await;
    s.post(
        "/v1/jobs",
        json!({"Job": service_job("web", 1), "EvalPriority": 101}),
    )
    .await
    .expect_error(
        StatusCode::BAD_REQUEST,
        "Eval priority must be between 1 and 100 inclusively",
    );
    let reply = s
        .post(
            "/v1/jobs",
            json!({"Job": service_job("web", 1), "EvalPriority": 90}),
        )
        .await
        .expect(StatusCode::OK)
        .json();
    let eval = s
        .get(&format!(
            "/v1/evaluation/{}",
            reply["EvalID"].as_str().unwrap_or("")
        ))
        .await
        .json();
    assert_eq!(eval["Priority"], 90);
}

#[tokio::test]
async fn read_unknown_job_is_404() {
    let s = Scheduler::new().await;
    s.get("/v1/job/ghost")
        .await
        .expect_error(StatusCode::NOT_FOUND, "job not found");
    s.get("/v1/job/ghost/summary")
        .await
        .expect_error(StatusCode::NOT_FOUND, "job not found");
}

#[tokio::test]
async fn list_jobs_with_prefix_filter_meta_and_stub_fields() {
    let s = Scheduler::new().await;
    for id in ["api", "web-1", "web-2"] {
        s.register(service_job(id, 1)).await;
    }
    let mut batch = service_job("web-3", 1);
    batch["Type"] = json!("batch");
    s.register(batch).await;

    let reply = s.get("/v1/jobs").await.expect(StatusCode::OK);
    assert!(reply.index() > 0);
    let list = reply.json();
    assert_eq!(ids(&list), vec!["api", "web-1", "web-2", "web-3"]);
    let stub = &list[0];
    for field in [
        "ID",
        "ParentID",
        "Name",
        "Namespace",
        "Datacenters",
        "Type",
        "Priority",
        "Periodic",
        "ParameterizedJob",
        "Stop",
        "Status",
        "StatusDescription",
        "JobSummary",
        "CreateIndex",
        "ModifyIndex",
        "JobModifyIndex",
        "SubmitTime",
    ] {
        assert!(stub.get(field).is_some(), "stub lacks {field}: {stub}");
    }
    assert!(stub.get("Meta").is_none(), "Meta only with meta=true");
    assert_eq!(stub["JobSummary"]["JobID"], "api");
    assert!(stub["JobSummary"]["Summary"]["web"].is_object());

    assert_eq!(
        s.job_ids("?prefix=web").await,
        vec!["web-1", "web-2", "web-3"]
    );
    assert_eq!(
        s.job_ids("?prefix=web&filter=Type%20%3D%3D%20%22batch%22")
            .await,
        vec!["web-3"]
    );
    let with_meta = s
        .get("/v1/jobs?meta=True&prefix=api")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(with_meta[0]["Meta"]["team"], "infra");
}

#[tokio::test]
async fn list_jobs_pages_with_inclusive_next_token() {
    let s = Scheduler::new().await;
    for id in ["a", "b", "c", "d", "e"] {
        s.register(service_job(id, 1)).await;
    }
    let first = s.get("/v1/jobs?per_page=2").await.expect(StatusCode::OK);
    assert_eq!(ids(&first.json()), vec!["a", "b"]);
    let token = first
        .header("x-scheduler-nexttoken")
        .expect("next token")
        .to_owned();
    assert_eq!(token, "default.c");
    assert_eq!(first.header("x-nomad-nexttoken"), Some(token.as_str()));
    let second = s
        .get(&format!("/v1/jobs?per_page=2&next_token={token}"))
        .await
        .expect(StatusCode::OK);
    assert_eq!(ids(&second.json()), vec!["c", "d"]);
    let token = second
        .header("x-scheduler-nexttoken")
        .expect("next token")
        .to_owned();
    let last = s
        .get(&format!("/v1/jobs?per_page=2&next_token={token}"))
        .await
        .expect(StatusCode::OK);
    assert_eq!(ids(&last.json()), vec!["e"]);
    assert!(last.header("x-scheduler-nexttoken").is_none());
    assert_eq!(
        s.job_ids("?reverse=True&per_page=2").await,
        vec!["e", "d"],
        "python-nomad's True"
    );
    s.get("/v1/jobs?per_page=many")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "per_page");
}

#[tokio::test]
async fn list_jobs_across_namespaces_with_star() {
    let s = Scheduler::new().await;
    s.put("/v1/namespace/prod", json!({"Name": "prod"}))
        .await
        .expect(StatusCode::OK);
    s.register(service_job("web", 1)).await;
    s.post(
        "/v1/jobs?namespace=prod",
        json!({"Job": service_job("api", 1)}),
    )
    .await
    .expect(StatusCode::OK);
    assert_eq!(s.job_ids("").await, vec!["web"]);
    assert_eq!(s.job_ids("?namespace=prod").await, vec!["api"]);
    let all = s
        .get("/v1/jobs?namespace=*")
        .await
        .expect(StatusCode::OK)
        .json();
    let pairs: Vec<(String, String)> = all
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|job| {
            (
                job["Namespace"].as_str().unwrap_or("").to_owned(),
                job["ID"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        vec![
            ("default".into(), "web".into()),
            ("prod".into(), "api".into())
        ]
    );
    let page = s
        .get("/v1/jobs?namespace=*&per_page=1")
        .await
        .expect(StatusCode::OK);
    assert_eq!(page.header("x-scheduler-nexttoken"), Some("prod.api"));
    s.get("/v1/job/api?namespace=prod")
        .await
        .expect(StatusCode::OK);
    s.get("/v1/job/api").await.expect(StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn list_jobs_with_bad_filter_is_400() {
    let s = Scheduler::new().await;
    s.register(service_job("web", 1)).await;
    s.get("/v1/jobs?filter=%3D%3D%3D")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "failed to read filter expression");
    s.get("/v1/jobs?filter=NoSuchField%20%3D%3D%20%22x%22")
        .await
        .expect_error(
            StatusCode::BAD_REQUEST,
            "failed to read result page: error finding value in datum",
        );
}

// ---------------------------------------------------------------------------------------------
// Bad input

#[tokio::test]
async fn bad_register_input_is_400_and_changes_nothing() {
    let s = Scheduler::new().await;
    s.register(service_job("keep", 1)).await;
    let before = s.job_ids("?namespace=*").await;
    let jobs_index = s.jobs_index();

    s.send(
        Method::POST,
        "/v1/jobs",
        None,
        Some("{\"Job\": {".to_owned()),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "failed to parse JSON input");
    s.send(Method::POST, "/v1/jobs", None, Some("[1,2]".to_owned()))
        .await
        .expect(StatusCode::BAD_REQUEST);

    let mut unknown = service_job("bad", 1);
    unknown["TaskGroups"][0]["Tasks"][0]["Drvier"] = json!("raw_exec");
    s.post("/v1/jobs", json!({"Job": unknown}))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "unknown field `Drvier`");

    let mut operand = service_job("bad", 1);
    operand["Constraints"] =
        json!([{"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "almost"}]);
    s.post("/v1/jobs", json!({"Job": operand}))
        .await
        .expect_error(
            StatusCode::BAD_REQUEST,
            "Unknown constraint type \"almost\"",
        );

    let mut regexp = service_job("bad", 1);
    regexp["TaskGroups"][0]["Constraints"] =
        json!([{"LTarget": "${attr.kernel.name}", "RTarget": "(unclosed", "Operand": "regexp"}]);
    s.post("/v1/jobs", json!({"Job": regexp}))
        .await
        .expect_error(
            StatusCode::BAD_REQUEST,
            "Regular expression failed to compile",
        );

    s.post("/v1/jobs", json!({"Job": service_job("bad", 1_000_000)}))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "above the limit of 10000");

    let mut priority = service_job("bad", 1);
    priority["Priority"] = json!(500);
    s.post("/v1/jobs", json!({"Job": priority}))
        .await
        .expect_error(
            StatusCode::BAD_REQUEST,
            "job priority must be between [1, 100]",
        );

    let mut many = service_job("bad job", 1);
    many["TaskGroups"][0]["Tasks"][0]["Driver"] = json!("");
    let reply = s
        .post("/v1/jobs", json!({"Job": many}))
        .await
        .expect(StatusCode::BAD_REQUEST);
    assert!(
        reply.body.contains("errors occurred"),
        "every error is reported: {}",
        reply.body
    );
    assert!(
        reply.body.contains("Job ID contains a space"),
        "{}",
        reply.body
    );
    assert!(reply.body.contains("Missing task driver"), "{}", reply.body);

    let mut wrong_type = service_job("bad", 1);
    wrong_type["TaskGroups"][0]["Count"] = json!("three");
    s.post("/v1/jobs", json!({"Job": wrong_type}))
        .await
        .expect(StatusCode::BAD_REQUEST);

    assert_eq!(
        s.job_ids("?namespace=*").await,
        before,
        "job list unchanged"
    );
    assert_eq!(s.jobs_index(), jobs_index, "no job was written");
    assert_eq!(s.get("/v1/job/keep").await.json()["Version"], 0);
}

// ---------------------------------------------------------------------------------------------
// Versions, submissions, parse

#[tokio::test]
async fn versions_newest_first_with_structured_diffs() {
    let s = Scheduler::new().await;
    s.register(service_job("web", 1)).await;
    let mut changed = service_job("web", 3);
    changed["TaskGroups"][0]["Tasks"][0]["Env"] = json!({"PORT": "8080"});
    s.register(changed).await;

    let plain = s.get("/v1/job/web/versions").await.expect(StatusCode::OK);
    let index = plain.index();
    let plain = plain.json();
    let versions = plain["Versions"].as_array().cloned().unwrap_or_default();
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[0]["Version"], 1);
    assert_eq!(versions[1]["Version"], 0);
    assert_eq!(plain["Diffs"], Value::Null);
    assert_eq!(plain["Index"], index);
    let max_modify = versions
        .iter()
        .filter_map(|v| v["ModifyIndex"].as_u64())
        .max()
        .unwrap_or(0);
    assert_eq!(index, max_modify);

    let with_diffs = s
        .get("/v1/job/web/versions?diffs=true")
        .await
        .expect(StatusCode::OK)
        .json();
    let diffs = with_diffs["Diffs"].as_array().cloned().unwrap_or_default();
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0]["Type"], "Edited");
    assert_eq!(diffs[0]["ID"], "web");
    let group = &diffs[0]["TaskGroups"][0];
    assert_eq!(group["Name"], "web");
    let count = group["Fields"]
        .as_array()
        .and_then(|fields| fields.iter().find(|field| field["Name"] == "Count"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(count["Old"], "1");
    assert_eq!(count["New"], "3");

    let against = s
        .get("/v1/job/web/versions?diffs=true&diff_version=0")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(against["Diffs"].as_array().map(Vec::len), Some(2));
    s.get("/v1/job/web/versions?diffs=maybe")
        .await
        .expect_error(
            StatusCode::BAD_REQUEST,
            "Failed to parse value of \"diffs\"",
        );
    s.get("/v1/job/ghost/versions")
        .await
        .expect_error(StatusCode::NOT_FOUND, "job versions not found");
}

#[tokio::test]
async fn unchanged_re_register_keeps_the_version() {
    let s = Scheduler::new().await;
    let first = s.register(service_job("web", 1)).await;
    let second = s.register(service_job("web", 1)).await;
    assert_eq!(first["JobModifyIndex"], second["JobModifyIndex"]);
    assert_eq!(s.get("/v1/job/web").await.json()["Version"], 0);
}

#[tokio::test]
async fn submissions_keep_the_latest_six_versions() {
    let s = Scheduler::new().await;
    for version in 0..7 {
        let mut job = service_job("web", 1);
        job["Meta"] = json!({"v": version.to_string()});
        let source = format!("job \"web\" {{ meta {{ v = \"{version}\" }} }}");
        s.post(
            "/v1/jobs",
            json!({"Job": job, "Submission": {"Source": source, "Format": "hcl2", "VariableFlags": {"x": "a%20b"}}}),
        )
        .await
        .expect(StatusCode::OK);
    }
    let latest = s
        .get("/v1/job/web/submission?version=6")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(latest["Source"], "job \"web\" { meta { v = \"6\" } }");
    assert_eq!(latest["Format"], "hcl2");
    assert_eq!(latest["Version"], 6);
    assert_eq!(latest["JobID"], "web");
    assert_eq!(latest["Namespace"], "default");
    assert_eq!(
        latest["VariableFlags"]["x"], "a b",
        "variable flags are URL-unescaped"
    );
    s.get("/v1/job/web/submission?version=1")
        .await
        .expect(StatusCode::OK);
    s.get("/v1/job/web/submission?version=0")
        .await
        .expect_error(StatusCode::NOT_FOUND, "job source not found");
    s.get("/v1/job/web/submission").await.expect_error(
        StatusCode::BAD_REQUEST,
        "Unable to parse job submission version parameter",
    );
    s.get("/v1/job/web/submission?version=x")
        .await
        .expect(StatusCode::BAD_REQUEST);
    let versions = s.get("/v1/job/web/versions").await.json();
    assert_eq!(
        versions["Versions"].as_array().map(Vec::len),
        Some(6),
        "six versions retained"
    );
}

const PARSE_HCL: &str = r#"
variable "image_tag" {
  type    = string
  default = "1.0"
}

variable "count" {
  type = number
}

job "example" {
  datacenters = ["dc1"]
  meta {
    tag = "${var.image_tag}"
  }
  group "cache" {
    count = var.count
    task "redis" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
      resources {
        cpu    = 200
        memory = 128
      }
    }
  }
}
"#;

#[tokio::test]
async fn parse_with_variables_and_canonicalize() {
    let s = Scheduler::new().await;
    let job = s
        .post(
            "/v1/jobs/parse",
            json!({"JobHCL": PARSE_HCL, "Variables": "count = 3\nimage_tag = \"2.5\"\n", "Canonicalize": true}),
        )
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(job["ID"], "example");
    assert_eq!(job["Name"], "example");
    assert_eq!(job["Meta"]["tag"], "2.5");
    assert_eq!(job["TaskGroups"][0]["Count"], 3);
    assert_eq!(job["Type"], "service", "canonicalize fills the type");
    assert_eq!(job["Priority"], 50);
    assert_eq!(
        job["TaskGroups"][0]["Tasks"][0]["KillTimeout"],
        5_000_000_000_i64
    );

    let raw = s
        .put(
            "/v1/jobs/parse",
            json!({"JobHCL": PARSE_HCL, "Variables": "count = 1"}),
        )
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(raw["Meta"]["tag"], "1.0", "variable default");
    assert!(raw.get("Job").is_none(), "the bare job, no wrapper");

    s.post("/v1/jobs/parse", json!({"JobHCL": ""}))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "Job spec is empty");
    s.post("/v1/jobs/parse", json!({}))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "Job spec is empty");
    s.post("/v1/jobs/parse", json!({"JobHCL": "job \"x\" { group {{ "}))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "Failed to parse job:");
}

// ---------------------------------------------------------------------------------------------
// Deregister

#[tokio::test]
async fn deregister_stops_the_job_and_purge_removes_it() {
    let s = Scheduler::new().await;
    s.register(service_job("web", 1)).await;
    let reply = s.delete("/v1/job/web").await.expect(StatusCode::OK);
    assert!(reply.index() > 0);
    let body = reply.json();
    assert!(!body["EvalID"].as_str().unwrap_or("").is_empty(), "{body}");
    let job = s.get("/v1/job/web").await.expect(StatusCode::OK).json();
    assert_eq!(job["Stop"], true);
    assert_eq!(job["Version"], 1);
    let eval = s
        .get(&format!(
            "/v1/evaluation/{}",
            body["EvalID"].as_str().unwrap_or("")
        ))
        .await
        .json();
    assert_eq!(eval["TriggeredBy"], "job-deregister");

    s.delete("/v1/job/web?purge=true&eval_priority=70")
        .await
        .expect(StatusCode::OK);
    s.get("/v1/job/web")
        .await
        .expect_error(StatusCode::NOT_FOUND, "job not found");
    assert!(s.job_ids("").await.is_empty());
    s.delete("/v1/job/web?purge=maybe")
        .await
        .expect(StatusCode::BAD_REQUEST);
    s.delete("/v1/job/web?eval_priority=500")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "Eval priority");
    let unknown = s
        .delete("/v1/job/never")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(
        unknown["EvalID"], "",
        "upstream answers an unknown job with an empty success"
    );
}

#[tokio::test]
async fn deregister_stops_the_allocations_placed() {
    let s = Scheduler::new().await;
    s.add_node("node-1").await;
    s.register(service_job("web", 2)).await;
    s.wait_placed("web", 2).await;
    s.delete("/v1/job/web").await.expect(StatusCode::OK);
    s.poll("/v1/job/web/allocations", |allocs| live(allocs).is_empty())
        .await;
}

#[tokio::test]
async fn job_allocations_all_includes_an_earlier_registration_placed() {
    let s = Scheduler::new().await;
    s.add_node("node-1").await;
    s.register(service_job("web", 1)).await;
    s.wait_placed("web", 1).await;
    s.delete("/v1/job/web?purge=true")
        .await
        .expect(StatusCode::OK);
    s.register(service_job("web", 1)).await;
    s.wait_placed("web", 1).await;
    let current = s
        .get("/v1/job/web/allocations")
        .await
        .expect(StatusCode::OK)
        .json();
    let all = s
        .get("/v1/job/web/allocations?all=True")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(current.as_array().map(Vec::len), Some(1));
    assert_eq!(all.as_array().map(Vec::len), Some(2));
}

// ---------------------------------------------------------------------------------------------
// Allocations and evaluations

#[tokio::test]
async fn allocations_list_validates_prefix_and_filter() {
    let s = Scheduler::new().await;
    s.get("/v1/allocations").await.expect(StatusCode::OK);
    s.get("/v1/allocations?prefix=abc").await.expect_error(
        StatusCode::BAD_REQUEST,
        "Input (without hyphens) must be even length",
    );
    s.get("/v1/allocations?prefix=zz")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "Invalid UUID");
    s.get("/v1/allocations?prefix=ab")
        .await
        .expect(StatusCode::OK);
    s.get("/v1/allocations?filter=%3D%3D")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "failed to read filter expression");
    s.get("/v1/allocations?task_states=sometimes")
        .await
        .expect(StatusCode::BAD_REQUEST);
    s.get("/v1/allocations?index=x")
        .await
        .expect(StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn allocations_list_pages_filters_and_shapes_stubs_placed() {
    let s = Scheduler::new().await;
    s.add_node("node-1").await;
    s.register(service_job("web", 3)).await;
    s.register(service_job("api", 2)).await;
    s.wait_placed("web", 3).await;
    s.wait_placed("api", 2).await;

    let all = s.get("/v1/allocations").await.expect(StatusCode::OK);
    assert!(all.index() > 0);
    let all = all.json();
    assert_eq!(all.as_array().map(Vec::len), Some(5));
    let indexes: Vec<u64> = all
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter_map(|a| a["CreateIndex"].as_u64())
        .collect();
    assert!(
        indexes.windows(2).all(|pair| pair[0] <= pair[1]),
        "oldest first: {indexes:?}"
    );
    assert!(all[0].get("AllocatedResources").is_none());
    assert!(all[0]["TaskStates"].is_object() || all[0]["TaskStates"].is_null());
    assert!(all[0].get("Job").is_none(), "list entries carry no job");

    let page = s
        .get("/v1/allocations?per_page=2")
        .await
        .expect(StatusCode::OK);
    let token = page
        .header("x-scheduler-nexttoken")
        .expect("token")
        .to_owned();
    assert_eq!(ids(&page.json()), ids(&all)[..2].to_vec());
    assert_eq!(
        token,
        format!(
            "{}.{}",
            all[2]["CreateIndex"],
            all[2]["ID"].as_str().unwrap_or("")
        )
    );
    let rest = s
        .get(&format!("/v1/allocations?per_page=10&next_token={token}"))
        .await
        .json();
    assert_eq!(ids(&rest), ids(&all)[2..].to_vec());

    let reversed = s.get("/v1/allocations?reverse=true").await.json();
    let mut expected = ids(&all);
    expected.reverse();
    assert_eq!(ids(&reversed), expected);

    let web = s
        .get("/v1/allocations?filter=JobID%20%3D%3D%20%22web%22")
        .await
        .json();
    assert_eq!(web.as_array().map(Vec::len), Some(3));

    let first_id = all[0]["ID"].as_str().unwrap_or("").to_owned();
    let by_prefix = s
        .get(&format!("/v1/allocations?prefix={}", &first_id[..4]))
        .await
        .json();
    assert!(ids(&by_prefix).contains(&first_id));

    let shaped = s
        .get("/v1/allocations?resources=true&task_states=false")
        .await
        .json();
    assert!(shaped[0]["AllocatedResources"].is_object());
    assert_eq!(shaped[0]["TaskStates"], Value::Null);
}

#[tokio::test]
async fn allocation_read_needs_the_full_id_and_carries_the_job_placed() {
    let s = Scheduler::new().await;
    s.add_node("node-1").await;
    s.register(service_job("web", 1)).await;
    let allocs = s.wait_placed("web", 1).await;
    let id = allocs[0]["ID"].as_str().unwrap_or("").to_owned();
    let alloc = s
        .get(&format!("/v1/allocation/{id}"))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(alloc["ID"], id);
    assert_eq!(alloc["Job"]["ID"], "web");
    assert_eq!(alloc["Job"]["TaskGroups"][0]["Name"], "web");
    s.get(&format!("/v1/allocation/{}", &id[..8]))
        .await
        .expect_error(StatusCode::NOT_FOUND, "alloc not found");
}

#[tokio::test]
async fn allocation_read_and_stop_of_unknown_alloc_is_404() {
    let s = Scheduler::new().await;
    let id = uuid();
    s.get(&format!("/v1/allocation/{id}"))
        .await
        .expect_error(StatusCode::NOT_FOUND, "alloc not found");
    s.post(&format!("/v1/allocation/{id}/stop"), json!(null))
        .await
        .expect_error(StatusCode::NOT_FOUND, "alloc not found");
    s.send(
        Method::PUT,
        &format!("/v1/allocation/{id}/stop"),
        None,
        None,
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "alloc not found");
}

#[tokio::test]
async fn allocation_stop_places_a_replacement_placed() {
    let s = Scheduler::new().await;
    s.add_node("node-1").await;
    s.add_node("node-2").await;
    s.register(service_job("web", 1)).await;
    let allocs = s.wait_placed("web", 1).await;
    let old = allocs[0]["ID"].as_str().unwrap_or("").to_owned();

    s.post(
        &format!("/v1/allocation/{old}/stop?no_shutdown_delay=maybe"),
        json!(null),
    )
    .await
    .expect_error(
        StatusCode::BAD_REQUEST,
        "no_shutdown_delay value is not a boolean",
    );
    let reply = s
        .send(
            Method::POST,
            &format!("/v1/allocation/{old}/stop"),
            None,
            None,
        )
        .await
        .expect(StatusCode::OK);
    let index = reply.index();
    let body = reply.json();
    assert_eq!(body["Index"], index);
    let eval_id = body["EvalID"].as_str().unwrap_or("").to_owned();
    assert!(!eval_id.is_empty());
    let eval = s.get(&format!("/v1/evaluation/{eval_id}")).await.json();
    assert_eq!(eval["TriggeredBy"], "alloc-stop");

    let allocs = s
        .poll("/v1/job/web/allocations", |allocs| {
            live(allocs).iter().any(|alloc| alloc["ID"] != old.as_str())
        })
        .await;
    let replacement = live(&allocs)
        .into_iter()
        .find(|alloc| alloc["ID"] != old.as_str())
        .unwrap_or_default();
    let full = s
        .get(&format!(
            "/v1/allocation/{}",
            replacement["ID"].as_str().unwrap_or("")
        ))
        .await
        .json();
    assert_eq!(full["PreviousAllocation"], old.as_str());
    let stopped = s.get(&format!("/v1/allocation/{old}")).await.json();
    assert_eq!(stopped["DesiredStatus"], "stop");
}

#[tokio::test]
async fn evaluations_created_in_the_same_millisecond_list_in_creation_order() {
    let s = Scheduler::new().await;
    // Registered back to back (well within one millisecond of each other on a fast machine):
    // the order comes from each evaluation's CreateIndex, never from its CreateTime or ID.
    let mut created = Vec::new();
    for job in ["zz", "mm", "aa"] {
        let reply = s.register(service_job(job, 1)).await;
        created.push(reply["EvalID"].as_str().unwrap_or("").to_owned());
    }
    let listed = ids(&s.get("/v1/evaluations").await.expect(StatusCode::OK).json());
    let positions: Vec<usize> = created
        .iter()
        .map(|id| {
            listed
                .iter()
                .position(|listed| listed == id)
                .expect("listed")
        })
        .collect();
    assert!(
        positions.windows(2).all(|pair| pair[0] < pair[1]),
        "creation order {created:?}, listed {listed:?}"
    );
    let reversed = ids(&s.get("/v1/evaluations?reverse=true").await.json());
    let positions: Vec<usize> = created
        .iter()
        .map(|id| {
            reversed
                .iter()
                .position(|listed| listed == id)
                .expect("listed")
        })
        .collect();
    assert!(
        positions.windows(2).all(|pair| pair[0] > pair[1]),
        "reverse creation order {created:?}, listed {reversed:?}"
    );
}

#[tokio::test]
async fn evaluations_list_and_read() {
    let s = Scheduler::new().await;
    let web = s.register(service_job("web", 1)).await;
    let api = s.register(service_job("api", 1)).await;
    let web_eval = web["EvalID"].as_str().unwrap_or("").to_owned();
    let api_eval = api["EvalID"].as_str().unwrap_or("").to_owned();
    // Placement may add evaluations (blocked ones) meanwhile: check membership, not counts.
    let evals = ids(&s.get("/v1/evaluations").await.expect(StatusCode::OK).json());
    assert!(
        evals.contains(&web_eval) && evals.contains(&api_eval),
        "{evals:?}"
    );
    let for_web = s.get("/v1/evaluations?job=web").await.json();
    assert!(ids(&for_web).contains(&web_eval));
    assert!(
        for_web
            .as_array()
            .is_some_and(|evals| evals.iter().all(|eval| eval["JobID"] == "web"))
    );
    let job_evals = s
        .get("/v1/job/web/evaluations")
        .await
        .expect(StatusCode::OK)
        .json();
    assert!(ids(&job_evals).contains(&web_eval));
    assert!(
        job_evals
            .as_array()
            .is_some_and(|evals| evals.iter().all(|eval| eval["JobID"] == "web"))
    );
    let page = s
        .get("/v1/evaluations?per_page=1")
        .await
        .expect(StatusCode::OK);
    assert_eq!(page.json().as_array().map(Vec::len), Some(1));
    assert!(page.header("x-scheduler-nexttoken").is_some());
    let read = s
        .get(&format!("/v1/evaluation/{web_eval}"))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(read["ID"], web_eval.as_str());
    assert_eq!(read["Type"], "service");
    s.get(&format!("/v1/evaluation/{}", uuid()))
        .await
        .expect_error(StatusCode::NOT_FOUND, "eval not found");
    s.get("/v1/evaluations?prefix=a")
        .await
        .expect(StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn job_summary_and_unknown_job_allocations() {
    let s = Scheduler::new().await;
    s.register(service_job("web", 2)).await;
    let reply = s.get("/v1/job/web/summary").await.expect(StatusCode::OK);
    assert!(reply.index() > 0);
    let summary = reply.json();
    assert_eq!(summary["JobID"], "web");
    assert_eq!(summary["Namespace"], "default");
    for field in [
        "Queued", "Complete", "Failed", "Running", "Starting", "Lost",
    ] {
        assert!(summary["Summary"]["web"].get(field).is_some(), "{summary}");
    }
    assert!(summary["Children"].is_object());
    let none = s
        .get("/v1/job/ghost/allocations")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(none, json!([]));
}

// ---------------------------------------------------------------------------------------------
// Blocking queries

// The queries below read indexes that only their own writes move (job versions, nodes):
// evaluation processing runs in the background and moves the job, allocation and evaluation
// indexes at times a test cannot predict.

#[tokio::test]
async fn blocking_query_returns_on_a_change() {
    let s = Arc::new(Scheduler::new().await);
    s.register(service_job("web", 1)).await;
    let index = s
        .get("/v1/job/web/versions")
        .await
        .expect(StatusCode::OK)
        .index();
    let waiter = {
        let s = Arc::clone(&s);
        tokio::spawn(async move {
            let started = Instant::now();
            let reply = s
                .get(&format!("/v1/job/web/versions?index={index}&wait=5s"))
                .await;
            (reply, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.register(service_job("web", 2)).await;
    let (reply, elapsed) = waiter.await.expect("waiter");
    let reply = reply.expect(StatusCode::OK);
    assert!(reply.index() > index);
    assert_eq!(reply.json()["Versions"][0]["Version"], 1);
    assert!(
        elapsed < Duration::from_secs(4),
        "woke on the change, took {elapsed:?}"
    );

    let nodes = s.get("/v1/nodes").await.index();
    let waiter = {
        let s = Arc::clone(&s);
        tokio::spawn(async move { s.get(&format!("/v1/nodes?index={nodes}&wait=5s")).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let node = s.add_node("node-1").await;
    let reply = waiter.await.expect("waiter").expect(StatusCode::OK);
    assert!(reply.index() > nodes);
    assert_eq!(ids(&reply.json()), vec![node.id]);
}

#[tokio::test]
async fn blocking_query_returns_on_timeout_with_the_same_index() {
    let s = Scheduler::new().await;
    s.register(service_job("web", 1)).await;
    let index = s.get("/v1/job/web/versions").await.index();
    let started = Instant::now();
    let again = s
        .get(&format!("/v1/job/web/versions?index={index}&wait=200ms"))
        .await
        .expect(StatusCode::OK);
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(200), "waited {elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "waited {elapsed:?}");
    assert_eq!(again.index(), index);
    s.get("/v1/jobs?wait=forever&index=1")
        .await
        .expect(StatusCode::BAD_REQUEST);
    s.get("/v1/jobs?stale=maybe")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "stale");
}

// ---------------------------------------------------------------------------------------------
// Nodes and the client protocol

#[tokio::test]
async fn node_register_heartbeat_and_reads() {
    let s = Scheduler::new().await;
    let node = s.add_node("node-1").await;
    let reply = s
        .send(
            Method::PUT,
            &format!("/v1/internal/node/{}/heartbeat", node.id),
            Some(&node.secret),
            None,
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(reply.json()["HeartbeatTTL"], 10_000_000_000_u64);

    let list = s.get("/v1/nodes").await.expect(StatusCode::OK);
    assert!(list.index() > 0);
    let list = list.json();
    assert_eq!(ids(&list), vec![node.id.clone()]);
    let stub = &list[0];
    assert_eq!(stub["Address"], "127.0.0.1");
    assert_eq!(stub["Name"], "node-1");
    assert_eq!(stub["Status"], "ready");
    assert_eq!(stub["NodePool"], "default");
    assert_eq!(stub["Version"], "1.10.0");
    assert_eq!(stub["SchedulingEligibility"], "eligible");
    assert_eq!(stub["Drivers"]["raw_exec"]["Healthy"], true);
    assert!(
        !list.to_string().contains(&node.secret),
        "no secret in lists"
    );

    let full = s
        .get(&format!("/v1/node/{}", node.id))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(full["ID"], node.id.as_str());
    assert_eq!(full["SecretID"], "");
    assert_eq!(full["Attributes"]["kernel.name"], "linux");
    s.get(&format!("/v1/node/{}", uuid()))
        .await
        .expect_error(StatusCode::NOT_FOUND, "node not found");
    assert_eq!(
        ids(&s
            .get(&format!("/v1/nodes?prefix={}", &node.id[..4]))
            .await
            .json()),
        vec![node.id.clone()]
    );
    s.get("/v1/nodes?prefix=abc")
        .await
        .expect(StatusCode::BAD_REQUEST);
    let filtered = s
        .get("/v1/nodes?filter=Meta.rack%20%3D%3D%20%22r1%22")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(ids(&filtered), vec![node.id.clone()]);
    let allocs = s
        .get(&format!("/v1/node/{}/allocations", node.id))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(allocs, json!([]));
}

#[tokio::test]
async fn node_pools_are_builtins_plus_node_pools() {
    let s = Scheduler::new().await;
    let node = FakeNode {
        id: uuid(),
        secret: uuid(),
    };
    let mut body = node_body(&node, "gpu-1");
    body["Node"]["NodePool"] = json!("gpu");
    s.send(
        Method::PUT,
        "/v1/internal/node/register",
        Some(&node.secret),
        Some(body.to_string()),
    )
    .await
    .expect(StatusCode::OK);
    let pools = s.get("/v1/node/pools").await.expect(StatusCode::OK).json();
    let names: Vec<String> = pools
        .as_array()
        .map(|pools| {
            pools
                .iter()
                .filter_map(|pool| pool["Name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(names, vec!["all", "default", "gpu"]);
    let default = s
        .get("/v1/node/pool/default")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(default["Description"], "Default node pool.");
    s.get("/v1/node/pool/nope")
        .await
        .expect_error(StatusCode::NOT_FOUND, "node pool not found");
}

#[tokio::test]
async fn client_protocol_refuses_wrong_secrets_and_unknown_nodes() {
    let s = Scheduler::new().await;
    let node = s.add_node("node-1").await;
    let other = uuid();
    // Re-registering an existing node with another secret.
    let mut stolen = node_body(&node, "node-1");
    stolen["Node"]["SecretID"] = json!(other);
    s.send(
        Method::PUT,
        "/v1/internal/node/register",
        Some(&other),
        Some(stolen.to_string()),
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    s.send(
        Method::PUT,
        &format!("/v1/internal/node/{}/heartbeat", node.id),
        Some(&other),
        None,
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    s.send(
        Method::PUT,
        &format!("/v1/internal/node/{}/heartbeat", uuid()),
        Some(&other),
        None,
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "node not found");
    s.send(
        Method::GET,
        &format!("/v1/internal/node/{}/allocations", node.id),
        None,
        None,
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    let update = json!({"Allocs": [{"ID": uuid(), "NodeID": node.id, "ClientStatus": "running"}]});
    s.send(
        Method::PUT,
        "/v1/internal/allocations",
        Some(&other),
        Some(update.to_string()),
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    let mixed = json!({"Allocs": [
        {"ID": uuid(), "NodeID": node.id, "ClientStatus": "running"},
        {"ID": uuid(), "NodeID": uuid(), "ClientStatus": "running"},
    ]});
    s.send(
        Method::PUT,
        "/v1/internal/allocations",
        Some(&node.secret),
        Some(mixed.to_string()),
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    s.send(
        Method::PUT,
        "/v1/internal/node/register",
        Some(&other),
        Some("{".to_owned()),
    )
    .await
    .expect(StatusCode::BAD_REQUEST);
    s.send(
        Method::PUT,
        "/v1/internal/node/register",
        Some(&other),
        Some("{}".to_owned()),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "missing node");
}

#[tokio::test]
async fn client_pulls_its_allocations_and_reports_states_placed() {
    let s = Arc::new(Scheduler::new().await);
    let node = s.add_node("node-1").await;
    let path = format!("/v1/internal/node/{}/allocations", node.id);
    let empty = s
        .send(Method::GET, &path, Some(&node.secret), None)
        .await
        .expect(StatusCode::OK);
    let index = empty.index();
    assert_eq!(empty.json()["Allocs"], json!([]));

    let waiter = {
        let s = Arc::clone(&s);
        let node = node.clone();
        let path = format!("{path}?index={index}&wait=5s");
        tokio::spawn(async move { s.send(Method::GET, &path, Some(&node.secret), None).await })
    };
    s.register(service_job("web", 1)).await;
    let pulled = waiter.await.expect("waiter").expect(StatusCode::OK);
    let body = pulled.json();
    assert!(body["Index"].as_u64().unwrap_or(0) > index);
    let alloc = body["Allocs"][0].clone();
    assert_eq!(
        alloc["Job"]["ID"], "web",
        "the client gets the job with each allocation"
    );
    let alloc_id = alloc["ID"].as_str().unwrap_or("").to_owned();

    let update = json!({"Allocs": [{
        "ID": alloc_id,
        "NodeID": node.id,
        "ClientStatus": "running",
        "TaskStates": {"server": {"State": "running", "Events": [{"Type": "Started", "Time": 1}]}},
    }]});
    let reply = s
        .send(
            Method::PUT,
            "/v1/internal/allocations",
            Some(&node.secret),
            Some(update.to_string()),
        )
        .await
        .expect(StatusCode::OK);
    assert!(reply.json()["Index"].as_u64().unwrap_or(0) > 0);
    let alloc = s.get(&format!("/v1/allocation/{alloc_id}")).await.json();
    assert_eq!(alloc["ClientStatus"], "running");
    assert_eq!(alloc["TaskStates"]["server"]["State"], "running");
    let summary = s.get("/v1/job/web/summary").await.json();
    assert_eq!(summary["Summary"]["web"]["Running"], 1);
    let listed = s
        .get(&format!("/v1/node/{}/allocations", node.id))
        .await
        .json();
    assert_eq!(listed[0]["Job"]["ID"], "web");
}

#[tokio::test]
async fn client_pull_with_since_sends_only_newer_allocations_whole() {
    let s = Scheduler::new().await;
    let node = s.add_node("node-1").await;
    // The node's pull of its allocations, with `query` appended to the path.
    let pull = |query: String| {
        let path = format!("/v1/internal/node/{}/allocations{query}", node.id);
        let secret = node.secret.clone();
        let s = &s;
        async move { s.send(Method::GET, &path, Some(&secret), None).await }
    };
    s.register(service_job("web", 2)).await;
    s.wait_placed("web", 2).await;
    let full = pull(String::new()).await.expect(StatusCode::OK).json();
    assert_eq!(full["Allocs"].as_array().map_or(0, Vec::len), 2);
    assert!(full.get("Unchanged").is_none(), "no stubs without since");
    let first_max = full["Allocs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|alloc| alloc["AllocModifyIndex"].as_u64())
        .max()
        .unwrap_or(0);

    // Everything held: every allocation comes as a stub, in the full answer's order.
    let held = pull(format!("?since={first_max}"))
        .await
        .expect(StatusCode::OK);
    let body = held.json();
    assert_eq!(body["Allocs"], json!([]));
    assert_eq!(body["Index"], full["Index"]);
    let stubs: Vec<Value> = full["Allocs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|alloc| {
            json!({
                "ID": alloc["ID"],
                "AllocModifyIndex": alloc["AllocModifyIndex"],
                "DesiredStatus": alloc["DesiredStatus"],
            })
        })
        .collect();
    assert_eq!(body["Unchanged"], json!(stubs));

    // A newer allocation comes whole (with its job), the held ones as stubs.
    s.register(service_job("api", 1)).await;
    s.wait_placed("api", 1).await;
    let newer = pull(format!("?since={first_max}"))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(newer["Allocs"].as_array().map_or(0, Vec::len), 1);
    assert_eq!(newer["Allocs"][0]["Job"]["ID"], "api");
    assert_eq!(newer["Unchanged"], json!(stubs));
    let all = pull(String::new()).await.expect(StatusCode::OK).json();
    assert_eq!(all["Allocs"].as_array().map_or(0, Vec::len), 3);
    assert_eq!(newer["Index"], all["Index"]);

    pull("?since=x".to_owned())
        .await
        .expect(StatusCode::BAD_REQUEST);
}

fn fast_heartbeats() -> Config {
    Config {
        heartbeat_ttl: Duration::from_millis(200),
        heartbeat_grace: Duration::from_millis(200),
        ..Config::default()
    }
}

#[tokio::test]
async fn silent_node_is_marked_down_and_heartbeat_revives_it() {
    let s = Scheduler::with_config(fast_heartbeats()).await;
    let node = s.add_node("node-1").await;
    let path = format!("/v1/node/{}", node.id);
    let down = s.poll(&path, |node| node["Status"] == "down").await;
    assert_eq!(down["Status"], "down");
    let reply = s
        .send(
            Method::PUT,
            &format!("/v1/internal/node/{}/heartbeat", node.id),
            Some(&node.secret),
            None,
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(reply.json()["HeartbeatTTL"], 200_000_000_u64);
    assert_eq!(s.get(&path).await.json()["Status"], "ready");
}

#[tokio::test]
async fn silent_node_loses_its_allocations_placed() {
    let s = Scheduler::with_config(fast_heartbeats()).await;
    let node = s.add_node("node-1").await;
    let keep_alive = {
        let router = s.router.clone();
        let node = node.clone();
        tokio::spawn(async move {
            for _ in 0..100 {
                let path = format!("/v1/internal/node/{}/heartbeat", node.id);
                let request = testkit::request("PUT", &path)
                    .header("X-Nomad-Token", &node.secret)
                    .body(axum::body::Body::empty())
                    .expect("request");
                testkit::call(&router, request).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    s.register(service_job("web", 2)).await;
    let placed = s.wait_placed("web", 2).await;
    keep_alive.abort();
    s.poll(&format!("/v1/node/{}", node.id), |node| {
        node["Status"] == "down"
    })
    .await;
    for alloc in placed {
        let path = format!("/v1/allocation/{}", alloc["ID"].as_str().unwrap_or(""));
        let lost = s.poll(&path, |alloc| alloc["ClientStatus"] == "lost").await;
        assert_eq!(lost["DesiredStatus"], "stop");
    }
}

// ---------------------------------------------------------------------------------------------
// Agent and status

#[tokio::test]
async fn agent_and_status_endpoints() {
    let s = Scheduler::new().await;
    let leader = s
        .get("/v1/status/leader")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(leader, json!("127.0.0.1:4647"));
    let peers = s
        .get("/v1/status/peers")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(peers, json!(["127.0.0.1:4647"]));
    let me = s.get("/v1/agent/self").await.expect(StatusCode::OK).json();
    assert_eq!(me["config"]["Region"], "global");
    assert_eq!(me["config"]["Datacenter"], "dc1");
    assert!(me["member"]["Name"].is_string());
    assert_eq!(
        s.get("/v1/regions").await.expect(StatusCode::OK).json(),
        json!(["global"])
    );
    let health = s
        .get("/v1/agent/health")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(health["server"]["ok"], true);
}

#[tokio::test]
async fn python_nomad_namespace_injection_is_accepted_everywhere() {
    let s = Scheduler::new().await;
    s.register(service_job("web", 1)).await;
    for path in [
        "/v1/jobs?namespace=default",
        "/v1/job/web?namespace=default",
        "/v1/job/web/versions?namespace=default",
        "/v1/job/web/allocations?namespace=default&all=False",
        "/v1/allocations?namespace=default&resources=True&task_states=False&reverse=False",
        "/v1/nodes?namespace=default",
        "/v1/evaluations?namespace=default",
    ] {
        s.get(path).await.expect(StatusCode::OK);
    }
}
