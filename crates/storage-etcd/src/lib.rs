//! The distributed storage backend: cairn's [`Storage`] on etcd v3, under one key prefix, and
//! [`EtcdLeadership`], leadership elected through an etcd lease.
//!
//! Several cairn servers share one etcd cluster (and one prefix): every transaction is one etcd
//! transaction, compare-and-swap maps to etcd's compares, watches are etcd watches, and the
//! revision is etcd's. Where it sits: beside `storage-redb`, below `cairn`'s wiring, which
//! builds it from `storage "etcd" { ... }`; services only ever see `Arc<dyn Storage>`.
//!
//! Invariants and the differences from the embedded store (argued in docs/design.md):
//! - Revisions are etcd's cluster-wide revision: strictly increasing per writing transaction,
//!   but not by exactly one when something else writes to the same etcd cluster (another
//!   prefix, another program), and not 0 for an empty store. A transaction that writes nothing
//!   writes no revision; it reports the revision it read at.
//! - A key changed twice in one transaction keeps only its final state (etcd allows one change
//!   per key per revision): deleting and re-putting a key in one transaction continues it.
//! - Deletes leave an empty tombstone key (`keys.rs`) so [`Storage::range_revision`] remembers
//!   them, until compaction passes them: then a tidy (`tidy.rs`) removes them and raises the
//!   tombstone floor, which stands in for them in `range_revision`, in one etcd transaction, so
//!   the answer never goes backwards. The store tidies after it compacts (`history_retention`
//!   set), or every 1,000 writes against etcd's own compaction revision (`history_retention =
//!   0`).
//! - A watch starts after the store's creation marker at the earliest (the history of other
//!   prefixes before it is none of this store's), and a watch from history etcd has compacted
//!   fails with [`Error::Compacted`] naming etcd's compaction revision.
//! - With `history_retention` set, the store compacts etcd to `revision - retention` after
//!   writes (compaction is cluster-wide; leave it unset when etcd's own auto-compaction runs).
//! - After [`Storage::close`] every call fails with [`Error::Closed`] and every watch ends.
//! - One etcd request carries at most etcd's `--max-txn-ops` (default 128) operations per
//!   level and `--max-request-bytes` (default 1.5 MiB): a bigger transaction or restore fails
//!   with a backend error naming the limit; large values belong in a blob store.

mod config;
mod keys;
mod leadership;
mod tidy;
mod txn;
mod watch;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Certificate, Client, Compare as EtcdCompare, CompareOp, ConnectOptions, GetOptions, Identity,
    SortOrder, SortTarget, TlsOptions, Txn as EtcdTxn, TxnOp, TxnOpResponse,
};
use storage::{
    Error, KeyRange, KeyValue, Result, Revision, ScanResult, Snapshot, Storage, Txn, TxnResult,
    WatchStream,
};
use tokio_util::sync::CancellationToken;

pub use config::{EtcdBlock, TlsBlock};
pub use leadership::{EtcdLeadership, LeadershipOptions};

use crate::keys::{Layout, successor};

/// How many keys one range read returns at most, for snapshots and restores.
const PAGE: i64 = 1000;

/// How many times a transaction whose range deletes raced with other writers is retried.
const RANGE_DELETE_ATTEMPTS: usize = 64;

/// How to reach etcd and where this store lives in it.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// `host:port` or `http(s)://host:port` of one or more cluster members.
    pub endpoints: Vec<String>,
    /// Every key of this store starts with it; servers of one cairn cluster share it.
    pub prefix: String,
    pub username: Option<String>,
    pub password: Option<String>,
    pub tls: Option<EtcdTls>,
    /// Compact etcd to `revision - retention` as writes go by; `None` leaves compaction to
    /// etcd's operator (its `--auto-compaction-*` flags).
    pub history_retention: Option<u64>,
    /// etcd's `--max-txn-ops` (operations per level of one transaction), as the cluster runs it.
    pub max_txn_ops: usize,
    /// etcd's `--max-request-bytes` (bytes of one request), as the cluster runs it.
    pub max_request_bytes: usize,
}

/// etcd's default `--max-txn-ops`.
pub const DEFAULT_MAX_TXN_OPS: usize = 128;

/// etcd's default `--max-request-bytes` (1.5 MiB).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1_572_864;

