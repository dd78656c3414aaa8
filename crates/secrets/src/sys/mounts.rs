//! `sys/mounts` and `sys/remount`: secrets engines at any path (docs/design.md §U5).
//!
//! - `GET sys/mounts` → map keyed `"path/"` (in `data` and, by dispatch, at the top level) of
//!   `{type, description, accessor, uuid, config{default_lease_ttl, max_lease_ttl,
//!   force_no_cache}, options, local, seal_wrap, external_entropy_access}`.
//! - `POST sys/mounts/:path {type, description, config, options, local, seal_wrap}` → 204;
//!   unknown type 400 `unknown backend type: "x"`; overlap 409 `path is already in use at
//!   secret/`; under `sys/`, `auth/`, `identity/`, `cubbyhole/` 403 `cannot mount "sys/"`.
//! - `GET sys/mounts/:path` → the entry; `DELETE sys/mounts/:path` → 204 (leases revoked,
//!   data deleted; a missing mount is fine).
//! - `GET|POST sys/mounts/:path/tune` (`default_lease_ttl`, `max_lease_ttl`, `description`,
//!   `options`).
//! - `POST sys/remount {from, to}` (sudo) → 200 `{migration_id}`, done synchronously; leases
//!   under `from` are revoked (as Vault's remount does); `GET sys/remount/status/:id`.
//!
//! The enable/tune parsing here is shared with `sys/auth.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

use secrets_sdk::{Data, EngineError, Operation, Request, Response, fields};
use serde_json::{Value, json};

use crate::mounts::{self, MountConfig, MountEntry, Tune};
use crate::request::RequestContext;
use crate::{Error, State};

pub(crate) async fn handle(
    state: &State,
    _ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    let path = req.path.trim_end_matches('/');
    if path == "mounts" {
        return match req.operation {
            Operation::Read | Operation::List => Ok(Some(list(state, false))),
            _ => Err(Error::UnsupportedOperation),
        };
    }
    if path == "remount" {
        return match req.operation {
            Operation::Create | Operation::Update => remount(state, &req.data).await.map(Some),
            _ => Err(Error::UnsupportedOperation),
        };
    }
    if let Some(id) = path.strip_prefix("remount/status/") {
        return match req.operation {
            Operation::Read => Ok(remount_status(state, id)),
            _ => Err(Error::UnsupportedOperation),
        };
    }
    let Some(rest) = path.strip_prefix("mounts/") else {
        return Err(Error::UnsupportedPath);
    };
    if let Some(mount) = rest.strip_suffix("/tune") {
        let mount_path = mounts::normalise(mount);
        return match req.operation {
            Operation::Read => read_tune(state, &mount_path).map(Some),
            Operation::Create | Operation::Update => {
                tune(state, &mount_path, &req.data).await?;
                Ok(None)
            }
            _ => Err(Error::UnsupportedOperation),
        };
    }
    let mount_path = mounts::normalise(rest);
    match req.operation {
        Operation::Read => {
            let entry = state.mounts().get(&mount_path).filter(|e| !e.is_auth());
            match entry {
                Some(entry) => Ok(Some(Response::data(object(entry.to_json())))),
                None => Err(Error::InvalidParameter(format!(
                    "No secret engine mount at {mount_path}"
                ))),
            }
        }
        Operation::Create | Operation::Update => {
            if mount_path.starts_with("auth/") {
                return Err(Error::Forbidden(format!("cannot mount {mount_path:?}")));
            }
            let entry = parse_enable(&req.data, &mount_path)?;
            state.mounts().mount(state, entry).await?;
            Ok(None)
        }
        Operation::Delete => {
            if mount_path.starts_with("auth/") {
                return Err(Error::Forbidden(format!("cannot unmount {mount_path:?}")));
            }
            state.mounts().unmount(state, &mount_path).await?;
            Ok(None)
        }
        _ => Err(Error::UnsupportedOperation),
    }
}

/// `GET sys/mounts` (`auth == false`) or `GET sys/auth` (`auth == true`): keys are the paths
/// as the client mounted them (auth methods without their `auth/` prefix).
pub(crate) fn list(state: &State, auth: bool) -> Response {
    let mut data = Data::new();
    for entry in state.mounts().entries() {
        if entry.is_auth() != auth {
            continue;
        }
        let key = if auth {
            entry.path.trim_start_matches("auth/").to_owned()
        } else {
            entry.path.clone()
        };
        data.insert(key, entry.to_json());
    }
    Response::data(data)
}

