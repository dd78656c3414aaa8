//! Test helpers for engines: an in-memory [`EngineStorage`] and a way to build an engine over
//! it, so engine tests need no HTTP and no core (OpenBao's `CreateBackendWithStorage`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::{Engine, EngineConfig, EngineError, EngineStorage, Factory, StorageError};

/// Storage in a `BTreeMap`, for tests.
#[derive(Debug, Default)]
pub struct MemEngineStorage {
    entries: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemEngineStorage {
    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every key stored, for assertions.
    pub fn keys(&self) -> Vec<String> {
        self.entries().keys().cloned().collect()
    }
}

#[async_trait]
impl EngineStorage for MemEngineStorage {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.entries().get(key).cloned())
    }

    async fn put(&self, key: &str, value: &[u8]) -> Result<(), StorageError> {
        self.entries().insert(key.to_owned(), value.to_vec());
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.entries().remove(key);
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        let entries = self.entries();
        Ok(crate::storage::children(
            prefix,
            entries.keys().map(String::as_str),
        ))
    }
}

/// Builds an engine mounted at `mount_point` over fresh in-memory storage, on the system clock.
pub fn engine_with_mem_storage(
    factory: Factory,
    mount_point: &str,
) -> Result<(Arc<dyn Engine>, Arc<MemEngineStorage>), EngineError> {
    let storage = Arc::new(MemEngineStorage::default());
    let engine = factory(EngineConfig {
        mount_point: mount_point.to_owned(),
        storage: storage.clone(),
        options: BTreeMap::new(),
        clock: Arc::new(stdx::clock::SystemClock),
        passwords: crate::Passwords::default(),
    })?;
    Ok((engine, storage))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn list_returns_immediate_children_with_directories() {
        let storage = MemEngineStorage::default();
        for key in ["a", "b/c", "b/d", "b/e/f", "c"] {
            storage.put(key, b"x").await.unwrap();
        }
        assert_eq!(storage.list("").await.unwrap(), vec!["a", "b/", "c"]);
        assert_eq!(storage.list("b/").await.unwrap(), vec!["c", "d", "e/"]);
        assert_eq!(storage.list("zz/").await.unwrap(), Vec::<String>::new());
    }
}
