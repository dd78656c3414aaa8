//! Stored organization memberships (see `store/mod.rs` for the layout), kept so that one page
//! of an organization's list costs reads proportional to the page, not to the organization.
//!
//! How: a membership is stored at `memberships/<org>/<seq>`, where `seq` ([`next_seq`]) orders
//! memberships by creation, so the unfiltered list is a key-ordered scan; `membership-statuses/
//! <org>/<status>/<seq>` is the same order per status (`filter[status]`); and
//! `membership-counts/<org>/<shard>` holds the status counts as [`COUNT_SHARDS`] partial sums
//! (`meta.status-counts` and the member limit read them instead of counting records).
//!
//! Invariants:
//! - At most one membership per (user, organization): `user-memberships/<user>/<org>` is
//!   created with a `Missing` compare in the invite transaction, and so is the record's key.
//! - Every write that creates, removes or changes the status of a membership goes through
//!   [`create_ops`], [`remove_ops`] or [`status_change_ops`] together with [`count_change`] in
//!   the same transaction, so the status index holds exactly one key per membership (under its
//!   current status) and the sum of the count shards equals the number of memberships per
//!   status. A shard is read-modified-written under compare-and-swap; a shard is picked at
//!   random per write, so concurrent writers to one organization rarely collide. A shard may
//!   go negative; only the sum means anything.
//! - A membership record lists its user's teams in its organization (`team_ids`, sorted), the
//!   one place that says which teams a user is in; `team-members/<team>/<user>`
//!   (`store/teams.rs`) is the reverse index, written in the same transaction. A page renders
//!   each membership's teams from the record alone.
//! - A membership record carries a copy of its user's `email` and `username` (so a list with
//!   `q` or `filter[email]` reads one prefix); every write that changes a user's username
//!   rewrites all of that user's memberships in the same transaction.
//! - `invitation_hash` (SHA-256 of the invitation token) is set only while `status` is
//!   `invited`; acceptance clears it.
//! - `seq` is fixed at creation and never reused in an organization; the index records
//!   (`membership-ids/`, `user-memberships/`) carry it, so a lookup by id is two point reads.
//! - Every transaction that changes what a page of an organization's list shows writes one of
//!   its `membership-counts/<org>/` keys: a membership created, removed or changing status
//!   writes a count shard ([`count_change`]); joining or leaving a team (`teams.rs`) and an
//!   email copied ([`copy_user_ops`]) put the zero-count shard `changes` ([`changed_op`], at
//!   most once per transaction: etcd refuses a key put twice in one). So the newest mod
//!   revision under that prefix ([`Counts::changed`]) is the list's last change, which the
//!   page cache of `memberships.rs` keys on; only the copied username, which a page does not
//!   show, is written without it.

use std::sync::atomic::{AtomicU64, Ordering};

use rand::Rng;
use serde::{Deserialize, Serialize};
use storage::{Compare, KeyRange, Op, Storage};

use crate::Error;
use crate::store::{PREFIX, RECORD_VERSION, Stored, decode, load, load_all, put, scan_window};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum MembershipStatus {
    Invited,
    Active,
}

impl MembershipStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MembershipStatus::Invited => "invited",
            MembershipStatus::Active => "active",
        }
    }

    pub(crate) fn parse(raw: &str) -> Option<MembershipStatus> {
        match raw {
            "invited" => Some(MembershipStatus::Invited),
            "active" => Some(MembershipStatus::Active),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MembershipRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) organization: String,
    pub(crate) user_id: String,
    pub(crate) status: MembershipStatus,
    /// The user's email and username, copied (see the module invariants).
    pub(crate) email: String,
    pub(crate) username: Option<String>,
    pub(crate) created_at_ms: u64,
    /// The membership's place in its organization's list ([`next_seq`]); part of its key.
    pub(crate) seq: u64,
    /// The user's teams in this organization, sorted (see the module invariants).
    pub(crate) team_ids: Vec<String>,
    #[serde(default)]
    pub(crate) invitation_hash: Option<String>,
}

impl MembershipRecord {
    /// Adds `team_id` to the membership's teams (no-op when already there).
    pub(crate) fn join_team(&mut self, team_id: &str) {
        if let Err(at) = self
            .team_ids
            .binary_search_by(|id| id.as_str().cmp(team_id))
        {
            self.team_ids.insert(at, team_id.to_owned());
        }
    }