/// A new entry at `path` (normalised; `auth/...` for auth methods) from an enable body.
pub(crate) fn parse_enable(data: &Data, path: &str) -> Result<MountEntry, Error> {
    let kind = fields::string(data, "type")?
        .filter(|kind| !kind.is_empty())
        .ok_or_else(|| {
            Error::InvalidParameter("backend type must be specified as a string".to_owned())
        })?;
    let mut entry = mounts::new_entry(path, &kind);
    entry.accessor.clear();
    entry.description = fields::string(data, "description")?.unwrap_or_default();
    entry.config = parse_config(data)?;
    entry.options = fields::string_map(data, "options")?.unwrap_or_default();
    entry.local = fields::bool(data, "local")?.unwrap_or(false);
    entry.seal_wrap = fields::bool(data, "seal_wrap")?.unwrap_or(false);
    entry.external_entropy_access = fields::bool(data, "external_entropy_access")?.unwrap_or(false);
    if entry.config.default_lease_ttl > entry.max_lease_ttl() {
        return Err(Error::InvalidParameter(
            "default lease TTL cannot be larger than max lease TTL".to_owned(),
        ));
    }
    Ok(entry)
}

fn parse_config(data: &Data) -> Result<MountConfig, Error> {
    let config = match data.get("config") {
        None | Some(Value::Null) => return Ok(MountConfig::default()),
        Some(Value::Object(map)) => map.clone(),
        Some(Value::String(s)) if s.is_empty() => return Ok(MountConfig::default()),
        Some(_) => {
            return Err(Error::InvalidParameter(
                "Field validation failed: error converting input for field \"config\": expected an object"
                    .to_owned(),
            ));
        }
    };
    Ok(MountConfig {
        default_lease_ttl: ttl_field(&config, "default_lease_ttl")?.unwrap_or_default(),
        max_lease_ttl: ttl_field(&config, "max_lease_ttl")?.unwrap_or_default(),
        force_no_cache: fields::bool(&config, "force_no_cache")?.unwrap_or(false),
    })
}

/// A TTL as Vault's mount config takes it: seconds, a duration string, or `"system"` (0).
fn ttl_field(data: &Data, name: &str) -> Result<Option<Duration>, EngineError> {
    match data.get(name) {
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("system") => {
            Ok(Some(Duration::ZERO))
        }
        _ => fields::duration(data, name),
    }
}

/// `GET .../tune`: the TTLs in force (system defaults where unset), description, options.
pub(crate) fn read_tune(state: &State, path: &str) -> Result<Response, Error> {
    let Some(entry) = state.mounts().get(path) else {
        return Err(Error::InvalidParameter(format!(
            "cannot fetch sysview for path {path:?}"
        )));
    };
    let mut data = object(json!({
        "default_lease_ttl": entry.default_lease_ttl().as_secs(),
        "max_lease_ttl": entry.max_lease_ttl().as_secs(),
        "force_no_cache": entry.config.force_no_cache,
        "description": entry.description,
    }));
    if !entry.options.is_empty() {
        data.insert(
            "options".to_owned(),
            serde_json::to_value(&entry.options).unwrap_or_default(),
        );
    }
    Ok(Response::data(data))
}

/// `POST .../tune`.
pub(crate) async fn tune(state: &State, path: &str, data: &Data) -> Result<(), Error> {
    let options: Option<BTreeMap<String, String>> = fields::string_map(data, "options")?;
    let tune = Tune {
        default_lease_ttl: ttl_field(data, "default_lease_ttl")?,
        max_lease_ttl: ttl_field(data, "max_lease_ttl")?,
        description: fields::string(data, "description")?,
        options,
    };
    state.mounts().tune(state, path, tune).await
}

async fn remount(state: &State, data: &Data) -> Result<Response, Error> {
    let from = fields::string(data, "from")?.unwrap_or_default();
    let to = fields::string(data, "to")?.unwrap_or_default();
    if from.trim_matches('/').is_empty() || to.trim_matches('/').is_empty() {
        return Err(Error::InvalidParameter(
            "both source and destination mount paths are required".to_owned(),
        ));
    }
    let (from, to) = (mounts::normalise(&from), mounts::normalise(&to));
    let id = state.mounts().remount(state, &from, &to).await?;
    Ok(Response::data(object(json!({ "migration_id": id }))))
}

fn remount_status(state: &State, id: &str) -> Option<Response> {
    let (from, to) = state.mounts().migration(id)?;
    Some(Response::data(object(json!({
        "migration_id": id,
        "migration_info": {
            "source_mount": from,
            "target_mount": to,
            "status": "success",
        },
    }))))
}

fn object(value: Value) -> Data {
    match value {
        Value::Object(map) => map,
        _ => Data::new(),
    }
}
