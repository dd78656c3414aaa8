//! `ssh_bench`: throughput of cairn's ssh engine (issue 13 point 5) next to the raw signing
//! limit of the same machine, measured in the same run.
//!
//! Where it sits: `scripts/bench --suite ssh` runs it against a fresh `cairn dev` (release
//! build); by hand: `cargo run --release -p cairn-bench --bin ssh_bench -- --url
//! http://127.0.0.1:8200 --token <root token>`. It mounts an `ssh` engine at a throwaway path,
//! and for each CA type (Ed25519; RSA-4096, which the engine signs with rsa-sha2-256) measures
//! `sign/:role` calls per second over `--conns` keep-alive connections, then the same number
//! of threads signing the same kind of certificate in-process with ssh-key, the engine's own
//! library, and a CA of the same type (the anchor: no HTTP, no storage, no policy; its RSA
//! signatures are rsa-sha2-512, ssh-key's default, a hash that costs nothing next to an
//! RSA-4096 private-key operation). Then OTP `creds` + `verify` pairs per second (no anchor:
//! there is no crypto to compare with, only storage and leases). Each scenario prints one
//! `RESULT` line on stdout (format in `cairn_bench::engine_load::print_result`); progress goes
//! to stderr. The mount is removed at the end (revoking the OTP leases).
//!
//! Invariants: loopback targets only (`cairn_bench::target::Target::parse`); every run is
//! bounded by `--warmup` + `--duration` per scenario; an operation counts only if it answered
//! the expected status inside the window.

use std::process::ExitCode;
use std::time::Duration;

use cairn_bench::engine_load::{Conn, Measured, Timing, drive_http, drive_threads, print_result};
use cairn_bench::target::Target;
use clap::Parser;
use hyper::Method;
use serde_json::{Value, json};
use ssh_key::certificate::{Builder, CertType};
use ssh_key::rand_core::UnwrapErr;
use ssh_key::{Algorithm, PrivateKey};

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
    /// cairn's pid, to report its CPU share during the HTTP runs.
    #[arg(long)]
    server_pid: Option<u32>,
}

impl Args {
    fn timing(&self) -> Result<Timing, String> {
        let ok = self.duration.is_finite()
            && self.duration > 0.0
            && self.warmup.is_finite()
            && self.warmup >= 0.0;
        if self.conns == 0 || !ok {
            return Err(
                "--conns and --duration must be positive, --warmup not negative".to_owned(),
            );
        }
        Ok(Timing {
            warmup: Duration::from_secs_f64(self.warmup),
            duration: Duration::from_secs_f64(self.duration),
        })
    }
}

/// `sign/bench` of `user_key` over HTTP; success is 200 with a `signed_key`.
async fn http_sign(
    args: &Args,
    target: &Target,
    mount: &str,
    user_key: &str,
) -> Result<Measured, String> {
    let path = format!("{mount}/sign/bench");
    let body = json!({"public_key": user_key});
    drive_http(
        target,
        &args.token,
        args.conns,
        args.timing()?,
        args.server_pid,
        move |mut conn: Conn| {
            let (path, body) = (path.clone(), body.clone());
            async move {
                let ok =
                    conn.call(Method::POST, &path, &body)
                        .await
                        .is_ok_and(|(status, answer)| {
                            status == 200 && answer["data"]["signed_key"].is_string()
                        });
                (conn, ok)
            }
        },
    )
    .await
}

/// OTP `creds/otp` then `verify` of the answered key: one operation, two requests.
async fn http_otp(args: &Args, target: &Target, mount: &str) -> Result<Measured, String> {
    let (creds, verify) = (format!("{mount}/creds/otp"), format!("{mount}/verify"));
    drive_http(
        target,
        &args.token,
        args.conns,
        args.timing()?,
        args.server_pid,
        move |mut conn: Conn| {
            let (creds, verify) = (creds.clone(), verify.clone());
            async move {
                let ok = otp_pair(&mut conn, &creds, &verify).await;
                (conn, ok)
            }
        },
    )
    .await
}

async fn otp_pair(conn: &mut Conn, creds: &str, verify: &str) -> bool {
    let Ok((200, answer)) = conn
        .call(Method::POST, creds, &json!({"ip": "127.0.0.1"}))
        .await
    else {
        return false;
    };
    let otp = answer["data"]["key"].clone();
    matches!(
        conn.call(Method::POST, verify, &json!({"otp": otp})).await,
        Ok((200, _))
    )
}

/// The anchor: `conns` threads signing certificates in-process with `ca`.
fn raw_sign(args: &Args, ca: &PrivateKey, user: &PrivateKey) -> Result<Measured, String> {
    Ok(drive_threads(args.conns, args.timing()?, || {
        let mut rng = UnwrapErr(ssh_key::getrandom::SysRng);
        let mut serial = 1u64;
        move || {
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
            signed.is_ok()
        }
    }))
}

async fn bench(args: &Args) -> Result<(), String> {
    let target = Target::parse(&args.url).map_err(|err| err.to_string())?;
    args.timing()?;
    let mount = format!("ssh-bench-{}", std::process::id());
    setup(
        args,
        &target,
        Method::POST,
        &format!("sys/mounts/{mount}"),
        json!({"type": "ssh"}),
    )
    .await?;
    let outcome = scenarios(args, &target, &mount).await;
    let cleanup = setup(
        args,
        &target,
        Method::DELETE,
        &format!("sys/mounts/{mount}"),
        Value::Null,
    )
    .await;
    outcome?;
    cleanup.map(|_| ())
}

/// One setup call on a fresh connection (a connection kept across measurements may have been
/// closed by the server in between).
async fn setup(
    args: &Args,
    target: &Target,
    method: Method,
    path: &str,
    body: Value,
) -> Result<Value, String> {
    Conn::open(target, &args.token)
        .await?
        .ok(method, path, body)
        .await
}

async fn scenarios(args: &Args, target: &Target, mount: &str) -> Result<(), String> {
    let mut rng = UnwrapErr(ssh_key::getrandom::SysRng);
    let user = PrivateKey::random(&mut rng, Algorithm::Ed25519).map_err(|err| err.to_string())?;
    let user_line = user
        .public_key()
        .to_openssh()
        .map_err(|err| err.to_string())?;
    setup(
        args,
        target,
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
        setup(
            args,
            target,
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
        let http = http_sign(args, target, mount, &user_line).await?;
        eprintln!("ssh_bench: {name}: in-process anchor");
        let anchor = raw_sign(args, &ca, &user)?;
        print_result(name, &http, Some(&anchor));
    }
    setup(
        args,
        target,
        Method::POST,
        &format!("{mount}/roles/otp"),
        json!({"key_type": "otp", "default_user": "bench", "cidr_list": "127.0.0.0/8"}),
    )
    .await?;
    eprintln!("ssh_bench: ssh-otp-creds-verify: cairn over HTTP");
    let http = http_otp(args, target, mount).await?;
    print_result("ssh-otp-creds-verify", &http, None);
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
