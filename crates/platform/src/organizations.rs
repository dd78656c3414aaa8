//! Organizations: `GET/POST /api/v2/organizations`, `GET/PATCH/DELETE
//! /api/v2/organizations/:name`, and `GET /api/v2/organizations/:name/entitlement-set`.
//!
//! Where it sits: handlers called from `routes.rs`; access through `auth.rs`; records in
//! `store/organizations.rs`.
//!
//! Invariants:
//! - An organization is created in one transaction with its owners team (all permissions),
//!   the creator's active membership and the creator's place in the owners team.
//! - Organization names are `[A-Za-z0-9_-]`, at most 100 characters, unique, and never change
//!   (a PATCH with another name is a 422: renaming would move every key of the organization).
//! - Only site administrators create organizations (TFE's default
//!   `limit-user-organization-creation: true`); only user tokens can, since the creator must
//!   join the owners team.

use axum::extract::{Path, State as AxumState};
use axum::response::Response;
use jsonapi::Document;
use storage::{Compare, Txn};

use crate::auth::{Caller, OrgAccess, Subject};
use crate::render::{JsonApi, no_content, paged};
use crate::request::{Body, Query};
use crate::store::memberships::{
    MembershipRecord, MembershipStatus, StatusCounts, create_ops as create_membership_ops,
    initial_counts_op, next_seq,
};
use crate::store::organizations::{
    OrganizationRecord, delete_organization_ops, load_organization, load_organizations,
    organization_key,
};
use crate::store::teams::{
    OWNERS_TEAM_NAME, OrganizationAccess, TeamRecord, add_member_op, org_team_key, team_key,
    team_name_key,
};
use crate::store::{self, IdRef, MAX_ATTEMPTS, RECORD_VERSION, commit, put};
use crate::views::organizations::{entitlements_resource, organization_resource};
use crate::{Error, State, ids};

const EXECUTION_MODES: &[&str] = &["remote", "local", "agent"];
const AUTH_POLICIES: &[&str] = &["password", "two_factor_mandatory"];

