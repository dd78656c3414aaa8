//! Organization memberships: invite (`POST /api/v2/organizations/:name/organization-memberships`),
//! list (`GET` on the same path), the caller's own (`GET /api/v2/organization-memberships`),
//! show and remove (`GET/DELETE /api/v2/organization-memberships/:id`), and invitation
//! acceptance (`POST /api/v2/organization-memberships/:id/actions/accept`, cairn's own).
//!
//! Where it sits: handlers called from `routes.rs`; access through `auth.rs`; records in
//! `store/memberships.rs` (and users and team members, written in the same transactions).
//!
//! Invariants:
//! - Invite: the caller may manage membership (owners team, owners team token, organization
//!   token, `manage-membership`); `email` is required and valid; at least one team of the
//!   organization is named; the organization is under `Limits::max_organization_members`
//!   (400 otherwise); a user with that email is reused, else one is created with a null
//!   username; the membership starts `invited` with its teams, and the answer is 201 with the
//!   user in `included` and, in top-level `meta.invitation`, the one-time invitation token
//!   and the accept path (only its SHA-256 is stored).
//! - When SMTP is enabled (`admin/smtp.rs`), the invitation is also mailed to the address,
//!   with the token and the accept path, before the answer; a failed delivery is logged only.
//! - Accept: see `invitations.rs`.
//! - Delete: 204; removing oneself from an organization one owns (owners team member) is 403,
//!   and so is removing the owners team's last member; anyone else needs membership
//!   management, or is removing themselves. Removal takes the user out of every team of the
//!   organization; a user created by an invitation who has no membership left is deleted.
//! - Lists are in creation order (`store/memberships.rs`: the key's `seq`, which never ties).
//! - `meta.status-counts` counts the memberships matching `q` and `filter[email]`, whatever
//!   `filter[status]` says (so the counts are the tabs of one search); `total` is their sum.
//! - A list page reads what the page needs: without `q` and `filter[email]`, the maintained
//!   status counts and a window of the ordered keys; with `filter[email]`, one lookup per
//!   address; only `q` (a substring) reads every membership, a chunk at a time, keeping the page.
//!   The page is rendered from typed views (`views::memberships::MembershipView`) straight to
//!   bytes, not through `jsonapi::Resource` maps.

use axum::extract::{Path, State as AxumState};
use axum::response::Response;
use jsonapi::{Document, ListDocument, ListMeta, Resource};
use serde::Serialize;
use serde_json::json;
use storage::{Compare, Op, Txn};

use crate::auth::{Caller, OrgAccess};
use crate::render::{JsonApi, no_content};
use crate::request::{Body, Query};
use crate::store::memberships::{
    Counts, MembershipRecord, MembershipStatus, StatusCounts, count_change, create_ops,
    load_counts, load_counts_and_change, load_membership, load_page, load_user_membership,
    load_user_memberships, membership_key_of, next_seq, remove_ops, user_memberships_prefix,
    visit_memberships,
};
use crate::store::organizations::organization_key;
use crate::store::teams::{
    TeamRecord, add_membership_op, load_team, load_team_member_ids, remove_member_op, team_key,
    team_member_key,
};
use crate::store::users::{
    UserRecord, create_user_ops, email_key, load_user, load_user_by_email, user_key,
};
use crate::store::{MAX_ATTEMPTS, RECORD_VERSION, Stored, commit, list_suffixes};
use crate::views::memberships::{MembershipView, membership_resource};
use crate::views::teams::{TeamView, team_resource};
use crate::views::users::user_resource;
use crate::{Error, State, ids, organizations};

const INCLUDES: &[&str] = &["user", "teams"];

/// Renders memberships with their teams, and the `include`d users and teams.
async fn render_memberships(
    state: &State,
    memberships: &[&MembershipRecord],
    includes: &[String],
) -> Result<(Vec<Resource>, Vec<Resource>), Error> {
    let resources = memberships
        .iter()
        .map(|membership| membership_resource(membership, &membership.team_ids))
        .collect();
    let included = render_included(state, memberships, includes).await?;
    Ok((resources, included))
}

