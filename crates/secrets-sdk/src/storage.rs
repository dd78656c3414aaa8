//! The storage view an engine gets: a flat key space scoped to its mount, encrypted by the
//! core's barrier.
//!
//! Invariants: keys are relative to the mount; `list(prefix)` returns the immediate children of
//! `prefix` in ascending order, with "directories" ending in `/` (Vault's `logical.Storage`).

use async_trait::async_trait;

/// A storage failure, as an engine sees it.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StorageError {
    /// The store is sealed (the core answers 503).
    #[error("store is sealed")]
    Sealed,
    #[error("{0}")]
    Backend(String),
}

/// An engine's view of storage.
#[async_trait]
pub trait EngineStorage: Send + Sync + std::fmt::Debug {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError>;
    async fn put(&self, key: &str, value: &[u8]) -> Result<(), StorageError>;
    async fn delete(&self, key: &str) -> Result<(), StorageError>;
    /// Immediate children of `prefix`: `a`, `b/` (for keys under `prefix/b/`), sorted.
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError>;
}

/// Turns full keys under `prefix` into the immediate children `list` returns.
pub fn children<'a>(prefix: &str, keys: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for key in keys {
        let Some(rest) = key.strip_prefix(prefix) else {
            continue;
        };
        let child = match rest.find('/') {
            Some(slash) => &rest[..=slash],
            None => rest,
        };
        if !child.is_empty() && out.last().map(String::as_str) != Some(child) {
            out.push(child.to_owned());
        }
    }
    out.sort();
    out.dedup();
    out
}
