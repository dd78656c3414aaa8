//! Load against cairn's secrets engines for the engine benchmarks (`pki_bench`, `ssh_bench`):
//! a keep-alive HTTP/1.1 JSON client carrying a Vault token ([`Conn`]), two closed-loop
//! drivers over one measured window, N connections to cairn ([`drive_http`]) and N threads
//! running the raw operation in-process ([`drive_threads`], the anchor), and the `RESULT`
//! line both are printed on ([`print_result`]).
//!
//! Where it sits: library part of `bench/`, used only by the engine benchmark binaries, which
//! `scripts/bench` runs against a fresh `cairn dev` (suites `pki` and `ssh`). They set up a
//! mount over HTTP with [`Conn::ok`], then measure every scenario twice in the same run: over
//! HTTP and in-process, on the same number of connections and threads.
//!
//! Invariants:
//! - Connections only go to a [`Target`], which is loopback by construction.
//! - An operation counts only if it began after the warm-up, ended inside the window and
//!   succeeded; a failure inside the window is an error; nothing else is counted. Latency
//!   (send to last body byte, or the whole in-process operation) is recorded for counted
//!   operations only.
//! - A driver stops starting operations when the window ends and returns once the ones in
//!   flight have finished.
//! - CPU shares are read from `/proc/<pid>/stat` at the window's two edges, so they cover the
//!   window only (100 = one core; clock ticks at USER_HZ = 100, as on every Linux target).

use std::future::Future;
use std::io::Write as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use crate::histogram::Histogram;
use crate::target::Target;

/// Clock ticks per second in `/proc/<pid>/stat` (Linux's USER_HZ).
const USER_HZ: f64 = 100.0;

/// One keep-alive connection to cairn's secrets listener, carrying a token.
#[derive(Debug)]
pub struct Conn {
    sender: SendRequest<Full<Bytes>>,
    host: HeaderValue,
    token: HeaderValue,
}

impl Conn {
    /// Connects (TCP_NODELAY) and completes the HTTP/1.1 handshake.
    pub async fn open(target: &Target, token: &str) -> Result<Conn, String> {
        let stream = TcpStream::connect(target.addr)
            .await
            .map_err(|err| format!("connect {}: {err}", target.addr))?;
        stream.set_nodelay(true).map_err(|err| err.to_string())?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|err| err.to_string())?;
        tokio::spawn(async move {
            // Ends when the sender is dropped or the server closes.
            let _ = connection.await;
        });
        Ok(Conn {
            sender,
            host: HeaderValue::from_str(&target.host).map_err(|err| err.to_string())?,
            token: HeaderValue::from_str(token).map_err(|err| err.to_string())?,
        })
    }

    /// `METHOD /v1/<path>` with `body` as JSON (none when null); the status and the answer's
    /// JSON (null when empty or not JSON).
    pub async fn call(
        &mut self,
        method: Method,
        path: &str,
        body: &Value,
    ) -> Result<(u16, Value), String> {
        let bytes = if body.is_null() {
            Bytes::new()
        } else {
            Bytes::from(body.to_string())
        };
        let mut request = Request::new(Full::new(bytes));
        *request.method_mut() = method;
        *request.uri_mut() = format!("/v1/{path}")
            .parse()
            .map_err(|err| format!("{err}"))?;
        let headers = request.headers_mut();
        headers.insert(HOST, self.host.clone());
        headers.insert("x-vault-token", self.token.clone());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        self.sender.ready().await.map_err(|err| err.to_string())?;
        let response = self
            .sender
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
        let value = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body).unwrap_or(Value::Null)
        };
        Ok((status, value))
    }

    /// A setup call that must answer 200 or 204.
    pub async fn ok(&mut self, method: Method, path: &str, body: Value) -> Result<Value, String> {
        let (status, value) = self.call(method.clone(), path, &body).await?;
        if status == 200 || status == 204 {
            Ok(value)
        } else {
            Err(format!("{method} /v1/{path}: {status} {value}"))
        }
    }
}