/// Whether `name` may name an organization.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether `email` looks like an address (one `@`, something on both sides, a dot after it).
pub(crate) fn valid_email(email: &str) -> bool {
    let Some((local, domain)) = email.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !domain.contains('@')
        && email.len() <= 254
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// `GET /api/v2/organizations`: the organizations the caller can access (all of them for a
/// site administrator), by name, paged.
pub(crate) async fn list_organizations(
    AxumState(state): AxumState<State>,
    caller: Caller,
    query: Query,
) -> Result<JsonApi, Error> {
    let page = query.page(jsonapi::DEFAULT_PAGE_SIZE)?;
    let names: Vec<String> = match &caller.subject {
        Subject::Organization(name) => vec![name.clone()],
        Subject::Team(team) => vec![team.organization.clone()],
        Subject::User(user) if user.is_admin => load_organizations(state.storage())
            .await?
            .into_iter()
            .map(|organization| organization.name)
            .collect(),
        Subject::User(user) => store::memberships::load_user_memberships(state.storage(), &user.id)
            .await?
            .into_iter()
            .filter(|m| m.record.status == MembershipStatus::Active)
            .map(|m| m.record.organization)
            .collect(),
    };
    let mut visible = Vec::new();
    for name in names {
        if let Some(access) = caller.try_organization(&state, &name).await? {
            visible.push(access);
        }
    }
    visible.sort_by(|a, b| a.organization.name.cmp(&b.organization.name));
    let document = paged(&visible, page, "/api/v2/organizations", &query, |access| {
        organization_resource(&access.organization, access)
    });
    Ok(JsonApi::ok(document))
}

/// `POST /api/v2/organizations`: 201; 422 for a bad or taken name or a bad email; 404 for a
/// caller who may not create organizations.
pub(crate) async fn create_organization(
    AxumState(state): AxumState<State>,
    caller: Caller,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["organizations"])?;
    let name = body.required_string("name")?;
    if !valid_name(&name) {
        return Err(Error::invalid_attribute(
            "name",
            "name may contain only letters, numbers, - and _, at most 100 characters",
        ));
    }
    let email = body.required_string("email")?;
    if !valid_email(&email) {
        return Err(Error::invalid_attribute("email", "email is invalid"));
    }
    let mut organization = OrganizationRecord {
        version: RECORD_VERSION,
        name: name.clone(),
        external_id: ids::new_id("org"),
        email,
        owners_team_id: ids::new_id("team"),
        created_at_ms: state.now_ms(),
        session_timeout: None,
        session_remember: None,
        collaborator_auth_policy: "password".to_owned(),
        cost_estimation_enabled: false,
        default_execution_mode: "remote".to_owned(),
        assessments_enforced: false,
        allow_force_delete_workspaces: false,
        deleting: false,
    };
    apply_settings(&body, &mut organization)?;
    // The general setting `limit-user-organization-creation` (admin/general.rs), as stored now.
    let (general, _) = crate::store::site_settings::load_setting::<
        crate::store::site_settings::GeneralSettings,
    >(state.storage())
    .await?;
    if !caller.can_create_organizations(general.limit_user_organization_creation) {
        return Err(Error::NotFound);
    }
    let user = caller.require_user()?;

    let owners = TeamRecord {
        version: RECORD_VERSION,
        id: organization.owners_team_id.clone(),
        organization: name.clone(),
        name: OWNERS_TEAM_NAME.to_owned(),
        visibility: "organization".to_owned(),
        organization_access: OrganizationAccess::all(),
        sso_team_id: None,
        allow_member_token_management: true,
        created_at_ms: organization.created_at_ms,
    };
    let membership = MembershipRecord {
        version: RECORD_VERSION,
        id: ids::new_id("ou"),
        organization: name.clone(),
        user_id: user.id.clone(),
        status: MembershipStatus::Active,
        email: user.email.clone(),
        username: user.username.clone(),
        created_at_ms: organization.created_at_ms,
        seq: next_seq(),
        team_ids: vec![owners.id.clone()],
        invitation_hash: None,
    };
    let mut txn = Txn::new()
        .when(Compare::Missing(organization_key(&name)))
        .then(put(organization_key(&name), &organization)?)
        .then(put(team_key(&owners.id), &owners)?)
        .then(put(
            org_team_key(&name, &owners.id),
            &IdRef::new(&owners.id),
        )?)
        .then(put(
            team_name_key(&name, &owners.name),
            &IdRef::new(&owners.id),
        )?)
        .then(initial_counts_op(
            &name,
            StatusCounts::one(MembershipStatus::Active),
        )?);
    let (compares, ops) = create_membership_ops(&membership)?;
    txn.compares.extend(compares);
    txn.success.extend(ops);
    txn.success.push(add_member_op(&owners, &user.id)?);
    if !commit(state.storage(), txn).await? {
        return Err(Error::invalid_attribute(
            "name",
            "name has already been taken",
        ));
    }
    let access = caller.organization(&state, &name).await?;
    Ok(JsonApi::created(Document::one(organization_resource(
        &access.organization,
        &access,
    ))))
}

/// Applies the settable attributes of `body` to `organization` (422 on a bad value).
fn apply_settings(body: &Body, organization: &mut OrganizationRecord) -> Result<(), Error> {
    if let Some(email) = body.string("email")? {
        if !valid_email(&email) {
            return Err(Error::invalid_attribute("email", "email is invalid"));
        }
        organization.email = email;
    }
    if body.has_attribute("session-timeout")? {
        organization.session_timeout = body.integer("session-timeout")?;
    }
    if body.has_attribute("session-remember")? {
        organization.session_remember = body.integer("session-remember")?;
    }
    if let Some(policy) = body.string("collaborator-auth-policy")? {
        if !AUTH_POLICIES.contains(&policy.as_str()) {
            return Err(Error::invalid_attribute(
                "collaborator-auth-policy",
                "collaborator-auth-policy must be password or two_factor_mandatory",
            ));
        }
        organization.collaborator_auth_policy = policy;
    }
    if let Some(enabled) = body.bool("cost-estimation-enabled")? {
        organization.cost_estimation_enabled = enabled;
    }
    if let Some(mode) = body.string("default-execution-mode")? {
        if !EXECUTION_MODES.contains(&mode.as_str()) {
            return Err(Error::invalid_attribute(
                "default-execution-mode",
                "default-execution-mode must be remote, local or agent",
            ));
        }
        organization.default_execution_mode = mode;
    }
    if let Some(enforced) = body.bool("assessments-enforced")? {
        organization.assessments_enforced = enforced;
    }
    if let Some(allow) = body.bool("allow-force-delete-workspaces")? {
        organization.allow_force_delete_workspaces = allow;
    }
    Ok(())
}

