//! Teams: `GET/POST /api/v2/organizations/:name/teams`, `GET/PATCH/DELETE /api/v2/teams/:id`,
//! and team membership through `POST/DELETE /api/v2/teams/:id/relationships/users` (usernames)
//! and `…/relationships/organization-memberships` (membership ids).
//!
//! Where it sits: handlers called from `routes.rs`; access through `auth.rs`; records in
//! `store/teams.rs`; rendered by `views/teams.rs` (which memberships share for `include=teams`).
//!
//! Invariants:
//! - Team names are unique per organization (case-insensitively) and `[A-Za-z0-9_.-]`.
//! - The owners team cannot be deleted, renamed or given less than every permission, and
//!   keeps at least one member (422 otherwise).
//! - Only users with a membership of the team's organization (invited or active) can be team
//!   members; an invited user's teams take effect when the invitation is accepted.
//! - A secret team is seen only by its members and by callers who manage teams or membership
//!   or have `access-secret-teams`; anyone else gets 404.
//! - A list page reads the name index and the page's teams when the caller sees every team
//!   (`can_see_secret_teams`), and every team record otherwise (visibility is in the record).
//! - Managing teams needs `manage-teams` (or ownership, or the organization token); changing
//!   who is in a team needs `manage-membership` (the spec's membership rule).

use axum::extract::{Path, State as AxumState};
use axum::response::Response;
use jsonapi::{Document, Identifier};
use serde_json::{Map, Value};
use storage::{Compare, Op, Txn};

use crate::auth::{Caller, OrgAccess};
use crate::render::{JsonApi, no_content, page_document};
use crate::request::{Body, Query};
use crate::store::memberships::{
    MembershipRecord, changed_op, load_membership, load_user_membership, membership_key_of,
    update_ops,
};
use crate::store::organizations::organization_key;
use crate::store::teams::{
    OWNERS_TEAM_NAME, OrganizationAccess, TeamRecord, add_membership_op, delete_team_ops,
    load_team, load_team_member_ids, load_team_names, load_teams, org_team_key, remove_member_op,
    team_key, team_member_key, team_name_key,
};
use crate::store::users::load_user_by_username;
use crate::store::{IdRef, MAX_ATTEMPTS, RECORD_VERSION, Stored, commit, put};
use crate::views::memberships::membership_resource;
use crate::views::teams::{TeamView, team_resource};
use crate::views::users::user_resource;
use crate::{Error, State, ids};

const VISIBILITIES: &[&str] = &["secret", "organization"];
const INCLUDES: &[&str] = &["users", "organization-memberships"];

/// Whether `name` may name a team.
fn valid_team_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Whether `access` may see `team`.
pub(crate) fn team_visible(access: &OrgAccess, team: &TeamRecord) -> bool {
    team.visibility == "organization"
        || access.team_ids.contains(&team.id)
        || access.can_see_secret_teams()
}

/// The team `id` with the caller's access to its organization; 404 when missing or hidden.
async fn load_visible_team(
    state: &State,
    caller: &Caller,
    id: &str,
) -> Result<(Stored<TeamRecord>, OrgAccess), Error> {
    let team = load_team(state.storage(), id)
        .await?
        .ok_or(Error::NotFound)?;
    let access = caller
        .organization(state, &team.record.organization)
        .await?;
    if !team_visible(&access, &team.record) {
        return Err(Error::NotFound);
    }
    Ok((team, access))
}

