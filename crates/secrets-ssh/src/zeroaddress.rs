//! `config/zeroaddress`: the roles that accept any IP for creds, whatever their CIDR lists
//! say (Vault's `path_config_zeroaddress.go`).
//!
//! - read → `{roles: [...]}`; nothing configured → 404.
//! - write `{roles}` (comma-separated string or list) → 204; empty → 400 `Missing roles`; a
//!   role that does not exist → 400 `Role "x" does not exist`. Replaces the list (duplicates
//!   dropped, order kept).
//! - delete → 204.
//!
//! Deleting a role removes it from this list (`roles.rs`).

use secrets_sdk::{Data, EngineError, EngineStorage, Response, fields};
use serde_json::json;

use crate::store::{self, ZeroAddress};
use crate::{bad, roles};

/// Whether `role` is a zero-address role.
pub(crate) async fn contains(storage: &dyn EngineStorage, role: &str) -> Result<bool, EngineError> {
    Ok(roles_of(storage).await?.iter().any(|name| name == role))
}

pub(crate) async fn roles_of(storage: &dyn EngineStorage) -> Result<Vec<String>, EngineError> {
    Ok(store::get::<ZeroAddress>(storage, store::ZERO_ADDRESS)
        .await?
        .map(|zero| zero.roles)
        .unwrap_or_default())
}

pub(crate) async fn read(storage: &dyn EngineStorage) -> Result<Option<Response>, EngineError> {
    let Some(zero) = store::get::<ZeroAddress>(storage, store::ZERO_ADDRESS).await? else {
        return Ok(None);
    };
    let mut data = Data::new();
    data.insert("roles".to_owned(), json!(zero.roles));
    Ok(Some(Response::data(data)))
}

pub(crate) async fn write(
    storage: &dyn EngineStorage,
    data: &Data,
) -> Result<Option<Response>, EngineError> {
    let requested = fields::comma_list(data, "roles")?.unwrap_or_default();
    if requested.is_empty() {
        return Err(bad("Missing roles"));
    }
    let mut names: Vec<String> = Vec::with_capacity(requested.len());
    for name in requested {
        if roles::get(storage, &name).await?.is_none() {
            return Err(bad(format!("Role {name:?} does not exist")));
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let record = ZeroAddress {
        version: 1,
        roles: names,
    };
    store::put(storage, store::ZERO_ADDRESS, &record).await?;
    Ok(None)
}

pub(crate) async fn delete(storage: &dyn EngineStorage) -> Result<Option<Response>, EngineError> {
    storage.delete(store::ZERO_ADDRESS).await?;
    Ok(None)
}
