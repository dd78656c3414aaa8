//! `scale_bench`: what cairn costs as its data grows (issue 19 point 6).
//!
//! Where it sits: `scripts/bench --suite scale` runs it with the release `cairn` binary. For
//! each suite (sessions, kv, leases, allocs, members) and each point (1×, 10×, 100× the suite's
//! base size) it starts a fresh `cairn dev` on an empty data dir, loads the items over many
//! keep-alive connections, measures the suite's typical requests (p50/p99 from a closed loop
//! over `--probe-conns` connections picking random items), the server's RSS, then stops it
//! (SIGTERM), measures the data dir on disk, restarts `cairn dev` on the loaded data dir and
//! times spawn → `ready` (for leases also spawn → the expiry loop holding every lease, read
//! from `cairn_secrets_leases` in `sys/metrics`). It prints one `RESULT` line per point, writes
//! a Markdown section (`--markdown`) with a table and the growth of every measure per suite,
//! and a PNG per suite (`--plot-dir`, `scale-<suite>.png`).
//!
//! Growth is the log-log slope between the two largest points (value ∝ items^slope; fixed
//! costs weigh least there), shown with the slope over the whole range: below 0.15 is "flat",
//! up to 0.85 "sublinear", up to 1.2 "linear", above that "worse than linear".
//!
//! Invariants: every server it starts listens on 127.0.0.1 port 0 and is stopped (SIGTERM,
//! then SIGKILL after 60 s) before the next starts or when the run fails; a point's data dir
//! is removed once measured; every load request checks its status and a failure ends the run;
//! a probe request counts only if it began after the warm-up, ended inside the window and
//! answered the expected status, anything else inside the window is an error.

mod font;
mod plot;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::future::Future;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_bench::histogram::Histogram;
use cairn_bench::target::Target;
use clap::Parser;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

#[derive(Debug, Parser)]
#[command(name = "scale_bench", version)]
struct Args {
    /// The cairn binary (a release build).
    #[arg(long)]
    cairn: PathBuf,
    /// Where data dirs go (a real disk, not tmpfs).
    #[arg(long)]
    work_dir: PathBuf,
    /// Suites, comma-separated: sessions, kv, leases, allocs, members.
    #[arg(long, default_value = "sessions,kv,leases,allocs,members")]
    suites: String,
    /// Multiples of each suite's base size, comma-separated.
    #[arg(long, default_value = "1,10,100")]
    points: String,
    /// Connections that load items, one request in flight each.
    #[arg(long, default_value_t = 64)]
    conns: usize,
    /// Connections of the latency probes.
    #[arg(long, default_value_t = 8)]
    probe_conns: usize,
    /// Probe warm-up, seconds.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Probe window, seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// The root token `cairn dev` is started with.
    #[arg(long, default_value = "scale-bench-root-token")]
    token: String,
    /// Write `scale-<suite>.png` here.
    #[arg(long)]
    plot_dir: Option<PathBuf>,
    /// Write the Markdown tables here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Divide every base size by this (a smoke test of the tool itself, e.g. 100).
    #[arg(long, default_value_t = 1)]
    divide: usize,
    /// Measure nothing: read the `RESULT` lines of earlier runs from this file and write the
    /// Markdown and the PNGs of the suites they hold (in `--suites` order).
    #[arg(long)]
    from_results: Option<PathBuf>,
}

// ------------------------------------------------------------------ the server

/// A running `cairn dev`.
struct Server {
    child: Child,
    pid: u32,
    urls: HashMap<String, String>,
    /// Spawn → the `ready` line.
    ready: Duration,
    spawned: Instant,
}

impl Server {
    fn start(args: &Args, data: &Path, log: &Path) -> Result<Server, String> {
        let stderr =
            std::fs::File::create(log).map_err(|err| format!("{}: {err}", log.display()))?;
        let spawned = Instant::now();
        let mut child = Command::new(&args.cairn)
            .arg("dev")
            .arg("--data-dir")
            .arg(data)
            .args(["--root-token", &args.token])
            .args(["--secrets-addr", "127.0.0.1:0"])
            .args(["--registry-addr", "127.0.0.1:0"])
            .args(["--scheduler-addr", "127.0.0.1:0"])
            .args(["--platform-addr", "127.0.0.1:0"])
            .args(["--platform-rate-limiting", "false"])
            .args(["--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|err| format!("spawn {}: {err}", args.cairn.display()))?;
        let pid = child.id();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            // Reads to the end so the pipe never fills; lines after `ready` are dropped.
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let mut urls = HashMap::new();
        let deadline = spawned + Duration::from_secs(600);
        let mut server = Server {
            child,
            pid,
            urls: HashMap::new(),
            ready: Duration::ZERO,
            spawned,
        };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let mut words = line.split_whitespace();
                    if let (Some(name), Some(url)) = (words.next(), words.next())
                        && ["secrets", "registry", "scheduler", "platform"].contains(&name)
                        && url.starts_with("http://")
                    {
                        urls.insert(name.to_owned(), url.to_owned());
                    }
                    if line.trim() == "ready" {
                        server.ready = spawned.elapsed();
                        break;
                    }
                }
                Err(_) => {
                    server.stop();
                    let log = std::fs::read_to_string(log).unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(20).collect();
                    return Err(format!(
                        "cairn dev exited or was not ready within 600 s: {}",
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    ));
                }
            }
        }
        for name in ["secrets", "registry", "scheduler", "platform"] {
            if !urls.contains_key(name) {
                server.stop();
                return Err(format!("cairn dev printed no {name} address"));
            }
        }
        server.urls = urls;
        Ok(server)
    }

    fn url(&self, service: &str) -> &str {
        self.urls.get(service).map_or("", String::as_str)
    }

    /// Resident set and its peak, bytes.
    fn memory(&self) -> (u64, u64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|kb| kb.parse::<u64>().ok())
                .map_or(0, |kb| kb * 1024)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// SIGTERM, then SIGKILL after 60 s.
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            if Instant::now() > deadline {
                eprintln!(
                    "scale_bench: cairn pid {} ignored SIGTERM for 60 s, killing",
                    self.pid
                );
                let _ = self.child.kill();
                let _ = self.child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// Bytes the files under `dir` occupy on disk (allocated blocks).
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.blocks() * 512;
            }
        }
    }
    total
}