/// Adds the `include`d users and memberships of `views` to `document`.
async fn include_related(
    state: &State,
    document: &mut Document,
    views: &[&TeamView],
    includes: &[String],
) -> Result<(), Error> {
    for view in views {
        if includes.iter().any(|name| name == "users") {
            for user_id in &view.user_ids {
                if let Some(user) = crate::store::users::load_user(state.storage(), user_id).await?
                {
                    document.include(user_resource(&user.record));
                }
            }
        }
        if includes
            .iter()
            .any(|name| name == "organization-memberships")
        {
            for membership_id in &view.membership_ids {
                if let Some(membership) = load_membership(state.storage(), membership_id).await? {
                    document.include(membership_resource(
                        &membership.record,
                        &membership.record.team_ids,
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `GET /api/v2/organizations/:name/teams`: the teams the caller may see, by name, paged;
/// `q` (name substring), `filter[names]` (comma list), `include=users,organization-memberships`.
pub(crate) async fn list_teams(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(name): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    let page = query.page(jsonapi::DEFAULT_PAGE_SIZE)?;
    let includes = query.includes(INCLUDES, &[])?;
    let access = caller.organization(&state, &name).await?;
    let names: Option<Vec<String>> = query
        .filter("names")
        .map(|raw| raw.split(',').map(|n| n.trim().to_lowercase()).collect());
    let needle = query.get("q").map(str::to_lowercase);
    let wanted = |lower: &str| {
        names
            .as_ref()
            .is_none_or(|names| names.iter().any(|name| name == lower))
            && needle
                .as_ref()
                .is_none_or(|needle| lower.contains(needle.as_str()))
    };
    let (total, page_teams) = if access.can_see_secret_teams() {
        // Every team is visible: filter and page the name index, read the page's teams only.
        let matching: Vec<String> = load_team_names(state.storage(), &name)
            .await?
            .into_iter()
            .filter(|(lower, _)| wanted(lower))
            .map(|(_, id)| id)
            .collect();
        let mut teams = Vec::new();
        for id in &matching[page.range(matching.len())] {
            if let Some(team) = load_team(state.storage(), id).await? {
                teams.push(team.record);
            }
        }
        (matching.len(), teams)
    } else {
        // Visibility is in each record: read them all.
        let mut views = Vec::new();
        for team in load_teams(state.storage(), &name).await? {
            if team_visible(&access, &team) && wanted(&team.name.to_lowercase()) {
                views.push(team);
            }
        }
        let range = page.range(views.len());
        (views.len(), views.drain(range).collect())
    };
    let mut loaded = Vec::new();
    for team in page_teams {
        loaded.push(TeamView::load(&state, team).await?);
    }
    let resources = loaded
        .iter()
        .map(|view| team_resource(view, &access))
        .collect();
    let path = format!("/api/v2/organizations/{name}/teams");
    let mut document = page_document(page, total, resources, &path, &query);
    include_related(
        &state,
        &mut document,
        &loaded.iter().collect::<Vec<_>>(),
        &includes,
    )
    .await?;
    Ok(JsonApi::ok(document))
}

/// Reads `organization-access` from `body` over `base` (422 pointing at a non-boolean member).
fn read_organization_access(
    body: &Body,
    base: OrganizationAccess,
) -> Result<OrganizationAccess, Error> {
    let Some(requested) = body.object("organization-access")? else {
        return Ok(base);
    };
    let mut current = serde_json::to_value(base).unwrap_or_else(|_| Value::Object(Map::new()));
    let Some(fields) = current.as_object_mut() else {
        return Ok(base);
    };
    for (key, value) in requested {
        let key = key.replace('_', "-");
        if !fields.contains_key(&key) {
            continue; // unknown permissions are ignored, like unknown attributes
        }
        let Value::Bool(flag) = value else {
            return Err(Error::invalid(
                format!("/data/attributes/organization-access/{key}"),
                format!("organization-access {key} must be a boolean"),
            ));
        };
        fields.insert(key, Value::Bool(*flag));
    }
    serde_json::from_value(current).map_err(|err| Error::Internal(err.to_string()))
}

fn read_visibility(body: &Body) -> Result<Option<String>, Error> {
    match body.string("visibility")? {
        Some(visibility) if !VISIBILITIES.contains(&visibility.as_str()) => Err(
            Error::invalid_attribute("visibility", "visibility must be secret or organization"),
        ),
        other => Ok(other),
    }
}

/// `POST /api/v2/organizations/:name/teams`: 201; 422 for a bad or taken name.
pub(crate) async fn create_team(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(name): Path<String>,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["teams"])?;
    let access = caller.organization(&state, &name).await?;
    OrgAccess::check(access.can_manage_teams())?;
    let team_name = body.required_string("name")?;
    if !valid_team_name(&team_name) {
        return Err(Error::invalid_attribute(
            "name",
            "name may contain only letters, numbers, -, _ and ., at most 100 characters",
        ));
    }
    let team = TeamRecord {
        version: RECORD_VERSION,
        id: ids::new_id("team"),
        organization: name.clone(),
        name: team_name.clone(),
        visibility: read_visibility(&body)?.unwrap_or_else(|| "secret".to_owned()),
        organization_access: read_organization_access(&body, OrganizationAccess::default())?,
        sso_team_id: body.string("sso-team-id")?,
        allow_member_token_management: body.bool("allow-member-token-management")?.unwrap_or(true),
        created_at_ms: state.now_ms(),
    };
    let txn = Txn::new()
        .when(Compare::ModRevision(
            organization_key(&name),
            access.revision,
        ))
        .when(Compare::Missing(team_name_key(&name, &team_name)))
        .then(put(team_key(&team.id), &team)?)
        .then(put(org_team_key(&name, &team.id), &IdRef::new(&team.id))?)
        .then(put(
            team_name_key(&name, &team_name),
            &IdRef::new(&team.id),
        )?);
    if !commit(state.storage(), txn).await? {
        if state
            .storage()
            .get(&team_name_key(&name, &team_name))
            .await?
            .is_some()
        {
            return Err(Error::invalid_attribute(
                "name",
                "name has already been taken",
            ));
        }
        return Err(Error::Contention);
    }
    let view = TeamView::load(&state, team).await?;
    Ok(JsonApi::created(Document::one(team_resource(
        &view, &access,
    ))))
}

/// `GET /api/v2/teams/:id`: 200 or 404; `include=users,organization-memberships`.
pub(crate) async fn read_team(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    let includes = query.includes(INCLUDES, &[])?;
    let (team, access) = load_visible_team(&state, &caller, &id).await?;
    let view = TeamView::load(&state, team.record).await?;
    let mut document = Document::one(team_resource(&view, &access));
    include_related(&state, &mut document, &[&view], &includes).await?;
    Ok(JsonApi::ok(document))
}

/// `PATCH /api/v2/teams/:id`: name, visibility, organization-access, sso-team-id,
/// allow-member-token-management; omitted attributes keep their values.
pub(crate) async fn update_team(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["teams"])?;
    for _ in 0..MAX_ATTEMPTS {
        let (stored, access) = load_visible_team(&state, &caller, &id).await?;
        OrgAccess::check(access.can_manage_teams())?;
        let old = stored.record.clone();
        let owners = old.id == access.organization.owners_team_id;
        let mut team = old.clone();
        if let Some(name) = body.string("name")? {
            if !valid_team_name(&name) {
                return Err(Error::invalid_attribute(
                    "name",
                    "name may contain only letters, numbers, -, _ and ., at most 100 characters",
                ));
            }
            if owners && name != OWNERS_TEAM_NAME {
                return Err(Error::invalid_attribute(
                    "name",
                    "the owners team cannot be renamed",
                ));
            }
            team.name = name;
        }
        if let Some(visibility) = read_visibility(&body)? {
            team.visibility = visibility;
        }
        team.organization_access = read_organization_access(&body, old.organization_access)?;
        if owners && team.organization_access != OrganizationAccess::all() {
            return Err(Error::invalid_attribute(
                "organization-access",
                "the owners team's organization access cannot be changed",
            ));
        }
        if body.has_attribute("sso-team-id")? {
            team.sso_team_id = body.string("sso-team-id")?;
        }
        if let Some(allow) = body.bool("allow-member-token-management")? {
            team.allow_member_token_management = allow;
        }
        let mut txn = Txn::new()
            .when(Compare::ModRevision(team_key(&id), stored.revision))
            .then(put(team_key(&id), &team)?);
        let renamed = team.name.to_lowercase() != old.name.to_lowercase();
        if renamed {
            txn = txn
                .when(Compare::Missing(team_name_key(
                    &team.organization,
                    &team.name,
                )))
                .then(Op::Delete {
                    key: team_name_key(&team.organization, &old.name),
                })
                .then(put(
                    team_name_key(&team.organization, &team.name),
                    &IdRef::new(&id),
                )?);
        }
        if commit(state.storage(), txn).await? {
            let view = TeamView::load(&state, team).await?;
            return Ok(JsonApi::ok(Document::one(team_resource(&view, &access))));
        }
        if renamed
            && state
                .storage()
                .get(&team_name_key(&team.organization, &team.name))
                .await?
                .is_some()
        {
            return Err(Error::invalid_attribute(
                "name",
                "name has already been taken",
            ));
        }
    }
    Err(Error::Contention)
}

/// `DELETE /api/v2/teams/:id`: 204; 422 for the owners team.
pub(crate) async fn delete_team(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Error> {
    for _ in 0..MAX_ATTEMPTS {
        let (team, access) = load_visible_team(&state, &caller, &id).await?;
        OrgAccess::check(access.can_manage_teams())?;
        if team.record.id == access.organization.owners_team_id {
            return Err(Error::Invalid {
                pointer: None,
                detail: "the owners team cannot be deleted".to_owned(),
            });
        }
        let organization = &team.record.organization;
        // Member changes rewrite the team record (see `change_members`), so comparing its
        // revision makes the member list read here the one the deletion applies to.
        let mut txn = Txn::new().when(Compare::ModRevision(team_key(&id), team.revision));
        txn.success = delete_team_ops(state.storage(), &id, organization).await?;
        // The team leaves its members' memberships in the same transaction (store invariant).
        for user_id in load_team_member_ids(state.storage(), &id).await? {
            if let Some(stored) =
                load_user_membership(state.storage(), &user_id, organization).await?
            {
                let mut after = stored.record.clone();
                after.leave_team(&id);
                txn = txn.when(Compare::ModRevision(
                    membership_key_of(&after),
                    stored.revision,
                ));
                txn.success.extend(update_ops(&stored.record, &after)?);
            }
        }
        // The members' pages show their teams (store/memberships.rs invariant).
        txn = txn.then(changed_op(organization));
        if commit(state.storage(), txn).await? {
            return Ok(no_content());
        }
    }
    Err(Error::Contention)
}

/// Resolves relationship identifiers to memberships of `organization` (each once): by
/// username (`type: users`) or by membership id (`type: organization-memberships`).
async fn resolve_members(
    state: &State,
    organization: &str,
    identifiers: &[Identifier],
    kind: &str,
) -> Result<Vec<Stored<MembershipRecord>>, Error> {
    let mut memberships: Vec<Stored<MembershipRecord>> = Vec::new();
    for (index, identifier) in identifiers.iter().enumerate() {
        let pointer = format!("/data/{index}");
        if identifier.kind != kind {
            return Err(Error::invalid(
                format!("{pointer}/type"),
                format!("type must be {kind}"),
            ));
        }
        let membership = if kind == "users" {
            match load_user_by_username(state.storage(), &identifier.id).await? {
                Some(user) => {
                    load_user_membership(state.storage(), &user.record.id, organization).await?
                }
                None => None,
            }
        } else {
            load_membership(state.storage(), &identifier.id)
                .await?
                .filter(|m| m.record.organization == organization)
        };
        let Some(membership) = membership else {
            return Err(Error::invalid(
                format!("{pointer}/id"),
                format!(
                    "{} is not a member of organization {organization}",
                    identifier.id
                ),
            ));
        };
        if !memberships
            .iter()
            .any(|m| m.record.id == membership.record.id)
        {
            memberships.push(membership);
        }
    }
    Ok(memberships)
}

/// Adds or removes team members; 204. Each changed membership's `team_ids` and the team's
/// member index change in one transaction, guarded by the membership's revision.
async fn change_members(
    state: &State,
    caller: &Caller,
    id: &str,
    body: &Body,
    kind: &str,
    add: bool,
) -> Result<Response, Error> {
    let identifiers = body.linkage_ids()?;
    for _ in 0..MAX_ATTEMPTS {
        let (team, access) = load_visible_team(state, caller, id).await?;
        OrgAccess::check(access.can_manage_membership())?;
        let team_revision = team.revision;
        let team = team.record;
        let memberships = resolve_members(state, &team.organization, &identifiers, kind).await?;
        // The team record is put back unchanged: its new revision makes a concurrent deletion
        // of the team (which compares it) re-read the members, and a deletion that came first
        // fails this compare.
        let mut txn = Txn::new()
            .when(Compare::ModRevision(
                organization_key(&team.organization),
                access.revision,
            ))
            .when(Compare::ModRevision(team_key(&team.id), team_revision))
            .then(put(team_key(&team.id), &team)?);
        let change = |txn: Txn, stored: &Stored<MembershipRecord>| -> Result<Txn, Error> {
            let mut after = stored.record.clone();
            let op = if add {
                after.join_team(&team.id);
                add_membership_op(&team, &after.user_id, &after.id)?
            } else {
                after.leave_team(&team.id);
                remove_member_op(&team.id, &after.user_id)
            };
            let mut txn = txn
                .when(Compare::ModRevision(
                    membership_key_of(&after),
                    stored.revision,
                ))
                .then(op);
            txn.success.extend(update_ops(&stored.record, &after)?);
            Ok(txn)
        };
        if add {
            for stored in memberships
                .iter()
                .filter(|m| !m.record.team_ids.contains(&team.id))
            {
                txn = change(txn, stored)?;
            }
        } else {
            let members = load_team_member_ids(state.storage(), &team.id).await?;
            let present: Vec<&Stored<MembershipRecord>> = memberships
                .iter()
                .filter(|m| members.contains(&m.record.user_id))
                .collect();
            if team.id == access.organization.owners_team_id
                && !members.is_empty()
                && present.len() == members.len()
            {
                return Err(Error::invalid(
                    "/data",
                    "the owners team must keep at least one member",
                ));
            }
            for stored in present {
                // A concurrent removal must not empty the owners team: each removal requires
                // the member to be there still (and the retry re-counts).
                txn = txn.when(Compare::Exists(team_member_key(
                    &team.id,
                    &stored.record.user_id,
                )));
                txn = change(txn, stored)?;
            }
        }
        // The members' pages show their teams (store/memberships.rs invariant).
        txn = txn.then(changed_op(&team.organization));
        if commit(state.storage(), txn).await? {
            return Ok(no_content());
        }
    }
    Err(Error::Contention)
}

/// `POST /api/v2/teams/:id/relationships/users` with `{"data":[{"type":"users","id":"<username>"}]}`.
pub(crate) async fn add_team_users(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    body: Body,
) -> Result<Response, Error> {
    change_members(&state, &caller, &id, &body, "users", true).await
}

/// `DELETE /api/v2/teams/:id/relationships/users` with the same body.
pub(crate) async fn remove_team_users(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    body: Body,
) -> Result<Response, Error> {
    change_members(&state, &caller, &id, &body, "users", false).await
}

/// `POST /api/v2/teams/:id/relationships/organization-memberships` with membership ids.
pub(crate) async fn add_team_memberships(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    body: Body,
) -> Result<Response, Error> {
    change_members(
        &state,
        &caller,
        &id,
        &body,
        "organization-memberships",
        true,
    )
    .await
}

/// `DELETE /api/v2/teams/:id/relationships/organization-memberships` with membership ids.
pub(crate) async fn remove_team_memberships(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    body: Body,
) -> Result<Response, Error> {
    change_members(
        &state,
        &caller,
        &id,
        &body,
        "organization-memberships",
        false,
    )
    .await
}
