//! `sign/:role`: signs a user or host public key with the mount's CA under a `ca` role's rules
//! (Vault's `path_sign.go` and `path_issue_sign.go`, Vault ≥ 1.15 where the upstreams differ).
//!
//! Request `{public_key, valid_principals, cert_type, key_id, ttl, critical_options,
//! extensions}` → `{serial_number, signed_key}`:
//! - `public_key` required (`missing public_key`), parsed (`failed to parse public_key as SSH
//!   key: ...`) and checked against `allowed_user_key_lengths` (`public_key failed to meet the
//!   key requirements: key of type rsa is not allowed` / `key is of an invalid size: 1024`);
//!   map keys are `rsa`/`ssh-rsa`, `dsa`/`ssh-dss`, `ecdsa`/`ec` (by curve size) or a named
//!   curve `ecdsa-sha2-nistp256`…, `ed25519`/`ssh-ed25519` (any size).
//! - key id: `key_id` needs `allow_user_key_ids` (`setting key_id is not allowed by role`);
//!   otherwise `key_id_format` or `vault-{{token_display_name}}-{{public_key_hash}}`
//!   (`vault-{{public_key_hash}}` without a display name), with `{{role_name}}` too; the hash is
//!   the hex SHA-256 of the key's wire form.
//! - `cert_type` `user` (default) or `host`, each only when the role allows it.
//! - principals: `valid_principals` (comma-separated) when given, else the role's
//!   `default_user` for user certificates; an empty value also falls back to `default_user`
//!   (Vault; OpenBao refuses). None left → `empty valid principals not allowed by role` unless
//!   `allow_empty_principals`. Otherwise the role must list some (`role is not configured to
//!   allow any principals`) and each must be allowed: `allowed_users` for users (`*` for any;
//!   `{{identity.entity.id}}` rendered with `allowed_users_template`), `allowed_domains` for
//!   hosts with `allow_bare_domains` (the domain itself) and `allow_subdomains` (`x.domain`).
//!   Refusal: `<name> is not a valid value for valid_principals`.
//! - TTL: `ttl`, else the role's `ttl`, else the mount's default lease TTL; the role's
//!   `max_ttl`, else the mount's max lease TTL, caps it: an explicit `ttl` above it → `ttl is larger than
//!   maximum allowed <seconds>`, a defaulted one is cut to it. Valid from now minus the role's
//!   `not_before_duration` (30 s by default).
//! - critical options: the request's, each in `allowed_critical_options` unless that is empty
//!   (`critical options not on allowed list: [a b]`); none given → the role's defaults.
//! - extensions: the request's, each in `allowed_extensions` unless that is `*`; an empty list
//!   allows none (Vault ≥ 1.12 fails closed: `extensions [a] are not on allowed list`); none
//!   given → the role's defaults (never checked).
//! - RSA CAs sign with the role's `algorithm_signer` (`default` = `rsa-sha2-256`).
//! - `serial_number` is the lower-case hex of a random 64-bit serial, `signed_key` the
//!   certificate's authorized_keys line ending in a newline.
//!
//! The engine does not see the mount's tuned TTLs (the SDK hands it none), so the system
//! values stand in for them (docs/compat.md).

use std::collections::BTreeMap;
use std::time::Duration;

use secrets_sdk::{Data, EngineError, MountTtls, Request, Response, fields};
use serde_json::{Value, json};
use ssh_key::Certificate;
use ssh_key::certificate::{Builder, CertType};
use ssh_key::public::KeyData;

use crate::crypto::{self, CaSigner};
use crate::store::Role;
use crate::{SshEngine, bad, ca, roles, text};

