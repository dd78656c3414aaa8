//! `config/:name` (write with create vs update, read, delete; LIST in `lib.rs`),
//! `reset/:name` and `rotate-root/:name`.
//!
//! A write merges the plugin fields into the stored `connection_details` (an update keeps what
//! it does not name), checks the plugin, and with `verify_connection` (default true) connects:
//! an unreachable database is 400 `error creating database object: ...` and nothing is stored.
//! A read never shows the password (and redacts one written into `connection_url`).
//!
//! Root rotation: the new password (from the connection's password policy) goes to
//! `wal/root/<name>` first, then the database takes it (`root_rotation_statements` or the
//! plugin default), then the connection is stored with it and the WAL deleted. A WAL left by a
//! crash is rolled forward by [`DatabaseEngine::roll_forward_root`] (from the periodic hook):
//! the stored password still works → the database takes the pending one again; the pending
//! one works → it is stored; either way the WAL goes only once the connection holds a password
//! that works.

use secrets_sdk::{Data, EngineError, Operation, Request, Response, fields};
use serde_json::Value;

use crate::plugins::{self, Kind};
use crate::store::{self, Connection, PendingPassword};
use crate::{DatabaseEngine, bad};

/// The fields the engine keeps for itself; everything else belongs to the plugin.
const ENGINE_FIELDS: &[&str] = &[
    "name",
    "plugin_name",
    "plugin_version",
    "verify_connection",
    "allowed_roles",
    "root_rotation_statements",
    "password_policy",
];

