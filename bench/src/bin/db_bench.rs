//! `db_bench`: dynamic PostgreSQL credentials per second through cairn's database engine
//! (issue 14 point 5), next to raw `CREATE ROLE` + `DROP ROLE` over the same kind of
//! connection pool, measured in the same run.
//!
//! Where it sits: run it against a `cairn dev` (release build for meaningful numbers) and the
//! local PostgreSQL: `cargo run --release -p cairn-bench --bin db_bench -- --url
//! http://127.0.0.1:8200 --token <root token>`. It mounts a `database` engine at a throwaway
//! path, configures a connection to `--pg-url` with `max_open_connections = --pool`, and a role
//! whose creation statement is `CREATE ROLE ... LOGIN PASSWORD ... VALID UNTIL ...` and whose
//! revocation statement is `DROP ROLE`. Scenarios, each over `--conns` keep-alive connections
//! for `--warmup` + `--duration` seconds:
//! - `db-creds-revoke`: `GET creds/:role` then `PUT sys/leases/revoke` of its lease, one pair
//!   per operation; its anchor is `--conns` tasks doing the same two statements (a 20-character
//!   password, the same `VALID UNTIL` shape) over a sqlx pool of `--pool` connections to the
//!   same server: what the database itself allows at this concurrency.
//! - `db-creds-revoke-default`: the same pair with a role without revocation statements, so the
//!   plugin's default revocation runs (Vault's: revoke on the database and every schema, then
//!   drop); no anchor, it shows what the default costs.
//!
//! Each scenario prints one line `RESULT scenario=<name> ops_per_s=<n> anchor_ops_per_s=<n|->
//! ratio=<n|-> errors=<n> server_cpu=<n|->` on stdout (`server_cpu`: cairn's CPU share over the
//! window with `--server-pid`, 100 = one core); progress goes to stderr. The mount is removed at the end
//! (which revokes any lease left).
//!
//! Invariants: cairn and PostgreSQL targets are loopback only; every run is bounded by
//! `--warmup` + `--duration` per scenario; an operation counts only if it began after the
//! warm-up, ended inside the window and both of its steps succeeded; the anchor drops every
//! role it created, even those outside the window.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_bench::target::Target;
use clap::Parser;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool};
use tokio::net::TcpStream;

/// Creds + revoke pairs per second through cairn against raw CREATE/DROP ROLE.
#[derive(Debug, Parser)]
#[command(name = "db_bench", version)]
struct Args {
    /// Base URL of cairn's secrets listener (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8200")]
    url: String,
    /// A token that may mount engines and revoke leases (the dev root token).
    #[arg(long)]
    token: String,
    /// The PostgreSQL both cairn and the anchor use (loopback only; a role that may create
    /// roles).
    #[arg(long, default_value = "postgresql://postgres@127.0.0.1:5432/test")]
    pg_url: String,
    /// Concurrent clients: keep-alive connections to cairn, tasks of the anchor.
    #[arg(long, default_value_t = 8)]
    conns: usize,
    /// Database connections: the engine's `max_open_connections` and the anchor's pool.
    #[arg(long, default_value_t = 4)]
    pool: u32,
    /// Seconds measured per scenario.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds of warm-up per scenario, not measured.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// cairn's pid, to report its CPU share over each HTTP window (`server_cpu`, 100 = one
    /// core).
    #[arg(long)]
    server_pid: Option<u32>,
}

/// CPU clock ticks (user + system) of `pid` so far, from `/proc/<pid>/stat` (USER_HZ = 100).
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some(user + system)
}

/// `pid`'s CPU share over the window (100 = one core), sampled at its two edges.
async fn cpu_share(pid: Option<u32>, window: &Window) -> Option<f64> {
    let pid = pid?;
    tokio::time::sleep_until(window.start.into()).await;
    let before = cpu_ticks(pid)?;
    tokio::time::sleep_until(window.end.into()).await;
    let after = cpu_ticks(pid)?;
    Some((after.saturating_sub(before)) as f64 / (window.end - window.start).as_secs_f64())
}

/// One keep-alive HTTP/1.1 connection to cairn carrying the token.
struct Conn {
    sender: SendRequest<Full<Bytes>>,
    host: HeaderValue,
    token: HeaderValue,
}

