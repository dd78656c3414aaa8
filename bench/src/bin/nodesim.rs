//! `nodesim`: a node simulator and placement-throughput benchmark for cairn's scheduler.
//!
//! Where it sits: `scripts/bench --suite scheduler` starts `cairn dev` (whose in-process client
//! is one real node) and runs this against its scheduler listener. It registers `--nodes`
//! simulated client nodes through the cairn-internal client protocol (`/v1/internal/node/*`),
//! keeps them alive with heartbeats at half their TTL, then registers `--jobs` service jobs
//! of `--count` allocations each and waits until every allocation is placed. Simulated nodes
//! run nothing: placements stay `pending`, which is what a placement benchmark measures.
//!
//! Output: one `RESULT ...` line on stdout (placements, seconds from the first job
//! registration to the last placement, placements/s, the registration phase alone); progress
//! on stderr.
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
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|err| err.to_string())?
            .to_bytes();
        Ok((status, body))
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

fn node_body(index: usize) -> (String, Value) {
    let id = format!("{:08x}-0000-4000-8000-{:012x}", index, index);
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

fn job_body(index: usize, count: usize) -> Value {
    json!({
        "Job": {
            "ID": format!("bench-{index}"),
            "Name": format!("bench-{index}"),
            "Type": "service",
            "Datacenters": ["dc1"],
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

async fn run(args: Args) -> Result<(), String> {
    let target = Target::parse(&args.url).map_err(|err| err.to_string())?;
    let host = HeaderValue::from_str(&target.host).map_err(|err| err.to_string())?;
    let pool = Arc::new(Pool {
        target,
        host,
        token: args.token.clone(),
        conns: (0..args.conns.max(1)).map(|_| Mutex::new(None)).collect(),
    });
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
            let pool = Arc::clone(&pool);
            set.spawn(async move {
                let (id, body) = node_body(index);
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
                Ok::<_, String>((id, answer.get("HeartbeatTTL").and_then(Value::as_u64)))
            });
        }
        while let Some(joined) = set.join_next().await {
            let (id, ttl) = joined.map_err(|err| err.to_string())??;
            if let Some(ttl) = ttl {
                ttl_ns = ttl_ns.min(ttl.max(1_000_000_000));
            }
            ids.push(id);
        }
    }
    eprintln!(
        "nodesim: {} nodes registered in {:.2} s",
        ids.len(),
        started.elapsed().as_secs_f64()
    );

    // Heartbeats, at half the TTL, on their own connections.
    let stop = Arc::new(AtomicBool::new(false));
    let heartbeat_pool = Arc::new(Pool {
        target: Target::parse(&args.url).map_err(|err| err.to_string())?,
        host: pool.host.clone(),
        token: String::new(),
        conns: (0..4).map(|_| Mutex::new(None)).collect(),
    });
    let heartbeats = {
        let stop = Arc::clone(&stop);
        let ids = ids.clone();
        tokio::spawn(async move {
            let period = Duration::from_nanos(ttl_ns / 2);
            while !stop.load(Ordering::Relaxed) {
                let round = Instant::now();
                for (i, id) in ids.iter().enumerate() {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let path = format!("/v1/internal/node/{id}/heartbeat");
                    let secret = secret_of(id);
                    if let Err(err) = heartbeat_pool
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

    // Jobs: `conns` registrations in flight at any moment (a queue, not lock-step chunks).
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut set = tokio::task::JoinSet::new();
    for slot in 0..args.conns.max(1) {
        let pool = Arc::clone(&pool);
        let next = Arc::clone(&next);
        let (jobs, count) = (args.jobs, args.count);
        set.spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= jobs {
                    return Ok::<_, String>(());
                }
                pool.expect_ok(slot, Method::PUT, "/v1/jobs", Some(&job_body(index, count)))
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
            .expect_ok(0, Method::GET, "/v1/jobs?prefix=bench-", None)
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
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    heartbeats.abort();
    let line = format!(
        "RESULT scenario=placement nodes={} jobs={} count={} placements={placed} seconds={seconds:.3} rate={:.0} register_seconds={registered:.3}",
        args.nodes,
        args.jobs,
        args.count,
        placed as f64 / seconds
    );
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
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
