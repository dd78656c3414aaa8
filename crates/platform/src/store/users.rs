//! Stored users (see `store/mod.rs` for the layout).
//!
//! Invariants: a user's `username` is `None` only while every membership of theirs is an
//! invitation nobody accepted (users created by an invite); `usernames/` holds exactly the
//! users with a username and `user-emails/` every user, both lowercased.

use serde::{Deserialize, Serialize};
use storage::{Compare, Storage};

use crate::Error;
use crate::store::{IdRef, PREFIX, Stored, load};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UserRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) username: Option<String>,
    pub(crate) email: String,
    /// Site administrator (`is-admin`).
    #[serde(default)]
    pub(crate) is_admin: bool,
    pub(crate) created_at_ms: u64,
}

pub(crate) fn user_key(id: &str) -> Vec<u8> {
    format!("{PREFIX}users/{id}").into_bytes()
}

pub(crate) fn username_key(username: &str) -> Vec<u8> {
    format!("{PREFIX}usernames/{}", username.to_lowercase()).into_bytes()
}

pub(crate) fn email_key(email: &str) -> Vec<u8> {
    format!("{PREFIX}user-emails/{}", email.to_lowercase()).into_bytes()
}

pub(crate) async fn load_user(
    storage: &dyn Storage,
    id: &str,
) -> Result<Option<Stored<UserRecord>>, Error> {
    load(storage, &user_key(id)).await
}

pub(crate) async fn load_user_by_username(
    storage: &dyn Storage,
    username: &str,
) -> Result<Option<Stored<UserRecord>>, Error> {
    match load::<IdRef>(storage, &username_key(username)).await? {
        Some(index) => load_user(storage, &index.record.id).await,
        None => Ok(None),
    }
}

pub(crate) async fn load_user_by_email(
    storage: &dyn Storage,
    email: &str,
) -> Result<Option<Stored<UserRecord>>, Error> {
    match load::<IdRef>(storage, &email_key(email)).await? {
        Some(index) => load_user(storage, &index.record.id).await,
        None => Ok(None),
    }
}

/// The ops that create `user` with its indexes, and the compares that keep them unique.
pub(crate) fn create_user_ops(
    user: &UserRecord,
) -> Result<(Vec<Compare>, Vec<storage::Op>), Error> {
    let mut compares = vec![
        Compare::Missing(user_key(&user.id)),
        Compare::Missing(email_key(&user.email)),
    ];
    let mut ops = vec![
        super::put(user_key(&user.id), user)?,
        super::put(email_key(&user.email), &IdRef::new(&user.id))?,
    ];
    if let Some(username) = &user.username {
        compares.push(Compare::Missing(username_key(username)));
        ops.push(super::put(username_key(username), &IdRef::new(&user.id))?);
    }
    Ok((compares, ops))
}
