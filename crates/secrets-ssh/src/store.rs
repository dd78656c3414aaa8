//! Every storage key of the ssh engine and the JSON records kept under them, in one place.
//!
//! Keys (relative to the mount's storage view, which the core's barrier encrypts):
//! - `roles/<name>`: a [`Role`];
//! - `keys/<name>`: a [`NamedKey`] (a private key with privileges on remote hosts);
//! - `config/zeroaddress`: a [`ZeroAddress`] (roles that accept any IP);
//! - `config/ca_public_key`, `config/ca_private_key`: the CA's halves, each a [`NamedKey`]
//!   (Vault's paths);
//! - `otp/<salted otp>`: an [`OtpEntry`], keyed by the HMAC-SHA256 of the OTP under the
//!   mount's salt, never by the OTP itself;
//! - `salt`: the mount's random salt (hex), made on first use;
//! - `host_keys/<ip>/<port>`: a [`HostKeyPin`], the host key a dynamic-key host showed the first
//!   time the engine connected to it.
//!
//! Invariants: every record carries `version` (1 for all of them so far) and reads fields it
//! does not know as absent (`#[serde(default)]`), so a newer writer's record still loads; a
//! record that does not decode is a 500 naming its key, never a silent default.

use std::collections::BTreeMap;

use secrets_sdk::{EngineError, EngineStorage};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub(crate) const ROLES: &str = "roles/";
pub(crate) const KEYS: &str = "keys/";
pub(crate) const ZERO_ADDRESS: &str = "config/zeroaddress";
pub(crate) const CA_PUBLIC_KEY: &str = "config/ca_public_key";
pub(crate) const CA_PRIVATE_KEY: &str = "config/ca_private_key";
pub(crate) const OTPS: &str = "otp/";
pub(crate) const SALT: &str = "salt";
pub(crate) const HOST_KEYS: &str = "host_keys/";

/// The role types (`key_type`).
pub(crate) const KEY_TYPE_OTP: &str = "otp";
pub(crate) const KEY_TYPE_DYNAMIC: &str = "dynamic";
pub(crate) const KEY_TYPE_CA: &str = "ca";

fn one() -> u32 {
    1
}

/// A role of any type; the fields a type does not use stay at their defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Role {
    #[serde(default = "one")]
    pub(crate) version: u32,
    pub(crate) key_type: String,
    /// The registered key's name (dynamic).
    pub(crate) key: String,
    pub(crate) key_bits: u32,
    pub(crate) admin_user: String,
    pub(crate) default_user: String,
    pub(crate) cidr_list: String,
    pub(crate) exclude_cidr_list: String,
    pub(crate) port: u16,
    pub(crate) install_script: String,
    pub(crate) allowed_users: String,
    pub(crate) allowed_users_template: bool,
    pub(crate) allowed_domains: String,
    pub(crate) key_option_specs: String,
    /// Seconds; 0 means unset.
    pub(crate) ttl: u64,
    /// Seconds; 0 means unset.
    pub(crate) max_ttl: u64,
    pub(crate) allowed_critical_options: String,
    pub(crate) allowed_extensions: String,
    pub(crate) default_critical_options: BTreeMap<String, String>,
    pub(crate) default_extensions: BTreeMap<String, String>,
    pub(crate) allow_user_certificates: bool,
    pub(crate) allow_host_certificates: bool,
    pub(crate) allow_bare_domains: bool,
    pub(crate) allow_subdomains: bool,
    pub(crate) allow_user_key_ids: bool,
    pub(crate) allow_empty_principals: bool,
    pub(crate) key_id_format: String,
    /// Key type (`rsa`, `ed25519`, `ecdsa`, `ec`, or an SSH algorithm name) to the sizes
    /// allowed.
    pub(crate) allowed_user_key_lengths: BTreeMap<String, Vec<u32>>,
    /// `default`, `ssh-rsa`, `rsa-sha2-256` or `rsa-sha2-512`.
    pub(crate) algorithm_signer: String,
    /// Seconds a certificate is back-dated by.
    pub(crate) not_before_duration: u64,
}

/// A key kept by the engine: a registered host key (`keys/`) or one half of the CA.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct NamedKey {
    #[serde(default = "one")]
    pub(crate) version: u32,
    pub(crate) key: String,
}

/// The roles allowed to accept any IP (`config/zeroaddress`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ZeroAddress {
    #[serde(default = "one")]
    pub(crate) version: u32,
    pub(crate) roles: Vec<String>,
}

/// What an issued, not yet used OTP stands for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct OtpEntry {
    #[serde(default = "one")]
    pub(crate) version: u32,
    pub(crate) username: String,
    pub(crate) ip: String,
    pub(crate) role_name: String,
}

/// The host key a dynamic-key host presented on first contact (trust on first use).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct HostKeyPin {
    #[serde(default = "one")]
    pub(crate) version: u32,
    /// `<algorithm> <base64>`, as in a known_hosts line after the host pattern.
    pub(crate) host_key: String,
    /// Unix seconds of the first contact.
    pub(crate) pinned_at: i64,
}

/// The storage key of a host's pin.
pub(crate) fn host_key_path(ip: &str, port: u16) -> String {
    format!("{HOST_KEYS}{ip}/{port}")
}

/// Reads and decodes the record at `key`.
pub(crate) async fn get<T: DeserializeOwned>(
    storage: &dyn EngineStorage,
    key: &str,
) -> Result<Option<T>, EngineError> {
    let Some(bytes) = storage.get(key).await? else {
        return Ok(None);
    };
    decode(key, &bytes).map(Some)
}

/// Decodes the record `bytes` read from `key`.
pub(crate) fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, EngineError> {
    serde_json::from_slice(bytes)
        .map_err(|err| EngineError::Internal(format!("record {key:?} does not decode: {err}")))
}

/// Encodes and writes `value` at `key`.
pub(crate) async fn put<T: Serialize>(
    storage: &dyn EngineStorage,
    key: &str,
    value: &T,
) -> Result<(), EngineError> {
    let bytes = serde_json::to_vec(value)
        .map_err(|err| EngineError::Internal(format!("record {key:?} does not encode: {err}")))?;
    storage.put(key, &bytes).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_unknown_and_missing_fields_as_defaults() {
        let role: Role =
            serde_json::from_str(r#"{"key_type":"otp","port":22,"from_the_future":1}"#).unwrap();
        assert_eq!(role.version, 1);
        assert_eq!(role.key_type, "otp");
        assert!(role.default_extensions.is_empty());
    }
}