// ------------------------------------------------------------------ HTTP

/// Where requests go and what they carry.
struct Endpoint {
    target: Target,
    host: HeaderValue,
    auth: Option<(HeaderName, HeaderValue)>,
    content_type: HeaderValue,
}

impl Endpoint {
    fn new(
        url: &str,
        auth: Option<(&'static str, String)>,
        content_type: &'static str,
    ) -> Result<Arc<Endpoint>, String> {
        let target = Target::parse(url).map_err(|err| err.to_string())?;
        let host = HeaderValue::from_str(&target.host).map_err(|err| err.to_string())?;
        let auth = match auth {
            Some((name, value)) => Some((
                HeaderName::from_static(name),
                HeaderValue::from_str(&value).map_err(|err| err.to_string())?,
            )),
            None => None,
        };
        Ok(Arc::new(Endpoint {
            target,
            host,
            auth,
            content_type: HeaderValue::from_static(content_type),
        }))
    }
}

/// One keep-alive HTTP/1.1 connection; reopened if the server closed it.
struct Conn {
    endpoint: Arc<Endpoint>,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Conn {
    fn new(endpoint: &Arc<Endpoint>) -> Conn {
        Conn {
            endpoint: Arc::clone(endpoint),
            sender: None,
        }
    }

    /// `method path` with `body` (JSON text, or empty); `token` replaces the endpoint's
    /// credential header value. The status and the body.
    async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
        token: Option<&str>,
    ) -> Result<(u16, Bytes), String> {
        if self.sender.as_ref().is_none_or(SendRequest::is_closed) {
            let stream = TcpStream::connect(self.endpoint.target.addr)
                .await
                .map_err(|err| format!("connect {}: {err}", self.endpoint.target.addr))?;
            stream.set_nodelay(true).map_err(|err| err.to_string())?;
            let (sender, connection) = http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|err| err.to_string())?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            self.sender = Some(sender);
        }
        let sender = self.sender.as_mut().ok_or("no connection")?;
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = path.parse().map_err(|err| format!("{path}: {err}"))?;
        let headers = request.headers_mut();
        headers.insert(HOST, self.endpoint.host.clone());
        headers.insert(CONTENT_TYPE, self.endpoint.content_type.clone());
        if let Some((name, value)) = &self.endpoint.auth {
            let value = match token {
                Some(t) => HeaderValue::from_str(t).map_err(|err| err.to_string())?,
                None => value.clone(),
            };
            headers.insert(name.clone(), value);
        }
        sender.ready().await.map_err(|err| err.to_string())?;
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