/// The `include`d users and teams of `memberships`, each `(type, id)` once.
async fn render_included(
    state: &State,
    memberships: &[&MembershipRecord],
    includes: &[String],
) -> Result<Vec<Resource>, Error> {
    let mut included: Vec<Resource> = Vec::new();
    let include_user = includes.iter().any(|name| name == "user");
    let include_teams = includes.iter().any(|name| name == "teams");
    if !include_user && !include_teams {
        return Ok(included);
    }
    let seen = |included: &[Resource], kind: &str, id: &str| {
        included.iter().any(|r| r.kind == kind && r.id == id)
    };
    for membership in memberships.iter().copied() {
        if include_user
            && !seen(&included, "users", &membership.user_id)
            && let Some(user) = load_user(state.storage(), &membership.user_id).await?
        {
            included.push(user_resource(&user.record));
        }
        if include_teams {
            for team_id in &membership.team_ids {
                if seen(&included, "teams", team_id) {
                    continue;
                }
                if let Some(team) = load_team(state.storage(), team_id).await? {
                    included.push(team_stub(state, team.record).await?);
                }
            }
        }
    }
    Ok(included)
}

/// A team as included in a membership document (permissions as an organization member sees
/// them: none).
async fn team_stub(state: &State, team: TeamRecord) -> Result<Resource, Error> {
    let access = OrgAccess::from(crate::auth::Access {
        organization: crate::store::organizations::load_organization(
            state.storage(),
            &team.organization,
        )
        .await?
        .map(|stored| stored.record)
        .ok_or(Error::NotFound)?,
        revision: 0,
        role: crate::auth::Role::Member,
        permissions: Default::default(),
        team_ids: Vec::new(),
    });
    let view = TeamView::load(state, team).await?;
    Ok(team_resource(&view, &access))
}

fn document_with(resources: Document, included: Vec<Resource>) -> Document {
    let mut document = resources;
    for resource in included {
        document.include(resource);
    }
    document
}

/// Reads and checks the `teams` relationship of an invite: at least one team, each of
/// `organization`.
async fn invited_teams(
    state: &State,
    body: &Body,
    organization: &str,
) -> Result<Vec<TeamRecord>, Error> {
    let pointer = "/data/relationships/teams";
    let identifiers = body.relationship_ids("teams")?.unwrap_or_default();
    if identifiers.is_empty() {
        return Err(Error::invalid(pointer, "at least one team is required"));
    }
    let mut teams: Vec<TeamRecord> = Vec::new();
    for (index, identifier) in identifiers.iter().enumerate() {
        if identifier.kind != "teams" {
            return Err(Error::invalid(
                format!("{pointer}/data/{index}/type"),
                "type must be teams",
            ));
        }
        let team = load_team(state.storage(), &identifier.id)
            .await?
            .filter(|team| team.record.organization == organization)
            .ok_or_else(|| {
                Error::invalid(
                    format!("{pointer}/data/{index}/id"),
                    format!(
                        "team {} not found in organization {organization}",
                        identifier.id
                    ),
                )
            })?;
        if !teams.iter().any(|t| t.id == team.record.id) {
            teams.push(team.record);
        }
    }
    Ok(teams)
}

