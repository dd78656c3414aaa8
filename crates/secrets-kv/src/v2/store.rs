//! Every key kv version 2 writes, and the records stored under them.
//!
//! Where it sits: below the handlers (`config.rs`, `data.rs`, `metadata.rs`, `versions.rs`,
//! `subkeys.rs`) and the upgrade (`upgrade.rs`); it talks to the mount's barrier view and
//! nothing else.
//!
//! Keys (relative to the mount's view), all under [`PREFIX`] so that a version 1 mount's keys
//! (any path at all) never meet them:
//! - `_kv2/config`: the mount's [`Config`];
//! - `_kv2/upgraded`: present once the mount's version 1 data was upgraded ([`Upgraded`]);
//! - `_kv2/metadata/<key>`: a secret's [`KeyMetadata`] (listing `metadata/` lists these);
//! - `_kv2/versions/<n>/<key>`: version `n` of a secret ([`Version`]).
//!
//! Invariants: every record carries `version` (the record format, 1 today) and is read through
//! its `upgrade`; a version's data is written before the metadata that names it, and deleted
//! only after the metadata that dropped it was written, so metadata never names missing data
//! except after a destroy (which marks it `destroyed` first).

use std::collections::BTreeMap;
use std::sync::Arc;

use secrets_sdk::{Data, EngineError, EngineStorage};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The prefix of every key kv version 2 writes.
pub(super) const PREFIX: &str = "_kv2/";
const CONFIG_KEY: &str = "_kv2/config";
const UPGRADED_KEY: &str = "_kv2/upgraded";
const METADATA_PREFIX: &str = "_kv2/metadata/";
const VERSIONS_PREFIX: &str = "_kv2/versions/";

/// The record format written today.
const RECORD_VERSION: u32 = 1;

/// Versions kept per key when neither the mount nor the key sets `max_versions`.
pub(super) const DEFAULT_MAX_VERSIONS: u32 = 10;

/// `delete_version_after` in the mount config that turns automatic deletion off for every key
/// (any negative duration written to `config` is stored as this, as Vault's `-1s`).
pub(super) const DELETE_VERSION_AFTER_DISABLED: i64 = -1;

/// The mount's settings (`config`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Config {
    #[serde(default)]
    pub(super) version: u32,
    /// 0: not set ([`DEFAULT_MAX_VERSIONS`] applies).
    pub(super) max_versions: u32,
    pub(super) cas_required: bool,
    /// Seconds; 0: not set; [`DELETE_VERSION_AFTER_DISABLED`]: off for every key.
    pub(super) delete_version_after_secs: i64,
}

impl Config {
    fn upgrade(mut self) -> Config {
        self.version = RECORD_VERSION;
        self
    }

    pub(super) fn delete_version_after_disabled(&self) -> bool {
        self.delete_version_after_secs == DELETE_VERSION_AFTER_DISABLED
    }
}

/// One version as the key's metadata lists it. Times are Unix nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct VersionMetadata {
    pub(super) created_time: Option<i64>,
    /// Set by a delete (now) or by `delete_version_after` (in the future): the version reads
    /// as deleted from this instant on.
    pub(super) deletion_time: Option<i64>,
    pub(super) destroyed: bool,
}

impl VersionMetadata {
    /// Whether the version reads as deleted at `now` (Unix nanoseconds).
    pub(super) fn is_deleted_at(&self, now: i64) -> bool {
        self.deletion_time.is_some_and(|at| at <= now)
    }
}

/// A secret's metadata: its versions and its own settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct KeyMetadata {
    #[serde(default)]
    pub(super) version: u32,
    /// The versions still kept (pruned ones are gone), by number.
    pub(super) versions: BTreeMap<u64, VersionMetadata>,
    pub(super) current_version: u64,
    pub(super) oldest_version: u64,
    pub(super) created_time: Option<i64>,
    pub(super) updated_time: Option<i64>,
    /// 0: the mount's setting applies.
    pub(super) max_versions: u32,
    pub(super) cas_required: bool,
    /// Seconds; 0: the mount's setting applies.
    pub(super) delete_version_after_secs: i64,
    pub(super) custom_metadata: BTreeMap<String, String>,
}

