//! The database plugins: how a connection's settings become a live client, and the four
//! things the engine asks of a database (create a user, extend its expiry, change a password,
//! delete a user), for `postgresql-database-plugin`, `mysql-database-plugin` (MySQL and
//! MariaDB; `mysql-aurora-database-plugin`, `mysql-rds-database-plugin` and
//! `mysql-legacy-database-plugin` are the same client with their own name lengths) and
//! `redis-database-plugin`.
//!
//! Statements (SQL plugins) are split on `;` and each piece is rendered with `{{name}}` /
//! `{{username}}`, `{{password}}`, `{{expiration}}` and, for the other credential types,
//! `{{public_key}}` and `{{subject}}`; a creation runs in one transaction (PostgreSQL) and a
//! failed one runs the role's rollback statements. Redis creation statements are one JSON array
//! of ACL rules (`["~*", "+@read"]` by default), as upstream's Redis plugin.
//!
//! Invariants: a client is built lazily and verified only when asked (`verify_connection`);
//! every database call is bounded by [`TIMEOUT`]; passwords never appear in an error.

use std::time::Duration;

use secrets_sdk::{Data, EngineError, fields};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection as _, MySqlPool, PgPool};

use crate::pg_conninfo;

/// The longest any one database operation may take.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

/// The plugins this engine knows, by `plugin_name`.
pub(crate) const PLUGINS: &[&str] = &[
    "postgresql-database-plugin",
    "mysql-database-plugin",
    "mysql-aurora-database-plugin",
    "mysql-rds-database-plugin",
    "mysql-legacy-database-plugin",
    "redis-database-plugin",
];

const PG_USERNAME_TEMPLATE: &str = r#"{{ printf "v-%s-%s-%s-%s" (.DisplayName | truncate 8) (.RoleName | truncate 8) (random 20) (unix_time) | truncate 63 }}"#;
const MYSQL_USERNAME_TEMPLATE: &str = r#"{{ printf "v-%s-%s-%s-%s" (.DisplayName | truncate 10) (.RoleName | truncate 10) (random 20) (unix_time) | truncate 32 }}"#;
const MYSQL_LEGACY_USERNAME_TEMPLATE: &str =
    r#"{{ printf "v-%s-%s-%s" (.RoleName | truncate 4) (random 4) (unix_time) | truncate 16 }}"#;
const REDIS_USERNAME_TEMPLATE: &str = r#"{{ printf "V_%s_%s_%s_%s" (.DisplayName | uppercase | truncate 10) (.RoleName | uppercase | truncate 10) (random 20 | uppercase) (unix_time) | truncate 64 }}"#;

const PG_RENEW: &str = r#"ALTER ROLE "{{name}}" VALID UNTIL '{{expiration}}';"#;
const PG_ROTATE: &str = r#"ALTER ROLE "{{name}}" WITH PASSWORD '{{password}}';"#;
const MYSQL_REVOKE: &str =
    "REVOKE ALL PRIVILEGES, GRANT OPTION FROM '{{name}}'@'%'; DROP USER '{{name}}'@'%'";
const MYSQL_ROTATE: &str = "ALTER USER '{{username}}'@'%' IDENTIFIED BY '{{password}}';";
const REDIS_DEFAULT_RULES: &str = r#"["~*", "+@read"]"#;

/// Which database a plugin talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Postgres,
    MySql { legacy: bool },
    Redis,
}

impl Kind {
    pub(crate) fn of(plugin_name: &str) -> Option<Kind> {
        Some(match plugin_name {
            "postgresql-database-plugin" => Kind::Postgres,
            "mysql-database-plugin"
            | "mysql-aurora-database-plugin"
            | "mysql-rds-database-plugin" => Kind::MySql { legacy: false },
            "mysql-legacy-database-plugin" => Kind::MySql { legacy: true },
            "redis-database-plugin" => Kind::Redis,
            _ => return None,
        })
    }

    pub(crate) fn default_username_template(self) -> &'static str {
        match self {
            Kind::Postgres => PG_USERNAME_TEMPLATE,
            Kind::MySql { legacy: false } => MYSQL_USERNAME_TEMPLATE,
            Kind::MySql { legacy: true } => MYSQL_LEGACY_USERNAME_TEMPLATE,
            Kind::Redis => REDIS_USERNAME_TEMPLATE,
        }
    }

    /// Whether the plugin can issue this credential type (SQL plugins take any: the statements
    /// decide what `{{public_key}}` or `{{subject}}` mean; Redis only passwords).
    pub(crate) fn supports(self, credential_type: &str) -> bool {
        credential_type == "password" || self != Kind::Redis
    }
}