/// `POST /api/v2/organizations/:name/organization-memberships`: invite; see the module docs.
pub(crate) async fn create_membership(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(name): Path<String>,
    body: Body,
) -> Result<JsonApi, Error> {
    let access = caller.organization(&state, &name).await?;
    OrgAccess::check(access.can_manage_membership())?;
    body.expect_type(&["organization-memberships"])?;
    let email = body.required_string("email")?.trim().to_owned();
    if !organizations::valid_email(&email) {
        return Err(Error::invalid_attribute("email", "email is invalid"));
    }
    let teams = invited_teams(&state, &body, &name).await?;
    let limit = state.config().limits.max_organization_members;
    let invitation = ids::new_token_secret();
    for _ in 0..MAX_ATTEMPTS {
        let access = caller.organization(&state, &name).await?;
        // The maintained counts, not a count of the records: an invite costs the same in an
        // organization of any size.
        if load_counts(state.storage(), &name).await?.total() >= limit {
            return Err(Error::BadRequest {
                parameter: None,
                detail: format!("organization {name} has reached its limit of {limit} members"),
            });
        }
        let mut txn = Txn::new().when(Compare::ModRevision(
            organization_key(&name),
            access.revision,
        ));
        let user = match load_user_by_email(state.storage(), &email).await? {
            Some(user) => {
                if load_user_membership(state.storage(), &user.record.id, &name)
                    .await?
                    .is_some()
                {
                    return Err(Error::invalid_attribute(
                        "email",
                        format!("{email} is already a member of organization {name}"),
                    ));
                }
                txn = txn.when(Compare::ModRevision(
                    user_key(&user.record.id),
                    user.revision,
                ));
                user.record
            }
            None => {
                let user = UserRecord {
                    version: RECORD_VERSION,
                    id: ids::new_id("user"),
                    username: None,
                    email: email.clone(),
                    is_admin: false,
                    created_at_ms: state.now_ms(),
                };
                let (compares, ops) = create_user_ops(&user)?;
                txn.compares.extend(compares);
                txn.success.extend(ops);
                user
            }
        };
        let mut membership = MembershipRecord {
            version: RECORD_VERSION,
            id: ids::new_id("ou"),
            organization: name.clone(),
            user_id: user.id.clone(),
            status: MembershipStatus::Invited,
            email: user.email.clone(),
            username: user.username.clone(),
            created_at_ms: state.now_ms(),
            seq: next_seq(),
            team_ids: Vec::new(),
            invitation_hash: Some(ids::hash_secret(&invitation)),
        };
        for team in &teams {
            membership.join_team(&team.id);
            txn = txn
                .when(Compare::Exists(team_key(&team.id)))
                .then(add_membership_op(team, &user.id, &membership.id)?);
        }
        let (compares, ops) = create_ops(&membership)?;
        txn.compares.extend(compares);
        txn.success.extend(ops);
        // The counts are read and written under the organization's lock (`State::lock_counts`),
        // released before the mail goes out.
        let committed = {
            let _counts = state.lock_counts(&name).await;
            let (compare, op) = count_change(
                state.storage(),
                &name,
                StatusCounts::one(MembershipStatus::Invited),
            )
            .await?;
            txn = txn.when(compare).then(op);
            commit(state.storage(), txn).await?
        };
        if committed {
            send_invitation_mail(&state, &membership, &invitation).await;
            let mut document = Document::one(membership_resource(
                &membership,
                &membership.team_ids,
            ))
            .with_meta(
                "invitation",
                json!({
                    "token": invitation,
                    "accept-path": format!("/api/v2/organization-memberships/{}/actions/accept", membership.id),
                }),
            );
            document.include(user_resource(&user));
            return Ok(JsonApi::created(document));
        }
    }
    Err(Error::Contention)
}