    /// Removes `team_id` from the membership's teams (no-op when not there).
    pub(crate) fn leave_team(&mut self, team_id: &str) {
        self.team_ids.retain(|id| id != team_id);
    }
}

/// Where a membership lives: the value of `membership-ids/<id>` and of
/// `user-memberships/<user>/<org>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MembershipRef {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) organization: String,
    pub(crate) seq: u64,
}

/// How many memberships of an organization have each status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StatusCounts {
    pub(crate) invited: i64,
    pub(crate) active: i64,
}

impl StatusCounts {
    /// One membership with `status`.
    pub(crate) fn one(status: MembershipStatus) -> StatusCounts {
        StatusCounts::default().plus(status, 1)
    }

    /// These counts with `delta` added to `status`.
    pub(crate) fn plus(mut self, status: MembershipStatus, delta: i64) -> StatusCounts {
        match status {
            MembershipStatus::Invited => self.invited += delta,
            MembershipStatus::Active => self.active += delta,
        }
        self
    }

    fn add(self, other: StatusCounts) -> StatusCounts {
        StatusCounts {
            invited: self.invited + other.invited,
            active: self.active + other.active,
        }
    }

    /// Memberships with `status` (never negative).
    pub(crate) fn of(&self, status: MembershipStatus) -> usize {
        let count = match status {
            MembershipStatus::Invited => self.invited,
            MembershipStatus::Active => self.active,
        };
        usize::try_from(count).unwrap_or(0)
    }

    /// Every membership.
    pub(crate) fn total(&self) -> usize {
        self.of(MembershipStatus::Invited) + self.of(MembershipStatus::Active)
    }
}

/// One shard of an organization's status counts, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct CountsRecord {
    version: u32,
    #[serde(flatten)]
    counts: StatusCounts,
}

/// How many partial sums an organization's status counts are split into.
pub(crate) const COUNT_SHARDS: u32 = 8;

/// The last [`next_seq`] handed out in this process.
static LAST_SEQ: AtomicU64 = AtomicU64::new(0);

/// A fresh list position: the wall clock in microseconds, raised to one past the last value
/// handed out in this process, so positions grow strictly with creation here and follow the
/// clock across restarts. (A wall clock stepped back across a restart could place new
/// memberships before older ones; the key's `Missing` compare keeps positions unique.)
pub(crate) fn next_seq() -> u64 {
    let now = u64::try_from(stdx::time::unix_now_nanos() / 1000).unwrap_or(0);
    let previous = LAST_SEQ
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
            Some(now.max(last.saturating_add(1)))
        })
        // The closure always returns `Some`, so `fetch_update` cannot fail.
        .unwrap_or_else(|last| last);
    now.max(previous.saturating_add(1))
}

pub(crate) fn org_memberships_prefix(organization: &str) -> String {
    format!("{PREFIX}memberships/{organization}/")
}

/// `seq` as a key segment: fixed-width hex, so key order is numeric order.
fn seq_segment(seq: u64) -> String {
    format!("{seq:016x}")
}

pub(crate) fn membership_key(organization: &str, seq: u64) -> Vec<u8> {
    format!("{PREFIX}memberships/{organization}/{}", seq_segment(seq)).into_bytes()
}

/// The key of a membership record.
pub(crate) fn membership_key_of(membership: &MembershipRecord) -> Vec<u8> {
    membership_key(&membership.organization, membership.seq)
}

fn org_statuses_prefix(organization: &str) -> String {
    format!("{PREFIX}membership-statuses/{organization}/")
}

fn status_prefix(organization: &str, status: MembershipStatus) -> String {
    format!(
        "{PREFIX}membership-statuses/{organization}/{}/",
        status.as_str()
    )
}

fn status_key(organization: &str, status: MembershipStatus, seq: u64) -> Vec<u8> {
    format!(
        "{}{}",
        status_prefix(organization, status),
        seq_segment(seq)
    )
    .into_bytes()
}

fn org_counts_prefix(organization: &str) -> String {
    format!("{PREFIX}membership-counts/{organization}/")
}

