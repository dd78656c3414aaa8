//! `nodesim`: a node simulator and placement-throughput benchmark for cairn's scheduler.
//!
//! Where it sits: `scripts/bench --suite scheduler` starts `cairn dev` (whose in-process client
//! is one real node) and runs this against its scheduler listener. It registers `--nodes`
//! simulated client nodes through the cairn-internal client protocol (`/v1/internal/node/*`),
//! keeps them alive with heartbeats at half their TTL, then registers `--jobs` service jobs
//! of `--count` allocations each and waits until every allocation is placed. Simulated nodes
//! run nothing: placements stay `pending`, which is what a placement benchmark measures.
//!
//! Several servers (`scripts/bench --suite cluster`): `--node-urls` spreads the simulated nodes
//! over several servers (node `i` registers and heartbeats through URL `i mod n`; a follower
//! forwards them to the leader) while jobs and the placement polls go to `--url`; `--run-id`
//! keeps the node and job IDs of successive runs against one cluster apart; `--sim-only`
//! constrains the jobs to the simulated nodes (a cluster's real agent runs nothing).
//!
//! `--hold FILE` waits, once the nodes are registered, until FILE exists before any job is
//! registered, so a profiler (callgrind) can be switched on for the measured phase alone.
//!
//! Output: one `RESULT ...` line on stdout (placements, seconds from the first job
//! registration to the last placement, placements/s, the registration phase alone); progress
//! on stderr. The last placement is the newest `ModifyTime` of the run's allocations (set when
//! the plan placing it is applied, on the server's clock: the same host's); the job list is polled every
//! 100 ms only to learn that all are placed, and what the poll saw is reported beside it
//! (`polled_seconds`, `polled_rate`).
//!
//! `--mode churn` simulates a day of short batch work instead: `--churn-jobs` batch jobs of one
//! allocation each, `--conns` at a time, each registered, waited for until placed (a blocking
//! query on its allocations) and reported `complete` by its node, as a client would. Every
//! `--gc-every` jobs it forces the server's garbage collection (`PUT /v1/system/gc`: the
//! thresholds are hours, the run minutes) and prints one `CHURN ...` line: jobs done, the
//! server's RSS (`--pid`, from `/proc`) and the store's size on disk (`--data-dir`, every file
//! under it) before and after the collection, and the jobs/s of the last stretch.
//!
//! Invariants: loopback targets only; the run is bounded by `--timeout`; every request checks
//! its status, and a failure ends the run with a non-zero exit.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use cairn_bench::target::Target;
use clap::Parser;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::time::Instant;

#[derive(Debug, Parser)]
#[command(name = "nodesim", version)]
struct Args {
    /// The scheduler's base URL (loopback), e.g. http://127.0.0.1:4646.
    #[arg(long)]
    url: String,
    /// ACL token (X-Nomad-Token) for job registration and reads.
    #[arg(long, default_value = "")]
    token: String,
    /// Comma-separated scheduler base URLs the nodes register and heartbeat through, node `i`
    /// through URL `i mod n` (default: `--url`).
    #[arg(long, value_delimiter = ',')]
    node_urls: Vec<String>,
    /// Distinguishes this run's node and job IDs from earlier runs against the same servers
    /// (0..=65535; jobs are `bench-<run>-<i>` when non-zero).
    #[arg(long, default_value_t = 0)]
    run_id: u16,
    /// Constrain the placement jobs to the simulated nodes (`sim-*`).
    #[arg(long)]
    sim_only: bool,
    #[arg(long, default_value_t = 5000)]
    nodes: usize,
    #[arg(long, default_value_t = 1000)]
    jobs: usize,
    /// Allocations per job.
    #[arg(long, default_value_t = 10)]
    count: usize,
    /// Keep-alive connections used for registrations (each keeps one request in flight).
    #[arg(long, default_value_t = 64)]
    conns: usize,
    /// Seconds before giving up.
    #[arg(long, default_value_t = 300.0)]
    timeout: f64,
    /// `placement` (the throughput run) or `churn` (short batch jobs, collected as they go).
    #[arg(long, default_value = "placement")]
    mode: String,
    /// churn: batch jobs to run.
    #[arg(long, default_value_t = 100_000)]
    churn_jobs: usize,
    /// churn: jobs between two forced collections (and reports).
    #[arg(long, default_value_t = 10_000)]
    gc_every: usize,
    /// churn: the server's process ID, for its RSS.
    #[arg(long)]
    pid: Option<u32>,
    /// churn: the server's data directory, for the store's size on disk.
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// Once the nodes are registered, wait until this file exists before the jobs (so a
    /// profiler can be switched on for the measured phase alone).
    #[arg(long)]
    hold: Option<std::path::PathBuf>,
}

