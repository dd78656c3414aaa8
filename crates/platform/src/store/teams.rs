//! Stored teams and team membership (see `store/mod.rs` for the layout).
//!
//! Invariants: a team belongs to one organization for life; `team-members/<team>/<user>`
//! exists exactly when the team is in the `team_ids` of the user's membership of that
//! organization (`store/memberships.rs`), and both are written in the same transaction; only
//! users with a membership (invited or active) in the team's organization are team members,
//! and removing the membership removes them from every team of that organization.

use serde::{Deserialize, Serialize};
use storage::{KeyRange, Op, Storage};

use crate::Error;
use crate::store::{PREFIX, RECORD_VERSION, Stored, load, tokens};

/// A team's organization-level permissions, as TFE names them (`organization-access`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub(crate) struct OrganizationAccess {
    pub(crate) manage_policies: bool,
    pub(crate) manage_policy_overrides: bool,
    pub(crate) manage_workspaces: bool,
    pub(crate) manage_vcs_settings: bool,
    pub(crate) manage_providers: bool,
    pub(crate) manage_modules: bool,
    pub(crate) manage_run_tasks: bool,
    pub(crate) manage_projects: bool,
    pub(crate) read_workspaces: bool,
    pub(crate) read_projects: bool,
    pub(crate) manage_membership: bool,
    pub(crate) manage_teams: bool,
    pub(crate) manage_organization_access: bool,
    pub(crate) access_secret_teams: bool,
    pub(crate) manage_agent_pools: bool,
}

impl OrganizationAccess {
    /// Every permission: the owners team's access.
    pub(crate) fn all() -> OrganizationAccess {
        OrganizationAccess {
            manage_policies: true,
            manage_policy_overrides: true,
            manage_workspaces: true,
            manage_vcs_settings: true,
            manage_providers: true,
            manage_modules: true,
            manage_run_tasks: true,
            manage_projects: true,
            read_workspaces: true,
            read_projects: true,
            manage_membership: true,
            manage_teams: true,
            manage_organization_access: true,
            access_secret_teams: true,
            manage_agent_pools: true,
        }
    }

    /// The union of two grants.
    pub(crate) fn union(self, other: OrganizationAccess) -> OrganizationAccess {
        OrganizationAccess {
            manage_policies: self.manage_policies || other.manage_policies,
            manage_policy_overrides: self.manage_policy_overrides || other.manage_policy_overrides,
            manage_workspaces: self.manage_workspaces || other.manage_workspaces,
            manage_vcs_settings: self.manage_vcs_settings || other.manage_vcs_settings,
            manage_providers: self.manage_providers || other.manage_providers,
            manage_modules: self.manage_modules || other.manage_modules,
            manage_run_tasks: self.manage_run_tasks || other.manage_run_tasks,
            manage_projects: self.manage_projects || other.manage_projects,
            read_workspaces: self.read_workspaces || other.read_workspaces,
            read_projects: self.read_projects || other.read_projects,
            manage_membership: self.manage_membership || other.manage_membership,
            manage_teams: self.manage_teams || other.manage_teams,
            manage_organization_access: self.manage_organization_access
                || other.manage_organization_access,
            access_secret_teams: self.access_secret_teams || other.access_secret_teams,
            manage_agent_pools: self.manage_agent_pools || other.manage_agent_pools,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TeamRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) organization: String,
    pub(crate) name: String,
    /// `secret` or `organization`.
    pub(crate) visibility: String,
    pub(crate) organization_access: OrganizationAccess,
    #[serde(default)]
    pub(crate) sso_team_id: Option<String>,
    #[serde(default)]
    pub(crate) allow_member_token_management: bool,
    pub(crate) created_at_ms: u64,
}

/// One user's membership of one team.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TeamMemberRecord {
    pub(crate) version: u32,
    pub(crate) user_id: String,
    pub(crate) organization: String,
    /// The id of the member's membership of `organization` (fixed for the membership's life),
    /// so a team's view lists its memberships from this index alone; absent in records
    /// written without it (the owners team's first member, older releases), which are looked
    /// up instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) membership_id: Option<String>,
}

impl TeamMemberRecord {
    pub(crate) fn new(user_id: &str, organization: &str) -> TeamMemberRecord {
        TeamMemberRecord {
            version: RECORD_VERSION,
            user_id: user_id.to_owned(),
            organization: organization.to_owned(),
            membership_id: None,
        }
    }
}

pub(crate) const OWNERS_TEAM_NAME: &str = "owners";

pub(crate) fn team_key(id: &str) -> Vec<u8> {
    format!("{PREFIX}teams/{id}").into_bytes()
}

pub(crate) fn org_teams_prefix(organization: &str) -> String {
    format!("{PREFIX}org-teams/{organization}/")
}

pub(crate) fn org_team_key(organization: &str, team_id: &str) -> Vec<u8> {
    format!("{PREFIX}org-teams/{organization}/{team_id}").into_bytes()
}

