//! Token roles (`auth/token/roles/:name`): stored under `sys/token/role/<name>`; read, write,
//! delete and list with Vault's field names and response shape.
//!
//! Invariants: a role name is a single path segment; `period`/`explicit_max_ttl` are the
//! legacy spellings of `token_period`/`token_explicit_max_ttl` and read back as both.

use secrets_sdk::{Data, Response, fields};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::store;
use crate::{Error, State};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Role {
    pub(crate) name: String,
    pub(crate) allowed_policies: Vec<String>,
    pub(crate) disallowed_policies: Vec<String>,
    pub(crate) orphan: bool,
    /// Seconds.
    pub(crate) period: u64,
    pub(crate) renewable: bool,
    /// Seconds.
    pub(crate) explicit_max_ttl: u64,
    pub(crate) path_suffix: String,
    /// `default-service` (default), `service`, `batch`, `default-batch`, `default`.
    pub(crate) token_type: String,
    pub(crate) token_no_default_policy: bool,
    pub(crate) allowed_entity_aliases: Vec<String>,
}

const FIELDS: &[&str] = &[
    "allowed_policies",
    "disallowed_policies",
    "orphan",
    "period",
    "token_period",
    "renewable",
    "explicit_max_ttl",
    "token_explicit_max_ttl",
    "path_suffix",
    "token_type",
    "token_no_default_policy",
    "allowed_entity_aliases",
];

fn key(name: &str) -> String {
    format!("{}{name}", store::ROLE_PREFIX)
}

fn valid_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.contains('/') {
        return Err(Error::InvalidParameter("missing role name".to_owned()));
    }
    Ok(())
}

pub(crate) async fn get(state: &State, name: &str) -> Result<Option<Role>, Error> {
    if name.is_empty() || name.contains('/') {
        return Ok(None);
    }
    store::get_json(state, &key(&name.to_lowercase())).await
}

pub(crate) async fn read(state: &State, name: &str) -> Result<Option<Response>, Error> {
    let Some(role) = get(state, name).await? else {
        return Ok(None);
    };
    let data = json!({
        "name": role.name,
        "allowed_policies": role.allowed_policies,
        "disallowed_policies": role.disallowed_policies,
        "allowed_policies_glob": [],
        "disallowed_policies_glob": [],
        "orphan": role.orphan,
        "period": role.period,
        "token_period": role.period,
        "renewable": role.renewable,
        "explicit_max_ttl": role.explicit_max_ttl,
        "token_explicit_max_ttl": role.explicit_max_ttl,
        "path_suffix": role.path_suffix,
        "token_type": role.token_type,
        "token_no_default_policy": role.token_no_default_policy,
        "allowed_entity_aliases": role.allowed_entity_aliases,
        "token_bound_cidrs": [],
    });
    Ok(Some(Response::data(as_map(data))))
}

pub(crate) fn as_map(value: Value) -> Data {
    match value {
        Value::Object(map) => map,
        _ => Data::new(),
    }
}

/// Creates or updates a role; fields not given keep their stored (or default) value.
pub(crate) async fn write(
    state: &State,
    name: &str,
    data: &Data,
) -> Result<Option<Response>, Error> {
    valid_name(name)?;
    let name = name.to_lowercase();
    let mut role = get(state, &name).await?.unwrap_or(Role {
        name: name.clone(),
        allowed_policies: Vec::new(),
        disallowed_policies: Vec::new(),
        orphan: false,
        period: 0,
        renewable: true,
        explicit_max_ttl: 0,
        path_suffix: String::new(),
        token_type: "default-service".to_owned(),
        token_no_default_policy: false,
        allowed_entity_aliases: Vec::new(),
    });
    if let Some(list) = fields::comma_list(data, "allowed_policies")? {
        role.allowed_policies = crate::policy::names::sanitize_policies(&list, false);
    }
    if let Some(list) = fields::comma_list(data, "disallowed_policies")? {
        role.disallowed_policies = crate::policy::names::sanitize_policies(&list, false);
    }
    if let Some(list) = fields::comma_list(data, "allowed_entity_aliases")? {
        role.allowed_entity_aliases = list;
    }
    if let Some(b) = fields::bool(data, "orphan")? {
        role.orphan = b;
    }
    if let Some(b) = fields::bool(data, "renewable")? {
        role.renewable = b;
    }
    if let Some(b) = fields::bool(data, "token_no_default_policy")? {
        role.token_no_default_policy = b;
    }
    if let Some(d) = fields::duration(data, "token_period")? {
        role.period = d.as_secs();
    } else if let Some(d) = fields::duration(data, "period")? {
        role.period = d.as_secs();
    }
    if let Some(d) = fields::duration(data, "token_explicit_max_ttl")? {
        role.explicit_max_ttl = d.as_secs();
    } else if let Some(d) = fields::duration(data, "explicit_max_ttl")? {
        role.explicit_max_ttl = d.as_secs();
    }
    if let Some(suffix) = fields::string(data, "path_suffix")? {
        let suffix = suffix.trim_matches('/').to_owned();
        if suffix.contains("..") {
            return Err(Error::InvalidParameter(
                "error registering path suffix: path suffix cannot contain '..'".to_owned(),
            ));
        }
        role.path_suffix = suffix;
    }
    if let Some(kind) = fields::string(data, "token_type")? {
        let kind = if kind.is_empty() {
            "default-service".to_owned()
        } else {
            kind
        };
        if !matches!(
            kind.as_str(),
            "service" | "batch" | "default" | "default-service" | "default-batch"
        ) {
            return Err(Error::InvalidParameter(format!(
                "invalid 'token_type' value {kind:?}"
            )));
        }
        role.token_type = kind;
    }
    store::put_json(state, &key(&name), &role).await?;
    Ok(fields::unknown_warning(data, FIELDS).map(|w| Response::default().with_warning(w)))
}

pub(crate) async fn delete(state: &State, name: &str) -> Result<Option<Response>, Error> {
    valid_name(name)?;
    store::delete(state, &key(&name.to_lowercase())).await?;
    Ok(None)
}

pub(crate) async fn list(state: &State) -> Result<Option<Response>, Error> {
    let keys: Vec<String> = store::list(state, store::ROLE_PREFIX)
        .await?
        .into_iter()
        .filter(|k| !k.ends_with('/'))
        .collect();
    if keys.is_empty() {
        return Ok(None);
    }
    Ok(Some(Response::list(keys)))
}
