//! Every storage key the secrets service writes, and its stored records.
//!
//! Invariants: all keys start with [`PREFIX`]; every record carries a `version` field so later
//! releases can upgrade it in place.

use serde::{Deserialize, Serialize};
use storage::{Compare, Op, Storage, Txn};

use crate::Error;

/// The secrets service's key prefix in the shared store.
pub(crate) const PREFIX: &str = "secrets/";

/// The cluster's identity, created once at first start.
pub(crate) const CLUSTER_KEY: &str = "secrets/core/cluster";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ClusterIdentity {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) name: String,
}

/// Reads the cluster identity, creating it on first start. Concurrent first starts agree on
/// one identity through a create-if-missing transaction.
pub(crate) async fn load_or_create_cluster(
    storage: &dyn Storage,
) -> Result<ClusterIdentity, Error> {
    debug_assert!(CLUSTER_KEY.starts_with(PREFIX));
    if let Some(kv) = storage.get(CLUSTER_KEY.as_bytes()).await? {
        return decode(CLUSTER_KEY, &kv.value);
    }
    let id = uuid::Uuid::new_v4();
    let short = id.simple().to_string();
    let fresh = ClusterIdentity {
        version: 1,
        id: id.to_string(),
        name: format!("vault-cluster-{}", &short[..8]),
    };
    let encoded = serde_json::to_vec(&fresh).map_err(|err| Error::CorruptRecord {
        key: CLUSTER_KEY.to_owned(),
        reason: err.to_string(),
    })?;
    let txn = Txn::new()
        .when(Compare::Missing(CLUSTER_KEY.as_bytes().to_vec()))
        .then(Op::Put {
            key: CLUSTER_KEY.as_bytes().to_vec(),
            value: encoded,
        });
    if storage.txn(txn).await?.succeeded {
        return Ok(fresh);
    }
    match storage.get(CLUSTER_KEY.as_bytes()).await? {
        Some(kv) => decode(CLUSTER_KEY, &kv.value),
        None => Err(Error::CorruptRecord {
            key: CLUSTER_KEY.to_owned(),
            reason: "vanished after a conflicting create".to_owned(),
        }),
    }
}

fn decode<T: serde::de::DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|err| Error::CorruptRecord {
        key: key.to_owned(),
        reason: err.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use storage::MemStorage;

    use super::*;

    #[tokio::test]
    async fn cluster_identity_is_created_once_and_kept() {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        let first = load_or_create_cluster(storage.as_ref()).await.unwrap();
        let second = load_or_create_cluster(storage.as_ref()).await.unwrap();
        assert_eq!(first.id, second.id);
        assert!(first.name.starts_with("vault-cluster-"));
    }
}
