//! Users: `GET /api/v2/account/details` and `PATCH /api/v2/account/update` (the caller),
//! `GET /api/v2/users/:id`, and the `users` resource view every family includes.
//!
//! Where it sits: handlers called from `routes.rs`; [`user_resource`] is used by memberships
//! (`included`), teams (`include=users`) and tokens.
//!
//! Invariants: `username` is `null` for a user created by an invitation nobody accepted; the
//! representation is the same wherever a user appears (go-tfe compares them deeply); usernames
//! and emails are unique (case-insensitively) and a change to either rewrites the user's
//! memberships in the same transaction.

use axum::extract::{Path, State as AxumState};
use jsonapi::{Document, Relationship, Resource};
use serde_json::json;
use storage::{Compare, Op, Txn};

use crate::auth::Caller;
use crate::render::JsonApi;
use crate::request::Body;
use crate::store::users::{UserRecord, email_key, load_user, user_key, username_key};
use crate::store::{IdRef, MAX_ATTEMPTS, commit, put};
use crate::{Error, State};

/// Whether `name` may be a username: `[A-Za-z0-9_.-]`, 1 to 64 characters.
pub(crate) fn valid_username(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The `users` resource.
pub(crate) fn user_resource(user: &UserRecord) -> Resource {
    let avatar = format!(
        "https://www.gravatar.com/avatar/{}?s=100&d=mm",
        &crate::ids::hash_secret(&user.email.trim().to_lowercase())[..32]
    );
    Resource::new("users", &user.id)
        .attribute("username", &user.username)
        .attribute("is-service-account", false)
        .attribute("auth-method", "tfe")
        .attribute("avatar-url", avatar)
        .attribute("v2-only", false)
        .attribute("is-admin", user.is_admin)
        .attribute("is-site-admin", user.is_admin)
        .attribute("is-sso-login", false)
        .attribute("email", &user.email)
        .attribute("unconfirmed-email", None::<String>)
        .attribute("two-factor", json!({"enabled": false, "verified": false}))
        .attribute(
            "permissions",
            json!({
                "can-create-organizations": user.is_admin,
                "can-change-email": true,
                "can-change-username": true,
                "can-manage-user-tokens": true,
            }),
        )
        .relationship(
            "authentication-tokens",
            Relationship::links_only()
                .related(format!("/api/v2/users/{}/authentication-tokens", user.id)),
        )
        .self_link(format!("/api/v2/users/{}", user.id))
}

/// `GET /api/v2/account/details`: the user behind the token; 404 for team and organization
/// tokens (they have no account).
pub(crate) async fn read_account(caller: Caller) -> Result<JsonApi, Error> {
    let user = caller.require_user()?;
    Ok(JsonApi::ok(Document::one(user_resource(user))))
}

/// `GET /api/v2/users/:id`: any user, to any authenticated caller (TFE shows users by id).
pub(crate) async fn read_user(
    AxumState(state): AxumState<State>,
    _caller: Caller,
    Path(id): Path<String>,
) -> Result<JsonApi, Error> {
    let user = load_user(state.storage(), &id)
        .await?
        .ok_or(Error::NotFound)?;
    Ok(JsonApi::ok(Document::one(user_resource(&user.record))))
}

/// `PATCH /api/v2/account/update`: the caller's `username` and `email`; 422 when invalid or
/// taken; 404 for team and organization tokens.
pub(crate) async fn update_account(
    AxumState(state): AxumState<State>,
    caller: Caller,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["users"])?;
    let user_id = caller.require_user()?.id.clone();
    let username = body.string("username")?;
    if let Some(username) = &username
        && !valid_username(username)
    {
        return Err(Error::invalid_attribute(
            "username",
            "username may contain only letters, numbers, -, _ and ., at most 64 characters",
        ));
    }
    let email = body.string("email")?.map(|email| email.trim().to_owned());
    if let Some(email) = &email
        && !crate::organizations::valid_email(email)
    {
        return Err(Error::invalid_attribute("email", "email is invalid"));
    }
    for _ in 0..MAX_ATTEMPTS {
        let stored = load_user(state.storage(), &user_id)
            .await?
            .ok_or(Error::Unauthorized)?;
        let old = stored.record;
        let mut user = old.clone();
        let mut txn = Txn::new().when(Compare::ModRevision(user_key(&user_id), stored.revision));
        if let Some(username) = &username
            && old.username.as_deref().map(str::to_lowercase) != Some(username.to_lowercase())
        {
            if state
                .storage()
                .get(&username_key(username))
                .await?
                .is_some()
            {
                return Err(Error::invalid_attribute(
                    "username",
                    "username has already been taken",
                ));
            }
            txn = txn.when(Compare::Missing(username_key(username)));
            if let Some(previous) = &old.username {
                txn = txn.then(Op::Delete {
                    key: username_key(previous),
                });
            }
            txn = txn.then(put(username_key(username), &IdRef::new(&user_id))?);
        }
        if let Some(username) = &username {
            user.username = Some(username.clone());
        }
        if let Some(email) = &email
            && old.email.to_lowercase() != email.to_lowercase()
        {
            if state.storage().get(&email_key(email)).await?.is_some() {
                return Err(Error::invalid_attribute(
                    "email",
                    "email has already been taken",
                ));
            }
            txn = txn
                .when(Compare::Missing(email_key(email)))
                .then(Op::Delete {
                    key: email_key(&old.email),
                })
                .then(put(email_key(email), &IdRef::new(&user_id))?);
        }
        if let Some(email) = &email {
            user.email = email.clone();
        }
        txn = txn.then(put(user_key(&user_id), &user)?);
        let (compares, ops) =
            crate::store::memberships::copy_user_ops(state.storage(), &user).await?;
        txn.compares.extend(compares);
        txn.success.extend(ops);
        if commit(state.storage(), txn).await? {
            return Ok(JsonApi::ok(Document::one(user_resource(&user))));
        }
    }
    Err(Error::Contention)
}
