//! `loadgen`: a closed-loop HTTP/1.1 load generator for cairn's benchmarks.
//!
//! Where it sits: `scripts/bench` runs it once against the `anchor` server and once against a
//! `cairn dev` endpoint for every scenario, with the same flags, and reads the single
//! `RESULT ...` line it prints on stdout. Everything else goes to stderr.
//!
//! Model: `--conns` keep-alive connections, each a hyper 1 `client::conn::http1` handshake on
//! its own tokio `TcpStream`, each with exactly one request in flight (no pipelining). A
//! connection sends its next request as soon as the previous response body has been read.
//! The run is a fixed warm-up followed by a fixed measurement window.
//!
//! Scenario mode (`--scenario NAME`, see `cairn_bench::scenario`): `--url` is the server's
//! base URL and each connection runs a built-in iteration of one or more requests (e.g.
//! session create + destroy) in a closed loop; one completed iteration is one op, and
//! `requests`/`rps` in the RESULT line count ops. Per-connection setup (a session or a lease)
//! runs on every connection before the clock starts and is not timed; teardown (destroy or
//! revoke it) runs after the window. `--method`, `--body` and `--expect` do not apply: each
//! step checks its own status and body.
//!
//! Invariants:
//! - Targets are loopback only (`cairn_bench::target::Target::parse` refuses anything else).
//! - The run is bounded in time (warm-up + duration ≤ 600 s, each request also has a
//!   timeout) and in count (`--max-requests`), and stops by itself.
//! - A request is counted only if it started after the warm-up, finished inside the window,
//!   and its status matched `--expect`; its latency is then recorded. A mismatched status,
//!   a connection/IO error or a timeout inside the window counts as an error instead.
//!   Requests cut off by the end of the window count as neither.
//! - In scenario mode the same rules hold per iteration: its latency runs from its first
//!   request to its last response; a failed step makes the whole iteration one error; a lost
//!   attempt on a hot key (`false` acquire, failed txn) is counted as `contended`, not as an
//!   op or an error, and the next attempt starts at once.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_bench::histogram::Histogram;
use cairn_bench::scenario::{self as sc, Rng, Scenario, Unexpected};
use cairn_bench::target::{Expect, Target, parse_header};
use clap::Parser;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout_at};

/// Hard upper bound on warm-up + measurement, in seconds.
const MAX_RUN_SECS: f64 = 600.0;

/// Closed-loop keep-alive HTTP/1.1 load generator (loopback targets only).
#[derive(Debug, Parser)]
#[command(name = "loadgen", version)]
struct Args {
    /// Target URL, http:// on a loopback address (127.0.0.0/8, [::1], localhost); with
    /// --scenario, the server's base URL (no path).
    #[arg(long)]
    url: String,
    /// Run a built-in multi-request scenario instead of one fixed request: session-create-destroy,
    /// session-renew, kv-acquire-release, kv-acquire-release-hot, etcd-lease-grant-revoke,
    /// etcd-lease-keepalive, etcd-put, etcd-lock-hot.
    #[arg(long, value_parser = Scenario::parse)]
    scenario: Option<Scenario>,
    /// Number of shared keys for the hot-key scenarios.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    hot_keys: u32,
    /// Scenario name printed in the RESULT line (no whitespace).
    #[arg(long, default_value = "load")]
    name: String,
    /// Number of keep-alive connections, one request in flight on each.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    conns: u32,
    /// Warm-up seconds (requests are sent but not counted).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Measurement seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// HTTP method (default GET; not with --scenario).
    #[arg(long)]
    method: Option<String>,
    /// Request body (sent with a Content-Length; not with --scenario).
    #[arg(long)]
    body: Option<String>,
    /// Extra request header, 'Name: value'; repeatable.
    #[arg(long = "header", value_parser = parse_header)]
    headers: Vec<(HeaderName, HeaderValue)>,
    /// File of 'Name: value' lines, one per connection: connection i also sends line
    /// i mod (number of lines), e.g. a distinct bearer token per connection (plain mode only).
    #[arg(long)]
    conn_header_file: Option<String>,
    /// Statuses that count as success: a class like 2xx, or codes like 200,204 (default 2xx;
    /// not with --scenario).
    #[arg(long, value_parser = Expect::parse)]
    expect: Option<Expect>,
    /// Per-request timeout in seconds (per iteration with --scenario).
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
    /// Upper bound on requests (iterations with --scenario) over the whole run, all
    /// connections together.
    #[arg(long, default_value_t = 100_000_000)]
    max_requests: u64,
    /// Tokio worker threads for the generator (0 = one per CPU).
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

/// What every connection task needs, shared read-only.
#[derive(Debug)]
struct Plan {
    target: Target,
    method: Method,
    body: Bytes,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Per-connection headers (`--conn-header-file`); connection i sends entry i mod len.
    conn_headers: Vec<(HeaderName, HeaderValue)>,
    expect: Expect,
    timeout: Duration,
    per_conn_max: u64,
    warm_end: Instant,
    end: Instant,
}

/// Counters of one connection task (and, merged, of the run).
#[derive(Debug, Default)]
struct Stats {
    hist: Histogram,
    connect_errors: u64,
    io_errors: u64,
    timeouts: u64,
    bad_status: u64,
    reconnects: u64,
    /// Scenario mode: lost attempts on a hot key.
    contended: u64,
    /// Scenario mode: HTTP requests sent, warm-up included, setup and teardown excluded.
    http_requests: u64,
    capped: bool,
    first_error: Option<String>,
    stopped: Option<Instant>,
}

impl Stats {
    fn errors(&self) -> u64 {
        self.connect_errors + self.io_errors + self.timeouts + self.bad_status
    }

