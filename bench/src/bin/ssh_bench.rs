//! `ssh_bench`: throughput of cairn's ssh engine (issue 13 point 5) next to the raw signing
//! limit of the same machine, measured in the same run.
//!
//! Where it sits: run it against a `cairn dev` (release build for meaningful numbers):
//! `cargo run --release -p cairn-bench --bin ssh_bench -- --url http://127.0.0.1:8200 --token
//! <root token>`. It mounts an `ssh` engine at a random path, and for each CA type (Ed25519,
//! RSA-4096 with rsa-sha2-256) measures `sign/:role` calls per second over `--conns`
//! keep-alive connections, then the same number of threads signing certificates in-process
//! with ssh-key and a CA of the same type (the anchor: no HTTP, no storage, no policy). Then
//! OTP `creds` + `verify` pairs per second. Each scenario prints one line
//! `RESULT scenario=<name> ops_per_s=<n> anchor_ops_per_s=<n|-> ratio=<n|-> errors=<n>` on
//! stdout; progress goes to stderr. The mount is removed at the end (revoking the OTP leases).
//!
//! Invariants: loopback targets only (`cairn_bench::target::Target::parse`); every run is
//! bounded by `--warmup` + `--duration` per scenario; a request counts only if it answered the
//! expected status inside the window.

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
use ssh_key::certificate::{Builder, CertType};
use ssh_key::rand_core::UnwrapErr;
use ssh_key::{Algorithm, PrivateKey};
use tokio::net::TcpStream;

/// The ssh engine's sign and OTP throughput against the in-process signing limit.
#[derive(Debug, Parser)]
#[command(name = "ssh_bench", version)]
struct Args {
    /// Base URL of cairn's secrets listener (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8200")]
    url: String,
    /// A token that may mount engines (the dev root token).
    #[arg(long)]
    token: String,
    /// Concurrent connections (and anchor threads).
    #[arg(long, default_value_t = 2)]
    conns: usize,
    /// Seconds measured per scenario.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds of warm-up per scenario, not measured.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
}

/// One keep-alive connection carrying the token.
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
        let value = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body).unwrap_or(Value::Null)
        };
        Ok((status, value))
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
}

/// Counts what finished inside the window.
#[derive(Default)]
struct Tally {
    ops: AtomicU64,
    errors: AtomicU64,
}

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
        let now = Instant::now();
        if began >= self.start && now <= self.end {
            let counter = if ok { &tally.ops } else { &tally.errors };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn rate(&self, tally: &Tally) -> f64 {
        tally.ops.load(Ordering::Relaxed) as f64 / (self.end - self.start).as_secs_f64()
    }
}

/// What one scenario iteration does over HTTP.
#[derive(Clone, Copy)]
enum Op {
    Sign,
    OtpCredsVerify,
}

async fn run_http(
    args: &Args,
    target: &Target,
    mount: &str,
    op: Op,
    user_key: &str,
) -> Result<(f64, u64), String> {
    let window = Arc::new(Window::new(args));
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for _ in 0..args.conns {
        let mut conn = Conn::open(target, &args.token).await?;
        let (window, tally) = (window.clone(), tally.clone());
        let (mount, user_key) = (mount.to_owned(), user_key.to_owned());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < window.end {
                let began = Instant::now();
                let ok = match op {
                    Op::Sign => conn
                        .call(
                            Method::POST,
                            &format!("{mount}/sign/bench"),
                            &json!({"public_key": user_key}),
                        )
                        .await
                        .is_ok_and(|(status, body)| {
                            status == 200 && body["data"]["signed_key"].is_string()
                        }),
                    Op::OtpCredsVerify => otp_pair(&mut conn, &mount).await,
                };
                window.record(&tally, began, ok);
            }
        }));
    }
    for task in tasks {
        task.await.map_err(|err| err.to_string())?;
    }
    Ok((window.rate(&tally), tally.errors.load(Ordering::Relaxed)))
}

async fn otp_pair(conn: &mut Conn, mount: &str) -> bool {
    let Ok((200, creds)) = conn
        .call(
            Method::POST,
            &format!("{mount}/creds/otp"),
            &json!({"ip": "127.0.0.1"}),
        )
        .await
    else {
        return false;
    };
    let otp = creds["data"]["key"].clone();
    matches!(
        conn.call(
            Method::POST,
            &format!("{mount}/verify"),
            &json!({"otp": otp})
        )
        .await,
        Ok((200, _))
    )
}