fn counts_key(organization: &str, shard: u32) -> Vec<u8> {
    format!("{}{shard:02}", org_counts_prefix(organization)).into_bytes()
}

pub(crate) fn membership_id_key(id: &str) -> Vec<u8> {
    format!("{PREFIX}membership-ids/{id}").into_bytes()
}

pub(crate) fn user_memberships_prefix(user_id: &str) -> String {
    format!("{PREFIX}user-memberships/{user_id}/")
}

pub(crate) fn user_membership_key(user_id: &str, organization: &str) -> Vec<u8> {
    format!("{PREFIX}user-memberships/{user_id}/{organization}").into_bytes()
}

fn membership_ref(membership: &MembershipRecord) -> MembershipRef {
    MembershipRef {
        version: RECORD_VERSION,
        id: membership.id.clone(),
        organization: membership.organization.clone(),
        seq: membership.seq,
    }
}

/// The compares and puts that create `membership` with its indexes (not its count: see
/// [`count_change`]); the compares keep one membership per user and organization.
pub(crate) fn create_ops(membership: &MembershipRecord) -> Result<(Vec<Compare>, Vec<Op>), Error> {
    let key = membership_key_of(membership);
    let user_key = user_membership_key(&membership.user_id, &membership.organization);
    let location = membership_ref(membership);
    let compares = vec![
        Compare::Missing(key.clone()),
        Compare::Missing(user_key.clone()),
    ];
    let ops = vec![
        put(key, membership)?,
        put(
            status_key(&membership.organization, membership.status, membership.seq),
            &location,
        )?,
        put(membership_id_key(&membership.id), &location)?,
        put(user_key, &location)?,
    ];
    Ok((compares, ops))
}

/// The puts that store `after`, a new version of `before` (same membership), moving its status
/// index when the status changed (its count: see [`count_change`]).
pub(crate) fn update_ops(
    before: &MembershipRecord,
    after: &MembershipRecord,
) -> Result<Vec<Op>, Error> {
    let mut ops = vec![put(membership_key_of(after), after)?];
    if before.status != after.status {
        ops.push(Op::Delete {
            key: status_key(&before.organization, before.status, before.seq),
        });
        ops.push(put(
            status_key(&after.organization, after.status, after.seq),
            &membership_ref(after),
        )?);
    }
    Ok(ops)
}

/// The deletes that remove `membership` and its indexes (not its count: see [`count_change`]).
pub(crate) fn remove_ops(membership: &MembershipRecord) -> Vec<Op> {
    vec![
        Op::Delete {
            key: membership_key_of(membership),
        },
        Op::Delete {
            key: status_key(&membership.organization, membership.status, membership.seq),
        },
        Op::Delete {
            key: membership_id_key(&membership.id),
        },
        Op::Delete {
            key: user_membership_key(&membership.user_id, &membership.organization),
        },
    ]
}

/// The compare and put that add `delta` to the status counts of `organization`, on a shard
/// picked at random (a lost compare means another writer used that shard: retry the
/// transaction, which picks again).
pub(crate) async fn count_change(
    storage: &dyn Storage,
    organization: &str,
    delta: StatusCounts,
) -> Result<(Compare, Op), Error> {
    let shard = rand::rng().random_range(0..COUNT_SHARDS);
    let key = counts_key(organization, shard);
    let (revision, counts) = match load::<CountsRecord>(storage, &key).await? {
        Some(stored) => (stored.revision, stored.record.counts),
        None => (0, StatusCounts::default()),
    };
    let record = CountsRecord {
        version: RECORD_VERSION,
        counts: counts.add(delta),
    };
    Ok((
        Compare::ModRevision(key.clone(), revision),
        put(key, &record)?,
    ))
}

/// The put that marks `organization`'s membership list changed where no count changes (see
/// the module invariants): the zero-count shard `changes`. At most once per transaction.
pub(crate) fn changed_op(organization: &str) -> Op {
    Op::Put {
        key: format!("{}changes", org_counts_prefix(organization)).into_bytes(),
        value: br#"{"version":1,"invited":0,"active":0}"#.to_vec(),
    }
}

