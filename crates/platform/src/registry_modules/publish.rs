//! Publishing a stored archive as a module version: check the archive (`archive.rs`), parse
//! the module (`module_config.rs`) on a blocking thread, and record the outcome on the
//! version (`ok` with its details, or `reg_ingress_failed` with the reason) and the module's
//! status in one compare-and-swap. Uploads (`versions.rs`) and repository tags (`vcs.rs`)
//! both end here.
//!
//! Where it sits: below the handlers of `registry_modules/`; reads blobs through `blobs.rs`,
//! writes through `store/registry_modules.rs`.
//!
//! Invariants: an accepted archive's blob is named by the version only after the record is
//! committed; a refused archive's blob, or one whose version went away meanwhile, is deleted;
//! when a version is published again (a retried upload after a failure), the archive it
//! named before is deleted after the new one is recorded.

use std::io::{BufReader, Seek};

use crate::archive;
use crate::module_config::{self, ModuleDetail};
use crate::store::MAX_ATTEMPTS;
use crate::store::registry_modules::{VersionStatus, load_module, update_module};
use crate::{Error, State};

/// What a version became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    Published,
    /// `reg_ingress_failed`, with the reason.
    Refused(String),
}

/// Parses blob `blob_key` (`size` bytes) as version `version_id` of module `module_id` and
/// records the outcome; 404 when the version no longer exists.
pub(super) async fn publish(
    state: &State,
    module_id: &str,
    version_id: &str,
    blob_key: &str,
    size: u64,
) -> Result<Outcome, Error> {
    let name = load_module(state.storage(), module_id)
        .await?
        .ok_or(Error::NotFound)?
        .record
        .name;
    let parsed = match parse_blob(state, blob_key, name).await {
        Ok(parsed) => parsed,
        Err(err) => {
            discard(state, blob_key).await;
            return Err(err);
        }
    };
    let recorded = record(state, module_id, version_id, blob_key, size, &parsed).await;
    let keep = matches!(recorded, Ok(Some(_))) && parsed.is_ok();
    if !keep {
        discard(state, blob_key).await;
    }
    if let Ok(Some(Some(previous))) = &recorded
        && previous != blob_key
    {
        discard(state, previous).await;
    }
    match recorded? {
        None => Err(Error::NotFound),
        Some(_) => Ok(match parsed {
            Ok(_) => Outcome::Published,
            Err(reason) => Outcome::Refused(reason),
        }),
    }
}

/// Checks and parses a stored archive on a blocking thread; `Err(reason)` inside for an
/// archive that is not a valid module.
async fn parse_blob(
    state: &State,
    blob_key: &str,
    name: String,
) -> Result<Result<ModuleDetail, String>, Error> {
    let mut file = state
        .blobs()
        .open_file(blob_key)
        .await
        .map_err(|err| Error::Internal(err.to_string()))?
        .ok_or_else(|| Error::Internal(format!("the archive {blob_key} is missing")))?;
    tokio::task::spawn_blocking(move || {
        let checked = file
            .try_clone()
            .map_err(|err| err.to_string())
            .and_then(|copy| {
                archive::validate(BufReader::new(copy), archive::Limits::default())
                    .map_err(|err| err.to_string())
            });
        checked?;
        file.rewind().map_err(|err| err.to_string())?;
        module_config::parse(BufReader::new(file), &name).map_err(|err| err.to_string())
    })
    .await
    .map_err(|err| Error::Internal(format!("parsing the module failed: {err}")))
}

/// Records the outcome on the version. `None` when the version is gone; else the blob key it
/// named before (`Some(None)` when none).
async fn record(
    state: &State,
    module_id: &str,
    version_id: &str,
    blob_key: &str,
    size: u64,
    parsed: &Result<ModuleDetail, String>,
) -> Result<Option<Option<String>>, Error> {
    for _ in 0..MAX_ATTEMPTS {
        let Some(module) = load_module(state.storage(), module_id).await? else {
            return Ok(None);
        };
        let mut next = module.record.clone();
        let Some(version) = next.versions.iter_mut().find(|v| v.id == version_id) else {
            return Ok(None);
        };
        let previous = version.blob_key.clone();
        let now = state.now_ms();
        version.updated_at_ms = now;
        let mut details = Vec::new();
        match parsed {
            Ok(detail) => {
                version.status = VersionStatus::Ok;
                version.error = None;
                version.blob_key = Some(blob_key.to_owned());
                version.size = size;
                details.push((version_id.to_owned(), detail.clone()));
            }
            Err(reason) => {
                version.status = VersionStatus::RegIngressFailed;
                version.error = Some(reason.clone());
            }
        }
        next.status = next.derived_status();
        next.updated_at_ms = now;
        if update_module(state.storage(), &module, &next, details).await? {
            // A refused archive leaves the version's earlier archive (if any) in place.
            return Ok(Some(if parsed.is_ok() { previous } else { None }));
        }
    }
    Err(Error::Contention)
}

/// Deletes a blob that no record names; a failure is logged.
pub(super) async fn discard(state: &State, blob_key: &str) {
    if let Err(err) = state.blobs().delete(blob_key).await {
        tracing::warn!(message = "Deleting an unused module archive failed.", key = blob_key, error = %err);
    }
}
