//! `delete/<key>`, `undelete/<key>` and `destroy/<key>`: act on listed versions of a secret.
//!
//! Where it sits: routed here by `mount.rs` (writes only) with the key and the validated
//! `versions` field; changes the key's metadata (and, for destroy, deletes data) in
//! `store.rs` under the key's lock.
//!
//! - delete `{versions}` → 204; each listed version that exists, is not destroyed and is not
//!   already deleted is marked deleted now.
//! - undelete `{versions}` → 204; each listed version that exists and is not destroyed is
//!   readable again (with a fresh `delete_version_after` deadline from now, if one applies).
//! - destroy `{versions}` → 204; each listed version is marked destroyed and its data deleted
//!   for good.
//! - no versions → 400 (`No version number provided`, destroy's in lower case as upstream);
//!   an unknown key → 204 with nothing done.
//!
//! Invariant: destroy writes the metadata before deleting the data, so metadata never names
//! data that is gone without saying it was destroyed.

use secrets_sdk::{Data, EngineError, Response, fields};

use crate::v2::data::deletion_time;
use crate::v2::mount::Mount;

/// The listed version numbers; negative ones name no version and are dropped.
fn versions(body: &Data, missing: &str) -> Result<Vec<u64>, EngineError> {
    let listed = fields::comma_ints(body, "versions")?.unwrap_or_default();
    if listed.is_empty() {
        return Err(EngineError::BadRequest(missing.to_owned()));
    }
    Ok(listed
        .into_iter()
        .filter_map(|n| u64::try_from(n).ok())
        .collect())
}

pub(super) async fn delete(
    mount: &Mount,
    key: &str,
    body: &Data,
) -> Result<Option<Response>, EngineError> {
    let numbers = versions(body, "No version number provided")?;
    let _guard = mount.lock(key).write().await;
    let Some(mut meta) = mount.store.load_metadata(key).await? else {
        return Ok(None);
    };
    let now = mount.now();
    for number in numbers {
        if let Some(version) = meta.versions.get_mut(&number)
            && !version.destroyed
            && !version.is_deleted_at(now)
        {
            version.deletion_time = Some(now);
        }
    }
    mount.store.save_metadata(key, &meta).await?;
    Ok(None)
}

pub(super) async fn undelete(
    mount: &Mount,
    key: &str,
    body: &Data,
) -> Result<Option<Response>, EngineError> {
    let numbers = versions(body, "No version number provided")?;
    let config = mount.store.load_config().await?;
    let _guard = mount.lock(key).write().await;
    let Some(mut meta) = mount.store.load_metadata(key).await? else {
        return Ok(None);
    };
    let deadline = deletion_time(mount.now(), &config, &meta);
    for number in numbers {
        if let Some(version) = meta.versions.get_mut(&number)
            && !version.destroyed
        {
            version.deletion_time = deadline;
        }
    }
    mount.store.save_metadata(key, &meta).await?;
    Ok(None)
}

pub(super) async fn destroy(
    mount: &Mount,
    key: &str,
    body: &Data,
) -> Result<Option<Response>, EngineError> {
    let numbers = versions(body, "no version number provided")?;
    let _guard = mount.lock(key).write().await;
    let Some(mut meta) = mount.store.load_metadata(key).await? else {
        return Ok(None);
    };
    for number in &numbers {
        if let Some(version) = meta.versions.get_mut(number) {
            version.destroyed = true;
        }
    }
    mount.store.save_metadata(key, &meta).await?;
    for number in numbers {
        mount.store.remove_version(key, number).await?;
    }
    Ok(None)
}