/// Mails the invitation (its token and accept path) when SMTP is enabled, before the invite
/// is answered; a delivery failure is logged and does not undo the invite (the token is in
/// the answer too).
async fn send_invitation_mail(state: &State, membership: &MembershipRecord, invitation: &str) {
    use crate::store::site_settings::{CustomizationSettings, SmtpSettings, load_setting};
    let settings = async {
        let (smtp, _) = load_setting::<SmtpSettings>(state.storage()).await?;
        let (customization, _) = load_setting::<CustomizationSettings>(state.storage()).await?;
        Ok::<_, Error>((smtp, customization))
    }
    .await;
    let (smtp, customization) = match settings {
        Ok(settings) => settings,
        Err(err) => {
            tracing::warn!(error = %err, "reading the SMTP settings for an invitation failed");
            return;
        }
    };
    if !smtp.enabled {
        return;
    }
    let mail = crate::mail::Mail {
        to: membership.email.clone(),
        subject: format!(
            "You have been invited to the organization {}",
            membership.organization
        ),
        body: format!(
            "You have been invited to join the organization {organization}.\n\n\
             To accept, POST to /api/v2/organization-memberships/{id}/actions/accept with the \
             invitation token below in data.attributes.invitation-token (and a username, if \
             you have none yet).\n\nInvitation token: {invitation}\n",
            organization = membership.organization,
            id = membership.id,
        ),
    };
    if let Err(err) = crate::mail::send(
        &smtp,
        &customization,
        &mail,
        "email",
        state.config().smtp_timeout,
    )
    .await
    {
        tracing::warn!(membership = %membership.id, error = %err, "mailing an invitation failed");
    }
}

/// Whether `membership` matches `q` (username or email substring) and the email list.
fn matches_search(
    membership: &MembershipRecord,
    needle: Option<&str>,
    emails: Option<&[String]>,
) -> bool {
    let email = membership.email.to_lowercase();
    let by_query = needle.is_none_or(|needle| {
        email.contains(needle)
            || membership
                .username
                .as_ref()
                .is_some_and(|username| username.to_lowercase().contains(needle))
    });
    let by_email = emails.is_none_or(|emails| emails.contains(&email));
    by_query && by_email
}

/// `GET /api/v2/organizations/:name/organization-memberships`: any member may list; see the
/// module docs for `q`, `filter[status]`, `filter[email]` and `meta.status-counts`.
pub(crate) async fn list_memberships(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(name): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    let page = query.page(jsonapi::DEFAULT_PAGE_SIZE)?;
    let includes = query.includes(INCLUDES, &[])?;
    let status = match query.filter("status") {
        None => None,
        Some(raw) => Some(MembershipStatus::parse(raw).ok_or_else(|| {
            Error::bad_parameter(
                "filter[status]",
                "Invalid filter parameter: status must be invited or active",
            )
        })?),
    };
    let emails: Option<Vec<String>> = query.filter("email").map(|raw| {
        raw.split(',')
            .map(|email| email.trim().to_lowercase())
            .filter(|email| !email.is_empty())
            .collect()
    });
    let needle = query
        .get("q")
        .map(str::to_lowercase)
        .filter(|q| !q.is_empty());
    let access = caller.organization(&state, &name).await?;

    let search = Search {
        needle: needle.as_deref(),
        emails: emails.as_deref(),
        status,
    };
    // The plain page (no `q`, `filter[email]` or `include`) is the same for every caller: it
    // is cached, keyed by what it shows (see `page_cache`).
    let cache_key = (search.needle.is_none() && search.emails.is_none() && includes.is_empty())
        .then(|| page_cache::Key::new(&access, query.pairs()));
    // Read before the store: a write after it moves the epoch past what is kept under it.
    let epoch = state.auth_cache().epoch();
    if let Some(key) = &cache_key
        && let Some(json) = page_cache::get_at(key, epoch)
    {
        return Ok(JsonApi::ok_json(json));
    }
    let listed = match (search.needle, search.emails) {
        (None, None) => {
            let counts = load_counts_and_change(state.storage(), &name).await?;
            if let Some(key) = &cache_key
                && let Some(json) = page_cache::get(key, counts.changed, epoch)
            {
                return Ok(JsonApi::ok_json(json));
            }
            list_page(&state, &name, status, page, counts).await?
        }
        (_, Some(emails)) => list_by_emails(&state, &name, &search, emails, page).await?,
        (Some(_), None) => list_by_search(&state, &name, &search, page).await?,
    };
    // Typed rendering straight to bytes: no `Resource` maps for the page.
    let on_page: Vec<&MembershipRecord> = listed.page.iter().collect();
    let included = render_included(&state, &on_page, &includes).await?;
    let views: Vec<MembershipView<'_>> = listed.page.iter().map(MembershipView::new).collect();
    let path = format!("/api/v2/organizations/{name}/organization-memberships");
    let total = listed.total as u64;
    let counts = listed.counts;
    let document = ListDocument {
        data: &views,
        included: &included,
        links: page.page_links(&path, query.pairs(), total),
        meta: ListMeta {
            pagination: page.meta(total),
            extra: CountsMeta {
                status_counts: CountsView {
                    total: counts.total(),
                    active: counts.of(MembershipStatus::Active),
                    invited: counts.of(MembershipStatus::Invited),
                },
            },
        },
    };
    let json = bytes::Bytes::from(document.to_json());
    if let (Some(key), Some(changed)) = (cache_key, listed.changed) {
        page_cache::put(key, changed, epoch, json.clone());
    }
    Ok(JsonApi::ok_json(json))
}

