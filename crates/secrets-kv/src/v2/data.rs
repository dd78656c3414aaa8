//! `data/<key>`: a secret's versions: read one, write a new one, patch the current one, and
//! soft-delete the current one.
//!
//! Where it sits: routed here by `mount.rs` with the key and the validated request fields;
//! reads and writes `store.rs` records under the key's lock.
//!
//! - read (`?version=n`, else the current version) → `{data, metadata: {version,
//!   created_time, deletion_time, destroyed, custom_metadata}}`; no key or no such version →
//!   404; a deleted or destroyed version → 404 whose body is the envelope with `data: null` and
//!   the metadata (what hvac's `raise_on_deleted_version=False` returns).
//! - write `{data, options: {cas}}` → 200 with the new version's metadata; no `data` → 400
//!   `no data provided`; `cas` must equal the current version (0: the key has none), and is
//!   required when the mount or the key sets `cas_required`. Versions beyond the window
//!   (`max_versions`) lose their data, oldest first.
//! - patch (`PATCH` with a merge-patch body `{data, options}`) → as write, the new version
//!   being the current one with `data` merged in (RFC 7386: `null` removes a field); no key or
//!   no current version → 404 with an empty body; a deleted or destroyed current version → 404
//!   with its metadata.
//! - delete → 204; marks the current version deleted now (nothing to do when there is none or
//!   it is already deleted or destroyed).
//!
//! Invariants: a new version's data is stored before the metadata that names it; a version
//! reads as deleted from its `deletion_time` on (a `delete_version_after` sets one in the
//! future at write time).

use secrets_sdk::{Data, EngineError, Response, fields};
use serde_json::{Value, json};

use crate::v2::input;
use crate::v2::mount::Mount;
use crate::v2::render;
use crate::v2::store::{Config, KeyMetadata, Version};

pub(super) async fn read(
    mount: &Mount,
    key: &str,
    body: &Data,
) -> Result<Option<Response>, EngineError> {
    let requested = fields::int(body, "version")?.unwrap_or(0);
    let _guard = mount.lock(key).read().await;
    let Some(meta) = mount.store.load_metadata(key).await? else {
        return Ok(None);
    };
    let number = u64::try_from(requested)
        .ok()
        .filter(|n| *n > 0)
        .unwrap_or(meta.current_version);
    let Some(version_meta) = meta.versions.get(&number) else {
        return Ok(None);
    };
    let metadata = render::version_metadata(number, version_meta, &meta.custom_metadata);
    if version_meta.destroyed || version_meta.is_deleted_at(mount.now()) {
        let data = render::object(json!({ "data": null, "metadata": metadata }));
        return Ok(Some(render::not_found_with(Some(data), &[])));
    }
    let version = mount
        .store
        .load_version(key, number)
        .await?
        .ok_or_else(|| EngineError::Internal("could not find version data".to_owned()))?;
    Ok(Some(Response::data(render::object(json!({
        "data": version.data,
        "metadata": metadata,
    })))))
}

pub(super) async fn write(
    mount: &Mount,
    key: &str,
    body: &Data,
) -> Result<Option<Response>, EngineError> {
    let Some(secret) = fields::map(body, "data")? else {
        return Err(EngineError::BadRequest("no data provided".to_owned()));
    };
    let config = mount.store.load_config().await?;
    let _guard = mount.lock(key).write().await;
    let mut meta = mount.store.load_metadata(key).await?.unwrap_or_default();
    check_and_set(body, &config, &meta)?;
    add_version(mount, key, &config, &mut meta, secret)
        .await
        .map(Some)
}

pub(super) async fn patch(
    mount: &Mount,
    key: &str,
    body: &Data,
) -> Result<Option<Response>, EngineError> {
    let Some(changes) = fields::map(body, "data")? else {
        return Err(EngineError::BadRequest("no data provided".to_owned()));
    };
    let _guard = mount.lock(key).write().await;
    let Some(mut meta) = mount.store.load_metadata(key).await? else {
        return Ok(Some(render::not_found_empty()));
    };
    let config = mount.store.load_config().await?;
    check_and_set(body, &config, &meta)?;
    let number = meta.current_version;
    let Some(current) = meta.versions.get(&number) else {
        return Ok(Some(render::not_found_empty()));
    };
    if current.destroyed || current.is_deleted_at(mount.now()) {
        let data = render::version_metadata(number, current, &meta.custom_metadata);
        return Ok(Some(render::not_found_with(
            Some(render::object(data)),
            &[],
        )));
    }
    let version = mount
        .store
        .load_version(key, number)
        .await?
        .ok_or_else(|| EngineError::Internal("could not find version data".to_owned()))?;
    let mut merged = Value::Object(version.data);
    merge_patch(&mut merged, &Value::Object(changes));
    let merged = render::object(merged);
    add_version(mount, key, &config, &mut meta, merged)
        .await
        .map(Some)
}

