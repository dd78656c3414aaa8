//! `/v1/acl/*`: bootstrap, policies and tokens, in Nomad's shapes and with its statuses.
//!
//! Where it sits: routed from `routes.rs`; reads and writes go straight to storage through
//! `store.rs`; rules are validated by `policy.rs`.
//!
//! Behaviour (upstream's `command/agent/acl_endpoint.go` and `nomad/acl_endpoint.go`):
//! - With ACLs disabled every endpoint answers 400 `ACL support disabled`, except
//!   `token/self`, which shows upstream's "ACLs disabled" pseudo-token.
//! - Writes, token reads of other tokens and token lists need a management token. A client
//!   token may read itself (by accessor or `token/self`), read the policies it holds (and the
//!   `anonymous` policy), and lists only those policies.
//! - Bootstrap works once (`ACL bootstrap already done (reset index: N)` after), ignores the
//!   caller's token, and is already done when `cairn dev` has a root token. There is no reset
//!   file: the reset index is reported but cannot be used.
//! - Reads of one object block on it (`?index=&wait=`) and report its ModifyIndex; lists block
//!   on their table and report its index.
//! - Policy and token writes answer with `X-Scheduler-Index`; policy writes and deletes have
//!   an empty body, token writes the token.
//!
//! Invariants: nothing is written unless the request is valid in full; a client token never
//! sees another token's secret.

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use stdx::duration::format_go;
use stdx::time::parse_rfc3339;
use storage::KeyRange;

use super::body::{Fields, decode, decode_optional, null_as_default};
use super::store::{
    self, Bootstrap, PolicyRecord, StoredToken, TOKEN_TYPE_CLIENT, TOKEN_TYPE_MANAGEMENT,
    TokenRecord, TokenView,
};
use super::{Authz, Identity, policy};
use crate::error::multierror;
use crate::meta::{Indexed, QueryParams, index_headers};
use crate::{Error, now_nanos};

type RawBody = http_kit::RawBody<Error>;

/// Tokens may live at most this long (upstream's `ACLTokenMaxExpirationTTL` default).
const MAX_TOKEN_TTL: i64 = 24 * 3600 * 1_000_000_000;
/// ... and at least this long (`ACLTokenMinExpirationTTL`).
const MIN_TOKEN_TTL: i64 = 60 * 1_000_000_000;
/// Upstream's limits on names and descriptions.
const MAX_TOKEN_NAME: usize = 256;
const MAX_POLICY_DESCRIPTION: usize = 256;

/// Answers 400 `ACL support disabled` when ACLs are off.
fn ensure_enabled(state: &crate::State) -> Result<(), Error> {
    if state.config().acl_enabled {
        Ok(())
    } else {
        Err(Error::BadRequest("ACL support disabled".to_owned()))
    }
}

fn path_param(path: Result<Path<String>, PathRejection>) -> Result<String, Error> {
    path.map(|Path(value)| value)
        .map_err(|err| Error::BadRequest(format!("invalid path parameter: {err}")))
}

/// A 200 with an empty body and the index headers (upstream's nil-body writes).
fn empty_written(index: u64) -> Response {
    let mut response = Body::empty().into_response();
    index_headers(response.headers_mut(), index);
    response
}

fn is_uuid(value: &str) -> bool {
    value.len() == 36 && uuid::Uuid::parse_str(value).is_ok()
}

/// Stores the dev root token's record if ACLs are on and one is configured.
async fn ensure_root(state: &crate::State) -> Result<Option<StoredToken>, Error> {
    match &state.config().dev_root_token {
        Some(root) if state.config().acl_enabled => {
            store::ensure_root(state.storage().as_ref(), root, now_nanos())
                .await
                .map(Some)
        }
        _ => Ok(None),
    }
}

async fn blocking<T, F, Fut>(
    state: &crate::State,
    query: &QueryParams,
    range: KeyRange,
    run: F,
) -> Result<Indexed<T>, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(T, u64), Error>>,
{
    let params = query.blocking()?;
    let (body, index) = http_kit::blocking::block(
        state.storage().as_ref(),
        range,
        &params,
        Some(state.shutdown_token()),
        run,
    )
    .await?;
    Ok(Indexed::new(index, body))
}