/// The credential a new user is created with.
#[derive(Debug, Clone)]
pub(crate) enum Credential {
    Password(String),
    PublicKey(String),
    Subject(String),
}

/// A live client for one connection.
#[derive(Debug)]
pub(crate) struct Client {
    pub(crate) kind: Kind,
    db: Db,
    /// Serialises PostgreSQL's default revocations of this client, so that at most one of its
    /// connections waits for the advisory lock (`pg_default_delete`).
    default_revocations: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
enum Db {
    Postgres(PgPool),
    MySql(MySqlPool),
    Redis(Box<redis::Client>),
}

fn bad(message: impl std::fmt::Display) -> EngineError {
    EngineError::BadRequest(message.to_string())
}

fn failed(message: impl std::fmt::Display) -> EngineError {
    EngineError::Internal(message.to_string())
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn escape(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The connection URL with `{{username}}` and `{{password}}` filled in (escaped unless
/// `disable_escaping`).
pub(crate) fn connection_url(details: &Data) -> Result<String, EngineError> {
    let url = fields::string(details, "connection_url")?.unwrap_or_default();
    let username = fields::string(details, "username")?.unwrap_or_default();
    let password = fields::string(details, "password")?.unwrap_or_default();
    let raw = fields::bool(details, "disable_escaping")?.unwrap_or(false);
    let (username, password) = if raw {
        (username, password)
    } else {
        (escape(&username), escape(&password))
    };
    Ok(url
        .replace("{{username}}", &username)
        .replace("{{password}}", &password))
}

/// The URL as read back: a literal password in it is replaced by `xxxxx` (Go's
/// `url.Redacted`), and so is a `key=value` string's `password`; templated ones are shown as
/// written.
pub(crate) fn redact_url(url: &str) -> String {
    if pg_conninfo::is_conninfo(url) {
        return pg_conninfo::redacted(url);
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    match userinfo.split_once(':') {
        Some((user, password)) if password != "{{password}}" && !password.is_empty() => {
            format!("{scheme}://{user}:xxxxx{}", &rest[at..])
        }
        _ => url.to_owned(),
    }
}

/// Whether the URL carries a literal password (Vault then warns on write).
pub(crate) fn url_has_password(url: &str) -> bool {
    redact_url(url) != url
}

fn percent_decode(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&raw[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A MySQL connection string: a URL (`mysql://user:pw@host:port/db`) or Go's DSN
/// (`user:pw@tcp(host:port)/db?params`, what upstream documents).
fn mysql_options(url: &str) -> Result<MySqlConnectOptions, EngineError> {
    if url.starts_with("mysql://") || url.starts_with("mariadb://") {
        let url = url.replacen("mariadb://", "mysql://", 1);
        return url
            .parse::<MySqlConnectOptions>()
            .map_err(|err| bad(format!("invalid connection_url: {err}")));
    }
    let at = url
        .rfind('@')
        .ok_or_else(|| bad("invalid connection_url: missing '@' in the DSN"))?;
    let (userinfo, rest) = (&url[..at], &url[at + 1..]);
    let (user, password) = match userinfo.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (userinfo, None),
    };
    let (address, path) = match rest.split_once('/') {
        Some((a, p)) => (a, p),
        None => (rest, ""),
    };
    let address = address
        .strip_prefix("tcp(")
        .and_then(|a| a.strip_suffix(')'))
        .unwrap_or(address);
    let (host, port) = match address.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .map_err(|_| bad(format!("invalid connection_url: bad port {p:?}")))?,
        ),
        None if address.is_empty() => ("127.0.0.1", 3306),
        None => (address, 3306),
    };
    let database = path.split('?').next().unwrap_or_default();
    let mut options = MySqlConnectOptions::new()
        .host(host)
        .port(port)
        .username(&percent_decode(user));
    if let Some(password) = password.filter(|p| !p.is_empty()) {
        options = options.password(&percent_decode(password));
    }
    if !database.is_empty() {
        options = options.database(database);
    }
    Ok(options)
}

/// Builds the client of a connection from its stored details; with `verify`, connects once
/// and answers a clear 400 when the database cannot be reached.
pub(crate) async fn connect(
    kind: Kind,
    details: &Data,
    verify: bool,
) -> Result<Client, EngineError> {
    let max_open = fields::int(details, "max_open_connections")?
        .filter(|n| *n > 0)
        .unwrap_or(4);
    let max_open = u32::try_from(max_open).unwrap_or(4);
    let db = match kind {
        Kind::Postgres => {
            let url = connection_url(details)?;
            if url.is_empty() {
                return Err(bad("connection_url cannot be empty"));
            }
            let options = if pg_conninfo::is_conninfo(&url) {
                pg_conninfo::options(&url)
                    .map_err(|err| bad(format!("invalid connection_url: {err}")))?
            } else {
                url.parse::<PgConnectOptions>()
                    .map_err(|err| bad(format!("invalid connection_url: {err}")))?
            };
            if verify {
                // One direct connection: a pool would retry a refused one until its timeout.
                let con = bounded("connect", sqlx::PgConnection::connect_with(&options))
                    .await
                    .map_err(verify_failed)?;
                let _ = con.close().await;
            }
            let pool = PgPoolOptions::new()
                .max_connections(max_open)
                .acquire_timeout(TIMEOUT)
                .connect_lazy_with(options);
            Db::Postgres(pool)
        }
        Kind::MySql { .. } => {
            let url = connection_url(details)?;
            if url.is_empty() {
                return Err(bad("connection_url cannot be empty"));
            }
            let options = mysql_options(&url)?;
            if verify {
                let con = bounded("connect", sqlx::MySqlConnection::connect_with(&options))
                    .await
                    .map_err(verify_failed)?;
                let _ = con.close().await;
            }
            let pool = MySqlPoolOptions::new()
                .max_connections(max_open)
                .acquire_timeout(TIMEOUT)
                .connect_lazy_with(options);
            Db::MySql(pool)
        }
        Kind::Redis => {
            let host = fields::string(details, "host")?.unwrap_or_default();
            if host.is_empty() {
                return Err(bad("host cannot be empty"));
            }
            let port = fields::int(details, "port")?.unwrap_or(6379);
            let tls = fields::bool(details, "tls")?.unwrap_or(false);
            let insecure_tls = fields::bool(details, "insecure_tls")?.unwrap_or(false);
            let ca_cert = fields::string(details, "ca_cert")?.unwrap_or_default();
            let username = fields::string(details, "username")?.unwrap_or_default();
            let password = fields::string(details, "password")?.unwrap_or_default();
            let auth = match (username.is_empty(), password.is_empty()) {
                (true, true) => String::new(),
                (_, false) => format!("{}:{}@", escape(&username), escape(&password)),
                (false, true) => format!("{}@", escape(&username)),
            };
            let client = if !tls {
                redis::Client::open(format!("redis://{auth}{host}:{port}"))
            } else if insecure_tls {
                // The Redis crate's spelling of "do not verify the server's certificate".
                redis::Client::open(format!("rediss://{auth}{host}:{port}/#insecure"))
            } else if ca_cert.trim().is_empty() {
                redis::Client::open(format!("rediss://{auth}{host}:{port}"))
            } else {
                if !ca_cert.contains("-----BEGIN CERTIFICATE-----") {
                    return Err(bad("ca_cert must be a PEM-encoded certificate"));
                }
                redis::Client::build_with_tls(
                    format!("rediss://{auth}{host}:{port}"),
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(ca_cert.into_bytes()),
                    },
                )
            }
            .map_err(|err| bad(format!("invalid redis settings: {err}")))?;
            Db::Redis(Box::new(client))
        }
    };
    let client = Client {
        kind,
        db,
        default_revocations: tokio::sync::Mutex::new(()),
    };
    if verify && kind == Kind::Redis {
        client.ping().await.map_err(verify_failed)?;
    }
    Ok(client)
}

fn verify_failed(err: String) -> EngineError {
    bad(format!(
        "error creating database object: error verifying connection: {err}"
    ))
}

/// Splits statements on `;` and renders each piece.
fn render_statements(statements: &[String], values: &[(&str, &str)]) -> Vec<String> {
    statements
        .iter()
        .flat_map(|s| s.split(';'))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|piece| {
            let mut out = piece.to_owned();
            for (name, value) in values {
                out = out.replace(&format!("{{{{{name}}}}}"), value);
            }
            out
        })
        .collect()
}

async fn bounded<T, E: std::fmt::Display>(
    what: &str,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(TIMEOUT, work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(format!("{what}: {err}")),
        Err(_) => Err(format!("{what}: timed out after {}s", TIMEOUT.as_secs())),
    }
}

impl Client {
    /// Checks the database answers.
    pub(crate) async fn ping(&self) -> Result<(), String> {
        match &self.db {
            Db::Postgres(pool) => bounded("connect", sqlx::raw_sql("SELECT 1").execute(pool))
                .await
                .map(drop),
            Db::MySql(pool) => bounded("connect", sqlx::raw_sql("SELECT 1").execute(pool))
                .await
                .map(drop),
            Db::Redis(client) => {
                let mut con = bounded("connect", client.get_multiplexed_async_connection()).await?;
                bounded("ping", redis::cmd("PING").query_async::<String>(&mut con))
                    .await
                    .map(drop)
            }
        }
    }

    /// Closes the client's connections.
    pub(crate) async fn close(&self) {
        match &self.db {
            Db::Postgres(pool) => pool.close().await,
            Db::MySql(pool) => pool.close().await,
            Db::Redis(_) => {}
        }
    }

    async fn run_sql(&self, queries: &[String], transaction: bool) -> Result<(), String> {
        match &self.db {
            Db::Postgres(pool) => {
                let work = async {
                    // One statement is atomic by itself: no BEGIN/COMMIT round trips.
                    if transaction && queries.len() > 1 {
                        let mut tx = pool.begin().await?;
                        for q in queries {
                            sqlx::raw_sql(AssertSqlSafe(q.clone()))
                                .execute(&mut *tx)
                                .await?;
                        }
                        tx.commit().await
                    } else {
                        for q in queries {
                            sqlx::raw_sql(AssertSqlSafe(q.clone()))
                                .execute(pool)
                                .await?;
                        }
                        Ok(())
                    }
                };
                bounded("postgresql", work).await
            }
            Db::MySql(pool) => {
                let work = async {
                    let mut con = pool.acquire().await?;
                    for q in queries {
                        sqlx::raw_sql(AssertSqlSafe(q.clone()))
                            .execute(&mut *con)
                            .await?;
                    }
                    Ok::<(), sqlx::Error>(())
                };
                bounded("mysql", work).await
            }
            Db::Redis(_) => Err("not a SQL database".to_owned()),
        }
    }

    async fn redis_acl(&self, args: &[String]) -> Result<(), String> {
        let Db::Redis(client) = &self.db else {
            return Err("not a Redis database".to_owned());
        };
        let mut con = bounded("connect", client.get_multiplexed_async_connection()).await?;
        let mut cmd = redis::cmd("ACL");
        for arg in args {
            cmd.arg(arg);
        }
        bounded("redis", cmd.query_async::<redis::Value>(&mut con))
            .await
            .map(drop)
    }

    /// Creates `username` with `credential`, expiring at `expiration` (`YYYY-MM-DD
    /// HH:MM:SS+0000`); on failure runs `rollback` (best effort) and answers the creation's
    /// error.
    pub(crate) async fn new_user(
        &self,
        username: &str,
        credential: &Credential,
        expiration: &str,
        creation: &[String],
        rollback: &[String],
    ) -> Result<(), EngineError> {
        if self.kind == Kind::Redis {
            let Credential::Password(password) = credential else {
                return Err(bad("unsupported credential_type"));
            };
            let rules = creation
                .iter()
                .map(|s| s.trim())
                .find(|s| !s.is_empty())
                .unwrap_or(REDIS_DEFAULT_RULES);
            let rules: Vec<String> = serde_json::from_str(rules).map_err(|err| {
                bad(format!(
                    "error unmarshalling REDIS rules in the creation statement JSON: {err}"
                ))
            })?;
            let mut args = vec![
                "SETUSER".to_owned(),
                username.to_owned(),
                "ON".to_owned(),
                format!(">{password}"),
            ];
            args.extend(rules);
            return self.redis_acl(&args).await.map_err(failed);
        }
        if creation.iter().all(|s| s.trim().is_empty()) {
            return Err(bad("empty creation statements"));
        }
        let (password, public_key, subject) = match credential {
            Credential::Password(p) => (p.as_str(), "", ""),
            Credential::PublicKey(k) => ("", k.as_str(), ""),
            Credential::Subject(s) => ("", "", s.as_str()),
        };
        let values = [
            ("name", username),
            ("username", username),
            ("password", password),
            ("expiration", expiration),
            ("public_key", public_key),
            ("subject", subject),
        ];
        let queries = render_statements(creation, &values);
        if let Err(err) = self.run_sql(&queries, true).await {
            let rollback = render_statements(rollback, &values);
            if !rollback.is_empty()
                && let Err(rollback_err) = self.run_sql(&rollback, false).await
            {
                tracing::warn!(username, error = %rollback_err, "rollback statements failed");
            }
            return Err(failed(format!("creating the database user failed: {err}")));
        }
        Ok(())
    }

    /// Extends `username`'s expiry (renewals); the plugin default for PostgreSQL sets `VALID
    /// UNTIL`, MySQL and Redis have no expiry and do nothing without statements.
    pub(crate) async fn update_expiration(
        &self,
        username: &str,
        expiration: &str,
        statements: &[String],
    ) -> Result<(), EngineError> {
        let statements: Vec<String> = if statements.iter().any(|s| !s.trim().is_empty()) {
            statements.to_vec()
        } else if self.kind == Kind::Postgres {
            vec![PG_RENEW.to_owned()]
        } else {
            return Ok(());
        };
        if self.kind == Kind::Redis {
            return Ok(());
        }
        let values = [
            ("name", username),
            ("username", username),
            ("expiration", expiration),
        ];
        self.run_sql(&render_statements(&statements, &values), true)
            .await
            .map_err(failed)
    }

    /// Sets `username`'s password (static rotations, root rotation), with `statements` or the
    /// plugin's default.
    pub(crate) async fn change_password(
        &self,
        username: &str,
        password: &str,
        statements: &[String],
    ) -> Result<(), EngineError> {
        if self.kind == Kind::Redis {
            return self
                .redis_acl(&[
                    "SETUSER".to_owned(),
                    username.to_owned(),
                    "RESETPASS".to_owned(),
                    format!(">{password}"),
                ])
                .await
                .map_err(failed);
        }
        let statements: Vec<String> = if statements.iter().any(|s| !s.trim().is_empty()) {
            statements.to_vec()
        } else {
            vec![
                match self.kind {
                    Kind::Postgres => PG_ROTATE,
                    _ => MYSQL_ROTATE,
                }
                .to_owned(),
            ]
        };
        let values = [
            ("name", username),
            ("username", username),
            ("password", password),
        ];
        self.run_sql(&render_statements(&statements, &values), true)
            .await
            .map_err(failed)
    }

    /// Drops `username` with `statements`, or the plugin's default revocation.
    pub(crate) async fn delete_user(
        &self,
        username: &str,
        statements: &[String],
    ) -> Result<(), EngineError> {
        let given = statements.iter().any(|s| !s.trim().is_empty());
        let values = [("name", username), ("username", username)];
        match self.kind {
            Kind::Redis => self
                .redis_acl(&["DELUSER".to_owned(), username.to_owned()])
                .await
                .map_err(failed),
            Kind::MySql { .. } => {
                let statements = if given {
                    statements.to_vec()
                } else {
                    vec![MYSQL_REVOKE.to_owned()]
                };
                self.run_sql(&render_statements(&statements, &values), false)
                    .await
                    .map_err(failed)
            }
            Kind::Postgres if given => self
                .run_sql(&render_statements(statements, &values), true)
                .await
                .map_err(failed),
            Kind::Postgres => self.pg_default_delete(username).await.map_err(failed),
        }
    }

    /// Upstream's default PostgreSQL revocation: if the role exists, revoke what it was
    /// granted on the database and every schema, then drop it.
    ///
    /// `REVOKE ... ON DATABASE` rewrites the database's catalog row, and two transactions
    /// doing it at once fail with "tuple concurrently updated". So the revocation runs in one
    /// transaction holding a transaction-level advisory lock ([`PG_REVOCATION_LOCK`]), which
    /// serialises it against every other cairn client of the database (other mounts, other
    /// servers), and is retried a few times when a statement outside cairn's control (a
    /// `GRANT ... ON DATABASE` in someone's creation statements) still collides.
    async fn pg_default_delete(&self, username: &str) -> Result<(), String> {
        let Db::Postgres(pool) = &self.db else {
            return Err("not PostgreSQL".to_owned());
        };
        // One waiting connection per client at most; the advisory lock does the rest.
        let _one_at_a_time = self.default_revocations.lock().await;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match bounded("postgresql", pg_revoke_and_drop(pool, username)).await {
                Err(err) if attempt < 5 && err.contains("tuple concurrently updated") => {
                    tokio::time::sleep(std::time::Duration::from_millis(20 * attempt)).await;
                }
                outcome => return outcome,
            }
        }
    }
}

/// The advisory lock key cairn's default PostgreSQL revocations take (an arbitrary constant:
/// "cairn" in ASCII).
const PG_REVOCATION_LOCK: i64 = 0x63_61_69_72_6e;

/// One attempt at the default revocation, in one transaction: lock, look the role up, revoke
/// its privileges on every schema and the database, drop it.
async fn pg_revoke_and_drop(pool: &PgPool, username: &str) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(PG_REVOCATION_LOCK)
        .execute(&mut *tx)
        .await?;
    let exists: Option<(String,)> =
        sqlx::query_as("SELECT rolname::text FROM pg_roles WHERE rolname = $1")
            .bind(username)
            .fetch_optional(&mut *tx)
            .await?;
    if exists.is_none() {
        return tx.commit().await;
    }
    let (database,): (String,) = sqlx::query_as("SELECT current_database()::text")
        .fetch_one(&mut *tx)
        .await?;
    let schemas: Vec<(String,)> = sqlx::query_as(
        "SELECT nspname::text FROM pg_namespace WHERE nspname NOT LIKE 'pg_%' AND nspname <> 'information_schema'",
    )
    .fetch_all(&mut *tx)
    .await?;
    let user = quote_ident(username);
    for (schema,) in &schemas {
        let schema = quote_ident(schema);
        for q in [
            format!("REVOKE ALL PRIVILEGES ON ALL TABLES IN SCHEMA {schema} FROM {user}"),
            format!("REVOKE ALL PRIVILEGES ON ALL SEQUENCES IN SCHEMA {schema} FROM {user}"),
            format!("REVOKE USAGE ON SCHEMA {schema} FROM {user}"),
        ] {
            sqlx::raw_sql(AssertSqlSafe(q)).execute(&mut *tx).await?;
        }
    }
    for q in [
        format!(
            "REVOKE ALL ON DATABASE {} FROM {user}",
            quote_ident(&database)
        ),
        format!("DROP ROLE IF EXISTS {user}"),
    ] {
        sqlx::raw_sql(AssertSqlSafe(q)).execute(&mut *tx).await?;
    }
    tx.commit().await
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_split_on_semicolons_and_rendered() {
        let out = render_statements(
            &[
                "CREATE ROLE \"{{name}}\" PASSWORD '{{password}}'; GRANT x TO \"{{name}}\";"
                    .to_owned(),
            ],
            &[("name", "u1"), ("password", "p")],
        );
        assert_eq!(
            out,
            vec!["CREATE ROLE \"u1\" PASSWORD 'p'", "GRANT x TO \"u1\""]
        );
    }

    #[test]
    fn urls_are_templated_escaped_and_redacted() {
        let mut details = Data::new();
        details.insert(
            "connection_url".into(),
            "postgresql://{{username}}:{{password}}@h/db".into(),
        );
        details.insert("username".into(), "ad min".into());
        details.insert("password".into(), "p@ss".into());
        assert_eq!(
            connection_url(&details).unwrap(),
            "postgresql://ad%20min:p%40ss@h/db"
        );
        assert_eq!(
            redact_url("postgresql://u:secret@h:5432/db"),
            "postgresql://u:xxxxx@h:5432/db"
        );
        assert_eq!(
            redact_url("postgresql://{{username}}:{{password}}@h/db"),
            "postgresql://{{username}}:{{password}}@h/db"
        );
        assert!(url_has_password("mysql://u:pw@h/db"));
    }

    #[test]
    fn a_go_mysql_dsn_is_understood() {
        let options = mysql_options("root:pw@tcp(127.0.0.1:3307)/test?parseTime=true").unwrap();
        assert_eq!(options.get_host(), "127.0.0.1");
        assert_eq!(options.get_port(), 3307);
        assert_eq!(options.get_username(), "root");
        assert_eq!(options.get_database(), Some("test"));
    }
}