/// The smallest `max_txn_ops` the store works with (tidies and nested deletes need a few).
pub const MIN_MAX_TXN_OPS: usize = 16;

/// The smallest `max_request_bytes` the store works with.
pub const MIN_MAX_REQUEST_BYTES: usize = 64 * 1024;

/// Bytes of an etcd request kept for what [`storage::TxnLimits`] does not count (the raft
/// request's header, the transaction's own framing, the scheduler's fence).
const REQUEST_HEADROOM: usize = 4096;

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .field("history_retention", &self.history_retention)
            .field("max_txn_ops", &self.max_txn_ops)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish()
    }
}

impl EtcdConfig {
    /// A configuration for `endpoints` and `prefix`, without credentials or TLS, that keeps
    /// [`storage::DEFAULT_HISTORY_RETENTION`] revisions of history.
    pub fn new(endpoints: Vec<String>, prefix: impl Into<String>) -> EtcdConfig {
        EtcdConfig {
            endpoints,
            prefix: prefix.into(),
            username: None,
            password: None,
            tls: None,
            history_retention: Some(storage::DEFAULT_HISTORY_RETENTION),
            max_txn_ops: DEFAULT_MAX_TXN_OPS,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
        }
    }

    /// What one cairn transaction may carry under these etcd limits. A cairn `Delete` is a
    /// nested etcd transaction (`if exists { delete; put tombstone }`), and etcd gives a nested
    /// transaction only the operations its parent level leaves (`max_txn_ops - opc`), so two
    /// operations per level are kept for it; each key carries the prefix and the longest
    /// subspace name (`tomb/`) and its protobuf framing.
    pub fn txn_limits(&self) -> storage::TxnLimits {
        storage::TxnLimits {
            max_ops: self.max_txn_ops.saturating_sub(2).max(1),
            max_bytes: self
                .max_request_bytes
                .saturating_sub(REQUEST_HEADROOM)
                .max(1),
            key_overhead: self.prefix.len() + "tomb/".len() + 8,
        }
    }
}

/// TLS towards etcd: a CA to verify the members, and a client certificate if etcd asks for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// Connects to etcd with `config`'s endpoints, credentials and TLS.
pub async fn connect(config: &EtcdConfig) -> Result<Client> {
    if config.endpoints.is_empty() {
        return Err(Error::Backend("etcd: no endpoints configured".to_owned()));
    }
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5))
        .with_keep_alive_while_idle(true);
    match (&config.username, &config.password) {
        (Some(user), Some(password)) => {
            options = options.with_user(user.clone(), password.clone());
        }
        (None, None) => {}
        _ => {
            return Err(Error::Backend(
                "etcd: username and password go together".to_owned(),
            ));
        }
    }
    if let Some(tls) = &config.tls {
        options = options.with_tls(tls_options(tls)?);
    }
    Client::connect(&config.endpoints, Some(options))
        .await
        .map_err(|err| backend("connecting to etcd", err))
}

fn tls_options(tls: &EtcdTls) -> Result<TlsOptions> {
    let read = |path: &PathBuf| {
        std::fs::read(path)
            .map_err(|err| Error::Backend(format!("etcd tls: reading {}: {err}", path.display())))
    };
    let mut options = TlsOptions::new();
    if let Some(ca) = &tls.ca {
        options = options.ca_certificate(Certificate::from_pem(read(ca)?));
    }
    match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            options = options.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        (None, None) => {}
        _ => {
            return Err(Error::Backend(
                "etcd tls: cert and key go together".to_owned(),
            ));
        }
    }
    Ok(options)
}

/// An etcd failure as a storage error; the message is for operators.
pub(crate) fn backend(what: &str, err: etcd_client::Error) -> Error {
    let text = err.to_string();
    if text.contains("too many operations in txn request") {
        return Error::Backend(format!(
            "{what}: the transaction has more operations than etcd's --max-txn-ops allows ({text})"
        ));
    }
    if text.contains("request is too large") {
        return Error::Backend(format!(
            "{what}: the request is larger than etcd's --max-request-bytes allows ({text})"
        ));
    }
    Error::Backend(format!("{what}: {text}"))
}

fn is_compacted(err: &etcd_client::Error) -> bool {
    err.to_string()
        .contains("required revision has been compacted")
}

fn is_future(err: &etcd_client::Error) -> bool {
    err.to_string()
        .contains("required revision is a future revision")
}

