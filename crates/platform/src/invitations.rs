//! Invitation acceptance: `POST /api/v2/organization-memberships/:id/actions/accept`, cairn's
//! own endpoint (TFE accepts invitations through its UI and mailed links).
//!
//! Where it sits: called from `routes.rs` without a required bearer token (the invitation
//! token is the proof); the invite that issues the token is in `memberships.rs`.
//!
//! Invariants:
//! - Acceptance is by the invited user's own bearer token, or by the invitation token in
//!   `data.attributes.invitation-token` (no bearer needed); anything else is 401 (no
//!   credential) or 404 (a wrong one).
//! - A user without a username must choose one (`data.attributes.username`; 422 when missing,
//!   invalid or taken); the username is copied into all of the user's memberships in the same
//!   transaction.
//! - The membership becomes `active` and its invitation hash is cleared in one transaction
//!   (with its status index and the organization's status counts), so the invitation token
//!   works once; a second acceptance is 409.
//! - A user who had no username and accepted by invitation token receives a first user token
//!   in `meta.authentication-token` (the only way such a user gets a credential until mail is
//!   configured).

use axum::extract::{Path, State as AxumState};
use jsonapi::Document;
use serde_json::json;
use storage::{Compare, Txn};

use crate::auth::{Caller, MaybeCaller};
use crate::render::JsonApi;
use crate::request::OptionalBody;
use crate::store::memberships::{
    MembershipStatus, StatusCounts, count_change, load_membership, load_user_memberships,
    membership_key_of, update_ops,
};
use crate::store::tokens::{TokenOwner, TokenRecord, save_token_ops};
use crate::store::users::{load_user, user_key, username_key};
use crate::store::{IdRef, MAX_ATTEMPTS, RECORD_VERSION, commit, put};
use crate::views::memberships::membership_resource;
use crate::views::users::user_resource;
use crate::{Error, State, ids, users};

/// `POST /api/v2/organization-memberships/:id/actions/accept`: 200 with
/// the membership (user in `included`); 401 without any credential; 404 for a wrong token or
/// caller; 409 when already active; 422 for a missing, bad or taken username.
pub(crate) async fn accept_membership(
    AxumState(state): AxumState<State>,
    MaybeCaller(caller): MaybeCaller,
    Path(id): Path<String>,
    OptionalBody(body): OptionalBody,
) -> Result<JsonApi, Error> {
    let invitation = match &body {
        Some(body) => body.string("invitation-token")?,
        None => None,
    };
    let requested_username = match &body {
        Some(body) => body.string("username")?,
        None => None,
    };
    if caller.is_none() && invitation.is_none() {
        return Err(Error::Unauthorized);
    }
    for _ in 0..MAX_ATTEMPTS {
        let membership = load_membership(state.storage(), &id)
            .await?
            .ok_or(Error::NotFound)?;
        let record = &membership.record;
        let by_caller = caller
            .as_ref()
            .and_then(Caller::user)
            .is_some_and(|user| user.id == record.user_id);
        let by_token = match (&invitation, &record.invitation_hash) {
            (Some(secret), Some(hash)) => ids::hashes_equal(&ids::hash_secret(secret), hash),
            _ => false,
        };
        if !by_caller && !by_token {
            return Err(Error::NotFound);
        }
        if record.status == MembershipStatus::Active {
            return Err(Error::Conflict(
                "the invitation was already accepted".to_owned(),
            ));
        }
        let user = load_user(state.storage(), &record.user_id)
            .await?
            .ok_or(Error::NotFound)?;
        let mut txn = Txn::new()
            .when(Compare::ModRevision(
                membership_key_of(record),
                membership.revision,
            ))
            .when(Compare::ModRevision(
                user_key(&user.record.id),
                user.revision,
            ));
        let mut accepted_user = user.record.clone();
        let mut first_token = None;
        if accepted_user.username.is_none() {
            let username = requested_username
                .clone()
                .filter(|name| !name.trim().is_empty())
                .ok_or_else(|| Error::invalid_attribute("username", "username can't be blank"))?;
            if !users::valid_username(&username) {
                return Err(Error::invalid_attribute(
                    "username",
                    "username may contain only letters, numbers, -, _ and ., at most 64 characters",
                ));
            }
            if state
                .storage()
                .get(&username_key(&username))
                .await?
                .is_some()
            {
                return Err(Error::invalid_attribute(
                    "username",
                    "username has already been taken",
                ));
            }
            accepted_user.username = Some(username.clone());
            txn = txn
                .when(Compare::Missing(username_key(&username)))
                .then(put(
                    username_key(&username),
                    &IdRef::new(&accepted_user.id),
                )?)
                .then(put(user_key(&accepted_user.id), &accepted_user)?);
            // Every membership of the user carries its username (store invariant).
            for other in load_user_memberships(state.storage(), &accepted_user.id).await? {
                if other.record.id == id {
                    continue;
                }
                let mut copy = other.record.clone();
                copy.username = Some(username.clone());
                txn = txn
                    .when(Compare::ModRevision(
                        membership_key_of(&copy),
                        other.revision,
                    ))
                    .then(put(membership_key_of(&copy), &copy)?);
            }
            if by_token && !by_caller {
                let secret = ids::new_token_secret();
                let token = TokenRecord {
                    version: RECORD_VERSION,
                    id: ids::new_id("at"),
                    hash: ids::hash_secret(&secret),
                    owner: TokenOwner::User {
                        user_id: accepted_user.id.clone(),
                    },
                    description: Some("created when accepting an invitation".to_owned()),
                    created_at_ms: state.now_ms(),
                    expired_at_ms: None,
                    created_by: Some(accepted_user.id.clone()),
                };
                txn.success.extend(save_token_ops(&token)?);
                first_token = Some((token.id, secret));
            }
        }
        let mut accepted = record.clone();
        accepted.status = MembershipStatus::Active;
        accepted.invitation_hash = None;
        accepted.username = accepted_user.username.clone();
        txn.success.extend(update_ops(record, &accepted)?);
        // The counts are read and written under the organization's lock (`State::lock_counts`).
        let committed = {
            let _counts = state.lock_counts(&record.organization).await;
            let (compare, op) = count_change(
                state.storage(),
                &record.organization,
                StatusCounts::one(MembershipStatus::Active).plus(record.status, -1),
            )
            .await?;
            txn = txn.when(compare).then(op);
            commit(state.storage(), txn).await?
        };
        if committed {
            let mut document = Document::one(membership_resource(&accepted, &accepted.team_ids));
            document.include(user_resource(&accepted_user));
            if let Some((token_id, secret)) = first_token {
                document = document.with_meta(
                    "authentication-token",
                    json!({"id": token_id, "token": secret}),
                );
            }
            return Ok(JsonApi::ok(document));
        }
        if let Some(username) = &accepted_user.username
            && user.record.username.is_none()
            && state
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
    }
    Err(Error::Contention)
}
