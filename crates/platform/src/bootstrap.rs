//! The site administrator, created at the first start of a store.
//!
//! Where it sits: called once by [`State::open`](crate::State::open), before serving.
//!
//! What it does: the first start creates the user [`ADMIN_USERNAME`] (email [`ADMIN_EMAIL`],
//! `is-admin: true`) and the marker `platform/bootstrap`. Then:
//! - with a dev root token (`cairn dev`), that token is made a user token of the admin (on
//!   every start, so a kept dev data dir works with a new root token too);
//! - without one (`cairn server`), the first start issues one user token of the admin and
//!   returns its secret, which `cairn` prints once as `platform bootstrap token`; later starts
//!   return nothing. The token is an ordinary user token: list it at
//!   `/api/v2/users/<admin id>/authentication-tokens`, revoke it with
//!   `DELETE /api/v2/authentication-tokens/<id>` after issuing others.
//!
//! Invariants: the marker and the admin user are written in one transaction that requires the
//! marker, the username and the email to be free, so two starts racing create one admin.

use storage::{Compare, Txn};

use crate::store::tokens::{TokenOwner, TokenRecord, load_token_by_hash, save_token_ops};
use crate::store::users::{UserRecord, create_user_ops};
use crate::store::{BootstrapRecord, RECORD_VERSION, bootstrap_key, commit, load, put};
use crate::{Error, State, ids};

/// The site administrator's username.
pub const ADMIN_USERNAME: &str = "admin";
/// The site administrator's email.
pub const ADMIN_EMAIL: &str = "admin@cairn.localhost";

/// Creates the admin at the first start; returns a bootstrap token secret when one was issued.
pub(crate) async fn bootstrap(state: &State) -> Result<Option<String>, Error> {
    let storage = state.storage();
    let (admin_id, first_start) = match load::<BootstrapRecord>(storage, &bootstrap_key()).await? {
        Some(marker) => (marker.record.admin_user_id, false),
        None => (create_admin(state).await?, true),
    };
    if let Some(root) = &state.config().dev_root_token {
        if load_token_by_hash(storage, &ids::hash_secret(root))
            .await?
            .is_none()
        {
            issue(state, &admin_id, root, "dev root token").await?;
        }
        return Ok(None);
    }
    if !first_start {
        return Ok(None);
    }
    let secret = ids::new_token_secret();
    issue(state, &admin_id, &secret, "bootstrap token").await?;
    Ok(Some(secret))
}

async fn create_admin(state: &State) -> Result<String, Error> {
    let user = UserRecord {
        version: RECORD_VERSION,
        id: ids::new_id("user"),
        username: Some(ADMIN_USERNAME.to_owned()),
        email: ADMIN_EMAIL.to_owned(),
        is_admin: true,
        created_at_ms: state.now_ms(),
    };
    let marker = BootstrapRecord {
        version: RECORD_VERSION,
        admin_user_id: user.id.clone(),
        created_at_ms: user.created_at_ms,
    };
    let (compares, ops) = create_user_ops(&user)?;
    let mut txn = Txn::new().when(Compare::Missing(bootstrap_key()));
    txn.compares.extend(compares);
    txn.success.extend(ops);
    txn.success.push(put(bootstrap_key(), &marker)?);
    if commit(state.storage(), txn).await? {
        return Ok(user.id);
    }
    // Another start won the race (or the name is taken): use the marker it wrote.
    load::<BootstrapRecord>(state.storage(), &bootstrap_key())
        .await?
        .map(|marker| marker.record.admin_user_id)
        .ok_or_else(|| {
            Error::Internal(
                "cannot create the site administrator: username or email taken".to_owned(),
            )
        })
}

async fn issue(
    state: &State,
    admin_id: &str,
    secret: &str,
    description: &str,
) -> Result<(), Error> {
    let token = TokenRecord {
        version: RECORD_VERSION,
        id: ids::new_id("at"),
        hash: ids::hash_secret(secret),
        owner: TokenOwner::User {
            user_id: admin_id.to_owned(),
        },
        description: Some(description.to_owned()),
        created_at_ms: state.now_ms(),
        expired_at_ms: None,
        created_by: None,
    };
    let mut txn = Txn::new().when(Compare::Missing(crate::store::tokens::token_key(
        &token.hash,
    )));
    txn.success.extend(save_token_ops(&token)?);
    commit(state.storage(), txn).await?;
    Ok(())
}