    fn note(&mut self, e: impl std::fmt::Display) {
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }

    fn merge(&mut self, o: Stats) {
        self.hist.merge(&o.hist);
        self.connect_errors += o.connect_errors;
        self.io_errors += o.io_errors;
        self.timeouts += o.timeouts;
        self.bad_status += o.bad_status;
        self.reconnects += o.reconnects;
        self.contended += o.contended;
        self.http_requests += o.http_requests;
        self.capped |= o.capped;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
        self.stopped = self.stopped.max(o.stopped);
    }
}

enum Failure {
    Io(hyper::Error),
    Timeout,
}

async fn connect(plan: &Plan) -> std::io::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(plan.target.addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        // Ends when the sender is dropped or the server closes; errors surface on the sender.
        let _ = conn.await;
    });
    Ok(sender)
}

fn build_request(plan: &Plan, conn: u64) -> Request<Full<Bytes>> {
    let mut req = Request::new(Full::new(plan.body.clone()));
    *req.method_mut() = plan.method.clone();
    *req.uri_mut() = plan
        .target
        .path_and_query
        .parse()
        .expect("path validated at startup");
    let h = req.headers_mut();
    h.insert(
        HOST,
        HeaderValue::from_str(&plan.target.host).expect("authority is a valid header value"),
    );
    for (name, value) in &plan.headers {
        h.append(name.clone(), value.clone());
    }
    if !plan.conn_headers.is_empty() {
        let i = usize::try_from(conn).unwrap_or_default() % plan.conn_headers.len();
        let (name, value) = &plan.conn_headers[i];
        h.append(name.clone(), value.clone());
    }
    req
}

/// One request/response exchange, body fully read so the connection can be reused.
async fn exchange(
    sender: &mut SendRequest<Full<Bytes>>,
    req: Request<Full<Bytes>>,
) -> Result<u16, hyper::Error> {
    sender.ready().await?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    resp.into_body().collect().await?;
    Ok(status)
}

