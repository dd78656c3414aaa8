//! Response wrapping (Vault's `wrapping.go`): a response is kept in the cubbyhole of a new
//! single-use token and the client gets only that token, in `wrap_info`.
//!
//! Where it sits: `dispatch.rs` wraps any answer with a body when the request carried a wrap
//! TTL ([`store_wrapped`]), and checks the token named by `sys/wrapping/{lookup,unwrap,rewrap}` before
//! anything else ([`validate`]); `sys/wrapping.rs` serves those endpoints over [`read`],
//! [`consume`] and [`store_wrapped`]. The cubbyhole engine (`secrets-cubbyhole`, mounted at
//! `cubbyhole/`) stores, in the wrapping token's own cubbyhole:
//! - `response`: `{"response": "<the whole response body, as JSON text>"}`;
//! - `wrapinfo`: `{"creation_ttl": <nanoseconds>, "creation_time": "<RFC 3339>",
//!   "creation_path": "<path>"}` (Vault's record, what `sys/wrapping/lookup` shows).
//!
//! A wrapping token (`TokenStore::create_wrapping`) is an orphan with the one policy
//! `response-wrapping`, one use, and the wrap TTL as TTL and hard maximum. Its expiry is the
//! token store's (stored, rebuilt at start, tidied by the lease loop), and revoking it drops its
//! cubbyhole with it.
//!
//! Invariants: the wrapped response lives only behind the barrier, in the wrapping token's
//! cubbyhole; a response is handed out at most once ([`consume`] spends the one use under the
//! token store's write lock before anything is returned, and the token is revoked right after);
//! a wrapping token that could not store its response is revoked at once.

use std::time::Duration;

use secrets_sdk::{Data, Engine, Operation, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::mounts::Backend;
use crate::tokens::TokenEntry;
use crate::{Error, State};

/// Where the wrapped response sits in the wrapping token's cubbyhole.
const RESPONSE_KEY: &str = "response";
/// Where the wrapping facts sit in the wrapping token's cubbyhole.
const WRAPINFO_KEY: &str = "wrapinfo";
/// The mount every store has (`mounts.rs`).
const CUBBYHOLE_MOUNT: &str = "cubbyhole/";

/// `sys/` paths (relative to `sys/`) whose wrapping token is checked before authentication.
pub(crate) const VALIDATED_PATHS: &[&str] =
    &["wrapping/lookup", "wrapping/unwrap", "wrapping/rewrap"];

/// What `cubbyhole/wrapinfo` holds (Vault's field names and units).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WrapInfo {
    /// The wrap TTL, in nanoseconds.
    pub(crate) creation_ttl: i64,
    /// RFC 3339 with nanoseconds.
    pub(crate) creation_time: String,
    /// The request path whose response was wrapped.
    pub(crate) creation_path: String,
}

impl WrapInfo {
    /// `creation_ttl` in seconds as Vault renders it (`Duration.Seconds()`: a whole number
    /// prints without a fraction).
    pub(crate) fn ttl_seconds_json(&self) -> Value {
        if self.creation_ttl % 1_000_000_000 == 0 {
            json!(self.creation_ttl / 1_000_000_000)
        } else {
            json!(self.creation_ttl as f64 / 1e9)
        }
    }

    /// The wrap TTL.
    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_nanos(u64::try_from(self.creation_ttl).unwrap_or(0))
    }
}

/// What a wrapping request needs besides the response itself.
#[derive(Debug, Clone)]
pub(crate) struct WrapRequest<'a> {
    pub(crate) ttl: Duration,
    /// The caller's display name (the new wrapping token's).
    pub(crate) display_name: &'a str,
    /// The request path recorded as `creation_path`.
    pub(crate) creation_path: &'a str,
    /// The accessor of a token the response carries (`wrap_info.wrapped_accessor`).
    pub(crate) wrapped_accessor: Option<String>,
}

/// The token a wrapping endpoint acts on: `token` in the body, else the client token.
/// Returns the token and whether it came from the body (a third party unwrapping).
pub(crate) fn token_argument(
    data: &Data,
    client_token: Option<&str>,
) -> Result<(String, bool), Error> {
    match data.get("token") {
        Some(Value::String(token)) if !token.is_empty() => Ok((token.clone(), true)),
        Some(Value::String(_)) => Err(invalid_request("empty token in request body")),
        Some(_) => Err(invalid_request("could not decode token in request body")),
        None => match client_token.filter(|token| !token.is_empty()) {
            Some(token) => Ok((token.to_owned(), false)),
            None => Err(invalid_request("token is empty")),
        },
    }
}