/// Rendered plain pages of membership lists, so a page read again before its list changes
/// costs the caller's access check and one scan of the count keys, or nothing from the store
/// while the auth cache's epoch has not moved since (`auth_cache.rs`: every write to the
/// memberships or their counts moves it, on this server at once and from others through its
/// watch).
///
/// Invariants: an entry is keyed by the organization's `external-id` (random per creation,
/// so neither two organizations nor two stores in one process share a key), the organization
/// record's mod revision (a restore or an update of the organization rewrites it) and the
/// whole query (the page, `filter[status]` and the order of parameters the links repeat),
/// and it holds the revision of the list's last change it was rendered at
/// (`store::memberships::Counts::changed`, which every write that changes what a page shows
/// moves); a read at another revision is a miss and renders anew. The page is read after
/// that revision, so an entry is never older than its revision. An entry also holds the auth
/// cache epoch read before the last read that found it current; while the epoch is still that
/// one, no write to the memberships or their counts has been made since, and the entry is
/// served without the count scan. At most [`MAX_ENTRIES`] entries are kept (all are dropped
/// when full).
mod page_cache {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex, PoisonError};

    use crate::auth::OrgAccess;
    use crate::auth_cache::Epoch;

    /// The most rendered pages kept (a page of 100 memberships is ~40 KB).
    pub(super) const MAX_ENTRIES: usize = 512;

    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub(super) struct Key {
        organization: String,
        organization_revision: storage::Revision,
        query: Vec<(String, String)>,
    }

    impl Key {
        pub(super) fn new(access: &OrgAccess, query: &[(String, String)]) -> Key {
            Key {
                organization: access.organization.external_id.clone(),
                organization_revision: access.revision,
                query: query.to_vec(),
            }
        }
    }

    #[derive(Debug)]
    struct Entry {
        /// The list's last change the page was rendered at.
        changed: storage::Revision,
        /// The epoch read before the last read that found the page current.
        epoch: Epoch,
        json: bytes::Bytes,
    }

    static PAGES: LazyLock<Mutex<HashMap<Key, Entry>>> = LazyLock::new(Mutex::default);

    /// The page kept for `key` if nothing it shows can have changed since: the epoch is the
    /// one it was last found current under.
    pub(super) fn get_at(key: &Key, epoch: Epoch) -> Option<bytes::Bytes> {
        let pages = PAGES.lock().unwrap_or_else(PoisonError::into_inner);
        pages
            .get(key)
            .filter(|entry| entry.epoch.holds_at(epoch))
            .map(|entry| entry.json.clone())
    }

    /// The page rendered for `key` at the list's last change `changed`, if kept; it is then
    /// current under `epoch` (read before `changed` was).
    pub(super) fn get(key: &Key, changed: storage::Revision, epoch: Epoch) -> Option<bytes::Bytes> {
        let mut pages = PAGES.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = pages
            .get_mut(key)
            .filter(|entry| entry.changed == changed)?;
        entry.epoch = epoch;
        Some(entry.json.clone())
    }

    /// Keeps `json`, the page of `key` rendered at the list's last change `changed`, read
    /// after `epoch` was.
    pub(super) fn put(key: Key, changed: storage::Revision, epoch: Epoch, json: bytes::Bytes) {
        let mut pages = PAGES.lock().unwrap_or_else(PoisonError::into_inner);
        if pages.len() >= MAX_ENTRIES && !pages.contains_key(&key) {
            pages.clear();
        }
        pages.insert(
            key,
            Entry {
                changed,
                epoch,
                json,
            },
        );
    }
}