async fn run_connection(plan: Arc<Plan>, conn: u64) -> Stats {
    let mut st = Stats::default();
    let mut sender: Option<SendRequest<Full<Bytes>>> = None;
    let mut sent: u64 = 0;
    loop {
        let now = Instant::now();
        if now >= plan.end {
            break;
        }
        if sent >= plan.per_conn_max {
            st.capped = true;
            break;
        }
        let measuring = now >= plan.warm_end;
        if sender.as_ref().is_some_and(SendRequest::is_closed) {
            sender = None;
            st.reconnects += 1;
        }
        let s = match sender.as_mut() {
            Some(s) => s,
            None => match timeout_at(plan.end, connect(&plan)).await {
                Err(_) => break,
                Ok(Ok(s)) => sender.insert(s),
                Ok(Err(e)) => {
                    if measuring {
                        st.connect_errors += 1;
                        st.note(format!("connect: {e}"));
                    }
                    // Do not spin on a refusing port.
                    sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let req = build_request(&plan, conn);
        sent += 1;
        let t0 = Instant::now();
        let deadline = (t0 + plan.timeout).min(plan.end);
        let res = match timeout_at(deadline, exchange(s, req)).await {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(e)) => Err(Failure::Io(e)),
            Err(_) => Err(Failure::Timeout),
        };
        let t1 = Instant::now();
        let in_window = t0 >= plan.warm_end;
        match res {
            Ok(status) => {
                if in_window && t1 <= plan.end {
                    if plan.expect.matches(status) {
                        st.hist
                            .record(u64::try_from((t1 - t0).as_micros()).unwrap_or(u64::MAX));
                    } else {
                        st.bad_status += 1;
                        st.note(format!("status {status}, expected {}", plan.expect));
                    }
                }
            }
            Err(Failure::Timeout) => {
                sender = None; // state unknown: never reuse a connection with a request in flight
                if deadline >= plan.end {
                    break; // cut off by the end of the window: neither success nor error
                }
                if in_window {
                    st.timeouts += 1;
                    st.note(format!("timeout after {:?}", plan.timeout));
                }
            }
            Err(Failure::Io(e)) => {
                sender = None;
                if in_window && t1 <= plan.end {
                    st.io_errors += 1;
                    st.note(format!("io: {e}"));
                }
            }
        }
    }
    st.stopped = Some(Instant::now().min(plan.end));
    st
}

fn main() -> ExitCode {
    let args = Args::parse();
    match real_main(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loadgen: {e}");
            ExitCode::from(2)
        }
    }
}

fn real_main(args: Args) -> Result<(), String> {
    let target = Target::parse(&args.url).map_err(|e| e.to_string())?;
    if args.name.is_empty() || args.name.chars().any(char::is_whitespace) {
        return Err(format!(
            "--name {:?} must be non-empty and contain no whitespace",
            args.name
        ));
    }
    if args.url.chars().any(char::is_whitespace) {
        return Err("--url must contain no whitespace".into());
    }
    let finite_pos = |v: f64| v.is_finite() && v >= 0.0;
    if !finite_pos(args.warmup) || !finite_pos(args.duration) || args.duration <= 0.0 {
        return Err("--warmup must be >= 0 and --duration > 0".into());
    }
    if args.warmup + args.duration > MAX_RUN_SECS {
        return Err(format!(
            "--warmup + --duration must be at most {MAX_RUN_SECS} s"
        ));
    }
    if !finite_pos(args.timeout) || args.timeout <= 0.0 || args.timeout > MAX_RUN_SECS {
        return Err("--timeout must be in (0, 600] seconds".into());
    }
    if args.max_requests == 0 {
        return Err("--max-requests must be > 0".into());
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if args.threads > 0 {
        rt.worker_threads(args.threads);
    }
    let rt = rt.build().map_err(|e| format!("tokio runtime: {e}"))?;

    let (st, secs) = match args.scenario {
        None => {
            let method = args.method.as_deref().unwrap_or("GET");
            let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes())
                .map_err(|e| format!("bad --method {method:?}: {e}"))?;
            let conn_headers = match &args.conn_header_file {
                None => Vec::new(),
                Some(path) => read_conn_headers(path)?,
            };
            rt.block_on(run_plain(&args, target, method, conn_headers))
        }
        Some(scenario) => {
            if args.conn_header_file.is_some() {
                return Err("--conn-header-file does not apply with --scenario".into());
            }
            if args.method.is_some() || args.body.is_some() || args.expect.is_some() {
                return Err(
                    "--method, --body and --expect do not apply with --scenario (each step checks its own answer)"
                        .into(),
                );
            }
            if target.path_and_query != "/" {
                return Err(format!(
                    "with --scenario, --url is the server's base URL and must have no path, got {:?}",
                    target.path_and_query
                ));
            }
            rt.block_on(run_scenario(&args, target, scenario))?
        }
    };

    let requests = st.hist.count();
    let rps = if secs > 0.0 {
        requests as f64 / secs
    } else {
        0.0
    };
    eprintln!(
        "loadgen: name={} requests={} errors={} (connect={} io={} timeout={} status={}) reconnects={}{}{} mean_us={:.1} min_us={}{}",
        args.name,
        requests,
        st.errors(),
        st.connect_errors,
        st.io_errors,
        st.timeouts,
        st.bad_status,
        st.reconnects,
        if args.scenario.is_some() {
            format!(
                " contended={} http_requests={}",
                st.contended, st.http_requests
            )
        } else {
            String::new()
        },
        if st.capped {
            " capped-by-max-requests"
        } else {
            ""
        },
        st.hist.mean(),
        st.hist.min(),
        st.first_error
            .as_deref()
            .map(|e| format!(" first_error={e:?}"))
            .unwrap_or_default(),
    );
    let scenario_fields = match args.scenario {
        Some(scenario) => format!(
            " scenario={scenario} contended={} contended_s={:.1} http_requests={}",
            st.contended,
            if secs > 0.0 {
                st.contended as f64 / secs
            } else {
                0.0
            },
            st.http_requests
        ),
        None => String::new(),
    };
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "RESULT name={} url={} conns={} secs={} requests={} errors={} rps={:.1} p50_us={} p99_us={} max_us={}{}",
        args.name,
        args.url,
        args.conns,
        secs,
        requests,
        st.errors(),
        rps,
        st.hist.quantile(0.50),
        st.hist.quantile(0.99),
        st.hist.max(),
        scenario_fields,
    )
    .and_then(|()| out.flush())
    .map_err(|e| format!("writing result: {e}"))?;
    Ok(())
}