fn invalid_request(why: &str) -> Error {
    Error::Forbidden(format!("error validating wrapping token: {why}"))
}

/// Vault's `validateWrappingToken`: the token the request names must be a live wrapping
/// token, else 400 `wrapping token is not valid or does not exist` (403 when no token can be
/// read from the request at all).
pub(crate) async fn validate(
    state: &State,
    data: &Data,
    client_token: Option<&str>,
) -> Result<TokenEntry, Error> {
    let (token, _) = token_argument(data, client_token)?;
    match state.tokens().lookup(state, &token).await? {
        Some(entry) if entry.is_wrapping() => Ok(std::sync::Arc::unwrap_or_clone(entry)),
        _ => Err(Error::InvalidWrappingToken),
    }
}

/// Wraps a whole response body, given as JSON text (dispatch serialises its envelope; a rewrap
/// keeps the stored text as is): creates the wrapping token, stores the body and the wrapping
/// facts in its cubbyhole and returns the body the client gets instead.
pub(crate) async fn store_wrapped(
    state: &State,
    request: &WrapRequest<'_>,
    response: String,
) -> Result<Value, Error> {
    let now_nanos = state.clock().now_nanos();
    let token = state
        .tokens()
        .create_wrapping(
            state,
            request.display_name,
            request.creation_path,
            request.ttl,
            now_nanos.div_euclid(1_000_000),
        )
        .await?;
    let info = WrapInfo {
        creation_ttl: i64::try_from(request.ttl.as_nanos()).unwrap_or(i64::MAX),
        creation_time: stdx::time::format_rfc3339_nanos(now_nanos),
        creation_path: request.creation_path.to_owned(),
    };
    if let Err(err) = store(state, &token, &response, &info).await {
        // Not yet handed out: nothing may keep it alive.
        if let Err(revoke) = state.tokens().revoke_tree(state, &token.hash()).await {
            tracing::warn!(error = %revoke, "Revoking an unused wrapping token failed.");
        }
        return Err(err);
    }
    Ok(wrapped_body(&token, request, &info))
}

async fn store(
    state: &State,
    token: &TokenEntry,
    response: &str,
    info: &WrapInfo,
) -> Result<(), Error> {
    let engine = cubbyhole(state)?;
    let mut response_data = Data::new();
    response_data.insert("response".to_owned(), Value::String(response.to_owned()));
    call(
        &engine,
        token,
        Operation::Create,
        RESPONSE_KEY,
        response_data,
    )
    .await?;
    let mut info_data = Data::new();
    info_data.insert("creation_ttl".to_owned(), json!(info.creation_ttl));
    info_data.insert("creation_time".to_owned(), json!(info.creation_time));
    info_data.insert("creation_path".to_owned(), json!(info.creation_path));
    call(&engine, token, Operation::Create, WRAPINFO_KEY, info_data).await?;
    Ok(())
}

/// The body a wrapped response becomes: Vault's envelope with only `wrap_info` set.
fn wrapped_body(token: &TokenEntry, request: &WrapRequest<'_>, info: &WrapInfo) -> Value {
    let mut wrap_info = json!({
        "token": token.id,
        "accessor": token.accessor,
        "ttl": request.ttl.as_secs(),
        "creation_time": info.creation_time,
        "creation_path": info.creation_path,
    });
    if let (Some(accessor), Value::Object(fields)) = (&request.wrapped_accessor, &mut wrap_info)
        && !accessor.is_empty()
    {
        fields.insert("wrapped_accessor".to_owned(), json!(accessor));
    }
    json!({
        "request_id": "",
        "lease_id": "",
        "renewable": false,
        "lease_duration": 0,
        "data": null,
        "wrap_info": wrap_info,
        "warnings": null,
        "auth": null,
    })
}

