//! The database engine against the real servers on 127.0.0.1 (PostgreSQL 5432 with trust
//! auth, MariaDB 3306 with a password-less root, Redis 6379), through the `Engine` trait over
//! memory storage and a manual clock: created users log in with the returned password and can
//! do what the statements grant, revoked ones cannot; static passwords rotate on creation, on
//! schedule, on request and after an interrupted rotation, and the old one stops working; root
//! rotation changes the admin's password without ever returning it; an unreachable database is
//! a 400 at config time. On PostgreSQL also: `rsa_private_key` and `client_certificate` creds
//! (what the statements got and what the client got, checked with the openssl CLI), a cron
//! `rotation_schedule` with a `rotation_window` on the manual clock, and a role without TTLs
//! expiring its user at the mount's TTLs. Every test uses its own user names and cleans up.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use secrets_sdk::testing::MemEngineStorage;
use secrets_sdk::{
    Data, Engine, EngineConfig, EngineError, EngineStorage, Lease, MountTtls, Operation, Request,
    RequestAuth,
};
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection};
use stdx::clock::ManualClock;

const PG_URL: &str = "postgresql://postgres@127.0.0.1:5432/test";
const MY_ADMIN_URL: &str = "mysql://root@127.0.0.1:3306/test";

struct Fixture {
    engine: Arc<dyn Engine>,
    storage: Arc<MemEngineStorage>,
    clock: ManualClock,
}

fn fixture() -> Fixture {
    let storage = Arc::new(MemEngineStorage::default());
    let clock = ManualClock::at_system_time();
    let engine = secrets_database::factory(EngineConfig {
        mount_point: "database/".to_owned(),
        storage: storage.clone(),
        options: BTreeMap::new(),
        clock: Arc::new(clock.clone()),
        passwords: Default::default(),
    })
    .unwrap();
    Fixture {
        engine,
        storage,
        clock,
    }
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}{}{nanos}", std::process::id())
}

impl Fixture {
    async fn call(
        &self,
        op: Operation,
        path: &str,
        body: Value,
    ) -> Result<Option<Value>, EngineError> {
        let data: Data = match body {
            Value::Object(map) => map,
            _ => Data::new(),
        };
        let mut request = Request::new(op, path).with_data(data);
        request.mount_point = "database/".to_owned();
        request.auth = Some(std::sync::Arc::new(RequestAuth {
            display_name: "token".to_owned(),
            ..RequestAuth::default()
        }));
        let response = self.engine.handle(request).await?;
        Ok(response.map(|r| {
            json!({
                "data": r.data.map(Value::Object),
                "warnings": r.warnings,
                "internal": r.secret.as_ref().map(|s| Value::Object(s.internal.clone())),
                "ttl": r.secret.as_ref().map(|s| s.ttl.as_secs()),
            })
        }))
    }

    /// A read as the core sends it from a mount whose lease TTLs are `ttls`.
    async fn read_on_mount(&self, path: &str, ttls: MountTtls) -> Value {
        let mut request = Request::new(Operation::Read, path).with_ttls(ttls);
        request.mount_point = "database/".to_owned();
        request.auth = Some(std::sync::Arc::new(RequestAuth {
            display_name: "token".to_owned(),
            ..RequestAuth::default()
        }));
        let response = self.engine.handle(request).await.unwrap().unwrap();
        json!({
            "data": response.data.map(Value::Object),
            "internal": response.secret.as_ref().map(|s| Value::Object(s.internal.clone())),
        })
    }

    async fn write(&self, path: &str, body: Value) {
        let op = if self
            .engine
            .exists(&Request::new(Operation::Update, path))
            .await
            .unwrap()
            == Some(true)
        {
            Operation::Update
        } else {
            Operation::Create
        };
        self.call(op, path, body).await.unwrap();
    }

    async fn read(&self, path: &str) -> Value {
        self.call(Operation::Read, path, json!({}))
            .await
            .unwrap()
            .unwrap()
    }

    fn clock_secs(&self) -> i64 {
        use stdx::clock::Clock as _;
        self.clock.now_ms() / 1000
    }

    fn lease(&self, issued: &Value) -> Lease {
        Lease {
            lease_id: "database/creds/x/abc".to_owned(),
            path: "creds/x".to_owned(),
            internal: issued["internal"].as_object().unwrap().clone(),
            age: Duration::ZERO,
            increment: None,
        }
    }
}

async fn mysql_login(user: &str, password: &str) -> Result<sqlx::MySqlConnection, sqlx::Error> {
    let options = sqlx::mysql::MySqlConnectOptions::new()
        .host("127.0.0.1")
        .port(3306)
        .username(user)
        .password(password);
    sqlx::MySqlConnection::connect_with(&options).await
}

async fn mysql_admin(sql: &str) {
    let mut con = sqlx::MySqlConnection::connect(MY_ADMIN_URL).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(&mut con)
        .await
        .unwrap();
}

