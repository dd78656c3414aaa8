//! `pki_bench`: throughput of cairn's pki engine (issue 12 point 6) next to the raw crypto
//! limit of the same machine, measured in the same run.
//!
//! Where it sits: `scripts/bench --suite pki` runs it against a fresh `cairn dev` (release
//! build); by hand: `cargo run --release -p cairn-bench --bin pki_bench -- --url
//! http://127.0.0.1:8200 --token <root token>`. It mounts a `pki` engine at a throwaway path,
//! generates one internal root per key type (EC P-256, Ed25519, RSA-2048) and two roles per
//! root (Vault's defaults, which store every certificate, and the same with `no_store`), then
//! for each key type measures over `--conns` keep-alive connections:
//! - `issue/<role>` with a common name (server-side key generation + signing), stored and
//!   `no_store`, against the anchor: the same number of threads generating a key of the type
//!   and signing a comparable leaf (names, usages, AKID, 1 h validity) with a CA key of the
//!   type, with rcgen on aws-lc-rs, PEM-encoding certificate and key (no HTTP, no storage, no
//!   policy) — the engine's own libraries;
//! - `sign/<role>` of a CSR made once before the run, against threads parsing the CSR
//!   (signature checked) and signing the same leaf;
//! - key generation alone in-process, to show how much of the limit it is.
//!
//! First, once: the floor of an authenticated request to the same mount, `GET roles/<name>`
//! (token lookup, policy, routing, one encrypted read, a JSON answer; no crypto), with no
//! anchor (`pki-floor-role-read`): what any `issue` costs on top of its crypto at least.
//!
//! Output: one `RESULT` line per scenario on stdout (format in `cairn_bench::engine_load::
//! print_result`); progress on stderr. The mount is removed at the end.
//!
//! Invariants: loopback targets only; every scenario is bounded by `--warmup` + `--duration`;
//! an HTTP operation counts only if it answered 200 with a certificate (and a private key for
//! `issue`) inside the window.

use std::process::ExitCode;
use std::time::Duration;

use aws_lc_rs::rand::{SecureRandom as _, SystemRandom};
use cairn_bench::engine_load::{Conn, Measured, Timing, drive_http, drive_threads, print_result};
use cairn_bench::target::Target;
use clap::Parser;
use hyper::Method;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, RsaKeySize,
    SignatureAlgorithm,
};
use serde_json::{Value, json};
use time::OffsetDateTime;

/// The pki engine's issue and sign throughput against the in-process crypto limit.
#[derive(Debug, Parser)]
#[command(name = "pki_bench", version)]
struct Args {
    /// Base URL of cairn's secrets listener (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8200")]
    url: String,
    /// A token that may mount engines (the dev root token).
    #[arg(long)]
    token: String,
    /// Concurrent connections, and threads of the in-process anchors.
    #[arg(long, default_value_t = 8)]
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
    /// Key types to run, comma-separated (ec256, ed25519, rsa2048).
    #[arg(long, default_value = "ec256,ed25519,rsa2048")]
    key_types: String,
}

/// A key type of the benchmark: its name, Vault's parameters and rcgen's algorithm.
#[derive(Debug, Clone, Copy)]
enum KeyType {
    Ec256,
    Ed25519,
    Rsa2048,
}

impl KeyType {
    fn parse(name: &str) -> Option<KeyType> {
        match name {
            "ec256" => Some(KeyType::Ec256),
            "ed25519" => Some(KeyType::Ed25519),
            "rsa2048" => Some(KeyType::Rsa2048),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            KeyType::Ec256 => "ec256",
            KeyType::Ed25519 => "ed25519",
            KeyType::Rsa2048 => "rsa2048",
        }
    }

    /// `key_type` and `key_bits` for the engine.
    fn vault(self) -> (&'static str, u32) {
        match self {
            KeyType::Ec256 => ("ec", 256),
            KeyType::Ed25519 => ("ed25519", 0),
            KeyType::Rsa2048 => ("rsa", 2048),
        }
    }

    /// The signature algorithm the engine uses with this key type (RSA: SHA-256).
    fn algorithm(self) -> &'static SignatureAlgorithm {
        match self {
            KeyType::Ec256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            KeyType::Ed25519 => &rcgen::PKCS_ED25519,
            KeyType::Rsa2048 => &rcgen::PKCS_RSA_SHA256,
        }
    }

    fn generate(self) -> Result<KeyPair, rcgen::Error> {
        match self {
            KeyType::Rsa2048 => KeyPair::generate_rsa_for(self.algorithm(), RsaKeySize::_2048),
            _ => KeyPair::generate_for(self.algorithm()),
        }
    }
}

/// The leaf's name, in the certificate and in the requests.
const LEAF_NAME: &str = "host.example.com";

