//! The engine's keys and records, in the mount's storage view (Vault's layout):
//!
//! - `config/<name>`: a [`Connection`];
//! - `role/<name>`: a dynamic [`Role`];
//! - `static-role/<name>`: a [`StaticRole`] with its current password;
//! - `wal/root/<name>`: a [`PendingPassword`] for a root rotation in flight;
//! - `wal/static/<name>`: a [`PendingPassword`] for a static rotation in flight.
//!
//! Invariant: a password is written to its `wal/` key before any database is asked to take
//! it, and the `wal/` key is deleted only after the record holding the new password was
//! stored; so a crash anywhere in between leaves the new password in storage.

use secrets_sdk::{Data, EngineError, EngineStorage};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub(crate) const CONFIG: &str = "config/";
pub(crate) const ROLE: &str = "role/";
pub(crate) const STATIC_ROLE: &str = "static-role/";
pub(crate) const WAL_ROOT: &str = "wal/root/";
pub(crate) const WAL_STATIC: &str = "wal/static/";

/// A connection (`config/:name`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Connection {
    pub(crate) version: u32,
    pub(crate) plugin_name: String,
    #[serde(default)]
    pub(crate) plugin_version: String,
    /// Every plugin field (`connection_url`, `username`, `password`, ...), the password
    /// included; never returned as is.
    pub(crate) connection_details: Data,
    #[serde(default)]
    pub(crate) allowed_roles: Vec<String>,
    #[serde(default)]
    pub(crate) root_credentials_rotate_statements: Vec<String>,
    #[serde(default)]
    pub(crate) password_policy: String,
    #[serde(default = "yes")]
    pub(crate) verify_connection: bool,
}

fn yes() -> bool {
    true
}

impl Connection {
    /// Whether `role` may use this connection: `*`, its name, or a glob matching it.
    pub(crate) fn allows(&self, role: &str) -> bool {
        self.allowed_roles
            .iter()
            .any(|pattern| pattern == "*" || stdx::glob::matches(pattern, role))
    }
}

/// The statements and credential settings both kinds of role share.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Credentials {
    /// `password`, `rsa_private_key` or `client_certificate`.
    pub(crate) credential_type: String,
    #[serde(default)]
    pub(crate) credential_config: std::collections::BTreeMap<String, String>,
}

/// A dynamic role (`roles/:name`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Role {
    pub(crate) version: u32,
    pub(crate) db_name: String,
    #[serde(default)]
    pub(crate) creation_statements: Vec<String>,
    #[serde(default)]
    pub(crate) revocation_statements: Vec<String>,
    #[serde(default)]
    pub(crate) rollback_statements: Vec<String>,
    #[serde(default)]
    pub(crate) renew_statements: Vec<String>,
    /// Seconds.
    #[serde(default)]
    pub(crate) default_ttl: u64,
    /// Seconds.
    #[serde(default)]
    pub(crate) max_ttl: u64,
    #[serde(flatten)]
    pub(crate) credentials: Credentials,
}

/// A static role (`static-roles/:name`): one existing database user whose password the engine
/// owns and rotates.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct StaticRole {
    pub(crate) version: u32,
    pub(crate) db_name: String,
    pub(crate) username: String,
    #[serde(default)]
    pub(crate) rotation_statements: Vec<String>,
    /// Seconds; 0 when the role rotates on `rotation_schedule`.
    #[serde(default)]
    pub(crate) rotation_period: u64,
    /// A cron expression (five fields), or empty.
    #[serde(default)]
    pub(crate) rotation_schedule: String,
    /// Seconds after a scheduled time during which the rotation may still happen; 0: no limit.
    #[serde(default)]
    pub(crate) rotation_window: u64,
    #[serde(flatten)]
    pub(crate) credentials: Credentials,
    /// The current credential.
    #[serde(default)]
    pub(crate) password: String,
    #[serde(default)]
    pub(crate) private_key: String,
    /// Unix milliseconds of the last rotation this engine made (0: never).
    #[serde(default)]
    pub(crate) last_rotation_ms: i64,
    /// Unix milliseconds of the next rotation due.
    #[serde(default)]
    pub(crate) next_rotation_ms: i64,
}

/// A password on its way into a database (root or static rotation in flight).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PendingPassword {
    pub(crate) version: u32,
    pub(crate) password: String,
    #[serde(default)]
    pub(crate) private_key: String,
    /// Unix milliseconds when the rotation began.
    pub(crate) created_ms: i64,
}

pub(crate) async fn get<T: DeserializeOwned>(
    storage: &dyn EngineStorage,
    key: &str,
) -> Result<Option<T>, EngineError> {
    match storage.get(key).await? {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|err| EngineError::Storage(format!("corrupt record at {key}: {err}"))),
    }
}

pub(crate) async fn put<T: Serialize>(
    storage: &dyn EngineStorage,
    key: &str,
    value: &T,
) -> Result<(), EngineError> {
    let bytes = serde_json::to_vec(value)
        .map_err(|err| EngineError::Storage(format!("encoding {key}: {err}")))?;
    Ok(storage.put(key, &bytes).await?)
}