/// The measured seconds: the full window, or up to the last stop when capped.
fn measured_secs(total: &Stats, warm_end: Instant, duration: f64) -> f64 {
    if total.capped {
        total.stopped.map_or(duration, |s| {
            s.saturating_duration_since(warm_end).as_secs_f64()
        })
    } else {
        duration
    }
}

async fn join_all(tasks: Vec<tokio::task::JoinHandle<Stats>>) -> Stats {
    let mut total = Stats::default();
    for t in tasks {
        match t.await {
            Ok(s) => total.merge(s),
            Err(e) => {
                total.io_errors += 1;
                total.note(format!("connection task failed: {e}"));
            }
        }
    }
    total
}

/// `--conn-header-file`: one 'Name: value' header per non-empty line, at least one.
fn read_conn_headers(path: &str) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--conn-header-file {path:?}: {e}"))?;
    let headers = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| parse_header(line).map_err(|e| format!("--conn-header-file {path:?}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if headers.is_empty() {
        return Err(format!("--conn-header-file {path:?} has no header lines"));
    }
    Ok(headers)
}

/// One fixed request per connection, in a closed loop.
async fn run_plain(
    args: &Args,
    target: Target,
    method: Method,
    conn_headers: Vec<(HeaderName, HeaderValue)>,
) -> (Stats, f64) {
    let conns = u64::from(args.conns);
    let start = Instant::now();
    let warm_end = start + Duration::from_secs_f64(args.warmup);
    let plan = Arc::new(Plan {
        target,
        method,
        body: Bytes::from(args.body.clone().unwrap_or_default()),
        headers: args.headers.clone(),
        conn_headers,
        expect: args.expect.clone().unwrap_or(Expect::Class(2)),
        timeout: Duration::from_secs_f64(args.timeout),
        per_conn_max: args.max_requests.div_ceil(conns),
        warm_end,
        end: warm_end + Duration::from_secs_f64(args.duration),
    });
    let tasks: Vec<_> = (0..conns)
        .map(|conn| tokio::spawn(run_connection(Arc::clone(&plan), conn)))
        .collect();
    let total = join_all(tasks).await;
    let secs = measured_secs(&total, warm_end, args.duration);
    (total, secs)
}

// ------------------------------------------------------------------ scenario mode

/// What every scenario connection needs, shared read-only.
#[derive(Debug)]
struct Common {
    target: Target,
    scenario: Scenario,
    headers: Vec<(HeaderName, HeaderValue)>,
    timeout: Duration,
    hot_keys: u32,
}

/// The clock of a scenario run, fixed once every connection has finished its setup.
#[derive(Debug, Clone, Copy)]
struct Window {
    warm_end: Instant,
    end: Instant,
    per_conn_max: u64,
}

/// One scenario connection: its HTTP connection (re-opened after an error) and what its
/// setup made.
struct Conn {
    id: u32,
    sender: Option<SendRequest<Full<Bytes>>>,
    /// The connection's session (cairn) or lease (etcd) id, when the scenario has one.
    handle: Option<String>,
    rng: Rng,
    value: Bytes,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("id", &self.id)
            .field("connected", &self.sender.is_some())
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

/// Why a step of an iteration failed.
enum StepError {
    Connect(std::io::Error),
    Io(hyper::Error),
    Unexpected(Unexpected),
}

impl From<Unexpected> for StepError {
    fn from(u: Unexpected) -> Self {
        StepError::Unexpected(u)
    }
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepError::Connect(e) => write!(f, "connect: {e}"),
            StepError::Io(e) => write!(f, "io: {e}"),
            StepError::Unexpected(u) => write!(f, "{u}"),
        }
    }
}

