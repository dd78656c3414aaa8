//! The one catch-all handler for `/v1/*`: every path without an explicit route in
//! `routes.rs` (health, init, unseal, seal-status) comes through here.
//!
//! Flow (Vault's `handleLogical` + `HandleRequest`):
//! 1. sealed → 503 `Vault is sealed`;
//! 2. parse the HTTP request (`request.rs`); `OPTIONS` → 204 with `Allow`;
//! 3. route by longest prefix (`mounts.rs`);
//! 4. `sys/wrapping/{lookup,unwrap,rewrap}`: the token they act on must be a live wrapping
//!    token, checked before anything else (`wrapping::validate`: 400 `wrapping token is not
//!    valid or does not exist`);
//! 5. unless the path is unauthenticated (an engine's `special_paths().unauthenticated`, e.g.
//!    userpass `login/*`, or `sys/wrapping/lookup`), resolve the token (`tokens`) → 403
//!    `permission denied` when missing, unknown, expired or used up; build its ACL (`policy`);
//! 6. no mount → the ACL decides first (403 for a token without access), then 404
//!    `no handler for route`;
//! 7. for an update on an engine, the engine's existence check turns it into create when the
//!    item is missing;
//! 8. `acl.authorize(path, operation, data, sudo, wrap TTL)` where sudo is needed on
//!    root-protected paths ([`SYS_ROOT_PATHS`], [`TOKEN_ROOT_PATHS`], an engine's
//!    `special_paths().root`) and the wrap TTL meets a rule's wrapping bounds; when the rule
//!    lists `mfa_methods`, every one must be satisfied through the `X-Secrets-MFA` /
//!    `X-Vault-MFA` header (`mfa::enforce`: 403 with the reason otherwise);
//! 9. count a use of a limited-use token (a wrapping token unwrapping itself is counted by
//!    the unwrap, which must read its response first); call the backend with the path
//!    relative to its mount (`sys/` paths reach `sys::handle` as `mounts/...`, `auth/token/`
//!    paths reach `tokens::handle` as `create`, ...);
//! 10. a login's `auth` → `identity::entity_for_login` + `tokens.create_for_login`; a `secret`
//!     → `leases.register`;
//! 11. the answer: raw responses pass through; `None` → 204 for writes, 404 `{"errors":[]}`
//!     for reads and lists; LIST with no keys → 404; with a wrap TTL above zero, the envelope
//!     is stored in a new wrapping token's cubbyhole and the client gets only `wrap_info`
//!     (`wrapping::store_wrapped`); else 200 with Vault's envelope, with `data` also copied to the top
//!     level for [`TOP_LEVEL_DATA_ROUTES`].
//!
//! Core backends (sys, token, identity; never engines) that need to put a rendered token into the
//! envelope's `auth` (token create, renew) return it in `data` under [`ENVELOPE_AUTH_KEY`];
//! dispatch moves it to `auth` (and `data` becomes `null` when nothing else is left).
//!
//! Invariants: the ACL is checked on the full logical path before any backend runs; a backend
//! never sees a request whose token failed; every error is Vault-shaped.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use secrets_sdk::{Data, DataText, Operation};
use serde_json::Value;

use crate::mounts::{Backend, MountEntry};
use crate::request::{self, LogicalRequest, RequestContext, Verb};
use crate::wrapping::{self, WrapRequest};
use crate::{Error, State, identity, mfa, sys, tokens};

/// `sys/` paths (relative to `sys/`) that need `sudo` (Vault's system `PathsSpecial.Root`).
pub(crate) const SYS_ROOT_PATHS: &[&str] = &[
    "auth/*",
    "remount",
    "audit",
    "audit/*",
    "raw",
    "raw/*",
    "rotate*",
    "config/cors",
    "config/auditing/*",
    "config/ui/headers/*",
    "plugins/catalog/*",
    "revoke-prefix/*",
    "revoke-force/*",
    "leases/revoke-prefix/*",
    "leases/revoke-force/*",
    "leases/lookup/*",
    "storage/raft/snapshot-auto/config*",
];

/// `sys/` paths served without a token (most have explicit routes; these catch other verbs).
const SYS_UNAUTHENTICATED_PATHS: &[&str] = &[
    "health",
    "seal-status",
    "init",
    "unseal",
    "leader",
    "wrapping/lookup",
];

/// `auth/token/` paths that need `sudo` (Vault's token store `PathsSpecial.Root`).
pub(crate) const TOKEN_ROOT_PATHS: &[&str] = &["revoke-orphan/*", "accessors*"];