/// The put that starts the counts of a new organization at `counts`.
pub(crate) fn initial_counts_op(organization: &str, counts: StatusCounts) -> Result<Op, Error> {
    put(
        counts_key(organization, 0),
        &CountsRecord {
            version: RECORD_VERSION,
            counts,
        },
    )
}

/// How many memberships of `organization` have each status: one scan of its count keys (the
/// [`COUNT_SHARDS`] shards and `changes`; one read, not a point read per shard).
pub(crate) async fn load_counts(
    storage: &dyn Storage,
    organization: &str,
) -> Result<StatusCounts, Error> {
    Ok(load_counts_and_change(storage, organization).await?.counts)
}

/// An organization's status counts and the revision of its list's last change.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) counts: StatusCounts,
    /// The newest mod revision of its count keys: the last change of anything a page of the
    /// list shows (module invariants); 0 for an organization without count keys.
    pub(crate) changed: storage::Revision,
}

/// [`load_counts`] with the revision of the list's last change (same single scan).
pub(crate) async fn load_counts_and_change(
    storage: &dyn Storage,
    organization: &str,
) -> Result<Counts, Error> {
    let scan = storage
        .scan(KeyRange::prefix(org_counts_prefix(organization)), None)
        .await?;
    let mut counts = StatusCounts::default();
    let mut changed = 0;
    for kv in &scan.kvs {
        counts = counts.add(decode::<CountsRecord>(&kv.key, &kv.value)?.counts);
        changed = changed.max(kv.mod_revision);
    }
    Ok(Counts { counts, changed })
}

/// Up to `limit` memberships of `organization` in list order after skipping `offset`, all of
/// them or those with `status`: reads the page (and skips over the keys before it), never the
/// whole organization.
pub(crate) async fn load_page(
    storage: &dyn Storage,
    organization: &str,
    status: Option<MembershipStatus>,
    offset: usize,
    limit: usize,
) -> Result<Vec<MembershipRecord>, Error> {
    let Some(status) = status else {
        let kvs = scan_window(
            storage,
            &org_memberships_prefix(organization),
            offset,
            limit,
        )
        .await?;
        return kvs.iter().map(|kv| decode(&kv.key, &kv.value)).collect();
    };
    let kvs = scan_window(storage, &status_prefix(organization, status), offset, limit).await?;
    let mut page = Vec::with_capacity(kvs.len());
    for kv in kvs {
        let location: MembershipRef = decode(&kv.key, &kv.value)?;
        // Gone between the two reads (removed concurrently): the page is one shorter.
        if let Some(stored) = load(storage, &membership_key(organization, location.seq)).await? {
            page.push(stored.record);
        }
    }
    Ok(page)
}

/// Calls `visit` with every membership of `organization`, in list order, reading a bounded
/// number at a time (for searches that must look at each one).
pub(crate) async fn visit_memberships(
    storage: &dyn Storage,
    organization: &str,
    mut visit: impl FnMut(MembershipRecord) + Send,
) -> Result<(), Error> {
    let prefix = org_memberships_prefix(organization);
    let mut range = KeyRange::prefix(&prefix);
    loop {
        let scan = storage.scan(range.clone(), Some(super::SCAN_CHUNK)).await?;
        for kv in &scan.kvs {
            visit(decode(&kv.key, &kv.value)?);
        }
        match scan.kvs.last() {
            Some(last) if scan.more => range.start = super::key_after(&last.key),
            _ => return Ok(()),
        }
    }
}

/// Every membership of `organization`, in list order (organization deletion).
pub(crate) async fn load_memberships(
    storage: &dyn Storage,
    organization: &str,
) -> Result<Vec<Stored<MembershipRecord>>, Error> {
    load_all(storage, &org_memberships_prefix(organization)).await
}

/// The deletes of every membership key of `organization` beyond the per-membership indexes
/// (records, status index, counts).
pub(crate) fn remove_organization_ops(organization: &str) -> Vec<Op> {
    [
        org_memberships_prefix(organization),
        org_statuses_prefix(organization),
        org_counts_prefix(organization),
    ]
    .into_iter()
    .map(|prefix| Op::DeleteRange(KeyRange::prefix(prefix)))
    .collect()
}

