//! `config`: where the directory is, how to bind to it, and how passwords are made.
//!
//! A write merges the connection settings (`url`, `binddn`, `bindpass`, `userdn`, `upndomain`,
//! `userattr`, `schema`, TLS settings, `request_timeout`) into the stored ones, as upstream's
//! `ldaputil.NewConfigEntry`, and takes the password settings (`ttl`, `max_ttl`,
//! `password_policy`, `length`, `formatter`, `last_rotation_tolerance`) afresh, defaulting `ttl`
//! and `max_ttl` to the mount's lease TTLs. Nothing is checked against the directory. Every
//! validation failure is a 400 (upstream answers several with a 500; docs/compat.md lists
//! them). A read never returns `bindpass`.

use secrets_sdk::{Data, EngineError, Request, Response, fields};
use serde_json::{Value, json};

use crate::store::{self, Config, Schema};
use crate::{AdEngine, bad, directory, password};

/// The default `url`.
const DEFAULT_URL: &str = "ldap://127.0.0.1";
/// The default `request_timeout`, seconds.
const DEFAULT_REQUEST_TIMEOUT: u64 = 90;
/// The default `last_rotation_tolerance`, seconds.
const DEFAULT_TOLERANCE: u64 = 5;
/// The default TLS versions (upstream's `tls12` for both).
const DEFAULT_TLS: &str = "tls12";

fn tls_rank(version: &str) -> Option<u8> {
    match version {
        "tls10" => Some(10),
        "tls11" => Some(11),
        "tls12" => Some(12),
        "tls13" => Some(13),
        _ => None,
    }
}

fn check_url(url: &str) -> Result<(), EngineError> {
    let urls = directory::urls(url);
    if urls.is_empty() {
        return Err(bad("url must name at least one LDAP server"));
    }
    for one in urls {
        let Some((scheme, rest)) = one.split_once("://") else {
            return Err(bad(format!(
                "invalid url {one:?}: expected ldap:// or ldaps://"
            )));
        };
        if !matches!(scheme.to_ascii_lowercase().as_str(), "ldap" | "ldaps") {
            return Err(bad(format!(
                "invalid url {one:?}: the scheme must be ldap or ldaps"
            )));
        }
        let host = rest.split(['/', '?']).next().unwrap_or("");
        if host.is_empty() {
            return Err(bad(format!("invalid url {one:?}: no host")));
        }
    }
    Ok(())
}

impl AdEngine {
    pub(crate) async fn config(&self) -> Result<Option<Config>, EngineError> {
        store::get(self.storage(), store::CONFIG).await
    }

    /// The configuration, or 400 `the config is currently unset`.
    pub(crate) async fn require_config(&self) -> Result<Config, EngineError> {
        self.config()
            .await?
            .ok_or_else(|| bad("the config is currently unset"))
    }

    pub(crate) async fn handle_config(
        &self,
        request: &Request,
    ) -> Result<Option<Response>, EngineError> {
        match request.operation {
            secrets_sdk::Operation::Read => self.read_config().await,
            secrets_sdk::Operation::Create | secrets_sdk::Operation::Update => {
                self.write_config(request).await
            }
            secrets_sdk::Operation::Delete => {
                let _guard = self.lock.lock().await;
                self.storage().delete(store::CONFIG).await?;
                Ok(None)
            }
            _ => Err(EngineError::UnsupportedOperation),
        }
    }

