//! Users: `GET /api/v2/account/details` and `PATCH /api/v2/account/update` (the caller),
//! and `GET /api/v2/users/:id`.
//!
//! Where it sits: handlers called from `routes.rs`; records in `store/users.rs`; rendered by
//! `views/users.rs`, which every family that includes a user shares.
//!
//! Invariants: `username` is `null` for a user created by an invitation nobody accepted; the
//! representation is the same wherever a user appears (go-tfe compares them deeply); usernames
//! and emails are unique (case-insensitively) and a change to either rewrites the user's
//! memberships in the same transaction.

use axum::extract::{Path, State as AxumState};
use jsonapi::Document;
use storage::{Compare, Op, Txn};

use crate::auth::Caller;
use crate::render::JsonApi;
use crate::request::Body;
use crate::store::users::{email_key, load_user, user_key, username_key};
use crate::store::{IdRef, MAX_ATTEMPTS, commit, put};
use crate::views::users::user_resource;
use crate::{Error, State};

/// Whether `name` may be a username: `[A-Za-z0-9_.-]`, 1 to 64 characters.
pub(crate) fn valid_username(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
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
