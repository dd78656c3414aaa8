//! Who is calling, and what they may do in an organization.
//!
//! [`Caller`] is the extractor every authenticated handler starts with: it reads
//! `Authorization: Bearer <token>`, looks the token up by the SHA-256 of its secret, and
//! resolves its owner (a user, a team, or an organization). [`Caller::organization`] then
//! answers what the caller may do in one organization as an [`OrgAccess`], whose predicates
//! (`can_manage_membership`, ...) handlers check before touching data;
//! [`load_visible_workspace`] does the same for a workspace, for every workspace-scoped family.
//! [`SiteAdmin`] is the extractor of the site administration families (`admin/`,
//! `policy_versions.rs`): a site administrator, or 404.
//!
//! Where it sits: first extractor of every handler except those listed under
//! `// Unauthenticated:` in `routes.rs`; reads `store/tokens.rs`, `store/users.rs`,
//! `store/teams.rs`, `store/memberships.rs` and `store/workspaces.rs`, through the cache of
//! resolved callers and organization accesses in `auth_cache.rs`; writes nothing.
//!
//! The rules (TFE's, as far as the spec and reference state them):
//! - A missing, unknown or expired token, or one whose owner is gone, is 401. Anything a
//!   valid caller may not see is 404 ([`OrgAccess`] never exists for it).
//! - A user token acts as the user: in an organization where the user's membership is
//!   `active`, with the union of the `organization-access` of the user's teams there; members
//!   of the owners team are owners. A site administrator is an owner of every organization.
//! - A team token acts as its team, in its organization only; the owners team's token is an
//!   owner.
//! - An organization token acts in its organization only: it may manage teams, memberships,
//!   workspaces and settings, but it is not an owner (it cannot issue organization tokens or
//!   delete the organization) and it cannot create configuration versions or runs
//!   ([`Caller::can_create_configuration_versions`]).

use std::ops::Deref;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use http::request::Parts;

use crate::auth_cache::Epoch;
use crate::store::Stored;
use crate::store::memberships::{MembershipStatus, load_user_membership};
use crate::store::organizations::{OrganizationRecord, load_organization};
use crate::store::teams::{OrganizationAccess, TeamRecord, load_team};
use crate::store::tokens::{TokenOwner, TokenRecord, load_token_by_hash};
use crate::store::users::{UserRecord, load_user};
use crate::store::workspaces::{WorkspaceRecord, load_workspace};
use crate::{Error, State, ids};

/// The authenticated caller of a request: shared, since the auth cache hands the same one to
/// every request of the token (a clone is a reference count, not its records).
#[derive(Debug, Clone)]
pub(crate) struct Caller(Arc<CallerRecords>);

/// What a [`Caller`] is made of (read through `Deref`).
#[derive(Debug)]
pub(crate) struct CallerRecords {
    pub(crate) token: TokenRecord,
    pub(crate) subject: Subject,
    /// The auth cache's epoch this was read at (`auth_cache.rs`): an organization access is
    /// cached only when it is read at the same one, so it never outlives the caller's records.
    epoch: Epoch,
}

/// Whom the token speaks for.
#[derive(Debug, Clone)]
pub(crate) enum Subject {
    User(UserRecord),
    Team(TeamRecord),
    Organization(String),
}

impl Deref for Caller {
    type Target = CallerRecords;

    fn deref(&self) -> &CallerRecords {
        &self.0
    }
}

impl FromRequestParts<State> for Caller {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &State) -> Result<Caller, Error> {
        if let Some(ResolvedCaller(resolved)) = parts.extensions.remove::<ResolvedCaller>() {
            return resolved.ok_or(Error::Unauthorized);
        }
        let secret = http_kit::bearer_token(&parts.headers).ok_or(Error::Unauthorized)?;
        Caller::resolve(state, secret)
            .await?
            .ok_or(Error::Unauthorized)
    }
}

/// A caller who is a site administrator; anyone else is answered 404 (TFE hides its admin
/// API), before the body is read when this comes first in a handler's extractors.
#[derive(Debug, Clone)]
pub(crate) struct SiteAdmin;

