//! `roles/:name` (write, read, delete) and `LIST roles` (Vault's `path_roles.go`, with the
//! dynamic type of Vault before 1.13).
//!
//! - write replaces the role with one built from the request and the type's defaults → 204.
//!   `key_type` is required (`missing key type`; lower-cased; else `invalid key type`).
//!   `otp` needs `default_user`; `dynamic` needs `default_user`, a registered `key`
//!   (`invalid 'key': "x"` when not registered) and `admin_user`, `key_bits` 1024 (default) or
//!   2048, and stores the built-in install script when `install_script` is unset; `ca` needs
//!   `allow_user_certificates` or `allow_host_certificates`, `ttl` ≤ `max_ttl` when both are
//!   set, `algorithm_signer` one of `default` (when unset), `ssh-rsa`, `rsa-sha2-256`,
//!   `rsa-sha2-512`. `cidr_list` and `exclude_cidr_list` must parse; `port` 0 means 22.
//! - read answers the fields of the role's type (otp: exactly `allowed_users`, `cidr_list`,
//!   `default_user`, `exclude_cidr_list`, `key_type`, `port`, as hvac's tests check).
//! - delete drops the role from `config/zeroaddress` too → 204, also when missing.
//! - list → `keys` and `key_info` (`{name: {key_type}}`); none → 404.
//!
//! Differences from Vault (docs/compat.md): a bad `cidr_list`/`exclude_cidr_list` or an
//! unknown `algorithm_signer` is 400 here (Vault: 500).

use std::collections::BTreeMap;
use std::time::Duration;

use secrets_sdk::{Data, EngineError, EngineStorage, Response, fields};
use serde_json::{Value, json};

use crate::store::{self, KEY_TYPE_CA, KEY_TYPE_DYNAMIC, KEY_TYPE_OTP, Role, ZeroAddress};
use crate::{bad, cidr, dynamic, text};

/// The default `not_before_duration`: certificates are back-dated by 30 seconds.
const NOT_BEFORE_DEFAULT: u64 = 30;

pub(crate) async fn get(
    storage: &dyn EngineStorage,
    name: &str,
) -> Result<Option<Role>, EngineError> {
    store::get(storage, &format!("{}{name}", store::ROLES)).await
}

pub(crate) async fn write(
    storage: &dyn EngineStorage,
    name: &str,
    data: &Data,
) -> Result<Option<Response>, EngineError> {
    let role = build(storage, data).await?;
    store::put(storage, &format!("{}{name}", store::ROLES), &role).await?;
    Ok(None)
}

async fn build(storage: &dyn EngineStorage, data: &Data) -> Result<Role, EngineError> {
    let allowed_users = text(data, "allowed_users")?;
    let cidr_list = text(data, "cidr_list")?;
    if let Err(err) = cidr::parse_list(&cidr_list) {
        return Err(bad(format!("failed to validate cidr_list: {err}")));
    }
    let exclude_cidr_list = text(data, "exclude_cidr_list")?;
    if let Err(err) = cidr::parse_list(&exclude_cidr_list) {
        return Err(bad(format!(
            "failed to validate exclude_cidr_list entry: {err}"
        )));
    }
    let port = match fields::int(data, "port")?.unwrap_or(0) {
        0 => 22,
        port @ 1..=65535 => port as u16,
        other => return Err(bad(format!("invalid port {other}"))),
    };
    let key_type = text(data, "key_type")?.to_lowercase();
    if key_type.is_empty() {
        return Err(bad("missing key type"));
    }
    let default_user = text(data, "default_user")?;
    match key_type.as_str() {
        KEY_TYPE_OTP => {
            if default_user.is_empty() {
                return Err(bad("missing default user"));
            }
            if !text(data, "admin_user")?.is_empty() {
                return Err(bad("admin user not required for OTP type"));
            }
            Ok(Role {
                version: 1,
                key_type,
                default_user,
                cidr_list,
                exclude_cidr_list,
                port,
                allowed_users,
                ..Role::default()
            })
        }
        KEY_TYPE_DYNAMIC => {
            if default_user.is_empty() {
                return Err(bad("missing default user"));
            }
            let key = text(data, "key")?;
            if key.is_empty() {
                return Err(bad("missing key name"));
            }
            if crate::keys::get(storage, &key).await?.is_none() {
                return Err(bad(format!("invalid 'key': {key:?}")));
            }
            let admin_user = text(data, "admin_user")?;
            if admin_user.is_empty() {
                return Err(bad("missing admin username"));
            }
            let key_bits = match fields::int(data, "key_bits")?.unwrap_or(0) {
                0 | 1024 => 1024,
                2048 => 2048,
                _ => return Err(bad("invalid key_bits field")),
            };
            let mut install_script = text(data, "install_script")?;
            if install_script.is_empty() {
                install_script = dynamic::DEFAULT_INSTALL_SCRIPT.to_owned();
            }
            Ok(Role {
                version: 1,
                key_type,
                key,
                admin_user,
                default_user,
                cidr_list,
                exclude_cidr_list,
                port,
                key_bits,
                install_script,
                allowed_users,
                key_option_specs: text(data, "key_option_specs")?,
                ..Role::default()
            })
        }
        KEY_TYPE_CA => build_ca(data, default_user, allowed_users),
        _ => Err(bad("invalid key type")),
    }
}

