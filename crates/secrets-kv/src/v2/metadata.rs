//! `metadata/<key>`: a secret's metadata and settings, the listing of keys, and the permanent
//! delete of a key with all its versions.
//!
//! Where it sits: routed here by `mount.rs` with the key (`""` or ending in `/` for a list)
//! and the validated request fields; reads and writes `store.rs` records under the key's lock.
//!
//! - read → `{versions: {"<n>": {created_time, deletion_time, destroyed}}, current_version,
//!   oldest_version, created_time, updated_time, max_versions, cas_required,
//!   delete_version_after, custom_metadata}`; no key → 404.
//! - list → the immediate children of the prefix among keys with metadata (directories end in
//!   `/`); none → 404.
//! - write `{max_versions, cas_required, delete_version_after, custom_metadata}` → 204 (200
//!   with a warning when `cas_required: false` meets a mount that requires it); only the
//!   fields sent change, none sent → 204; a key without metadata gets some (with no versions).
//!   `custom_metadata` replaces the whole map and is validated (64 keys, lengths, printable).
//! - patch (merge patch of the same fields) → 204; no key → 404 with an empty body;
//!   `custom_metadata` entries are merged (`null` removes one).
//! - delete → 204; the metadata and every version's data are gone.
//!
//! Invariant: a write or patch never touches the versions, only the settings.

use secrets_sdk::{Data, EngineError, Response, fields};
use serde_json::{Map, Value, json};

use crate::v2::input;
use crate::v2::mount::Mount;
use crate::v2::render;
use crate::v2::store::{Config, KeyMetadata};

const CAS_IGNORED: &str =
    "\"cas_required\" set to false, but is mandated by backend config. This value will be ignored.";

pub(super) async fn read(mount: &Mount, key: &str) -> Result<Option<Response>, EngineError> {
    let Some(meta) = mount.store.load_metadata(key).await? else {
        return Ok(None);
    };
    let versions: Map<String, Value> = meta
        .versions
        .iter()
        .map(|(number, version)| {
            let shown = json!({
                "created_time": render::time(version.created_time),
                "deletion_time": render::time(version.deletion_time),
                "destroyed": version.destroyed,
            });
            (number.to_string(), shown)
        })
        .collect();
    Ok(Some(Response::data(render::object(json!({
        "versions": versions,
        "current_version": meta.current_version,
        "oldest_version": meta.oldest_version,
        "created_time": render::time(meta.created_time),
        "updated_time": render::time(meta.updated_time),
        "max_versions": meta.max_versions,
        "cas_required": meta.cas_required,
        "delete_version_after": render::seconds(meta.delete_version_after_secs),
        "custom_metadata": render::custom_metadata(&meta.custom_metadata),
    })))))
}

pub(super) async fn list(mount: &Mount, prefix: &str) -> Result<Option<Response>, EngineError> {
    let keys = mount.store.list_metadata(prefix).await?;
    Ok(Some(Response::list(keys)))
}

/// The settings a metadata write or patch carries (`None`: not sent).
#[derive(Debug, Default)]
struct Settings {
    max_versions: Option<i64>,
    cas_required: Option<bool>,
    delete_version_after: Option<std::time::Duration>,
    custom_metadata: Option<Data>,
}

impl Settings {
    fn parse(body: &Data) -> Result<Settings, EngineError> {
        Ok(Settings {
            max_versions: fields::int(body, "max_versions")?,
            cas_required: fields::bool(body, "cas_required")?,
            delete_version_after: fields::duration(body, "delete_version_after")?,
            custom_metadata: fields::map(body, "custom_metadata")?,
        })
    }

    fn is_empty(&self) -> bool {
        self.max_versions.is_none()
            && self.cas_required.is_none()
            && self.delete_version_after.is_none()
            && self.custom_metadata.is_none()
    }

    /// Sets the scalar settings that were sent.
    fn apply_scalars(&self, meta: &mut KeyMetadata) {
        if let Some(max_versions) = self.max_versions {
            // Upstream's uint32(int): the low 32 bits.
            meta.max_versions = max_versions as u32;
        }
        if let Some(cas_required) = self.cas_required {
            meta.cas_required = cas_required;
        }
        if let Some(after) = self.delete_version_after {
            meta.delete_version_after_secs = i64::try_from(after.as_secs()).unwrap_or(i64::MAX);
        }
    }

    /// Upstream's answer when the key asks for `cas_required: false` and the mount requires it.
    fn response(&self, config: &Config) -> Option<Response> {
        (self.cas_required == Some(false) && config.cas_required)
            .then(|| Response::default().with_warning(CAS_IGNORED))
    }
}

pub(super) async fn write(
    mount: &Mount,
    key: &str,
    body: &Data,
) -> Result<Option<Response>, EngineError> {
    if key.is_empty() {
        return Err(EngineError::BadRequest("missing path".to_owned()));
    }
    let settings = Settings::parse(body)?;
    if settings.is_empty() {
        return Ok(None);
    }
    let config = mount.store.load_config().await?;
    let custom = settings
        .custom_metadata
        .as_ref()
        .map(|raw| input::custom_metadata(raw, false))
        .transpose()?;
    let _guard = mount.lock(key).write().await;
    let mut meta = match mount.store.load_metadata(key).await? {
        Some(meta) => meta,
        None => {
            let now = mount.now();
            KeyMetadata {
                created_time: Some(now),
                updated_time: Some(now),
                ..KeyMetadata::default()
            }
        }
    };
    settings.apply_scalars(&mut meta);
    if let Some(custom) = custom {
        meta.custom_metadata = custom;
    }
    mount.store.save_metadata(key, &meta).await?;
    Ok(settings.response(&config))
}

pub(super) async fn patch(
    mount: &Mount,
    key: &str,
    body: &Data,
) -> Result<Option<Response>, EngineError> {
    if key.is_empty() {
        return Err(EngineError::BadRequest("missing path".to_owned()));
    }
    let settings = Settings::parse(body)?;
    let changes = settings
        .custom_metadata
        .as_ref()
        .map(|raw| input::custom_metadata(raw, true).map(|kept| (raw, kept)))
        .transpose()?;
    let config = mount.store.load_config().await?;
    let _guard = mount.lock(key).write().await;
    let Some(mut meta) = mount.store.load_metadata(key).await? else {
        return Ok(Some(render::not_found_empty()));
    };
    settings.apply_scalars(&mut meta);
    if let Some((raw, kept)) = changes {
        for name in raw.iter().filter(|(_, v)| v.is_null()).map(|(k, _)| k) {
            meta.custom_metadata.remove(name);
        }
        meta.custom_metadata.extend(kept);
    }
    mount.store.save_metadata(key, &meta).await?;
    Ok(settings.response(&config))
}

pub(super) async fn delete(mount: &Mount, key: &str) -> Result<Option<Response>, EngineError> {
    let _guard = mount.lock(key).write().await;
    let Some(meta) = mount.store.load_metadata(key).await? else {
        return Ok(None);
    };
    for number in meta.versions.keys() {
        mount.store.remove_version(key, *number).await?;
    }
    mount.store.remove_metadata(key).await?;
    Ok(None)
}