impl KeyMetadata {
    fn upgrade(mut self) -> KeyMetadata {
        self.version = RECORD_VERSION;
        self
    }

    /// Records a new version created at `created` (and due for deletion at `deletion`), and
    /// moves the window of kept versions: returns the new version's number and the newest
    /// version number now beyond the window (0: none), whose data and that of every older
    /// version must go.
    ///
    /// The window is the larger of the key's and the mount's `max_versions`, else
    /// [`DEFAULT_MAX_VERSIONS`] (upstream's `AddVersion`).
    pub(super) fn add_version(
        &mut self,
        created: i64,
        deletion: Option<i64>,
        config_max_versions: u32,
    ) -> (u64, u64) {
        self.current_version += 1;
        let number = self.current_version;
        self.versions.insert(
            number,
            VersionMetadata {
                created_time: Some(created),
                deletion_time: deletion,
                destroyed: false,
            },
        );
        self.updated_time = Some(created);
        self.created_time.get_or_insert(created);
        let max_versions = match self.max_versions.max(config_max_versions) {
            0 => DEFAULT_MAX_VERSIONS,
            n => n,
        };
        if self.current_version - self.oldest_version < u64::from(max_versions) {
            return (number, 0);
        }
        let last_dropped = self.current_version - u64::from(max_versions);
        self.versions.retain(|n, _| *n > last_dropped);
        self.oldest_version = last_dropped + 1;
        (number, last_dropped)
    }
}

/// One version's data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Version {
    #[serde(default)]
    pub(super) version: u32,
    pub(super) data: Data,
    pub(super) created_time: i64,
}

impl Version {
    fn upgrade(mut self) -> Version {
        self.version = RECORD_VERSION;
        self
    }
}

/// The marker of a finished upgrade from version 1.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Upgraded {
    #[serde(default)]
    pub(super) version: u32,
    /// When the upgrade finished, Unix nanoseconds.
    pub(super) done_time: i64,
    /// How many version 1 secrets it moved.
    pub(super) moved: u64,
}

fn metadata_key(key: &str) -> String {
    format!("{METADATA_PREFIX}{key}")
}

fn version_key(key: &str, number: u64) -> String {
    format!("{VERSIONS_PREFIX}{number}/{key}")
}

/// Typed reads and writes of the records above, through the mount's view.
#[derive(Debug, Clone)]
pub(super) struct Store {
    storage: Arc<dyn EngineStorage>,
}

impl Store {
    pub(super) fn new(storage: Arc<dyn EngineStorage>) -> Store {
        Store { storage }
    }

    /// The raw view, for the upgrade's walk over version 1 keys.
    pub(super) fn view(&self) -> &Arc<dyn EngineStorage> {
        &self.storage
    }