/// Routes whose `data` is also copied to the top level of the body (Vault's
/// `injectDataIntoTopRoutes`). An entry ending in `*` is a prefix; any other matches itself
/// and, with a trailing slash, what is under it.
pub(crate) const TOP_LEVEL_DATA_ROUTES: &[&str] = &[
    "sys/mounts",
    "sys/auth",
    "sys/policy",
    "sys/capabilities*",
    "sys/remount",
    "sys/key-status",
    "sys/ha-status",
    "sys/rotate*",
    "sys/wrapping/wrap",
    "sys/audit",
];

/// The MFA credentials header (canonical spelling; `X-Vault-MFA` is aliased onto it).
const MFA_HEADER: &str = "x-secrets-mfa";

/// Where a core backend puts a rendered envelope `auth` object in `Response.data`.
pub(crate) const ENVELOPE_AUTH_KEY: &str = "__envelope_auth";

/// The axum handler for `/v1/{*path}` (every method).
pub(crate) async fn handle(
    axum::extract::State(state): axum::extract::State<State>,
    request: Request,
) -> Response {
    let request_id = request
        .extensions()
        .get::<http_kit::RequestId>()
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), |id| id.0.clone());
    match run(&state, request, request_id).await {
        Ok(response) => response,
        // A 5xx's message is hidden by http-kit; "sealed" is the one Vault clients must see.
        Err(Error::Sealed) => http_kit::shape::errors_json(
            StatusCode::SERVICE_UNAVAILABLE,
            &[&Error::Sealed.to_string()],
        ),
        Err(err) => err.into_response(),
    }
}

async fn run(state: &State, request: Request, request_id: String) -> Result<Response, Error> {
    if state.barrier().is_sealed() {
        return Err(Error::Sealed);
    }
    // The MFA credentials (`X-Secrets-MFA`, or `X-Vault-MFA` through the alias layer), read
    // now: parsing consumes the request.
    let mfa_headers: Vec<String> = request
        .headers()
        .get_all(MFA_HEADER)
        .iter()
        .filter_map(|value| value.to_str().ok().map(str::to_owned))
        .collect();
    let req = request::parse(request).await?;
    if req.verb == Verb::Options {
        let mut response = StatusCode::NO_CONTENT.into_response();
        response.headers_mut().insert(
            header::ALLOW,
            HeaderValue::from_static("GET, HEAD, LIST, POST, PUT, PATCH, DELETE, OPTIONS"),
        );
        return Ok(response);
    }
    let route = state.mounts().route(&req.path);
    let unauthenticated = route
        .as_ref()
        .is_some_and(|(_, backend, relative)| is_unauthenticated(backend, relative));

    if let Some((_, Backend::System, relative)) = &route
        && wrapping::VALIDATED_PATHS.contains(&relative.as_str())
    {
        Box::pin(wrapping::validate(
            state,
            &req.data,
            req.client_token.as_deref(),
        ))
        .await?;
    }

    let mut ctx = RequestContext {
        client_token: req.client_token.clone(),
        wrap_ttl: req.wrap_ttl,
        ..RequestContext::default()
    };
    if let Some(id) = &req.client_token
        && let Some(entry) = state.tokens().lookup(state, id).await?
    {
        let acl = state.policies().acl_for_token(state, &entry).await?;
        ctx.acl = Some(Arc::new(acl));
        ctx.token = Some(entry);
    }
    if ctx.token.is_none() && !unauthenticated {
        return Err(Error::PermissionDenied);
    }

    let Some((mount, backend, relative)) = route else {
        if let Some(acl) = &ctx.acl {
            acl.check(&req.path, req.operation, &req.data, false)?;
        }
        return Err(Error::NoHandler(req.path));
    };

    let mut engine_request = secrets_sdk::Request {
        operation: req.operation,
        path: relative.clone(),
        data: req.data.clone(),
        mount_point: mount.path.clone(),
        auth: ctx.token.as_deref().map(tokens::TokenEntry::request_auth),
        ttls: secrets_sdk::MountTtls {
            default: mount.default_lease_ttl(),
            max: mount.max_lease_ttl(),
        },
    };

    if !unauthenticated {
        if let Backend::Engine(engine) = &backend
            && engine_request.operation == Operation::Update
            && engine.exists(&engine_request).await? == Some(false)
        {
            engine_request.operation = Operation::Create;
        }
        let needs_sudo = needs_sudo(&backend, &relative);
        if let Some(acl) = &ctx.acl {
            let methods = acl.authorize(
                &req.path,
                engine_request.operation,
                &engine_request.data,
                needs_sudo,
                req.wrap_ttl,
            )?;
            if let Some(token) = &ctx.token
                && !methods.is_empty()
            {
                let creds = mfa::parse_credentials(mfa_headers.iter().map(String::as_str))?;
                Box::pin(mfa::enforce(state, token, methods, &creds)).await?;
            }
        }
        if let Some(token) = &ctx.token
            && token.num_uses > 0
            && !unwraps_itself(&backend, &relative, &req.data, token)
        {
            Box::pin(state.tokens().use_token(state, token)).await?;
        }
    }

    let operation = engine_request.operation;
    // The core backends' futures are boxed (several KB each), so this future stays small: it
    // is moved into its box on every request, an engine's read included.
    let answer = match &backend {
        Backend::System => Box::pin(sys::handle(state, &ctx, engine_request)).await?,
        Backend::Token => Box::pin(tokens::handle(state, &ctx, engine_request)).await?,
        Backend::Identity => Box::pin(identity::handle(state, &ctx, engine_request)).await?,
        Backend::Engine(engine) => engine.handle(engine_request).await?,
    };
    respond(
        state, &ctx, &req, &mount, &backend, operation, answer, request_id,
    )
    .await
}

