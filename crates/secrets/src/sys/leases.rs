//! `sys/leases/*` and the legacy `sys/renew`, `sys/revoke`, `sys/revoke-prefix`,
//! `sys/revoke-force` (docs/design.md §U6; hvac `system_backend/lease.py`, which uses PUT).
//!
//! - `PUT sys/leases/lookup {lease_id}` → `data {id, issue_time, expire_time, last_renewal,
//!   renewable, ttl}`; unknown → 400 `invalid lease`.
//! - `LIST sys/leases/lookup/[:prefix]` (sudo, root-protected in dispatch) → `keys`.
//! - `PUT sys/leases/renew {lease_id, increment}` and `.../renew/:lease_id` → 200 with
//!   `lease_id`, `renewable`, `lease_duration` in the envelope (written here as a raw JSON
//!   response so dispatch does not mistake it for a new secret to lease).
//! - `PUT sys/leases/revoke {lease_id}` and `.../revoke/:lease_id` → 204 (unknown: 204 too).
//! - `PUT sys/leases/revoke-prefix/:prefix`, `sys/leases/revoke-force/:prefix` (sudo) → 204.
//! - `PUT sys/leases/tidy` → 204.
//!
//! Invariant: a lease id in the path wins over one in the body; every refusal is a 400 with
//! upstream's message.

use std::time::Duration;

use secrets_sdk::{Data, Operation, RawResponse, Request, Response, fields};

use crate::request::RequestContext;
use crate::{Error, State};

/// Serves the lease paths under `sys/` (`req.path` is relative to `sys/`). Sudo for
/// `leases/lookup/*`, `revoke-prefix/*` and `revoke-force/*` is checked by dispatch
/// (`dispatch::SYS_ROOT_PATHS`).
pub(crate) async fn handle(
    state: &State,
    _ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    let path = req.path.strip_prefix("sys/").unwrap_or(&req.path);
    let (legacy, rest) = match path.strip_prefix("leases/") {
        Some(rest) => (false, rest),
        None => (true, path),
    };
    let (action, arg) = match rest.split_once('/') {
        Some((action, arg)) => (action, Some(arg)),
        None => (rest, None),
    };
    let write = matches!(req.operation, Operation::Create | Operation::Update);
    match (action, legacy) {
        ("lookup", false) => match req.operation {
            Operation::List => list(state, arg.unwrap_or("")).await,
            _ if write && arg.is_none() => lookup(state, &req.data).await,
            _ => Err(Error::UnsupportedOperation),
        },
        ("renew", _) if write => renew(state, arg, &req.data).await,
        ("revoke", _) if write => {
            let lease_id = lease_id(arg, &req.data)?;
            state.leases().revoke(state, &lease_id, false).await?;
            Ok(None)
        }
        ("revoke-prefix" | "revoke-force", _) if write => {
            let prefix = arg.unwrap_or("").trim_start_matches('/');
            if prefix.is_empty() {
                return Err(Error::InvalidParameter("prefix is required".to_owned()));
            }
            let force = action == "revoke-force";
            state.leases().revoke_prefix(state, prefix, force).await?;
            Ok(None)
        }
        ("tidy", false) if write && arg.is_none() => {
            state.leases().tidy(state).await?;
            Ok(None)
        }
        ("lookup" | "renew" | "revoke" | "revoke-prefix" | "revoke-force" | "tidy", _) => {
            Err(Error::UnsupportedOperation)
        }
        _ => Err(Error::UnsupportedPath),
    }
}

/// The lease id from the path, else from the body.
fn lease_id(from_path: Option<&str>, data: &Data) -> Result<String, Error> {
    let id = match from_path.filter(|id| !id.is_empty()) {
        Some(id) => id.to_owned(),
        None => fields::string(data, "lease_id")?.unwrap_or_default(),
    };
    let id = id.trim().to_owned();
    if id.is_empty() {
        return Err(Error::InvalidParameter(
            "lease_id must be specified".to_owned(),
        ));
    }
    Ok(id)
}

async fn lookup(state: &State, data: &Data) -> Result<Option<Response>, Error> {
    let id = fields::string(data, "lease_id")?.unwrap_or_default();
    let invalid = || Error::InvalidParameter("invalid lease".to_owned());
    if id.trim().is_empty() {
        return Err(Error::InvalidParameter(
            "lease_id must be specified".to_owned(),
        ));
    }
    let entry = state
        .leases()
        .lookup(state, id.trim())
        .await?
        .ok_or_else(invalid)?;
    let serde_json::Value::Object(data) = entry.lookup_json(state.now_ms()) else {
        return Err(invalid());
    };
    Ok(Some(Response::data(data)))
}

async fn list(state: &State, prefix: &str) -> Result<Option<Response>, Error> {
    let keys = state.leases().list(state, prefix).await?;
    if keys.is_empty() {
        return Ok(None);
    }
    Ok(Some(Response::list(keys)))
}

async fn renew(state: &State, arg: Option<&str>, data: &Data) -> Result<Option<Response>, Error> {
    let id = lease_id(arg, data)?;
    let increment: Option<Duration> = fields::duration(data, "increment")?;
    let (entry, warning) = state.leases().renew(state, &id, increment).await?;
    let body = serde_json::json!({
        "request_id": uuid::Uuid::new_v4().to_string(),
        "lease_id": entry.lease_id,
        "renewable": entry.renewable,
        "lease_duration": entry.ttl,
        "data": null,
        "wrap_info": null,
        "warnings": warning.map(|w| vec![w]),
        "auth": null,
    });
    Ok(Some(Response {
        raw: Some(RawResponse {
            status: 200,
            content_type: "application/json".to_owned(),
            body: serde_json::to_vec(&body).unwrap_or_default(),
        }),
        ..Response::default()
    }))
}