// ---- bootstrap ----

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct BootstrapRequest {
    #[serde(deserialize_with = "null_as_default")]
    bootstrap_secret: String,
}

const BOOTSTRAP_FIELDS: Fields = Fields::flat(&["BootstrapSecret"]);

/// `POST|PUT /v1/acl/bootstrap`: the first management token, once.
pub(crate) async fn bootstrap(
    State(state): State<crate::State>,
    body: RawBody,
) -> Result<Response, Error> {
    ensure_enabled(&state)?;
    let request: BootstrapRequest = decode_optional(&body.bytes, BOOTSTRAP_FIELDS)
        .map_err(|err| Error::BadRequest(format!("failed to decode request body: {err}")))?;
    let secret = if request.bootstrap_secret.is_empty() {
        uuid::Uuid::new_v4().to_string()
    } else if is_uuid(&request.bootstrap_secret) {
        request.bootstrap_secret
    } else {
        return Err(Error::BadRequest("invalid acl token".to_owned()));
    };
    // With a dev root token, bootstrap happened when the root token was stored.
    ensure_root(&state).await?;
    let record = TokenRecord {
        accessor_id: uuid::Uuid::new_v4().to_string(),
        secret_id: secret,
        name: "Bootstrap Token".to_owned(),
        token_type: TOKEN_TYPE_MANAGEMENT.to_owned(),
        policies: Vec::new(),
        global: true,
        create_time: now_nanos(),
        expiration_time: None,
        expiration_ttl: 0,
        dev_root: false,
    };
    match store::bootstrap(state.storage().as_ref(), &record).await? {
        Bootstrap::Done(token) => {
            Ok(Indexed::new(token.modify_index, token.view()).into_response())
        }
        Bootstrap::AlreadyDone(reset) => Err(Error::BadRequest(format!(
            "ACL bootstrap already done (reset index: {reset})"
        ))),
        Bootstrap::SecretTaken => Err(Error::BadRequest("invalid acl token".to_owned())),
    }
}

// ---- policies ----

/// A policy in a list.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct PolicyStub {
    name: String,
    description: String,
    #[serde(rename = "JobACL")]
    job_acl: Option<()>,
    create_index: u64,
    modify_index: u64,
}

/// A policy read: the stored fields plus the parsed rules.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct PolicyView {
    name: String,
    description: String,
    rules: String,
    #[serde(rename = "RulesJSON")]
    rules_json: Option<policy::PolicyRules>,
    #[serde(rename = "JobACL")]
    job_acl: Option<()>,
    create_index: u64,
    modify_index: u64,
}

impl Authz {
    /// Whether this token may read policy `name` (management, or a policy it holds).
    fn may_read_policy(&self, name: &str) -> bool {
        match &self.identity {
            Identity::Disabled | Identity::Root => true,
            Identity::Anonymous => name == super::ANONYMOUS_POLICY,
            Identity::Token(token) => {
                token.record.is_management()
                    || token.record.policies.iter().any(|held| held == name)
            }
        }
    }
}

/// `GET /v1/acl/policies` (`?prefix=`): every policy for management tokens, the policies it
/// holds for a client token.
pub(crate) async fn list_policies(
    State(state): State<crate::State>,
    authz: Authz,
    query: QueryParams,
) -> Result<Indexed<Vec<PolicyStub>>, Error> {
    ensure_enabled(&state)?;
    let prefix = query.get("prefix").unwrap_or("").to_owned();
    let storage = state.storage().clone();
    blocking(&state, &query, KeyRange::prefix(store::POLICIES), || {
        let (storage, authz, prefix) = (storage.clone(), authz.clone(), prefix.clone());
        async move {
            let (policies, index) = store::policies(storage.as_ref()).await?;
            let stubs = policies
                .into_iter()
                .filter(|policy| policy.record.name.starts_with(&prefix))
                .filter(|policy| authz.may_read_policy(&policy.record.name))
                .map(|policy| PolicyStub {
                    name: policy.record.name,
                    description: policy.record.description,
                    job_acl: None,
                    create_index: policy.create_index,
                    modify_index: policy.modify_index,
                })
                .collect();
            Ok((stubs, index))
        }
    })
    .await
}