/// Turns a backend's answer into the HTTP response (rules in the module docs).
#[allow(clippy::too_many_arguments, reason = "one call site; the flow's state")]
async fn respond(
    state: &State,
    ctx: &RequestContext,
    req: &LogicalRequest,
    mount: &MountEntry,
    backend: &Backend,
    operation: Operation,
    answer: Option<secrets_sdk::Response>,
    request_id: String,
) -> Result<Response, Error> {
    let Some(mut answer) = answer else {
        return Ok(match operation {
            Operation::Read | Operation::List => Error::NotFound.into_response(),
            _ => StatusCode::NO_CONTENT.into_response(),
        });
    };
    if let Some(raw) = answer.raw.take() {
        let status = StatusCode::from_u16(raw.status).unwrap_or(StatusCode::OK);
        let mut response = Response::new(Body::from(raw.body));
        *response.status_mut() = status;
        if let Ok(value) = HeaderValue::from_str(&raw.content_type) {
            response.headers_mut().insert(header::CONTENT_TYPE, value);
        }
        return Ok(response);
    }
    // An engine's stored text (a kv secret) goes into the envelope as it is, unless something
    // below needs its fields: a list's 404 rule, a core backend's auth key, wrapping, Vault's
    // top-level injection.
    let mut data_text = answer.data_text.take();
    if data_text.is_some()
        && (operation == Operation::List
            || !matches!(backend, Backend::Engine(_))
            || ctx.wrap_ttl.is_some_and(|ttl| !ttl.is_zero())
            || injects_top_level(&req.path))
    {
        answer.data = data_text.take().map(|text| text.to_data());
    }
    if operation == Operation::List && list_is_empty(&answer) {
        return Err(Error::NotFound);
    }

    let mut auth_json = Value::Null;
    // Only the core backends may use the key: an engine's data (a kv secret) is never moved.
    if !matches!(backend, Backend::Engine(_))
        && let Some(data) = answer.data.as_mut()
        && let Some(rendered) = data.remove(ENVELOPE_AUTH_KEY)
    {
        auth_json = rendered;
        if data.is_empty() {
            answer.data = None;
        }
    }
    // Who a wrapping token is made for: the caller, or the token a login just created.
    let mut display_name = ctx
        .token
        .as_ref()
        .map(|token| token.display_name.clone())
        .unwrap_or_default();
    if let Some(auth) = answer.auth.take() {
        if matches!(backend, Backend::Engine(_)) && mount.is_auth() {
            // Logins, leases and wrapping are boxed: rare beside a read, and large futures
            // (see `run`).
            let entity_id =
                Box::pin(identity::entity_for_login(state, mount, &auth.alias_name)).await?;
            let token = Box::pin(state.tokens().create_for_login(
                state,
                mount,
                &auth,
                Some(entity_id),
            ))
            .await?;
            auth_json = tokens::auth_json(&token, state.now_ms());
            if ctx.token.is_none() {
                display_name = token.display_name.clone();
            }
        } else {
            tracing::warn!(
                message = "A backend that is not an auth method returned a login; ignored.",
                path = %req.path
            );
        }
    }

    let (mut lease_id, mut renewable, mut lease_duration) = (String::new(), false, 0u64);
    if let Some(lease) = answer.secret.take() {
        let Some(token) = ctx.token.as_ref() else {
            return Err(Error::Engine(secrets_sdk::EngineError::Internal(
                "a leased secret was issued on an unauthenticated path".to_owned(),
            )));
        };
        let (id, ttl) = Box::pin(
            state
                .leases()
                .register(state, mount, &req.path, token, &lease),
        )
        .await?;
        lease_id = id;
        renewable = lease.renewable;
        lease_duration = ttl.as_secs();
    }

    if req.path == "cubbyhole/response" && ctx.token.as_ref().is_some_and(|t| t.is_wrapping()) {
        answer.warnings.push(
            "Reading from 'cubbyhole/response' is deprecated. Please use sys/wrapping/unwrap to unwrap responses, as it provides additional security checks and other benefits.".to_owned(),
        );
    }

    let data = answer.data.map_or(Value::Null, Value::Object);
    let wrap_ttl = ctx.wrap_ttl.filter(|ttl| !ttl.is_zero());
    let warnings = (!answer.warnings.is_empty()).then_some(answer.warnings.as_slice());
    let envelope = Envelope {
        auth: &auth_json,
        data: &data,
        lease_duration,
        lease_id: &lease_id,
        renewable,
        request_id: &request_id,
        warnings,
        wrap_info: (),
    };
    let top_level = match &data {
        Value::Object(fields) if wrap_ttl.is_none() && injects_top_level(&req.path) => Some(fields),
        _ => None,
    };
    if let Some(fields) = top_level {
        // Vault's `injectDataIntoTopRoutes` (sys paths only, never a hot path): the data's
        // fields beside the envelope's, which wins on a clash.
        let Ok(Value::Object(mut body)) = serde_json::to_value(&envelope) else {
            unreachable!("an envelope serialises to an object")
        };
        for (key, value) in fields {
            body.entry(key.clone()).or_insert_with(|| value.clone());
        }
        return Ok(json_response(StatusCode::OK, &Value::Object(body)));
    }
    let Some(ttl) = wrap_ttl else {
        return Ok(json_bytes_response(
            StatusCode::OK,
            envelope.to_bytes(data_text.as_ref()),
        ));
    };
    let wrapped_accessor = auth_json
        .get("accessor")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let request = WrapRequest {
        ttl,
        display_name: &display_name,
        creation_path: &req.path,
        wrapped_accessor,
    };
    let text = serde_json::to_string(&envelope).unwrap_or_else(|_| "null".to_owned());
    let wrapped = Box::pin(wrapping::store_wrapped(state, &request, text)).await?;
    Ok(json_response(StatusCode::OK, &wrapped))
}