/// Warm-up and measured time of one scenario.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Not measured; starts once every connection is open.
    pub warmup: Duration,
    /// Measured.
    pub duration: Duration,
}

/// The measured window of one run.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

impl Window {
    fn starting_now(timing: Timing) -> Window {
        let start = Instant::now() + timing.warmup;
        Window {
            start,
            end: start + timing.duration,
        }
    }

    fn open(&self) -> bool {
        Instant::now() < self.end
    }
}

/// What one connection or thread counted.
#[derive(Debug)]
struct Recorder {
    window: Window,
    hist: Histogram,
    errors: u64,
}

impl Recorder {
    fn new(window: Window) -> Recorder {
        Recorder {
            window,
            hist: Histogram::new(),
            errors: 0,
        }
    }

    fn record(&mut self, began: Instant, ok: bool) {
        let now = Instant::now();
        if began < self.window.start || now > self.window.end {
            return;
        }
        if ok {
            self.hist.record((now - began).as_micros() as u64);
        } else {
            self.errors += 1;
        }
    }
}

/// The outcome of one run.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Counted operations per second of the window.
    pub ops_per_s: f64,
    /// Failed operations inside the window.
    pub errors: u64,
    /// Median latency of counted operations, µs.
    pub p50_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
    /// The server's CPU over the window (HTTP runs given its pid), % of one core.
    pub server_cpu: Option<f64>,
    /// This process's CPU over the window (the client, or the anchor's threads).
    pub own_cpu: Option<f64>,
}

fn measured(window: Window, recorders: Vec<Recorder>, cpu: CpuShares) -> Measured {
    let mut hist = Histogram::new();
    let mut errors = 0;
    for recorder in recorders {
        hist.merge(&recorder.hist);
        errors += recorder.errors;
    }
    Measured {
        ops_per_s: hist.count() as f64 / (window.end - window.start).as_secs_f64(),
        errors,
        p50_us: hist.quantile(0.50),
        p99_us: hist.quantile(0.99),
        server_cpu: cpu.server,
        own_cpu: cpu.own,
    }
}

/// `utime + stime` of a process, in clock ticks.
fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[derive(Debug, Default)]
struct CpuShares {
    server: Option<f64>,
    own: Option<f64>,
}

/// CPU use of the server (when known) and of this process between the window's edges.
async fn sample_cpu(window: Window, server_pid: Option<u32>) -> CpuShares {
    let server = server_pid.map(|pid| pid.to_string());
    tokio::time::sleep_until(window.start.into()).await;
    let at_start = (
        server.as_deref().and_then(cpu_ticks),
        cpu_ticks("self"),
        Instant::now(),
    );
    tokio::time::sleep_until(window.end.into()).await;
    let seconds = at_start.2.elapsed().as_secs_f64();
    let share = |before: Option<u64>, after: Option<u64>| {
        Some(100.0 * after?.saturating_sub(before?) as f64 / USER_HZ / seconds)
    };
    CpuShares {
        server: share(at_start.0, server.as_deref().and_then(cpu_ticks)),
        own: share(at_start.1, cpu_ticks("self")),
    }
}

