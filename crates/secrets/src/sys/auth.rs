//! `sys/auth`: auth methods mounted under `auth/` at any path (as upstream).
//!
//! - `GET sys/auth` → map keyed `"userpass/"` (without `auth/`) of the same entries as
//!   `sys/mounts`, in `data` and at the top level.
//! - `POST sys/auth/:path {type, description, config, options, local, seal_wrap}` → 204 (the
//!   method is mounted at `auth/:path/`); unknown type 400; overlap 409.
//! - `GET sys/auth/:path` → the entry; `DELETE sys/auth/:path` → 204 (leases under
//!   `auth/:path/` revoked, its data deleted; missing is fine; `token/` cannot be disabled).
//! - `GET|POST sys/auth/:path/tune`.
//!
//! Everything under `sys/auth/` needs `sudo` (dispatch, Vault's `auth/*` root path); the list
//! does not.

use secrets_sdk::{Operation, Request, Response};

use crate::request::RequestContext;
use crate::sys::mounts::{list, parse_enable, read_tune, tune};
use crate::{Error, State, mounts};

pub(crate) async fn handle(
    state: &State,
    _ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    let path = req.path.trim_end_matches('/');
    if path == "auth" {
        return match req.operation {
            Operation::Read | Operation::List => Ok(Some(list(state, true))),
            _ => Err(Error::UnsupportedOperation),
        };
    }
    let Some(rest) = path.strip_prefix("auth/") else {
        return Err(Error::UnsupportedPath);
    };
    if let Some(method) = rest.strip_suffix("/tune") {
        let mount_path = format!("auth/{}", mounts::normalise(method));
        return match req.operation {
            Operation::Read => read_tune(state, &mount_path).map(Some),
            Operation::Create | Operation::Update => {
                tune(state, &mount_path, &req.data).await?;
                Ok(None)
            }
            _ => Err(Error::UnsupportedOperation),
        };
    }
    let mount_path = format!("auth/{}", mounts::normalise(rest));
    match req.operation {
        Operation::Read => match state.mounts().get(&mount_path) {
            Some(entry) => Ok(Some(Response::data(
                entry.to_json().as_object().cloned().unwrap_or_default(),
            ))),
            None => Err(Error::InvalidParameter(format!(
                "No auth engine at {}",
                mount_path.trim_start_matches("auth/")
            ))),
        },
        Operation::Create | Operation::Update => {
            let entry = parse_enable(&req.data, &mount_path)?;
            state.mounts().mount(state, entry).await?;
            Ok(None)
        }
        Operation::Delete => {
            if mount_path == "auth/token/" {
                return Err(Error::InvalidParameter(
                    "token credential backend cannot be disabled".to_owned(),
                ));
            }
            state.mounts().unmount(state, &mount_path).await?;
            Ok(None)
        }
        _ => Err(Error::UnsupportedOperation),
    }
}