/// `GET /api/v2/organizations/:name`: 200, or 404 when missing or not accessible.
pub(crate) async fn read_organization(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<JsonApi, Error> {
    let access = caller.organization(&state, &name).await?;
    Ok(JsonApi::ok(Document::one(organization_resource(
        &access.organization,
        &access,
    ))))
}

/// `PATCH /api/v2/organizations/:name`: owners and the organization token; omitted
/// attributes keep their values; a different `name` is a 422.
pub(crate) async fn update_organization(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(name): Path<String>,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["organizations"])?;
    let access = caller.organization(&state, &name).await?;
    OrgAccess::check(access.can_update_organization())?;
    if let Some(new_name) = body.string("name")?
        && new_name != name
    {
        return Err(Error::invalid_attribute(
            "name",
            "renaming an organization is not supported",
        ));
    }
    for _ in 0..MAX_ATTEMPTS {
        let stored = load_organization(state.storage(), &name)
            .await?
            .ok_or(Error::NotFound)?;
        let mut organization = stored.record.clone();
        apply_settings(&body, &mut organization)?;
        let txn = Txn::new()
            .when(Compare::ModRevision(
                organization_key(&name),
                stored.revision,
            ))
            .then(put(organization_key(&name), &organization)?);
        if commit(state.storage(), txn).await? {
            return Ok(JsonApi::ok(Document::one(organization_resource(
                &organization,
                &access,
            ))));
        }
    }
    Err(Error::Contention)
}

/// `DELETE /api/v2/organizations/:name`: owners only; removes the organization with its
/// teams, memberships and tokens; 204.
///
/// Two transactions: the first marks the organization `deleting` (so it disappears, and every
/// write that compared its revision, such as an invitation in flight, fails); the second
/// removes everything under it, read after the first committed, so nothing created
/// concurrently is left behind.
pub(crate) async fn delete_organization(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Response, Error> {
    let access = caller.organization(&state, &name).await?;
    OrgAccess::check(access.can_destroy_organization())?;
    let mut marked = false;
    for _ in 0..MAX_ATTEMPTS {
        let Some(stored) = load_organization(state.storage(), &name).await? else {
            return Err(Error::NotFound);
        };
        if stored.record.deleting {
            return Err(Error::NotFound);
        }
        let mut organization = stored.record;
        organization.deleting = true;
        let txn = Txn::new()
            .when(Compare::ModRevision(
                organization_key(&name),
                stored.revision,
            ))
            .then(put(organization_key(&name), &organization)?);
        if commit(state.storage(), txn).await? {
            marked = true;
            break;
        }
    }
    if !marked {
        return Err(Error::Contention);
    }
    let mut txn = Txn::new();
    txn.success = delete_organization_ops(state.storage(), &name).await?;
    commit(state.storage(), txn).await?;
    Ok(no_content())
}

/// `GET /api/v2/organizations/:name/entitlement-set`: everything this server implements is
/// enabled (Terraform CLI reads it before using an organization).
pub(crate) async fn read_entitlements(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<JsonApi, Error> {
    let access = caller.organization(&state, &name).await?;
    let resource = entitlements_resource(
        &access.organization,
        state.config().limits.max_organization_members,
    );
    Ok(JsonApi::ok(Document::one(resource)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_name_allows_letters_digits_dash_underscore() {
        assert!(valid_name("acme-corp_2"));
        assert!(!valid_name(""));
        assert!(!valid_name("a/b"));
        assert!(!valid_name("a b"));
        assert!(!valid_name(&"a".repeat(101)));
    }

    #[test]
    fn valid_email_needs_at_and_domain_dot() {
        assert!(valid_email("dev@example.com"));
        assert!(!valid_email("dev@example"));
        assert!(!valid_email("example.com"));
        assert!(!valid_email("a b@example.com"));
        assert!(!valid_email("@example.com"));
    }
}