/// What the engine puts in a leaf of a default role, on top of the names: a random 20-byte
/// serial, 30 s of backdating and 1 h of validity, key usages, server + client auth, AKID.
fn fill_leaf(params: &mut CertificateParams, rng: &SystemRandom) -> Result<(), rcgen::Error> {
    let mut serial = [0u8; 20];
    rng.fill(&mut serial)
        .map_err(|_| rcgen::Error::RingUnspecified)?;
    serial[0] &= 0x7f;
    params.serial_number = Some(serial.to_vec().into());
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::from_secs(30);
    params.not_after = now + Duration::from_secs(3600);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyAgreement,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    Ok(())
}

/// The anchors' CA: a fresh key of the type and a CA certificate template.
fn raw_ca(key_type: KeyType) -> Result<Issuer<'static, KeyPair>, String> {
    let key = key_type.generate().map_err(|err| err.to_string())?;
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("raw {} CA", key_type.name()));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(Issuer::new(params, key))
}

/// One raw issue: keygen, a leaf signed by `ca`, certificate and key as PEM.
fn raw_issue(
    key_type: KeyType,
    ca: &Issuer<'_, KeyPair>,
    rng: &SystemRandom,
) -> Result<(String, String), rcgen::Error> {
    let key = key_type.generate()?;
    let mut params = CertificateParams::new(vec![LEAF_NAME.to_owned()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, LEAF_NAME);
    fill_leaf(&mut params, rng)?;
    let cert = params.signed_by(&key, ca)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// One raw sign: the CSR parsed and its signature checked, the leaf signed, as PEM.
fn raw_sign(
    csr_pem: &str,
    ca: &Issuer<'_, KeyPair>,
    rng: &SystemRandom,
) -> Result<String, rcgen::Error> {
    let mut csr = CertificateSigningRequestParams::from_pem(csr_pem)?;
    fill_leaf(&mut csr.params, rng)?;
    Ok(csr.signed_by(ca)?.pem())
}

/// A CSR for [`LEAF_NAME`] with a fresh key of the type.
fn make_csr(key_type: KeyType) -> Result<String, String> {
    let key = key_type.generate().map_err(|err| err.to_string())?;
    let mut params =
        CertificateParams::new(vec![LEAF_NAME.to_owned()]).map_err(|err| err.to_string())?;
    params
        .distinguished_name
        .push(DnType::CommonName, LEAF_NAME);
    params
        .serialize_request(&key)
        .and_then(|csr| csr.pem())
        .map_err(|err| err.to_string())
}

/// An HTTP scenario: `POST /v1/<path>` with `body`; success is 200 with a certificate (and a
/// private key when `wants_key`).
async fn http_run(
    args: &Args,
    target: &Target,
    timing: Timing,
    path: String,
    body: Value,
    wants_key: bool,
) -> Result<Measured, String> {
    drive_http(
        target,
        &args.token,
        args.conns,
        timing,
        args.server_pid,
        move |mut conn: Conn| {
            let (path, body) = (path.clone(), body.clone());
            async move {
                let ok =
                    conn.call(Method::POST, &path, &body)
                        .await
                        .is_ok_and(|(status, answer)| {
                            status == 200
                                && answer["data"]["certificate"].is_string()
                                && (!wants_key || answer["data"]["private_key"].is_string())
                        });
                (conn, ok)
            }
        },
    )
    .await
}

async fn key_type_scenarios(
    args: &Args,
    target: &Target,
    timing: Timing,
    mount: &str,
    key_type: KeyType,
) -> Result<(), String> {
    let name = key_type.name();
    // A fresh connection per key type: the previous one idled through the measurements.
    let mut admin = Conn::open(target, &args.token).await?;
    let (vault_type, bits) = key_type.vault();
    eprintln!("pki_bench: {name}: root and roles");
    admin
        .ok(
            Method::POST,
            &format!("{mount}/root/generate/internal"),
            json!({"common_name": format!("cairn bench {name} root"), "issuer_name": name,
                   "key_type": vault_type, "key_bits": bits, "ttl": "720h"}),
        )
        .await?;
    for (role, no_store) in [(name.to_owned(), false), (format!("{name}-nostore"), true)] {
        admin
            .ok(
                Method::POST,
                &format!("{mount}/roles/{role}"),
                json!({"issuer_ref": name, "allowed_domains": "example.com",
                       "allow_subdomains": true, "key_type": vault_type, "key_bits": bits,
                       "ttl": "1h", "max_ttl": "24h", "no_store": no_store}),
            )
            .await?;
    }
    let issue_body = json!({"common_name": LEAF_NAME});
    let csr = make_csr(key_type)?;
    let sign_body = json!({"csr": csr});
    // One of each before measuring, so a setup mistake fails loudly instead of as errors.
    for (op, body) in [("issue", &issue_body), ("sign", &sign_body)] {
        let answer = admin
            .ok(Method::POST, &format!("{mount}/{op}/{name}"), body.clone())
            .await?;
        if !answer["data"]["certificate"].is_string() {
            return Err(format!("{op}/{name} answered no certificate: {answer}"));
        }
    }

    let ca = raw_ca(key_type)?;
    let ca = &ca;

    eprintln!("pki_bench: {name}: issue over HTTP (stored)");
    let stored = http_run(
        args,
        target,
        timing,
        format!("{mount}/issue/{name}"),
        issue_body.clone(),
        true,
    )
    .await?;
    eprintln!("pki_bench: {name}: issue over HTTP (no_store)");
    let unstored = http_run(
        args,
        target,
        timing,
        format!("{mount}/issue/{name}-nostore"),
        issue_body,
        true,
    )
    .await?;
    eprintln!("pki_bench: {name}: issue in-process (keygen + sign)");
    let raw = drive_threads(args.conns, timing, || {
        let rng = SystemRandom::new();
        move || raw_issue(key_type, ca, &rng).is_ok()
    });
    print_result(&format!("pki-issue-{name}"), &stored, Some(&raw));
    print_result(&format!("pki-issue-{name}-nostore"), &unstored, Some(&raw));

    eprintln!("pki_bench: {name}: sign over HTTP (stored)");
    let signed = http_run(
        args,
        target,
        timing,
        format!("{mount}/sign/{name}"),
        sign_body,
        false,
    )
    .await?;
    eprintln!("pki_bench: {name}: sign in-process (CSR check + sign)");
    let csr = csr.as_str();
    let raw = drive_threads(args.conns, timing, || {
        let rng = SystemRandom::new();
        move || raw_sign(csr, ca, &rng).is_ok()
    });
    print_result(&format!("pki-sign-{name}"), &signed, Some(&raw));

    eprintln!("pki_bench: {name}: key generation alone in-process");
    let keygen = drive_threads(args.conns, timing, || move || key_type.generate().is_ok());
    print_result(&format!("pki-keygen-{name}"), &keygen, None);
    Ok(())
}

/// The floor: `GET roles/floor` over HTTP, an authenticated read of one small record.
async fn floor(
    args: &Args,
    target: &Target,
    timing: Timing,
    mount: &str,
    admin: &mut Conn,
) -> Result<(), String> {
    let path = format!("{mount}/roles/floor");
    admin
        .ok(
            Method::POST,
            &path,
            json!({"allowed_domains": "example.com", "allow_subdomains": true, "ttl": "1h"}),
        )
        .await?;
    eprintln!("pki_bench: floor: GET roles/floor over HTTP");
    let measured = drive_http(
        target,
        &args.token,
        args.conns,
        timing,
        args.server_pid,
        move |mut conn: Conn| {
            let path = path.clone();
            async move {
                let ok = conn.call(Method::GET, &path, &Value::Null).await.is_ok_and(
                    |(status, answer)| status == 200 && answer["data"]["ttl"].is_number(),
                );
                (conn, ok)
            }
        },
    )
    .await?;
    print_result("pki-floor-role-read", &measured, None);
    Ok(())
}

async fn bench(args: &Args) -> Result<(), String> {
    let target = Target::parse(&args.url).map_err(|err| err.to_string())?;
    let key_types = args
        .key_types
        .split(',')
        .map(|name| KeyType::parse(name.trim()).ok_or(format!("unknown key type {name:?}")))
        .collect::<Result<Vec<_>, _>>()?;
    let times_ok = args.duration.is_finite()
        && args.duration > 0.0
        && args.warmup.is_finite()
        && args.warmup >= 0.0;
    if args.conns == 0 || !times_ok {
        return Err("--conns and --duration must be positive, --warmup not negative".to_owned());
    }
    let timing = Timing {
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
    };
    let mut admin = Conn::open(&target, &args.token).await?;
    let mount = format!("pki-bench-{}", std::process::id());
    admin
        .ok(
            Method::POST,
            &format!("sys/mounts/{mount}"),
            json!({"type": "pki"}),
        )
        .await?;
    let mut outcome = floor(args, &target, timing, &mount, &mut admin).await;
    for key_type in key_types {
        if outcome.is_err() {
            break;
        }
        outcome = key_type_scenarios(args, &target, timing, &mount, key_type).await;
    }
    eprintln!("pki_bench: unmounting {mount}");
    // The first connection has idled through the measurements.
    let mut admin = Conn::open(&target, &args.token).await?;
    let cleanup = admin
        .ok(Method::DELETE, &format!("sys/mounts/{mount}"), Value::Null)
        .await;
    outcome?;
    cleanup.map(|_| ())
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
            eprintln!("pki_bench: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(bench(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("pki_bench: {err}");
            ExitCode::FAILURE
        }
    }
}