/// Vault's response envelope, serialised straight from borrowed parts (a `serde_json::Map`
/// per request cost a tree of owned keys). Fields in alphabetical order, the order the map
/// this replaced wrote them in.
#[derive(serde::Serialize)]
struct Envelope<'a> {
    auth: &'a Value,
    data: &'a Value,
    lease_duration: u64,
    lease_id: &'a str,
    renewable: bool,
    request_id: &'a str,
    /// `null` when there are none, as Vault.
    warnings: Option<&'a [String]>,
    /// Always `null` here: a wrapped answer is the wrapping token's own envelope.
    wrap_info: (),
}

impl Envelope<'_> {
    /// The envelope's JSON text, written by hand: the same bytes as `serde_json::to_vec` of
    /// the derived `Serialize` (tested), for a fraction of the CPU on a secret's long value.
    /// With `data_text`, that text is the `data` field (`self.data` is then `null`): an
    /// engine's stored JSON, the bytes `to_vec` would write for the map it holds (tested).
    fn to_bytes(&self, data_text: Option<&DataText>) -> Vec<u8> {
        use http_kit::json::{write_str, write_value};
        // Room for the envelope and a small secret's data without growing (a grown buffer is
        // copied once per doubling).
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(b"{\"auth\":");
        write_value(&mut out, self.auth);
        out.extend_from_slice(b",\"data\":");
        match data_text {
            Some(text) => out.extend_from_slice(text.as_bytes()),
            None => write_value(&mut out, self.data),
        }
        out.extend_from_slice(b",\"lease_duration\":");
        if self.lease_duration == 0 {
            out.push(b'0');
        } else {
            out.extend_from_slice(self.lease_duration.to_string().as_bytes());
        }
        out.extend_from_slice(b",\"lease_id\":");
        write_str(&mut out, self.lease_id);
        out.extend_from_slice(b",\"renewable\":");
        out.extend_from_slice(if self.renewable { b"true" } else { b"false" });
        out.extend_from_slice(b",\"request_id\":");
        write_str(&mut out, self.request_id);
        out.extend_from_slice(b",\"warnings\":");
        match self.warnings {
            None => out.extend_from_slice(b"null"),
            Some(warnings) => {
                out.push(b'[');
                for (i, warning) in warnings.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_str(&mut out, warning);
                }
                out.push(b']');
            }
        }
        out.extend_from_slice(b",\"wrap_info\":null}");
        out
    }
}