async fn pg_admin() -> sqlx::PgConnection {
    sqlx::PgConnection::connect(PG_URL).await.unwrap()
}

/// Whether `password` is `user`'s PostgreSQL password: the server trusts every local login,
/// so the SCRAM-SHA-256 verifier it stores is checked instead (RFC 5802: StoredKey =
/// SHA-256(HMAC(PBKDF2(password, salt, i), "Client Key"))).
async fn pg_password_is(user: &str, password: &str) -> bool {
    use aws_lc_rs::{digest, hmac, pbkdf2};
    use base64::Engine as _;
    let mut con = pg_admin().await;
    let row: Option<(Option<String>,)> =
        sqlx::query_as("SELECT rolpassword FROM pg_authid WHERE rolname = $1")
            .bind(user)
            .fetch_optional(&mut con)
            .await
            .unwrap();
    let Some((Some(verifier),)) = row else {
        return false;
    };
    let rest = verifier
        .strip_prefix("SCRAM-SHA-256$")
        .expect("a SCRAM verifier");
    let (params, keys) = rest.split_once('$').unwrap();
    let (iterations, salt) = params.split_once(':').unwrap();
    let (stored_key, _) = keys.split_once(':').unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut salted = [0u8; 32];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        iterations.parse().unwrap(),
        &b64.decode(salt).unwrap(),
        password.as_bytes(),
        &mut salted,
    );
    let client_key = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &salted), b"Client Key");
    digest::digest(&digest::SHA256, client_key.as_ref()).as_ref() == b64.decode(stored_key).unwrap()
}

async fn pg_role_exists(user: &str) -> bool {
    let mut con = pg_admin().await;
    let row: Option<(String,)> =
        sqlx::query_as("SELECT rolname::text FROM pg_roles WHERE rolname = $1")
            .bind(user)
            .fetch_optional(&mut con)
            .await
            .unwrap();
    row.is_some()
}

#[tokio::test]
async fn postgres_creds_are_a_real_user_with_the_password_and_grants_and_revoke_drops_it() {
    let f = fixture();
    let role = unique("pgro");
    f.write(
        "config/pg",
        json!({"plugin_name": "postgresql-database-plugin", "connection_url": PG_URL, "allowed_roles": "pgro*"}),
    )
    .await;
    f.write(
        &format!("roles/{role}"),
        json!({
            "db_name": "pg",
            "creation_statements": ["CREATE ROLE \"{{name}}\" WITH LOGIN PASSWORD '{{password}}' VALID UNTIL '{{expiration}}'; GRANT pg_read_all_data TO \"{{name}}\";"],
            "default_ttl": "1h",
            "max_ttl": "2h",
        }),
    )
    .await;
    let issued = f.read(&format!("creds/{role}")).await;
    let user = issued["data"]["username"].as_str().unwrap().to_owned();
    let password = issued["data"]["password"].as_str().unwrap().to_owned();
    assert!(user.starts_with("v-token-"), "{user}");
    assert_eq!(password.len(), 20);
    assert_eq!(issued["ttl"], 3600);
    assert!(pg_password_is(&user, &password).await);
    assert!(!pg_password_is(&user, "not-it").await);
    // What the statements grant: the role reads data.
    let mut con = pg_admin().await;
    let (granted,): (bool,) =
        sqlx::query_as("SELECT pg_has_role($1, 'pg_read_all_data', 'member')")
            .bind(&user)
            .fetch_one(&mut con)
            .await
            .unwrap();
    assert!(granted);
    // Renew runs the default renew statement (VALID UNTIL moves).
    let mut lease = f.lease(&issued);
    lease.increment = Some(Duration::from_secs(7200));
    lease.age = Duration::from_secs(1800);
    let granted = f.engine.renew(&lease).await.unwrap();
    assert_eq!(
        granted,
        Duration::from_secs(7200 - 1800),
        "capped by max_ttl"
    );
    f.engine.revoke(&f.lease(&issued)).await.unwrap();
    assert!(!pg_role_exists(&user).await);
}

