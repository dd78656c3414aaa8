//! API tokens: user tokens (`GET/POST /api/v2/users/:id/authentication-tokens`,
//! `GET/DELETE /api/v2/authentication-tokens/:id`), the team token
//! (`GET/POST/DELETE /api/v2/teams/:id/authentication-token`) and the organization token
//! (`GET/POST/DELETE /api/v2/organizations/:name/authentication-token`).
//!
//! Where it sits: handlers called from `routes.rs`; records in `store/tokens.rs`; `auth.rs`
//! resolves the secrets these issue.
//!
//! Invariants:
//! - The secret appears once, in the `token` attribute of the 201 create response; every other
//!   representation has `token: null`.
//! - User tokens are managed by their user only (site administrators too); a team token by
//!   whoever manages teams, or by the team's members when `allow-member-token-management`;
//!   the organization token by owners only (TFE: "owners only can create or revoke").
//! - Issuing a team or organization token replaces the previous one (the old secret stops
//!   working in the same transaction).
//! - `expired-at`, when given, is an ISO 8601 time in the future (422 otherwise); an expired
//!   token is a 401.

use axum::extract::{Path, State as AxumState};
use axum::response::Response;
use jsonapi::Document;
use storage::{Compare, Txn};

use crate::auth::{Caller, OrgAccess};
use crate::render::{JsonApi, no_content, paged};
use crate::request::{Body, OptionalBody, Query};
use crate::store::organizations::organization_key;
use crate::store::teams::{TeamRecord, load_team, team_key};
use crate::store::tokens::{
    TokenOwner, TokenRecord, load_indexed_token, load_token, load_user_tokens,
    organization_token_key, remove_token_ops, save_token_ops, team_token_key,
};
use crate::store::users::load_user;
use crate::store::{RECORD_VERSION, commit};
use crate::views::tokens::token_resource;
use crate::{Error, State, ids};

/// The type names clients send for token create bodies (pytfe sends the singular).
const TOKEN_TYPES: &[&str] = &["authentication-tokens", "authentication-token"];

/// A new token record for `owner` from the create body (description, expired-at).
fn new_token(
    body: Option<&Body>,
    owner: TokenOwner,
    caller: &Caller,
    secret: &str,
    now_ms: u64,
) -> Result<TokenRecord, Error> {
    // `{}` (no `data`) is as good as no body: pytfe and go-tfe send either.
    let (description, expired_at_ms) = match body.filter(|body| body.has_data()) {
        None => (None, None),
        Some(body) => {
            body.expect_type(TOKEN_TYPES)?;
            let expired_at_ms = match body.string("expired-at")? {
                None => None,
                Some(raw) => {
                    let at = ids::parse_time(&raw).ok_or_else(|| {
                        Error::invalid_attribute(
                            "expired-at",
                            "expired-at must be an ISO 8601 UTC time",
                        )
                    })?;
                    if at <= now_ms {
                        return Err(Error::invalid_attribute(
                            "expired-at",
                            "expired-at must be in the future",
                        ));
                    }
                    Some(at)
                }
            };
            (body.string("description")?, expired_at_ms)
        }
    };
    Ok(TokenRecord {
        version: RECORD_VERSION,
        id: ids::new_id("at"),
        hash: ids::hash_secret(secret),
        owner,
        description,
        created_at_ms: now_ms,
        expired_at_ms,
        created_by: caller.user().map(|user| user.id.clone()),
    })
}

/// 404 unless the caller is user `user_id` (or a site administrator).
fn check_self(caller: &Caller, user_id: &str) -> Result<(), Error> {
    let allowed = caller
        .user()
        .is_some_and(|user| user.id == user_id || user.is_admin);
    OrgAccess::check(allowed)
}

/// `GET /api/v2/users/:id/authentication-tokens`: the user's tokens, paged.
pub(crate) async fn list_user_tokens(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(user_id): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    check_self(&caller, &user_id)?;
    let page = query.page(jsonapi::DEFAULT_PAGE_SIZE)?;
    let tokens = load_user_tokens(state.storage(), &user_id).await?;
    let path = format!("/api/v2/users/{user_id}/authentication-tokens");
    Ok(JsonApi::ok(paged(&tokens, page, &path, &query, |token| {
        token_resource(token, None)
    })))
}

/// `POST /api/v2/users/:id/authentication-tokens`: 201 with the secret in `token`.
pub(crate) async fn create_user_token(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(user_id): Path<String>,
    body: Body,
) -> Result<JsonApi, Error> {
    check_self(&caller, &user_id)?;
    load_user(state.storage(), &user_id)
        .await?
        .ok_or(Error::NotFound)?;
    let secret = ids::new_token_secret();
    let token = new_token(
        Some(&body),
        TokenOwner::User {
            user_id: user_id.clone(),
        },
        &caller,
        &secret,
        state.now_ms(),
    )?;
    let mut txn = Txn::new().when(Compare::Exists(crate::store::users::user_key(&user_id)));
    txn.success.extend(save_token_ops(&token)?);
    if !commit(state.storage(), txn).await? {
        return Err(Error::NotFound);
    }
    Ok(JsonApi::created(Document::one(token_resource(
        &token,
        Some(&secret),
    ))))
}

/// The user token `id` the caller may manage.
async fn load_own_token(state: &State, caller: &Caller, id: &str) -> Result<TokenRecord, Error> {
    let token = load_token(state.storage(), id)
        .await?
        .ok_or(Error::NotFound)?
        .record;
    let TokenOwner::User { user_id } = &token.owner else {
        return Err(Error::NotFound);
    };
    check_self(caller, user_id)?;
    Ok(token)
}