fn unsigned(revision: i64) -> Revision {
    u64::try_from(revision).unwrap_or(0)
}

/// The store on etcd. Cheap to share behind an `Arc`.
pub struct EtcdStorage {
    client: Client,
    layout: Layout,
    prefix: String,
    /// The revision that created this store's marker: no event of the store is older.
    birth: Revision,
    retention: Option<u64>,
    /// The highest revision this process compacted etcd to.
    compacted_to: AtomicI64,
    /// What one transaction may carry (from the configured etcd limits).
    limits: storage::TxnLimits,
    /// Removes tombstones compaction has passed (`tidy.rs`).
    tidy: Arc<tidy::Tidy>,
    closed: AtomicBool,
    /// Cancelled by `close`: ends every watch stream.
    shutdown: CancellationToken,
}

impl fmt::Debug for EtcdStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStorage")
            .field("prefix", &self.prefix)
            .field("birth", &self.birth)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl EtcdStorage {
    /// Connects and opens (creating on first use) the store under `config.prefix`.
    pub async fn open(config: &EtcdConfig) -> Result<EtcdStorage> {
        let client = connect(config).await?;
        EtcdStorage::with_client(client, config).await
    }

    /// Opens the store over an existing connection (shared with [`EtcdLeadership`]).
    pub async fn with_client(client: Client, config: &EtcdConfig) -> Result<EtcdStorage> {
        let layout = Layout::new(config.prefix.as_bytes());
        let marker = layout.meta("created");
        let create = EtcdTxn::new()
            .when([EtcdCompare::create_revision(
                marker.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([TxnOp::put(marker.clone(), b"cairn".to_vec(), None)])
            .or_else([TxnOp::get(marker, None)]);
        let response = client
            .kv_client()
            .txn(create)
            .await
            .map_err(|err| backend("creating the store marker", err))?;
        let birth = if response.succeeded() {
            header_revision(response.header())
        } else {
            response
                .op_responses()
                .into_iter()
                .find_map(|op| match op {
                    TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.create_revision()),
                    _ => None,
                })
                .map(unsigned)
                .unwrap_or(0)
        };
        let shutdown = CancellationToken::new();
        let tidy = tidy::Tidy::new(
            client.clone(),
            layout.clone(),
            config.txn_limits(),
            shutdown.child_token(),
        );
        Ok(EtcdStorage {
            client,
            layout,
            prefix: config.prefix.clone(),
            birth,
            retention: config.history_retention.filter(|retention| *retention > 0),
            compacted_to: AtomicI64::new(0),
            limits: config.txn_limits(),
            tidy,
            closed: AtomicBool::new(false),
            shutdown,
        })
    }

    /// The connection, for leadership over the same etcd.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The key this store's servers elect their leader on.
    pub fn leader_key(&self) -> Vec<u8> {
        self.layout.meta("leader")
    }

    /// The prefix each server's membership record lives under (`members/<id>`).
    pub fn members_prefix(&self) -> Vec<u8> {
        self.layout.meta("members/")
    }

    fn open_check(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn kv(&self, kv: &etcd_client::KeyValue) -> Option<KeyValue> {
        let key = self.layout.strip_data(kv.key())?;
        Some(KeyValue {
            key: key.to_vec(),
            value: kv.value().to_vec(),
            create_revision: unsigned(kv.create_revision()),
            mod_revision: unsigned(kv.mod_revision()),
            version: unsigned(kv.version()),
        })
    }

    /// Every key in `range` at one revision (the first page's), with that revision.
    async fn read_all(&self, range: &KeyRange) -> Result<(Vec<KeyValue>, Revision)> {
        let (start, end) = self.layout.data_range(range);
        let mut kv = self.client.kv_client();
        let mut entries = Vec::new();
        let mut from = start;
        let mut at = 0i64;
        loop {
            let mut options = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
            if at > 0 {
                options = options.with_revision(at);
            }
            let response = kv
                .get(from.clone(), Some(options))
                .await
                .map_err(|err| backend("reading a range", err))?;
            if at == 0 {
                at = response.header().map_or(0, |header| header.revision());
            }
            entries.extend(response.kvs().iter().filter_map(|kv| self.kv(kv)));
            match response.kvs().last() {
                Some(last) if response.more() => from = successor(last.key()),
                _ => break,
            }
        }
        Ok((entries, unsigned(at)))
    }

    /// The keys in each range, read at one revision, and that revision.
    async fn read_keys(&self, ranges: &[KeyRange]) -> Result<(Vec<Vec<Vec<u8>>>, i64)> {
        let reads: Vec<TxnOp> = ranges
            .iter()
            .map(|range| {
                let (start, end) = self.layout.data_range(range);
                TxnOp::get(
                    start,
                    Some(GetOptions::new().with_range(end).with_keys_only()),
                )
            })
            .collect();
        let response = self
            .client
            .kv_client()
            .txn(EtcdTxn::new().and_then(reads))
            .await
            .map_err(|err| backend("reading the ranges a transaction deletes", err))?;
        let at = response.header().map_or(0, |header| header.revision());
        let keys = response
            .op_responses()
            .into_iter()
            .map(|op| match op {
                TxnOpResponse::Get(get) => get
                    .kvs()
                    .iter()
                    .filter_map(|kv| self.layout.strip_data(kv.key()).map(<[u8]>::to_vec))
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        Ok((keys, at))
    }

    /// Compacts etcd when the configured retention has been exceeded by enough revisions.
    async fn maybe_compact(&self, revision: Revision) {
        let Some(retention) = self.retention else {
            return;
        };
        let target = txn::signed(revision.saturating_sub(retention));
        let slack = i64::try_from((retention / 8).max(1)).unwrap_or(i64::MAX);
        let done = self.compacted_to.load(Ordering::Acquire);
        if target <= done.saturating_add(slack) {
            return;
        }
        if self
            .compacted_to
            .compare_exchange(done, target, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return; // another write is compacting
        }
        match self.client.kv_client().compact(target, None).await {
            Ok(_) => self.tidy.after_compaction(target),
            // Another server compacted at least as far.
            Err(err) if is_compacted(&err) => self.tidy.after_compaction(target),
            Err(err) => tracing::warn!(error = %err, target, "etcd compaction failed"),
        }
    }

    /// etcd's compaction revision: the oldest revision a watch can still start after.
    async fn compaction_revision(&self) -> Result<Revision> {
        etcd_compaction_revision(&self.client, &self.layout).await
    }

    /// Removes now the tombstones of deletes etcd's compaction has passed, raising the
    /// tombstone floor with them (`tidy.rs`; the store also does this by itself after it
    /// compacts, or every 1,000 writes when etcd compacts by itself). Returns how many went.
    pub async fn tidy(&self) -> Result<usize> {
        self.open_check()?;
        self.tidy.now().await
    }

    async fn txn_with_range_deletes(
        &self,
        txn: &Txn,
        branches: &(Vec<txn::Write>, Vec<txn::Write>),
        ranges: &[KeyRange],
    ) -> Result<TxnResult> {
        let mut kv = self.client.kv_client();
        for _ in 0..RANGE_DELETE_ATTEMPTS {
            let (keys, read_at) = self.read_keys(ranges).await?;
            let lookup = |range: &KeyRange| {
                ranges
                    .iter()
                    .position(|candidate| candidate == range)
                    .and_then(|index| keys.get(index).cloned())
                    .unwrap_or_default()
            };
            let inner = EtcdTxn::new()
                .when(
                    txn.compares
                        .iter()
                        .map(|compare| txn::compare(&self.layout, compare))
                        .collect::<Vec<_>>(),
                )
                .and_then(txn::branch_ops(&self.layout, &branches.0, &lookup))
                .or_else(txn::branch_ops(&self.layout, &branches.1, &lookup));
            let guards: Vec<EtcdCompare> = ranges
                .iter()
                .map(|range| txn::unchanged_since(&self.layout, range, read_at))
                .collect();
            let response = kv
                .txn(EtcdTxn::new().when(guards).and_then([TxnOp::txn(inner)]))
                .await
                .map_err(|err| backend("applying a transaction", err))?;
            if !response.succeeded() {
                continue; // a key in a deleted range changed since the read: read again
            }
            let succeeded = response
                .op_responses()
                .into_iter()
                .find_map(|op| match op {
                    TxnOpResponse::Txn(inner) => Some(inner.succeeded()),
                    _ => None,
                })
                .unwrap_or(false);
            return Ok(TxnResult {
                succeeded,
                revision: header_revision(response.header()),
            });
        }
        Err(Error::Backend(format!(
            "a transaction deleting key ranges gave up after {RANGE_DELETE_ATTEMPTS} attempts: \
             other writers kept changing those ranges"
        )))
    }
}

/// etcd's compaction revision (0 if it never compacted): a watch from revision 1 of the
/// store's marker is cancelled naming it, or replays the marker's creation when nothing is
/// compacted.
pub(crate) async fn etcd_compaction_revision(client: &Client, layout: &Layout) -> Result<Revision> {
    let options = etcd_client::WatchOptions::new().with_start_revision(1);
    let mut stream = client
        .watch_client()
        .watch(layout.meta("created"), Some(options))
        .await
        .map_err(|err| backend("reading etcd's compaction revision", err))?;
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(response) = stream.message().await.ok().flatten() {
            if response.canceled() || response.compact_revision() > 0 {
                return response.compact_revision();
            }
            if !response.events().is_empty() {
                return 0;
            }
        }
        0
    })
    .await
    .unwrap_or(0);
    Ok(unsigned(found))
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Revision {
    unsigned(header.map_or(0, |header| header.revision()))
}

#[async_trait]
impl Storage for EtcdStorage {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        self.open_check()?;
        let response = self
            .client
            .kv_client()
            .get(self.layout.data(key), None)
            .await
            .map_err(|err| backend("get", err))?;
        Ok(response.kvs().first().and_then(|kv| self.kv(kv)))
    }

    async fn scan(&self, range: KeyRange, limit: Option<usize>) -> Result<ScanResult> {
        self.open_check()?;
        if range.is_empty() {
            return Ok(ScanResult {
                kvs: Vec::new(),
                revision: self.revision().await?,
                more: false,
            });
        }
        let (start, end) = self.layout.data_range(&range);
        let mut options = GetOptions::new().with_range(end);
        options = match limit {
            None => options,
            Some(0) => options.with_count_only(),
            Some(limit) => options.with_limit(i64::try_from(limit).unwrap_or(i64::MAX)),
        };
        let response = self
            .client
            .kv_client()
            .get(start, Some(options))
            .await
            .map_err(|err| backend("scan", err))?;
        let revision = header_revision(response.header());
        if limit == Some(0) {
            return Ok(ScanResult {
                kvs: Vec::new(),
                revision,
                more: response.count() > 0,
            });
        }
        Ok(ScanResult {
            kvs: response.kvs().iter().filter_map(|kv| self.kv(kv)).collect(),
            revision,
            more: response.more(),
        })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResult> {
        self.open_check()?;
        let branches = txn::branches(&txn);
        let mut ranges = txn::deleted_ranges(&branches.0);
        for range in txn::deleted_ranges(&branches.1) {
            if !ranges.contains(&range) {
                ranges.push(range);
            }
        }
        let result = if ranges.is_empty() {
            let none = |_: &KeyRange| Vec::new();
            let request = EtcdTxn::new()
                .when(
                    txn.compares
                        .iter()
                        .map(|compare| txn::compare(&self.layout, compare))
                        .collect::<Vec<_>>(),
                )
                .and_then(txn::branch_ops(&self.layout, &branches.0, &none))
                .or_else(txn::branch_ops(&self.layout, &branches.1, &none));
            let response = self
                .client
                .kv_client()
                .txn(request)
                .await
                .map_err(|err| backend("applying a transaction", err))?;
            TxnResult {
                succeeded: response.succeeded(),
                revision: header_revision(response.header()),
            }
        } else {
            self.txn_with_range_deletes(&txn, &branches, &ranges)
                .await?
        };
        if self.retention.is_some() {
            self.maybe_compact(result.revision).await;
        } else {
            self.tidy.after_write();
        }
        Ok(result)
    }

    async fn revision(&self) -> Result<Revision> {
        self.open_check()?;
        let response = self
            .client
            .kv_client()
            .get(
                self.layout.meta("created"),
                Some(GetOptions::new().with_count_only()),
            )
            .await
            .map_err(|err| backend("reading the revision", err))?;
        Ok(header_revision(response.header()))
    }

    async fn range_revision(&self, range: KeyRange) -> Result<Revision> {
        self.open_check()?;
        if range.is_empty() {
            return Ok(0);
        }
        let newest = |(start, end): (Vec<u8>, Vec<u8>)| {
            TxnOp::get(
                start,
                Some(
                    GetOptions::new()
                        .with_range(end)
                        .with_sort(SortTarget::Mod, SortOrder::Descend)
                        .with_limit(1)
                        .with_keys_only(),
                ),
            )
        };
        // Live keys, tombstones and the floor that stands in for tidied tombstones, read at
        // one revision (a tidy removes tombstones and raises the floor in one transaction).
        let request = EtcdTxn::new().and_then([
            newest(self.layout.data_range(&range)),
            newest(self.layout.tomb_range(&range)),
            TxnOp::get(self.layout.tombstone_floor(), None),
        ]);
        let response = self
            .client
            .kv_client()
            .txn(request)
            .await
            .map_err(|err| backend("range_revision", err))?;
        let floor_key = self.layout.tombstone_floor();
        let newest = response
            .op_responses()
            .into_iter()
            .filter_map(|op| match op {
                TxnOpResponse::Get(get) => get.kvs().first().map(|kv| {
                    if kv.key() == floor_key.as_slice() {
                        tidy::parse_floor(kv.value())
                    } else {
                        kv.mod_revision()
                    }
                }),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        Ok(unsigned(newest))
    }

    async fn watch(&self, range: KeyRange, after: Revision) -> Result<WatchStream> {
        self.open_check()?;
        let from = after.max(self.birth);
        if from > 0 {
            let probe = self
                .client
                .kv_client()
                .get(
                    self.layout.meta("created"),
                    Some(
                        GetOptions::new()
                            .with_count_only()
                            .with_revision(txn::signed(from)),
                    ),
                )
                .await;
            match probe {
                Ok(_) => {}
                Err(err) if is_compacted(&err) => {
                    return Err(Error::Compacted {
                        requested: after,
                        compacted: self.compaction_revision().await?,
                    });
                }
                Err(err) if is_future(&err) => {}
                Err(err) => return Err(backend("watch", err)),
            }
        }
        watch::open(
            self.client.clone(),
            self.layout.clone(),
            range,
            after,
            from,
            self.shutdown.child_token(),
        )
        .await
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        self.open_check()?;
        let (entries, revision) = self.read_all(&KeyRange::all()).await?;
        Ok(Snapshot { revision, entries })
    }

    async fn restore(&self, snapshot: &Snapshot) -> Result<Revision> {
        self.open_check()?;
        if snapshot
            .entries
            .windows(2)
            .any(|pair| pair[0].key >= pair[1].key)
        {
            return Err(Error::InvalidSnapshot(
                "entries out of order or duplicated".to_owned(),
            ));
        }
        let mut kv = self.client.kv_client();
        for _ in 0..RANGE_DELETE_ATTEMPTS {
            let (current, read_at) = self.read_all(&KeyRange::all()).await?;
            let wanted: std::collections::BTreeMap<&[u8], &[u8]> = snapshot
                .entries
                .iter()
                .map(|kv| (kv.key.as_slice(), kv.value.as_slice()))
                .collect();
            let mut ops = Vec::new();
            for kv in &current {
                if !wanted.contains_key(kv.key.as_slice()) {
                    ops.push(TxnOp::delete(self.layout.data(&kv.key), None));
                    ops.push(TxnOp::put(self.layout.tomb(&kv.key), Vec::new(), None));
                }
            }
            let existing: std::collections::BTreeMap<&[u8], &[u8]> = current
                .iter()
                .map(|kv| (kv.key.as_slice(), kv.value.as_slice()))
                .collect();
            for (key, value) in &wanted {
                if existing.get(key) != Some(value) {
                    ops.push(TxnOp::put(self.layout.data(key), value.to_vec(), None));
                }
            }
            if ops.is_empty() {
                return Ok(read_at);
            }
            let guard = txn::unchanged_since(&self.layout, &KeyRange::all(), txn::signed(read_at));
            let response = kv
                .txn(EtcdTxn::new().when([guard]).and_then(ops))
                .await
                .map_err(|err| backend("restoring a snapshot", err))?;
            if response.succeeded() {
                return Ok(header_revision(response.header()));
            }
        }
        Err(Error::Backend(format!(
            "restore gave up after {RANGE_DELETE_ATTEMPTS} attempts: other writers kept writing"
        )))
    }

    async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        self.shutdown.cancel();
        Ok(())
    }

    fn txn_limits(&self) -> storage::TxnLimits {
        self.limits
    }
}