#[tokio::test]
async fn mariadb_creds_log_in_with_the_returned_password_until_revoked() {
    let f = fixture();
    f.write(
        "config/my",
        json!({
            "plugin_name": "mysql-database-plugin",
            "connection_url": "{{username}}:{{password}}@tcp(127.0.0.1:3306)/test",
            "username": "root",
            "password": "",
            "allowed_roles": ["app"],
        }),
    )
    .await;
    f.write(
        "roles/app",
        json!({
            "db_name": "my",
            "creation_statements": "CREATE USER '{{name}}'@'%' IDENTIFIED BY '{{password}}'; GRANT SELECT ON test.* TO '{{name}}'@'%';",
        }),
    )
    .await;
    let issued = f.read("creds/app").await;
    let user = issued["data"]["username"].as_str().unwrap().to_owned();
    let password = issued["data"]["password"].as_str().unwrap().to_owned();
    assert!(
        user.len() <= 32 && user.starts_with("v-token-app-"),
        "{user}"
    );
    let mut con = mysql_login(&user, &password).await.unwrap();
    sqlx::raw_sql("SELECT 1").execute(&mut con).await.unwrap();
    assert!(
        sqlx::raw_sql("CREATE TABLE test.not_granted (x int)")
            .execute(&mut con)
            .await
            .is_err(),
        "only SELECT was granted"
    );
    assert!(mysql_login(&user, "wrong").await.is_err());
    drop(con);
    f.engine.revoke(&f.lease(&issued)).await.unwrap();
    assert!(mysql_login(&user, &password).await.is_err());
    // The connection's password is never shown.
    let config = f.read("config/my").await;
    assert!(
        config["data"]["connection_details"]
            .get("password")
            .is_none(),
        "{config}"
    );
    assert_eq!(config["data"]["connection_details"]["username"], "root");
    // A role the connection does not allow gets no credentials.
    f.write(
        "roles/other",
        json!({"db_name": "my", "creation_statements": "SELECT 1"}),
    )
    .await;
    let err = f
        .call(Operation::Read, "creds/other", json!({}))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        EngineError::BadRequest("\"other\" is not an allowed role".to_owned())
    );
}

#[tokio::test]
async fn redis_creds_are_acl_users_that_authenticate_until_revoked() {
    let f = fixture();
    f.write(
        "config/cache",
        json!({"plugin_name": "redis-database-plugin", "host": "127.0.0.1", "port": 6379, "allowed_roles": "*"}),
    )
    .await;
    f.write(
        "roles/reader",
        json!({"db_name": "cache", "creation_statements": "[\"~*\", \"+@read\"]"}),
    )
    .await;
    let issued = f.read("creds/reader").await;
    let user = issued["data"]["username"].as_str().unwrap().to_owned();
    let password = issued["data"]["password"].as_str().unwrap().to_owned();
    let login = |user: String, password: String| async move {
        let client =
            redis::Client::open(format!("redis://{user}:{password}@127.0.0.1:6379")).unwrap();
        client.get_multiplexed_async_connection().await
    };
    let mut con = login(user.clone(), password.clone()).await.unwrap();
    let _: Option<String> = redis::cmd("GET")
        .arg("anything")
        .query_async(&mut con)
        .await
        .unwrap();
    let write: Result<(), _> = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query_async(&mut con)
        .await;
    assert!(write.is_err(), "only reads were granted");
    f.engine.revoke(&f.lease(&issued)).await.unwrap();
    assert!(login(user, password).await.is_err());
}

#[tokio::test]
async fn an_unreachable_database_is_a_clear_400_at_config_time() {
    let f = fixture();
    let err = f
        .call(
            Operation::Create,
            "config/down",
            json!({"plugin_name": "postgresql-database-plugin", "connection_url": "postgresql://postgres@127.0.0.1:1/test"}),
        )
        .await
        .unwrap_err();
    let EngineError::BadRequest(message) = err else {
        panic!("{err:?}")
    };
    assert!(
        message.starts_with("error creating database object"),
        "{message}"
    );
    assert_eq!(
        f.engine
            .exists(&Request::new(Operation::Update, "config/down"))
            .await
            .unwrap(),
        Some(false)
    );
    // Without verification it is stored.
    f.write(
        "config/down",
        json!({"plugin_name": "postgresql-database-plugin", "connection_url": "postgresql://postgres@127.0.0.1:1/test", "verify_connection": false}),
    )
    .await;
    let err = f
        .call(
            Operation::Create,
            "config/x",
            json!({"plugin_name": "nope"}),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::BadRequest(_)));
}

