//! Stored organization memberships (see `store/mod.rs` for the layout).
//!
//! Invariants:
//! - At most one membership per (user, organization): `user-memberships/<user>/<org>` is
//!   created with a `Missing` compare in the invite transaction.
//! - A membership record carries a copy of its user's `email` and `username` (so a list with
//!   `q` or `filter[email]` reads one prefix); every write that changes a user's username
//!   rewrites all of that user's memberships in the same transaction.
//! - `invitation_hash` (SHA-256 of the invitation token) is set only while `status` is
//!   `invited`; acceptance clears it.

use serde::{Deserialize, Serialize};
use storage::Storage;

use crate::Error;
use crate::store::{IdRef, PREFIX, Stored, load, load_all};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum MembershipStatus {
    Invited,
    Active,
}

impl MembershipStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MembershipStatus::Invited => "invited",
            MembershipStatus::Active => "active",
        }
    }

    pub(crate) fn parse(raw: &str) -> Option<MembershipStatus> {
        match raw {
            "invited" => Some(MembershipStatus::Invited),
            "active" => Some(MembershipStatus::Active),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MembershipRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) organization: String,
    pub(crate) user_id: String,
    pub(crate) status: MembershipStatus,
    /// The user's email and username, copied (see the module invariants).
    pub(crate) email: String,
    pub(crate) username: Option<String>,
    pub(crate) created_at_ms: u64,
    #[serde(default)]
    pub(crate) invitation_hash: Option<String>,
}

/// Where a membership id lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OrganizationRef {
    pub(crate) version: u32,
    pub(crate) organization: String,
}

pub(crate) fn org_memberships_prefix(organization: &str) -> String {
    format!("{PREFIX}memberships/{organization}/")
}

pub(crate) fn membership_key(organization: &str, id: &str) -> Vec<u8> {
    format!("{PREFIX}memberships/{organization}/{id}").into_bytes()
}

pub(crate) fn membership_id_key(id: &str) -> Vec<u8> {
    format!("{PREFIX}membership-ids/{id}").into_bytes()
}

pub(crate) fn user_memberships_prefix(user_id: &str) -> String {
    format!("{PREFIX}user-memberships/{user_id}/")
}

pub(crate) fn user_membership_key(user_id: &str, organization: &str) -> Vec<u8> {
    format!("{PREFIX}user-memberships/{user_id}/{organization}").into_bytes()
}

/// Every membership of `organization`, in key order.
pub(crate) async fn load_memberships(
    storage: &dyn Storage,
    organization: &str,
) -> Result<Vec<Stored<MembershipRecord>>, Error> {
    load_all(storage, &org_memberships_prefix(organization)).await
}

pub(crate) async fn load_membership(
    storage: &dyn Storage,
    id: &str,
) -> Result<Option<Stored<MembershipRecord>>, Error> {
    let Some(location) = load::<OrganizationRef>(storage, &membership_id_key(id)).await? else {
        return Ok(None);
    };
    load(storage, &membership_key(&location.record.organization, id)).await
}

/// The membership of `user_id` in `organization`, if any.
pub(crate) async fn load_user_membership(
    storage: &dyn Storage,
    user_id: &str,
    organization: &str,
) -> Result<Option<Stored<MembershipRecord>>, Error> {
    let Some(index) = load::<IdRef>(storage, &user_membership_key(user_id, organization)).await?
    else {
        return Ok(None);
    };
    load(storage, &membership_key(organization, &index.record.id)).await
}

/// Every membership of `user_id`, across organizations.
pub(crate) async fn load_user_memberships(
    storage: &dyn Storage,
    user_id: &str,
) -> Result<Vec<Stored<MembershipRecord>>, Error> {
    let mut memberships = Vec::new();
    for organization in super::list_suffixes(storage, &user_memberships_prefix(user_id)).await? {
        if let Some(membership) = load_user_membership(storage, user_id, &organization).await? {
            memberships.push(membership);
        }
    }
    Ok(memberships)
}

pub(crate) async fn count_user_memberships(
    storage: &dyn Storage,
    user_id: &str,
) -> Result<usize, Error> {
    Ok(
        super::list_suffixes(storage, &user_memberships_prefix(user_id))
            .await?
            .len(),
    )
}

/// The compares and puts that copy `user`'s email and username into every membership of
/// theirs (the store invariant above), guarded by each membership's revision.
pub(crate) async fn copy_user_ops(
    storage: &dyn Storage,
    user: &crate::store::users::UserRecord,
) -> Result<(Vec<storage::Compare>, Vec<storage::Op>), Error> {
    let mut compares = Vec::new();
    let mut ops = Vec::new();
    for stored in load_user_memberships(storage, &user.id).await? {
        let mut copy = stored.record;
        copy.email = user.email.clone();
        copy.username = user.username.clone();
        let key = membership_key(&copy.organization, &copy.id);
        compares.push(storage::Compare::ModRevision(key.clone(), stored.revision));
        ops.push(super::put(key, &copy)?);
    }
    Ok((compares, ops))
}
