//! Leadership through etcd: [`EtcdLeadership`] implements `cluster::Leadership` with a lease
//! kept alive by this server and a leader key created under it by compare-and-swap.
//!
//! A term: grant a lease (TTL a few seconds), then campaign: `if leader key missing { put it
//! with our id, attached to the lease }`. The winner leads while its lease lives; the others
//! watch the key and campaign again when it goes (deleted by a resignation, or by etcd when the
//! leader's lease expires: a crashed leader hands over within one TTL). It lives here rather
//! than in `crates/cluster`, so the cluster crate stays free of etcd.
//!
//! Invariants:
//! - this server says it leads only while it holds the key under a lease etcd has confirmed
//!   recently: keep-alives go every TTL/3, and if none is acknowledged within 2/3 of the TTL
//!   of the last acknowledged one's sending (so before etcd can expire the lease and elect
//!   another), or the lease is reported gone, or the key is deleted or taken, leadership flips
//!   to not-leading at once and a new term starts with a new lease;
//! - dropping the handle stops campaigning without revoking (as a crash would: another server
//!   takes over when the lease expires); [`EtcdLeadership::resign`] revokes for a handover
//!   without waiting.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How leadership is elected.
#[derive(Debug, Clone)]
pub struct LeadershipOptions {
    /// The key the servers of one cluster campaign on.
    pub key: Vec<u8>,
    /// This server's name, stored as the key's value (who leads).
    pub id: String,
    /// The lease's time to live: how long a dead leader keeps its leadership.
    pub ttl: Duration,
}

impl LeadershipOptions {
    pub fn new(key: Vec<u8>, id: impl Into<String>) -> LeadershipOptions {
        LeadershipOptions {
            key,
            id: id.into(),
            ttl: Duration::from_secs(3),
        }
    }
}

/// Leadership elected through etcd. See the module docs.
pub struct EtcdLeadership {
    leading: watch::Sender<bool>,
    stop: CancellationToken,
    lease: Arc<Mutex<Option<i64>>>,
    client: Client,
    id: String,
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
        let campaign = Campaign {
            client: client.clone(),
            options: options.clone(),
            leading: leading.clone(),
            stop: stop.clone(),
            lease: lease.clone(),
        };
        tokio::spawn(campaign.run());
        EtcdLeadership {
            leading,
            stop,
            lease,
            client,
            id: options.id,
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
    pub async fn leader(client: &Client, key: &[u8]) -> Result<Option<String>, storage::Error> {
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
            // Do not spin against an unreachable etcd.
            tokio::select! {
                () = self.stop.cancelled() => break,
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
        self.leading.send_replace(false);
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
        let margin = ttl * 2 / 3;
        let mut deadline = granted_at + margin;
        let mut sent_at = Instant::now();
        let mut unacked: Option<Instant> = Some(sent_at);
        let mut tick = tokio::time::interval(ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        let key = self.options.key.clone();
        let mut leading = false;
        loop {
            // Campaign (or confirm the key is ours) and watch the key from there.
            let campaign = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    self.options.id.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )])
                .or_else([TxnOp::get(key.clone(), None)]);
            let response = match self.client.kv_client().txn(campaign).await {
                Ok(response) => response,
                Err(err) => return TermEnd::Lost(format!("campaigning: {err}")),
            };
            let at = response.header().map_or(0, |header| header.revision());
            let holder_lease = response.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.lease()),
                _ => None,
            });
            let ours = response.succeeded() || holder_lease == Some(lease);
            if ours && !leading {
                leading = true;
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
