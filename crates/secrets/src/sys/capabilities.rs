//! `sys/capabilities` `{token, path|paths}`, `sys/capabilities-self` `{path|paths}` (the
//! caller's own token) and `sys/capabilities-accessor` `{accessor, path|paths}`: which
//! capabilities a token has on each path (Vault's `handleCapabilities`).
//!
//! Answer: `data {"<path>": [caps...], ...}` plus `capabilities` when exactly one path was
//! asked (Vault's backwards-compatible field); capabilities are sorted, `["root"]` for root,
//! `["deny"]` when nothing matches. The token's entity policies count, as in Vault.
//!
//! Errors: no path → 400 `missing path`; `sys/capabilities` without a token → 400 `missing
//! token`, with an unknown token → 400 `invalid token`; `capabilities-accessor` without an
//! accessor → 400 `missing accessor`, with an unknown one → 400 `invalid accessor`.

use secrets_sdk::{Data, Operation, Request, Response, fields};
use serde_json::Value;

use crate::request::RequestContext;
use crate::tokens::TokenEntry;
use crate::{Error, State};

/// Serves `sys/capabilities`, `sys/capabilities-self` and `sys/capabilities-accessor`.
pub(crate) async fn handle(
    state: &State,
    ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    let path = req.path.strip_prefix("sys/").unwrap_or(&req.path);
    let path = path.strip_suffix('/').unwrap_or(path);
    let kind = match path {
        "capabilities" | "capabilities-self" | "capabilities-accessor" => path.to_owned(),
        _ => return Err(Error::UnsupportedPath),
    };
    if !matches!(req.operation, Operation::Update | Operation::Create) {
        return Err(Error::UnsupportedOperation);
    }
    let mut paths = fields::comma_list(&req.data, "paths")?.unwrap_or_default();
    if paths.is_empty() {
        paths = fields::comma_list(&req.data, "path")?.unwrap_or_default();
    }
    let token = match kind.as_str() {
        "capabilities-self" => match &ctx.token {
            Some(token) => TokenEntry::clone(token),
            None => return Err(Error::InvalidParameter("missing token".to_owned())),
        },
        "capabilities-accessor" => {
            let accessor = fields::string(&req.data, "accessor")?.unwrap_or_default();
            if accessor.is_empty() {
                return Err(Error::InvalidParameter("missing accessor".to_owned()));
            }
            state
                .tokens()
                .lookup_accessor(state, &accessor)
                .await?
                .ok_or_else(|| Error::InvalidParameter("invalid accessor".to_owned()))?
        }
        _ => {
            let id = fields::string(&req.data, "token")?.unwrap_or_default();
            if id.is_empty() {
                return Err(Error::InvalidParameter("missing token".to_owned()));
            }
            state
                .tokens()
                .lookup(state, &id)
                .await?
                .map(std::sync::Arc::unwrap_or_clone)
                .ok_or_else(|| Error::InvalidParameter("invalid token".to_owned()))?
        }
    };
    if paths.is_empty() {
        return Err(Error::InvalidParameter("missing path".to_owned()));
    }
    let data = capabilities(state, &token, &paths).await?;
    Ok(Some(Response::data(data)))
}

async fn capabilities(state: &State, token: &TokenEntry, paths: &[String]) -> Result<Data, Error> {
    let acl = state.policies().acl_for_token(state, token).await?;
    let mut data = Data::new();
    for path in paths {
        let caps: Vec<Value> = acl
            .capabilities(path.trim_start_matches('/'))
            .into_iter()
            .map(Value::String)
            .collect();
        data.insert(path.clone(), Value::Array(caps));
    }
    if let [only] = paths {
        let caps = data.get(only).cloned().unwrap_or(Value::Null);
        data.insert("capabilities".to_owned(), caps);
    }
    Ok(data)
}
