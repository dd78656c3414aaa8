//! Leadership through etcd: [`EtcdLeadership`] implements `cluster::Leadership` with a lease
//! kept alive by this server and a leader key created under it by compare-and-swap.
//!
//! A term: grant a lease (TTL a few seconds), then campaign: `if leader key missing { put it
//! with our id, attached to the lease }`. The winner leads while its lease lives; the others
//! watch the key and campaign again when it goes (deleted by a resignation, or by etcd when the
//! leader's lease expires: a crashed leader hands over within one TTL). It lives here rather
//! than in `crates/cluster`, so the cluster crate stays free of etcd.
//!
//! Membership: each term also puts `members/<id>` (under [`LeadershipOptions::members`], the
//! store's `meta/members/`) with this server's [`cluster::ServerInfo`] as JSON, attached to the
//! same lease, so a dead server's record goes with its lease. A follower task reads and watches
//! that prefix; the campaign remembers the leader key's value (the leader's id): together they
//! answer `leader()` and `peers()`.
//!
//! Preference (Vault's step-down and a sealed server's standing): the services tell the
//! campaign whether this server is fit to lead ([`cluster::Leadership::set_fit`], recorded in
//! its membership record) and may ask it to step down. A server that is not fit does not
//! campaign while a fit server is a member, and a leader that is not fit deletes the leader key
//! (its lease and membership stay) as soon as a fit member appears; a server that stepped down
//! does not campaign for [`STEP_DOWN_PAUSE`] unless it is the only member. These checks run on
//! every watch event and every [`RECHECK`].
//!
//! Invariants:
//! - `leader()` names another server only as the leader key's last value this server saw, and
//!   names this server only while it leads; `peers()` always includes this server;
//! - this server says it leads only while it holds the key under a lease etcd has confirmed
//!   recently: keep-alives go every TTL/3, and if none is acknowledged within 2/3 of the TTL
//!   of the last acknowledged one's sending (so before etcd can expire the lease and elect
//!   another), or the lease is reported gone, or the key is deleted or taken, leadership flips
//!   to not-leading at once and a new term starts with a new lease;
//! - dropping the handle stops campaigning without revoking (as a crash would: another server
//!   takes over when the lease expires); [`EtcdLeadership::resign`] revokes for a handover
//!   without waiting.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use cluster::ServerInfo;
use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
    WatchOptions,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a server that stepped down keeps out of the campaign while another member could
/// lead (Vault's `manualStepDownSleepPeriod`).
pub(crate) const STEP_DOWN_PAUSE: Duration = Duration::from_secs(10);

/// How often the campaign re-checks fitness and the members (no store traffic unless the key
/// is vacant and this server may campaign).
const RECHECK: Duration = Duration::from_millis(250);

/// How leadership is elected.
#[derive(Debug, Clone)]
pub struct LeadershipOptions {
    /// The key the servers of one cluster campaign on.
    pub key: Vec<u8>,
    /// This server's name, stored as the key's value (who leads).
    pub id: String,
    /// The lease's time to live: how long a dead leader keeps its leadership.
    pub ttl: Duration,
    /// This server as the others see it (its `id` is [`LeadershipOptions::id`]).
    pub server: ServerInfo,
    /// The prefix each server's membership record is put under (`<prefix><id>`).
    pub members: Vec<u8>,
}

impl LeadershipOptions {
    /// Campaigns on `key` as `id`, with members under `key` + `-members/` and no URLs.
    pub fn new(key: Vec<u8>, id: impl Into<String>) -> LeadershipOptions {
        let id = id.into();
        let mut members = key.clone();
        members.extend_from_slice(b"-members/");
        LeadershipOptions {
            key,
            server: ServerInfo::new(id.clone(), ""),
            id,
            ttl: Duration::from_secs(3),
            members,
        }
    }

    /// Advertises `server` (its id becomes this campaign's id).
    pub fn with_server(mut self, server: ServerInfo) -> LeadershipOptions {
        self.id = server.id.clone();
        self.server = server;
        self
    }

    /// Keeps membership records under `prefix`.
    pub fn with_members(mut self, prefix: Vec<u8>) -> LeadershipOptions {
        self.members = prefix;
        self
    }
}

/// A membership record as stored (JSON).
#[derive(Serialize, Deserialize)]
struct MemberRecord {
    id: String,
    #[serde(default)]
    hostname: String,
    #[serde(default)]
    urls: BTreeMap<String, String>,
    /// Whether the server is fit to lead (absent in older records: fit).
    #[serde(default = "fit_by_default")]
    fit: bool,
}