impl FromRequestParts<State> for SiteAdmin {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &State) -> Result<SiteAdmin, Error> {
        let caller = Caller::from_request_parts(parts, state).await?;
        caller.require_site_admin()?;
        Ok(SiteAdmin)
    }
}

/// The bearer token's resolution, left in the request's extensions by the rate limiter
/// (`rate_limit.rs`) so the [`Caller`] extractor does not look the token up again.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedCaller(pub(crate) Option<Caller>);

/// The caller when a bearer token was sent, `None` when none was; an invalid token is still
/// a 401. For endpoints that accept another proof (an invitation token).
#[derive(Debug, Clone)]
pub(crate) struct MaybeCaller(pub(crate) Option<Caller>);

impl FromRequestParts<State> for MaybeCaller {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &State) -> Result<MaybeCaller, Error> {
        if !parts.headers.contains_key(http::header::AUTHORIZATION) {
            return Ok(MaybeCaller(None));
        }
        Caller::from_request_parts(parts, state)
            .await
            .map(|caller| MaybeCaller(Some(caller)))
    }
}

impl Caller {
    /// The caller a token secret speaks for; `None` when it is unknown, expired, or its owner
    /// is gone.
    pub(crate) async fn resolve(state: &State, secret: &str) -> Result<Option<Caller>, Error> {
        if let Some(resolved) = Caller::resolve_cached(state, secret) {
            return Ok(resolved);
        }
        let cache = state.auth_cache();
        // Read before the store, so a write landing meanwhile outdates what is stored here.
        let epoch = cache.epoch();
        let caller = Caller::read(state, secret, epoch).await?;
        if let Some(caller) = &caller {
            cache.put_caller(secret, epoch, caller);
        }
        Ok(Caller::unexpired(state, caller))
    }

    /// [`Caller::resolve`] when the cache can answer without the store (no await): `None`
    /// when the store must be read.
    pub(crate) fn resolve_cached(state: &State, secret: &str) -> Option<Option<Caller>> {
        let cache = state.auth_cache();
        let caller = cache.caller(secret, cache.epoch())?;
        Some(Caller::unexpired(state, Some(caller)))
    }

    /// Expiry moves with the clock, not the store: checked on every use.
    fn unexpired(state: &State, caller: Option<Caller>) -> Option<Caller> {
        let now = state.now_ms();
        caller.filter(|caller| caller.token.expired_at_ms.is_none_or(|at| at > now))
    }

    /// [`Caller::resolve`] from the store.
    async fn read(state: &State, secret: &str, epoch: Epoch) -> Result<Option<Caller>, Error> {
        let storage = state.storage();
        let Some(token) = load_token_by_hash(storage, &ids::hash_secret(secret)).await? else {
            return Ok(None);
        };
        let token = token.record;
        let subject = match &token.owner {
            TokenOwner::User { user_id } => match load_user(storage, user_id).await? {
                Some(user) => Subject::User(user.record),
                None => return Ok(None),
            },
            TokenOwner::Team { team_id, .. } => match load_team(storage, team_id).await? {
                Some(team) => Subject::Team(team.record),
                None => return Ok(None),
            },
            TokenOwner::Organization { organization } => {
                if load_organization(storage, organization).await?.is_none() {
                    return Ok(None);
                }
                Subject::Organization(organization.clone())
            }
        };
        Ok(Some(Caller(Arc::new(CallerRecords {
            token,
            subject,
            epoch,
        }))))
    }

    /// The user behind a user token.
    pub(crate) fn user(&self) -> Option<&UserRecord> {
        match &self.subject {
            Subject::User(user) => Some(user),
            Subject::Team(_) | Subject::Organization(_) => None,
        }
    }

    /// The user behind a user token, or 404 for team and organization tokens.
    pub(crate) fn require_user(&self) -> Result<&UserRecord, Error> {
        self.user().ok_or(Error::NotFound)
    }

    pub(crate) fn is_site_admin(&self) -> bool {
        self.user().is_some_and(|user| user.is_admin)
    }

