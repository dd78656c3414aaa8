//! The one-time upgrade of a version 1 mount's secrets when the mount becomes version 2
//! (`sys/mounts/<path>/tune` with `options.version: 2`).
//!
//! Where it sits: `engine.rs` runs [`run`] before the first request a version 2 engine serves
//! (every later request waits for it to finish); it walks the mount's view and writes through
//! `store.rs`.
//!
//! Each version 1 secret (any key outside the version 2 prefix) becomes version 1 of the same
//! key, created now, with the window already moved past it (`oldest_version` 1, as upstream's
//! upgrade records it); then the old key is deleted. A marker records the end, so a mount that
//! was upgraded (or was version 2 from the start) only reads the marker.
//!
//! Invariant: the upgrade is resumable: a secret's version and metadata are written before its
//! old key is deleted, and the marker is written last, so an interrupted upgrade redoes at most
//! the secret it was on. A key whose value is not a JSON object is left where it is.

use std::sync::Arc;

use secrets_sdk::{Data, EngineError, EngineStorage};

use crate::v2::store::{KeyMetadata, PREFIX, Store, Upgraded, Version};

/// Upgrades the mount's version 1 secrets unless the marker says it was done; `now` stamps the
/// new versions (Unix nanoseconds).
pub(super) async fn run(store: &Store, now: i64) -> Result<(), EngineError> {
    if store.load_upgraded().await?.is_some() {
        return Ok(());
    }
    let mut moved = 0;
    for key in version_1_keys(store.view()).await? {
        let Some(bytes) = store.view().get(&key).await? else {
            continue;
        };
        let Ok(data) = serde_json::from_slice::<Data>(&bytes) else {
            continue;
        };
        let version = Version {
            version: 0,
            data,
            created_time: now,
        };
        store.save_version(&key, 1, &version).await?;
        let mut meta = KeyMetadata::default();
        meta.add_version(now, None, 1);
        store.save_metadata(&key, &meta).await?;
        store.view().delete(&key).await?;
        moved += 1;
    }
    store
        .save_upgraded(&Upgraded {
            version: 0,
            done_time: now,
            moved,
        })
        .await
}

/// Every key in the view outside the version 2 prefix, depth first.
async fn version_1_keys(view: &Arc<dyn EngineStorage>) -> Result<Vec<String>, EngineError> {
    let mut keys = Vec::new();
    let mut pending = vec![String::new()];
    while let Some(prefix) = pending.pop() {
        for child in view.list(&prefix).await? {
            let full = format!("{prefix}{child}");
            if full == PREFIX || full.starts_with(PREFIX) {
                continue;
            }
            if full.ends_with('/') {
                pending.push(full);
            } else {
                keys.push(full);
            }
        }
    }
    Ok(keys)
}