/// The membership with id `id`.
pub(crate) async fn load_membership(
    storage: &dyn Storage,
    id: &str,
) -> Result<Option<Stored<MembershipRecord>>, Error> {
    let Some(location) = load::<MembershipRef>(storage, &membership_id_key(id)).await? else {
        return Ok(None);
    };
    let location = location.record;
    load(
        storage,
        &membership_key(&location.organization, location.seq),
    )
    .await
}

/// The membership of `user_id` in `organization`, if any.
pub(crate) async fn load_user_membership(
    storage: &dyn Storage,
    user_id: &str,
    organization: &str,
) -> Result<Option<Stored<MembershipRecord>>, Error> {
    let Some(location) =
        load::<MembershipRef>(storage, &user_membership_key(user_id, organization)).await?
    else {
        return Ok(None);
    };
    load(storage, &membership_key(organization, location.record.seq)).await
}

/// The id of the membership of `user_id` in `organization`, if any (one point read).
pub(crate) async fn load_user_membership_id(
    storage: &dyn Storage,
    user_id: &str,
    organization: &str,
) -> Result<Option<String>, Error> {
    Ok(
        load::<MembershipRef>(storage, &user_membership_key(user_id, organization))
            .await?
            .map(|location| location.record.id),
    )
}

/// Every membership of `user_id`, across organizations.
pub(crate) async fn load_user_memberships(
    storage: &dyn Storage,
    user_id: &str,
) -> Result<Vec<Stored<MembershipRecord>>, Error> {
    let mut memberships = Vec::new();
    for location in load_all::<MembershipRef>(storage, &user_memberships_prefix(user_id)).await? {
        let location = location.record;
        if let Some(membership) = load(
            storage,
            &membership_key(&location.organization, location.seq),
        )
        .await?
        {
            memberships.push(membership);
        }
    }
    Ok(memberships)
}

pub(crate) async fn count_user_memberships(
    storage: &dyn Storage,
    user_id: &str,
) -> Result<usize, Error> {
    Ok(
        super::list_suffixes(storage, &user_memberships_prefix(user_id))
            .await?
            .len(),
    )
}

/// The compares and puts that copy `user`'s email and username into every membership of
/// theirs (the store invariant above), guarded by each membership's revision.
pub(crate) async fn copy_user_ops(
    storage: &dyn Storage,
    user: &crate::store::users::UserRecord,
) -> Result<(Vec<Compare>, Vec<Op>), Error> {
    let mut compares = Vec::new();
    let mut ops = Vec::new();
    for stored in load_user_memberships(storage, &user.id).await? {
        let mut copy = stored.record;
        copy.email = user.email.clone();
        copy.username = user.username.clone();
        let key = membership_key_of(&copy);
        compares.push(Compare::ModRevision(key.clone(), stored.revision));
        ops.push(put(key, &copy)?);
        // A user has one membership per organization, so one mark per organization.
        ops.push(changed_op(&copy.organization));
    }
    Ok((compares, ops))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seqs_grow_strictly_and_keep_key_order() {
        let seqs: Vec<u64> = (0..1000).map(|_| next_seq()).collect();
        assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]));
        let keys: Vec<Vec<u8>> = seqs
            .iter()
            .map(|seq| membership_key("acme", *seq))
            .collect();
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn counts_are_sums_of_signed_shards_and_never_negative() {
        let shard_a =
            StatusCounts::one(MembershipStatus::Invited).plus(MembershipStatus::Active, 2);
        let shard_b = StatusCounts::default()
            .plus(MembershipStatus::Invited, 1)
            .plus(MembershipStatus::Active, -1);
        let sum = shard_a.add(shard_b);
        assert_eq!(
            (
                sum.of(MembershipStatus::Invited),
                sum.of(MembershipStatus::Active)
            ),
            (2, 1)
        );
        assert_eq!(sum.total(), 3);
        assert_eq!(
            StatusCounts::default()
                .plus(MembershipStatus::Active, -1)
                .total(),
            0
        );
    }

    #[test]
    fn counts_record_stores_flat_fields() {
        let record = CountsRecord {
            version: RECORD_VERSION,
            counts: StatusCounts {
                invited: 3,
                active: -1,
            },
        };
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"version": 1, "invited": 3, "active": -1})
        );
    }
}
