//! TOTP MFA methods end to end (`sys/mfa/method/totp/*` and the `X-Vault-MFA` check): method
//! CRUD with Vault's defaults and errors; generate for the caller's entity (a userpass login)
//! whose barcode decodes back to the otpauth URL; admin-generate and admin-destroy under both
//! path spellings; and a policy whose rule lists `mfa_methods`, which refuses a request without
//! a valid code, accepts a code once, refuses its replay and locks the entity out after
//! `max_validation_attempts` failures until the window passes, across a restart too. Time is a
//! `ManualClock`; codes are computed from the key in the returned URL.

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use base64::Engine as _;
use http::StatusCode;
use qrcodegen_image::image::{ImageDecoder, codecs::png::PngDecoder};
use secrets::State;
use serde_json::{Value, json};
use stdx::clock::Clock as _;
use storage::Storage;
use support::call;
use testkit::ManualClock;

const ROOT: &str = "root-token-for-mfa-tests";

/// A manual clock one second past a 30-second boundary, near the real time (so a code stays
/// valid until the test moves the clock).
fn aligned_clock() -> ManualClock {
    let now = ManualClock::at_system_time().now_ms();
    ManualClock::new((now / 30_000) * 30_000 + 1_000)
}

async fn open(
    storage: Arc<dyn Storage>,
    clock: &ManualClock,
    key_file: &std::path::Path,
) -> Router {
    let state = State::open_with_clock(
        storage,
        support::dev_config(ROOT, Some(key_file.to_path_buf())),
        Arc::new(clock.clone()),
    )
    .await
    .unwrap();
    secrets::router(state)
}

/// A dev store on `clock` with userpass enabled.
async fn dev_with_userpass(clock: &ManualClock) -> (Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let app = open(testkit::mem_storage(), clock, &dir.path().join("key")).await;
    enable_userpass(&app).await;
    (app, dir)
}