    /// A setup request that must answer one of `ok`; its JSON (null if none).
    async fn expect(
        &mut self,
        method: Method,
        path: &str,
        body: &Value,
        ok: &[u16],
    ) -> Result<Value, String> {
        let bytes = if body.is_null() {
            Bytes::new()
        } else {
            Bytes::from(body.to_string())
        };
        let (status, answer) = self.send(method.clone(), path, bytes, None).await?;
        if !ok.contains(&status) {
            return Err(format!(
                "{method} {path}: {status} {}",
                String::from_utf8_lossy(&answer)
            ));
        }
        Ok(serde_json::from_slice(&answer).unwrap_or(Value::Null))
    }
}

/// Runs `op(conn, i)` for every `i` in `0..total` over `conns` connections, each with one
/// request in flight; collects what the operations return. Progress on stderr.
async fn fill<F, Fut>(
    endpoint: &Arc<Endpoint>,
    conns: usize,
    total: usize,
    what: &str,
    op: F,
) -> Result<Vec<String>, String>
where
    F: Fn(Conn, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = (Conn, Result<Option<String>, String>)> + Send + 'static,
{
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..conns.max(1) {
        let (op, next, done, failed) = (
            op.clone(),
            Arc::clone(&next),
            Arc::clone(&done),
            Arc::clone(&failed),
        );
        let mut conn = Conn::new(endpoint);
        let what = what.to_owned();
        set.spawn(async move {
            let mut out = Vec::new();
            loop {
                if failed.load(Ordering::Relaxed) {
                    return Ok(out);
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return Ok(out);
                }
                let (back, result) = op(conn, i).await;
                conn = back;
                match result {
                    Ok(Some(s)) => out.push(s),
                    Ok(None) => {}
                    Err(err) => {
                        failed.store(true, Ordering::Relaxed);
                        return Err(format!("{what} {i}: {err}"));
                    }
                }
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if total >= 10 && d % (total / 10) == 0 {
                    eprintln!(
                        "scale_bench:   {what}: {d}/{total} in {:.1} s",
                        started.elapsed().as_secs_f64()
                    );
                }
            }
        });
    }
    let mut all = Vec::with_capacity(total);
    let mut first_err = None;
    while let Some(joined) = set.join_next().await {
        match joined.map_err(|err| err.to_string()).and_then(|r| r) {
            Ok(out) => all.extend(out),
            Err(err) => {
                first_err.get_or_insert(err);
            }
        }
    }
    match first_err {
        Some(err) => Err(err),
        None => Ok(all),
    }
}

/// A probe's outcome.
#[derive(Debug, Clone, Default)]
struct ProbeResult {
    name: String,
    p50_us: u64,
    p99_us: u64,
    rps: f64,
    errors: u64,
}

/// A closed loop of `op(conn, random)` over `probe_conns` connections: warm-up, then the
/// measured window. `op` answers whether the request succeeded.
async fn probe<F, Fut>(
    args: &Args,
    endpoint: &Arc<Endpoint>,
    name: &str,
    op: F,
) -> Result<ProbeResult, String>
where
    F: Fn(Conn, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = (Conn, bool)> + Send + 'static,
{
    let start = Instant::now() + Duration::from_secs_f64(args.warmup);
    let end = start + Duration::from_secs_f64(args.duration);
    let mut set = tokio::task::JoinSet::new();
    for task in 0..args.probe_conns.max(1) {
        let op = op.clone();
        let mut conn = Conn::new(endpoint);
        set.spawn(async move {
            let mut hist = Histogram::new();
            let mut errors = 0u64;
            // xorshift64*, seeded per connection: deterministic and cheap.
            let mut state =
                0x9E37_79B9_7F4A_7C15u64 ^ (task as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            while Instant::now() < end {
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                let r = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
                let began = Instant::now();
                let (back, ok) = op(conn, r).await;
                conn = back;
                let now = Instant::now();
                if began >= start && now <= end {
                    if ok {
                        hist.record((now - began).as_micros() as u64);
                    } else {
                        errors += 1;
                    }
                }
            }
            (hist, errors)
        });
    }
    let mut hist = Histogram::new();
    let mut errors = 0;
    while let Some(joined) = set.join_next().await {
        let (h, e) = joined.map_err(|err| err.to_string())?;
        hist.merge(&h);
        errors += e;
    }
    Ok(ProbeResult {
        name: name.to_owned(),
        p50_us: hist.quantile(0.50),
        p99_us: hist.quantile(0.99),
        rps: hist.count() as f64 / args.duration,
        errors,
    })
}

fn pick(items: &[String], r: u64) -> &str {
    if items.is_empty() {
        ""
    } else {
        &items[(r % items.len() as u64) as usize]
    }
}

// ------------------------------------------------------------------ suites

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Suite {
    Sessions,
    Kv,
    Leases,
    Allocs,
    Members,
}

impl Suite {
    fn parse(s: &str) -> Result<Suite, String> {
        Ok(match s {
            "sessions" => Suite::Sessions,
            "kv" => Suite::Kv,
            "leases" => Suite::Leases,
            "allocs" => Suite::Allocs,
            "members" => Suite::Members,
            other => {
                return Err(format!(
                    "unknown suite {other:?} (sessions, kv, leases, allocs, members)"
                ));
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Suite::Sessions => "sessions",
            Suite::Kv => "kv",
            Suite::Leases => "leases",
            Suite::Allocs => "allocs",
            Suite::Members => "members",
        }
    }

    /// The names of the suite's two probes, as `probes` measures them.
    fn probe_names(self) -> [&'static str; 2] {
        match self {
            Suite::Sessions => ["renew", "info"],
            Suite::Kv => ["get", "put"],
            Suite::Leases => ["lookup", "issue+revoke"],
            Suite::Allocs => ["job allocs", "node allocs"],
            Suite::Members => ["first page", "middle page"],
        }
    }

    /// Items at 1×.
    fn base(self) -> usize {
        match self {
            Suite::Kv => 10_000,
            _ => 1_000,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Suite::Sessions => {
                "registry sessions (`PUT /v1/session/create`, TTL 3600s, behavior release); probes: `PUT /v1/session/renew/<id>` and `GET /v1/session/info/<id>` of a random session"
            }
            Suite::Kv => {
                "registry KV keys (`PUT /v1/kv/scale/<n>`, 64 B values; cairn's registry has no `/v1/txn`, so one key per request); probes: `GET` and `PUT` of a random key"
            }
            Suite::Leases => {
                "secrets leases (`POST <ssh mount>/creds/otp`, one lease each, default TTL 768h); probes: `PUT /v1/sys/leases/lookup` of a random lease, and issue + revoke (`creds/otp` then `sys/leases/revoke`); after restart also spawn → every lease back on the expiry loop's timers (`cairn_secrets_leases` in `sys/metrics`)"
            }
            Suite::Allocs => {
                "scheduler allocations (service jobs of 10 allocations, 100 MHz / 64 MB each, constrained to simulated nodes: one node per 20 allocations, registered through the client protocol and heartbeating; the count is reached when every allocation is placed); probes: `GET /v1/job/<job>/allocations` and `GET /v1/node/<node>/allocations` of a random job and node"
            }
            Suite::Members => {
                "platform organization memberships (invitations `POST /api/v2/organizations/scale/organization-memberships`, all in one organization); probes: `GET` of the first page of 20 memberships, and of the middle page"
            }
        }
    }
}

/// What a suite loaded, for its probes.
#[derive(Default)]
struct Loaded {
    ids: Vec<String>,
    others: Vec<String>,
    heartbeats: Option<tokio::task::JoinHandle<()>>,
}

/// One measured point.
#[derive(Debug, Clone, Default)]
struct Point {
    items: usize,
    load_s: f64,
    rss: u64,
    hwm: u64,
    store: u64,
    probes: Vec<ProbeResult>,
    ready_ms: f64,
    /// Leases: spawn → every lease on the expiry loop's timers.
    loaded_ms: Option<f64>,
    rss_restart: u64,
}

async fn load(args: &Args, suite: Suite, server: &Server, n: usize) -> Result<Loaded, String> {
    let conns = args.conns;
    match suite {
        Suite::Sessions => {
            let ep = Endpoint::new(
                server.url("registry"),
                Some(("x-consul-token", args.token.clone())),
                "application/json",
            )?;
            let ids = fill(&ep, conns, n, "sessions", |mut conn, i| async move {
                let body =
                    json!({"Name": format!("scale-{i}"), "TTL": "3600s", "Behavior": "release"});
                let r = conn
                    .expect(Method::PUT, "/v1/session/create", &body, &[200])
                    .await;
                let r = r.and_then(|v| {
                    v.get("ID")
                        .and_then(Value::as_str)
                        .map(|s| Some(s.to_owned()))
                        .ok_or_else(|| format!("no ID in {v}"))
                });
                (conn, r)
            })
            .await?;
            Ok(Loaded {
                ids,
                ..Loaded::default()
            })
        }
        Suite::Kv => {
            let ep = Endpoint::new(
                server.url("registry"),
                Some(("x-consul-token", args.token.clone())),
                "application/octet-stream",
            )?;
            fill(&ep, conns, n, "kv keys", |mut conn, i| async move {
                let value = Bytes::from(format!("{i:064}"));
                let r = match conn
                    .send(Method::PUT, &format!("/v1/kv/scale/{i:08}"), value, None)
                    .await
                {
                    Ok((200, body)) if body.as_ref() == b"true" => Ok(None),
                    Ok((status, body)) => {
                        Err(format!("{status} {}", String::from_utf8_lossy(&body)))
                    }
                    Err(err) => Err(err),
                };
                (conn, r)
            })
            .await?;
            Ok(Loaded {
                ids: (0..n).map(|i| format!("/v1/kv/scale/{i:08}")).collect(),
                ..Loaded::default()
            })
        }
        Suite::Leases => {
            let ep = Endpoint::new(
                server.url("secrets"),
                Some(("x-vault-token", args.token.clone())),
                "application/json",
            )?;
            let mut conn = Conn::new(&ep);
            conn.expect(
                Method::POST,
                "/v1/sys/mounts/scale-ssh",
                &json!({"type": "ssh"}),
                &[200, 204],
            )
            .await?;
            conn.expect(
                Method::POST,
                "/v1/scale-ssh/roles/otp",
                &json!({"key_type": "otp", "default_user": "bench", "cidr_list": "127.0.0.0/8"}),
                &[200, 204],
            )
            .await?;
            let ids = fill(&ep, conns, n, "leases", |mut conn, _| async move {
                let r = conn
                    .expect(
                        Method::POST,
                        "/v1/scale-ssh/creds/otp",
                        &json!({"ip": "127.0.0.1"}),
                        &[200],
                    )
                    .await
                    .and_then(|v| {
                        v.get("lease_id")
                            .and_then(Value::as_str)
                            .filter(|s| !s.is_empty())
                            .map(|s| Some(s.to_owned()))
                            .ok_or_else(|| format!("no lease_id in {v}"))
                    });
                (conn, r)
            })
            .await?;
            Ok(Loaded {
                ids,
                ..Loaded::default()
            })
        }
        Suite::Allocs => load_allocs(args, server, n).await,
        Suite::Members => {
            let ep = Endpoint::new(
                server.url("platform"),
                Some(("authorization", format!("Bearer {}", args.token))),
                "application/vnd.api+json",
            )?;
            let mut conn = Conn::new(&ep);
            conn.expect(
                Method::POST,
                "/api/v2/organizations",
                &json!({"data": {"type": "organizations", "attributes": {"name": "scale", "email": "owner@scale.test"}}}),
                &[201],
            )
            .await?;
            let team = conn
                .expect(
                    Method::POST,
                    "/api/v2/organizations/scale/teams",
                    &json!({"data": {"type": "teams", "attributes": {"name": "readers"}}}),
                    &[201],
                )
                .await?;
            let team = team
                .pointer("/data/id")
                .and_then(Value::as_str)
                .ok_or("no team id")?
                .to_owned();
            // The owner is a member already: n - 1 invitations make n memberships.
            fill(
                &ep,
                conns.min(16),
                n.saturating_sub(1),
                "memberships",
                move |mut conn, i| {
                    let team = team.clone();
                    async move {
                        let body = json!({"data": {
                            "type": "organization-memberships",
                            "attributes": {"email": format!("member{i}@scale.test")},
                            "relationships": {"teams": {"data": [{"type": "teams", "id": team}]}}
                        }});
                        // Invitations update the organization's counts with a compare-and-
                        // swap: a concurrent one may answer 409 "retry", and is retried.
                        let bytes = Bytes::from(body.to_string());
                        let path = "/api/v2/organizations/scale/organization-memberships";
                        let mut r = Err("409 fifty times in a row".to_owned());
                        for _ in 0..50 {
                            match conn.send(Method::POST, path, bytes.clone(), None).await {
                                Ok((201, _)) => r = Ok(None),
                                Ok((409, _)) => continue,
                                Ok((status, answer)) => {
                                    r = Err(format!(
                                        "{status} {}",
                                        String::from_utf8_lossy(&answer)
                                    ));
                                }
                                Err(err) => r = Err(err),
                            }
                            break;
                        }
                        (conn, r)
                    }
                },
            )
            .await?;
            Ok(Loaded::default())
        }
    }
}

fn node_body(index: usize) -> (String, String, Value) {
    let id = format!("{index:08x}-5ca1-4000-8000-{index:012x}");
    let secret = format!("{index:08x}-5ec2-4000-8000-{index:012x}");
    let node = json!({"Node": {
        "ID": id,
        "SecretID": secret,
        "Name": format!("scale-sim-{index}"),
        "Datacenter": "dc1",
        "NodePool": "default",
        "NodeClass": "scale-sim",
        "Status": "ready",
        "Attributes": {"kernel.name": "linux", "driver.raw_exec": "1", "unique.hostname": format!("scale-sim-{index}")},
        "Drivers": {"raw_exec": {"Detected": true, "Healthy": true}},
        "NodeResources": {
            "Cpu": {"CpuShares": 8000, "TotalCpuCores": 4},
            "Memory": {"MemoryMB": 16384},
            "Disk": {"DiskMB": 100000}
        }
    }});
    (id, secret, node)
}

const ALLOCS_PER_JOB: usize = 10;
const ALLOCS_PER_NODE: usize = 20;

async fn load_allocs(args: &Args, server: &Server, n: usize) -> Result<Loaded, String> {
    let ep = Endpoint::new(
        server.url("scheduler"),
        Some(("x-nomad-token", String::new())),
        "application/json",
    )?;
    let nodes = n.div_ceil(ALLOCS_PER_NODE).max(2);
    let registered = fill(&ep, args.conns, nodes, "nodes", |mut conn, i| async move {
        let (id, secret, body) = node_body(i);
        let r = match conn
            .send(
                Method::PUT,
                "/v1/internal/node/register",
                Bytes::from(body.to_string()),
                Some(&secret),
            )
            .await
        {
            Ok((200, answer)) => {
                let ttl = serde_json::from_slice::<Value>(&answer)
                    .ok()
                    .and_then(|v| v.get("HeartbeatTTL").and_then(Value::as_u64))
                    .unwrap_or(10_000_000_000);
                Ok(Some(format!("{id} {secret} {ttl}")))
            }
            Ok((status, answer)) => Err(format!("{status} {}", String::from_utf8_lossy(&answer))),
            Err(err) => Err(err),
        };
        (conn, r)
    })
    .await?;
    let mut node_ids = Vec::new();
    let mut secrets = Vec::new();
    let mut ttl_ns = u64::MAX;
    for line in &registered {
        let mut parts = line.split(' ');
        let (Some(id), Some(secret), Some(ttl)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        node_ids.push(id.to_owned());
        secrets.push(secret.to_owned());
        ttl_ns = ttl_ns.min(
            ttl.parse::<u64>()
                .unwrap_or(10_000_000_000)
                .max(1_000_000_000),
        );
    }
    // Heartbeats at a third of the TTL, on their own connections, until aborted.
    let heartbeats = {
        let ep = Arc::clone(&ep);
        let pairs: Vec<(String, String)> = node_ids.iter().cloned().zip(secrets).collect();
        tokio::spawn(async move {
            let period = Duration::from_nanos(ttl_ns / 3);
            let mut conns: Vec<Conn> = (0..4).map(|_| Conn::new(&ep)).collect();
            loop {
                let round = Instant::now();
                for (i, (id, secret)) in pairs.iter().enumerate() {
                    let conn = &mut conns[i % 4];
                    let path = format!("/v1/internal/node/{id}/heartbeat");
                    if let Err(err) = conn
                        .send(Method::PUT, &path, Bytes::new(), Some(secret))
                        .await
                    {
                        eprintln!("scale_bench: heartbeat: {err}");
                    }
                }
                tokio::time::sleep_until((round + period).into()).await;
            }
        })
    };
    let jobs = n.div_ceil(ALLOCS_PER_JOB);
    fill(&ep, args.conns, jobs, "jobs", |mut conn, i| async move {
        let body = json!({"Job": {
            "ID": format!("scale-{i}"),
            "Name": format!("scale-{i}"),
            "Type": "service",
            "Datacenters": ["dc1"],
            "Constraints": [{"LTarget": "${node.class}", "RTarget": "scale-sim", "Operand": "="}],
            "TaskGroups": [{
                "Name": "app",
                "Count": ALLOCS_PER_JOB,
                "Tasks": [{
                    "Name": "app",
                    "Driver": "raw_exec",
                    "Config": {"command": "/bin/sleep", "args": ["3600"]},
                    "Resources": {"CPU": 100, "MemoryMB": 64}
                }]
            }]
        }});
        let r = conn
            .expect(Method::PUT, "/v1/jobs", &body, &[200])
            .await
            .map(|_| None);
        (conn, r)
    })
    .await?;
    // Every allocation placed.
    let want = (jobs * ALLOCS_PER_JOB) as u64;
    let deadline = Instant::now() + Duration::from_secs(1200);
    let mut conn = Conn::new(&ep);
    loop {
        let list = conn
            .expect(Method::GET, "/v1/jobs?prefix=scale-", &Value::Null, &[200])
            .await?;
        let placed: u64 = list
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|job| job.pointer("/JobSummary/Summary/app"))
            .map(|s| {
                ["Starting", "Running", "Complete", "Failed", "Lost"]
                    .iter()
                    .filter_map(|k| s.get(*k).and_then(Value::as_u64))
                    .sum::<u64>()
            })
            .sum();
        if placed >= want {
            break;
        }
        if Instant::now() > deadline {
            heartbeats.abort();
            return Err(format!("allocs: {placed} of {want} placed after 1200 s"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(Loaded {
        ids: (0..jobs).map(|i| format!("scale-{i}")).collect(),
        others: node_ids,
        heartbeats: Some(heartbeats),
    })
}

async fn probes(
    args: &Args,
    suite: Suite,
    server: &Server,
    loaded: &Loaded,
    n: usize,
) -> Result<Vec<ProbeResult>, String> {
    let ids = Arc::new(loaded.ids.clone());
    let others = Arc::new(loaded.others.clone());
    let mut out = Vec::new();
    match suite {
        Suite::Sessions => {
            let ep = Endpoint::new(
                server.url("registry"),
                Some(("x-consul-token", args.token.clone())),
                "application/json",
            )?;
            let i = Arc::clone(&ids);
            out.push(
                probe(args, &ep, "renew", move |mut conn, r| {
                    let path = format!("/v1/session/renew/{}", pick(&i, r));
                    async move {
                        let ok = matches!(
                            conn.send(Method::PUT, &path, Bytes::new(), None).await,
                            Ok((200, _))
                        );
                        (conn, ok)
                    }
                })
                .await?,
            );
            let i = Arc::clone(&ids);
            out.push(
                probe(args, &ep, "info", move |mut conn, r| {
                    let path = format!("/v1/session/info/{}", pick(&i, r));
                    async move {
                        let ok = matches!(conn.send(Method::GET, &path, Bytes::new(), None).await, Ok((200, b)) if b.len() > 2);
                        (conn, ok)
                    }
                })
                .await?,
            );
        }
        Suite::Kv => {
            let ep = Endpoint::new(
                server.url("registry"),
                Some(("x-consul-token", args.token.clone())),
                "application/octet-stream",
            )?;
            let i = Arc::clone(&ids);
            out.push(
                probe(args, &ep, "get", move |mut conn, r| {
                    let path = pick(&i, r).to_owned();
                    async move {
                        let ok = matches!(
                            conn.send(Method::GET, &path, Bytes::new(), None).await,
                            Ok((200, _))
                        );
                        (conn, ok)
                    }
                })
                .await?,
            );
            let i = Arc::clone(&ids);
            out.push(
                probe(args, &ep, "put", move |mut conn, r| {
                    let path = pick(&i, r).to_owned();
                    async move {
                        let value = Bytes::from(format!("{r:064}"));
                        let ok = matches!(
                            conn.send(Method::PUT, &path, value, None).await,
                            Ok((200, _))
                        );
                        (conn, ok)
                    }
                })
                .await?,
            );
        }
        Suite::Leases => {
            let ep = Endpoint::new(
                server.url("secrets"),
                Some(("x-vault-token", args.token.clone())),
                "application/json",
            )?;
            let i = Arc::clone(&ids);
            out.push(
                probe(args, &ep, "lookup", move |mut conn, r| {
                    let body = Bytes::from(json!({"lease_id": pick(&i, r)}).to_string());
                    async move {
                        let ok = matches!(
                            conn.send(Method::PUT, "/v1/sys/leases/lookup", body, None)
                                .await,
                            Ok((200, _))
                        );
                        (conn, ok)
                    }
                })
                .await?,
            );
            out.push(
                probe(args, &ep, "issue+revoke", move |mut conn, _| async move {
                    let issued = conn
                        .expect(
                            Method::POST,
                            "/v1/scale-ssh/creds/otp",
                            &json!({"ip": "127.0.0.1"}),
                            &[200],
                        )
                        .await;
                    let Some(id) = issued
                        .ok()
                        .and_then(|v| v.get("lease_id").and_then(Value::as_str).map(str::to_owned))
                    else {
                        return (conn, false);
                    };
                    let ok = conn
                        .expect(
                            Method::PUT,
                            "/v1/sys/leases/revoke",
                            &json!({"lease_id": id}),
                            &[200, 204],
                        )
                        .await
                        .is_ok();
                    (conn, ok)
                })
                .await?,
            );
        }
        Suite::Allocs => {
            let ep = Endpoint::new(
                server.url("scheduler"),
                Some(("x-nomad-token", String::new())),
                "application/json",
            )?;
            let i = Arc::clone(&ids);
            out.push(
                probe(args, &ep, "job allocs", move |mut conn, r| {
                    let path = format!("/v1/job/{}/allocations", pick(&i, r));
                    async move {
                        let ok = matches!(
                            conn.send(Method::GET, &path, Bytes::new(), None).await,
                            Ok((200, _))
                        );
                        (conn, ok)
                    }
                })
                .await?,
            );
            let o = Arc::clone(&others);
            out.push(
                probe(args, &ep, "node allocs", move |mut conn, r| {
                    let path = format!("/v1/node/{}/allocations", pick(&o, r));
                    async move {
                        let ok = matches!(
                            conn.send(Method::GET, &path, Bytes::new(), None).await,
                            Ok((200, _))
                        );
                        (conn, ok)
                    }
                })
                .await?,
            );
        }
        Suite::Members => {
            let ep = Endpoint::new(
                server.url("platform"),
                Some(("authorization", format!("Bearer {}", args.token))),
                "application/vnd.api+json",
            )?;
            let middle = n.div_ceil(20).div_ceil(2).max(1);
            for (name, page) in [("first page", 1), ("middle page", middle)] {
                let path = format!(
                    "/api/v2/organizations/scale/organization-memberships?page%5Bsize%5D=20&page%5Bnumber%5D={page}"
                );
                out.push(
                    probe(args, &ep, name, move |mut conn, _| {
                        let path = path.clone();
                        async move {
                            let ok = matches!(
                                conn.send(Method::GET, &path, Bytes::new(), None).await,
                                Ok((200, _))
                            );
                            (conn, ok)
                        }
                    })
                    .await?,
                );
            }
        }
    }
    Ok(out)
}

/// Leases: spawn → `cairn_secrets_leases` reaching `want`.
async fn leases_loaded(args: &Args, server: &Server, want: usize) -> Result<f64, String> {
    let ep = Endpoint::new(
        server.url("secrets"),
        Some(("x-vault-token", args.token.clone())),
        "application/json",
    )?;
    let mut conn = Conn::new(&ep);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if let Ok((200, body)) = conn
            .send(
                Method::GET,
                "/v1/sys/metrics?format=prometheus",
                Bytes::new(),
                None,
            )
            .await
        {
            let text = String::from_utf8_lossy(&body);
            let count = text
                .lines()
                .find_map(|l| l.strip_prefix("cairn_secrets_leases "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
            if count >= want as f64 {
                return Ok(server.spawned.elapsed().as_secs_f64() * 1000.0);
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the expiry loop did not hold {want} leases within 600 s of the restart"
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn run_point(args: &Args, suite: Suite, n: usize) -> Result<Point, String> {
    let dir = args.work_dir.join(format!("{}-{n}", suite.name()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.join("data");
    std::fs::create_dir_all(&data).map_err(|err| format!("{}: {err}", data.display()))?;
    eprintln!("scale_bench: {} at {n}: fresh cairn dev", suite.name());
    let mut server = Server::start(args, &data, &dir.join("first.err"))?;
    let started = Instant::now();
    let mut loaded = load(args, suite, &server, n).await?;
    let load_s = started.elapsed().as_secs_f64();
    eprintln!(
        "scale_bench: {} at {n}: loaded in {load_s:.1} s",
        suite.name()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let probes = probes(args, suite, &server, &loaded, n).await?;
    let (rss, hwm) = server.memory();
    if let Some(h) = loaded.heartbeats.take() {
        h.abort();
    }
    server.stop();
    let store = disk_usage(&data);
    eprintln!(
        "scale_bench: {} at {n}: restart on the loaded data dir",
        suite.name()
    );
    let restarted = Server::start(args, &data, &dir.join("restart.err"))?;
    let ready_ms = restarted.ready.as_secs_f64() * 1000.0;
    let loaded_ms = if suite == Suite::Leases {
        Some(leases_loaded(args, &restarted, n).await?)
    } else {
        None
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss_restart, _) = restarted.memory();
    drop(restarted);
    let _ = std::fs::remove_dir_all(&dir);
    let point = Point {
        items: n,
        load_s,
        rss,
        hwm,
        store,
        probes,
        ready_ms,
        loaded_ms,
        rss_restart,
    };
    let mut line = format!(
        "RESULT suite={} items={n} load_s={load_s:.2} rss_bytes={rss} hwm_bytes={hwm} store_bytes={store} ready_ms={ready_ms:.1} rss_restart_bytes={rss_restart}",
        suite.name()
    );
    if let Some(ms) = loaded_ms {
        let _ = write!(line, " leases_loaded_ms={ms:.1}");
    }
    for p in &point.probes {
        let key = p.name.replace([' ', '+'], "_");
        let _ = write!(
            line,
            " {key}_p50_us={} {key}_p99_us={} {key}_rps={:.0} {key}_errors={}",
            p.p50_us, p.p99_us, p.rps, p.errors
        );
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
    Ok(point)
}

// ------------------------------------------------------------------ report

/// value ∝ items^slope between the first and the last of `points`.
fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let (first, last) = (points.first()?, points.last()?);
    if points.len() < 2 || first.0 <= 0.0 || first.1 <= 0.0 || last.1 <= 0.0 || last.0 <= first.0 {
        return None;
    }
    Some((last.1 / first.1).ln() / (last.0 / first.0).ln())
}

/// The growth class of a measure: judged on the last step (the two largest points), where
/// fixed costs weigh least, with the slope over the whole range beside it.
fn growth(points: &[(f64, f64)]) -> String {
    let Some(last) = slope(&points[points.len().saturating_sub(2)..]) else {
        return "n/a".to_owned();
    };
    let class = if last < 0.15 {
        "flat"
    } else if last < 0.85 {
        "sublinear"
    } else if last <= 1.2 {
        "linear"
    } else {
        "**worse than linear**"
    };
    match slope(points) {
        Some(all) if points.len() > 2 => {
            format!("{class} (slope {last:.2} over the last step, {all:.2} overall)")
        }
        _ => format!("{class} (slope {last:.2})"),
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn markdown(suite: Suite, points: &[Point]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "**{}**: {}.\n", suite.name(), suite.describe());
    let probe_names: Vec<String> = points
        .first()
        .map(|p| p.probes.iter().map(|q| q.name.clone()).collect())
        .unwrap_or_default();
    let mut header = "| items | load s (items/s) | RSS MB (peak) | store MB (B/item) |".to_owned();
    let mut rule = "|---:|---:|---:|---:|".to_owned();
    for name in &probe_names {
        let _ = write!(header, " {name} p50 / p99 µs (rps, errors) |");
        rule.push_str("---:|");
    }
    header.push_str(" restart → ready ms |");
    rule.push_str("---:|");
    if suite == Suite::Leases {
        header.push_str(" restart → leases on timers ms |");
        rule.push_str("---:|");
    }
    header.push_str(" RSS after restart MB |");
    rule.push_str("---:|");
    let _ = writeln!(s, "{header}\n{rule}");
    for p in points {
        let mut row = format!(
            "| {} | {:.1} ({:.0}) | {:.1} ({:.1}) | {:.1} ({:.0}) |",
            p.items,
            p.load_s,
            p.items as f64 / p.load_s.max(1e-9),
            mb(p.rss),
            mb(p.hwm),
            mb(p.store),
            p.store as f64 / p.items as f64
        );
        for q in &p.probes {
            let _ = write!(
                row,
                " {} / {} ({:.0}, {}) |",
                q.p50_us, q.p99_us, q.rps, q.errors
            );
        }
        let _ = write!(row, " {:.0} |", p.ready_ms);
        if let Some(ms) = p.loaded_ms {
            let _ = write!(row, " {ms:.0} |");
        }
        let _ = write!(row, " {:.1} |", mb(p.rss_restart));
        let _ = writeln!(s, "{row}");
    }
    let xs = |f: &dyn Fn(&Point) -> f64| -> Vec<(f64, f64)> {
        points.iter().map(|p| (p.items as f64, f(p))).collect()
    };
    let mut g = vec![
        format!("RSS {}", growth(&xs(&|p| p.rss as f64))),
        format!("store {}", growth(&xs(&|p| p.store as f64))),
    ];
    for (k, name) in probe_names.iter().enumerate() {
        g.push(format!(
            "{name} p50 {}",
            growth(&xs(&|p| p.probes.get(k).map_or(0.0, |q| q.p50_us as f64)))
        ));
        g.push(format!(
            "{name} p99 {}",
            growth(&xs(&|p| p.probes.get(k).map_or(0.0, |q| q.p99_us as f64)))
        ));
    }
    g.push(format!("restart → ready {}", growth(&xs(&|p| p.ready_ms))));
    if suite == Suite::Leases {
        g.push(format!(
            "restart → leases on timers {}",
            growth(&xs(&|p| p.loaded_ms.unwrap_or(0.0)))
        ));
    }
    let _ = writeln!(
        s,
        "\nGrowth from {} to {} items: {}.\n",
        points.first().map_or(0, |p| p.items),
        points.last().map_or(0, |p| p.items),
        g.join("; ")
    );
    s
}

fn render(dir: &Path, suite: Suite, points: &[Point]) -> Result<PathBuf, String> {
    use plot::{Panel, Series};
    let series = |name: &str, f: &dyn Fn(&Point) -> f64| Series {
        name: name.to_owned(),
        points: points.iter().map(|p| (p.items as f64, f(p))).collect(),
    };
    let mut latency = Vec::new();
    for k in 0..points.first().map_or(0, |p| p.probes.len()) {
        let name = points[0].probes[k].name.clone();
        latency.push(series(&format!("{name} p50"), &|p| {
            p.probes.get(k).map_or(0.0, |q| q.p50_us as f64 / 1000.0)
        }));
        latency.push(series(&format!("{name} p99"), &|p| {
            p.probes.get(k).map_or(0.0, |q| q.p99_us as f64 / 1000.0)
        }));
    }
    let mut startup = vec![series("ready", &|p| p.ready_ms)];
    if suite == Suite::Leases {
        startup.push(series("leases on timers", &|p| p.loaded_ms.unwrap_or(0.0)));
    }
    let panels = [
        Panel {
            title: "memory MB".to_owned(),
            series: vec![
                series("RSS loaded", &|p| mb(p.rss)),
                series("RSS after restart", &|p| mb(p.rss_restart)),
            ],
        },
        Panel {
            title: "store on disk MB".to_owned(),
            series: vec![series("data dir", &|p| mb(p.store))],
        },
        Panel {
            title: "latency ms".to_owned(),
            series: latency,
        },
        Panel {
            title: "restart to ready ms".to_owned(),
            series: startup,
        },
    ];
    std::fs::create_dir_all(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    let path = dir.join(format!("scale-{}.png", suite.name()));
    plot::render(
        &path,
        &format!(
            "cairn scale: {} (x: items, dashed: linear growth)",
            suite.name()
        ),
        &panels,
    )?;
    Ok(path)
}

/// The points of `suite` in `RESULT` lines (as `run_point` prints them), by item count; a
/// later line for the same count replaces an earlier one.
fn parse_results(text: &str, suite: Suite) -> Vec<Point> {
    let mut points: Vec<Point> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("RESULT ") else {
            continue;
        };
        let fields: HashMap<&str, &str> = rest
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .collect();
        if fields.get("suite") != Some(&suite.name()) {
            continue;
        }
        let num = |key: &str| fields.get(key).and_then(|v| v.parse::<f64>().ok());
        let Some(items) = num("items") else { continue };
        let probes = suite
            .probe_names()
            .iter()
            .map(|name| {
                let key = name.replace([' ', '+'], "_");
                ProbeResult {
                    name: (*name).to_owned(),
                    p50_us: num(&format!("{key}_p50_us")).unwrap_or(0.0) as u64,
                    p99_us: num(&format!("{key}_p99_us")).unwrap_or(0.0) as u64,
                    rps: num(&format!("{key}_rps")).unwrap_or(0.0),
                    errors: num(&format!("{key}_errors")).unwrap_or(0.0) as u64,
                }
            })
            .collect();
        let point = Point {
            items: items as usize,
            load_s: num("load_s").unwrap_or(0.0),
            rss: num("rss_bytes").unwrap_or(0.0) as u64,
            hwm: num("hwm_bytes").unwrap_or(0.0) as u64,
            store: num("store_bytes").unwrap_or(0.0) as u64,
            probes,
            ready_ms: num("ready_ms").unwrap_or(0.0),
            loaded_ms: num("leases_loaded_ms"),
            rss_restart: num("rss_restart_bytes").unwrap_or(0.0) as u64,
        };
        points.retain(|p| p.items != point.items);
        points.push(point);
    }
    points.sort_by_key(|p| p.items);
    points
}

async fn run(args: Args) -> Result<(), String> {
    let suites = args
        .suites
        .split(',')
        .map(Suite::parse)
        .collect::<Result<Vec<_>, _>>()?;
    let points = args
        .points
        .split(',')
        .map(|p| {
            p.parse::<usize>()
                .ok()
                .filter(|v| *v > 0)
                .ok_or(format!("bad point {p:?}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(path) = &args.from_results {
        let text =
            std::fs::read_to_string(path).map_err(|err| format!("{}: {err}", path.display()))?;
        let mut doc = String::new();
        for suite in suites {
            let measured = parse_results(&text, suite);
            if measured.is_empty() {
                continue;
            }
            doc.push_str(&markdown(suite, &measured));
            if let Some(dir) = &args.plot_dir {
                let path = render(dir, suite, &measured)?;
                eprintln!("scale_bench: wrote {}", path.display());
            }
        }
        if let Some(path) = &args.markdown {
            std::fs::write(path, &doc).map_err(|err| format!("{}: {err}", path.display()))?;
        }
        return Ok(());
    }
    std::fs::create_dir_all(&args.work_dir)
        .map_err(|err| format!("{}: {err}", args.work_dir.display()))?;
    let mut doc = String::new();
    for suite in suites {
        let mut measured = Vec::new();
        for &m in &points {
            measured.push(
                run_point(
                    &args,
                    suite,
                    (suite.base() / args.divide.max(1)).max(10) * m,
                )
                .await?,
            );
        }
        doc.push_str(&markdown(suite, &measured));
        if let Some(dir) = &args.plot_dir {
            let path = render(dir, suite, &measured)?;
            eprintln!("scale_bench: wrote {}", path.display());
        }
        // Written after every suite, so a later failure keeps what was measured.
        if let Some(path) = &args.markdown {
            std::fs::write(path, &doc).map_err(|err| format!("{}: {err}", path.display()))?;
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
            eprintln!("scale_bench: {err}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_reads_the_log_log_slope_from_first_to_last_point() {
        let flat = [(1e3, 20.0), (1e4, 21.0), (1e5, 22.0)];
        assert!(growth(&flat).starts_with("flat"));
        let linear = [(1e3, 1.0), (1e4, 10.0), (1e5, 100.0)];
        assert!(growth(&linear).starts_with("linear"));
        let quadratic = [(1e3, 1.0), (1e5, 1e4)];
        assert!(growth(&quadratic).contains("worse than linear"));
        let sqrt = [(1e3, 1.0), (1e5, 10.0)];
        assert!(growth(&sqrt).starts_with("sublinear"));
        assert_eq!(growth(&[(1e3, 1.0)]), "n/a");
        assert_eq!(growth(&[(1e3, 0.0), (1e4, 1.0)]), "n/a");
    }

    #[test]
    fn short_labels_use_k_and_m() {
        assert_eq!(plot::short(1000.0), "1K");
        assert_eq!(plot::short(100_000.0), "100K");
        assert_eq!(plot::short(1_000_000.0), "1M");
        assert_eq!(plot::short(2.5), "2.5");
        assert_eq!(plot::short(20.0), "20");
        assert_eq!(plot::short(0.05), "0.05");
    }

    #[test]
    fn result_lines_read_back_into_points() {
        let text = "noise\nRESULT suite=leases items=10 load_s=1.5 rss_bytes=2000000 hwm_bytes=3000000 store_bytes=4096 ready_ms=12.5 rss_restart_bytes=1000000 leases_loaded_ms=13.0 lookup_p50_us=100 lookup_p99_us=900 lookup_rps=50 lookup_errors=0 issue_revoke_p50_us=7 issue_revoke_p99_us=8 issue_revoke_rps=9 issue_revoke_errors=1\nRESULT suite=kv items=5 load_s=1\n";
        let points = parse_results(text, Suite::Leases);
        assert_eq!(points.len(), 1);
        let p = &points[0];
        assert_eq!((p.items, p.rss, p.store), (10, 2_000_000, 4096));
        assert_eq!(p.loaded_ms, Some(13.0));
        assert_eq!(p.probes[1].name, "issue+revoke");
        assert_eq!((p.probes[1].p99_us, p.probes[1].errors), (8, 1));
        assert_eq!(parse_results(text, Suite::Members).len(), 0);
    }

    #[test]
    fn suites_parse_by_name_and_refuse_others() {
        assert_eq!(Suite::parse("kv"), Ok(Suite::Kv));
        assert_eq!(Suite::parse("allocs").map(Suite::name), Ok("allocs"));
        assert!(Suite::parse("nodes").is_err());
    }
}