fn fit_by_default() -> bool {
    true
}

impl MemberRecord {
    fn from_server(server: &ServerInfo, fit: bool) -> MemberRecord {
        MemberRecord {
            id: server.id.clone(),
            hostname: server.hostname.clone(),
            urls: server.urls.clone(),
            fit,
        }
    }

    fn into_server(self) -> ServerInfo {
        ServerInfo {
            id: self.id,
            hostname: self.hostname,
            urls: self.urls,
        }
    }
}

/// What this server knows of the cluster: the leader key's value and the members' records.
#[derive(Debug, Default)]
struct View {
    leader_id: Option<String>,
    members: BTreeMap<String, ServerInfo>,
    /// Members whose record says they are not fit to lead.
    unfit: BTreeSet<String>,
}

/// What the services ask of the campaign, and what it tells them back.
#[derive(Debug)]
struct Control {
    /// Whether this server is fit to lead.
    fit: watch::Sender<bool>,
    /// A step-down request.
    step_down: tokio::sync::Notify,
    /// When the current term of leadership began (while leading).
    active_since: Mutex<Option<SystemTime>>,
}

type SharedView = Arc<Mutex<View>>;

fn lock(view: &SharedView) -> std::sync::MutexGuard<'_, View> {
    view.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Leadership elected through etcd. See the module docs.
pub struct EtcdLeadership {
    leading: watch::Sender<bool>,
    stop: CancellationToken,
    lease: Arc<Mutex<Option<i64>>>,
    client: Client,
    id: String,
    server: ServerInfo,
    view: SharedView,
    control: Arc<Control>,
}

impl fmt::Debug for EtcdLeadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLeadership")
            .field("id", &self.id)
            .field("leading", &*self.leading.borrow())
            .finish_non_exhaustive()
    }
}