pub(crate) async fn sign(
    engine: &SshEngine,
    role_name: &str,
    request: &Request,
) -> Result<Option<Response>, EngineError> {
    let storage = engine.storage.as_ref();
    let data = &request.data;
    let Some(role) = roles::get(storage, role_name).await? else {
        return Err(bad(format!("Unknown role: {role_name}")));
    };
    let public_key_text = text(data, "public_key")?;
    if public_key_text.is_empty() {
        return Err(bad("missing public_key"));
    }
    let public_key = crypto::parse_public_key(&public_key_text)
        .map_err(|err| bad(format!("failed to parse public_key as SSH key: {err}")))?;
    let key = public_key.key_data();
    check_key_lengths(key, &role).map_err(|err| {
        bad(format!(
            "public_key failed to meet the key requirements: {err}"
        ))
    })?;
    let auth = request.auth.as_deref().cloned().unwrap_or_default();
    let key_id = key_id(data, &role, role_name, &auth.display_name, key)?;
    let cert_type = cert_type(data, &role)?;
    let principals = match cert_type {
        CertType::Host => principals(data, &role, "", &role.allowed_domains, |allowed, name| {
            host_allowed(&role, allowed, name)
        })?,
        CertType::User => {
            let allowed = if role.allowed_users_template {
                render_template(&role.allowed_users, auth.entity_id.as_deref())?
            } else {
                role.allowed_users.clone()
            };
            principals(
                data,
                &role,
                &role.default_user,
                &allowed,
                |allowed, name| allowed.iter().any(|a| a == name),
            )?
        }
    };
    let ttl = ttl(data, &role, request.ttls)?;
    let critical_options = critical_options(data, &role)?;
    let extensions = extensions(data, &role)?;
    let Some(ca_key) = ca::signing_key(storage, &engine.ca).await? else {
        return Err(bad("keys haven't been configured yet"));
    };
    let signer = CaSigner::new(ca_key, &role.algorithm_signer).map_err(bad)?;
    let slow = signer.is_slow();

    let now = engine.clock.now_ms().div_euclid(1000).max(0) as u64;
    let valid_after = now.saturating_sub(role.not_before_duration);
    let valid_before = now.saturating_add(ttl.as_secs());
    let serial = crypto::random_u64();
    let key = key.clone();
    let build = move || -> Result<Certificate, ssh_key::Error> {
        let mut builder =
            Builder::new_with_random_nonce(&mut crypto::rng(), key, valid_after, valid_before)?;
        builder.serial(serial)?;
        builder.cert_type(cert_type)?;
        builder.key_id(key_id)?;
        if principals.is_empty() {
            builder.all_principals_valid()?;
        }
        for principal in principals {
            builder.valid_principal(principal)?;
        }
        for (name, value) in critical_options {
            builder.critical_option(name, value)?;
        }
        for (name, value) in extensions {
            builder.extension(name, value)?;
        }
        builder.sign(&signer)
    };
    // RSA and ECDSA signatures run on a blocking thread; an Ed25519 one is cheaper than the
    // hand-off.
    let signed = if slow {
        tokio::task::spawn_blocking(build)
            .await
            .map_err(|err| EngineError::Internal(format!("signing stopped: {err}")))?
    } else {
        build()
    };
    let certificate = signed.map_err(|err| {
        EngineError::Internal(format!("failed to generate signed SSH key: {err}"))
    })?;
    let line = certificate.to_openssh().map_err(|err| {
        EngineError::Internal(format!("error marshaling signed certificate: {err}"))
    })?;
    let mut out = Data::new();
    out.insert("serial_number".to_owned(), json!(format!("{serial:x}")));
    out.insert(
        "signed_key".to_owned(),
        json!(format!("{}\n", line.trim_end())),
    );
    Ok(Some(Response::data(out)))
}

/// Vault's `validateSignedKeyRequirements`.
fn check_key_lengths(key: &KeyData, role: &Role) -> Result<(), String> {
    if role.allowed_user_key_lengths.is_empty() {
        return Ok(());
    }
    let Some((family, bits)) = crypto::key_family(key) else {
        return Err(format!(
            "public key type of {} is not allowed",
            key.algorithm().as_str()
        ));
    };
    let mut names: Vec<String> = match family {
        "rsa" => vec!["rsa".into(), "ssh-rsa".into()],
        "dsa" => vec!["dsa".into(), "ssh-dss".into()],
        "ecdsa" => vec!["ecdsa".into(), "ec".into()],
        _ => vec!["ed25519".into(), "ssh-ed25519".into()],
    };
    if family == "ecdsa" {
        names.push(format!("ecdsa-sha2-nistp{bits}"));
    }
    let mut present = false;
    let mut pass = false;
    for name in &names {
        let Some(sizes) = role.allowed_user_key_lengths.get(name) else {
            continue;
        };
        present = true;
        let named_curve = name.starts_with("ecdsa-sha2-");
        if family == "ed25519" || named_curve || sizes.contains(&bits) {
            pass = true;
        }
    }
    if !present {
        return Err(format!("key of type {family} is not allowed"));
    }
    if !pass {
        return Err(format!("key is of an invalid size: {bits}"));
    }
    Ok(())
}