/// The anchor: `conns` threads signing certificates in-process with `ca`.
fn run_raw(args: &Args, ca: &PrivateKey, user: &PrivateKey) -> f64 {
    let window = Arc::new(Window::new(args));
    let tally = Arc::new(Tally::default());
    std::thread::scope(|scope| {
        for _ in 0..args.conns {
            let (window, tally) = (window.clone(), tally.clone());
            scope.spawn(move || {
                let mut rng = UnwrapErr(ssh_key::getrandom::SysRng);
                let mut serial = 1u64;
                while Instant::now() < window.end {
                    let began = Instant::now();
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    let signed = Builder::new_with_random_nonce(
                        &mut rng,
                        user.public_key().key_data().clone(),
                        now - 30,
                        now + 3600,
                    )
                    .and_then(|mut builder| {
                        builder.serial(serial)?;
                        builder.cert_type(CertType::User)?;
                        builder.key_id("bench")?;
                        builder.valid_principal("bench")?;
                        builder.extension("permit-pty", "")?;
                        builder.sign(ca)
                    })
                    .and_then(|cert| cert.to_openssh());
                    serial += 1;
                    window.record(&tally, began, signed.is_ok());
                }
            });
        }
    });
    window.rate(&tally)
}

fn result(name: &str, rate: f64, anchor: Option<f64>, errors: u64) {
    let (anchor_text, ratio) = match anchor {
        Some(anchor) if anchor > 0.0 => (format!("{anchor:.1}"), format!("{:.3}", rate / anchor)),
        _ => ("-".to_owned(), "-".to_owned()),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "RESULT scenario={name} ops_per_s={rate:.1} anchor_ops_per_s={anchor_text} ratio={ratio} errors={errors}"
    );
}

async fn bench(args: &Args) -> Result<(), String> {
    let target = Target::parse(&args.url).map_err(|err| err.to_string())?;
    let mut admin = Conn::open(&target, &args.token).await?;
    let mount = format!("ssh-bench-{}", std::process::id());
    admin
        .ok(
            Method::POST,
            &format!("sys/mounts/{mount}"),
            json!({"type": "ssh"}),
        )
        .await?;
    let outcome = scenarios(args, &target, &mut admin, &mount).await;
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
) -> Result<(), String> {
    let mut rng = UnwrapErr(ssh_key::getrandom::SysRng);
    let user = PrivateKey::random(&mut rng, Algorithm::Ed25519).map_err(|err| err.to_string())?;
    let user_line = user
        .public_key()
        .to_openssh()
        .map_err(|err| err.to_string())?;
    admin
        .ok(
            Method::POST,
            &format!("{mount}/roles/bench"),
            json!({"key_type": "ca", "allow_user_certificates": true, "allowed_users": "*",
                   "default_user": "bench", "default_extensions": {"permit-pty": ""},
                   "allow_user_key_ids": true}),
        )
        .await?;
    for (name, key_type, algorithm) in [
        ("ssh-sign-ed25519", "ed25519", Algorithm::Ed25519),
        ("ssh-sign-rsa4096", "rsa", Algorithm::Rsa { hash: None }),
    ] {
        eprintln!("ssh_bench: {name}: generating the CAs");
        admin
            .ok(
                Method::POST,
                &format!("{mount}/config/ca"),
                json!({"generate_signing_key": true, "key_type": key_type}),
            )
            .await?;
        let ca = match algorithm {
            Algorithm::Rsa { .. } => {
                let keypair = ssh_key::private::RsaKeypair::random(&mut rng, 4096)
                    .map_err(|err| err.to_string())?;
                PrivateKey::new(ssh_key::private::KeypairData::Rsa(keypair), "")
                    .map_err(|err| err.to_string())?
            }
            other => PrivateKey::random(&mut rng, other).map_err(|err| err.to_string())?,
        };
        eprintln!("ssh_bench: {name}: cairn over HTTP");
        let (rate, errors) = run_http(args, target, mount, Op::Sign, &user_line).await?;
        eprintln!("ssh_bench: {name}: in-process anchor");
        let anchor = run_raw(args, &ca, &user);
        result(name, rate, Some(anchor), errors);
    }
    admin
        .ok(
            Method::POST,
            &format!("{mount}/roles/otp"),
            json!({"key_type": "otp", "default_user": "bench", "cidr_list": "127.0.0.0/8"}),
        )
        .await?;
    eprintln!("ssh_bench: ssh-otp-creds-verify: cairn over HTTP");
    let (rate, errors) = run_http(args, target, mount, Op::OtpCredsVerify, &user_line).await?;
    result("ssh-otp-creds-verify", rate, None, errors);
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
            eprintln!("ssh_bench: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(bench(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("ssh_bench: {err}");
            ExitCode::FAILURE
        }
    }
}