/// A pool of keep-alive HTTP/1.1 connections to one target.
struct Pool {
    target: Target,
    host: HeaderValue,
    token: String,
    conns: Vec<Mutex<Option<SendRequest<Full<Bytes>>>>>,
}

impl Pool {
    /// A request with `token` as `X-Nomad-Token` (node calls authenticate with the node's
    /// SecretID).
    async fn request_as(
        &self,
        slot: usize,
        method: Method,
        path: &str,
        body: Option<&Value>,
        token: &str,
    ) -> Result<(u16, Bytes), String> {
        self.request_indexed(slot, method, path, body, token)
            .await
            .map(|(status, _, bytes)| (status, bytes))
    }

    /// As [`Pool::request_as`], with the answer's `X-Nomad-Index` (0 without one).
    async fn request_indexed(
        &self,
        slot: usize,
        method: Method,
        path: &str,
        body: Option<&Value>,
        token: &str,
    ) -> Result<(u16, u64, Bytes), String> {
        let mut guard = self.conns[slot % self.conns.len()].lock().await;
        if guard.as_ref().is_none_or(|sender| sender.is_closed()) {
            let stream = TcpStream::connect(self.target.addr)
                .await
                .map_err(|err| format!("connect: {err}"))?;
            stream.set_nodelay(true).map_err(|err| err.to_string())?;
            let (sender, connection) = http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|err| format!("handshake: {err}"))?;
            tokio::spawn(connection);
            *guard = Some(sender);
        }
        let Some(sender) = guard.as_mut() else {
            return Err("no connection".to_owned());
        };
        sender.ready().await.map_err(|err| err.to_string())?;
        let bytes = match body {
            Some(body) => Bytes::from(serde_json::to_vec(body).map_err(|err| err.to_string())?),
            None => Bytes::new(),
        };
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.host.clone())
            .header(CONTENT_TYPE, "application/json");
        if !token.is_empty() {
            request = request.header("x-nomad-token", token);
        }
        let request = request
            .body(Full::new(bytes))
            .map_err(|err| err.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|err| err.to_string())?;
        let status = response.status().as_u16();
        let index = response
            .headers()
            .get("x-nomad-index")
            .and_then(|value| value.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|err| err.to_string())?
            .to_bytes();
        Ok((status, index, body))
    }

    async fn expect_ok(
        &self,
        slot: usize,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        self.expect_ok_as(slot, method, path, body, &self.token)
            .await
    }

    async fn expect_ok_as(
        &self,
        slot: usize,
        method: Method,
        path: &str,
        body: Option<&Value>,
        token: &str,
    ) -> Result<Value, String> {
        let (status, bytes) = self
            .request_as(slot, method.clone(), path, body, token)
            .await?;
        if status != 200 {
            return Err(format!(
                "{method} {path}: {status} {}",
                String::from_utf8_lossy(&bytes)
            ));
        }
        serde_json::from_slice(&bytes).map_err(|err| format!("{method} {path}: {err}"))
    }
}