impl Conn {
    async fn open(target: &Target, token: &str) -> Result<Conn, String> {
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

    /// One request; the status and the JSON body (`Null` when empty or not JSON).
    async fn call(
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
        Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
    }

    /// A call that must answer 200 or 204.
    async fn ok(&mut self, method: Method, path: &str, body: Value) -> Result<Value, String> {
        let (status, value) = self.call(method.clone(), path, &body).await?;
        if status == 200 || status == 204 {
            Ok(value)
        } else {
            Err(format!("{method} {path}: {status} {value}"))
        }
    }

    /// One measured operation: a credential, then its lease revoked.
    async fn creds_then_revoke(&mut self, mount: &str, role: &str) -> Result<(), String> {
        let creds = self
            .ok(Method::GET, &format!("{mount}/creds/{role}"), Value::Null)
            .await?;
        let lease_id = creds["lease_id"]
            .as_str()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| format!("no lease_id in {creds}"))?;
        self.ok(
            Method::PUT,
            "sys/leases/revoke",
            json!({ "lease_id": lease_id }),
        )
        .await
        .map(|_| ())
    }
}

/// What finished inside the window.
#[derive(Default)]
struct Tally {
    ops: AtomicU64,
    errors: AtomicU64,
}

/// The measured window, after the warm-up.
struct Window {
    start: Instant,
    end: Instant,
}

impl Window {
    fn new(args: &Args) -> Window {
        let start = Instant::now() + Duration::from_secs_f64(args.warmup);
        Window {
            start,
            end: start + Duration::from_secs_f64(args.duration),
        }
    }

    fn record(&self, tally: &Tally, began: Instant, ok: bool) {
        if began >= self.start && Instant::now() <= self.end {
            let counter = if ok { &tally.ops } else { &tally.errors };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn rate(&self, tally: &Tally) -> f64 {
        tally.ops.load(Ordering::Relaxed) as f64 / (self.end - self.start).as_secs_f64()
    }
}

/// What one HTTP scenario measured.
struct HttpRun {
    rate: f64,
    errors: u64,
    first_error: Option<String>,
    server_cpu: Option<f64>,
}

/// `--conns` connections doing creds + revoke on `role` until the window ends.
async fn run_http(
    args: &Args,
    target: &Target,
    mount: &str,
    role: &str,
) -> Result<HttpRun, String> {
    let window = Arc::new(Window::new(args));
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for _ in 0..args.conns {
        let mut conn = Conn::open(target, &args.token).await?;
        let (window, tally) = (window.clone(), tally.clone());
        let (mount, role) = (mount.to_owned(), role.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut first_error = None;
            while Instant::now() < window.end {
                let began = Instant::now();
                let outcome = conn.creds_then_revoke(&mount, &role).await;
                window.record(&tally, began, outcome.is_ok());
                if let Err(err) = outcome {
                    first_error.get_or_insert(err);
                }
            }
            first_error
        }));
    }
    let server_cpu = cpu_share(args.server_pid, &window).await;
    let mut first_error = None;
    for task in tasks {
        if let Some(err) = task.await.map_err(|err| err.to_string())? {
            first_error.get_or_insert(err);
        }
    }
    Ok(HttpRun {
        rate: window.rate(&tally),
        errors: tally.errors.load(Ordering::Relaxed),
        first_error,
        server_cpu,
    })
}

/// A password of the engine's default length (20), distinct per call; its content does not
/// change what the server does with it.
fn password(task: usize, n: u64) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{:08x}{:04x}{:08x}", nanos, task & 0xffff, n & 0xffff_ffff)
}

/// The anchor: `--conns` tasks doing CREATE ROLE (`VALID UNTIL valid_until`) then DROP ROLE
/// over `pool`.
async fn run_raw(args: &Args, pool: &PgPool, valid_until: &str) -> (f64, u64, Option<String>) {
    let window = Arc::new(Window::new(args));
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for task in 0..args.conns {
        let (window, tally, pool) = (window.clone(), tally.clone(), pool.clone());
        let valid_until = valid_until.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut first_error = None;
            let mut n = 0u64;
            while Instant::now() < window.end {
                n += 1;
                let name = format!("v-raw-bench-{}-{task}-{n}", std::process::id());
                let began = Instant::now();
                let create = format!(
                    "CREATE ROLE \"{name}\" WITH LOGIN PASSWORD '{}' VALID UNTIL '{valid_until}'",
                    password(task, n),
                );
                let outcome = match sqlx::raw_sql(AssertSqlSafe(create)).execute(&pool).await {
                    Ok(_) => sqlx::raw_sql(AssertSqlSafe(format!("DROP ROLE \"{name}\"")))
                        .execute(&pool)
                        .await
                        .map(|_| ()),
                    Err(err) => Err(err),
                };
                window.record(&tally, began, outcome.is_ok());
                if let Err(err) = outcome {
                    first_error.get_or_insert(err.to_string());
                    // Whatever happened, leave no role behind.
                    let _ = sqlx::raw_sql(AssertSqlSafe(format!("DROP ROLE IF EXISTS \"{name}\"")))
                        .execute(&pool)
                        .await;
                }
            }
            first_error
        }));
    }
    let mut first_error = None;
    for task in tasks {
        match task.await {
            Ok(Some(err)) => {
                first_error.get_or_insert(err);
            }
            Ok(None) => {}
            Err(err) => {
                first_error.get_or_insert(err.to_string());
            }
        }
    }
    (
        window.rate(&tally),
        tally.errors.load(Ordering::Relaxed),
        first_error,
    )
}