/// A membership list's own `meta` member: `status-counts`.
#[derive(Debug, Serialize)]
struct CountsMeta {
    #[serde(rename = "status-counts")]
    status_counts: CountsView,
}

#[derive(Debug, Serialize)]
struct CountsView {
    total: usize,
    active: usize,
    invited: usize,
}

/// The filters of a membership list besides paging.
#[derive(Debug)]
struct Search<'a> {
    /// `q`, lowercased.
    needle: Option<&'a str>,
    /// `filter[email]`, lowercased.
    emails: Option<&'a [String]>,
    status: Option<MembershipStatus>,
}

impl Search<'_> {
    /// Whether `membership` matches `q` and `filter[email]` (what the status counts count).
    fn matches(&self, membership: &MembershipRecord) -> bool {
        matches_search(membership, self.needle, self.emails)
    }

    /// Whether `membership` matches `filter[status]` too (what the page lists).
    fn lists(&self, membership: &MembershipRecord) -> bool {
        self.status.is_none_or(|status| membership.status == status)
    }
}

/// One page of a membership list with what its meta needs.
#[derive(Debug)]
struct Listed {
    page: Vec<MembershipRecord>,
    /// Memberships matching every filter (`meta.pagination`).
    total: usize,
    /// Memberships matching `q` and `filter[email]`, per status (`meta.status-counts`).
    counts: StatusCounts,
    /// The list's last change the page was read after (plain pages only: the page cache's).
    changed: Option<storage::Revision>,
}

/// No `q`, no `filter[email]`: the maintained counts (read by the caller) and a window of the
/// ordered keys, so the cost is the page's, whatever the organization's size. (Two reads, not
/// one snapshot: under concurrent invitations the counts and the page may be a write apart.)
async fn list_page(
    state: &State,
    organization: &str,
    status: Option<MembershipStatus>,
    page: jsonapi::Page,
    counts: Counts,
) -> Result<Listed, Error> {
    let Counts { counts, changed } = counts;
    let total = status.map_or(counts.total(), |status| counts.of(status));
    let window = page.range(total);
    let records = load_page(
        state.storage(),
        organization,
        status,
        window.start,
        window.len(),
    )
    .await?;
    Ok(Listed {
        page: records,
        total,
        counts,
        changed: Some(changed),
    })
}

/// `filter[email]`: each listed address is looked up (user by email, then the user's
/// membership here), so the cost follows the list, not the organization.
async fn list_by_emails(
    state: &State,
    organization: &str,
    search: &Search<'_>,
    emails: &[String],
    page: jsonapi::Page,
) -> Result<Listed, Error> {
    let mut found: Vec<MembershipRecord> = Vec::new();
    for email in emails {
        let Some(user) = load_user_by_email(state.storage(), email).await? else {
            continue;
        };
        if let Some(membership) =
            load_user_membership(state.storage(), &user.record.id, organization).await?
            && search.matches(&membership.record)
            && !found.iter().any(|m| m.id == membership.record.id)
        {
            found.push(membership.record);
        }
    }
    found.sort_by_key(|membership| membership.seq);
    let counts = found.iter().fold(StatusCounts::default(), |counts, m| {
        counts.plus(m.status, 1)
    });
    found.retain(|membership| search.lists(membership));
    let total = found.len();
    let window = page.range(total);
    found.truncate(window.end);
    found.drain(..window.start);
    Ok(Listed {
        page: found,
        total,
        counts,
        changed: None,
    })
}

