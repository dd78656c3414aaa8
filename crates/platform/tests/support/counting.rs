//! [`CountingStorage`]: a memory store that records which records a request read, for the
//! tests that show a list reads only its page (not every record of the collection).
//!
//! Where it sits: test support only; a [`TestPlatform`](super::TestPlatform) is opened over it
//! with `TestPlatform::over`. Everything is delegated to a `MemStorage` unchanged.
//!
//! Invariants: [`CountingStorage::reads_under`] counts the keys under a prefix returned by
//! `get` and `scan` since the last [`CountingStorage::reset`], whatever the caller did with
//! them, so a count can only overstate what the platform decoded.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use storage::{
    KeyRange, KeyValue, MemStorage, Revision, ScanResult, Snapshot, Storage, Txn, TxnResult,
    WatchStream,
};

/// A memory store that remembers every key it answered with.
#[derive(Debug, Default)]
pub(crate) struct CountingStorage {
    inner: MemStorage,
    read: Mutex<Vec<Vec<u8>>>,
}

impl CountingStorage {
    pub(crate) fn new() -> Arc<CountingStorage> {
        Arc::new(CountingStorage::default())
    }

    /// Forgets the keys read so far.
    pub(crate) fn reset(&self) {
        self.read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// How many keys under `prefix` were answered since the last reset.
    pub(crate) fn reads_under(&self, prefix: &str) -> usize {
        self.read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|key| key.starts_with(prefix.as_bytes()))
            .count()
    }

    fn note<'a>(&self, keys: impl IntoIterator<Item = &'a KeyValue>) {
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        read.extend(keys.into_iter().map(|kv| kv.key.clone()));
    }
}

#[async_trait]
impl Storage for CountingStorage {
    async fn get(&self, key: &[u8]) -> storage::Result<Option<KeyValue>> {
        let kv = self.inner.get(key).await?;
        self.note(kv.iter());
        Ok(kv)
    }

    async fn scan(&self, range: KeyRange, limit: Option<usize>) -> storage::Result<ScanResult> {
        let scan = self.inner.scan(range, limit).await?;
        self.note(scan.kvs.iter());
        Ok(scan)
    }

    async fn txn(&self, txn: Txn) -> storage::Result<TxnResult> {
        self.inner.txn(txn).await
    }

    async fn revision(&self) -> storage::Result<Revision> {
        self.inner.revision().await
    }

    async fn range_revision(&self, range: KeyRange) -> storage::Result<Revision> {
        self.inner.range_revision(range).await
    }

    async fn watch(&self, range: KeyRange, after: Revision) -> storage::Result<WatchStream> {
        self.inner.watch(range, after).await
    }

    async fn snapshot(&self) -> storage::Result<Snapshot> {
        self.inner.snapshot().await
    }

    async fn restore(&self, snapshot: &Snapshot) -> storage::Result<Revision> {
        self.inner.restore(snapshot).await
    }

    async fn close(&self) -> storage::Result<()> {
        self.inner.close().await
    }
}