pub(super) async fn delete(mount: &Mount, key: &str) -> Result<Option<Response>, EngineError> {
    let _guard = mount.lock(key).write().await;
    let Some(mut meta) = mount.store.load_metadata(key).await? else {
        return Ok(None);
    };
    let now = mount.now();
    let current = meta.current_version;
    let Some(latest) = meta.versions.get_mut(&current) else {
        return Ok(None);
    };
    if latest.destroyed || latest.is_deleted_at(now) {
        return Ok(None);
    }
    latest.deletion_time = Some(now);
    mount.store.save_metadata(key, &meta).await?;
    Ok(None)
}

/// Upstream's check-and-set rule for a write to a key whose metadata is `meta`.
fn check_and_set(body: &Data, config: &Config, meta: &KeyMetadata) -> Result<(), EngineError> {
    match input::cas(body)? {
        Some(cas) if u64::try_from(cas).ok() != Some(meta.current_version) => {
            Err(EngineError::BadRequest(
                "check-and-set parameter did not match the current version".to_owned(),
            ))
        }
        Some(_) => Ok(()),
        None if config.cas_required || meta.cas_required => Err(EngineError::BadRequest(
            "check-and-set parameter required for this call".to_owned(),
        )),
        None => Ok(()),
    }
}

/// When a version created at `created` is due for deletion: the smaller of the mount's and
/// the key's non-zero `delete_version_after` later (none when both are unset or the mount
/// turned it off).
pub(super) fn deletion_time(created: i64, config: &Config, meta: &KeyMetadata) -> Option<i64> {
    if config.delete_version_after_disabled() {
        return None;
    }
    let after = match (
        config.delete_version_after_secs,
        meta.delete_version_after_secs,
    ) {
        (0, 0) => return None,
        (0, key) => key,
        (mount, 0) => mount,
        (mount, key) => mount.min(key),
    };
    Some(created.saturating_add(after.saturating_mul(1_000_000_000)))
}

/// Stores `secret` as the key's next version, records it in `meta` and answers with its
/// metadata; versions beyond the window lose their data (a failure there is a warning, the
/// next write retries it).
async fn add_version(
    mount: &Mount,
    key: &str,
    config: &Config,
    meta: &mut KeyMetadata,
    secret: Data,
) -> Result<Response, EngineError> {
    let now = mount.now();
    let deletion = deletion_time(now, config, meta);
    let version = Version {
        version: 0,
        data: secret,
        created_time: now,
    };
    mount
        .store
        .save_version(key, meta.current_version + 1, &version)
        .await?;
    let (number, last_dropped) = meta.add_version(now, deletion, config.max_versions);
    mount.store.save_metadata(key, meta).await?;
    let written = meta.versions.get(&number).cloned().unwrap_or_default();
    let mut response = Response::data(render::object(render::version_metadata(
        number,
        &written,
        &meta.custom_metadata,
    )));
    if let Err(err) = remove_dropped_versions(mount, key, last_dropped).await {
        response.warnings.push(format!(
            "error occurred when cleaning up old versions, these will be cleaned up on next write: {err}"
        ));
    }
    Ok(response)
}

/// Deletes the data of version `last_dropped` and of every older version that still has
/// data, oldest first (so an interrupted cleanup resumes at the next write).
async fn remove_dropped_versions(
    mount: &Mount,
    key: &str,
    last_dropped: u64,
) -> Result<(), EngineError> {
    let mut dropped = Vec::new();
    for number in (1..=last_dropped).rev() {
        if !mount.store.has_version(key, number).await? {
            break;
        }
        dropped.push(number);
    }
    for number in dropped.into_iter().rev() {
        mount.store.remove_version(key, number).await?;
    }
    Ok(())
}

/// RFC 7386 JSON merge patch of `patch` into `target`.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(changes) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Data::new());
    }
    if let Value::Object(fields) = target {
        for (name, change) in changes {
            if change.is_null() {
                fields.remove(name);
            } else {
                merge_patch(fields.entry(name.clone()).or_insert(Value::Null), change);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut target = json!({"a": "b", "c": {"d": "e", "f": "g"}, "k": [1]});
        merge_patch(
            &mut target,
            &json!({"a": "z", "c": {"f": null, "n": 1}, "k": {"x": 1}, "new": null}),
        );
        assert_eq!(
            target,
            json!({"a": "z", "c": {"d": "e", "n": 1}, "k": {"x": 1}})
        );
    }

    #[test]
    fn deletion_time_takes_the_smaller_non_zero_setting() {
        let config = |secs| Config {
            delete_version_after_secs: secs,
            ..Config::default()
        };
        let meta = |secs| KeyMetadata {
            delete_version_after_secs: secs,
            ..KeyMetadata::default()
        };
        let second = 1_000_000_000;
        assert_eq!(deletion_time(0, &config(0), &meta(0)), None);
        assert_eq!(deletion_time(0, &config(10), &meta(0)), Some(10 * second));
        assert_eq!(deletion_time(0, &config(0), &meta(5)), Some(5 * second));
        assert_eq!(deletion_time(0, &config(10), &meta(5)), Some(5 * second));
        assert_eq!(deletion_time(0, &config(3), &meta(5)), Some(3 * second));
        assert_eq!(deletion_time(0, &config(-1), &meta(5)), None);
    }
}