#[tokio::test]
async fn static_passwords_rotate_at_creation_on_schedule_on_request_and_the_old_one_stops_working()
{
    let f = fixture();
    let user = unique("st");
    mysql_admin(&format!(
        "CREATE USER '{user}'@'%' IDENTIFIED BY 'initial-pw'"
    ))
    .await;
    f.write(
        "config/my",
        json!({"plugin_name": "mysql-database-plugin", "connection_url": MY_ADMIN_URL, "allowed_roles": "*"}),
    )
    .await;
    f.write(
        "static-roles/svc",
        json!({"db_name": "my", "username": user, "rotation_period": "5s"}),
    )
    .await;
    assert!(
        mysql_login(&user, "initial-pw").await.is_err(),
        "rotated at creation"
    );
    let first = f.read("static-creds/svc").await;
    let first_pw = first["data"]["password"].as_str().unwrap().to_owned();
    assert_eq!(first["data"]["rotation_period"], 5);
    assert_eq!(first["data"]["ttl"], 5);
    mysql_login(&user, &first_pw).await.unwrap();

    // Not due yet: nothing changes.
    f.engine.periodic().await.unwrap();
    assert_eq!(
        f.read("static-creds/svc").await["data"]["password"],
        first_pw.as_str()
    );
    // Due: the periodic hook rotates.
    f.clock.advance(Duration::from_secs(6));
    f.engine.periodic().await.unwrap();
    let second_pw = f.read("static-creds/svc").await["data"]["password"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(second_pw, first_pw);
    assert!(mysql_login(&user, &first_pw).await.is_err());
    mysql_login(&user, &second_pw).await.unwrap();

    // On request.
    f.call(Operation::Update, "rotate-role/svc", json!({}))
        .await
        .unwrap();
    let third_pw = f.read("static-creds/svc").await["data"]["password"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(third_pw, second_pw);
    mysql_login(&user, &third_pw).await.unwrap();

    // An interrupted rotation (its password in the WAL, the database never told) rolls forward.
    f.storage
        .put(
            "wal/static/svc",
            &serde_json::to_vec(
                &json!({"version": 1, "password": "rolled-forward-pw", "created_ms": 0}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    f.engine.periodic().await.unwrap();
    assert_eq!(
        f.read("static-creds/svc").await["data"]["password"],
        "rolled-forward-pw"
    );
    mysql_login(&user, "rolled-forward-pw").await.unwrap();
    assert!(f.storage.get("wal/static/svc").await.unwrap().is_none());

    // Deleting the role leaves the user as it is.
    f.call(Operation::Delete, "static-roles/svc", json!({}))
        .await
        .unwrap();
    mysql_login(&user, "rolled-forward-pw").await.unwrap();
    mysql_admin(&format!("DROP USER '{user}'@'%'")).await;
}

#[tokio::test]
async fn static_roles_are_validated_as_vault_does() {
    let f = fixture();
    f.write(
        "config/my",
        json!({"plugin_name": "mysql-database-plugin", "connection_url": MY_ADMIN_URL, "allowed_roles": "ok-*", "verify_connection": false}),
    )
    .await;
    let cases = [
        (
            json!({"db_name": "my", "username": "u", "rotation_period": 4}),
            "rotation_period must be 5 seconds or more",
        ),
        (
            json!({"db_name": "my", "username": "u"}),
            "one of rotation_schedule or rotation_period",
        ),
        (
            json!({"db_name": "my", "username": "u", "rotation_period": 60, "rotation_schedule": "0 * * * *"}),
            "mutually exclusive",
        ),
        (
            json!({"db_name": "my", "username": "u", "rotation_schedule": "not cron"}),
            "could not parse rotation_schedule",
        ),
        (
            json!({"db_name": "my", "rotation_period": 60}),
            "username is a required field",
        ),
    ];
    for (body, message) in cases {
        let err = f
            .call(Operation::Create, "static-roles/ok-x", body.clone())
            .await
            .unwrap_err();
        let EngineError::BadRequest(text) = err else {
            panic!("{body}: {err:?}")
        };
        assert!(text.contains(message), "{body}: {text}");
    }
    let err = f
        .call(
            Operation::Create,
            "static-roles/disallowed",
            json!({"db_name": "my", "username": "u", "rotation_period": 60}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        EngineError::BadRequest("\"disallowed\" is not an allowed role".to_owned())
    );
}

#[tokio::test]
async fn rotate_root_changes_the_admins_password_which_is_never_returned() {
    let f = fixture();
    let admin = unique("adm");
    mysql_admin(&format!(
        "CREATE USER '{admin}'@'%' IDENTIFIED BY 'admin-pw-1'; GRANT ALL PRIVILEGES ON *.* TO '{admin}'@'%' WITH GRANT OPTION"
    ))
    .await;
    f.write(
        "config/my",
        json!({
            "plugin_name": "mysql-database-plugin",
            "connection_url": "{{username}}:{{password}}@tcp(127.0.0.1:3306)/test",
            "username": admin,
            "password": "admin-pw-1",
            "allowed_roles": "*",
        }),
    )
    .await;
    f.call(Operation::Update, "rotate-root/my", json!({}))
        .await
        .unwrap();
    assert!(mysql_login(&admin, "admin-pw-1").await.is_err());
    let config = f.read("config/my").await;
    assert!(!config.to_string().contains("admin-pw-1"));
    assert!(
        config["data"]["connection_details"]
            .get("password")
            .is_none()
    );
    // The engine still works as the admin, with the password only it knows.
    f.write("roles/r", json!({"db_name": "my", "creation_statements": "CREATE USER '{{name}}'@'%' IDENTIFIED BY '{{password}}';"})).await;
    let issued = f.read("creds/r").await;
    f.engine.revoke(&f.lease(&issued)).await.unwrap();
    mysql_admin(&format!("DROP USER '{admin}'@'%'")).await;
}

#[tokio::test]
async fn roles_are_read_back_with_vaults_fields_and_names_are_unique_across_kinds() {
    let f = fixture();
    f.write(
        "roles/dyn",
        json!({"db_name": "pg", "creation_statements": ["CREATE ROLE \"{{name}}\""], "default_ttl": 300, "max_ttl": "1h"}),
    )
    .await;
    let role = f.read("roles/dyn").await;
    assert_eq!(
        role["data"],
        json!({
            "db_name": "pg",
            "creation_statements": ["CREATE ROLE \"{{name}}\""],
            "revocation_statements": [],
            "rollback_statements": [],
            "renew_statements": [],
            "default_ttl": 300,
            "max_ttl": 3600,
            "credential_type": "password",
        })
    );
    let err = f
        .call(
            Operation::Create,
            "static-roles/dyn",
            json!({"db_name": "pg", "username": "u", "rotation_period": 60}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        EngineError::BadRequest("Role and Static Role names must be unique".to_owned())
    );
    let err = f
        .call(Operation::Create, "roles/nodb", json!({}))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        EngineError::BadRequest("database name is required".to_owned())
    );
    let err = f
        .call(
            Operation::Create,
            "roles/bad",
            json!({"db_name": "pg", "credential_type": "magic"}),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::BadRequest(m) if m.contains("invalid credential_type")));
    let listed = f
        .call(Operation::List, "roles/", json!({}))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(listed["data"]["keys"], json!(["dyn"]));
}

/// The server's `VALID UNTIL` of `user`, in Unix seconds.
async fn pg_valid_until(user: &str) -> i64 {
    let mut con = pg_admin().await;
    let (until,): (f64,) = sqlx::query_as(
        "SELECT extract(epoch FROM rolvaliduntil)::float8 FROM pg_roles WHERE rolname = $1",
    )
    .bind(user)
    .fetch_one(&mut con)
    .await
    .unwrap();
    until as i64
}

async fn pg_role_comment(user: &str) -> String {
    let mut con = pg_admin().await;
    let (comment,): (Option<String>,) = sqlx::query_as(
        "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = $1",
    )
    .bind(user)
    .fetch_one(&mut con)
    .await
    .unwrap();
    comment.unwrap_or_default()
}

/// Runs the openssl CLI with `args` in `dir`, feeding `stdin`; asserts success, returns stdout.
fn openssl(dir: &std::path::Path, args: &[&str], stdin: &str) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the openssl CLI");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn a_role_without_ttls_expires_its_user_at_the_mounts_default_ttl() {
    let f = fixture();
    let role = unique("pgmt");
    f.write(
        "config/pg",
        json!({"plugin_name": "postgresql-database-plugin", "connection_url": PG_URL, "allowed_roles": "*"}),
    )
    .await;
    f.write(
        &format!("roles/{role}"),
        json!({"db_name": "pg", "creation_statements": ["CREATE ROLE \"{{name}}\" WITH LOGIN PASSWORD '{{password}}' VALID UNTIL '{{expiration}}';"]}),
    )
    .await;
    let hours = |h: u64| Duration::from_secs(h * 3600);
    let now = f.clock_secs();
    let issued = f
        .read_on_mount(
            &format!("creds/{role}"),
            MountTtls {
                default: hours(2),
                max: hours(4),
            },
        )
        .await;
    let user = issued["data"]["username"].as_str().unwrap().to_owned();
    let until = pg_valid_until(&user).await;
    assert!(
        (now + 7200 + 5..=now + 7200 + 6).contains(&until),
        "the mount's 2h (+5 s), not the system's 768h: {}",
        until - now
    );
    // A mount whose max is below its default caps the user's expiry too.
    let capped = f
        .read_on_mount(
            &format!("creds/{role}"),
            MountTtls {
                default: hours(2),
                max: hours(1),
            },
        )
        .await;
    let capped_user = capped["data"]["username"].as_str().unwrap().to_owned();
    let until = pg_valid_until(&capped_user).await;
    assert!((now + 3600 + 5..=now + 3600 + 6).contains(&until));
    f.engine.revoke(&f.lease(&issued)).await.unwrap();
    f.engine.revoke(&f.lease(&capped)).await.unwrap();
    assert!(!pg_role_exists(&user).await);
    assert!(!pg_role_exists(&capped_user).await);
}

#[tokio::test]
async fn rsa_private_key_creds_create_the_user_with_the_public_key_of_the_returned_pkcs8_key() {
    let f = fixture();
    let role = unique("pgrsa");
    f.write(
        "config/pg",
        json!({"plugin_name": "postgresql-database-plugin", "connection_url": PG_URL, "allowed_roles": "*"}),
    )
    .await;
    f.write(
        &format!("roles/{role}"),
        json!({
            "db_name": "pg",
            "credential_type": "rsa_private_key",
            "credential_config": {"key_bits": 3072},
            "creation_statements": ["CREATE ROLE \"{{name}}\" WITH LOGIN; COMMENT ON ROLE \"{{name}}\" IS '{{public_key}}';"],
            "default_ttl": "1h",
        }),
    )
    .await;
    assert_eq!(
        f.read(&format!("roles/{role}")).await["data"]["credential_config"],
        json!({"format": "pkcs8", "key_bits": "3072"})
    );
    let issued = f.read(&format!("creds/{role}")).await;
    let data = issued["data"].as_object().unwrap();
    assert!(!data.contains_key("password"), "{data:?}");
    let user = data["username"].as_str().unwrap().to_owned();
    let private_key = data["rsa_private_key"].as_str().unwrap();
    assert!(
        private_key.starts_with("-----BEGIN PRIVATE KEY-----"),
        "PKCS#8 PEM: {private_key}"
    );
    let dir = tempfile::tempdir().unwrap();
    let text = openssl(dir.path(), &["pkey", "-noout", "-text"], private_key);
    assert!(text.contains("3072 bit"), "{text}");
    let public = openssl(dir.path(), &["pkey", "-pubout"], private_key);
    assert_eq!(
        pg_role_comment(&user).await.trim(),
        public.trim(),
        "the statement got the public key of the key the client got"
    );
    f.engine.revoke(&f.lease(&issued)).await.unwrap();
    assert!(!pg_role_exists(&user).await);
}

#[tokio::test]
async fn client_certificate_creds_are_signed_by_the_configured_ca_for_the_subject_the_user_got() {
    let dir = tempfile::tempdir().unwrap();
    openssl(
        dir.path(),
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=db client CA",
        ],
        "",
    );
    let ca_cert = std::fs::read_to_string(dir.path().join("ca.pem")).unwrap();
    let ca_key = std::fs::read_to_string(dir.path().join("ca.key")).unwrap();
    let f = fixture();
    let role = unique("pgcert");
    f.write(
        "config/pg",
        json!({"plugin_name": "postgresql-database-plugin", "connection_url": PG_URL, "allowed_roles": "*"}),
    )
    .await;
    f.write(
        &format!("roles/{role}"),
        json!({
            "db_name": "pg",
            "credential_type": "client_certificate",
            "credential_config": {
                "common_name_template": "{{.RoleName}}-{{random 8}}",
                "ca_cert": ca_cert,
                "ca_private_key": ca_key,
                "key_type": "ec",
                "key_bits": 384,
            },
            "creation_statements": ["CREATE ROLE \"{{name}}\" WITH LOGIN; COMMENT ON ROLE \"{{name}}\" IS '{{subject}}';"],
            "default_ttl": "1h",
        }),
    )
    .await;
    let issued = f.read(&format!("creds/{role}")).await;
    let data = issued["data"].as_object().unwrap();
    let user = data["username"].as_str().unwrap().to_owned();
    assert_eq!(data["private_key_type"], "ec");
    let cert = data["client_certificate"].as_str().unwrap();
    let key = data["private_key"].as_str().unwrap();
    std::fs::write(dir.path().join("leaf.pem"), cert).unwrap();
    let verified = openssl(
        dir.path(),
        &[
            "verify",
            "-CAfile",
            "ca.pem",
            "-purpose",
            "sslclient",
            "leaf.pem",
        ],
        "",
    );
    assert_eq!(verified.trim(), "leaf.pem: OK");
    let subject = openssl(
        dir.path(),
        &["x509", "-noout", "-subject", "-nameopt", "RFC2253"],
        cert,
    );
    let common_name = subject
        .trim()
        .strip_prefix("subject=CN=")
        .unwrap_or_else(|| panic!("{subject}"))
        .to_owned();
    assert!(
        common_name.starts_with(&format!("{role}-")),
        "{common_name}"
    );
    assert_eq!(common_name.len(), role.len() + 9);
    assert_eq!(
        pg_role_comment(&user).await,
        format!("CN={common_name}"),
        "the statement got the certificate's subject"
    );
    // The key is the certificate's, a P-384 key; the certificate lasts the lease (+5 s).
    assert_eq!(
        openssl(dir.path(), &["x509", "-noout", "-pubkey"], cert),
        openssl(dir.path(), &["pkey", "-pubout"], key)
    );
    assert!(openssl(dir.path(), &["pkey", "-noout", "-text"], key).contains("P-384"));
    let text = openssl(dir.path(), &["x509", "-noout", "-text"], cert);
    assert!(text.contains("TLS Web Client Authentication"), "{text}");
    let end = openssl(dir.path(), &["x509", "-noout", "-checkend", "3590"], cert);
    assert!(end.contains("will not expire"), "{end}");
    let std::process::Output { status, .. } = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-checkend", "3700", "-in", "leaf.pem"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!status.success(), "expires with the lease");
    f.engine.revoke(&f.lease(&issued)).await.unwrap();
    assert!(!pg_role_exists(&user).await);
}

/// Unix ms of an RFC 3339 time.
fn at(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .timestamp_millis()
}

#[tokio::test]
async fn a_cron_schedule_rotates_when_due_inside_its_window_and_waits_for_the_next_time_outside() {
    let f = fixture();
    let user = unique("pgcron");
    let mut admin = pg_admin().await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE ROLE \"{user}\" WITH LOGIN PASSWORD 'initial-pw'"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    f.write(
        "config/pg",
        json!({"plugin_name": "postgresql-database-plugin", "connection_url": PG_URL, "allowed_roles": "*"}),
    )
    .await;
    let password = async || {
        f.read("static-creds/cron").await["data"]["password"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    // Every six hours on the hour; a rotation may run up to an hour late.
    f.clock.set_ms(at("2031-03-04T00:10:00Z"));
    f.write(
        "static-roles/cron",
        json!({"db_name": "pg", "username": user, "rotation_schedule": "0 */6 * * *", "rotation_window": "1h"}),
    )
    .await;
    let first = password().await;
    assert!(pg_password_is(&user, &first).await, "rotated at creation");
    let creds = f.read("static-creds/cron").await;
    assert_eq!(creds["data"]["ttl"], 5 * 3600 + 50 * 60, "{creds}");
    assert_eq!(creds["data"]["rotation_schedule"], "0 */6 * * *");
    assert_eq!(creds["data"]["rotation_window"], 3600);

    // A second before the scheduled time: nothing.
    f.clock.set_ms(at("2031-03-04T05:59:59Z"));
    f.engine.periodic().await.unwrap();
    assert_eq!(password().await, first);

    // Half an hour into the window of 06:00: rotated.
    f.clock.set_ms(at("2031-03-04T06:30:00Z"));
    f.engine.periodic().await.unwrap();
    let second = password().await;
    assert_ne!(second, first);
    assert!(pg_password_is(&user, &second).await);
    assert!(!pg_password_is(&user, &first).await);
    let creds = f.read("static-creds/cron").await;
    assert_eq!(
        creds["data"]["last_vault_rotation"],
        "2031-03-04T06:30:00.000Z"
    );
    assert_eq!(creds["data"]["ttl"], 5 * 3600 + 30 * 60);

    // 12:00 passes while nothing runs; at 13:30 its window (to 13:00) is over: no rotation,
    // the next one is 18:00.
    f.clock.set_ms(at("2031-03-04T13:30:00Z"));
    f.engine.periodic().await.unwrap();
    assert_eq!(password().await, second);
    assert!(pg_password_is(&user, &second).await);
    assert_eq!(
        f.read("static-creds/cron").await["data"]["ttl"],
        4 * 3600 + 30 * 60
    );
    f.clock.set_ms(at("2031-03-04T17:59:00Z"));
    f.engine.periodic().await.unwrap();
    assert_eq!(password().await, second);

    // Inside 18:00's window: rotated.
    f.clock.set_ms(at("2031-03-04T18:00:30Z"));
    f.engine.periodic().await.unwrap();
    let third = password().await;
    assert_ne!(third, second);
    assert!(pg_password_is(&user, &third).await);

    f.call(Operation::Delete, "static-roles/cron", json!({}))
        .await
        .unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!("DROP ROLE \"{user}\"")))
        .execute(&mut admin)
        .await
        .unwrap();
}

#[tokio::test]
async fn concurrent_default_revocations_on_postgres_all_succeed() {
    let f = fixture();
    // Two connections (two clients, as two mounts or two servers would have), four users each.
    let mut roles = Vec::new();
    for connection in ["pg", "pg2"] {
        f.write(
            &format!("config/{connection}"),
            json!({"plugin_name": "postgresql-database-plugin", "connection_url": PG_URL, "allowed_roles": "*", "max_open_connections": 8}),
        )
        .await;
        let role = unique("pgconc");
        f.write(
            &format!("roles/{role}"),
            json!({"db_name": connection, "creation_statements": ["CREATE ROLE \"{{name}}\" WITH LOGIN PASSWORD '{{password}}';"], "default_ttl": "1h"}),
        )
        .await;
        roles.push(role);
    }
    let mut leases = Vec::new();
    for i in 0..8 {
        let issued = f.read(&format!("creds/{}", roles[i % 2])).await;
        let user = issued["data"]["username"].as_str().unwrap().to_owned();
        leases.push((user, f.lease(&issued)));
    }
    // The plugin's default revocation (revoke on the database and every schema, then drop),
    // eight at once through two clients: PostgreSQL refuses concurrent updates of the
    // database's ACL row, so the engine must serialise them across clients.
    let revocations: Vec<_> = leases
        .iter()
        .map(|(_, lease)| {
            let (engine, lease) = (f.engine.clone(), lease.clone());
            tokio::spawn(async move { engine.revoke(&lease).await })
        })
        .collect();
    for revocation in revocations {
        revocation.await.unwrap().unwrap();
    }
    for (user, _) in &leases {
        assert!(!pg_role_exists(user).await, "{user}");
    }
}

#[tokio::test]
async fn a_postgresql_key_value_connection_string_connects_and_hides_its_password() {
    let f = fixture();
    let conninfo = "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable";
    f.write(
        "config/kv",
        json!({"plugin_name": "postgresql-database-plugin", "connection_url": conninfo, "allowed_roles": "*"}),
    )
    .await;
    f.write(
        "roles/kv",
        json!({"db_name": "kv", "creation_statements": ["CREATE ROLE \"{{name}}\" WITH LOGIN PASSWORD '{{password}}';"]}),
    )
    .await;
    let issued = f.read("creds/kv").await;
    let user = issued["data"]["username"].as_str().unwrap();
    let password = issued["data"]["password"].as_str().unwrap();
    let login = format!("postgresql://{user}:{password}@127.0.0.1:5432/test");
    let mut con = sqlx::PgConnection::connect(&login).await.unwrap();
    let one: (i32,) = sqlx::query_as("SELECT 1")
        .fetch_one(&mut con)
        .await
        .unwrap();
    assert_eq!(one.0, 1);
    con.close().await.unwrap();
    f.engine.revoke(&f.lease(&issued)).await.unwrap();
    assert!(sqlx::PgConnection::connect(&login).await.is_err());

    let read = f.read("config/kv").await;
    let details = &read["data"]["connection_details"];
    assert_eq!(details["connection_url"], conninfo, "{read}");

    let literal = "host=127.0.0.1 user=postgres password='not shown' dbname=test";
    f.write(
        "config/literal",
        json!({"plugin_name": "postgresql-database-plugin", "connection_url": literal, "verify_connection": false}),
    )
    .await;
    let read = f.read("config/literal").await;
    let shown = read["data"]["connection_details"]["connection_url"]
        .as_str()
        .unwrap();
    assert_eq!(
        shown,
        "host=127.0.0.1 user=postgres password=xxxxx dbname=test"
    );

    let err = f
        .call(
            Operation::Create,
            "config/bad",
            json!({"plugin_name": "postgresql-database-plugin", "connection_url": "host=127.0.0.1 colour=blue"}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::BadRequest(m) if m.contains("unknown connection parameter \"colour\"")),
        "{err:?}"
    );
}

/// A `redis-server` serving TLS only, on a free port, with a certificate for 127.0.0.1 from a
/// CA made here; killed on drop.
struct TlsRedis {
    child: std::process::Child,
    port: u16,
    ca_pem: String,
    _dir: tempfile::TempDir,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TlsRedis {
    async fn start() -> TlsRedis {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut server = CertificateParams::new(Vec::<String>::new()).unwrap();
        server.subject_alt_names = vec![SanType::IpAddress([127, 0, 0, 1].into())];
        let cert = server.signed_by(&key, &issuer).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let path = |name: &str| dir.path().join(name).display().to_string();
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
            .args([
                "--tls-cert-file",
                &path("cert.pem"),
                "--tls-key-file",
                &path("key.pem"),
            ])
            .args(["--tls-ca-cert-file", &path("ca.pem"), "--dir", &path("")])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (scripts/services installs it)");
        let redis = TlsRedis {
            child,
            port,
            ca_pem: ca_cert.pem(),
            _dir: dir,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server on {port}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        redis
    }
}

#[tokio::test]
async fn redis_over_tls_checks_the_server_against_ca_cert() {
    let redis = TlsRedis::start().await;
    let f = fixture();
    let config = |extra: Value| {
        let mut body = json!({"plugin_name": "redis-database-plugin", "host": "127.0.0.1", "port": redis.port, "allowed_roles": "*", "tls": true});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    f.write("config/tls", config(json!({"ca_cert": redis.ca_pem})))
        .await;
    f.write(
        "roles/tls",
        json!({"db_name": "tls", "creation_statements": "[\"~*\", \"+@read\"]"}),
    )
    .await;
    let issued = f.read("creds/tls").await;
    let user = issued["data"]["username"].as_str().unwrap();
    let password = issued["data"]["password"].as_str().unwrap();
    let client = redis::Client::build_with_tls(
        format!("rediss://{user}:{password}@127.0.0.1:{}", redis.port),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(redis.ca_pem.clone().into_bytes()),
        },
    )
    .unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let _: Option<String> = redis::cmd("GET")
        .arg("k")
        .query_async(&mut con)
        .await
        .unwrap();

    // Without the CA the server's certificate is refused at config time; insecure_tls skips
    // the check, as upstream's plugin does.
    let err = f
        .call(Operation::Create, "config/unverified", config(json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::BadRequest(m) if m.starts_with("error creating database object")),
        "{err:?}"
    );
    f.write("config/insecure", config(json!({"insecure_tls": true})))
        .await;
    let err = f
        .call(
            Operation::Create,
            "config/pem",
            config(json!({"ca_cert": "not a certificate"})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::BadRequest(m) if m.contains("ca_cert")),
        "{err:?}"
    );
}