fn key_id(
    data: &Data,
    role: &Role,
    role_name: &str,
    display_name: &str,
    key: &KeyData,
) -> Result<String, EngineError> {
    let requested = text(data, "key_id")?;
    if !requested.is_empty() {
        if !role.allow_user_key_ids {
            return Err(bad("setting key_id is not allowed by role"));
        }
        return Ok(requested);
    }
    let format = if !role.key_id_format.is_empty() {
        role.key_id_format.as_str()
    } else if display_name.is_empty() {
        "vault-{{public_key_hash}}"
    } else {
        "vault-{{token_display_name}}-{{public_key_hash}}"
    };
    let hash = crypto::public_key_hash(key).map_err(EngineError::Internal)?;
    Ok(format
        .replace("{{token_display_name}}", display_name)
        .replace("{{role_name}}", role_name)
        .replace("{{public_key_hash}}", &hash))
}

fn cert_type(data: &Data, role: &Role) -> Result<CertType, EngineError> {
    let requested = text(data, "cert_type")?;
    match requested.as_str() {
        "" | "user" if role.allow_user_certificates => Ok(CertType::User),
        "" | "user" => Err(bad("cert_type 'user' is not allowed by role")),
        "host" if role.allow_host_certificates => Ok(CertType::Host),
        "host" => Err(bad("cert_type 'host' is not allowed by role")),
        _ => Err(bad("cert_type must be either 'user' or 'host'")),
    }
}

/// A comma list, trimmed, empty entries and duplicates dropped, order kept (Go's
/// `strutil.ParseStringSlice` + `RemoveDuplicates` without sorting).
fn comma_list(raw: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if !out.iter().any(|seen| seen == item) {
            out.push(item.to_owned());
        }
    }
    out
}

/// Vault's `calculateValidPrincipals`.
fn principals(
    data: &Data,
    role: &Role,
    default_principal: &str,
    allowed_by_role: &str,
    allowed: impl Fn(&[String], &str) -> bool,
) -> Result<Vec<String>, EngineError> {
    let requested = match fields::string(data, "valid_principals")? {
        Some(given) => given,
        None => default_principal.to_owned(),
    };
    let mut parsed = comma_list(&requested);
    if parsed.is_empty() && !default_principal.is_empty() {
        parsed = vec![default_principal.to_owned()];
    }
    let allowed_list = comma_list(allowed_by_role);
    if parsed.is_empty() {
        if role.allow_empty_principals {
            return Ok(Vec::new());
        }
        return Err(bad("empty valid principals not allowed by role"));
    }
    if allowed_list.is_empty() {
        return Err(bad("role is not configured to allow any principals"));
    }
    if allowed_by_role.trim() == "*" {
        return Ok(parsed);
    }
    for principal in &parsed {
        if !allowed(&allowed_list, principal) {
            return Err(bad(format!(
                "{principal} is not a valid value for valid_principals"
            )));
        }
    }
    Ok(parsed)
}

/// Vault's `validateValidPrincipalForHosts`.
fn host_allowed(role: &Role, allowed: &[String], name: &str) -> bool {
    allowed.iter().any(|domain| {
        (role.allow_bare_domains && domain == name)
            || (role.allow_subdomains && name.ends_with(&format!(".{domain}")))
    })
}

/// Renders the identity templates cairn knows in `allowed_users` (`{{identity.entity.id}}`);
/// without an entity the text stays as written (Vault renders only with an entity).
fn render_template(raw: &str, entity_id: Option<&str>) -> Result<String, EngineError> {
    let Some(entity_id) = entity_id.filter(|id| !id.is_empty()) else {
        return Ok(raw.to_owned());
    };
    let rendered = raw.replace("{{identity.entity.id}}", entity_id);
    if let Some(start) = rendered.find("{{")
        && rendered[start..].contains("}}")
    {
        return Err(bad(format!(
            "template '{raw}' could not be rendered -> only {{{{identity.entity.id}}}} is supported"
        )));
    }
    Ok(rendered)
}