/// The outcome of one iteration that did not fail.
enum Attempt {
    /// A whole op: recorded with its latency.
    Op,
    /// Lost a hot key to another connection: counted, not recorded.
    Contended,
}

/// Request bodies: JSON (sent with `Content-Type: application/json`), raw bytes, or none.
enum Body<'a> {
    None,
    Json(String),
    Raw(&'a Bytes),
}

/// The connection's HTTP sender, (re)connecting when there is none or it was closed.
async fn ensure_connected<'a>(
    c: &Common,
    conn: &'a mut Conn,
    st: &mut Stats,
) -> Result<&'a mut SendRequest<Full<Bytes>>, StepError> {
    if conn.sender.as_ref().is_some_and(SendRequest::is_closed) {
        conn.sender = None;
        st.reconnects += 1;
    }
    if conn.sender.is_none() {
        let stream = TcpStream::connect(c.target.addr)
            .await
            .map_err(StepError::Connect)?;
        stream.set_nodelay(true).map_err(StepError::Connect)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(StepError::Io)?;
        tokio::spawn(async move {
            // Ends when the sender is dropped or the server closes.
            let _ = connection.await;
        });
        conn.sender = Some(sender);
    }
    Ok(conn.sender.as_mut().expect("just connected"))
}

/// One request on the connection (connecting first if needed); returns status and body.
async fn call(
    c: &Common,
    conn: &mut Conn,
    st: &mut Stats,
    method: Method,
    path: &str,
    body: Body<'_>,
) -> Result<(u16, Bytes), StepError> {
    let sender = ensure_connected(c, conn, st).await?;
    let (bytes, json) = match body {
        Body::None => (Bytes::new(), false),
        Body::Json(s) => (Bytes::from(s), true),
        Body::Raw(b) => (b.clone(), false),
    };
    let mut req = Request::new(Full::new(bytes));
    *req.method_mut() = method;
    *req.uri_mut() = path
        .parse()
        .map_err(|e| StepError::Unexpected(Unexpected(format!("bad path {path:?}: {e}"))))?;
    let h = req.headers_mut();
    h.insert(
        HOST,
        HeaderValue::from_str(&c.target.host).expect("authority is a valid header value"),
    );
    if json {
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    for (name, value) in &c.headers {
        h.append(name.clone(), value.clone());
    }
    st.http_requests += 1;
    let result = async {
        sender.ready().await?;
        let resp = sender.send_request(req).await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok::<_, hyper::Error>((status, body))
    }
    .await;
    result.map_err(|e| {
        conn.sender = None;
        StepError::Io(e)
    })
}

/// The untimed per-connection setup: a session or a lease where the scenario needs one.
async fn setup(c: &Common, conn: &mut Conn, st: &mut Stats) -> Result<(), StepError> {
    let (step, path, body) = match c.scenario {
        Scenario::SessionRenew => (
            "setup session create",
            "/v1/session/create",
            sc::SESSION_CREATE_TTL_BODY,
        ),
        Scenario::KvAcquireRelease | Scenario::KvAcquireReleaseHot => (
            "setup session create",
            "/v1/session/create",
            sc::SESSION_CREATE_BODY,
        ),
        Scenario::EtcdLeaseKeepalive | Scenario::EtcdLockHot => (
            "setup lease grant",
            sc::ETCD_LEASE_GRANT_PATH,
            sc::ETCD_LEASE_GRANT_BODY,
        ),
        Scenario::SessionCreateDestroy | Scenario::EtcdLeaseGrantRevoke | Scenario::EtcdPut => {
            return Ok(());
        }
    };
    let method = match c.scenario.system() {
        sc::System::Cairn => Method::PUT,
        sc::System::Etcd => Method::POST,
    };
    let (status, b) = call(c, conn, st, method, path, Body::Json(body.to_owned())).await?;
    conn.handle = Some(sc::expect_id(step, status, &b)?);
    Ok(())
}

/// Best-effort cleanup after the window: destroy the session, revoke the lease.
async fn teardown(c: &Common, conn: &mut Conn, st: &mut Stats) {
    let Some(id) = conn.handle.take() else {
        return;
    };
    let _ = match c.scenario.system() {
        sc::System::Cairn => {
            call(
                c,
                conn,
                st,
                Method::PUT,
                &sc::session_destroy_path(&id),
                Body::None,
            )
            .await
        }
        sc::System::Etcd => {
            let body = Body::Json(sc::etcd_lease_id_body(&id));
            call(c, conn, st, Method::POST, sc::ETCD_LEASE_REVOKE_PATH, body).await
        }
    };
}

fn handle(conn: &Conn) -> Result<String, StepError> {
    conn.handle
        .clone()
        .ok_or_else(|| StepError::Unexpected(Unexpected("no session or lease from setup".into())))
}

/// One iteration of the scenario; see `cairn_bench::scenario` for what each one sends.
async fn iteration(c: &Common, conn: &mut Conn, st: &mut Stats) -> Result<Attempt, StepError> {
    match c.scenario {
        Scenario::SessionCreateDestroy => {
            let body = Body::Json(sc::SESSION_CREATE_BODY.to_owned());
            let (s, b) = call(c, conn, st, Method::PUT, "/v1/session/create", body).await?;
            let id = sc::expect_id("session create", s, &b)?;
            let path = sc::session_destroy_path(&id);
            let (s, b) = call(c, conn, st, Method::PUT, &path, Body::None).await?;
            if !sc::expect_bool("session destroy", s, &b)? {
                return Err(Unexpected("session destroy answered false".into()).into());
            }
            Ok(Attempt::Op)
        }
        Scenario::SessionRenew => {
            let id = handle(conn)?;
            let path = sc::session_renew_path(&id);
            let (s, b) = call(c, conn, st, Method::PUT, &path, Body::None).await?;
            sc::expect_renewed("session renew", s, &b, &id)?;
            Ok(Attempt::Op)
        }
        Scenario::KvAcquireRelease | Scenario::KvAcquireReleaseHot => {
            let id = handle(conn)?;
            let hot = c.scenario == Scenario::KvAcquireReleaseHot;
            let key = if hot {
                sc::kv_hot_key(conn.rng.below(c.hot_keys))
            } else {
                sc::kv_conn_key(conn.id)
            };
            let value = conn.value.clone();
            let path = sc::kv_acquire_path(&key, &id);
            let (s, b) = call(c, conn, st, Method::PUT, &path, Body::Raw(&value)).await?;
            if !sc::expect_bool("kv acquire", s, &b)? {
                if hot {
                    return Ok(Attempt::Contended);
                }
                return Err(Unexpected(format!(
                    "kv acquire of {key}, held by nobody else, answered false"
                ))
                .into());
            }
            let path = sc::kv_release_path(&key, &id);
            let (s, b) = call(c, conn, st, Method::PUT, &path, Body::Raw(&value)).await?;
            if !sc::expect_bool("kv release", s, &b)? {
                return Err(Unexpected(format!(
                    "kv release of {key} by its holder answered false"
                ))
                .into());
            }
            Ok(Attempt::Op)
        }
        Scenario::EtcdLeaseGrantRevoke => {
            let body = Body::Json(sc::ETCD_LEASE_GRANT_BODY.to_owned());
            let (s, b) = call(c, conn, st, Method::POST, sc::ETCD_LEASE_GRANT_PATH, body).await?;
            let id = sc::expect_id("lease grant", s, &b)?;
            let body = Body::Json(sc::etcd_lease_id_body(&id));
            let (s, b) = call(c, conn, st, Method::POST, sc::ETCD_LEASE_REVOKE_PATH, body).await?;
            sc::expect_etcd_ok("lease revoke", s, &b)?;
            Ok(Attempt::Op)
        }
        Scenario::EtcdLeaseKeepalive => {
            let id = handle(conn)?;
            let body = Body::Json(sc::etcd_lease_id_body(&id));
            let (s, b) = call(
                c,
                conn,
                st,
                Method::POST,
                sc::ETCD_LEASE_KEEPALIVE_PATH,
                body,
            )
            .await?;
            sc::expect_keepalive("lease keepalive", s, &b)?;
            Ok(Attempt::Op)
        }
        Scenario::EtcdPut => {
            let key = conn.rng.alnum(8);
            let body = Body::Json(sc::etcd_put_body(&key, &conn.value));
            let (s, b) = call(c, conn, st, Method::POST, sc::ETCD_PUT_PATH, body).await?;
            sc::expect_etcd_ok("put", s, &b)?;
            Ok(Attempt::Op)
        }
        Scenario::EtcdLockHot => {
            let lease = handle(conn)?;
            let key = sc::etcd_hot_key(conn.rng.below(c.hot_keys));
            let who = conn.id.to_string();
            let body = Body::Json(sc::etcd_lock_txn_body(
                key.as_bytes(),
                who.as_bytes(),
                &lease,
            ));
            let (s, b) = call(c, conn, st, Method::POST, sc::ETCD_TXN_PATH, body).await?;
            if !sc::expect_txn("lock txn", s, &b)? {
                return Ok(Attempt::Contended);
            }
            let body = Body::Json(sc::etcd_delete_body(key.as_bytes()));
            let (s, b) = call(c, conn, st, Method::POST, sc::ETCD_DELETE_RANGE_PATH, body).await?;
            sc::expect_etcd_ok("unlock deleterange", s, &b)?;
            Ok(Attempt::Op)
        }
    }
}

async fn run_scenario_connection(c: Arc<Common>, w: Window, mut conn: Conn) -> Stats {
    let mut st = Stats::default();
    let mut iterations: u64 = 0;
    loop {
        let now = Instant::now();
        if now >= w.end {
            break;
        }
        if iterations >= w.per_conn_max {
            st.capped = true;
            break;
        }
        iterations += 1;
        let t0 = Instant::now();
        let deadline = (t0 + c.timeout).min(w.end);
        let res = timeout_at(deadline, iteration(&c, &mut conn, &mut st)).await;
        let t1 = Instant::now();
        let counted = t0 >= w.warm_end && t1 <= w.end;
        match res {
            Ok(Ok(Attempt::Op)) => {
                if counted {
                    st.hist
                        .record(u64::try_from((t1 - t0).as_micros()).unwrap_or(u64::MAX));
                }
            }
            Ok(Ok(Attempt::Contended)) => {
                if counted {
                    st.contended += 1;
                }
            }
            Ok(Err(e)) => {
                if counted {
                    match &e {
                        StepError::Connect(_) => st.connect_errors += 1,
                        StepError::Io(_) => st.io_errors += 1,
                        StepError::Unexpected(_) => st.bad_status += 1,
                    }
                    st.note(&e);
                }
                if matches!(e, StepError::Connect(_)) {
                    // Do not spin on a refusing port.
                    sleep(Duration::from_millis(10)).await;
                }
            }
            Err(_) => {
                conn.sender = None; // state unknown: never reuse a connection with a request in flight
                if deadline >= w.end {
                    break; // cut off by the end of the window: neither success nor error
                }
                if t0 >= w.warm_end {
                    st.timeouts += 1;
                    st.note(format!("iteration timeout after {:?}", c.timeout));
                }
            }
        }
    }
    st.stopped = Some(Instant::now().min(w.end));
    let mut cleanup = Stats::default();
    let _ = tokio::time::timeout(c.timeout, teardown(&c, &mut conn, &mut cleanup)).await;
    st
}

/// Sets up every connection (untimed), then runs the scenario on all of them.
async fn run_scenario(
    args: &Args,
    target: Target,
    scenario: Scenario,
) -> Result<(Stats, f64), String> {
    let common = Arc::new(Common {
        target,
        scenario,
        headers: args.headers.clone(),
        timeout: Duration::from_secs_f64(args.timeout),
        hot_keys: args.hot_keys,
    });
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let t_setup = Instant::now();
    let setups: Vec<_> = (0..args.conns)
        .map(|id| {
            let c = Arc::clone(&common);
            tokio::spawn(async move {
                let mut conn = Conn {
                    id,
                    sender: None,
                    handle: None,
                    rng: Rng::new(seed ^ (u64::from(id) << 32) ^ u64::from(id)),
                    value: Bytes::from(sc::value_for(id)),
                };
                let mut st = Stats::default();
                let done = timeout_at(Instant::now() + c.timeout, async {
                    // Connect even when there is nothing to create, so the window starts
                    // with every connection open.
                    ensure_connected(&c, &mut conn, &mut st).await?;
                    setup(&c, &mut conn, &mut st).await
                })
                .await;
                match done {
                    Ok(Ok(())) => Ok(conn),
                    Ok(Err(e)) => Err(format!("setup of connection {id}: {e}")),
                    Err(_) => Err(format!("setup of connection {id}: timeout")),
                }
            })
        })
        .collect();
    let mut conns = Vec::with_capacity(setups.len());
    for t in setups {
        conns.push(t.await.map_err(|e| format!("setup task failed: {e}"))??);
    }
    eprintln!(
        "loadgen: {scenario}: {} connections set up in {:.0} ms",
        conns.len(),
        t_setup.elapsed().as_secs_f64() * 1e3
    );

    let start = Instant::now();
    let warm_end = start + Duration::from_secs_f64(args.warmup);
    let w = Window {
        warm_end,
        end: warm_end + Duration::from_secs_f64(args.duration),
        per_conn_max: args.max_requests.div_ceil(u64::from(args.conns)),
    };
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|conn| tokio::spawn(run_scenario_connection(Arc::clone(&common), w, conn)))
        .collect();
    let total = join_all(tasks).await;
    let secs = measured_secs(&total, warm_end, args.duration);
    Ok((total, secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn cli_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn flags_parse() {
        let a = Args::try_parse_from([
            "loadgen",
            "--url",
            "http://127.0.0.1:8200/v1/kv",
            "--name",
            "kv-put",
            "--conns",
            "4",
            "--method",
            "PUT",
            "--body",
            "{}",
            "--header",
            "X-Vault-Token: t",
            "--expect",
            "200,204",
        ])
        .unwrap();
        assert_eq!(a.conns, 4);
        assert_eq!(a.method.as_deref(), Some("PUT"));
        assert_eq!(a.headers.len(), 1);
        assert_eq!(a.expect, Some(Expect::Codes(vec![200, 204])));
        assert_eq!(a.scenario, None);
        assert_eq!((a.warmup, a.duration), (2.0, 10.0));
        assert!(Args::try_parse_from(["loadgen", "--url", "http://x/", "--conns", "0"]).is_err());
        assert!(
            Args::try_parse_from(["loadgen", "--url", "http://x/", "--header", "bad"]).is_err()
        );
    }

    #[test]
    fn scenario_flags() {
        let a = Args::try_parse_from([
            "loadgen",
            "--url",
            "http://127.0.0.1:2379",
            "--scenario",
            "etcd-lock-hot",
            "--hot-keys",
            "4",
            "--header",
            "X-Consul-Token: t",
        ])
        .unwrap();
        assert_eq!(a.scenario, Some(Scenario::EtcdLockHot));
        assert_eq!(a.hot_keys, 4);
        let a = Args::try_parse_from(["loadgen", "--url", "http://x/", "--scenario", "etcd-put"])
            .unwrap();
        assert_eq!(a.hot_keys, 8);
        for bad in [["--scenario", "no-such-scenario"], ["--hot-keys", "0"]] {
            let mut argv = vec!["loadgen", "--url", "http://127.0.0.1/"];
            argv.extend(bad);
            assert!(Args::try_parse_from(argv).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn scenario_mode_refuses_single_request_flags_and_paths() {
        // These fail before any connection is opened.
        for extra in [
            &["--method", "PUT"][..],
            &["--body", "{}"][..],
            &["--expect", "200"][..],
        ] {
            let mut argv = vec![
                "loadgen",
                "--url",
                "http://127.0.0.1:9/",
                "--scenario",
                "session-renew",
            ];
            argv.extend(extra);
            let err = real_main(Args::try_parse_from(argv).unwrap()).unwrap_err();
            assert!(err.contains("do not apply with --scenario"), "{err}");
        }
        let argv = [
            "loadgen",
            "--url",
            "http://127.0.0.1:9/v1/session/create",
            "--scenario",
            "session-create-destroy",
        ];
        let err = real_main(Args::try_parse_from(argv).unwrap()).unwrap_err();
        assert!(err.contains("must have no path"), "{err}");
    }

    #[test]
    fn conn_header_file_gives_one_header_per_line() {
        let dir = std::env::temp_dir().join(format!("loadgen-conn-headers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tokens");
        std::fs::write(
            &file,
            "Authorization: Bearer a\n\nAuthorization: Bearer b\n",
        )
        .unwrap();
        let headers = read_conn_headers(file.to_str().unwrap()).unwrap();
        assert_eq!(headers.len(), 2);
        assert_eq!(headers[1].1, "Bearer b");
        std::fs::write(&file, "\n").unwrap();
        assert!(read_conn_headers(file.to_str().unwrap()).is_err());
        std::fs::write(&file, "no colon\n").unwrap();
        assert!(read_conn_headers(file.to_str().unwrap()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