pub(crate) fn team_name_key(organization: &str, name: &str) -> Vec<u8> {
    format!(
        "{PREFIX}org-team-names/{organization}/{}",
        name.to_lowercase()
    )
    .into_bytes()
}

pub(crate) fn team_members_prefix(team_id: &str) -> String {
    format!("{PREFIX}team-members/{team_id}/")
}

pub(crate) fn team_member_key(team_id: &str, user_id: &str) -> Vec<u8> {
    format!("{PREFIX}team-members/{team_id}/{user_id}").into_bytes()
}

pub(crate) async fn load_team(
    storage: &dyn Storage,
    id: &str,
) -> Result<Option<Stored<TeamRecord>>, Error> {
    load(storage, &team_key(id)).await
}

/// Every team of `organization`, sorted by name.
pub(crate) async fn load_teams(
    storage: &dyn Storage,
    organization: &str,
) -> Result<Vec<TeamRecord>, Error> {
    let mut teams = Vec::new();
    for id in super::list_suffixes(storage, &org_teams_prefix(organization)).await? {
        if let Some(team) = load_team(storage, &id).await? {
            teams.push(team.record);
        }
    }
    teams.sort_by_key(|team| team.name.to_lowercase());
    Ok(teams)
}

/// The `(name lowercased, id)` of every team of `organization`, in name order, from the
/// name index alone (no team record is read).
pub(crate) async fn load_team_names(
    storage: &dyn Storage,
    organization: &str,
) -> Result<Vec<(String, String)>, Error> {
    let prefix = format!("{PREFIX}org-team-names/{organization}/");
    let scan = storage
        .scan(storage::KeyRange::prefix(prefix.as_str()), None)
        .await?;
    scan.kvs
        .iter()
        .map(|kv| {
            let index: super::IdRef = super::decode(&kv.key, &kv.value)?;
            let name = String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned();
            Ok((name, index.id))
        })
        .collect()
}

/// A team's members from its member index alone: `(user id, membership id if recorded)`.
pub(crate) async fn load_team_members(
    storage: &dyn Storage,
    team_id: &str,
) -> Result<Vec<(String, Option<String>)>, Error> {
    let prefix = team_members_prefix(team_id);
    let scan = storage
        .scan(storage::KeyRange::prefix(prefix.as_str()), None)
        .await?;
    scan.kvs
        .iter()
        .map(|kv| {
            let user_id = String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned();
            let record: TeamMemberRecord = super::decode(&kv.key, &kv.value)?;
            Ok((user_id, record.membership_id))
        })
        .collect()
}

/// The user ids of a team's members.
pub(crate) async fn load_team_member_ids(
    storage: &dyn Storage,
    team_id: &str,
) -> Result<Vec<String>, Error> {
    super::list_suffixes(storage, &team_members_prefix(team_id)).await
}

/// The put that makes `user_id` a member of `team` (the caller adds the team to the user's
/// membership in the same transaction).
pub(crate) fn add_member_op(team: &TeamRecord, user_id: &str) -> Result<Op, Error> {
    super::put(
        team_member_key(&team.id, user_id),
        &TeamMemberRecord::new(user_id, &team.organization),
    )
}

/// [`add_member_op`] recording the member's membership id (see [`TeamMemberRecord`]).
pub(crate) fn add_membership_op(
    team: &TeamRecord,
    user_id: &str,
    membership_id: &str,
) -> Result<Op, Error> {
    super::put(
        team_member_key(&team.id, user_id),
        &TeamMemberRecord {
            membership_id: Some(membership_id.to_owned()),
            ..TeamMemberRecord::new(user_id, &team.organization)
        },
    )
}

/// The delete that removes `user_id` from team `team_id` (the caller removes the team from the
/// user's membership in the same transaction).
pub(crate) fn remove_member_op(team_id: &str, user_id: &str) -> Op {
    Op::Delete {
        key: team_member_key(team_id, user_id),
    }
}

/// Every delete that removing a team needs: the record, its indexes, its members and its
/// team token (removing the team from its members' memberships is the caller's: see
/// `teams.rs`; an organization's deletion removes the memberships themselves).
pub(crate) async fn delete_team_ops(
    storage: &dyn Storage,
    team_id: &str,
    organization: &str,
) -> Result<Vec<Op>, Error> {
    let mut ops = Vec::new();
    if let Some(team) = load_team(storage, team_id).await? {
        ops.push(Op::Delete {
            key: team_name_key(organization, &team.record.name),
        });
    }
    ops.push(Op::Delete {
        key: team_key(team_id),
    });
    ops.push(Op::Delete {
        key: org_team_key(organization, team_id),
    });
    ops.push(Op::DeleteRange(KeyRange::prefix(team_members_prefix(
        team_id,
    ))));
    ops.extend(tokens::delete_team_token_ops(storage, team_id).await?);
    Ok(ops)
}
