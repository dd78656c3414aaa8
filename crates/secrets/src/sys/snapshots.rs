//! Snapshots (paths relative to `sys/`), as Vault's raft snapshot and automated snapshot
//! endpoints; the work is in `snapshots/`:
//!
//! - `storage/raft/snapshot` GET → the snapshot's bytes (`application/octet-stream`);
//!   POST/PUT with the snapshot as the raw body → 204 after the restore;
//!   `storage/raft/snapshot-force` POST/PUT → the same without the keyring check.
//!   Neither needs sudo, as in Vault: the ACL's `read` / `update` on the path decides.
//! - `storage/raft/snapshot-auto/config` LIST → `keys`;
//!   `storage/raft/snapshot-auto/config/:name` POST/PUT → 204, GET → the schedule (never its
//!   credentials), DELETE → 204 (also when missing). All sudo (`dispatch::SYS_ROOT_PATHS`).
//! - `storage/raft/snapshot-auto/status/:name` GET → the last and current runs.
//!
//! The restore's body is not JSON, so POST/PUT on the two restore paths have their own
//! routes (`routes.rs`, with a larger body limit) into [`restore`] / [`restore_force`],
//! which check the token, the ACL and MFA as dispatch does before anything is read into the
//! store; every other method on them goes through dispatch to [`handle`].

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, Request, State as AxumState};
use axum::response::{IntoResponse, Response as HttpResponse};
use http::StatusCode;
use secrets_sdk::{Data, Operation, RawResponse, Request as EngineRequest, Response};

use crate::request::{self, RequestContext};
use crate::snapshots::{self, config, targets};
use crate::{Error, State, mfa};

/// The largest snapshot a restore accepts in one request body.
pub(crate) const RESTORE_BODY_LIMIT: usize = 1024 * 1024 * 1024;

const SNAPSHOT: &str = "storage/raft/snapshot";
const SNAPSHOT_FORCE: &str = "storage/raft/snapshot-force";
const AUTO_CONFIG: &str = "storage/raft/snapshot-auto/config";
const AUTO_STATUS: &str = "storage/raft/snapshot-auto/status/";

/// Serves `sys/storage/...` (already authenticated and authorised by dispatch).
pub(crate) async fn handle(
    state: &State,
    _ctx: &RequestContext,
    req: EngineRequest,
) -> Result<Option<Response>, Error> {
    let path = req.path.as_str();
    if path == SNAPSHOT || path == SNAPSHOT_FORCE {
        return match req.operation {
            Operation::Read if path == SNAPSHOT => {
                let body = snapshots::take(state).await?;
                Ok(Some(Response {
                    raw: Some(RawResponse {
                        status: 200,
                        content_type: "application/octet-stream".to_owned(),
                        body,
                    }),
                    ..Response::default()
                }))
            }
            _ => Err(Error::UnsupportedOperation),
        };
    }
    if let Some(rest) = path.strip_prefix(AUTO_CONFIG) {
        let name = rest.trim_start_matches('/');
        if name.is_empty() {
            return match req.operation {
                Operation::List => Ok(Some(Response::list(config::names(state).await?))),
                _ => Err(Error::UnsupportedOperation),
            };
        }
        config::check_name(name)?;
        return match req.operation {
            Operation::Read => Ok(config::load(state, name)
                .await?
                .map(|schedule| Response::data(schedule.to_data()))),
            Operation::Create | Operation::Update => {
                let existing = config::load(state, name).await?;
                let schedule = config::parse(
                    name,
                    &req.data,
                    existing.as_ref(),
                    state.clock().now_nanos(),
                )?;
                targets::check(&schedule).map_err(Error::InvalidParameter)?;
                config::save(state, &schedule).await?;
                Ok(None)
            }
            Operation::Delete => {
                config::delete(state, name).await?;
                Ok(None)
            }
            Operation::List | Operation::Patch => Err(Error::UnsupportedOperation),
        };
    }
    if let Some(name) = path.strip_prefix(AUTO_STATUS) {
        config::check_name(name)?;
        if req.operation != Operation::Read {
            return Err(Error::UnsupportedOperation);
        }
        if config::load(state, name).await?.is_none() {
            return Ok(None);
        }
        let status = config::load_status(state, name).await?.unwrap_or_default();
        return Ok(Some(Response::data(status.to_data())));
    }
    Err(Error::UnsupportedPath)
}

/// POST/PUT `/v1/sys/storage/raft/snapshot`.
pub(crate) async fn restore(AxumState(state): AxumState<State>, request: Request) -> HttpResponse {
    answer(restore_with(&state, request, false).await)
}

/// POST/PUT `/v1/sys/storage/raft/snapshot-force`.
pub(crate) async fn restore_force(
    AxumState(state): AxumState<State>,
    request: Request,
) -> HttpResponse {
    answer(restore_with(&state, request, true).await)
}

fn answer(result: Result<(), Error>) -> HttpResponse {
    match result {
        Ok(()) => {
            let mut response = HttpResponse::new(Body::empty());
            *response.status_mut() = StatusCode::NO_CONTENT;
            response
        }
        Err(err) => err.into_response(),
    }
}

/// Dispatch's checks for an update of the path, then the restore.
async fn restore_with(state: &State, request: Request, force: bool) -> Result<(), Error> {
    if state.barrier().is_sealed() {
        return Err(Error::Sealed);
    }
    let path = format!("sys/{}", if force { SNAPSHOT_FORCE } else { SNAPSHOT });
    let headers = request.headers().clone();
    let token_id = request::token_from_headers(&headers).ok_or(Error::PermissionDenied)?;
    let token = state
        .tokens()
        .lookup(state, &token_id)
        .await?
        .ok_or(Error::PermissionDenied)?;
    let acl = Arc::new(state.policies().acl_for_token(state, &token).await?);
    acl.check(&path, Operation::Update, &Data::new(), false)?;
    let methods = acl.mfa_methods(&path, Operation::Update);
    if !methods.is_empty() {
        let values: Vec<&str> = headers
            .get_all("x-secrets-mfa")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .collect();
        let creds = mfa::parse_credentials(values)?;
        mfa::enforce(state, &token, methods, &creds).await?;
    }
    if token.num_uses > 0 {
        state.tokens().use_token(state, &token).await?;
    }
    let body = http_kit::RawBody::<Error>::from_request(request, &())
        .await?
        .into_inner();
    if body.is_empty() {
        return Err(Error::InvalidParameter(
            "missing snapshot: send it as the request body".to_owned(),
        ));
    }
    snapshots::restore(state, &body, force).await
}