/// Whether this is a wrapping token unwrapping itself (`sys/wrapping/unwrap` without a
/// `token` in the body): the unwrap spends its use after reading the response.
fn unwraps_itself(
    backend: &Backend,
    relative: &str,
    data: &Data,
    token: &tokens::TokenEntry,
) -> bool {
    matches!(backend, Backend::System)
        && relative == "wrapping/unwrap"
        && !data.contains_key("token")
        && token.is_wrapping()
}

/// Vault's LIST 404 rule: no data and no warnings, or `keys` present but empty.
fn list_is_empty(answer: &secrets_sdk::Response) -> bool {
    let data = answer.data.as_ref();
    if data.is_none_or(Data::is_empty) && answer.warnings.is_empty() {
        return true;
    }
    match data.and_then(|d| d.get("keys")) {
        None | Some(Value::Null) => data.is_none_or(Data::is_empty) && answer.warnings.is_empty(),
        Some(Value::Array(keys)) => keys.is_empty(),
        Some(_) => false,
    }
}

/// `application/json` exactly, as hvac needs.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    // `to_vec` writes straight into the buffer; `Display` would go through `fmt` per token.
    json_bytes_response(
        status,
        serde_json::to_vec(body).unwrap_or_else(|_| b"null".to_vec()),
    )
}