    /// 404 unless the caller is a site administrator (TFE hides admin endpoints).
    pub(crate) fn require_site_admin(&self) -> Result<(), Error> {
        if self.is_site_admin() {
            Ok(())
        } else {
            Err(Error::NotFound)
        }
    }

    /// Whether this kind of token may create configuration versions (and runs): user and team
    /// tokens may, organization tokens may not (TFE's rule).
    pub(crate) fn can_create_configuration_versions(&self) -> bool {
        !matches!(self.subject, Subject::Organization(_))
    }

    /// Whether the caller may create organizations: site administrators, and any user when
    /// the general setting `limit-user-organization-creation` is off (`limited` false; on by
    /// default, as on TFE).
    pub(crate) fn can_create_organizations(&self, limited: bool) -> bool {
        self.is_site_admin() || (!limited && self.user().is_some())
    }

    /// What the caller may do in organization `name`; 404 when it does not exist or the
    /// caller has no access to it.
    pub(crate) async fn organization(&self, state: &State, name: &str) -> Result<OrgAccess, Error> {
        self.try_organization(state, name)
            .await?
            .ok_or(Error::NotFound)
    }

    /// Like [`Caller::organization`], `None` instead of 404.
    pub(crate) async fn try_organization(
        &self,
        state: &State,
        name: &str,
    ) -> Result<Option<OrgAccess>, Error> {
        let cache = state.auth_cache();
        // The caller's own records must be as current as the access read now.
        let epoch = cache.epoch();
        if epoch != self.epoch {
            return self.read_organization(state, name).await;
        }
        if let Some(access) = cache.access(&self.token.id, name, epoch) {
            return Ok(Some(access));
        }
        let access = self.read_organization(state, name).await?;
        if let Some(access) = &access {
            cache.put_access(&self.token.id, name, epoch, access);
        }
        Ok(access)
    }

    /// [`Caller::try_organization`] from the store.
    async fn read_organization(
        &self,
        state: &State,
        name: &str,
    ) -> Result<Option<OrgAccess>, Error> {
        let storage = state.storage();
        let Some(organization) = load_organization(storage, name).await? else {
            return Ok(None);
        };
        let revision = organization.revision;
        let organization = organization.record;
        let access = match &self.subject {
            Subject::Organization(own) => (own == name).then(|| Access {
                role: Role::OrganizationToken,
                permissions: OrganizationAccess::all(),
                team_ids: Vec::new(),
                organization,
                revision,
            }),
            Subject::Team(team) => (team.organization == name).then(|| {
                let owner = team.id == organization.owners_team_id;
                Access {
                    role: if owner { Role::Owner } else { Role::Member },
                    permissions: if owner {
                        OrganizationAccess::all()
                    } else {
                        team.organization_access
                    },
                    team_ids: vec![team.id.clone()],
                    organization,
                    revision,
                }
            }),
            Subject::User(user) => {
                let membership = load_user_membership(storage, &user.id, name).await?;
                let team_ids = match membership {
                    Some(m) if m.record.status == MembershipStatus::Active => {
                        Some(m.record.team_ids)
                    }
                    _ => None,
                };
                let active = team_ids.is_some();
                let team_ids = team_ids.unwrap_or_default();
                if user.is_admin {
                    Some(Access {
                        role: Role::SiteAdmin,
                        permissions: OrganizationAccess::all(),
                        team_ids,
                        organization,
                        revision,
                    })
                } else if !active {
                    None
                } else if team_ids.contains(&organization.owners_team_id) {
                    Some(Access {
                        role: Role::Owner,
                        permissions: OrganizationAccess::all(),
                        team_ids,
                        organization,
                        revision,
                    })
                } else {
                    let mut permissions = OrganizationAccess::default();
                    for team_id in &team_ids {
                        if let Some(team) = load_team(storage, team_id).await? {
                            permissions = permissions.union(team.record.organization_access);
                        }
                    }
                    Some(Access {
                        role: Role::Member,
                        permissions,
                        team_ids,
                        organization,
                        revision,
                    })
                }
            }
        };
        Ok(access.map(OrgAccess::from))
    }
}