async fn enable_userpass(app: &Router) {
    let (status, body) = root(
        app,
        "POST",
        "sys/auth/userpass",
        Some(json!({"type": "userpass"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

async fn root(app: &Router, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    call(app, method, &format!("/v1/{path}"), Some(ROOT), body).await
}

/// Creates userpass user `name` holding `policies` and logs in: (token, entity id).
async fn user(app: &Router, name: &str, policies: &str) -> (String, String) {
    let (status, body) = root(
        app,
        "POST",
        &format!("auth/userpass/users/{name}"),
        Some(json!({"password": "pw", "token_policies": policies})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call(
        app,
        "POST",
        &format!("/v1/auth/userpass/login/{name}"),
        None,
        Some(json!({"password": "pw"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    (
        body["auth"]["client_token"].as_str().unwrap().to_owned(),
        body["auth"]["entity_id"].as_str().unwrap().to_owned(),
    )
}

async fn write_method(app: &Router, name: &str, body: Value) {
    let (status, answer) = root(
        app,
        "POST",
        &format!("sys/mfa/method/totp/{name}"),
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
}

/// One request as `token` with `mfa` as `header` values (repeated headers).
async fn with_mfa(
    app: &Router,
    method: &str,
    path: &str,
    token: &str,
    header: &str,
    mfa: &[&str],
) -> (StatusCode, Value) {
    let mut request =
        testkit::request(method, &format!("/v1/{path}")).header("X-Vault-Token", token);
    for value in mfa {
        request = request.header(header, *value);
    }
    let response = testkit::call(app, request.body(Body::empty()).unwrap()).await;
    (response.status, response.json())
}

/// The key and parameters in an otpauth URL.
fn key_of(url: &str) -> (Vec<u8>, secrets_totp::Params) {
    let query = url.split_once('?').unwrap().1;
    let get = |name: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .unwrap()
            .to_owned()
    };
    let params = secrets_totp::Params {
        algorithm: secrets_totp::Algorithm::parse(&get("algorithm")).unwrap(),
        digits: get("digits").parse().unwrap(),
        period: get("period").parse().unwrap(),
        skew: 0,
    };
    (secrets_totp::decode_base32(&get("secret")).unwrap(), params)
}

fn code_now(url: &str, clock: &ManualClock) -> String {
    let (key, params) = key_of(url);
    let secs = u64::try_from(clock.now_ms() / 1000).unwrap();
    secrets_totp::code_at(&key, &params, secs)
}

/// A code for the same key that is wrong now (the code of a far-away time, checked).
fn wrong_code(url: &str, clock: &ManualClock, salt: u64) -> String {
    let (key, params) = key_of(url);
    let now = u64::try_from(clock.now_ms() / 1000).unwrap();
    let good = secrets_totp::code_at(&key, &params, now);
    (1..)
        .map(|i| secrets_totp::code_at(&key, &params, now + 100_000 * (i + salt)))
        .find(|code| *code != good)
        .unwrap()
}

/// Decodes a base64 PNG QR barcode: (width, height, text).
fn decode_barcode(barcode: &str) -> (u32, u32, String) {
    let png = base64::engine::general_purpose::STANDARD
        .decode(barcode)
        .unwrap();
    let decoder = PngDecoder::new(std::io::Cursor::new(png)).unwrap();
    let (width, height) = decoder.dimensions();
    let mut pixels = vec![0u8; usize::try_from(decoder.total_bytes()).unwrap()];
    decoder.read_image(&mut pixels).unwrap();
    let w = usize::try_from(width).unwrap();
    let h = usize::try_from(height).unwrap();
    let mut prepared = rqrr::PreparedImage::prepare_from_greyscale(w, h, |x, y| pixels[y * w + x]);
    let grids = prepared.detect_grids();
    assert_eq!(grids.len(), 1, "one QR code in the barcode");
    let (_, text) = grids[0].decode().unwrap();
    (width, height, text)
}

#[tokio::test]
async fn method_crud_has_vaults_defaults_and_errors() {
    let clock = aligned_clock();
    let (app, _dir) = dev_with_userpass(&clock).await;
    let (status, _) = root(&app, "LIST", "sys/mfa/method/totp", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    write_method(&app, "my_totp", json!({"issuer": "vault"})).await;
    let (status, body) = root(&app, "GET", "sys/mfa/method/totp/my_totp", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let id = body["data"]["id"].as_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
    assert_eq!(
        body["data"],
        json!({
            "algorithm": "SHA1", "digits": 6, "id": id, "issuer": "vault", "key_size": 20,
            "max_validation_attempts": 5, "name": "my_totp", "period": 30, "qr_size": 200,
            "skew": 1, "type": "totp"
        })
    );

    // A write replaces every field and keeps the id; weak types and durations are accepted.
    write_method(
        &app,
        "my_totp",
        json!({"issuer": "Acme", "period": "1m", "digits": "8", "algorithm": "SHA512",
               "skew": 0, "key_size": 32, "qr_size": 0, "max_validation_attempts": 0}),
    )
    .await;
    let (_, body) = root(&app, "GET", "sys/mfa/method/totp/my_totp", None).await;
    assert_eq!(body["data"]["id"], id.as_str());
    assert_eq!(body["data"]["period"], 60);
    assert_eq!(body["data"]["digits"], 8);
    assert_eq!(body["data"]["algorithm"], "SHA512");
    assert_eq!(body["data"]["skew"], 0);
    assert_eq!(body["data"]["qr_size"], 0);
    assert_eq!(body["data"]["max_validation_attempts"], 5);

    write_method(&app, "second", json!({"issuer": "x"})).await;
    let (status, body) = root(&app, "LIST", "sys/mfa/method/totp", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["keys"], json!(["my_totp", "second"]));

    for (fields, message) in [
        (json!({}), "issuer must be set"),
        (
            json!({"issuer": "v", "digits": 7}),
            "digits can only be 6 or 8",
        ),
        (json!({"issuer": "v", "skew": 2}), "skew must be 0 or 1"),
        (
            json!({"issuer": "v", "algorithm": "MD5"}),
            "unrecognized algorithm",
        ),
        (
            json!({"issuer": "v", "algorithm": "sha1"}),
            "unrecognized algorithm",
        ),
        (
            json!({"issuer": "v", "period": 0}),
            "period must be greater than zero",
        ),
        (
            json!({"issuer": "v", "key_size": 0}),
            "key_size must be greater than zero",
        ),
        (
            json!({"issuer": "v", "max_validation_attempts": -1}),
            "max_validation_attempts must be greater than zero",
        ),
        (
            json!({"issuer": "v", "qr_size": -1}),
            "qr_size must be between 0 and 4096",
        ),
        (
            json!({"issuer": "v", "key_size": 1_000_000}),
            "key_size must be at most 1024",
        ),
    ] {
        let (status, body) = root(
            &app,
            "POST",
            "sys/mfa/method/totp/bad",
            Some(fields.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{fields}: {body}");
        assert_eq!(body["errors"], json!([message]), "{fields}");
    }
    let (status, body) = root(
        &app,
        "POST",
        "sys/mfa/method/totp/bad",
        Some(json!({"issuer": "v", "digits": "six"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = root(&app, "GET", "sys/mfa/method/totp/bad", None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "nothing stored by a refused write"
    );

    let (status, _) = root(&app, "DELETE", "sys/mfa/method/totp/second", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = root(&app, "DELETE", "sys/mfa/method/totp/second", None).await;
    assert_eq!(
        status,
        StatusCode::NO_CONTENT,
        "deleting a missing method is fine"
    );
    let (status, body) = root(&app, "GET", "sys/mfa/method/totp/second", None).await;
    assert_eq!(
        (status, body),
        (StatusCode::NOT_FOUND, json!({"errors": []}))
    );
    let (status, _) = root(&app, "GET", "sys/mfa/method/totp/bad%20name", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn generate_for_the_callers_entity_returns_a_url_and_a_barcode_that_decodes_to_it() {
    let clock = aligned_clock();
    let (app, _dir) = dev_with_userpass(&clock).await;
    write_method(&app, "my_totp", json!({"issuer": "vault"})).await;
    let rules = r#"path "sys/mfa/method/totp/my_totp/generate" { capabilities = ["read"] }"#;
    support::put_policy(&app, ROOT, "enroll", rules).await;
    let (token, entity) = user(&app, "dana", "enroll").await;

    let (status, body) = call(
        &app,
        "GET",
        "/v1/sys/mfa/method/totp/my_totp/generate",
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let url = body["data"]["url"].as_str().unwrap().to_owned();
    let prefix = format!(
        "otpauth://totp/vault:{entity}?algorithm=SHA1&digits=6&issuer=vault&period=30&secret="
    );
    assert!(url.starts_with(&prefix), "{url}");
    let (key, _) = key_of(&url);
    assert_eq!(key.len(), 20);
    let (width, height, text) = decode_barcode(body["data"]["barcode"].as_str().unwrap());
    assert_eq!((width, height), (200, 200));
    assert_eq!(text, url);

    // A second generate makes nothing: 200, a warning, no data.
    let (status, body) = call(
        &app,
        "GET",
        "/v1/sys/mfa/method/totp/my_totp/generate",
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"], Value::Null);
    assert_eq!(
        body["warnings"],
        json!(["Entity already has a secret for MFA method \"my_totp\""])
    );

    // The root token has no entity.
    let (status, body) = root(&app, "GET", "sys/mfa/method/totp/my_totp/generate", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["errors"], json!(["missing entityID"]));
    let (status, body) = call(
        &app,
        "GET",
        "/v1/sys/mfa/method/totp/nope/generate",
        Some(&token),
        None,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "the policy does not cover it: {body}"
    );
    let (status, body) = root(
        &app,
        "POST",
        "sys/mfa/method/totp/nope/admin-generate",
        Some(json!({"entity_id": entity})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body["errors"],
        json!(["configuration for method name \"nope\" does not exist"])
    );
}

#[tokio::test]
async fn admin_generate_and_admin_destroy_work_under_both_path_spellings() {
    let clock = aligned_clock();
    let (app, _dir) = dev_with_userpass(&clock).await;
    write_method(
        &app,
        "ops",
        json!({"issuer": "Acme Corp", "digits": 8, "algorithm": "SHA256", "period": 60, "qr_size": 0, "key_size": 32}),
    )
    .await;
    let (_, entity) = user(&app, "erin", "default").await;

    let (status, body) = root(
        &app,
        "POST",
        "sys/mfa/method/totp/ops/admin-generate",
        Some(json!({})),
    )
    .await;
    assert_eq!(
        (status, body["errors"].clone()),
        (StatusCode::BAD_REQUEST, json!(["missing entityID"]))
    );
    let (status, body) = root(
        &app,
        "POST",
        "sys/mfa/method/totp/ops/admin-generate",
        Some(json!({"entity_id": "no-such-entity"})),
    )
    .await;
    assert_eq!(
        (status, body["errors"].clone()),
        (StatusCode::BAD_REQUEST, json!(["invalid entity ID"]))
    );

    let generate = json!({"entity_id": entity});
    let (status, body) = root(
        &app,
        "POST",
        "sys/mfa/method/totp/ops/admin-generate",
        Some(generate.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let url = body["data"]["url"].as_str().unwrap().to_owned();
    assert!(
        url.starts_with(&format!(
            "otpauth://totp/Acme%20Corp:{entity}?algorithm=SHA256&digits=8&issuer=Acme+Corp&period=60&secret="
        )),
        "{url}"
    );
    assert_eq!(key_of(&url).0.len(), 32);
    assert_eq!(body["data"]["barcode"], "", "qr_size 0 draws no barcode");

    for destroy in [
        "sys/mfa/method/ops/admin-destroy",
        "sys/mfa/method/totp/ops/admin-destroy",
    ] {
        let (status, body) = root(&app, "POST", destroy, Some(json!({}))).await;
        assert_eq!(
            (status, body["errors"].clone()),
            (StatusCode::BAD_REQUEST, json!(["missing entity ID"])),
            "{destroy}"
        );
        let (status, body) = root(&app, "POST", destroy, Some(generate.clone())).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{destroy}: {body}");
        // Destroyed: generating again makes a new key.
        let (status, body) = root(
            &app,
            "POST",
            "sys/mfa/method/totp/ops/admin-generate",
            Some(generate.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let fresh = body["data"]["url"].as_str().unwrap();
        assert_ne!(fresh, url);
    }
}

/// A store with method `my_totp` (`max_validation_attempts` as given), user `dana` whose
/// policy reads `secret/data/foo` only with that method, her key, and a secret there:
/// (app, token, otpauth url, temp dir holding the unseal key).
async fn mfa_protected(
    clock: &ManualClock,
    storage: Arc<dyn Storage>,
    attempts: u32,
) -> (Router, String, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let app = open(storage, clock, &dir.path().join("key")).await;
    enable_userpass(&app).await;
    write_method(
        &app,
        "my_totp",
        json!({"issuer": "vault", "max_validation_attempts": attempts}),
    )
    .await;
    let rules = r#"
        path "secret/data/foo" {
          capabilities = ["read"]
          mfa_methods  = ["my_totp"]
        }
        path "secret/data/open" {
          capabilities = ["read"]
        }
    "#;
    support::put_policy(&app, ROOT, "totp-policy", rules).await;
    let (token, entity) = user(&app, "dana", "totp-policy").await;
    let (status, body) = root(
        &app,
        "POST",
        "sys/mfa/method/totp/my_totp/admin-generate",
        Some(json!({"entity_id": entity})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let url = body["data"]["url"].as_str().unwrap().to_owned();
    for path in ["foo", "open"] {
        let (status, body) = root(
            &app,
            "POST",
            &format!("secret/data/{path}"),
            Some(json!({"data": {"v": path}})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    (app, token, url, dir)
}

fn errors(body: &Value) -> Vec<String> {
    body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_path_with_mfa_methods_accepts_a_valid_code_once() {
    let clock = aligned_clock();
    let (app, token, url, _dir) = mfa_protected(&clock, testkit::mem_storage(), 5).await;
    let read = |header: &'static str, mfa: Vec<String>| {
        let app = app.clone();
        let token = token.clone();
        async move {
            let mfa: Vec<&str> = mfa.iter().map(String::as_str).collect();
            with_mfa(&app, "GET", "secret/data/foo", &token, header, &mfa).await
        }
    };

    // No header: refused with the reason and Vault's permission denied.
    let (status, body) = read("X-Vault-MFA", vec![]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        errors(&body),
        ["MFA credentials not supplied", "permission denied"]
    );
    // Paths without mfa_methods need no header.
    let (status, body) =
        with_mfa(&app, "GET", "secret/data/open", &token, "X-Vault-MFA", &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A wrong code, a code with a space, another method's name: refused.
    let (status, body) = read(
        "X-Vault-MFA",
        vec![format!("my_totp:{}", wrong_code(&url, &clock, 0))],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        errors(&body),
        ["failed to validate TOTP passcode", "permission denied"]
    );
    let (status, _) = read(
        "X-Vault-MFA",
        vec![format!("my_totp: {}", code_now(&url, &clock))],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = read(
        "X-Vault-MFA",
        vec![format!("other:{}", code_now(&url, &clock))],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = read("X-Vault-MFA", vec!["my_totp:".to_owned()]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // The valid code, once (through the upstream header spelling).
    let code = code_now(&url, &clock);
    let (status, body) = read("X-Vault-MFA", vec![format!("my_totp:{code}")]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["data"]["v"], "foo");
    // Replayed (with the canonical spelling), even 30 s later while skew still admits it.
    let (status, body) = read("X-Secrets-MFA", vec![format!("my_totp:{code}")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        errors(&body),
        [
            "code already used; new code is available in 30 seconds",
            "permission denied"
        ]
    );
    clock.advance(Duration::from_secs(30));
    let (status, _) = read("X-Secrets-MFA", vec![format!("my_totp:{code}")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The next period's code works, also next to another method's credential in one header.
    let next = code_now(&url, &clock);
    assert_ne!(next, code);
    let (status, body) = read("X-Secrets-MFA", vec![format!("other:1, my_totp:{next}")]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn failures_beyond_max_validation_attempts_lock_the_entity_out_until_the_window_passes() {
    let clock = aligned_clock();
    let (app, token, url, _dir) = mfa_protected(&clock, testkit::mem_storage(), 3).await;
    for salt in 0..3 {
        let mfa = format!("my_totp:{}", wrong_code(&url, &clock, salt));
        let (status, body) = with_mfa(
            &app,
            "GET",
            "secret/data/foo",
            &token,
            "X-Vault-MFA",
            &[&mfa],
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(errors(&body)[0], "failed to validate TOTP passcode");
    }
    // Locked: even the valid code is refused.
    let valid = format!("my_totp:{}", code_now(&url, &clock));
    let (status, body) = with_mfa(
        &app,
        "GET",
        "secret/data/foo",
        &token,
        "X-Vault-MFA",
        &[&valid],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        errors(&body),
        [
            "maximum TOTP validation attempts 4 exceeded the allowed attempts 3. Please try again in 30s seconds",
            "permission denied"
        ]
    );
    // The window (one period from the first attempt) ends: the next code works.
    clock.advance(Duration::from_secs(30));
    let valid = format!("my_totp:{}", code_now(&url, &clock));
    let (status, body) = with_mfa(
        &app,
        "GET",
        "secret/data/foo",
        &token,
        "X-Vault-MFA",
        &[&valid],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn used_codes_and_failure_counts_survive_a_restart() {
    let clock = aligned_clock();
    let storage: Arc<dyn Storage> = testkit::mem_storage();
    let (app, token, url, dir) = mfa_protected(&clock, storage.clone(), 2).await;
    let code = format!("my_totp:{}", code_now(&url, &clock));
    let (status, body) = with_mfa(
        &app,
        "GET",
        "secret/data/foo",
        &token,
        "X-Vault-MFA",
        &[&code],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for salt in 0..2 {
        let wrong = format!("my_totp:{}", wrong_code(&url, &clock, salt));
        let (status, _) = with_mfa(
            &app,
            "GET",
            "secret/data/foo",
            &token,
            "X-Vault-MFA",
            &[&wrong],
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    drop(app);

    let app = open(storage, &clock, &dir.path().join("key")).await;
    let (status, body) = with_mfa(
        &app,
        "GET",
        "secret/data/foo",
        &token,
        "X-Vault-MFA",
        &[&code],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(errors(&body)[0].starts_with("code already used"), "{body}");
    let fresh = format!("my_totp:{}", wrong_code(&url, &clock, 7));
    let (status, body) = with_mfa(
        &app,
        "GET",
        "secret/data/foo",
        &token,
        "X-Vault-MFA",
        &[&fresh],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        errors(&body)[0].starts_with("maximum TOTP validation attempts 3"),
        "{body}"
    );
}

#[tokio::test]
async fn tokens_without_an_entity_or_a_key_are_refused_and_root_is_not_asked() {
    let clock = aligned_clock();
    let (app, _, url, _dir) = mfa_protected(&clock, testkit::mem_storage(), 5).await;
    let code = format!("my_totp:{}", code_now(&url, &clock));
    let (orphan, _) = support::create_token(&app, ROOT, json!({"policies": ["totp-policy"]})).await;
    let (status, body) = with_mfa(
        &app,
        "GET",
        "secret/data/foo",
        &orphan,
        "X-Vault-MFA",
        &[&code],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        errors(&body),
        [
            "MFA validation requires a token with an entity",
            "permission denied"
        ]
    );
    // An entity without a key for the method.
    let (other, _) = user(&app, "frank", "totp-policy").await;
    let (status, body) = with_mfa(
        &app,
        "GET",
        "secret/data/foo",
        &other,
        "X-Vault-MFA",
        &[&code],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(errors(&body)[0], "entity does not contain the TOTP secret");
    // The root policy has no rules, so no mfa_methods.
    let (status, body) = root(&app, "GET", "secret/data/foo", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Deleting the method deletes its keys: a method made again under the name needs new ones.
    let (status, _) = root(&app, "DELETE", "sys/mfa/method/totp/my_totp", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    write_method(&app, "my_totp", json!({"issuer": "vault"})).await;
    let (token, _) = user(&app, "dana", "totp-policy").await;
    let (status, body) = with_mfa(
        &app,
        "GET",
        "secret/data/foo",
        &token,
        "X-Vault-MFA",
        &[&code],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(errors(&body)[0], "entity does not contain the TOTP secret");
}
