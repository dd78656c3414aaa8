//! The engine's keys and records, in the mount's storage view (the upstream plugin's layout):
//!
//! - `config`: the [`Config`] (directory connection, bind credentials, password settings);
//! - `roles/<name>`: a [`Role`]; `creds/<name>`: its [`Creds`] (current and last password);
//! - `library/<set>`: a [`LibrarySet`];
//! - `checkout/<account>`: the [`CheckOut`] state of an account in a set, `password/<account>`
//!   its current password (a JSON string);
//! - `wal/role/<name>`, `wal/account/<account>`, `wal/root`: a [`PendingPassword`] on its way
//!   into the directory.
//!
//! Invariant: a new password is written to its `wal/` key before the directory is asked to take
//! it, and the `wal/` key is deleted only after the record holding the new password was
//! stored; so a crash anywhere in between leaves the password the directory may hold in storage,
//! and the periodic hook rolls it forward.

use secrets_sdk::{EngineError, EngineStorage};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub(crate) const CONFIG: &str = "config";
pub(crate) const ROLE: &str = "roles/";
pub(crate) const CREDS: &str = "creds/";
pub(crate) const LIBRARY: &str = "library/";
pub(crate) const CHECKOUT: &str = "checkout/";
pub(crate) const PASSWORD: &str = "password/";
pub(crate) const WAL_ROLE: &str = "wal/role/";
pub(crate) const WAL_ACCOUNT: &str = "wal/account/";
pub(crate) const WAL_ROOT: &str = "wal/root";

/// Which directory the engine talks to, and so how a password is set and where its last
/// change is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Schema {
    /// Active Directory: `unicodePwd` (quoted UTF-16LE, over LDAPS or StartTLS), `pwdLastSet`,
    /// accounts found by `userPrincipalName`.
    #[default]
    Ad,
    /// OpenLDAP: the password modify extended operation (RFC 3062) on `userPassword`,
    /// `pwdChangedTime` (ppolicy overlay), accounts found by `cn`.
    Openldap,
}

impl Schema {
    pub(crate) fn parse(raw: &str) -> Option<Schema> {
        match raw.to_ascii_lowercase().as_str() {
            "ad" | "activedirectory" | "active_directory" => Some(Schema::Ad),
            "openldap" => Some(Schema::Openldap),
            _ => None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Schema::Ad => "ad",
            Schema::Openldap => "openldap",
        }
    }

    /// The attribute a service account's name is matched against by default.
    pub(crate) fn default_userattr(self) -> &'static str {
        match self {
            Schema::Ad => "userPrincipalName",
            Schema::Openldap => "cn",
        }
    }
}

/// The engine's configuration (`config`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Config {
    pub(crate) version: u32,
    #[serde(default)]
    pub(crate) schema: Schema,
    /// Comma-separated LDAP URLs, tried in order.
    pub(crate) url: String,
    pub(crate) binddn: String,
    /// Never returned.
    pub(crate) bindpass: String,
    #[serde(default)]
    pub(crate) userdn: String,
    #[serde(default)]
    pub(crate) upndomain: String,
    #[serde(default)]
    pub(crate) userattr: String,
    #[serde(default)]
    pub(crate) certificate: String,
    #[serde(default)]
    pub(crate) insecure_tls: bool,
    #[serde(default)]
    pub(crate) starttls: bool,
    #[serde(default)]
    pub(crate) tls_min_version: String,
    #[serde(default)]
    pub(crate) tls_max_version: String,
    /// Seconds.
    pub(crate) request_timeout: u64,
    /// Seconds.
    pub(crate) ttl: u64,
    /// Seconds.
    pub(crate) max_ttl: u64,
    #[serde(default)]
    pub(crate) password_policy: String,
    #[serde(default)]
    pub(crate) length: u64,
    #[serde(default)]
    pub(crate) formatter: String,
    /// Seconds.
    pub(crate) last_rotation_tolerance: u64,
    /// The bind password before the last `rotate-root`, tried for ten minutes after it (a
    /// directory with several servers may not have the new one everywhere yet).
    #[serde(default)]
    pub(crate) last_bindpass: String,
    /// Unix milliseconds of the last `rotate-root` (0: never).
    #[serde(default)]
    pub(crate) last_bind_password_rotation_ms: i64,
}

/// A role (`roles/:name`): one service account whose password the engine owns.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Role {
    pub(crate) version: u32,
    pub(crate) service_account_name: String,
    /// Seconds.
    pub(crate) ttl: u64,
    /// Unix milliseconds of the last rotation this engine made (0: never).
    #[serde(default)]
    pub(crate) last_rotation_ms: i64,
}

/// A role's passwords (`creds/:name`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Creds {
    pub(crate) version: u32,
    pub(crate) username: String,
    pub(crate) current_password: String,
    #[serde(default)]
    pub(crate) last_password: String,
}

/// A library set (`library/:set`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct LibrarySet {
    pub(crate) version: u32,
    pub(crate) service_account_names: Vec<String>,
    /// Seconds; 0: unlimited.
    pub(crate) ttl: u64,
    /// Seconds; 0: unlimited.
    pub(crate) max_ttl: u64,
    #[serde(default)]
    pub(crate) disable_check_in_enforcement: bool,
}

/// Whether an account of a set is available, and who holds it when it is not.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct CheckOut {
    pub(crate) version: u32,
    pub(crate) available: bool,
    #[serde(default)]
    pub(crate) borrower_entity_id: String,
    /// The borrowing token's accessor (shown by `status`).
    #[serde(default)]
    pub(crate) borrower_accessor: String,
    /// The SHA-256 of the borrowing token (compared on check-in; never shown).
    #[serde(default)]
    pub(crate) borrower_token_hash: String,
    /// Random, per check-out; kept in the lease so an old lease never checks in a later
    /// borrower's account.
    #[serde(default)]
    pub(crate) checkout_id: String,
}

impl CheckOut {
    pub(crate) fn available() -> CheckOut {
        CheckOut {
            version: 1,
            available: true,
            ..CheckOut::default()
        }
    }
}

/// A password on its way into the directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PendingPassword {
    pub(crate) version: u32,
    pub(crate) password: String,
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
