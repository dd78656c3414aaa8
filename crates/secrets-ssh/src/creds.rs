//! `creds/:role` (credentials for a host, by role type) and `lookup` (the roles that cover an
//! IP) (Vault's `path_creds_create.go`, `path_lookup.go`).
//!
//! creds `{username, ip}`:
//! - `ip` is required (`Missing ip`) and must parse (`Invalid IP "x"`); an unknown role →
//!   400 `Role "x" not found`;
//! - `username` defaults to the role's `default_user` (none → `No default username
//!   registered. Use 'username' option`); with `allowed_users` set the name must be listed,
//!   the list `*`, or the name the default user (`Username is not present is allowed users
//!   list`, Vault's words); without it only the default user is accepted (`Username has to be
//!   either in allowed users list or has to be a default username`);
//! - the IP must lie in `cidr_list` and outside `exclude_cidr_list` unless the role is in
//!   `config/zeroaddress` (`Error validating IP: IP does not belong to role`);
//! - `otp` roles answer a leased one-time password (`otp.rs`), `dynamic` roles a leased RSA
//!   key installed on the host (`dynamic.rs`); a `ca` role → 400 `key type unknown` (Vault: 500).
//!
//! lookup `{ip}` → `{roles: [...]}`: the roles whose `cidr_list` holds the IP and whose
//! `exclude_cidr_list` does not, then the zero-address roles; sorted, without duplicates;
//! `[]` when none (Vault: `null`).

use std::net::IpAddr;

use secrets_sdk::{Data, EngineError, Response};
use serde_json::json;

use crate::store::{KEY_TYPE_DYNAMIC, KEY_TYPE_OTP};
use crate::{SshEngine, bad, cidr, dynamic, otp, roles, text, zeroaddress};

pub(crate) async fn create(
    engine: &SshEngine,
    role_name: &str,
    data: &Data,
) -> Result<Option<Response>, EngineError> {
    let storage = engine.storage.as_ref();
    let mut username = text(data, "username")?;
    let ip_raw = text(data, "ip")?;
    if ip_raw.is_empty() {
        return Err(bad("Missing ip"));
    }
    let Some(role) = roles::get(storage, role_name).await? else {
        return Err(bad(format!("Role {role_name:?} not found")));
    };
    if username.is_empty() {
        if role.default_user.is_empty() {
            return Err(bad("No default username registered. Use 'username' option"));
        }
        username = role.default_user.clone();
    }
    if !role.allowed_users.is_empty() {
        if !user_allowed(&username, &role.allowed_users) && username != role.default_user {
            return Err(bad("Username is not present is allowed users list"));
        }
    } else if username != role.default_user {
        return Err(bad(
            "Username has to be either in allowed users list or has to be a default username",
        ));
    }
    let ip = parse_ip(&ip_raw)?;
    let zero = zeroaddress::contains(storage, role_name).await?;
    if let Err(err) = cidr::validate_ip(ip, &role.cidr_list, &role.exclude_cidr_list, zero) {
        return Err(bad(format!("Error validating IP: {err}")));
    }
    let ip = ip.to_string();
    match role.key_type.as_str() {
        KEY_TYPE_OTP => otp::issue(storage, &engine.salt, role_name, &username, &ip, role.port)
            .await
            .map(Some),
        KEY_TYPE_DYNAMIC => dynamic::create(engine, &role, &username, &ip)
            .await
            .map(Some),
        _ => Err(bad("key type unknown")),
    }
}

/// Vault's `validateUsername`: `*` allows anyone, else the name must be listed.
fn user_allowed(username: &str, allowed_users: &str) -> bool {
    allowed_users == "*" || allowed_users.split(',').any(|user| user.trim() == username)
}

/// An IP as Go's `net.ParseIP` reads it; an IPv4-mapped IPv6 address is IPv4.
fn parse_ip(raw: &str) -> Result<IpAddr, EngineError> {
    let ip: IpAddr = raw
        .trim()
        .parse()
        .map_err(|_| bad(format!("Invalid IP {raw:?}")))?;
    Ok(match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    })
}

pub(crate) async fn lookup(
    engine: &SshEngine,
    data: &Data,
) -> Result<Option<Response>, EngineError> {
    let storage = engine.storage.as_ref();
    let ip_raw = text(data, "ip")?;
    if ip_raw.is_empty() {
        return Err(bad("Missing ip"));
    }
    let ip = parse_ip(&ip_raw)?;
    let mut matching: Vec<String> = Vec::new();
    for name in storage.list(crate::store::ROLES).await? {
        if name.ends_with('/') {
            continue;
        }
        let Some(role) = roles::get(storage, &name).await? else {
            continue;
        };
        let inside = cidr::list_contains(&role.cidr_list, ip).unwrap_or(false);
        let excluded = cidr::list_contains(&role.exclude_cidr_list, ip).unwrap_or(false);
        if inside && !excluded {
            matching.push(name);
        }
    }
    matching.extend(zeroaddress::roles_of(storage).await?);
    matching.sort();
    matching.dedup();
    let mut out = Data::new();
    out.insert("roles".to_owned(), json!(matching));
    Ok(Some(Response::data(out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_users_are_a_trimmed_list_or_a_star() {
        assert!(user_allowed("bob", "alice, bob"));
        assert!(!user_allowed("bo", "alice,bob"));
        assert!(user_allowed("anyone", "*"));
    }

    #[test]
    fn ips_are_read_as_go_reads_them() {
        assert_eq!(parse_ip("::ffff:10.0.0.1").unwrap().to_string(), "10.0.0.1");
        assert_eq!(
            parse_ip("10.0.0.256").unwrap_err().to_string(),
            r#"Invalid IP "10.0.0.256""#
        );
    }
}