fn build_ca(data: &Data, default_user: String, allowed_users: String) -> Result<Role, EngineError> {
    let mut algorithm_signer = text(data, "algorithm_signer")?;
    if algorithm_signer.is_empty() {
        algorithm_signer = "default".to_owned();
    }
    if crate::crypto::rsa_hash(&algorithm_signer).is_none() {
        return Err(bad(format!(
            "unknown algorithm signer {algorithm_signer:?}"
        )));
    }
    let flag = |name| fields::bool(data, name).map(Option::unwrap_or_default);
    let role = Role {
        version: 1,
        key_type: KEY_TYPE_CA.to_owned(),
        default_user,
        allowed_users,
        allowed_users_template: flag("allowed_users_template")?,
        allowed_domains: text(data, "allowed_domains")?,
        ttl: seconds(fields::duration(data, "ttl")?),
        max_ttl: seconds(fields::duration(data, "max_ttl")?),
        allowed_critical_options: text(data, "allowed_critical_options")?,
        allowed_extensions: text(data, "allowed_extensions")?,
        default_critical_options: string_map(data, "default_critical_options")?,
        default_extensions: string_map(data, "default_extensions")?,
        allow_user_certificates: flag("allow_user_certificates")?,
        allow_host_certificates: flag("allow_host_certificates")?,
        allow_bare_domains: flag("allow_bare_domains")?,
        allow_subdomains: flag("allow_subdomains")?,
        allow_user_key_ids: flag("allow_user_key_ids")?,
        allow_empty_principals: flag("allow_empty_principals")?,
        key_id_format: text(data, "key_id_format")?,
        allowed_user_key_lengths: key_lengths(data)?,
        algorithm_signer,
        not_before_duration: fields::duration(data, "not_before_duration")?
            .map_or(NOT_BEFORE_DEFAULT, |d| d.as_secs()),
        ..Role::default()
    };
    if !role.allow_user_certificates && !role.allow_host_certificates {
        return Err(bad(
            "Either 'allow_user_certificates' or 'allow_host_certificates' must be set to 'true'",
        ));
    }
    if role.ttl != 0 && role.max_ttl != 0 && role.ttl > role.max_ttl {
        return Err(bad(
            r#""ttl" value must be less than "max_ttl" when both are specified"#,
        ));
    }
    Ok(role)
}

fn seconds(duration: Option<Duration>) -> u64 {
    duration.map_or(0, |d| d.as_secs())
}

/// A `TypeMap` of strings: values that are not strings are rendered as their JSON text
/// (Vault's `convertMapToStringValue`).
fn string_map(data: &Data, name: &str) -> Result<BTreeMap<String, String>, EngineError> {
    let Some(map) = fields::map(data, name)? else {
        return Ok(BTreeMap::new());
    };
    Ok(map
        .into_iter()
        .map(|(key, value)| {
            let value = match value {
                Value::String(s) => s,
                other => other.to_string(),
            };
            (key, value)
        })
        .collect())
}

/// `allowed_user_key_lengths`: key type to one size or a list of sizes.
fn key_lengths(data: &Data) -> Result<BTreeMap<String, Vec<u32>>, EngineError> {
    let Some(map) = fields::map(data, "allowed_user_key_lengths")? else {
        return Ok(BTreeMap::new());
    };
    let invalid = |key: &str, value: &Value| {
        bad(format!(
            "error processing allowed_user_key_lengths: the value of {key:?} is not a key size: {value}"
        ))
    };
    let size = |key: &str, value: &Value| -> Result<u32, EngineError> {
        let n = match value {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        n.and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| invalid(key, value))
    };
    let mut out = BTreeMap::new();
    for (key, value) in &map {
        let sizes = match value {
            Value::Array(items) => items
                .iter()
                .map(|item| size(key, item))
                .collect::<Result<Vec<_>, _>>()?,
            single => vec![size(key, single)?],
        };
        out.insert(key.clone(), sizes);
    }
    Ok(out)
}

