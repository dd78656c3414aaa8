//! The `organization-memberships` resource.
//!
//! Where it sits: rendered by `memberships.rs` and `invitations.rs`, and included by teams
//! (`include=organization-memberships`).
//!
//! Invariant: the `teams` relationship lists the user's teams in the membership's
//! organization, from the membership record alone.

use jsonapi::{Relationship, Resource};

use crate::ids;
use crate::store::memberships::MembershipRecord;

/// The `organization-memberships` resource; `team_ids` are the user's teams in its organization.
pub(crate) fn membership_resource(membership: &MembershipRecord, team_ids: &[String]) -> Resource {
    Resource::new("organization-memberships", &membership.id)
        .attribute("status", membership.status.as_str())
        .attribute("email", &membership.email)
        .attribute("created-at", ids::format_time(membership.created_at_ms))
        .relationship(
            "teams",
            Relationship::many("teams", team_ids.iter().cloned()),
        )
        .relationship("user", Relationship::one("users", &membership.user_id))
        .relationship(
            "organization",
            Relationship::one("organizations", &membership.organization),
        )
        .self_link(format!(
            "/api/v2/organization-memberships/{}",
            membership.id
        ))
}
