//! The authenticated seal and keyring endpoints, reached through dispatch and `sys::handle`
//! (paths relative to `sys/`):
//!
//! - `PUT|POST sys/seal`: seals the store (`State::pre_seal`, then the barrier forgets every
//!   key). Needs `sudo` on `sys/seal`, checked here as Vault's `SealWithRequest` does
//!   (dispatch checks `update`; `sys/seal` is not in the root-protected list).
//! - `PUT|POST sys/step-down`: the active node gives up leadership, so another server takes
//!   over (`cluster::Leadership::step_down`; it keeps out of the next election for 10 s unless
//!   it is alone); 204, with the same `sudo` requirement. A standby checks the `sudo` and
//!   forwards the request to the active node (`step_down.rs`), answering as it does, as
//!   Vault's standbys forward it. With the embedded store (a single active node) nothing
//!   changes: 204.
//! - `PUT|POST sys/rotate`: adds a keyring term for new writes (204); old terms still decrypt.
//!   Root-protected (`rotate*` in dispatch's list).
//! - `GET sys/key-status`: `{term, install_time}` of the active term (dispatch copies `data` to
//!   the top level, as Vault's `injectDataIntoTopRoutes`).
//!
//! The unauthenticated `sys/seal-status`, `sys/init` and `sys/unseal` are in `seal.rs`.

use secrets_sdk::{Data, Operation, Request, Response};
use serde_json::Value;

use crate::request::RequestContext;
use crate::{Error, State};

pub(crate) async fn handle(
    state: &State,
    ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    let path = req.path.trim_end_matches('/');
    let is_write = matches!(req.operation, Operation::Update | Operation::Create);
    match path {
        "seal" | "step-down" => {
            if !is_write {
                return Err(Error::UnsupportedOperation);
            }
            let mut data = req.data;
            let forwarded = path == "step-down"
                && data.remove(super::step_down::FORWARDED) == Some(Value::Bool(true));
            require_sudo(ctx, &format!("sys/{path}"), req.operation, &data)?;
            if path == "seal" {
                state.seal().seal(state).await;
            } else if let Some(cluster) = &state.config().cluster {
                if cluster.is_leader() || !cluster.is_elected() {
                    cluster.step_down();
                } else if !forwarded {
                    super::step_down::forward_to_active(
                        cluster.as_ref(),
                        ctx.client_token.as_deref(),
                    )
                    .await?;
                }
            }
            Ok(None)
        }
        "rotate" => {
            if !is_write {
                return Err(Error::UnsupportedOperation);
            }
            state.barrier().rotate().await?;
            Ok(None)
        }
        "key-status" => {
            if req.operation != Operation::Read {
                return Err(Error::UnsupportedOperation);
            }
            let status = state.barrier().key_status()?;
            let mut data = Data::new();
            data.insert("term".to_owned(), Value::from(status.term));
            data.insert(
                "install_time".to_owned(),
                Value::from(stdx::time::format_rfc3339_millis(
                    i64::try_from(status.install_time_ms).unwrap_or(i64::MAX),
                )),
            );
            Ok(Some(Response::data(data)))
        }
        _ => Err(Error::UnsupportedPath),
    }
}

/// Vault seals and steps down only for a token with `sudo` on the path.
fn require_sudo(
    ctx: &RequestContext,
    path: &str,
    operation: Operation,
    data: &Data,
) -> Result<(), Error> {
    match ctx.acl.as_deref() {
        Some(acl) => acl.check(path, operation, data, true),
        None => Err(Error::PermissionDenied),
    }
}
