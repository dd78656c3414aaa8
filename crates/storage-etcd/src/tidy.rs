//! Tidying tombstones: removing the `{prefix}tomb/` keys (`keys.rs`) of deletes that compaction
//! has passed, and raising the tombstone floor that stands in for them in
//! [`storage::Storage::range_revision`], as the embedded stores prune tombstones with their
//! history.
//!
//! When: after this server compacts etcd (`history_retention` set), against the revision it
//! compacted to; with `history_retention = 0` (etcd compacts by itself), every
//! [`PROBE_EVERY`] writing transactions through this server, against the compaction revision
//! etcd reports (a watch from revision 1 of the store's marker, cancelled with it). Either way
//! only once a whole transaction's worth (`max_ops - 1`, 125 on a default etcd) has passed
//! compaction, so a tidy costs one etcd revision per that many deletes, not one per
//! compaction; then every tombstone compaction passed goes. So the tombstones older than
//! compaction are at most that many, whatever was ever deleted. Any server may tidy, several
//! at once: every step is guarded in etcd. One server runs one tidy at a
//! time; [`crate::EtcdStorage::tidy`] runs one now.
//!
//! Invariants:
//! - A tombstone goes only in a transaction that also raises the floor (`meta/tombstone-floor`,
//!   20 decimal digits, so etcd's byte compare is numeric) to at least its revision, and only if
//!   it still has the revision it was read with (a key deleted again meanwhile keeps its newer
//!   tombstone). So `range_revision` (live keys, tombstones and the floor, read in one etcd
//!   transaction) never goes backwards, on any server and after a restart.
//! - The floor never goes down: it is written only when missing or lower.
//! - Only tombstones at or below the given revision go, and that revision is one etcd has
//!   compacted to, so no watch could still need to see those deletes (they are gone from etcd's
//!   history too).
//! - A transaction stays within the store's limits (at most `max_ops - 1` tombstones beside the
//!   floor's nested update, within `max_bytes`).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use etcd_client::{Client, Compare as EtcdCompare, CompareOp, GetOptions, Txn as EtcdTxn, TxnOp};
use storage::{KeyRange, Op, Result, TxnLimits};
use tokio_util::sync::CancellationToken;

use crate::keys::{Layout, successor};
use crate::{backend, etcd_compaction_revision};

/// Writing transactions through one server between two probes of etcd's compaction revision,
/// when etcd compacts by itself.
pub(crate) const PROBE_EVERY: u64 = 1000;

/// Tombstones read per page.
const PAGE: i64 = 1000;