/// Runs `op` in a closed loop on `conns` keep-alive connections: each connection has one
/// operation in flight; `op` takes the connection and gives it back with whether the
/// operation succeeded (it may make several requests). The warm-up starts once every
/// connection is open. `server_pid` adds the server's CPU share.
pub async fn drive_http<F, Fut>(
    target: &Target,
    token: &str,
    conns: usize,
    timing: Timing,
    server_pid: Option<u32>,
    op: F,
) -> Result<Measured, String>
where
    F: Fn(Conn) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = (Conn, bool)> + Send + 'static,
{
    let mut opened = Vec::with_capacity(conns);
    for _ in 0..conns {
        opened.push(Conn::open(target, token).await?);
    }
    let window = Window::starting_now(timing);
    let cpu = tokio::spawn(sample_cpu(window, server_pid));
    let mut tasks = Vec::with_capacity(conns);
    for conn in opened {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut recorder = Recorder::new(window);
            let mut conn = conn;
            while window.open() {
                let began = Instant::now();
                let (back, ok) = op(conn).await;
                conn = back;
                recorder.record(began, ok);
            }
            recorder
        }));
    }
    let mut recorders = Vec::with_capacity(conns);
    for task in tasks {
        recorders.push(task.await.map_err(|err| err.to_string())?);
    }
    let cpu = cpu.await.unwrap_or_default();
    Ok(measured(window, recorders, cpu))
}

/// The in-process anchor: `threads` OS threads, each running the operation `make()` returns
/// in a closed loop (`true` = success) over the same kind of window as [`drive_http`].
/// Blocking: call it outside the async runtime's worker threads, or from `main`.
pub fn drive_threads<F, G>(threads: usize, timing: Timing, make: F) -> Measured
where
    F: Fn() -> G + Sync,
    G: FnMut() -> bool,
{
    let window = Window::starting_now(timing);
    let make = &make;
    let (recorders, cpu) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(move || {
                    let mut op = make();
                    let mut recorder = Recorder::new(window);
                    while window.open() {
                        let began = Instant::now();
                        let ok = op();
                        recorder.record(began, ok);
                    }
                    recorder
                })
            })
            .collect();
        std::thread::sleep(window.start.saturating_duration_since(Instant::now()));
        let (before, at) = (cpu_ticks("self"), Instant::now());
        std::thread::sleep(window.end.saturating_duration_since(Instant::now()));
        let seconds = at.elapsed().as_secs_f64();
        let own = match (before, cpu_ticks("self")) {
            (Some(before), Some(after)) => {
                Some(100.0 * after.saturating_sub(before) as f64 / USER_HZ / seconds)
            }
            _ => None,
        };
        let recorders: Vec<Recorder> = handles
            .into_iter()
            .filter_map(|handle| handle.join().ok())
            .collect();
        (recorders, CpuShares { server: None, own })
    });
    measured(window, recorders, cpu)
}

/// Prints one line on stdout:
/// `RESULT scenario=<name> ops_per_s=<n> p50_us=<n> p99_us=<n> errors=<n> server_cpu=<n|->
/// client_cpu=<n|-> anchor_ops_per_s=<n|-> anchor_p50_us=<n|-> anchor_cpu=<n|-> ratio=<n|->`;
/// `ratio` is ops_per_s / anchor_ops_per_s.
pub fn print_result(name: &str, http: &Measured, anchor: Option<&Measured>) {
    let opt = |value: Option<f64>| value.map_or("-".to_owned(), |v| format!("{v:.0}"));
    let (anchor_rate, anchor_p50, anchor_cpu, ratio) = match anchor {
        Some(anchor) if anchor.ops_per_s > 0.0 => (
            format!("{:.1}", anchor.ops_per_s),
            anchor.p50_us.to_string(),
            opt(anchor.own_cpu),
            format!("{:.3}", http.ops_per_s / anchor.ops_per_s),
        ),
        _ => (
            "-".to_owned(),
            "-".to_owned(),
            "-".to_owned(),
            "-".to_owned(),
        ),
    };
    let line = format!(
        "RESULT scenario={name} ops_per_s={:.1} p50_us={} p99_us={} errors={} server_cpu={} client_cpu={} anchor_ops_per_s={anchor_rate} anchor_p50_us={anchor_p50} anchor_cpu={anchor_cpu} ratio={ratio}",
        http.ops_per_s,
        http.p50_us,
        http.p99_us,
        http.errors,
        opt(http.server_cpu),
        opt(http.own_cpu),
    );
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
