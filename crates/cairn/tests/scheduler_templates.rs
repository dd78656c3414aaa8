//! End-to-end tests of task templates in `cairn dev` (issue 16 points 6 and 8): the scheduler's
//! in-process client renders `template` blocks with secrets read from the same process's
//! secrets store over HTTP, before real raw_exec processes start, and re-renders them.
//!
//! Each test starts the real binary on port 0 with `CAIRN_TEMPLATE_REFRESH=1s` (lease-less
//! secrets are read again every second instead of every 5 minutes) and talks Vault's and
//! Nomad's HTTP APIs with the dev root token. The database test uses the local PostgreSQL on
//! 127.0.0.1:5432 (trust authentication, database `test`). Waits poll with a deadline.

#[allow(dead_code, reason = "shared with cli.rs; this binary uses part of it")]
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::{Cairn, http};

/// How long a scheduling or rendering outcome may take to show on a loaded machine.
const BOUND: Duration = Duration::from_secs(40);

async fn dev() -> Cairn {
    Cairn::start_with_env(&["dev"], &[("CAIRN_TEMPLATE_REFRESH", "1s")]).await
}

fn token(cairn: &Cairn) -> String {
    cairn.token.clone().unwrap_or_default()
}

/// A Vault API call with `token`; the JSON body (or null) and the status.
async fn vault(
    cairn: &Cairn,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = http()
        .request(method, cairn.url("secrets", &format!("/v1/{path}")))
        .header("X-Vault-Token", token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn vault_ok(cairn: &Cairn, method: reqwest::Method, path: &str, body: Value) -> Value {
    let (status, answer) = vault(cairn, method.clone(), path, &token(cairn), Some(body)).await;
    assert!(
        (200..300).contains(&status),
        "{method} {path}: {status} {answer}"
    );
    answer
}

async fn scheduler(
    cairn: &Cairn,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let mut request = http()
        .request(method.clone(), cairn.url("scheduler", path))
        .header("X-Nomad-Token", token(cairn));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    assert!(status.is_success(), "{method} {path}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Registers a one-task service job whose task runs `script` under `/bin/sh -c`.
async fn register(
    cairn: &Cairn,
    id: &str,
    script: &str,
    templates: Value,
    extra_task: Value,
    extra_job: Value,
) {
    let mut task = json!({
        "Name": "t",
        "Driver": "raw_exec",
        "Config": {"command": "/bin/sh", "args": ["-c", script]},
        "Resources": {"CPU": 100, "MemoryMB": 32},
        "KillTimeout": 2_000_000_000i64,
        "Templates": templates,
    });
    merge(&mut task, extra_task);
    let mut job = json!({
        "ID": id,
        "Name": id,
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g",
            "Count": 1,
            "RestartPolicy": {"Attempts": 0, "Interval": 60_000_000_000i64, "Delay": 1_000_000_000i64, "Mode": "fail"},
            "Tasks": [task]
        }]
    });
    merge(&mut job, extra_job);
    scheduler(
        cairn,
        reqwest::Method::PUT,
        "/v1/jobs",
        Some(json!({"Job": job})),
    )
    .await;
}

fn merge(target: &mut Value, extra: Value) {
    if let (Some(target), Value::Object(extra)) = (target.as_object_mut(), extra) {
        target.extend(extra);
    }
}

/// The job's one allocation once its task runs.
async fn running_alloc(cairn: &Cairn, job: &str) -> Value {
    eventually(&format!("{job} running"), || async {
        let allocs = scheduler(
            cairn,
            reqwest::Method::GET,
            &format!("/v1/job/{job}/allocations"),
            None,
        )
        .await;
        let stub = allocs.as_array()?.first()?.clone();
        let id = stub["ID"].as_str()?.to_owned();
        let alloc = scheduler(
            cairn,
            reqwest::Method::GET,
            &format!("/v1/allocation/{id}"),
            None,
        )
        .await;
        let state = alloc["TaskStates"]["t"]["State"].as_str()?;
        assert!(
            !alloc["TaskStates"]["t"]["Failed"]
                .as_bool()
                .unwrap_or(false),
            "the task failed: {}",
            alloc["TaskStates"]["t"]["Events"]
        );
        (state == "running").then_some(alloc)
    })
    .await
}

async fn alloc(cairn: &Cairn, id: &str) -> Value {
    scheduler(
        cairn,
        reqwest::Method::GET,
        &format!("/v1/allocation/{id}"),
        None,
    )
    .await
}

fn event_messages(alloc: &Value) -> Vec<(String, String)> {
    alloc["TaskStates"]["t"]["Events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .map(|event| {
                    (
                        event["Type"].as_str().unwrap_or_default().to_owned(),
                        event["DisplayMessage"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn alloc_dir(cairn: &Cairn, alloc_id: &str) -> PathBuf {
    cairn.data_dir.join("client").join("alloc").join(alloc_id)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

async fn put_kv(cairn: &Cairn, data: Value) {
    vault_ok(
        cairn,
        reqwest::Method::POST,
        "secret/data/app",
        json!({"data": data}),
    )
    .await;
}

#[tokio::test]
async fn a_kv_secret_renders_feeds_the_env_and_a_change_restarts_the_task() {
    let cairn = dev().await;
    put_kv(&cairn, json!({"user": "alice", "pass": "one"})).await;
    vault_ok(
        &cairn,
        reqwest::Method::PUT,
        "sys/policies/acl/app-read",
        json!({"policy": "path \"secret/data/app\" { capabilities = [\"read\"] }"}),
    )
    .await;
    let script = r#"echo "start $APP_USER $APP_PASS $(cat local/app.conf) token=${#VAULT_TOKEN}" >> "$NOMAD_ALLOC_DIR/runs"; while :; do sleep 0.1; done"#;
    let templates = json!([
        {
            "EmbeddedTmpl": "{{ with secret \"secret/data/app\" }}{{ .Data.data.user | toUpper }}:{{ .Data.data.pass }}{{ end }}",
            "DestPath": "local/app.conf",
            "ChangeMode": "restart",
            "Splay": 0,
        },
        {
            "EmbeddedTmpl": "{{ with secret \"secret/data/app\" }}APP_USER={{ .Data.data.user }}\nAPP_PASS=\"{{ .Data.data.pass }}\"\n{{ end }}",
            "DestPath": "secrets/app.env",
            "Envvars": true,
            "ChangeMode": "noop",
            "Perms": "0600",
        }
    ]);
    register(
        &cairn,
        "tmpl-kv",
        script,
        templates,
        json!({"Vault": {"Policies": ["app-read"], "Env": true, "ChangeMode": "restart"}}),
        json!({}),
    )
    .await;
    let first = running_alloc(&cairn, "tmpl-kv").await;
    let alloc_id = first["ID"].as_str().unwrap().to_owned();
    let dir = alloc_dir(&cairn, &alloc_id);
    let runs = dir.join("alloc/runs");
    eventually("the first run", || async {
        read(&runs).contains("start").then_some(())
    })
    .await;
    let line = read(&runs);
    assert!(
        line.starts_with("start alice one ALICE:one token="),
        "{line}"
    );
    assert_eq!(read(&dir.join("t/local/app.conf")), "ALICE:one");

    // The derived token: in secrets/ (0600, inside the 0700 secrets dir), with the policy.
    let token_path = dir.join("t/secrets/vault_token");
    let task_token = read(&token_path);
    assert!(!task_token.is_empty());
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&token_path), 0o600);
    assert_eq!(mode(&dir.join("t/secrets")), 0o700);
    assert_eq!(mode(&dir.join("t/secrets/app.env")), 0o600);
    let (status, lookup) = vault(
        &cairn,
        reqwest::Method::GET,
        "auth/token/lookup-self",
        &task_token,
        None,
    )
    .await;
    assert_eq!(status, 200, "{lookup}");
    let policies: Vec<&str> = lookup["data"]["policies"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(policies.contains(&"app-read"), "{policies:?}");
    assert_eq!(lookup["data"]["meta"]["AllocationID"], alloc_id.as_str());
    assert!(
        line.ends_with(&format!("token={}\n", task_token.len())),
        "{line}"
    );

    // A change of the secret re-renders the file and restarts the task in place.
    put_kv(&cairn, json!({"user": "alice", "pass": "two"})).await;
    eventually("the restart after the change", || async {
        read(&runs)
            .contains("start alice two ALICE:two")
            .then_some(())
    })
    .await;
    let after = eventually("the restart's events", || async {
        let alloc = alloc(&cairn, &alloc_id).await;
        let events = event_messages(&alloc);
        let started = events.iter().filter(|(kind, _)| kind == "Started").count();
        (started == 2 && alloc["TaskStates"]["t"]["State"] == "running").then_some(alloc)
    })
    .await;
    let events = event_messages(&after);
    assert!(
        events.contains(&(
            "Restart Signaled".to_owned(),
            "Template with change_mode restart re-rendered".to_owned()
        )),
        "{events:?}"
    );
    assert!(!after["TaskStates"]["t"]["Failed"].as_bool().unwrap());
    assert_eq!(read(&dir.join("t/local/app.conf")), "ALICE:two");

    // Stopping the job ends the task and revokes its token.
    scheduler(&cairn, reqwest::Method::DELETE, "/v1/job/tmpl-kv", None).await;
    eventually("the token revoked", || async {
        let (status, _) = vault(
            &cairn,
            reqwest::Method::GET,
            "auth/token/lookup-self",
            &task_token,
            None,
        )
        .await;
        (status == 403).then_some(())
    })
    .await;
    cairn.stop().await;
}

#[tokio::test]
async fn a_change_with_change_mode_signal_signals_the_task_and_a_missing_secret_blocks_it() {
    let cairn = dev().await;
    let script = r#"trap 'echo "usr1 $(cat local/conf)" >> "$NOMAD_ALLOC_DIR/log"' USR1; echo "start $(cat local/conf)" >> "$NOMAD_ALLOC_DIR/log"; while :; do sleep 0.1; done"#;
    let templates = json!([{
        "EmbeddedTmpl": "{{ with secret \"secret/data/app\" }}{{ .Data.data.color }}{{ end }}",
        "DestPath": "local/conf",
        "ChangeMode": "signal",
        "ChangeSignal": "SIGUSR1",
        "Splay": 0,
    }]);
    // No vault block: `secret` reads with the job's own token.
    register(
        &cairn,
        "tmpl-sig",
        script,
        templates,
        json!({}),
        json!({"VaultToken": token(&cairn)}),
    )
    .await;

    // The secret does not exist yet: the task waits, saying what it misses.
    let pending = eventually("the Missing event", || async {
        let allocs = scheduler(
            &cairn,
            reqwest::Method::GET,
            "/v1/job/tmpl-sig/allocations",
            None,
        )
        .await;
        let id = allocs.as_array()?.first()?["ID"].as_str()?.to_owned();
        let alloc = alloc(&cairn, &id).await;
        event_messages(&alloc)
            .iter()
            .any(|(kind, message)| {
                kind == "Template" && message == "Missing: vault.read(secret/data/app)"
            })
            .then_some(alloc)
    })
    .await;
    assert_eq!(pending["TaskStates"]["t"]["State"], "pending");
    put_kv(&cairn, json!({"color": "red"})).await;
    let alloc_value = running_alloc(&cairn, "tmpl-sig").await;
    let alloc_id = alloc_value["ID"].as_str().unwrap().to_owned();
    let log = alloc_dir(&cairn, &alloc_id).join("alloc/log");
    eventually("the start", || async {
        (read(&log) == "start red\n").then_some(())
    })
    .await;

    put_kv(&cairn, json!({"color": "blue"})).await;
    eventually("the signal", || async {
        read(&log).contains("usr1 blue").then_some(())
    })
    .await;
    // The event reaches the server with the client's next (batched) update.
    let signaled = ("Signaling".to_owned(), "Template re-rendered".to_owned());
    let after = eventually("the Signaling event", || async {
        let alloc = alloc(&cairn, &alloc_id).await;
        event_messages(&alloc).contains(&signaled).then_some(alloc)
    })
    .await;
    let events = event_messages(&after);
    assert_eq!(
        events.iter().filter(|(kind, _)| kind == "Started").count(),
        1,
        "{events:?}"
    );
    assert_eq!(after["TaskStates"]["t"]["State"], "running");
    cairn.stop().await;
}

#[tokio::test]
async fn a_template_with_unsupported_syntax_fails_the_task_with_a_clear_event() {
    let cairn = dev().await;
    let templates = json!([{
        "EmbeddedTmpl": "{{ define \"x\" }}x{{ end }}",
        "DestPath": "local/conf",
    }]);
    register(
        &cairn,
        "tmpl-bad",
        "sleep 30",
        templates,
        json!({}),
        json!({}),
    )
    .await;
    let failed = eventually("the failure", || async {
        let allocs = scheduler(
            &cairn,
            reqwest::Method::GET,
            "/v1/job/tmpl-bad/allocations",
            None,
        )
        .await;
        let id = allocs.as_array()?.first()?["ID"].as_str()?.to_owned();
        let alloc = alloc(&cairn, &id).await;
        (alloc["ClientStatus"] == "failed").then_some(alloc)
    })
    .await;
    let events = event_messages(&failed);
    assert!(
        events.iter().any(|(kind, message)| kind == "Killing"
            && message.starts_with(
                "Template failed: template: local/conf:1: {{define}} is not supported"
            )),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|(kind, _)| kind == "Started"),
        "{events:?}"
    );
    cairn.stop().await;
}

fn psql(user: &str, sql: &str) -> Option<String> {
    let output = std::process::Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            "5432",
            "-U",
            user,
            "-d",
            "test",
            "-tAc",
            sql,
        ])
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn pg_role_exists(name: &str) -> bool {
    psql(
        "postgres",
        &format!("SELECT 1 FROM pg_roles WHERE rolname = '{name}'"),
    )
    .as_deref()
        == Some("1")
}

#[tokio::test]
async fn a_template_renders_a_database_credential_the_task_logs_in_with_renewed_while_it_runs() {
    let cairn = dev().await;
    vault_ok(
        &cairn,
        reqwest::Method::POST,
        "sys/mounts/database",
        json!({"type": "database"}),
    )
    .await;
    vault_ok(
        &cairn,
        reqwest::Method::POST,
        "database/config/pg",
        json!({
            "plugin_name": "postgresql-database-plugin",
            "connection_url": "postgresql://{{username}}@127.0.0.1:5432/test",
            "username": "postgres",
            "allowed_roles": "*",
        }),
    )
    .await;
    vault_ok(
        &cairn,
        reqwest::Method::POST,
        "database/roles/app",
        json!({
            "db_name": "pg",
            "creation_statements": ["CREATE ROLE \"{{name}}\" WITH LOGIN PASSWORD '{{password}}' VALID UNTIL '{{expiration}}';"],
            "default_ttl": "6s",
            "max_ttl": "1h",
        }),
    )
    .await;
    vault_ok(
        &cairn,
        reqwest::Method::PUT,
        "sys/policies/acl/db-app",
        json!({"policy": "path \"database/creds/app\" { capabilities = [\"read\"] }"}),
    )
    .await;
    let script = r#"PGPASSWORD="$DB_PASSWORD" psql -h 127.0.0.1 -p 5432 -U "$DB_USER" -d test -tAc 'select current_user' > "$NOMAD_ALLOC_DIR/whoami" 2>&1; while :; do sleep 0.1; done"#;
    let templates = json!([{
        "EmbeddedTmpl": "{{ with secret \"database/creds/app\" }}DB_USER={{ .Data.username }}\nDB_PASSWORD={{ .Data.password }}\nDB_LEASE={{ .LeaseDuration }}\n{{ end }}",
        "DestPath": "secrets/db.env",
        "Envvars": true,
        "ChangeMode": "restart",
        "Splay": 0,
    }]);
    register(
        &cairn,
        "tmpl-db",
        script,
        templates,
        json!({"Vault": {"Policies": ["db-app"]}}),
        json!({}),
    )
    .await;
    let alloc_value = running_alloc(&cairn, "tmpl-db").await;
    let alloc_id = alloc_value["ID"].as_str().unwrap().to_owned();
    let dir = alloc_dir(&cairn, &alloc_id);
    let rendered = read(&dir.join("t/secrets/db.env"));
    let user = rendered
        .lines()
        .find_map(|line| line.strip_prefix("DB_USER="))
        .unwrap()
        .to_owned();
    assert!(rendered.contains("DB_LEASE=6\n"), "{rendered}");
    let whoami = dir.join("alloc/whoami");
    eventually("the task's login", || async {
        (!read(&whoami).is_empty()).then_some(())
    })
    .await;
    assert_eq!(
        read(&whoami).trim(),
        user,
        "the task logged in as the rendered user"
    );
    assert!(pg_role_exists(&user));

    // The 6 s lease is renewed while the task runs (at 2/3 of it), so the user outlives it
    // and the task is not restarted with new credentials.
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < until {
        assert!(pg_role_exists(&user), "the lease was not renewed");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let now = alloc(&cairn, &alloc_id).await;
    let events = event_messages(&now);
    assert_eq!(
        events.iter().filter(|(kind, _)| kind == "Started").count(),
        1,
        "{events:?}"
    );
    assert_eq!(read(&dir.join("t/secrets/db.env")), rendered);

    // Stopping the job revokes the task's token and with it the lease: the user goes.
    scheduler(&cairn, reqwest::Method::DELETE, "/v1/job/tmpl-db", None).await;
    eventually("the database user dropped", || async {
        (!pg_role_exists(&user)).then_some(())
    })
    .await;
    cairn.stop().await;
}

#[tokio::test]
async fn an_exec_task_owns_its_secrets_dir_and_other_uids_cannot_read_it() {
    let cairn = dev().await;
    put_kv(&cairn, json!({"key": "k-123"})).await;
    let templates = json!([{
        "EmbeddedTmpl": "{{ with secret \"secret/data/app\" }}{{ .Data.data.key }}{{ end }}",
        "DestPath": "secrets/key.txt",
        "Perms": "0600",
    }]);
    // The task runs as nobody in its own root and reads its own secret there.
    register(
        &cairn,
        "tmpl-exec",
        "cat /secrets/key.txt; echo; id -u; while :; do sleep 0.1; done",
        templates,
        json!({"Driver": "exec", "User": "nobody"}),
        json!({"VaultToken": token(&cairn)}),
    )
    .await;
    let alloc_value = running_alloc(&cairn, "tmpl-exec").await;
    let dir = alloc_dir(&cairn, alloc_value["ID"].as_str().unwrap());
    let stdout = dir.join("alloc/logs/t.stdout.0");
    eventually("the task's output", || async {
        (read(&stdout) == "k-123\n65534\n").then_some(())
    })
    .await;

    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let secrets = dir.join("t/secrets");
    let meta = std::fs::metadata(&secrets).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
    let file = std::fs::metadata(secrets.join("key.txt")).unwrap();
    assert_eq!(
        (file.uid(), file.permissions().mode() & 0o777),
        (65534, 0o600)
    );
    // Another uid (what another task with another `user` runs as) cannot read it.
    let other = std::process::Command::new("setpriv")
        .args(["--reuid=daemon", "--regid=daemon", "--clear-groups", "cat"])
        .arg(secrets.join("key.txt"))
        .output()
        .unwrap();
    assert!(!other.status.success());
    assert!(String::from_utf8_lossy(&other.stderr).contains("Permission denied"));
    cairn.stop().await;
}