/// The tidy of one store: shared with the background tasks it starts.
pub(crate) struct Tidy {
    client: Client,
    layout: Layout,
    limits: TxnLimits,
    /// Held by the tidy running (in the background or through `EtcdStorage::tidy`).
    running: tokio::sync::Mutex<()>,
    /// The highest revision this process tidied against.
    done_to: AtomicI64,
    /// Writing transactions since the last probe (when etcd compacts by itself).
    writes: AtomicU64,
    /// Cancelled when the store closes: background tidies stop.
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Tidy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tidy")
            .field("done_to", &self.done_to.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Tidy {
    pub(crate) fn new(
        client: Client,
        layout: Layout,
        limits: TxnLimits,
        shutdown: CancellationToken,
    ) -> Arc<Tidy> {
        Arc::new(Tidy {
            client,
            layout,
            limits,
            running: tokio::sync::Mutex::new(()),
            done_to: AtomicI64::new(0),
            writes: AtomicU64::new(0),
            shutdown,
        })
    }

    /// After this server compacted etcd to `revision`: tidy against it in the background.
    pub(crate) fn after_compaction(self: &Arc<Tidy>, revision: i64) {
        if revision <= self.done_to.load(Ordering::Acquire) {
            return;
        }
        let tidy = Arc::clone(self);
        tokio::spawn(async move { tidy.background(Some(revision)).await });
    }

    /// After a writing transaction, when etcd compacts by itself: every [`PROBE_EVERY`], ask
    /// etcd how far it compacted and tidy against that in the background.
    pub(crate) fn after_write(self: &Arc<Tidy>) {
        let writes = self.writes.fetch_add(1, Ordering::AcqRel) + 1;
        if !writes.is_multiple_of(PROBE_EVERY) {
            return;
        }
        let tidy = Arc::clone(self);
        tokio::spawn(async move { tidy.background(None).await });
    }

    async fn background(&self, upto: Option<i64>) {
        // One at a time: a tidy already running does this one's work or more.
        let Ok(_running) = self.running.try_lock() else {
            return;
        };
        let run = async {
            match self.run(upto, self.batch()).await {
                Ok(0) => {}
                Ok(removed) => tracing::debug!(removed, "etcd tombstones tidied"),
                Err(err) => tracing::warn!(error = %err, "cannot tidy etcd tombstones"),
            }
        };
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => {}
            () = run => {}
        }
    }

    /// Tidies now, after any tidy running here: against etcd's compaction revision. Returns
    /// how many tombstones went.
    pub(crate) async fn now(&self) -> Result<usize> {
        let _running = self.running.lock().await;
        self.run(None, 1).await
    }

    /// Tidies against `upto`, or against etcd's compaction revision when `None`, if at least
    /// `least` tombstones can go (the caller holds `running`).
    async fn run(&self, upto: Option<i64>, least: usize) -> Result<usize> {
        let upto = match upto {
            Some(upto) => upto,
            None => crate::txn::signed(etcd_compaction_revision(&self.client, &self.layout).await?),
        };
        if upto <= 0 {
            return Ok(0);
        }
        let removed = self.remove_upto(upto, least).await?;
        if removed > 0 {
            self.done_to.fetch_max(upto, Ordering::AcqRel);
        }
        Ok(removed)
    }

    /// Removes every tombstone written at or before `upto`, if there are at least `least`.
    async fn remove_upto(&self, upto: i64, least: usize) -> Result<usize> {
        let (start, end) = self.layout.tomb_range(&KeyRange::all());
        let mut kv = self.client.kv_client();
        let mut from = start;
        let mut old: Vec<(Vec<u8>, i64)> = Vec::new();
        loop {
            let options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(PAGE)
                .with_keys_only();
            let response = kv
                .get(from.clone(), Some(options))
                .await
                .map_err(|err| backend("reading tombstones to tidy", err))?;
            old.extend(
                response
                    .kvs()
                    .iter()
                    .filter(|kv| kv.mod_revision() <= upto)
                    .map(|kv| (kv.key().to_vec(), kv.mod_revision())),
            );
            match response.kvs().last() {
                Some(last) if response.more() => from = successor(last.key()),
                _ => break,
            }
        }
        if old.is_empty() || old.len() < least {
            return Ok(0);
        }
        let mut removed = 0;
        for chunk in self.chunks(old) {
            removed += self.remove(&chunk).await?;
        }
        Ok(removed)
    }

    /// The fewest tombstones a tidy of its own accord removes: one whole transaction's worth.
    fn batch(&self) -> usize {
        self.limits.max_ops.saturating_sub(1).max(1)
    }

    /// Tombstones grouped into transactions within the store's limits.
    fn chunks(&self, tombs: Vec<(Vec<u8>, i64)>) -> Vec<Vec<(Vec<u8>, i64)>> {
        let floor_bytes = self.limits.op_bytes(&Op::Delete {
            key: self.layout.tombstone_floor(),
        }) * 2;
        let most = self.limits.max_ops.saturating_sub(1).max(1);
        let mut chunks: Vec<Vec<(Vec<u8>, i64)>> = Vec::new();
        let mut bytes = floor_bytes;
        for tomb in tombs {
            let size = self.limits.op_bytes(&Op::Delete {
                key: tomb.0.clone(),
            });
            let full = chunks.last().is_none_or(|chunk| {
                chunk.len() >= most || bytes.saturating_add(size) > self.limits.max_bytes
            });
            if full {
                chunks.push(Vec::new());
                bytes = floor_bytes;
            }
            bytes = bytes.saturating_add(size);
            if let Some(chunk) = chunks.last_mut() {
                chunk.push(tomb);
            }
        }
        chunks
    }

    /// One transaction: raise the floor to the chunk's highest revision, and delete each
    /// tombstone still at the revision it was read with. Returns how many were deleted.
    async fn remove(&self, chunk: &[(Vec<u8>, i64)]) -> Result<usize> {
        let Some(floor) = chunk.iter().map(|(_, revision)| *revision).max() else {
            return Ok(0);
        };
        let key = self.layout.tombstone_floor();
        let value = format!("{floor:020}").into_bytes();
        let raise = TxnOp::txn(
            EtcdTxn::new()
                .when([EtcdCompare::create_revision(
                    key.clone(),
                    CompareOp::Equal,
                    0,
                )])
                .and_then([TxnOp::put(key.clone(), value.clone(), None)])
                .or_else([TxnOp::txn(
                    EtcdTxn::new()
                        .when([EtcdCompare::value(
                            key.clone(),
                            CompareOp::Less,
                            value.clone(),
                        )])
                        .and_then([TxnOp::put(key, value, None)]),
                )]),
        );
        let mut ops = Vec::with_capacity(chunk.len() + 1);
        ops.push(raise);
        for (tomb, revision) in chunk {
            ops.push(TxnOp::txn(
                EtcdTxn::new()
                    .when([EtcdCompare::mod_revision(
                        tomb.clone(),
                        CompareOp::Equal,
                        *revision,
                    )])
                    .and_then([TxnOp::delete(tomb.clone(), None)]),
            ));
        }
        let response = self
            .client
            .kv_client()
            .txn(EtcdTxn::new().and_then(ops))
            .await
            .map_err(|err| backend("tidying tombstones", err))?;
        let deleted = response
            .op_responses()
            .into_iter()
            .skip(1)
            .filter(|op| matches!(op, etcd_client::TxnOpResponse::Txn(inner) if inner.succeeded()))
            .count();
        Ok(deleted)
    }
}

/// The tombstone floor as stored (0 when missing or unreadable).
pub(crate) fn parse_floor(value: &[u8]) -> i64 {
    std::str::from_utf8(value)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(0)
}