/// `q` alone: a substring can only be found by looking at every membership; they are read a
/// chunk at a time and only the page is kept.
async fn list_by_search(
    state: &State,
    organization: &str,
    search: &Search<'_>,
    page: jsonapi::Page,
) -> Result<Listed, Error> {
    // The page's window in the filtered list is known up front: [start, end) of the matches.
    let size = usize::try_from(page.size).unwrap_or(usize::MAX);
    let start = usize::try_from(page.number - 1)
        .ok()
        .and_then(|n| n.checked_mul(size))
        .unwrap_or(usize::MAX);
    let end = start.saturating_add(size);
    let mut counts = StatusCounts::default();
    let mut total = 0;
    let mut records = Vec::new();
    visit_memberships(state.storage(), organization, |membership| {
        if !search.matches(&membership) {
            return;
        }
        counts = counts.plus(membership.status, 1);
        if search.lists(&membership) {
            if (start..end).contains(&total) {
                records.push(membership);
            }
            total += 1;
        }
    })
    .await?;
    Ok(Listed {
        page: records,
        total,
        counts,
        changed: None,
    })
}

/// `GET /api/v2/organization-memberships`: the caller's own memberships, invited and active
/// (a `data` array, not paged; empty for team and organization tokens).
pub(crate) async fn list_own_memberships(
    AxumState(state): AxumState<State>,
    caller: Caller,
    query: Query,
) -> Result<JsonApi, Error> {
    let includes = query.includes(INCLUDES, &[])?;
    let mut stored = match caller.user() {
        Some(user) => load_user_memberships(state.storage(), &user.id).await?,
        None => Vec::new(),
    };
    stored.sort_by_key(|membership| membership.created);
    let memberships: Vec<MembershipRecord> =
        stored.into_iter().map(|stored| stored.record).collect();
    let refs: Vec<&MembershipRecord> = memberships.iter().collect();
    let (resources, included) = render_memberships(&state, &refs, &includes).await?;
    Ok(JsonApi::ok(document_with(
        Document::many(resources),
        included,
    )))
}

/// The membership `id` if the caller may see it: its own user, or anyone with access to its
/// organization.
async fn load_visible_membership(
    state: &State,
    caller: &Caller,
    id: &str,
) -> Result<(Stored<MembershipRecord>, Option<OrgAccess>), Error> {
    let membership = load_membership(state.storage(), id)
        .await?
        .ok_or(Error::NotFound)?;
    let access = caller
        .try_organization(state, &membership.record.organization)
        .await?;
    let own = caller
        .user()
        .is_some_and(|user| user.id == membership.record.user_id);
    if access.is_none() && !own {
        return Err(Error::NotFound);
    }
    Ok((membership, access))
}

/// `GET /api/v2/organization-memberships/:id`: 200 or 404; `include=user,teams`.
pub(crate) async fn read_membership(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    let includes = query.includes(INCLUDES, &[])?;
    let (membership, _) = load_visible_membership(&state, &caller, &id).await?;
    let (mut resources, included) =
        render_memberships(&state, &[&membership.record], &includes).await?;
    let resource = resources.pop().ok_or(Error::NotFound)?;
    Ok(JsonApi::ok(document_with(
        Document::one(resource),
        included,
    )))
}