/// Prints the scenario's `RESULT` line (and its first error, if any, on stderr).
fn result(name: &str, run: &HttpRun, anchor: Option<f64>) {
    if let Some(err) = &run.first_error {
        eprintln!("db_bench: {name}: first error: {err}");
    }
    let (anchor_text, ratio) = match anchor {
        Some(anchor) if anchor > 0.0 => {
            (format!("{anchor:.1}"), format!("{:.3}", run.rate / anchor))
        }
        _ => ("-".to_owned(), "-".to_owned()),
    };
    let cpu = run
        .server_cpu
        .map_or_else(|| "-".to_owned(), |c| format!("{c:.0}"));
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "RESULT scenario={name} ops_per_s={:.1} anchor_ops_per_s={anchor_text} ratio={ratio} errors={} server_cpu={cpu}",
        run.rate, run.errors
    );
}

/// The PostgreSQL options of `--pg-url`, refused unless its host is loopback.
fn pg_options(url: &str) -> Result<PgConnectOptions, String> {
    let options: PgConnectOptions = url.parse().map_err(|err| format!("--pg-url: {err}"))?;
    let host = options.get_host();
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        Ok(options)
    } else {
        Err(format!("--pg-url: {host} is not a loopback address"))
    }
}

async fn bench(args: &Args) -> Result<(), String> {
    let target = Target::parse(&args.url).map_err(|err| err.to_string())?;
    let options = pg_options(&args.pg_url)?;
    let mut admin = Conn::open(&target, &args.token).await?;
    let mount = format!("db-bench-{}", std::process::id());
    admin
        .ok(
            Method::POST,
            &format!("sys/mounts/{mount}"),
            json!({"type": "database"}),
        )
        .await?;
    let outcome = scenarios(args, &target, &mut admin, &mount, options).await;
    let cleanup = admin
        .ok(Method::DELETE, &format!("sys/mounts/{mount}"), Value::Null)
        .await;
    outcome?;
    cleanup.map(|_| ())
}

async fn scenarios(
    args: &Args,
    target: &Target,
    admin: &mut Conn,
    mount: &str,
    options: PgConnectOptions,
) -> Result<(), String> {
    admin
        .ok(
            Method::POST,
            &format!("{mount}/config/pg"),
            json!({"plugin_name": "postgresql-database-plugin", "connection_url": args.pg_url,
                   "allowed_roles": "*", "max_open_connections": args.pool}),
        )
        .await?;
    let create =
        "CREATE ROLE \"{{name}}\" WITH LOGIN PASSWORD '{{password}}' VALID UNTIL '{{expiration}}';";
    admin
        .ok(
            Method::POST,
            &format!("{mount}/roles/bench"),
            json!({"db_name": "pg", "creation_statements": [create],
                   "revocation_statements": ["DROP ROLE \"{{name}}\";"], "default_ttl": "1h"}),
        )
        .await?;
    admin
        .ok(
            Method::POST,
            &format!("{mount}/roles/bench-default"),
            json!({"db_name": "pg", "creation_statements": [create], "default_ttl": "1h"}),
        )
        .await?;
    let pool = PgPoolOptions::new()
        .max_connections(args.pool)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options)
        .await
        .map_err(|err| format!("--pg-url: {err}"))?;
    // An hour ahead, as the engine renders `{{expiration}}` (Go's layout, UTC).
    let (valid_until,): (String,) = sqlx::query_as(
        "SELECT to_char((now() + interval '1 hour') AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || '+0000'",
    )
    .fetch_one(&pool)
    .await
    .map_err(|err| format!("--pg-url: {err}"))?;

    eprintln!("db_bench: db-creds-revoke: cairn over HTTP");
    let run = run_http(args, target, mount, "bench").await?;
    eprintln!("db_bench: db-creds-revoke: raw CREATE ROLE + DROP ROLE over sqlx");
    let (anchor, anchor_errors, error) = run_raw(args, &pool, &valid_until).await;
    if anchor_errors > 0 {
        eprintln!(
            "db_bench: the raw anchor had {anchor_errors} errors, the first: {}",
            error.unwrap_or_default()
        );
    }
    result("db-creds-revoke", &run, Some(anchor));

    eprintln!("db_bench: db-creds-revoke-default: cairn over HTTP");
    let run = run_http(args, target, mount, "bench-default").await?;
    result("db-creds-revoke-default", &run, None);
    pool.close().await;
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("db_bench: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(bench(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("db_bench: {err}");
            ExitCode::FAILURE
        }
    }
}