/// A simulated node's SecretID (a UUID derived from its ID).
fn secret_of(id: &str) -> String {
    format!("5ec2e7{}", &id[6..])
}

fn node_body(index: usize, run_id: u16) -> (String, Value) {
    let id = format!("{index:08x}-{run_id:04x}-4000-8000-{index:012x}");
    let node = json!({
        "Node": {
            "ID": id,
            "SecretID": secret_of(&id),
            "Name": format!("sim-{index}"),
            "Datacenter": "dc1",
            "NodePool": "default",
            "Status": "ready",
            "Attributes": {"kernel.name": "linux", "driver.raw_exec": "1", "unique.hostname": format!("sim-{index}")},
            "Drivers": {"raw_exec": {"Detected": true, "Healthy": true}},
            "NodeResources": {
                "Cpu": {"CpuShares": 8000, "TotalCpuCores": 4},
                "Memory": {"MemoryMB": 16384},
                "Disk": {"DiskMB": 100000}
            }
        }
    });
    (id, node)
}

/// Now, in nanoseconds since the Unix epoch (the unit of an allocation's `ModifyTime`).
fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// The newest `ModifyTime` (Unix nanoseconds) among the allocations of jobs named with
/// `prefix`, or `None` if there are none.
async fn last_modify_time(pool: &Pool, prefix: &str) -> Result<Option<u64>, String> {
    let allocs = pool
        .expect_ok(0, Method::GET, "/v1/allocations", None)
        .await?;
    Ok(allocs
        .as_array()
        .into_iter()
        .flatten()
        .filter(|alloc| {
            alloc["JobID"]
                .as_str()
                .is_some_and(|job| job.starts_with(prefix))
        })
        .filter_map(|alloc| alloc["ModifyTime"].as_u64())
        .max())
}

/// The placement jobs' ID prefix.
fn job_prefix(run_id: u16) -> String {
    if run_id == 0 {
        "bench-".to_owned()
    } else {
        format!("bench-{run_id}-")
    }
}

fn job_body(index: usize, count: usize, run_id: u16, sim_only: bool) -> Value {
    let id = format!("{}{index}", job_prefix(run_id));
    let constraints = if sim_only {
        json!([{"LTarget": "${attr.unique.hostname}", "RTarget": "^sim-", "Operand": "regexp"}])
    } else {
        Value::Null
    };
    json!({
        "Job": {
            "ID": id,
            "Name": id,
            "Type": "service",
            "Datacenters": ["dc1"],
            "Constraints": constraints,
            "TaskGroups": [{
                "Name": "app",
                "Count": count,
                "Tasks": [{
                    "Name": "app",
                    "Driver": "raw_exec",
                    "Config": {"command": "/bin/sleep", "args": ["3600"]},
                    "Resources": {"CPU": 100, "MemoryMB": 64}
                }]
            }]
        }
    })
}

/// A pool of `conns` connections to `url`, sending `token`.
fn pool_for(url: &str, token: &str, conns: usize) -> Result<Arc<Pool>, String> {
    let target = Target::parse(url).map_err(|err| err.to_string())?;
    let host = HeaderValue::from_str(&target.host).map_err(|err| err.to_string())?;
    Ok(Arc::new(Pool {
        target,
        host,
        token: token.to_owned(),
        conns: (0..conns.max(1)).map(|_| Mutex::new(None)).collect(),
    }))
}