/// `DELETE /api/v2/organization-memberships/:id`: see the module docs.
pub(crate) async fn delete_membership(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Error> {
    for _ in 0..MAX_ATTEMPTS {
        let (membership, access) = load_visible_membership(&state, &caller, &id).await?;
        let membership = membership_with_revision(membership);
        let (record, revision) = (&membership.0, membership.1);
        let organization = &record.organization;
        let own = caller.user().is_some_and(|user| user.id == record.user_id);
        let owners_team_id = match &access {
            Some(access) => access.organization.owners_team_id.clone(),
            None => {
                crate::store::organizations::load_organization(state.storage(), organization)
                    .await?
                    .ok_or(Error::NotFound)?
                    .record
                    .owners_team_id
            }
        };
        let team_ids = &record.team_ids;
        let is_owner =
            team_ids.contains(&owners_team_id) && record.status == MembershipStatus::Active;
        if own && is_owner {
            return Err(Error::Forbidden(
                "you cannot remove yourself from an organization you own".to_owned(),
            ));
        }
        if !own {
            OrgAccess::check(
                access
                    .as_ref()
                    .is_some_and(OrgAccess::can_manage_membership),
            )?;
        }
        let mut txn = Txn::new().when(Compare::ModRevision(membership_key_of(record), revision));
        if team_ids.contains(&owners_team_id) {
            let owners = load_team_member_ids(state.storage(), &owners_team_id).await?;
            if owners.len() <= 1 {
                return Err(Error::Forbidden(
                    "the last member of the owners team cannot be removed".to_owned(),
                ));
            }
            // Another owner must still be there when this commits.
            if let Some(other) = owners.iter().find(|owner| **owner != record.user_id) {
                txn = txn.when(Compare::Exists(team_member_key(&owners_team_id, other)));
            }
        }
        txn.success.extend(remove_ops(record));
        for team_id in team_ids {
            txn = txn.then(remove_member_op(team_id, &record.user_id));
        }
        if let Some(user) = load_user(state.storage(), &record.user_id).await?
            && user.record.username.is_none()
            && list_suffixes(state.storage(), &user_memberships_prefix(&record.user_id))
                .await?
                .len()
                == 1
        {
            // The user existed only for this invitation.
            txn = txn
                .when(Compare::ModRevision(
                    user_key(&user.record.id),
                    user.revision,
                ))
                .then(Op::Delete {
                    key: user_key(&user.record.id),
                })
                .then(Op::Delete {
                    key: email_key(&user.record.email),
                });
        }
        // The counts are read and written under the organization's lock (`State::lock_counts`).
        let _counts = state.lock_counts(organization).await;
        let (compare, op) = count_change(
            state.storage(),
            organization,
            StatusCounts::default().plus(record.status, -1),
        )
        .await?;
        txn = txn.when(compare).then(op);
        if commit(state.storage(), txn).await? {
            return Ok(no_content());
        }
    }
    Err(Error::Contention)
}

fn membership_with_revision(
    stored: Stored<MembershipRecord>,
) -> (MembershipRecord, storage::Revision) {
    (stored.record, stored.revision)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn membership(email: &str, username: Option<&str>) -> MembershipRecord {
        MembershipRecord {
            version: 1,
            id: "ou-1".to_owned(),
            organization: "acme".to_owned(),
            user_id: "user-1".to_owned(),
            status: MembershipStatus::Invited,
            email: email.to_owned(),
            username: username.map(str::to_owned),
            created_at_ms: 0,
            seq: 1,
            team_ids: Vec::new(),
            invitation_hash: None,
        }
    }

    #[test]
    fn search_matches_email_or_username_substring() {
        let m = membership("Dev@Example.com", Some("Alice"));
        assert!(matches_search(&m, Some("dev@"), None));
        assert!(matches_search(&m, Some("lic"), None));
        assert!(!matches_search(&m, Some("bob"), None));
        assert!(matches_search(&membership("x@y.z", None), None, None));
    }

    #[test]
    fn email_filter_is_an_exact_case_insensitive_list() {
        let m = membership("Dev@Example.com", None);
        let wanted = vec!["other@example.com".to_owned(), "dev@example.com".to_owned()];
        assert!(matches_search(&m, None, Some(&wanted)));
        assert!(!matches_search(&m, None, Some(&["dev@example".to_owned()])));
    }
}