impl cluster::Leadership for EtcdLeadership {
    fn watch(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    fn is_elected(&self) -> bool {
        true
    }

    fn this_server(&self) -> ServerInfo {
        self.server.clone()
    }

    fn leader(&self) -> Option<ServerInfo> {
        if self.is_leader() {
            return Some(self.server.clone());
        }
        let view = lock(&self.view);
        let id = view.leader_id.as_ref()?;
        if *id == self.id {
            // The key still names us, but we no longer lead: no leader is known.
            return None;
        }
        Some(
            view.members
                .get(id)
                .cloned()
                .unwrap_or_else(|| ServerInfo::new(id.clone(), "")),
        )
    }

    fn knows_leader(&self) -> bool {
        self.is_leader()
            || lock(&self.view)
                .leader_id
                .as_ref()
                .is_some_and(|id| *id != self.id)
    }

    fn peers(&self) -> Vec<ServerInfo> {
        let mut members = lock(&self.view).members.clone();
        members.insert(self.id.clone(), self.server.clone());
        members.into_values().collect()
    }

    fn active_since(&self) -> Option<SystemTime> {
        if !self.is_leader() {
            return None;
        }
        *self
            .control
            .active_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn step_down(&self) {
        self.control.step_down.notify_one();
    }

    fn set_fit(&self, fit: bool) {
        self.control.fit.send_if_modified(|now| {
            let changed = *now != fit;
            *now = fit;
            changed
        });
    }
}

impl Drop for EtcdLeadership {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl EtcdLeadership {
    /// Starts campaigning on a background task of the current runtime.
    pub fn start(client: Client, options: LeadershipOptions) -> EtcdLeadership {
        let leading = watch::Sender::new(false);
        let stop = CancellationToken::new();
        let lease = Arc::new(Mutex::new(None));
        let view = SharedView::default();
        let control = Arc::new(Control {
            fit: watch::Sender::new(true),
            step_down: tokio::sync::Notify::new(),
            active_since: Mutex::new(None),
        });
        let campaign = Campaign {
            client: client.clone(),
            options: options.clone(),
            leading: leading.clone(),
            stop: stop.clone(),
            lease: lease.clone(),
            view: view.clone(),
            control: control.clone(),
            hold_until: Mutex::new(None),
        };
        tokio::spawn(campaign.run());
        tokio::spawn(follow_members(
            client.clone(),
            options.members.clone(),
            view.clone(),
            stop.clone(),
        ));
        EtcdLeadership {
            leading,
            stop,
            lease,
            client,
            id: options.id,
            server: options.server,
            view,
            control,
        }
    }

    /// Whether this server leads right now.
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// Stops campaigning and revokes the lease, so another server leads without waiting for
    /// the lease to expire.
    pub async fn resign(&self) {
        self.stop.cancel();
        self.leading.send_replace(false);
        let lease = self.lease.lock().ok().and_then(|mut lease| lease.take());
        if let Some(id) = lease
            && let Err(err) = self.client.lease_client().revoke(id).await
        {
            tracing::warn!(error = %err, "revoking the leadership lease failed");
        }
    }

    /// The id of the server that leads, if any (read from etcd).
    pub async fn read_leader_id(
        client: &Client,
        key: &[u8],
    ) -> Result<Option<String>, storage::Error> {
        let response = client
            .kv_client()
            .get(key.to_vec(), None)
            .await
            .map_err(|err| crate::backend("reading the leader", err))?;
        Ok(response
            .kvs()
            .first()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
    }
}

/// Why a term ended.
enum TermEnd {
    Stopped,
    Lost(String),
}

struct Campaign {
    client: Client,
    options: LeadershipOptions,
    leading: watch::Sender<bool>,
    stop: CancellationToken,
    lease: Arc<Mutex<Option<i64>>>,
    view: SharedView,
    control: Arc<Control>,
    /// After a step-down: no campaign before this instant while another member serves.
    hold_until: Mutex<Option<Instant>>,
}

impl Campaign {
    async fn run(self) {
        loop {
            if self.stop.is_cancelled() {
                break;
            }
            match self.term().await {
                TermEnd::Stopped => break,
                TermEnd::Lost(why) => {
                    self.set_active_since(None);
                    if self.leading.send_replace(false) {
                        tracing::warn!(reason = %why, "leadership lost");
                    } else {
                        tracing::debug!(reason = %why, "leadership term ended");
                    }
                }
            }
            if let Ok(mut lease) = self.lease.lock() {
                *lease = None;
            }
            self.set_leader_id(None);
            // Do not spin against an unreachable etcd.
            tokio::select! {
                () = self.stop.cancelled() => break,
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
        self.leading.send_replace(false);
    }

    fn set_leader_id(&self, id: Option<String>) {
        lock(&self.view).leader_id = id;
    }

    fn set_active_since(&self, at: Option<SystemTime>) {
        *self
            .control
            .active_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = at;
    }

    /// Whether another member serves, and whether one of them is fit to lead.
    fn others(&self) -> (bool, bool) {
        let view = lock(&self.view);
        let mut any = false;
        let mut fit = false;
        for id in view.members.keys().filter(|id| **id != self.options.id) {
            any = true;
            fit |= !view.unfit.contains(id);
        }
        (any, fit)
    }

    /// Whether this server may campaign now (see the module docs' preference).
    fn may_campaign(&self) -> bool {
        let (others, other_fit) = self.others();
        let held = self
            .hold_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|until| Instant::now() < until);
        if held && others {
            return false;
        }
        *self.control.fit.borrow() || !other_fit
    }

    /// Whether this server, leading, should hand over: it is not fit and a fit member serves.
    fn should_step_aside(&self) -> bool {
        !*self.control.fit.borrow() && self.others().1
    }

    /// Gives up the leader key if it is still under `lease` (the lease, and this server's
    /// membership record, stay).
    async fn step_aside(&self, lease: i64) -> Result<(), String> {
        let key = self.options.key.clone();
        let txn = Txn::new()
            .when([Compare::lease(key.clone(), CompareOp::Equal, lease)])
            .and_then([TxnOp::delete(key, None)]);
        self.client
            .kv_client()
            .txn(txn)
            .await
            .map(drop)
            .map_err(|err| format!("stepping down: {err}"))
    }

    /// Puts this server's membership record (with its fitness) under `lease`.
    async fn advertise(&self, lease: i64) -> Result<(), String> {
        let mut member_key = self.options.members.clone();
        member_key.extend_from_slice(self.options.id.as_bytes());
        let fit = *self.control.fit.borrow();
        let record = serde_json::to_vec(&MemberRecord::from_server(&self.options.server, fit))
            .map_err(|err| format!("encoding the membership record: {err}"))?;
        self.client
            .kv_client()
            .put(
                member_key,
                record,
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .map(drop)
            .map_err(|err| format!("advertising this server: {err}"))
    }

    fn set_lease(&self, id: Option<i64>) {
        if let Ok(mut lease) = self.lease.lock() {
            *lease = id;
        }
    }

    async fn term(&self) -> TermEnd {
        let ttl = self.options.ttl.max(Duration::from_secs(2));
        let ttl_secs = i64::try_from(ttl.as_secs()).unwrap_or(5);
        let mut leases = self.client.lease_client();
        let granted_at = Instant::now();
        let lease = match leases.grant(ttl_secs, None).await {
            Ok(granted) => granted.id(),
            Err(err) => return TermEnd::Lost(format!("granting a lease: {err}")),
        };
        self.set_lease(Some(lease));
        let (mut keeper, mut acks) = match leases.keep_alive(lease).await {
            Ok(pair) => pair,
            Err(err) => return TermEnd::Lost(format!("keeping the lease alive: {err}")),
        };
        // This server's membership record lives as long as the term's lease.
        let mut fitness = self.control.fit.subscribe();
        fitness.mark_unchanged();
        if let Err(err) = self.advertise(lease).await {
            return TermEnd::Lost(err);
        }
        let mut recheck = tokio::time::interval(RECHECK);
        recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let margin = ttl * 2 / 3;
        let mut deadline = granted_at + margin;
        let mut sent_at = Instant::now();
        let mut unacked: Option<Instant> = Some(sent_at);
        let mut tick = tokio::time::interval(ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        let key = self.options.key.clone();
        let mut leading = false;
        loop {
            // Campaign (or confirm the key is ours) and watch the key from there; a server
            // that should hold back only reads the key.
            let campaigning = leading || self.may_campaign();
            let campaign = if campaigning {
                Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(
                        key.clone(),
                        self.options.id.clone(),
                        Some(PutOptions::new().with_lease(lease)),
                    )])
                    .or_else([TxnOp::get(key.clone(), None)])
            } else {
                Txn::new().and_then([TxnOp::get(key.clone(), None)])
            };
            let response = match self.client.kv_client().txn(campaign).await {
                Ok(response) => response,
                Err(err) => return TermEnd::Lost(format!("campaigning: {err}")),
            };
            let at = response.header().map_or(0, |header| header.revision());
            let holder = response.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(get) => get
                    .kvs()
                    .first()
                    .map(|kv| (kv.lease(), String::from_utf8_lossy(kv.value()).into_owned())),
                _ => None,
            });
            let holder_lease = holder.as_ref().map(|(lease, _)| *lease);
            let won = campaigning && response.succeeded();
            if won {
                self.set_leader_id(Some(self.options.id.clone()));
            } else {
                self.set_leader_id(holder.map(|(_, id)| id));
            }
            let ours = won || holder_lease == Some(lease);
            if ours && !leading {
                leading = true;
                self.set_active_since(Some(SystemTime::now()));
                self.leading.send_replace(true);
                tracing::info!(id = %self.options.id, "this server leads");
            } else if !ours && leading {
                return TermEnd::Lost("the leader key belongs to another lease".to_owned());
            }
            let mut watcher = match self
                .client
                .watch_client()
                .watch(
                    key.clone(),
                    Some(WatchOptions::new().with_start_revision(at.saturating_add(1))),
                )
                .await
            {
                Ok(stream) => stream,
                Err(err) => return TermEnd::Lost(format!("watching the leader key: {err}")),
            };
            // Follow the lease and the key until the key changes hands (or we lose).
            loop {
                let now_deadline = deadline;
                tokio::select! {
                    biased;
                    () = self.stop.cancelled() => return TermEnd::Stopped,
                    () = tokio::time::sleep_until(now_deadline) => {
                        return TermEnd::Lost("no lease keep-alive acknowledged in time".to_owned());
                    }
                    ack = acks.message() => match ack {
                        Ok(Some(ack)) if ack.ttl() > 0 => {
                            if let Some(sent) = unacked.take() {
                                deadline = sent + margin;
                            }
                        }
                        Ok(Some(_)) => return TermEnd::Lost("the lease expired".to_owned()),
                        Ok(None) => return TermEnd::Lost("the keep-alive stream ended".to_owned()),
                        Err(err) => return TermEnd::Lost(format!("keep-alive: {err}")),
                    },
                    () = self.control.step_down.notified() => {
                        if leading {
                            *self
                                .hold_until
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner) =
                                Some(Instant::now() + STEP_DOWN_PAUSE);
                            tracing::info!(id = %self.options.id, "stepping down on request");
                            if let Err(err) = self.step_aside(lease).await {
                                return TermEnd::Lost(err);
                            }
                            leading = false;
                            self.set_active_since(None);
                            self.leading.send_replace(false);
                        }
                    }
                    changed = fitness.changed() => {
                        if changed.is_err() {
                            return TermEnd::Stopped;
                        }
                        if let Err(err) = self.advertise(lease).await {
                            return TermEnd::Lost(err);
                        }
                        recheck.reset_immediately();
                    }
                    _ = recheck.tick() => {
                        if leading && self.should_step_aside() {
                            tracing::info!(
                                id = %self.options.id,
                                "not fit to lead while a fit server serves: stepping down"
                            );
                            if let Err(err) = self.step_aside(lease).await {
                                return TermEnd::Lost(err);
                            }
                            leading = false;
                            self.set_active_since(None);
                            self.leading.send_replace(false);
                        } else if !leading
                            && lock(&self.view).leader_id.is_none()
                            && self.may_campaign()
                        {
                            break; // the key is vacant and this server may take it
                        }
                    }
                    _ = tick.tick() => {
                        sent_at = Instant::now();
                        unacked.get_or_insert(sent_at);
                        if let Err(err) = keeper.keep_alive().await {
                            return TermEnd::Lost(format!("sending a keep-alive: {err}"));
                        }
                    }
                    event = watcher.message() => match event {
                        Ok(Some(response)) => {
                            if response.canceled() {
                                return TermEnd::Lost("the leader key's watch was cancelled".to_owned());
                            }
                            for event in response.events() {
                                if event.event_type() == EventType::Delete {
                                    self.set_leader_id(None);
                                } else if let Some(kv) = event.kv() {
                                    self.set_leader_id(Some(
                                        String::from_utf8_lossy(kv.value()).into_owned(),
                                    ));
                                }
                            }
                            let changed = response.events().iter().any(|event| {
                                event.event_type() == EventType::Delete
                                    || event.kv().is_some_and(|kv| kv.lease() != lease)
                            });
                            if changed {
                                if leading {
                                    return TermEnd::Lost("the leader key was deleted or taken".to_owned());
                                }
                                break; // campaign again
                            }
                        }
                        Ok(None) => return TermEnd::Lost("the leader key's watch ended".to_owned()),
                        Err(err) => return TermEnd::Lost(format!("watching the leader key: {err}")),
                    },
                }
            }
        }
    }
}

/// Keeps `view.members` equal to the records under `prefix`: reads them, then follows their
/// watch; starts over (after a short pause) whenever the watch fails, until `stop`.
async fn follow_members(
    client: Client,
    prefix: Vec<u8>,
    view: SharedView,
    stop: CancellationToken,
) {
    let decode = |value: &[u8]| {
        serde_json::from_slice::<MemberRecord>(value)
            .ok()
            .map(|record| (record.fit, record.into_server()))
    };
    let id_of = |key: &[u8]| {
        key.strip_prefix(prefix.as_slice())
            .map(|id| String::from_utf8_lossy(id).into_owned())
    };
    loop {
        let followed = async {
            let listed = client
                .kv_client()
                .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
                .await
                .map_err(|err| format!("listing the members: {err}"))?;
            let at = listed.header().map_or(0, |header| header.revision());
            let mut members = BTreeMap::new();
            let mut unfit = BTreeSet::new();
            for kv in listed.kvs() {
                if let (Some(id), Some((fit, server))) = (id_of(kv.key()), decode(kv.value())) {
                    if !fit {
                        unfit.insert(id.clone());
                    }
                    members.insert(id, server);
                }
            }
            {
                let mut view = lock(&view);
                view.members = members;
                view.unfit = unfit;
            }
            let mut watcher = client
                .watch_client()
                .watch(
                    prefix.clone(),
                    Some(
                        WatchOptions::new()
                            .with_prefix()
                            .with_start_revision(at.saturating_add(1)),
                    ),
                )
                .await
                .map_err(|err| format!("watching the members: {err}"))?;
            loop {
                let Some(response) = watcher
                    .message()
                    .await
                    .map_err(|err| format!("watching the members: {err}"))?
                else {
                    return Err::<(), String>("the members' watch ended".to_owned());
                };
                if response.canceled() {
                    return Err("the members' watch was cancelled".to_owned());
                }
                let mut view = lock(&view);
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    let Some(id) = id_of(kv.key()) else { continue };
                    match event.event_type() {
                        EventType::Delete => {
                            view.members.remove(&id);
                            view.unfit.remove(&id);
                        }
                        EventType::Put => {
                            if let Some((fit, server)) = decode(kv.value()) {
                                if fit {
                                    view.unfit.remove(&id);
                                } else {
                                    view.unfit.insert(id.clone());
                                }
                                view.members.insert(id, server);
                            }
                        }
                    }
                }
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            result = followed => {
                if let Err(err) = result {
                    tracing::debug!(error = %err, "following the members: starting over");
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}