/// Statement lists (`TypeStringSlice`): an array, or one string (kept whole: statements may
/// hold commas).
pub(crate) fn statements(data: &Data, name: &str) -> Result<Option<Vec<String>>, EngineError> {
    match data.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(Some(Vec::new())),
        Some(Value::String(s)) => Ok(Some(vec![s.clone()])),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(bad(format!(
                    "Field validation failed: error converting input for field {name:?}: list item is {other}"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|v| Some(v.into_iter().filter(|s| !s.trim().is_empty()).collect())),
        Some(other) => Err(bad(format!(
            "Field validation failed: error converting input for field {name:?}: expected a list, got {other}"
        ))),
    }
}

/// Vault's `plugin_version` canonical form (`v1.2.3`), or 400.
fn canonical_version(raw: &str) -> Result<String, EngineError> {
    let trimmed = raw.trim_start_matches('v');
    let core = trimmed.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty() || parts.len() > 3 || parts.iter().any(|p| p.parse::<u64>().is_err()) {
        return Err(bad(format!(
            "version {raw:?} is not a valid semantic version"
        )));
    }
    let mut numbers: Vec<String> = parts
        .iter()
        .map(|p| p.parse::<u64>().unwrap_or(0).to_string())
        .collect();
    while numbers.len() < 3 {
        numbers.push("0".to_owned());
    }
    Ok(format!("v{}{}", numbers.join("."), &trimmed[core.len()..]))
}

impl DatabaseEngine {
    pub(crate) async fn handle_connection(
        &self,
        request: &Request,
        name: &str,
    ) -> Result<Option<Response>, EngineError> {
        let key = format!("{}{name}", store::CONFIG);
        match request.operation {
            Operation::Read => {
                let Some(config) = self.connection(name).await? else {
                    return Ok(None);
                };
                Ok(Some(Response::data(read_view(&config))))
            }
            Operation::Delete => {
                self.storage().delete(&key).await?;
                self.forget_client(name).await;
                Ok(None)
            }
            Operation::Create | Operation::Update => self.write_connection(request, name).await,
            _ => Err(EngineError::UnsupportedOperation),
        }
    }

    async fn write_connection(
        &self,
        request: &Request,
        name: &str,
    ) -> Result<Option<Response>, EngineError> {
        let data = &request.data;
        let existing = self.connection(name).await?;
        let create = existing.is_none();
        let mut config = existing.unwrap_or(Connection {
            version: 1,
            verify_connection: true,
            ..Connection::default()
        });
        if let Some(plugin) = fields::string(data, "plugin_name")? {
            config.plugin_name = plugin;
        }
        if config.plugin_name.is_empty() {
            return Err(bad("empty plugin name"));
        }
        let Some(kind) = Kind::of(&config.plugin_name) else {
            return Err(bad(format!(
                "error creating database object: unknown plugin {:?}: known plugins are {}",
                config.plugin_name,
                plugins::PLUGINS.join(", ")
            )));
        };
        if let Some(version) = fields::string(data, "plugin_version")? {
            config.plugin_version = if version.is_empty() {
                String::new()
            } else {
                canonical_version(&version)?
            };
        }
        let verify = fields::bool(data, "verify_connection")?.unwrap_or(true);
        config.verify_connection = verify;
        if let Some(roles) = fields::comma_list(data, "allowed_roles")? {
            config.allowed_roles = roles;
        } else if create {
            config.allowed_roles = Vec::new();
        }
        if let Some(stmts) = statements(data, "root_rotation_statements")? {
            config.root_credentials_rotate_statements = stmts;
        }
        if let Some(policy) = fields::string(data, "password_policy")? {
            config.password_policy = policy;
        }
        for (field, value) in data {
            if !ENGINE_FIELDS.contains(&field.as_str()) && !value.is_null() {
                config
                    .connection_details
                    .insert(field.clone(), value.clone());
            }
        }
        if let Some(template) = fields::string(&config.connection_details, "username_template")?
            && !template.is_empty()
        {
            crate::template::render(&template, &Default::default(), 0)
                .map_err(|err| bad(format!("invalid username template: {err}")))?;
        }
        // Connecting (when asked) proves the settings before anything is stored.
        let client = plugins::connect(kind, &config.connection_details, verify)
            .await
            .map_err(|err| match err {
                EngineError::BadRequest(msg)
                    if !msg.starts_with("error creating database object") =>
                {
                    bad(format!("error creating database object: {msg}"))
                }
                other => other,
            })?;
        store::put(self.storage(), &format!("{}{name}", store::CONFIG), &config).await?;
        self.forget_client(name).await;
        if verify {
            self.clients
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(name.to_owned(), std::sync::Arc::new(client));
        } else {
            client.close().await;
        }
        let url = fields::string(&config.connection_details, "connection_url")?.unwrap_or_default();
        if plugins::url_has_password(&url) {
            return Ok(Some(Response::default().with_warning(
                "Password found in connection_url, use a templated url to enable root rotation and prevent read access to password information.",
            )));
        }
        Ok(None)
    }

    pub(crate) async fn reset(&self, name: &str) -> Result<Option<Response>, EngineError> {
        self.forget_client(name).await;
        let (config, client) = self.client(name).await?;
        if config.verify_connection {
            client
                .ping()
                .await
                .map_err(|err| bad(format!("error creating database object: {err}")))?;
        }
        Ok(None)
    }

    pub(crate) async fn rotate_root(&self, name: &str) -> Result<Option<Response>, EngineError> {
        let _guard = self.rotation_lock.lock().await;
        let (config, client) = self.client(name).await?;
        let username = fields::string(&config.connection_details, "username")?.unwrap_or_default();
        if username.is_empty() {
            return Err(bad(
                "unable to rotate root credentials: no username in configuration",
            ));
        }
        let password = fields::string(&config.connection_details, "password")?.unwrap_or_default();
        if password.is_empty() {
            return Err(bad(
                "unable to rotate root credentials: no password in configuration",
            ));
        }
        let new_password = self.passwords.generate(&config.password_policy).await?;
        let wal_key = format!("{}{name}", store::WAL_ROOT);
        store::put(
            self.storage(),
            &wal_key,
            &PendingPassword {
                version: 1,
                password: new_password.clone(),
                private_key: String::new(),
                created_ms: self.now_ms(),
            },
        )
        .await?;
        if let Err(err) = client
            .change_password(
                &username,
                &new_password,
                &config.root_credentials_rotate_statements,
            )
            .await
        {
            // The database refused: the old password still holds, the pending one is void.
            self.storage().delete(&wal_key).await?;
            return Err(bad(format!("failed to update user: {err}")));
        }
        self.commit_root(name, config, new_password).await?;
        Ok(None)
    }

    /// Stores `password` as connection `name`'s, then deletes its WAL and the cached client.
    async fn commit_root(
        &self,
        name: &str,
        mut config: Connection,
        password: String,
    ) -> Result<(), EngineError> {
        config
            .connection_details
            .insert("password".to_owned(), Value::String(password));
        store::put(self.storage(), &format!("{}{name}", store::CONFIG), &config).await?;
        self.storage()
            .delete(&format!("{}{name}", store::WAL_ROOT))
            .await?;
        self.forget_client(name).await;
        Ok(())
    }

    /// Finishes a root rotation a crash interrupted (see the module doc).
    pub(crate) async fn roll_forward_root(&self, name: &str) -> Result<(), EngineError> {
        let wal_key = format!("{}{name}", store::WAL_ROOT);
        let Some(pending) = store::get::<PendingPassword>(self.storage(), &wal_key).await? else {
            return Ok(());
        };
        let Some(config) = self.connection(name).await? else {
            self.storage().delete(&wal_key).await?;
            return Ok(());
        };
        let kind = Kind::of(&config.plugin_name).ok_or_else(|| bad("unknown plugin"))?;
        let username = fields::string(&config.connection_details, "username")?.unwrap_or_default();
        let old = plugins::connect(kind, &config.connection_details, true).await;
        if let Ok(old) = old {
            let changed = old
                .change_password(
                    &username,
                    &pending.password,
                    &config.root_credentials_rotate_statements,
                )
                .await;
            old.close().await;
            changed?;
            return self.commit_root(name, config, pending.password).await;
        }
        let mut with_new = config.connection_details.clone();
        with_new.insert(
            "password".to_owned(),
            Value::String(pending.password.clone()),
        );
        let new = plugins::connect(kind, &with_new, true).await?;
        new.close().await;
        self.commit_root(name, config, pending.password).await
    }
}

/// The read view of a connection: Vault's fields, without the password.
fn read_view(config: &Connection) -> Data {
    let mut details = config.connection_details.clone();
    details.remove("password");
    details.remove("private_key");
    if let Some(Value::String(url)) = details.get("connection_url") {
        let redacted = plugins::redact_url(url);
        details.insert("connection_url".to_owned(), Value::String(redacted));
    }
    let mut data = Data::new();
    data.insert(
        "plugin_name".to_owned(),
        Value::String(config.plugin_name.clone()),
    );
    data.insert(
        "plugin_version".to_owned(),
        Value::String(config.plugin_version.clone()),
    );
    data.insert("connection_details".to_owned(), Value::Object(details));
    data.insert(
        "allowed_roles".to_owned(),
        Value::Array(
            config
                .allowed_roles
                .iter()
                .cloned()
                .map(Value::String)
                .collect(),
        ),
    );
    data.insert(
        "root_credentials_rotate_statements".to_owned(),
        Value::Array(
            config
                .root_credentials_rotate_statements
                .iter()
                .cloned()
                .map(Value::String)
                .collect(),
        ),
    );
    data.insert(
        "password_policy".to_owned(),
        Value::String(config.password_policy.clone()),
    );
    data.insert(
        "verify_connection".to_owned(),
        Value::Bool(config.verify_connection),
    );
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_versions_are_canonicalised_or_refused() {
        assert_eq!(canonical_version("1.2").unwrap(), "v1.2.0");
        assert_eq!(canonical_version("v1.2.3-beta").unwrap(), "v1.2.3-beta");
        assert!(canonical_version("banana").is_err());
    }
}
