//! End-to-end tests of the `cairn` binary: `dev`, `server --config`, `version`, signals.
//!
//! Each test starts the real binary on port 0 (so tests run in parallel), reads the addresses
//! from its banner, and talks HTTP to it. A run that does not print `ready` within the start
//! bound fails with everything the process printed.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Cairn, http};

#[tokio::test]
async fn dev_serves_every_health_endpoint() {
    let cairn = Cairn::dev(&[]).await;
    let client = http();

    let secrets = client
        .get(cairn.url("secrets", "/v1/sys/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(secrets.status(), 200);
    assert_eq!(secrets.headers()["content-type"], "application/json");
    let body: Value = secrets.json().await.unwrap();
    assert_eq!(body["initialized"], true);
    assert_eq!(body["sealed"], false);
    assert_eq!(body["standby"], false);
    assert!(body["cluster_id"].as_str().unwrap().len() == 36);

    let leader = client
        .get(cairn.url("registry", "/v1/status/leader"))
        .send()
        .await
        .unwrap();
    assert_eq!(leader.status(), 200);
    let leader: String = leader.json().await.unwrap();
    assert_eq!(leader, cairn.addr("registry"));

    let agent = client
        .get(cairn.url("scheduler", "/v1/agent/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(agent.status(), 200);
    let agent: Value = agent.json().await.unwrap();
    assert_eq!(agent["server"]["ok"], true);

    let ping = client
        .get(cairn.url("platform", "/api/v2/ping"))
        .send()
        .await
        .unwrap();
    assert_eq!(ping.status(), 204);
    assert_eq!(ping.headers()["tfp-api-version"], "2.5");
    assert!(ping.headers().contains_key("x-ratelimit-limit"));
    assert!(ping.headers().contains_key("tfp-appname"));

    cairn.stop().await;
}

#[tokio::test]
async fn dev_prints_the_given_root_token() {
    let cairn = Cairn::dev(&["--root-token", "my-root-token"]).await;
    assert_eq!(cairn.token.as_deref(), Some("my-root-token"));
    cairn.stop().await;
}

#[tokio::test]
async fn dev_generates_a_random_root_token_when_none_is_given() {
    let first = Cairn::dev(&[]).await;
    let second = Cairn::dev(&[]).await;
    let (a, b) = (first.token.clone().unwrap(), second.token.clone().unwrap());
    assert!(a.len() >= 20, "{a}");
    assert_ne!(a, b);
    first.stop().await;
    second.stop().await;
}

#[tokio::test]
async fn dev_reads_addresses_from_the_environment() {
    let port = support::free_port();
    let cairn = Cairn::start_with_env(
        &["dev"],
        &[("CAIRN_SECRETS_ADDR", format!("127.0.0.1:{port}").as_str())],
    )
    .await;
    assert_eq!(cairn.addr("secrets"), format!("127.0.0.1:{port}"));
    cairn.stop().await;
}

#[tokio::test]
async fn dev_flag_wins_over_environment() {
    let (flag_port, env_port) = (support::free_port(), support::free_port());
    let flag = format!("127.0.0.1:{flag_port}");
    let env = format!("127.0.0.1:{env_port}");
    let cairn = Cairn::start_with_env(
        &[
            "dev",
            "--secrets-addr",
            &flag,
            "--registry-addr",
            "127.0.0.1:0",
            "--scheduler-addr",
            "127.0.0.1:0",
            "--platform-addr",
            "127.0.0.1:0",
        ],
        &[("CAIRN_SECRETS_ADDR", env.as_str())],
    )
    .await;
    assert_eq!(cairn.addr("secrets"), flag);
    cairn.stop().await;
}

#[tokio::test]
async fn dev_temporary_data_dir_is_removed_on_exit() {
    let cairn = Cairn::dev(&[]).await;
    let dir = cairn.data_dir.clone();
    assert!(dir.join("cairn.redb").exists(), "{}", dir.display());
    cairn.stop().await;
    assert!(!dir.exists(), "{} still exists", dir.display());
}

#[tokio::test]
async fn dev_data_dir_persists_across_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_owned();
    let cluster_id = |cairn: &Cairn| {
        let url = cairn.url("secrets", "/v1/sys/health");
        async move {
            let body: Value = http().get(url).send().await.unwrap().json().await.unwrap();
            body["cluster_id"].as_str().unwrap().to_owned()
        }
    };
    let first = Cairn::dev(&["--data-dir", &path]).await;
    let id = cluster_id(&first).await;
    first.stop().await;
    assert!(dir.path().join("cairn.redb").exists());

    let second = Cairn::dev(&["--data-dir", &path]).await;
    assert_eq!(cluster_id(&second).await, id);
    second.stop().await;
}

#[tokio::test]
async fn dev_refuses_a_port_in_use_with_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = support::run_to_end(&[
        "dev",
        "--platform-addr",
        &addr,
        "--secrets-addr",
        "127.0.0.1:0",
        "--registry-addr",
        "127.0.0.1:0",
        "--scheduler-addr",
        "127.0.0.1:0",
    ])
    .await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot listen on") && stderr.contains("platform"),
        "{stderr}"
    );
}

#[tokio::test]
async fn sigint_and_sigterm_both_shut_down_cleanly() {
    for signal in ["INT", "TERM"] {
        let cairn = Cairn::dev(&[]).await;
        let status = cairn.signal_and_wait(signal).await;
        assert!(status.success(), "SIG{signal}: {status:?}");
    }
}

#[tokio::test]
async fn unknown_paths_answer_in_each_services_error_shape() {
    let cairn = Cairn::dev(&[]).await;
    let client = http();

    // Without a token the ACL check comes first: 403, as Vault.
    let anonymous = client
        .get(cairn.url("secrets", "/v1/nope/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 403);
    let secrets = client
        .get(cairn.url("secrets", "/v1/nope/x"))
        .header("x-vault-token", cairn.token.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(secrets.status(), 404);
    assert_eq!(secrets.headers()["content-type"], "application/json");
    let body: Value = secrets.json().await.unwrap();
    assert_eq!(
        body["errors"][0],
        "no handler for route \"nope/x\". route entry not found."
    );

    let registry = client
        .get(cairn.url("registry", "/v1/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(registry.status(), 404);
    assert!(
        registry.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );

    let platform = client
        .get(cairn.url("platform", "/api/v2/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(platform.status(), 404);
    assert_eq!(
        platform.headers()["content-type"],
        "application/vnd.api+json"
    );
    assert_eq!(platform.headers()["tfp-api-version"], "2.5");
    let body: Value = platform.json().await.unwrap();
    assert_eq!(body["errors"][0]["status"], "404");

    let health = client
        .post(cairn.url("secrets", "/v1/sys/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 405);
    let bad = client
        .get(cairn.url("secrets", "/v1/sys/health?activecode=abc"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert_eq!(body["errors"][0], "bad code: abc");
    cairn.stop().await;
}

#[tokio::test]
async fn responses_carry_a_request_id() {
    let cairn = Cairn::dev(&[]).await;
    let response = http()
        .get(cairn.url("registry", "/v1/status/leader"))
        .header("x-request-id", "trace-me-1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "trace-me-1");
    let generated = http()
        .get(cairn.url("registry", "/v1/status/leader"))
        .send()
        .await
        .unwrap();
    assert!(!generated.headers()["x-request-id"].is_empty());
    cairn.stop().await;
}

/// The log line of a request sent with `request_id`, from a `cairn dev` run with `flags`.
async fn request_log(flags: &[&str], request_id: &str) -> String {
    let cairn = Cairn::dev(flags).await;
    let response = http()
        .get(cairn.url("registry", "/v1/status/leader?token=hidden"))
        .header("x-request-id", request_id)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let stderr = cairn.stop_with_stderr().await;
    let line = stderr
        .lines()
        .find(|line| line.contains(request_id) && line.contains("Request finished."));
    line.unwrap_or_else(|| panic!("no request line in:\n{stderr}"))
        .to_owned()
}

#[tokio::test]
async fn log_lines_name_their_request_in_every_log_mode() {
    let expected = "DEBUG request{method=GET path=/v1/status/leader request_id=trace-me-2}: \
                    http_kit::layers: Request finished. status=200";
    // A plain filter: the request is a task-local the text format writes.
    let line = request_log(&["--log-level", "info,http_kit=debug"], "trace-me-2").await;
    assert!(line.contains(expected), "{line}");
    // A span filter: a real `request` span, and the same text.
    let line = request_log(
        &["--log-level", "info,http_kit[request]=debug"],
        "trace-me-2",
    )
    .await;
    assert!(line.contains(expected), "{line}");
    assert!(!line.contains("hidden"), "{line}");

    let line = request_log(
        &["--log-format", "json", "--log-level", "info,http_kit=debug"],
        "trace-me-3",
    )
    .await;
    let line: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(line["message"], "Request finished.");
    assert_eq!(
        line["span"],
        serde_json::json!({
            "method": "GET",
            "path": "/v1/status/leader",
            "request_id": "trace-me-3",
            "name": "request",
        })
    );
}

#[tokio::test]
async fn server_runs_enabled_services_from_hcl_with_tls() {
    let dir = tempfile::tempdir().unwrap();
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    std::fs::write(dir.path().join("tls.crt"), cert.cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), cert.signing_key.serialize_pem()).unwrap();
    let config = dir.path().join("cairn.hcl");
    std::fs::write(
        &config,
        r#"
data_dir = "data"
secrets {
  address = "127.0.0.1:0"
  tls {
    cert_file = "tls.crt"
    key_file  = "tls.key"
  }
}
registry { address = "127.0.0.1:0" }
scheduler { enabled = false }
"#,
    )
    .unwrap();
    let cairn = Cairn::start(&["server", "--config", config.to_str().unwrap()]).await;
    assert!(cairn.urls.contains_key("secrets") && cairn.urls.contains_key("registry"));
    assert!(!cairn.urls.contains_key("scheduler") && !cairn.urls.contains_key("platform"));
    assert!(cairn.urls["secrets"].starts_with("https://"));
    assert!(cairn.token.is_none());

    let ca = reqwest::Certificate::from_pem(cert.cert.pem().as_bytes()).unwrap();
    let tls_client = reqwest::Client::builder()
        .tls_certs_only([ca])
        .build()
        .unwrap();
    let url = cairn.urls["secrets"].replace("127.0.0.1", "localhost") + "/v1/sys/health";
    let health = tls_client.get(url).send().await.unwrap();
    // `cairn server` starts uninitialized: an operator runs sys/init and sys/unseal.
    assert_eq!(health.status(), 501);
    let body: Value = health.json().await.unwrap();
    assert_eq!(body["initialized"], false);
    let id = body["cluster_id"].as_str().unwrap().to_owned();

    let leader = http()
        .get(cairn.url("registry", "/v1/status/leader"))
        .send()
        .await
        .unwrap();
    assert_eq!(leader.status(), 200);
    cairn.stop().await;
    assert!(dir.path().join("data/cairn.redb").exists());

    // Data persists: the same store comes back with the same cluster identity.
    let again = Cairn::start(&["server", "--config", config.to_str().unwrap()]).await;
    let url = again.urls["secrets"].replace("127.0.0.1", "localhost") + "/v1/sys/health";
    let body: Value = tls_client
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["cluster_id"], id.as_str());
    again.stop().await;
}

#[tokio::test]
async fn server_rejects_a_config_with_an_unknown_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.hcl");
    std::fs::write(
        &config,
        "data_dir = \"d\"\nsecrets { adress = \"127.0.0.1:0\" }\n",
    )
    .unwrap();
    let output = support::run_to_end(&["server", "--config", config.to_str().unwrap()]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("adress"), "{stderr}");
}

#[tokio::test]
async fn server_rejects_a_missing_tls_file_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cairn.hcl");
    std::fs::write(
        &config,
        "data_dir = \"d\"\nsecrets {\n address = \"127.0.0.1:0\"\n tls {\n cert_file = \"missing.crt\"\n key_file = \"missing.key\"\n }\n}\n",
    )
    .unwrap();
    let output = support::run_to_end(&["server", "--config", config.to_str().unwrap()]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("missing.crt"), "{stderr}");
}

#[tokio::test]
async fn version_prints_the_crate_version() {
    let output = support::run_to_end(&["version"]).await;
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("cairn {}", env!("CARGO_PKG_VERSION"))
    );
}

#[tokio::test]
async fn in_flight_request_finishes_during_shutdown() {
    // A blocking-free endpoint answers fast, so fire a burst and signal mid-way: every request
    // that got a response got a complete one, and the process exits cleanly.
    let cairn = Cairn::dev(&[]).await;
    let url = cairn.url("secrets", "/v1/sys/health");
    let client = http();
    let burst: Vec<_> = (0..50).map(|_| client.get(&url).send()).collect();
    let pid = cairn.pid();
    let responses = tokio::spawn(futures_join_all(burst));
    tokio::time::sleep(Duration::from_millis(5)).await;
    support::kill(pid, "TERM");
    for response in responses.await.unwrap().into_iter().flatten() {
        assert_eq!(response.status(), 200);
    }
    assert!(cairn.wait().await.success());
}

async fn futures_join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut out = Vec::with_capacity(futures.len());
    for future in futures {
        out.push(future.await);
    }
    out
}

async fn statuses_of_a_burst(cairn: &Cairn, n: usize) -> Vec<u16> {
    let client = http();
    let url = cairn.url("platform", "/api/v2/account/details");
    let token = cairn.token.clone().unwrap();
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        let response = client.get(&url).bearer_auth(&token).send().await.unwrap();
        statuses.push(response.status().as_u16());
    }
    statuses
}

#[tokio::test]
async fn dev_platform_rate_limiting_is_on_by_default_and_can_be_turned_off() {
    let limited = Cairn::dev(&[]).await;
    let statuses = statuses_of_a_burst(&limited, 120).await;
    assert_eq!(statuses[0], 200);
    assert!(statuses.contains(&429), "{statuses:?}");
    limited.stop().await;

    let unlimited = Cairn::dev(&["--platform-rate-limiting", "false"]).await;
    let statuses = statuses_of_a_burst(&unlimited, 120).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    unlimited.stop().await;
}

/// Status of a request without any token.
async fn anonymous_status(
    cairn: &Cairn,
    method: reqwest::Method,
    service: &str,
    path: &str,
) -> u16 {
    http()
        .request(method, cairn.url(service, path))
        .body("bar")
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn dev_registry_and_scheduler_are_open_unless_acl_is_asked_for() {
    use reqwest::Method;
    // As `consul agent -dev` and `nomad agent -dev`: no token needed.
    let open = Cairn::dev(&[]).await;
    assert_eq!(
        anonymous_status(&open, Method::PUT, "registry", "/v1/kv/foo").await,
        200
    );
    assert_eq!(
        anonymous_status(&open, Method::GET, "registry", "/v1/agent/self").await,
        200
    );
    assert_eq!(
        anonymous_status(&open, Method::GET, "scheduler", "/v1/jobs").await,
        200
    );
    // The secrets store and the platform have no open mode upstream.
    assert_eq!(
        anonymous_status(&open, Method::GET, "secrets", "/v1/secret/data/x").await,
        403
    );
    assert_eq!(
        anonymous_status(&open, Method::GET, "platform", "/api/v2/organizations").await,
        401
    );
    open.stop().await;

    for closed in [
        Cairn::dev(&["--acl"]).await,
        Cairn::start_with_env(&["dev"], &[("CAIRN_ACL", "true")]).await,
    ] {
        assert_eq!(
            anonymous_status(&closed, Method::PUT, "registry", "/v1/kv/foo").await,
            403
        );
        assert_eq!(
            anonymous_status(&closed, Method::GET, "scheduler", "/v1/jobs").await,
            403
        );
        let token = closed.token.clone().unwrap();
        let with_root = http()
            .get(closed.url("scheduler", "/v1/jobs"))
            .header("X-Nomad-Token", &token)
            .send()
            .await
            .unwrap();
        assert_eq!(
            with_root.status(),
            200,
            "the root token manages the scheduler"
        );
        closed.stop().await;
    }
}

#[tokio::test]
async fn dev_prints_environment_lines_after_ready_and_env_prints_them_again() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let cairn = Cairn::dev(&[
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--root-token",
        "s.dev",
    ])
    .await;
    let expected = [
        format!("export VAULT_ADDR='{}'", cairn.urls["secrets"]),
        "export VAULT_TOKEN='s.dev'".to_owned(),
        format!("export CONSUL_HTTP_ADDR='{}'", cairn.addr("registry")),
        format!("export NOMAD_ADDR='{}'", cairn.urls["scheduler"]),
        format!("export TFE_ADDRESS='{}'", cairn.urls["platform"]),
        "export TFE_TOKEN='s.dev'".to_owned(),
    ];
    assert_eq!(cairn.env_lines, expected);

    let printed =
        support::run_to_end(&["dev", "--env", "--data-dir", data_dir.to_str().unwrap()]).await;
    assert!(printed.status.success(), "{printed:?}");
    let text = String::from_utf8(printed.stdout).unwrap();
    assert_eq!(text.lines().collect::<Vec<_>>(), expected);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(data_dir.join("dev.env"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the file holds the root token");

    cairn.stop().await;
    assert!(!data_dir.join("dev.env").exists(), "removed at exit");
    let gone =
        support::run_to_end(&["dev", "--env", "--data-dir", data_dir.to_str().unwrap()]).await;
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains("no running `cairn dev`"));
}

#[tokio::test]
async fn dev_with_acl_exports_the_registry_and_scheduler_tokens() {
    let cairn = Cairn::dev(&["--acl", "--root-token", "s.dev"]).await;
    assert!(
        cairn
            .env_lines
            .contains(&"export CONSUL_HTTP_TOKEN='s.dev'".to_owned())
    );
    assert!(
        cairn
            .env_lines
            .contains(&"export NOMAD_TOKEN='s.dev'".to_owned())
    );
    cairn.stop().await;
}