/// [`json_response`] for a body already serialised.
pub(crate) fn json_bytes_response(status: StatusCode, bytes: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn is_unauthenticated(backend: &Backend, relative: &str) -> bool {
    match backend {
        Backend::System => matches_any(SYS_UNAUTHENTICATED_PATHS, relative),
        Backend::Engine(engine) => {
            let special = engine.special_paths();
            special
                .unauthenticated
                .iter()
                .any(|pattern| path_matches(pattern, relative))
        }
        Backend::Token | Backend::Identity => false,
    }
}

fn needs_sudo(backend: &Backend, relative: &str) -> bool {
    match backend {
        Backend::System => matches_any(SYS_ROOT_PATHS, relative),
        Backend::Token => matches_any(TOKEN_ROOT_PATHS, relative),
        Backend::Identity => false,
        Backend::Engine(engine) => engine
            .special_paths()
            .root
            .iter()
            .any(|pattern| path_matches(pattern, relative)),
    }
}

fn matches_any(patterns: &[&str], path: &str) -> bool {
    patterns.iter().any(|pattern| path_matches(pattern, path))
}

/// Vault's special-path matching: a trailing `*` is a prefix match, `+` matches one whole
/// segment, anything else is exact.
pub(crate) fn path_matches(pattern: &str, path: &str) -> bool {
    let (pattern, prefix) = match pattern.strip_suffix('*') {
        Some(stem) => (stem, true),
        None => (pattern, false),
    };
    if !pattern.contains('+') {
        return if prefix {
            path.starts_with(pattern)
        } else {
            path == pattern
        };
    }
    let pattern_parts: Vec<&str> = pattern.split('/').collect();
    let path_parts: Vec<&str> = path.split('/').collect();
    if path_parts.len() < pattern_parts.len()
        || (!prefix && path_parts.len() != pattern_parts.len())
    {
        return false;
    }
    let last = pattern_parts.len() - 1;
    for (i, (want, got)) in pattern_parts.iter().zip(&path_parts).enumerate() {
        if *want == "+" {
            if got.is_empty() {
                return false;
            }
            continue;
        }
        let ok = if prefix && i == last {
            got.starts_with(want)
        } else {
            want == got
        };
        if !ok {
            return false;
        }
    }
    true
}

fn injects_top_level(path: &str) -> bool {
    // Every route is under `sys/` (a test checks): any other path is answered at once.
    if !path.starts_with("sys/") {
        return false;
    }
    let path = path.trim_end_matches('/');
    TOP_LEVEL_DATA_ROUTES
        .iter()
        .any(|route| match route.strip_suffix('*') {
            Some(stem) => path.starts_with(stem),
            None => path
                .strip_prefix(route)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/')),
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn top_level_data_routes_are_all_under_sys() {
        assert!(
            TOP_LEVEL_DATA_ROUTES
                .iter()
                .all(|route| route.starts_with("sys/"))
        );
        assert!(injects_top_level("sys/mounts/"));
        assert!(injects_top_level("sys/capabilities-self"));
        assert!(!injects_top_level("secret/sys/mounts"));
    }

    #[test]
    fn special_paths_match_like_vault() {
        assert!(path_matches("login/*", "login/alice"));
        assert!(!path_matches("login/*", "users/alice"));
        assert!(path_matches("rotate*", "rotate"));
        assert!(path_matches("rotate*", "rotate/config"));
        assert!(path_matches("remount", "remount"));
        assert!(!path_matches("remount", "remount/status/x"));
        assert!(path_matches("auth/*", "auth/userpass"));
        assert!(!path_matches("auth/*", "auth"));
        assert!(path_matches("roles/+/creds", "roles/a/creds"));
        assert!(!path_matches("roles/+/creds", "roles/a/b/creds"));
        assert!(path_matches("roles/+/c*", "roles/a/creds/x"));
    }

    #[test]
    fn top_level_injection_covers_vaults_routes_only() {
        assert!(injects_top_level("sys/mounts"));
        assert!(injects_top_level("sys/mounts/secret/tune"));
        assert!(injects_top_level("sys/policy/"));
        assert!(injects_top_level("sys/capabilities-self"));
        assert!(!injects_top_level("sys/policies/acl/x"));
        assert!(!injects_top_level("secret/foo"));
    }

    fn answer(data: Value, warnings: &[&str]) -> secrets_sdk::Response {
        secrets_sdk::Response {
            data: data.as_object().cloned(),
            warnings: warnings.iter().map(|w| (*w).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_hand_written_envelope_is_the_serialised_one() {
        let auth = json!({"client_token": "hvs.x", "policies": ["a", "b"], "lease_duration": 60});
        let data = json!({"value": "v\"1\"\n", "n": 2.5, "nested": {"k": [true, null]}});
        let warnings = vec!["first".to_owned(), "sécond \\ one".to_owned()];
        for (auth, data, warnings, renewable) in [
            (&Value::Null, &Value::Null, None, false),
            (&auth, &data, Some(warnings.as_slice()), true),
            (&Value::Null, &data, Some(&[][..]), false),
        ] {
            let envelope = Envelope {
                auth,
                data,
                lease_duration: 3600,
                lease_id: "database/creds/ro/abc",
                renewable,
                request_id: "0b8e1f7c-9a27-4e3e-8a46-6f1f0d8c9b10",
                warnings,
                wrap_info: (),
            };
            assert_eq!(
                String::from_utf8(envelope.to_bytes(None)).unwrap(),
                serde_json::to_string(&envelope).unwrap()
            );
            // The same data as stored text (what the kv engine answers) writes the same bytes.
            if let Value::Object(map) = data {
                let text = DataText::new(serde_json::to_vec(map).unwrap()).unwrap();
                let plain = Envelope {
                    data: &Value::Null,
                    ..envelope
                };
                assert_eq!(
                    String::from_utf8(plain.to_bytes(Some(&text))).unwrap(),
                    serde_json::to_string(&envelope).unwrap()
                );
            }
        }
    }

    #[test]
    fn list_404_rules_follow_vault() {
        assert!(list_is_empty(&answer(Value::Null, &[])));
        assert!(list_is_empty(&answer(serde_json::json!({}), &[])));
        assert!(list_is_empty(&answer(serde_json::json!({"keys": []}), &[])));
        assert!(list_is_empty(&answer(
            serde_json::json!({"keys": []}),
            &["w"]
        )));
        assert!(!list_is_empty(&answer(
            serde_json::json!({"keys": ["a"]}),
            &[]
        )));
        assert!(!list_is_empty(&answer(
            serde_json::json!({"other": 1}),
            &[]
        )));
        assert!(!list_is_empty(&answer(Value::Null, &["w"])));
    }
}