    async fn write_config(&self, request: &Request) -> Result<Option<Response>, EngineError> {
        let data = &request.data;
        let _guard = self.lock.lock().await;
        let existing = self.config().await?;
        let mut config = existing.clone().unwrap_or_else(|| Config {
            version: 1,
            url: DEFAULT_URL.to_owned(),
            tls_min_version: DEFAULT_TLS.to_owned(),
            tls_max_version: DEFAULT_TLS.to_owned(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            ..Config::default()
        });
        if let Some(schema) = fields::string(data, "schema")? {
            config.schema = Schema::parse(&schema).ok_or_else(|| {
                bad(format!(
                    "invalid schema {schema:?}: expected \"ad\" or \"openldap\""
                ))
            })?;
        }
        for (name, slot) in [
            ("url", &mut config.url),
            ("binddn", &mut config.binddn),
            ("bindpass", &mut config.bindpass),
            ("userdn", &mut config.userdn),
            ("upndomain", &mut config.upndomain),
            ("userattr", &mut config.userattr),
            ("certificate", &mut config.certificate),
            ("tls_min_version", &mut config.tls_min_version),
            ("tls_max_version", &mut config.tls_max_version),
        ] {
            if let Some(value) = fields::string(data, name)? {
                *slot = value.trim().to_owned();
            }
        }
        if let Some(value) = fields::bool(data, "insecure_tls")? {
            config.insecure_tls = value;
        }
        if let Some(value) = fields::bool(data, "starttls")? {
            config.starttls = value;
        }
        if let Some(timeout) = fields::duration(data, "request_timeout")? {
            config.request_timeout = timeout.as_secs();
        }
        if config.url.is_empty() {
            config.url = DEFAULT_URL.to_owned();
        }
        check_url(&config.url)?;
        if config.tls_min_version.is_empty() {
            config.tls_min_version = DEFAULT_TLS.to_owned();
        }
        if config.tls_max_version.is_empty() {
            config.tls_max_version = DEFAULT_TLS.to_owned();
        }
        let (Some(min), Some(max)) = (
            tls_rank(&config.tls_min_version),
            tls_rank(&config.tls_max_version),
        ) else {
            return Err(bad(if tls_rank(&config.tls_min_version).is_none() {
                "invalid 'tls_min_version'"
            } else {
                "invalid 'tls_max_version'"
            }));
        };
        if max < min {
            return Err(bad(
                "'tls_max_version' must be greater than or equal to 'tls_min_version'",
            ));
        }
        if !config.certificate.is_empty() {
            directory::root_store(&config.certificate)?;
        }
        if config.binddn.is_empty() {
            return Err(bad("binddn is required"));
        }
        if config.bindpass.is_empty() {
            return Err(bad("bindpass is required"));
        }

        // The password settings are taken afresh on every write, as upstream.
        let ttl = fields::duration(data, "ttl")?.map_or(0, |d| d.as_secs());
        let max_ttl = fields::duration(data, "max_ttl")?.map_or(0, |d| d.as_secs());
        config.ttl = if ttl == 0 {
            request.ttls.default.as_secs()
        } else {
            ttl
        };
        config.max_ttl = if max_ttl == 0 {
            request.ttls.max.as_secs()
        } else {
            max_ttl
        };
        if config.ttl > config.max_ttl {
            return Err(bad("ttl must be smaller than or equal to max_ttl"));
        }
        config.password_policy = fields::string(data, "password_policy")?.unwrap_or_default();
        config.formatter = fields::string(data, "formatter")?.unwrap_or_default();
        config.length = match fields::int(data, "length")? {
            Some(length) if length < 0 => return Err(bad("length must not be negative")),
            Some(length) => length.unsigned_abs(),
            None if config.password_policy.is_empty() => password::DEFAULT_LENGTH,
            None => 0,
        };
        password::validate(&config.password_policy, config.length, &config.formatter)
            .map_err(bad)?;
        config.last_rotation_tolerance = fields::duration(data, "last_rotation_tolerance")?
            .map_or(DEFAULT_TOLERANCE, |d| d.as_secs());
        config.version = 1;
        store::put(self.storage(), store::CONFIG, &config).await?;
        Ok(None)
    }

    async fn read_config(&self) -> Result<Option<Response>, EngineError> {
        let Some(config) = self.config().await? else {
            return Ok(None);
        };
        let mut data = Data::new();
        let text = |s: &str| Value::String(s.to_owned());
        data.insert("url".into(), text(&config.url));
        data.insert("starttls".into(), Value::Bool(config.starttls));
        data.insert("insecure_tls".into(), Value::Bool(config.insecure_tls));
        data.insert("certificate".into(), text(&config.certificate));
        data.insert("binddn".into(), text(&config.binddn));
        data.insert("userdn".into(), text(&config.userdn));
        data.insert("upndomain".into(), text(&config.upndomain));
        data.insert("userattr".into(), text(&config.userattr));
        data.insert("schema".into(), text(config.schema.name()));
        data.insert("tls_min_version".into(), text(&config.tls_min_version));
        data.insert("tls_max_version".into(), text(&config.tls_max_version));
        data.insert("request_timeout".into(), json!(config.request_timeout));
        data.insert(
            "last_rotation_tolerance".into(),
            json!(config.last_rotation_tolerance),
        );
        data.insert("ttl".into(), json!(config.ttl));
        data.insert("max_ttl".into(), json!(config.max_ttl));
        data.insert("length".into(), json!(config.length));
        data.insert("formatter".into(), text(&config.formatter));
        data.insert("password_policy".into(), text(&config.password_policy));
        if config.last_bind_password_rotation_ms > 0 {
            data.insert(
                "last_bind_password_rotation".into(),
                text(&stdx::time::format_rfc3339_nanos(
                    config.last_bind_password_rotation_ms * 1_000_000,
                )),
            );
        }
        Ok(Some(Response::data(data)))
    }
}
