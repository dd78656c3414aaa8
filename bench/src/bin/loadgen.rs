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
//! Invariants:
//! - Targets are loopback only (`cairn_bench::target::Target::parse` refuses anything else).
//! - The run is bounded in time (warm-up + duration ≤ 600 s, each request also has a
//!   timeout) and in count (`--max-requests`), and stops by itself.
//! - A request is counted only if it started after the warm-up, finished inside the window,
//!   and its status matched `--expect`; its latency is then recorded. A mismatched status,
//!   a connection/IO error or a timeout inside the window counts as an error instead.
//!   Requests cut off by the end of the window count as neither.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_bench::histogram::Histogram;
use cairn_bench::target::{Expect, Target, parse_header};
use clap::Parser;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HOST, HeaderName, HeaderValue};
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
    /// Target URL, http:// on a loopback address (127.0.0.0/8, [::1], localhost).
    #[arg(long)]
    url: String,
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
    /// HTTP method.
    #[arg(long, default_value = "GET")]
    method: String,
    /// Request body (sent with a Content-Length).
    #[arg(long)]
    body: Option<String>,
    /// Extra request header, 'Name: value'; repeatable.
    #[arg(long = "header", value_parser = parse_header)]
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Statuses that count as success: a class like 2xx, or codes like 200,204.
    #[arg(long, default_value = "2xx", value_parser = Expect::parse)]
    expect: Expect,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
    /// Upper bound on requests sent over the whole run (all connections together).
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

fn build_request(plan: &Plan) -> Request<Full<Bytes>> {
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

async fn run_connection(plan: Arc<Plan>) -> Stats {
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
        let req = build_request(&plan);
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
    let method = Method::from_bytes(args.method.to_ascii_uppercase().as_bytes())
        .map_err(|e| format!("bad --method {:?}: {e}", args.method))?;

    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if args.threads > 0 {
        rt.worker_threads(args.threads);
    }
    let rt = rt.build().map_err(|e| format!("tokio runtime: {e}"))?;

    let conns = u64::from(args.conns);
    let stats = rt.block_on(async {
        let start = Instant::now();
        let warm_end = start + Duration::from_secs_f64(args.warmup);
        let plan = Arc::new(Plan {
            target,
            method,
            body: Bytes::from(args.body.clone().unwrap_or_default()),
            headers: args.headers.clone(),
            expect: args.expect.clone(),
            timeout: Duration::from_secs_f64(args.timeout),
            per_conn_max: args.max_requests.div_ceil(conns),
            warm_end,
            end: warm_end + Duration::from_secs_f64(args.duration),
        });
        let tasks: Vec<_> = (0..conns)
            .map(|_| tokio::spawn(run_connection(Arc::clone(&plan))))
            .collect();
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
        let secs = if total.capped {
            total.stopped.map_or(args.duration, |s| {
                s.saturating_duration_since(warm_end).as_secs_f64()
            })
        } else {
            args.duration
        };
        (total, secs)
    });
    let (st, secs) = stats;

    let requests = st.hist.count();
    let rps = if secs > 0.0 {
        requests as f64 / secs
    } else {
        0.0
    };
    eprintln!(
        "loadgen: name={} requests={} errors={} (connect={} io={} timeout={} status={}) reconnects={}{} mean_us={:.1} min_us={}{}",
        args.name,
        requests,
        st.errors(),
        st.connect_errors,
        st.io_errors,
        st.timeouts,
        st.bad_status,
        st.reconnects,
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
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "RESULT name={} url={} conns={} secs={} requests={} errors={} rps={:.1} p50_us={} p99_us={} max_us={}",
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
    )
    .and_then(|()| out.flush())
    .map_err(|e| format!("writing result: {e}"))?;
    Ok(())
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
        assert_eq!(a.method, "PUT");
        assert_eq!(a.headers.len(), 1);
        assert_eq!(a.expect, Expect::Codes(vec![200, 204]));
        assert_eq!((a.warmup, a.duration), (2.0, 10.0));
        assert!(Args::try_parse_from(["loadgen", "--url", "http://x/", "--conns", "0"]).is_err());
        assert!(
            Args::try_parse_from(["loadgen", "--url", "http://x/", "--header", "bad"]).is_err()
        );
    }
}
