//! The `organizations` resource and its `entitlement-sets`.
//!
//! Where it sits: rendered by `organizations.rs` and included by workspaces
//! (`include=organization`).
//!
//! Invariant: `permissions` are what the caller's [`OrgAccess`] allows.

use jsonapi::{Relationship, Resource};
use serde_json::json;

use crate::auth::OrgAccess;
use crate::ids;
use crate::store::organizations::OrganizationRecord;

/// The `organizations` resource; `permissions` as `access` allows.
pub(crate) fn organization_resource(
    organization: &OrganizationRecord,
    access: &OrgAccess,
) -> Resource {
    let name = &organization.name;
    Resource::new("organizations", name)
        .attribute("name", name)
        .attribute("external-id", &organization.external_id)
        .attribute("created-at", ids::format_time(organization.created_at_ms))
        .attribute("email", &organization.email)
        .attribute("session-timeout", organization.session_timeout)
        .attribute("session-remember", organization.session_remember)
        .attribute(
            "collaborator-auth-policy",
            &organization.collaborator_auth_policy,
        )
        .attribute("plan-expired", false)
        .attribute("plan-expires-at", None::<String>)
        .attribute("plan-is-trial", false)
        .attribute("plan-is-enterprise", true)
        .attribute(
            "cost-estimation-enabled",
            organization.cost_estimation_enabled,
        )
        .attribute(
            "send-passing-statuses-for-untriggered-speculative-plans",
            false,
        )
        .attribute(
            "allow-force-delete-workspaces",
            organization.allow_force_delete_workspaces,
        )
        .attribute("assessments-enforced", organization.assessments_enforced)
        .attribute(
            "default-execution-mode",
            &organization.default_execution_mode,
        )
        .attribute("saml-enabled", false)
        .attribute("two-factor-conformant", true)
        .attribute("fair-run-queuing-enabled", true)
        .attribute(
            "permissions",
            json!({
                "can-update": access.can_update_organization(),
                "can-destroy": access.can_destroy_organization(),
                "can-access-via-teams": true,
                "can-create-module": access.is_owner(),
                "can-create-team": access.can_manage_teams(),
                "can-create-workspace": access.can_manage_workspaces(),
                "can-manage-users": access.can_manage_membership(),
                "can-manage-subscription": false,
                "can-manage-sso": false,
                "can-update-oauth": access.can_update_organization(),
                "can-update-sentinel": access.can_update_organization(),
                "can-update-ssh-keys": access.can_update_organization(),
                "can-update-api-token": access.can_destroy_organization(),
                "can-traverse": true,
                "can-start-trial": false,
                "can-update-agent-pools": access.can_update_organization(),
                "can-manage-tags": access.can_manage_workspaces(),
                "can-manage-varsets": access.can_manage_workspaces(),
                "can-read-varsets": true,
                "can-manage-public-providers": false,
                "can-create-provider": access.is_owner(),
                "can-manage-public-modules": false,
                "can-manage-custom-providers": false,
                "can-manage-run-tasks": access.is_owner(),
                "can-read-run-tasks": true,
                "can-create-project": access.can_manage_workspaces(),
            }),
        )
        .relationship(
            "authentication-token",
            Relationship::links_only()
                .related(format!("/api/v2/organizations/{name}/authentication-token")),
        )
        .relationship(
            "entitlement-set",
            Relationship::one("entitlement-sets", &organization.external_id)
                .related(format!("/api/v2/organizations/{name}/entitlement-set")),
        )
        .self_link(format!("/api/v2/organizations/{name}"))
}

/// The `entitlement-sets` resource of `organization`: everything this server implements is
/// enabled; `user_limit` is the configured member limit.
pub(crate) fn entitlements_resource(
    organization: &OrganizationRecord,
    user_limit: usize,
) -> Resource {
    Resource::new("entitlement-sets", &organization.external_id)
        .attribute("operations", true)
        .attribute("private-module-registry", true)
        .attribute("sentinel", false)
        .attribute("run-tasks", false)
        .attribute("state-storage", true)
        .attribute("teams", true)
        .attribute("vcs-integrations", false)
        .attribute("usage-reporting", false)
        .attribute("user-limit", user_limit)
        .attribute("self-serve-billing", false)
        .attribute("audit-logging", false)
        .attribute("agents", false)
        .attribute("sso", false)
        .self_link(format!(
            "/api/v2/entitlement-sets/{}",
            organization.external_id
        ))
}
