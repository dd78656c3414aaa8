//! Response-wrapping endpoints (`/v1/sys/wrapping/*`; hvac `system_backend/wrapping.py`):
//! `wrap`, `unwrap`, `lookup` and `rewrap`, reached relative to `sys/`
//! (`wrapping/unwrap`).
//!
//! Where it sits: dispatch has already checked that the token these endpoints act on (`token`
//! in the body, else the client token) is a live wrapping token (`wrapping::validate`, before
//! authentication, as Vault does), authenticated the caller (`lookup` needs no token) and
//! checked the ACL. Storage and token handling live in `crate::wrapping`.
//!
//! - `wrap` answers its body as data; dispatch then wraps it. Without a wrap TTL it is 400
//!   `endpoint requires response wrapping to be used`.
//! - `unwrap` returns the wrapped response exactly as it was stored (the original body,
//!   request id included), 204 when it was empty, and revokes the wrapping token.
//! - `lookup` (read or update) shows `creation_ttl` (seconds), `creation_time` and
//!   `creation_path` without spending the token.
//! - `rewrap` moves the response to a new wrapping token with the original TTL (or the
//!   request's wrap TTL when shorter) and creation path, and revokes the old one.
//!
//! Invariant: `unwrap` and `rewrap` spend the token's one use before answering, so a second
//! call with the same token is 400 `wrapping token is not valid or does not exist`.

use secrets_sdk::{Data, Operation, RawResponse, Request, Response};
use serde_json::json;

use crate::request::RequestContext;
use crate::tokens::TokenEntry;
use crate::wrapping::{self, WrapRequest};
use crate::{Error, State};

/// Serves `sys/wrapping/*`.
pub(crate) async fn handle(
    state: &State,
    ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    let write = matches!(req.operation, Operation::Create | Operation::Update);
    match req.path.as_str() {
        "wrapping/wrap" if write => wrap(ctx, req.data),
        "wrapping/unwrap" if write => unwrap(state, ctx, &req.data).await,
        "wrapping/lookup" if write || req.operation == Operation::Read => {
            lookup(state, ctx, &req.data).await
        }
        "wrapping/rewrap" if write => rewrap(state, ctx, &req.data).await,
        "wrapping/wrap" | "wrapping/unwrap" | "wrapping/lookup" | "wrapping/rewrap" => {
            Err(Error::UnsupportedOperation)
        }
        _ => Err(Error::UnsupportedPath),
    }
}

/// `POST sys/wrapping/wrap`: the body as data, for dispatch to wrap.
fn wrap(ctx: &RequestContext, data: Data) -> Result<Option<Response>, Error> {
    if ctx.wrap_ttl.is_none_or(|ttl| ttl.is_zero()) {
        return Err(Error::InvalidParameter(
            "endpoint requires response wrapping to be used".to_owned(),
        ));
    }
    Ok(Some(Response::data(data)))
}

/// `POST sys/wrapping/unwrap`: the wrapped response, once.
async fn unwrap(
    state: &State,
    ctx: &RequestContext,
    data: &Data,
) -> Result<Option<Response>, Error> {
    let token = wrapping_token(state, ctx, data).await?;
    let (response, _) = wrapping::read(state, &token).await?;
    wrapping::consume(state, &token).await?;
    if response.is_empty() {
        return Ok(None);
    }
    Ok(Some(json_body(response.into_bytes())))
}

/// `POST|GET sys/wrapping/lookup`: what the wrapping token wraps, without spending it.
async fn lookup(
    state: &State,
    ctx: &RequestContext,
    data: &Data,
) -> Result<Option<Response>, Error> {
    let token = wrapping_token(state, ctx, data).await?;
    let info = wrapping::read_info(state, &token).await?;
    let mut out = Data::new();
    out.insert("creation_ttl".to_owned(), info.ttl_seconds_json());
    out.insert("creation_time".to_owned(), json!(info.creation_time));
    out.insert("creation_path".to_owned(), json!(info.creation_path));
    Ok(Some(Response::data(out)))
}

/// `POST sys/wrapping/rewrap`: the same response under a new wrapping token.
async fn rewrap(
    state: &State,
    ctx: &RequestContext,
    data: &Data,
) -> Result<Option<Response>, Error> {
    let token = wrapping_token(state, ctx, data).await?;
    let (response, info) = wrapping::read(state, &token).await?;
    let mut ttl = info.ttl();
    if let Some(requested) = ctx.wrap_ttl.filter(|ttl| !ttl.is_zero()) {
        ttl = ttl.min(requested);
    }
    let request = WrapRequest {
        ttl,
        display_name: ctx.token.as_ref().map_or("", |t| t.display_name.as_str()),
        creation_path: &info.creation_path,
        wrapped_accessor: None,
    };
    let body = wrapping::store_wrapped(state, &request, response).await?;
    if let Err(err) = wrapping::consume(state, &token).await {
        // Another request spent the old token first: the new one must not outlive this call.
        if let Some(new_token) = body["wrap_info"]["token"].as_str() {
            let hash = crate::tokens::store::hash_id(new_token);
            state.tokens().revoke_tree(state, &hash).await?;
        }
        return Err(err);
    }
    Ok(Some(json_body(body.to_string().into_bytes())))
}

/// The live wrapping token the request names (`token` in the body, else the client token).
async fn wrapping_token(
    state: &State,
    ctx: &RequestContext,
    data: &Data,
) -> Result<TokenEntry, Error> {
    wrapping::validate(state, data, ctx.client_token.as_deref()).await
}

/// A finished JSON body, passed through by dispatch as it is.
fn json_body(body: Vec<u8>) -> Response {
    Response {
        raw: Some(RawResponse {
            status: 200,
            content_type: "application/json".to_owned(),
            body,
        }),
        ..Response::default()
    }
}