/// `GET /api/v2/authentication-tokens/:id`: a user token of the caller.
pub(crate) async fn read_user_token(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<JsonApi, Error> {
    let token = load_own_token(&state, &caller, &id).await?;
    Ok(JsonApi::ok(Document::one(token_resource(&token, None))))
}

/// `DELETE /api/v2/authentication-tokens/:id`: 204; the secret stops working at once.
pub(crate) async fn delete_user_token(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Error> {
    let token = load_own_token(&state, &caller, &id).await?;
    let mut txn = Txn::new();
    txn.success = remove_token_ops(&token);
    commit(state.storage(), txn).await?;
    Ok(no_content())
}

/// The team `id` and the caller's access, when the caller may manage its token.
async fn load_team_for_token(
    state: &State,
    caller: &Caller,
    id: &str,
) -> Result<(TeamRecord, OrgAccess), Error> {
    let team = load_team(state.storage(), id)
        .await?
        .ok_or(Error::NotFound)?
        .record;
    let access = caller.organization(state, &team.organization).await?;
    let member_managed = team.allow_member_token_management && access.team_ids.contains(&team.id);
    OrgAccess::check(access.can_manage_teams() || member_managed)?;
    Ok((team, access))
}

/// `GET /api/v2/teams/:id/authentication-token`: the team token's metadata, or 404.
pub(crate) async fn read_team_token(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<JsonApi, Error> {
    load_team_for_token(&state, &caller, &id).await?;
    let token = load_indexed_token(state.storage(), &team_token_key(&id))
        .await?
        .ok_or(Error::NotFound)?;
    Ok(JsonApi::ok(Document::one(token_resource(
        &token.record,
        None,
    ))))
}

/// `POST /api/v2/teams/:id/authentication-token`: 201; replaces the previous team token.
pub(crate) async fn create_team_token(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    OptionalBody(body): OptionalBody,
) -> Result<JsonApi, Error> {
    let (team, _) = load_team_for_token(&state, &caller, &id).await?;
    let secret = ids::new_token_secret();
    let owner = TokenOwner::Team {
        team_id: team.id.clone(),
        organization: team.organization.clone(),
    };
    let token = new_token(body.as_ref(), owner, &caller, &secret, state.now_ms())?;
    let mut txn = Txn::new().when(Compare::Exists(team_key(&team.id)));
    if let Some(old) = load_indexed_token(state.storage(), &team_token_key(&team.id)).await? {
        txn.success.extend(remove_token_ops(&old.record));
    }
    txn.success.extend(save_token_ops(&token)?);
    if !commit(state.storage(), txn).await? {
        return Err(Error::NotFound);
    }
    Ok(JsonApi::created(Document::one(token_resource(
        &token,
        Some(&secret),
    ))))
}

/// `DELETE /api/v2/teams/:id/authentication-token`: 204, or 404 when there is none.
pub(crate) async fn delete_team_token(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Error> {
    load_team_for_token(&state, &caller, &id).await?;
    let token = load_indexed_token(state.storage(), &team_token_key(&id))
        .await?
        .ok_or(Error::NotFound)?;
    let mut txn = Txn::new();
    txn.success = remove_token_ops(&token.record);
    commit(state.storage(), txn).await?;
    Ok(no_content())
}

/// `GET /api/v2/organizations/:name/authentication-token`: owners and the token itself.
pub(crate) async fn read_organization_token(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<JsonApi, Error> {
    let access = caller.organization(&state, &name).await?;
    OrgAccess::check(access.is_owner() || access.is_organization_token())?;
    let token = load_indexed_token(state.storage(), &organization_token_key(&name))
        .await?
        .ok_or(Error::NotFound)?;
    Ok(JsonApi::ok(Document::one(token_resource(
        &token.record,
        None,
    ))))
}

/// `POST /api/v2/organizations/:name/authentication-token`: owners only; 201; replaces the
/// previous organization token.
pub(crate) async fn create_organization_token(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(name): Path<String>,
    OptionalBody(body): OptionalBody,
) -> Result<JsonApi, Error> {
    let access = caller.organization(&state, &name).await?;
    OrgAccess::check(access.is_owner())?;
    let secret = ids::new_token_secret();
    let owner = TokenOwner::Organization {
        organization: name.clone(),
    };
    let token = new_token(body.as_ref(), owner, &caller, &secret, state.now_ms())?;
    let mut txn = Txn::new().when(Compare::ModRevision(
        organization_key(&name),
        access.revision,
    ));
    if let Some(old) = load_indexed_token(state.storage(), &organization_token_key(&name)).await? {
        txn.success.extend(remove_token_ops(&old.record));
    }
    txn.success.extend(save_token_ops(&token)?);
    if !commit(state.storage(), txn).await? {
        return Err(Error::Contention);
    }
    Ok(JsonApi::created(Document::one(token_resource(
        &token,
        Some(&secret),
    ))))
}

/// `DELETE /api/v2/organizations/:name/authentication-token`: owners only; 204, or 404.
pub(crate) async fn delete_organization_token(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Response, Error> {
    let access = caller.organization(&state, &name).await?;
    OrgAccess::check(access.is_owner())?;
    let token = load_indexed_token(state.storage(), &organization_token_key(&name))
        .await?
        .ok_or(Error::NotFound)?;
    let mut txn = Txn::new();
    txn.success = remove_token_ops(&token.record);
    commit(state.storage(), txn).await?;
    Ok(no_content())
}