/// `GET /v1/acl/policy/{name}`.
pub(crate) async fn read_policy(
    State(state): State<crate::State>,
    authz: Authz,
    path: Result<Path<String>, PathRejection>,
    query: QueryParams,
) -> Result<Indexed<PolicyView>, Error> {
    ensure_enabled(&state)?;
    let name = path_param(path)?;
    if name != super::ANONYMOUS_POLICY && !authz.may_read_policy(&name) {
        return Err(Error::PermissionDenied);
    }
    let storage = state.storage().clone();
    let answer = blocking(&state, &query, KeyRange::prefix(store::POLICIES), || {
        let (storage, name) = (storage.clone(), name.clone());
        async move {
            match store::policy(storage.as_ref(), &name).await? {
                Some(policy) => {
                    let index = policy.modify_index;
                    Ok((Some(policy), index))
                }
                None => Ok((None, store::policies_index(storage.as_ref()).await?)),
            }
        }
    })
    .await?;
    let policy = answer
        .body
        .ok_or_else(|| Error::NotFound("ACL policy not found".to_owned()))?;
    let rules_json = policy::parse(&policy.record.rules).ok();
    Ok(Indexed::new(
        answer.index,
        PolicyView {
            name: policy.record.name,
            description: policy.record.description,
            rules: policy.record.rules,
            rules_json,
            job_acl: None,
            create_index: policy.create_index,
            modify_index: policy.modify_index,
        },
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct PolicyRequest {
    #[serde(deserialize_with = "null_as_default")]
    name: String,
    #[serde(deserialize_with = "null_as_default")]
    description: String,
    #[serde(deserialize_with = "null_as_default")]
    rules: String,
}

const POLICY_FIELDS: Fields = Fields::flat(&["Name", "Description", "Rules"]);

/// Upstream's `ValidPolicyName`: `^[a-zA-Z0-9-]{1,128}$`.
fn is_valid_policy_name(name: &str) -> bool {
    (1..=128).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Upstream's `ACLPolicy.Validate`, as the list of problems.
fn validate_policy(policy: &PolicyRecord) -> Vec<String> {
    let mut errors = Vec::new();
    if !is_valid_policy_name(&policy.name) {
        errors.push(format!("invalid name '{}'", policy.name));
    }
    if let Err(err) = policy::parse(&policy.rules) {
        errors.push(format!("failed to parse rules: {err}"));
    }
    if policy.description.len() > MAX_POLICY_DESCRIPTION {
        errors.push(format!("description longer than {MAX_POLICY_DESCRIPTION}"));
    }
    errors
}

/// `POST|PUT /v1/acl/policy/{name}`: creates or replaces a policy.
pub(crate) async fn write_policy(
    State(state): State<crate::State>,
    authz: Authz,
    path: Result<Path<String>, PathRejection>,
    body: RawBody,
) -> Result<Response, Error> {
    ensure_enabled(&state)?;
    let name = path_param(path)?;
    let request: PolicyRequest = decode(&body.bytes, POLICY_FIELDS)?;
    if request.name != name {
        return Err(Error::BadRequest(
            "ACL policy name does not match request path".to_owned(),
        ));
    }
    authz.require_management()?;
    let record = PolicyRecord {
        name: request.name,
        description: request.description,
        rules: request.rules,
    };
    let errors = validate_policy(&record);
    if !errors.is_empty() {
        return Err(Error::BadRequest(format!(
            "policy 0 invalid: {}",
            multierror(&errors)
        )));
    }
    let index = store::put_policy(state.storage().as_ref(), &record).await?;
    Ok(empty_written(index))
}

/// `DELETE /v1/acl/policy/{name}` (deleting a missing policy succeeds, as upstream).
pub(crate) async fn delete_policy(
    State(state): State<crate::State>,
    authz: Authz,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, Error> {
    ensure_enabled(&state)?;
    let name = path_param(path)?;
    authz.require_management()?;
    let index = store::delete_policy(state.storage().as_ref(), &name).await?;
    Ok(empty_written(index))
}

// ---- tokens ----

/// `GET /v1/acl/tokens` (`?prefix=` on the accessor, `?global=true`): stubs without secrets,
/// oldest first (by accessor with a prefix, as upstream).
pub(crate) async fn list_tokens(
    State(state): State<crate::State>,
    authz: Authz,
    query: QueryParams,
) -> Result<Indexed<Vec<TokenView>>, Error> {
    ensure_enabled(&state)?;
    authz.require_management()?;
    ensure_root(&state).await?;
    let prefix = query.get("prefix").unwrap_or("").to_owned();
    let global_only = query.bool("global")?.unwrap_or(false);
    let storage = state.storage().clone();
    blocking(&state, &query, KeyRange::prefix(store::TOKENS), || {
        let (storage, prefix) = (storage.clone(), prefix.clone());
        async move {
            let (mut tokens, index) = store::tokens(storage.as_ref()).await?;
            tokens.retain(|token| {
                token.record.accessor_id.starts_with(&prefix)
                    && (!global_only || token.record.global)
            });
            if prefix.is_empty() {
                tokens.sort_by(|a, b| {
                    (a.create_index, &a.record.accessor_id)
                        .cmp(&(b.create_index, &b.record.accessor_id))
                });
            }
            Ok((tokens.iter().map(StoredToken::stub).collect(), index))
        }
    })
    .await
}

/// `GET /v1/acl/token/self`: the caller's own token.
pub(crate) async fn read_self_token(
    State(state): State<crate::State>,
    authz: Authz,
) -> Result<Response, Error> {
    let token = match &authz.identity {
        Identity::Disabled => {
            return Ok(
                http_kit::Json(pseudo_token("acls-disabled", "ACLs disabled token", &[]))
                    .into_response(),
            );
        }
        Identity::Anonymous => {
            return Ok(http_kit::Json(pseudo_token(
                "anonymous",
                "Anonymous Token",
                &[super::ANONYMOUS_POLICY],
            ))
            .into_response());
        }
        Identity::Root => ensure_root(&state)
            .await?
            .ok_or_else(|| Error::NotFound("ACL token not found".to_owned()))?,
        Identity::Token(token) => StoredToken::clone(token),
    };
    Ok(Indexed::new(token.modify_index, token.view()).into_response())
}

/// Upstream's built-in tokens that are never stored (anonymous, ACLs disabled).
fn pseudo_token(accessor: &str, name: &str, policies: &[&str]) -> TokenView {
    TokenView {
        accessor_id: accessor.to_owned(),
        secret_id: Some(String::new()),
        name: name.to_owned(),
        token_type: TOKEN_TYPE_CLIENT.to_owned(),
        policies: (!policies.is_empty())
            .then(|| policies.iter().map(|p| (*p).to_owned()).collect()),
        roles: None,
        global: false,
        create_time: "0001-01-01T00:00:00Z".to_owned(),
        expiration_time: None,
        expiration_ttl: Some(String::new()),
        create_index: 0,
        modify_index: 0,
    }
}

/// `GET /v1/acl/token/{accessor}`: management tokens read any token, others only themselves.
pub(crate) async fn read_token(
    State(state): State<crate::State>,
    authz: Authz,
    path: Result<Path<String>, PathRejection>,
    query: QueryParams,
) -> Result<Indexed<TokenView>, Error> {
    ensure_enabled(&state)?;
    let accessor = path_param(path)?;
    if !authz.is_management() && authz.accessor_id() != Some(accessor.as_str()) {
        return Err(Error::PermissionDenied);
    }
    ensure_root(&state).await?;
    let storage = state.storage().clone();
    let answer = blocking(&state, &query, KeyRange::prefix(store::TOKENS), || {
        let (storage, accessor) = (storage.clone(), accessor.clone());
        async move {
            match store::token(storage.as_ref(), &accessor).await? {
                Some(token) => {
                    let index = token.modify_index;
                    Ok((Some(token), index))
                }
                None => Ok((None, store::tokens_index(storage.as_ref()).await?)),
            }
        }
    })
    .await?;
    let token = answer
        .body
        .ok_or_else(|| Error::NotFound("ACL token not found".to_owned()))?;
    Ok(Indexed::new(answer.index, token.view()))
}

/// A token create or update body (upstream's `ACLToken`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct TokenRequest {
    #[serde(rename = "AccessorID", deserialize_with = "null_as_default")]
    accessor_id: String,
    #[serde(rename = "SecretID", deserialize_with = "null_as_default")]
    secret_id: String,
    #[serde(deserialize_with = "null_as_default")]
    name: String,
    #[serde(rename = "Type", deserialize_with = "null_as_default")]
    token_type: String,
    #[serde(deserialize_with = "null_as_default")]
    policies: Vec<String>,
    #[serde(deserialize_with = "null_as_default")]
    roles: Vec<RoleLink>,
    #[serde(deserialize_with = "null_as_default")]
    global: bool,
    expiration_time: Option<String>,
    #[serde(rename = "ExpirationTTL")]
    expiration_ttl: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct RoleLink {
    #[serde(rename = "ID", deserialize_with = "null_as_default")]
    id: String,
    #[serde(deserialize_with = "null_as_default")]
    name: String,
}

const TOKEN_FIELDS: Fields = Fields {
    names: &[
        "AccessorID",
        "SecretID",
        "Name",
        "Type",
        "Policies",
        "Roles",
        "Global",
        "ExpirationTime",
        "ExpirationTTL",
    ],
    nested: &[],
};

/// `ExpirationTTL` as upstream decodes it: a Go duration string or a number of nanoseconds.
fn parse_ttl(value: Option<&serde_json::Value>) -> Result<i64, Error> {
    let invalid = |detail: String| {
        Error::BadRequest(format!("Request body is invalid: ExpirationTTL: {detail}"))
    };
    match value {
        None | Some(serde_json::Value::Null) => Ok(0),
        Some(serde_json::Value::String(text)) if text.is_empty() => Ok(0),
        Some(serde_json::Value::String(text)) => {
            let (negative, magnitude) = match text.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, text.as_str()),
            };
            let duration =
                stdx::duration::parse_go(magnitude).map_err(|err| invalid(err.to_string()))?;
            let nanos = i64::try_from(duration.as_nanos())
                .map_err(|_| invalid(format!("{text:?} is too long")))?;
            Ok(if negative { -nanos } else { nanos })
        }
        Some(serde_json::Value::Number(number)) => number
            .as_i64()
            .or_else(|| {
                number
                    .as_f64()
                    .filter(|f| f.is_finite() && f.abs() < 9.2e18)
                    .map(|f| f as i64)
            })
            .ok_or_else(|| invalid(format!("{number} is out of range"))),
        Some(other) => Err(invalid(format!("expected a duration, found {other}"))),
    }
}

/// `POST|PUT /v1/acl/token`: creates a token (or uploads one with given IDs).
pub(crate) async fn create_token(
    State(state): State<crate::State>,
    authz: Authz,
    body: RawBody,
) -> Result<Indexed<TokenView>, Error> {
    ensure_enabled(&state)?;
    let request: TokenRequest = decode(&body.bytes, TOKEN_FIELDS)?;
    authz.require_management()?;
    // Stored first, so an uploaded token can never take the root token's secret.
    ensure_root(&state).await?;
    upsert_token(&state, request).await
}

/// `POST|PUT /v1/acl/token/{accessor}`: updates a token (the body's AccessorID must match).
pub(crate) async fn update_token(
    State(state): State<crate::State>,
    authz: Authz,
    path: Result<Path<String>, PathRejection>,
    body: RawBody,
) -> Result<Indexed<TokenView>, Error> {
    ensure_enabled(&state)?;
    let accessor = path_param(path)?;
    let request: TokenRequest = decode(&body.bytes, TOKEN_FIELDS)?;
    if request.accessor_id != accessor {
        return Err(Error::BadRequest(
            "ACL token accessor does not match request path".to_owned(),
        ));
    }
    authz.require_management()?;
    ensure_root(&state).await?;
    upsert_token(&state, request).await
}

/// Upstream's `upsertTokens` for one token: canonicalize, validate, write.
async fn upsert_token(
    state: &crate::State,
    request: TokenRequest,
) -> Result<Indexed<TokenView>, Error> {
    let storage = state.storage().as_ref();
    let existing = if request.accessor_id.is_empty() {
        None
    } else {
        let found = store::token(storage, &request.accessor_id).await?;
        if found.is_none()
            && (!is_uuid(&request.accessor_id)
                || !is_uuid(&request.secret_id)
                || request.token_type == TOKEN_TYPE_MANAGEMENT)
        {
            return Err(Error::BadRequest(format!(
                "cannot find token {}",
                request.accessor_id
            )));
        }
        found
    };
    let invalid =
        |errors: &[String]| Error::BadRequest(format!("token 0 invalid: {}", multierror(errors)));
    let ttl = parse_ttl(request.expiration_ttl.as_ref())?;
    let expiration_time = match request.expiration_time.as_deref() {
        None | Some("") | Some("0001-01-01T00:00:00Z") => None,
        Some(text) => Some(parse_rfc3339(text).map_err(|err| invalid(&[err.to_string()]))?),
    };
    let mut errors = Vec::new();
    if request.name.len() > MAX_TOKEN_NAME {
        errors.push("token name too long".to_owned());
    }
    match request.token_type.as_str() {
        TOKEN_TYPE_CLIENT => {
            if request.policies.is_empty() && request.roles.is_empty() {
                errors.push("client token missing policies or roles".to_owned());
            }
        }
        TOKEN_TYPE_MANAGEMENT => {
            if !request.policies.is_empty() || !request.roles.is_empty() {
                errors.push(
                    "management token cannot be associated with policies or roles".to_owned(),
                );
            }
        }
        _ => errors.push("token type must be client or management".to_owned()),
    }
    let record = match &existing {
        // Creation (or upload of given IDs).
        None => {
            let create_time = now_nanos();
            let expiration_time =
                expiration_time.or_else(|| (ttl != 0).then(|| create_time.saturating_add(ttl)));
            if ttl < 0 {
                errors.push(format!(
                    "token expiration TTL '{}' should not be negative",
                    format_go(ttl)
                ));
            }
            if let Some(expires) = expiration_time {
                let expires_in = expires.saturating_sub(create_time);
                if expires < create_time {
                    errors.push("expiration time cannot be before create time".to_owned());
                }
                if expires_in > MAX_TOKEN_TTL {
                    errors.push(format!(
                        "expiration time cannot be more than {} in the future (was {})",
                        format_go(MAX_TOKEN_TTL),
                        format_go(expires_in)
                    ));
                } else if expires_in < MIN_TOKEN_TTL {
                    errors.push(format!(
                        "expiration time cannot be less than {} in the future (was {})",
                        format_go(MIN_TOKEN_TTL),
                        format_go(expires_in)
                    ));
                }
            }
            let (accessor_id, secret_id) = if request.accessor_id.is_empty() {
                (
                    uuid::Uuid::new_v4().to_string(),
                    uuid::Uuid::new_v4().to_string(),
                )
            } else {
                (request.accessor_id, request.secret_id)
            };
            TokenRecord {
                accessor_id,
                secret_id,
                name: request.name,
                token_type: request.token_type,
                policies: request.policies,
                global: request.global,
                create_time,
                expiration_time,
                expiration_ttl: ttl,
                dev_root: false,
            }
        }
        // Update: the secret, creation time and expiry stay.
        Some(existing) => {
            let old = &existing.record;
            if old.global != request.global {
                errors.push("cannot toggle global mode".to_owned());
            }
            if old.expiration_ttl != ttl && request.expiration_ttl.is_some() {
                errors.push("cannot update expiration TTL".to_owned());
            }
            if expiration_time.is_some() && expiration_time != old.expiration_time {
                errors.push("cannot update expiration time".to_owned());
            }
            if old.dev_root && request.token_type != TOKEN_TYPE_MANAGEMENT {
                errors.push("the dev root token must stay a management token".to_owned());
            }
            TokenRecord {
                accessor_id: old.accessor_id.clone(),
                secret_id: old.secret_id.clone(),
                name: request.name,
                token_type: request.token_type,
                policies: request.policies,
                global: old.global,
                create_time: old.create_time,
                expiration_time: old.expiration_time,
                expiration_ttl: old.expiration_ttl,
                dev_root: old.dev_root,
            }
        }
    };
    if !errors.is_empty() {
        return Err(invalid(&errors));
    }
    // Roles do not exist in cairn, so any role link names a missing role (upstream's answer).
    if let Some(role) = request.roles.first() {
        let identifier = if role.id.is_empty() {
            &role.name
        } else {
            &role.id
        };
        return Err(Error::BadRequest(format!("cannot find role {identifier}")));
    }
    let stored = match &existing {
        None => store::create_token(storage, &record)
            .await?
            .ok_or_else(|| {
                Error::BadRequest(format!(
                    "token {} or its secret already exists",
                    record.accessor_id
                ))
            })?,
        Some(existing) => store::update_token(storage, existing, &record)
            .await?
            .ok_or_else(|| {
                Error::Conflict(format!(
                    "token {} was modified concurrently; retry",
                    record.accessor_id
                ))
            })?,
    };
    Ok(Indexed::new(stored.modify_index, stored.view()))
}

/// `DELETE /v1/acl/token/{accessor}`.
pub(crate) async fn delete_token(
    State(state): State<crate::State>,
    authz: Authz,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, Error> {
    ensure_enabled(&state)?;
    let accessor = path_param(path)?;
    authz.require_management()?;
    ensure_root(&state).await?;
    let token = store::token(state.storage().as_ref(), &accessor)
        .await?
        .ok_or_else(|| {
            Error::BadRequest(format!("Cannot delete nonexistent tokens: {accessor}"))
        })?;
    if token.record.dev_root {
        return Err(Error::BadRequest(
            "the dev root token cannot be deleted (it is configured, not created)".to_owned(),
        ));
    }
    let index = store::delete_token(state.storage().as_ref(), &token).await?;
    Ok(empty_written(index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiration_times_parse_like_go_and_name_the_input_when_invalid() {
        for nanos in [0, 951_782_400_123_000_000, 1_700_000_000_000_000_001] {
            let text = stdx::time::format_rfc3339_nanos(nanos);
            assert_eq!(parse_rfc3339(&text), Ok(nanos));
        }
        assert_eq!(
            parse_rfc3339("2023-11-14T23:13:20+01:00"),
            Ok(1_700_000_000_000_000_000)
        );
        for input in [
            "",
            "2023",
            "2023-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2023-01-01T00:00:00",
            "2023-01-01T00:00:00.Z",
            "2023-01-01T00:00:00+0100",
            "２０２３-01-01T00:00:00Z",
            "9999999999-01-01T00:00:00Z",
        ] {
            let err = parse_rfc3339(input).expect_err(input);
            assert_eq!(
                err.to_string(),
                format!("parsing time {input:?} as RFC 3339: invalid timestamp")
            );
        }
    }

    #[test]
    fn ttl_accepts_go_durations_and_nanoseconds() {
        let ttl = |value: serde_json::Value| parse_ttl(Some(&value)).ok();
        assert_eq!(ttl(serde_json::json!("1h")), Some(3_600_000_000_000));
        assert_eq!(ttl(serde_json::json!("-1m")), Some(-60_000_000_000));
        assert_eq!(
            ttl(serde_json::json!(5_000_000_000u64)),
            Some(5_000_000_000)
        );
        assert_eq!(ttl(serde_json::json!("")), Some(0));
        assert_eq!(parse_ttl(None).ok(), Some(0));
        assert!(parse_ttl(Some(&serde_json::json!("soon"))).is_err());
        assert!(parse_ttl(Some(&serde_json::json!(true))).is_err());
        assert!(parse_ttl(Some(&serde_json::json!(1e300))).is_err());
    }

    #[test]
    fn policy_names_follow_upstream_pattern() {
        assert!(is_valid_policy_name("read-only-1"));
        assert!(!is_valid_policy_name(""));
        assert!(!is_valid_policy_name("a_b"));
        assert!(!is_valid_policy_name(&"a".repeat(129)));
    }
}
