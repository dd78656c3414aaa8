//! `config`: the mount's settings for every key (`max_versions`, `cas_required`,
//! `delete_version_after`).
//!
//! Where it sits: routed here by `mount.rs`; reads and writes the one `Config` record of
//! `store.rs`. Data writes read it for the version window, check-and-set and deletion times.
//!
//! - read → `{max_versions, cas_required, delete_version_after}` (the duration as Go writes it:
//!   `"0s"` when unset, `"-1s"` when turned off);
//! - write → 204; only the fields sent change; none sent → 204 without writing. A negative
//!   `delete_version_after` turns automatic deletion off for every key, zero clears it.
//!
//! Invariant: `max_versions` is stored as upstream's `uint32` (a negative number wraps).

use secrets_sdk::{Data, EngineError, Response, fields};
use serde_json::json;

use crate::v2::mount::Mount;
use crate::v2::render;
use crate::v2::store::DELETE_VERSION_AFTER_DISABLED;

pub(super) async fn read(mount: &Mount) -> Result<Option<Response>, EngineError> {
    let config = mount.store.load_config().await?;
    Ok(Some(Response::data(render::object(json!({
        "max_versions": config.max_versions,
        "cas_required": config.cas_required,
        "delete_version_after": render::seconds(config.delete_version_after_secs),
    })))))
}

pub(super) async fn write(mount: &Mount, body: &Data) -> Result<Option<Response>, EngineError> {
    let max_versions = fields::int(body, "max_versions")?;
    let cas_required = fields::bool(body, "cas_required")?;
    let delete_version_after = fields::signed_duration(body, "delete_version_after")?;
    if max_versions.is_none() && cas_required.is_none() && delete_version_after.is_none() {
        return Ok(None);
    }
    let mut config = mount.store.load_config().await?;
    if let Some(max_versions) = max_versions {
        // Upstream's uint32(int): the low 32 bits.
        config.max_versions = max_versions as u32;
    }
    if let Some(cas_required) = cas_required {
        config.cas_required = cas_required;
    }
    if let Some(secs) = delete_version_after {
        config.delete_version_after_secs = secs.max(DELETE_VERSION_AFTER_DISABLED);
    }
    mount.store.save_config(&config).await?;
    Ok(None)
}