    async fn load<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, EngineError> {
        let Some(bytes) = self.storage.get(key).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|err| EngineError::Internal(format!("decoding {key:?} failed: {err}")))
    }

    async fn save<T: Serialize>(&self, key: &str, record: &T) -> Result<(), EngineError> {
        let bytes = serde_json::to_vec(record)
            .map_err(|err| EngineError::Internal(format!("encoding {key:?} failed: {err}")))?;
        self.storage.put(key, &bytes).await?;
        Ok(())
    }

    /// The mount's config (defaults when never written).
    pub(super) async fn load_config(&self) -> Result<Config, EngineError> {
        Ok(self
            .load::<Config>(CONFIG_KEY)
            .await?
            .unwrap_or_default()
            .upgrade())
    }

    pub(super) async fn save_config(&self, config: &Config) -> Result<(), EngineError> {
        self.save(CONFIG_KEY, &config.clone().upgrade()).await
    }

    pub(super) async fn load_upgraded(&self) -> Result<Option<Upgraded>, EngineError> {
        self.load(UPGRADED_KEY).await
    }

    pub(super) async fn save_upgraded(&self, marker: &Upgraded) -> Result<(), EngineError> {
        let mut marker = marker.clone();
        marker.version = RECORD_VERSION;
        self.save(UPGRADED_KEY, &marker).await
    }

    pub(super) async fn load_metadata(
        &self,
        key: &str,
    ) -> Result<Option<KeyMetadata>, EngineError> {
        Ok(self
            .load::<KeyMetadata>(&metadata_key(key))
            .await?
            .map(KeyMetadata::upgrade))
    }

    pub(super) async fn save_metadata(
        &self,
        key: &str,
        metadata: &KeyMetadata,
    ) -> Result<(), EngineError> {
        self.save(&metadata_key(key), &metadata.clone().upgrade())
            .await
    }

    pub(super) async fn remove_metadata(&self, key: &str) -> Result<(), EngineError> {
        Ok(self.storage.delete(&metadata_key(key)).await?)
    }

    /// The immediate children of `prefix` (`""` or ending in `/`) among the keys with metadata.
    pub(super) async fn list_metadata(&self, prefix: &str) -> Result<Vec<String>, EngineError> {
        Ok(self.storage.list(&metadata_key(prefix)).await?)
    }

    pub(super) async fn load_version(
        &self,
        key: &str,
        number: u64,
    ) -> Result<Option<Version>, EngineError> {
        Ok(self
            .load::<Version>(&version_key(key, number))
            .await?
            .map(Version::upgrade))
    }

    pub(super) async fn save_version(
        &self,
        key: &str,
        number: u64,
        version: &Version,
    ) -> Result<(), EngineError> {
        self.save(&version_key(key, number), &version.clone().upgrade())
            .await
    }

    pub(super) async fn remove_version(&self, key: &str, number: u64) -> Result<(), EngineError> {
        Ok(self.storage.delete(&version_key(key, number)).await?)
    }

    /// Whether version `number` of `key` still has data.
    pub(super) async fn has_version(&self, key: &str, number: u64) -> Result<bool, EngineError> {
        Ok(self.storage.get(&version_key(key, number)).await?.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_version_keeps_the_default_window_of_ten() {
        let mut meta = KeyMetadata::default();
        for n in 1..=9 {
            assert_eq!(meta.add_version(n, None, 0), (n as u64, 0));
        }
        assert_eq!(meta.oldest_version, 0);
        assert_eq!(meta.add_version(10, None, 0), (10, 0));
        assert_eq!(meta.oldest_version, 1);
        assert_eq!(meta.add_version(11, None, 0), (11, 1));
        assert_eq!(meta.oldest_version, 2);
        assert_eq!(
            meta.versions.keys().copied().collect::<Vec<_>>(),
            (2..=11).collect::<Vec<_>>()
        );
        assert_eq!(meta.created_time, Some(1));
        assert_eq!(meta.updated_time, Some(11));
    }

    #[test]
    fn add_version_takes_the_larger_of_the_key_and_mount_windows() {
        let mut meta = KeyMetadata {
            max_versions: 2,
            ..KeyMetadata::default()
        };
        meta.add_version(1, None, 0);
        meta.add_version(2, None, 0);
        assert_eq!(meta.add_version(3, None, 0), (3, 1));
        assert_eq!(meta.add_version(4, None, 3), (4, 0));
        assert_eq!(meta.versions.len(), 3);
        // Shrinking the window drops every version beyond it at the next write.
        meta.max_versions = 1;
        assert_eq!(meta.add_version(5, None, 0), (5, 4));
        assert_eq!(meta.versions.keys().copied().collect::<Vec<_>>(), vec![5]);
        assert_eq!(meta.oldest_version, 5);
    }

    #[test]
    fn keys_keep_version_data_apart_from_metadata_and_version_1_keys() {
        assert_eq!(metadata_key("a/b"), "_kv2/metadata/a/b");
        assert_eq!(version_key("a/b", 3), "_kv2/versions/3/a/b");
        assert!(CONFIG_KEY.starts_with(PREFIX) && UPGRADED_KEY.starts_with(PREFIX));
    }
}
