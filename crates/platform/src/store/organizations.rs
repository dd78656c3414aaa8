//! Stored organizations (see `store/mod.rs` for the layout).
//!
//! Invariants: an organization is keyed by its name (TFE addresses organizations by name and
//! uses the name as the JSON:API id); its owners team exists from the creating transaction on
//! and is named in `owners_team_id`; deleting an organization removes, in one transaction,
//! every key of its teams, memberships and tokens ([`delete_organization_ops`]).

use serde::{Deserialize, Serialize};
use storage::{Op, Storage};

use crate::Error;
use crate::store::{PREFIX, Stored, load, load_all, teams, tokens, users};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OrganizationRecord {
    pub(crate) version: u32,
    pub(crate) name: String,
    /// `org-<16 base58>`, the `external-id` attribute.
    pub(crate) external_id: String,
    pub(crate) email: String,
    pub(crate) owners_team_id: String,
    pub(crate) created_at_ms: u64,
    #[serde(default)]
    pub(crate) session_timeout: Option<i64>,
    #[serde(default)]
    pub(crate) session_remember: Option<i64>,
    pub(crate) collaborator_auth_policy: String,
    #[serde(default)]
    pub(crate) cost_estimation_enabled: bool,
    pub(crate) default_execution_mode: String,
    #[serde(default)]
    pub(crate) assessments_enforced: bool,
    #[serde(default)]
    pub(crate) allow_force_delete_workspaces: bool,
    /// Set by the first of the two transactions of a delete: the organization is gone for
    /// every reader ([`load_organization`] skips it) and every write that compared its
    /// revision fails.
    #[serde(default)]
    pub(crate) deleting: bool,
}

pub(crate) fn organizations_prefix() -> String {
    format!("{PREFIX}organizations/")
}

pub(crate) fn organization_key(name: &str) -> Vec<u8> {
    format!("{PREFIX}organizations/{name}").into_bytes()
}

/// The organization called `name`, unless it is missing or being deleted.
pub(crate) async fn load_organization(
    storage: &dyn Storage,
    name: &str,
) -> Result<Option<Stored<OrganizationRecord>>, Error> {
    Ok(load::<OrganizationRecord>(storage, &organization_key(name))
        .await?
        .filter(|stored| !stored.record.deleting))
}

pub(crate) async fn load_organizations(
    storage: &dyn Storage,
) -> Result<Vec<OrganizationRecord>, Error> {
    Ok(
        load_all::<OrganizationRecord>(storage, &organizations_prefix())
            .await?
            .into_iter()
            .map(|stored| stored.record)
            .filter(|organization| !organization.deleting)
            .collect(),
    )
}

/// Every delete that removing organization `name` needs: the record, its teams (with their
/// members and tokens), its memberships (with their indexes) and its organization token.
/// Families added later (workspaces, ...) add their ranges here.
pub(crate) async fn delete_organization_ops(
    storage: &dyn Storage,
    name: &str,
) -> Result<Vec<Op>, Error> {
    let mut ops = vec![Op::Delete {
        key: organization_key(name),
    }];
    for team_id in super::list_suffixes(storage, &teams::org_teams_prefix(name)).await? {
        ops.extend(teams::delete_team_ops(storage, &team_id, name).await?);
    }
    for membership in super::memberships::load_memberships(storage, name).await? {
        let membership = membership.record;
        ops.extend(super::memberships::remove_ops(&membership));
        // A user created by an invitation nobody accepted exists only for it.
        if membership.username.is_none()
            && super::memberships::count_user_memberships(storage, &membership.user_id).await? == 1
        {
            ops.push(Op::Delete {
                key: users::user_key(&membership.user_id),
            });
            ops.push(Op::Delete {
                key: users::email_key(&membership.email),
            });
        }
    }
    ops.extend(super::memberships::remove_organization_ops(name));
    ops.extend(tokens::delete_organization_token_ops(storage, name).await?);
    // Workspaces with their configuration versions and runs (archives stay in the blob store
    // as orphans).
    ops.extend(super::workspaces::delete_organization_workspaces_ops(storage, name).await?);
    Ok(ops)
}