/// How the caller relates to an organization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// A site administrator (acts as an owner everywhere).
    SiteAdmin,
    /// A member of the owners team, or the owners team's token.
    Owner,
    /// The organization's token.
    OrganizationToken,
    /// Any other active member, or another team's token.
    Member,
}

/// What a caller may do in one organization: shared, as [`Caller`] (the auth cache keeps one
/// per token and organization).
#[derive(Debug, Clone)]
pub(crate) struct OrgAccess(Arc<Access>);

impl Deref for OrgAccess {
    type Target = Access;

    fn deref(&self) -> &Access {
        &self.0
    }
}

impl From<Access> for OrgAccess {
    fn from(access: Access) -> OrgAccess {
        OrgAccess(Arc::new(access))
    }
}

/// What an [`OrgAccess`] is made of (read through `Deref`).
#[derive(Debug)]
pub(crate) struct Access {
    pub(crate) organization: OrganizationRecord,
    /// The mod revision the organization was read at: writes that add to the organization
    /// (teams, memberships, workspaces) compare it, so they fail once a delete has begun.
    pub(crate) revision: storage::Revision,
    pub(crate) role: Role,
    /// The union of the caller's teams' `organization-access` (everything for owners, site
    /// administrators and the organization token).
    pub(crate) permissions: OrganizationAccess,
    /// The caller's teams in this organization (the team itself for a team token).
    pub(crate) team_ids: Vec<String>,
}

impl OrgAccess {
    /// Owners team member, owners team token, or site administrator.
    pub(crate) fn is_owner(&self) -> bool {
        matches!(self.role, Role::Owner | Role::SiteAdmin)
    }

    pub(crate) fn is_organization_token(&self) -> bool {
        self.role == Role::OrganizationToken
    }

    /// Owners team, owners team token, organization token, or `manage-membership`.
    pub(crate) fn can_manage_membership(&self) -> bool {
        self.is_owner() || self.is_organization_token() || self.permissions.manage_membership
    }

    /// Create, update and delete teams and their organization access.
    pub(crate) fn can_manage_teams(&self) -> bool {
        self.is_owner() || self.is_organization_token() || self.permissions.manage_teams
    }

    /// See teams with `visibility: secret` the caller is not in.
    pub(crate) fn can_see_secret_teams(&self) -> bool {
        self.can_manage_teams()
            || self.can_manage_membership()
            || self.permissions.access_secret_teams
    }

    pub(crate) fn can_manage_workspaces(&self) -> bool {
        self.is_owner() || self.is_organization_token() || self.permissions.manage_workspaces
    }

    pub(crate) fn can_read_workspaces(&self) -> bool {
        self.can_manage_workspaces() || self.permissions.read_workspaces
    }

    /// Update the organization's settings.
    pub(crate) fn can_update_organization(&self) -> bool {
        self.is_owner() || self.is_organization_token()
    }

    /// Delete the organization, issue or revoke its token: owners only.
    pub(crate) fn can_destroy_organization(&self) -> bool {
        self.is_owner()
    }

    /// `Ok` when `allowed`, else 404 (TFE's answer to "you may not").
    pub(crate) fn check(allowed: bool) -> Result<(), Error> {
        if allowed {
            Ok(())
        } else {
            Err(Error::NotFound)
        }
    }
}

/// Whether the caller may queue plans and runs and upload configuration in this organization.
pub(crate) fn can_queue_runs(caller: &Caller, access: &OrgAccess) -> bool {
    access.can_manage_workspaces() && caller.can_create_configuration_versions()
}

/// The workspace `id` and the caller's access to its organization; 404 when it does not exist
/// or the caller may not read it.
pub(crate) async fn load_visible_workspace(
    state: &State,
    caller: &Caller,
    id: &str,
) -> Result<(Stored<WorkspaceRecord>, OrgAccess), Error> {
    let workspace = load_workspace(state.storage(), id)
        .await?
        .ok_or(Error::NotFound)?;
    let access = caller
        .organization(state, &workspace.record.organization)
        .await?;
    OrgAccess::check(access.can_read_workspaces())?;
    Ok((workspace, access))
}