async fn run(args: Args) -> Result<(), String> {
    let pool = pool_for(&args.url, &args.token, args.conns)?;
    let node_urls = if args.node_urls.is_empty() {
        vec![args.url.clone()]
    } else {
        args.node_urls.clone()
    };
    // Node registrations and heartbeats: one pool per server they go through.
    let node_pools = node_urls
        .iter()
        .map(|url| pool_for(url, "", args.conns))
        .collect::<Result<Vec<_>, _>>()?;
    let heartbeat_pools = node_urls
        .iter()
        .map(|url| pool_for(url, "", 4))
        .collect::<Result<Vec<_>, _>>()?;
    let run_id = args.run_id;
    let deadline = Instant::now() + Duration::from_secs_f64(args.timeout);

    // Nodes.
    let started = Instant::now();
    let mut ttl_ns: u64 = 10_000_000_000;
    let mut ids = Vec::with_capacity(args.nodes);
    for chunk in (0..args.nodes)
        .collect::<Vec<_>>()
        .chunks(args.conns.max(1))
    {
        let mut set = tokio::task::JoinSet::new();
        for (slot, index) in chunk.iter().copied().enumerate() {
            let pool = Arc::clone(&node_pools[index % node_pools.len()]);
            set.spawn(async move {
                let (id, body) = node_body(index, run_id);
                let secret = secret_of(&id);
                let answer = pool
                    .expect_ok_as(
                        slot,
                        Method::PUT,
                        "/v1/internal/node/register",
                        Some(&body),
                        &secret,
                    )
                    .await?;
                Ok::<_, String>((
                    index,
                    id,
                    answer.get("HeartbeatTTL").and_then(Value::as_u64),
                ))
            });
        }
        while let Some(joined) = set.join_next().await {
            let (index, id, ttl) = joined.map_err(|err| err.to_string())??;
            if let Some(ttl) = ttl {
                ttl_ns = ttl_ns.min(ttl.max(1_000_000_000));
            }
            ids.push((index, id));
        }
    }
    eprintln!(
        "nodesim: {} nodes registered in {:.2} s",
        ids.len(),
        started.elapsed().as_secs_f64()
    );

    // Heartbeats, at half the TTL, on their own connections.
    let stop = Arc::new(AtomicBool::new(false));
    let heartbeats = {
        let stop = Arc::clone(&stop);
        let ids = ids.clone();
        tokio::spawn(async move {
            let period = Duration::from_nanos(ttl_ns / 2);
            while !stop.load(Ordering::Relaxed) {
                let round = Instant::now();
                for (i, (index, id)) in ids.iter().enumerate() {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let path = format!("/v1/internal/node/{id}/heartbeat");
                    let secret = secret_of(id);
                    if let Err(err) = heartbeat_pools[index % heartbeat_pools.len()]
                        .request_as(i, Method::PUT, &path, None, &secret)
                        .await
                    {
                        eprintln!("nodesim: heartbeat: {err}");
                    }
                }
                tokio::time::sleep_until(round + period).await;
            }
        })
    };

    if let Some(hold) = &args.hold {
        while !hold.exists() {
            if Instant::now() > deadline {
                return Err(format!("timed out waiting for {}", hold.display()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    if args.mode == "churn" {
        let node_ids: Vec<String> = ids.iter().map(|(_, id)| id.clone()).collect();
        let result = churn(&args, &pool, &node_ids, deadline).await;
        stop.store(true, Ordering::Relaxed);
        heartbeats.abort();
        return result;
    }

    // Jobs: `conns` registrations in flight at any moment (a queue, not lock-step chunks).
    let started = Instant::now();
    let started_wall = unix_nanos();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut set = tokio::task::JoinSet::new();
    for slot in 0..args.conns.max(1) {
        let pool = Arc::clone(&pool);
        let next = Arc::clone(&next);
        let (jobs, count, sim_only) = (args.jobs, args.count, args.sim_only);
        set.spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= jobs {
                    return Ok::<_, String>(());
                }
                let body = job_body(index, count, run_id, sim_only);
                pool.expect_ok(slot, Method::PUT, "/v1/jobs", Some(&body))
                    .await?;
            }
        });
    }
    while let Some(joined) = set.join_next().await {
        joined.map_err(|err| err.to_string())??;
    }
    let registered = started.elapsed().as_secs_f64();
    eprintln!(
        "nodesim: {} jobs registered in {registered:.2} s",
        args.jobs
    );

    // Wait for every placement.
    let want = args.jobs * args.count;
    let placed = loop {
        let jobs = pool
            .expect_ok(
                0,
                Method::GET,
                &format!("/v1/jobs?prefix={}", job_prefix(run_id)),
                None,
            )
            .await?;
        let placed: u64 = jobs
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|job| job.pointer("/JobSummary/Summary/app"))
            .map(|summary| {
                ["Starting", "Running", "Complete", "Failed", "Lost"]
                    .iter()
                    .filter_map(|key| summary.get(*key).and_then(Value::as_u64))
                    .sum::<u64>()
            })
            .sum();
        if placed as usize >= want {
            break placed;
        }
        if Instant::now() > deadline {
            stop.store(true, Ordering::Relaxed);
            return Err(format!("timed out: {placed} of {want} placed"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let polled_seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    heartbeats.abort();
    // The poll above sees the last placement up to one interval late (100 ms of a ~0.5 s run):
    // the run ends at the newest of this run's allocations' ModifyTime (set when the state
    // writer applied the plan that placed it, just before that batch's commit; the server's
    // clock, the same host's), and never later than the poll that saw it.
    let last_placed = last_modify_time(&pool, &job_prefix(run_id)).await?;
    let seconds = last_placed
        .map(|at| at.saturating_sub(started_wall) as f64 / 1e9)
        .filter(|seconds| *seconds > 0.0)
        .map_or(polled_seconds, |seconds| seconds.min(polled_seconds));
    let line = format!(
        "RESULT scenario=placement nodes={} jobs={} count={} placements={placed} seconds={seconds:.3} rate={:.0} register_seconds={registered:.3} polled_seconds={polled_seconds:.3} polled_rate={:.0}",
        args.nodes,
        args.jobs,
        args.count,
        placed as f64 / seconds,
        placed as f64 / polled_seconds
    );
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    Ok(())
}

fn batch_job_body(index: usize) -> Value {
    json!({
        "Job": {
            "ID": format!("churn-{index}"),
            "Name": format!("churn-{index}"),
            "Type": "batch",
            "Datacenters": ["dc1"],
            // Simulated nodes only (cairn dev's own client would run the task for real).
            "Constraints": [{
                "LTarget": "${attr.unique.hostname}",
                "RTarget": "^sim-",
                "Operand": "regexp"
            }],
            "TaskGroups": [{
                "Name": "work",
                "Count": 1,
                "Tasks": [{
                    "Name": "work",
                    "Driver": "raw_exec",
                    "Config": {"command": "/bin/true"},
                    "Resources": {"CPU": 20, "MemoryMB": 16}
                }]
            }]
        }
    })
}

/// VmRSS of a process, in kB (0 if unreadable).
fn rss_kb(pid: Option<u32>) -> u64 {
    let Some(pid) = pid else { return 0 };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Bytes of every file under `dir` (0 without one).
fn dir_bytes(dir: Option<&std::path::Path>) -> u64 {
    fn walk(dir: &std::path::Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .map(|entry| match entry.metadata() {
                Ok(meta) if meta.is_dir() => walk(&entry.path()),
                Ok(meta) => meta.len(),
                Err(_) => 0,
            })
            .sum()
    }
    dir.map_or(0, walk)
}

/// One churn job: registered, placed, reported complete by its node.
async fn churn_one(pool: &Pool, slot: usize, index: usize, nodes: &[String]) -> Result<(), String> {
    let job_id = format!("churn-{index}");
    let registered = pool
        .expect_ok(slot, Method::PUT, "/v1/jobs", Some(&batch_job_body(index)))
        .await?;
    // Blocking queries on the job's allocations from the registration's index until placed.
    let mut wait_index = registered["EvalCreateIndex"].as_u64().unwrap_or(0);
    let alloc = loop {
        let path = format!("/v1/job/{job_id}/allocations?index={wait_index}&wait=5s");
        let (status, index, body) = pool
            .request_indexed(slot, Method::GET, &path, None, &pool.token)
            .await?;
        if status != 200 {
            return Err(format!("GET {path}: {status}"));
        }
        let allocs: Value = serde_json::from_slice(&body).map_err(|err| err.to_string())?;
        if let Some(alloc) = allocs.as_array().and_then(|list| list.first()) {
            break alloc.clone();
        }
        if index <= wait_index {
            // An index that does not move would spin: wait a little instead.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        wait_index = wait_index.max(index);
    };
    let alloc_id = alloc["ID"].as_str().unwrap_or_default().to_owned();
    let node_id = alloc["NodeID"].as_str().unwrap_or_default().to_owned();
    if !nodes.contains(&node_id) {
        return Err(format!(
            "{job_id} placed on {node_id}, not a simulated node"
        ));
    }
    let update = json!({"Allocs": [{
        "ID": alloc_id,
        "NodeID": node_id,
        "ClientStatus": "complete",
        "TaskStates": {"work": {"State": "dead", "Failed": false}}
    }]});
    pool.expect_ok_as(
        slot,
        Method::PUT,
        "/v1/internal/allocations",
        Some(&update),
        &secret_of(&node_id),
    )
    .await?;
    Ok(())
}

async fn churn(
    args: &Args,
    pool: &Arc<Pool>,
    nodes: &[String],
    deadline: Instant,
) -> Result<(), String> {
    let nodes: Arc<Vec<String>> = Arc::new(nodes.to_vec());
    let data_dir = args.data_dir.as_deref();
    let mut done = 0;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "CHURN jobs=0 rss_kb={} store_bytes={}",
        rss_kb(args.pid),
        dir_bytes(data_dir)
    );
    drop(out);
    while done < args.churn_jobs {
        let stretch = args.gc_every.max(1).min(args.churn_jobs - done);
        let started = Instant::now();
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(done));
        let end = done + stretch;
        let mut set = tokio::task::JoinSet::new();
        for slot in 0..args.conns.max(1) {
            let pool = Arc::clone(pool);
            let next = Arc::clone(&next);
            let nodes = Arc::clone(&nodes);
            set.spawn(async move {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= end {
                        return Ok::<_, String>(());
                    }
                    churn_one(&pool, slot, index, &nodes).await?;
                }
            });
        }
        while let Some(joined) = set.join_next().await {
            joined.map_err(|err| err.to_string())??;
        }
        let seconds = started.elapsed().as_secs_f64();
        done = end;
        let (rss_before, store_before) = (rss_kb(args.pid), dir_bytes(data_dir));
        let gc_started = Instant::now();
        let (status, body) = pool
            .request_as(0, Method::PUT, "/v1/system/gc", None, &pool.token)
            .await?;
        if status != 200 {
            return Err(format!(
                "PUT /v1/system/gc: {status} {}",
                String::from_utf8_lossy(&body)
            ));
        }
        let gc_seconds = gc_started.elapsed().as_secs_f64();
        let jobs_left = pool
            .expect_ok(0, Method::GET, "/v1/jobs?prefix=churn-", None)
            .await?
            .as_array()
            .map_or(0, Vec::len);
        let line = format!(
            "CHURN jobs={done} jobs_per_s={:.0} rss_kb_before_gc={rss_before} store_bytes_before_gc={store_before} gc_seconds={gc_seconds:.3} rss_kb={} store_bytes={} jobs_listed={jobs_left}",
            stretch as f64 / seconds,
            rss_kb(args.pid),
            dir_bytes(data_dir)
        );
        eprintln!("nodesim: {line}");
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        if Instant::now() > deadline {
            return Err(format!("timed out after {done} churn jobs"));
        }
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("nodesim: {err}");
            ExitCode::FAILURE
        }
    }
}