/// The role as read back, by type.
pub(crate) fn render(role: &Role) -> Data {
    let value = match role.key_type.as_str() {
        KEY_TYPE_OTP => json!({
            "allowed_users": role.allowed_users,
            "cidr_list": role.cidr_list,
            "default_user": role.default_user,
            "exclude_cidr_list": role.exclude_cidr_list,
            "key_type": role.key_type,
            "port": role.port,
        }),
        KEY_TYPE_DYNAMIC => json!({
            "admin_user": role.admin_user,
            "allowed_users": role.allowed_users,
            "cidr_list": role.cidr_list,
            "default_user": role.default_user,
            "exclude_cidr_list": role.exclude_cidr_list,
            "install_script": role.install_script,
            "key": role.key,
            "key_bits": role.key_bits,
            "key_option_specs": role.key_option_specs,
            "key_type": role.key_type,
            "port": role.port,
        }),
        _ => {
            let lengths: serde_json::Map<String, Value> = role
                .allowed_user_key_lengths
                .iter()
                .map(|(key, sizes)| {
                    let value = match sizes.as_slice() {
                        [one] => json!(one),
                        many => json!(many),
                    };
                    (key.clone(), value)
                })
                .collect();
            json!({
                "algorithm_signer": role.algorithm_signer,
                "allow_bare_domains": role.allow_bare_domains,
                "allow_empty_principals": role.allow_empty_principals,
                "allow_host_certificates": role.allow_host_certificates,
                "allow_subdomains": role.allow_subdomains,
                "allow_user_certificates": role.allow_user_certificates,
                "allow_user_key_ids": role.allow_user_key_ids,
                "allowed_critical_options": role.allowed_critical_options,
                "allowed_domains": role.allowed_domains,
                "allowed_extensions": role.allowed_extensions,
                "allowed_user_key_lengths": lengths,
                "allowed_users": role.allowed_users,
                "allowed_users_template": role.allowed_users_template,
                "default_critical_options": role.default_critical_options,
                "default_extensions": role.default_extensions,
                "default_user": role.default_user,
                "key_id_format": role.key_id_format,
                "key_type": role.key_type,
                "max_ttl": role.max_ttl,
                "not_before_duration": role.not_before_duration,
                "ttl": role.ttl,
            })
        }
    };
    match value {
        Value::Object(map) => map,
        _ => Data::new(),
    }
}

pub(crate) async fn read(
    storage: &dyn EngineStorage,
    name: &str,
) -> Result<Option<Response>, EngineError> {
    Ok(get(storage, name)
        .await?
        .map(|role| Response::data(render(&role))))
}

pub(crate) async fn delete(
    storage: &dyn EngineStorage,
    name: &str,
) -> Result<Option<Response>, EngineError> {
    if let Some(mut zero) = store::get::<ZeroAddress>(storage, store::ZERO_ADDRESS).await?
        && zero.roles.iter().any(|role| role == name)
    {
        zero.roles.retain(|role| role != name);
        store::put(storage, store::ZERO_ADDRESS, &zero).await?;
    }
    storage.delete(&format!("{}{name}", store::ROLES)).await?;
    Ok(None)
}

pub(crate) async fn list(storage: &dyn EngineStorage) -> Result<Option<Response>, EngineError> {
    let names: Vec<String> = storage
        .list(store::ROLES)
        .await?
        .into_iter()
        .filter(|name| !name.ends_with('/'))
        .collect();
    if names.is_empty() {
        return Ok(None);
    }
    let mut key_info = Data::new();
    for name in &names {
        match get(storage, name).await {
            Ok(Some(role)) => {
                key_info.insert(name.clone(), json!({ "key_type": role.key_type }));
            }
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(role = %name, error = %err, "ssh: role does not load; left out of key_info")
            }
        }
    }
    let mut response = Response::list(names);
    if let Some(data) = response.data.as_mut() {
        data.insert("key_info".to_owned(), Value::Object(key_info));
    }
    Ok(Some(response))
}
