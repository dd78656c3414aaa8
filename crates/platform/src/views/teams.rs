//! The `teams` resource, and [`TeamView`]: a team with its members, which the resource lists.
//!
//! Where it sits: rendered by `teams.rs` and included by memberships (`include=teams`).
//!
//! Invariant: the owners team's `permissions` never offer what its invariants forbid
//! (destroying it, renaming it, narrowing its access).

use jsonapi::{Relationship, Resource};
use serde_json::json;

use crate::auth::OrgAccess;
use crate::store::memberships::load_user_membership_id;
use crate::store::teams::{TeamRecord, load_team_members};
use crate::{Error, State};

/// A team with what its view needs: member user ids and their membership ids.
#[derive(Debug, Clone)]
pub(crate) struct TeamView {
    pub(crate) team: TeamRecord,
    pub(crate) user_ids: Vec<String>,
    pub(crate) membership_ids: Vec<String>,
}

impl TeamView {
    /// The team's members and their memberships from the member index (one scan), looking
    /// up only the memberships an index record does not name.
    pub(crate) async fn load(state: &State, team: TeamRecord) -> Result<TeamView, Error> {
        let members = load_team_members(state.storage(), &team.id).await?;
        let mut user_ids = Vec::with_capacity(members.len());
        let mut membership_ids = Vec::with_capacity(members.len());
        for (user_id, membership_id) in members {
            let membership_id = match membership_id {
                Some(id) => Some(id),
                None => {
                    load_user_membership_id(state.storage(), &user_id, &team.organization).await?
                }
            };
            membership_ids.extend(membership_id);
            user_ids.push(user_id);
        }
        Ok(TeamView {
            team,
            user_ids,
            membership_ids,
        })
    }
}

/// The `teams` resource, with `permissions` as `access` allows.
pub(crate) fn team_resource(view: &TeamView, access: &OrgAccess) -> Resource {
    let team = &view.team;
    let owners = team.id == access.organization.owners_team_id;
    Resource::new("teams", &team.id)
        .attribute("name", &team.name)
        .attribute("visibility", &team.visibility)
        .attribute("users-count", view.user_ids.len())
        .attribute("user-count", view.user_ids.len())
        .attribute("organization-access", team.organization_access)
        .attribute("sso-team-id", &team.sso_team_id)
        .attribute(
            "allow-member-token-management",
            team.allow_member_token_management,
        )
        .attribute("is-unified", false)
        .attribute(
            "permissions",
            json!({
                "can-update-membership": access.can_manage_membership(),
                "can-destroy": access.can_manage_teams() && !owners,
                "can-update-organization-access": access.can_manage_teams() && !owners,
                "can-update-api-token": access.can_manage_teams(),
                "can-update-visibility": access.can_manage_teams(),
                "can-update-name": access.can_manage_teams() && !owners,
                "can-update-sso-team-id": false,
                "can-update-member-token-management": access.can_manage_teams(),
                "can-view-api-token": access.can_manage_teams(),
            }),
        )
        .relationship(
            "organization",
            Relationship::one("organizations", &team.organization),
        )
        .relationship(
            "users",
            Relationship::many("users", view.user_ids.iter().cloned()),
        )
        .relationship(
            "organization-memberships",
            Relationship::many(
                "organization-memberships",
                view.membership_ids.iter().cloned(),
            ),
        )
        .relationship(
            "authentication-token",
            Relationship::links_only()
                .related(format!("/api/v2/teams/{}/authentication-token", team.id)),
        )
        .self_link(format!("/api/v2/teams/{}", team.id))
}