/// Vault's `calculateTTL`, within the mount's TTLs.
fn ttl(data: &Data, role: &Role, mount: MountTtls) -> Result<Duration, EngineError> {
    let requested = fields::duration(data, "ttl")?.filter(|ttl| !ttl.is_zero());
    let mut ttl = requested.unwrap_or(Duration::from_secs(role.ttl));
    if ttl.is_zero() {
        ttl = mount.default;
    }
    let max = match role.max_ttl {
        0 => mount.max,
        max => Duration::from_secs(max),
    };
    if ttl > max {
        if requested.is_some() {
            return Err(bad(format!(
                "ttl is larger than maximum allowed {}",
                max.as_secs()
            )));
        }
        ttl = max;
    }
    Ok(ttl)
}

/// A `TypeMap` of the request as strings (non-strings as their JSON text).
fn string_map(data: &Data, name: &str) -> Result<BTreeMap<String, String>, EngineError> {
    Ok(fields::map(data, name)?
        .unwrap_or_default()
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

fn go_list(names: &[String]) -> String {
    format!("[{}]", names.join(" "))
}

fn critical_options(data: &Data, role: &Role) -> Result<BTreeMap<String, String>, EngineError> {
    let requested = string_map(data, "critical_options")?;
    if requested.is_empty() {
        return Ok(role.default_critical_options.clone());
    }
    if !role.allowed_critical_options.is_empty() {
        let allowed = comma_list(&role.allowed_critical_options);
        let refused: Vec<String> = requested
            .keys()
            .filter(|name| !allowed.contains(name))
            .cloned()
            .collect();
        if !refused.is_empty() {
            return Err(bad(format!(
                "critical options not on allowed list: {}",
                go_list(&refused)
            )));
        }
    }
    Ok(requested)
}

fn extensions(data: &Data, role: &Role) -> Result<BTreeMap<String, String>, EngineError> {
    let requested = string_map(data, "extensions")?;
    if requested.is_empty() {
        return Ok(role.default_extensions.clone());
    }
    if role.allowed_extensions.trim() == "*" {
        return Ok(requested);
    }
    let allowed = comma_list(&role.allowed_extensions);
    let refused: Vec<String> = requested
        .keys()
        .filter(|name| !allowed.contains(name))
        .cloned()
        .collect();
    if !refused.is_empty() {
        return Err(bad(format!(
            "extensions {} are not on allowed list",
            go_list(&refused)
        )));
    }
    Ok(requested)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(value: Value) -> Data {
        value.as_object().unwrap().clone()
    }

    fn user_role(allowed_users: &str, default_user: &str) -> Role {
        Role {
            key_type: "ca".into(),
            allow_user_certificates: true,
            allowed_users: allowed_users.into(),
            default_user: default_user.into(),
            ..Role::default()
        }
    }

    fn user_principals(role: &Role, body: Value) -> Result<Vec<String>, String> {
        principals(
            &data(body),
            role,
            &role.default_user,
            &role.allowed_users,
            |allowed, name| allowed.iter().any(|a| a == name),
        )
        .map_err(|err| err.to_string())
    }

    #[test]
    fn an_empty_valid_principals_falls_back_to_the_default_user_as_vault_does() {
        let role = user_role("alice,bob", "alice");
        assert_eq!(
            user_principals(&role, json!({"valid_principals": ""})).unwrap(),
            ["alice"]
        );
        assert_eq!(user_principals(&role, json!({})).unwrap(), ["alice"]);
        assert_eq!(
            user_principals(&role, json!({"valid_principals": "bob, bob,alice"})).unwrap(),
            ["bob", "alice"]
        );
        assert_eq!(
            user_principals(&role, json!({"valid_principals": "eve"})).unwrap_err(),
            "eve is not a valid value for valid_principals"
        );
    }

    #[test]
    fn principals_need_a_role_that_lists_some() {
        assert_eq!(
            user_principals(&user_role("", ""), json!({"valid_principals": ""})).unwrap_err(),
            "empty valid principals not allowed by role"
        );
        assert_eq!(
            user_principals(&user_role("", ""), json!({"valid_principals": "x"})).unwrap_err(),
            "role is not configured to allow any principals"
        );
        assert_eq!(
            user_principals(&user_role("*", ""), json!({"valid_principals": "x,y"})).unwrap(),
            ["x", "y"]
        );
        let mut open = user_role("", "");
        open.allow_empty_principals = true;
        assert!(user_principals(&open, json!({})).unwrap().is_empty());
    }

    #[test]
    fn host_principals_follow_bare_and_subdomain_rules() {
        let mut role = Role {
            allow_host_certificates: true,
            allowed_domains: "example.com".into(),
            ..Role::default()
        };
        let allowed = vec!["example.com".to_owned()];
        assert!(!host_allowed(&role, &allowed, "example.com"));
        role.allow_bare_domains = true;
        assert!(host_allowed(&role, &allowed, "example.com"));
        assert!(!host_allowed(&role, &allowed, "a.example.com"));
        role.allow_subdomains = true;
        assert!(host_allowed(&role, &allowed, "a.b.example.com"));
        assert!(!host_allowed(&role, &allowed, "badexample.com"));
    }

    #[test]
    fn an_explicit_ttl_above_the_max_is_refused_and_a_default_one_is_cut() {
        let role = Role {
            ttl: 7200,
            max_ttl: 3600,
            ..Role::default()
        };
        assert_eq!(
            ttl(&data(json!({})), &role, MountTtls::SYSTEM).unwrap(),
            Duration::from_secs(3600)
        );
        assert_eq!(
            ttl(&data(json!({"ttl": "2h"})), &role, MountTtls::SYSTEM)
                .unwrap_err()
                .to_string(),
            "ttl is larger than maximum allowed 3600"
        );
        assert_eq!(
            ttl(
                &data(json!({"ttl": ""})),
                &Role::default(),
                MountTtls::SYSTEM
            )
            .unwrap(),
            MountTtls::SYSTEM.default
        );
        assert_eq!(
            ttl(&data(json!({"ttl": 60})), &role, MountTtls::SYSTEM).unwrap(),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn extensions_fail_closed_and_critical_options_fail_open() {
        let mut role = Role {
            default_extensions: [("permit-pty".to_owned(), String::new())].into(),
            ..Role::default()
        };
        assert_eq!(
            extensions(&data(json!({"extensions": null})), &role).unwrap(),
            role.default_extensions
        );
        assert_eq!(
            extensions(
                &data(json!({"extensions": {"permit-X11-forwarding": ""}})),
                &role
            )
            .unwrap_err()
            .to_string(),
            "extensions [permit-X11-forwarding] are not on allowed list"
        );
        role.allowed_extensions = "*".into();
        assert!(extensions(&data(json!({"extensions": {"x": ""}})), &role).is_ok());
        assert!(
            critical_options(
                &data(json!({"critical_options": {"force-command": "id"}})),
                &role
            )
            .is_ok()
        );
        role.allowed_critical_options = "source-address".into();
        assert_eq!(
            critical_options(
                &data(json!({"critical_options": {"force-command": "id"}})),
                &role
            )
            .unwrap_err()
            .to_string(),
            "critical options not on allowed list: [force-command]"
        );
    }

    #[test]
    fn key_lengths_name_families_and_sizes() {
        let (_, line) = crypto::generate_dynamic_key(1024).unwrap();
        let key = crypto::parse_public_key(&line).unwrap();
        let mut role = Role {
            allowed_user_key_lengths: [("ed25519".to_owned(), vec![0])].into(),
            ..Role::default()
        };
        assert_eq!(
            check_key_lengths(key.key_data(), &role).unwrap_err(),
            "key of type rsa is not allowed"
        );
        role.allowed_user_key_lengths = [("ssh-rsa".to_owned(), vec![2048, 4096])].into();
        assert_eq!(
            check_key_lengths(key.key_data(), &role).unwrap_err(),
            "key is of an invalid size: 1024"
        );
        role.allowed_user_key_lengths = [("rsa".to_owned(), vec![1024])].into();
        assert!(check_key_lengths(key.key_data(), &role).is_ok());
    }

    #[test]
    fn entity_templates_render_only_with_an_entity() {
        assert_eq!(
            render_template("{{identity.entity.id}},ops", Some("e-1")).unwrap(),
            "e-1,ops"
        );
        assert_eq!(
            render_template("{{identity.entity.id}}", None).unwrap(),
            "{{identity.entity.id}}"
        );
        assert!(render_template("{{identity.entity.name}}", Some("e-1")).is_err());
    }
}