/// The wrapped response (JSON text) and the wrapping facts of a live wrapping token, without
/// spending its use.
pub(crate) async fn read(state: &State, token: &TokenEntry) -> Result<(String, WrapInfo), Error> {
    let info = read_info(state, token).await?;
    let engine = cubbyhole(state)?;
    let stored = call(&engine, token, Operation::Read, RESPONSE_KEY, Data::new()).await?;
    let response = match stored
        .and_then(|r| r.data)
        .and_then(|mut d| d.remove("response"))
    {
        Some(Value::String(response)) => response,
        _ => return Err(missing("no response found inside the cubbyhole")),
    };
    Ok((response, info))
}

/// The wrapping facts of a live wrapping token (`sys/wrapping/lookup`).
pub(crate) async fn read_info(state: &State, token: &TokenEntry) -> Result<WrapInfo, Error> {
    let engine = cubbyhole(state)?;
    let stored = call(&engine, token, Operation::Read, WRAPINFO_KEY, Data::new()).await?;
    let Some(data) = stored.and_then(|r| r.data) else {
        return Err(missing(
            "no information found; wrapping token may be from a previous Vault version",
        ));
    };
    serde_json::from_value(Value::Object(data)).map_err(|err| Error::CorruptRecord {
        key: format!("{CUBBYHOLE_MOUNT}{WRAPINFO_KEY}"),
        reason: err.to_string(),
    })
}

/// Spends the wrapping token's one use and revokes it (with its cubbyhole). Fails with
/// 400 `wrapping token is not valid or does not exist` when another request spent it first.
pub(crate) async fn consume(state: &State, token: &TokenEntry) -> Result<(), Error> {
    match state.tokens().use_token(state, token).await {
        Ok(()) => {}
        Err(Error::PermissionDenied) => return Err(Error::InvalidWrappingToken),
        Err(err) => return Err(err),
    }
    state.tokens().revoke_tree(state, &token.hash()).await
}

fn missing(why: &str) -> Error {
    Error::Engine(secrets_sdk::EngineError::Internal(why.to_owned()))
}

/// The engine mounted at `cubbyhole/`.
fn cubbyhole(state: &State) -> Result<std::sync::Arc<dyn Engine>, Error> {
    match state.mounts().route(CUBBYHOLE_MOUNT) {
        Some((entry, Backend::Engine(engine), _)) if entry.path == CUBBYHOLE_MOUNT => Ok(engine),
        _ => Err(missing("the cubbyhole mount is missing")),
    }
}

/// One request to the cubbyhole engine as `token`.
async fn call(
    engine: &std::sync::Arc<dyn Engine>,
    token: &TokenEntry,
    operation: Operation,
    path: &str,
    data: Data,
) -> Result<Option<Response>, Error> {
    let request = secrets_sdk::Request {
        operation,
        path: path.to_owned(),
        data,
        mount_point: CUBBYHOLE_MOUNT.to_owned(),
        auth: Some(token.request_auth()),
        ttls: secrets_sdk::MountTtls::SYSTEM,
    };
    Ok(engine.handle(request).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creation_ttl_renders_whole_seconds_without_a_fraction() {
        let info = |nanos| WrapInfo {
            creation_ttl: nanos,
            creation_time: String::new(),
            creation_path: String::new(),
        };
        assert_eq!(info(300_000_000_000).ttl_seconds_json(), json!(300));
        assert_eq!(info(1_500_000_000).ttl_seconds_json(), json!(1.5));
        assert_eq!(info(1_500_000_000).ttl(), Duration::from_millis(1500));
    }

    #[test]
    fn the_token_comes_from_the_body_else_the_client_token() {
        let body = |value: Value| value.as_object().cloned().unwrap();
        assert_eq!(
            token_argument(&body(json!({"token": "w"})), Some("c")).unwrap(),
            ("w".to_owned(), true)
        );
        assert_eq!(
            token_argument(&body(json!({})), Some("c")).unwrap(),
            ("c".to_owned(), false)
        );
        for (data, client, why) in [
            (
                json!({"token": ""}),
                Some("c"),
                "empty token in request body",
            ),
            (
                json!({"token": 1}),
                None,
                "could not decode token in request body",
            ),
            (json!({}), None, "token is empty"),
        ] {
            let err = token_argument(&body(data), client).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("error validating wrapping token: {why}")
            );
            assert_eq!(http_kit::ApiError::status(&err), 403);
        }
    }
}
