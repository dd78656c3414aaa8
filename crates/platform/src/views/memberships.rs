//! The `organization-memberships` resource.
//!
//! Where it sits: rendered by `memberships.rs` and `invitations.rs`, and included by teams
//! (`include=organization-memberships`).
//!
//! Invariants: the `teams` relationship lists the user's teams in the membership's
//! organization, from the membership record alone. [`MembershipView`] (the list page's typed
//! rendering, serialized without `Value` maps) serializes to the same JSON value as
//! [`membership_resource`] (tested below).

use jsonapi::{Relationship, Resource, SelfLink, ToMany, ToOne};
use serde::Serialize;

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

/// The `organization-memberships` resource as a typed struct: what [`membership_resource`]
/// renders, serialized straight to bytes (the membership list page).
#[derive(Debug, Serialize)]
pub(crate) struct MembershipView<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    attributes: MembershipAttributes<'a>,
    relationships: MembershipRelationships<'a>,
    links: SelfLink,
}

#[derive(Debug, Serialize)]
struct MembershipAttributes<'a> {
    status: &'static str,
    email: &'a str,
    #[serde(rename = "created-at")]
    created_at: String,
}

#[derive(Debug, Serialize)]
struct MembershipRelationships<'a> {
    teams: ToMany<'a, String>,
    user: ToOne<'a>,
    organization: ToOne<'a>,
}

impl<'a> MembershipView<'a> {
    pub(crate) fn new(membership: &'a MembershipRecord) -> MembershipView<'a> {
        MembershipView {
            id: &membership.id,
            kind: "organization-memberships",
            attributes: MembershipAttributes {
                status: membership.status.as_str(),
                email: &membership.email,
                created_at: ids::format_time(membership.created_at_ms),
            },
            relationships: MembershipRelationships {
                teams: ToMany::new("teams", membership.team_ids.as_slice()),
                user: ToOne::new("users", &membership.user_id),
                organization: ToOne::new("organizations", &membership.organization),
            },
            links: SelfLink {
                this: format!("/api/v2/organization-memberships/{}", membership.id),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memberships::MembershipStatus;

    #[test]
    fn typed_view_serializes_like_the_resource() {
        for (status, team_ids) in [
            (MembershipStatus::Invited, vec![]),
            (
                MembershipStatus::Active,
                vec!["team-a".to_owned(), "team-b".to_owned()],
            ),
        ] {
            let membership = MembershipRecord {
                version: 1,
                id: "ou-1".to_owned(),
                organization: "acme".to_owned(),
                user_id: "user-1".to_owned(),
                status,
                email: "dev@example.com".to_owned(),
                username: Some("dev".to_owned()),
                created_at_ms: 1_692_830_064_561,
                seq: 7,
                team_ids,
                invitation_hash: None,
            };
            let typed = serde_json::to_value(MembershipView::new(&membership)).unwrap();
            let resource =
                serde_json::to_value(membership_resource(&membership, &membership.team_ids))
                    .unwrap();
            assert_eq!(typed, resource);
        }
    }
}
