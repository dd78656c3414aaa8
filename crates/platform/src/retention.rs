//! The data retention loop: applies the site's data retention policy
//! (`admin/data_retention.rs`) by deleting the archives of configuration versions older than
//! its `delete-older-than-n-days`.
//!
//! Where it sits: a leader loop registered by `crate::start_tasks` through `cluster::Runner`
//! (docs/design.md §B), so one server applies the policy; it reads and writes through
//! `store/` and deletes archives through `blobs.rs`, never through a handler.
//!
//! What a pass does: with a policy set, every configuration version that is `uploaded`,
//! holds an archive, was created before now minus the policy's days, is not its workspace's
//! current configuration version and has no run that is not final becomes `archived` (with
//! `archived-at`), in one compare-and-swap on the version and its workspace; its archive is
//! then deleted. Versions are read a chunk at a time, in key order.
//!
//! Invariants: nothing is deleted without a policy; a pass starts when the loop starts, when
//! the policy changes (`State::wake_retention`), when a manual clock jumps, and every
//! `Config::retention_interval`; the loop returns as soon as its token is cancelled.

use std::sync::Arc;

use storage::{Compare, KeyRange, Txn};
use tokio_util::sync::CancellationToken;

use crate::State;
use crate::error::Error;
use crate::store::configuration_versions::{
    ConfigurationVersionRecord, CvStatus, blob_prefix, cv_key,
};
use crate::store::runs::load_cv_runs;
use crate::store::site_settings::{DataRetentionPolicy, load_setting};
use crate::store::workspaces::{load_workspace, workspace_key};
use crate::store::{PREFIX, SCAN_CHUNK, commit, decode, key_after, put};

const DAY_MS: u64 = 86_400_000;

/// The loop: a pass, then a wait for the next reason to pass again.
pub(crate) async fn run(state: State, term: CancellationToken) {
    // The system clock never jumps: a notify nobody fires stands in for it.
    let jumps = state
        .clock_jumped()
        .unwrap_or_else(|| Arc::new(tokio::sync::Notify::new()));
    loop {
        // Listening for a jump before the pass, so one during the pass is not missed.
        let mut jumped = std::pin::pin!(jumps.notified());
        jumped.as_mut().enable();
        match pass(&state).await {
            Ok(0) => {}
            Ok(archived) => tracing::info!(
                archived,
                "data retention: deleted the archives of old configuration versions"
            ),
            Err(err) => tracing::warn!(error = %err, "data retention pass failed"),
        }
        tokio::select! {
            () = term.cancelled() => return,
            () = state.retention_woken() => {}
            () = tokio::time::sleep(state.config().retention_interval) => {}
            () = &mut jumped => {}
        }
    }
}

/// One pass over every configuration version; returns how many were archived.
pub(crate) async fn pass(state: &State) -> Result<usize, Error> {
    let (policy, read) = load_setting::<DataRetentionPolicy>(state.storage()).await?;
    if read.is_none() || policy.delete_older_than_n_days == 0 {
        return Ok(0);
    }
    let cutoff = state
        .now_ms()
        .saturating_sub(u64::from(policy.delete_older_than_n_days) * DAY_MS);
    let mut range = KeyRange::prefix(format!("{PREFIX}configuration-versions/").as_str());
    let mut archived = 0;
    loop {
        let scan = state
            .storage()
            .scan(range.clone(), Some(SCAN_CHUNK))
            .await?;
        for kv in &scan.kvs {
            let cv: ConfigurationVersionRecord = decode(&kv.key, &kv.value)?;
            let expired = cv.status == CvStatus::Uploaded
                && cv.created_at_ms < cutoff
                && cv
                    .upload
                    .as_ref()
                    .is_some_and(|upload| upload.blob_key.is_some());
            if expired && archive(state, &cv, kv.mod_revision).await? {
                archived += 1;
            }
        }
        match scan.kvs.last() {
            Some(last) if scan.more => range.start = key_after(&last.key),
            _ => return Ok(archived),
        }
    }
}

/// Archives `cv` (read at `revision`) unless it is current or has unfinished runs; `true`
/// when it did. A version that changed meanwhile is left for the next pass.
async fn archive(
    state: &State,
    cv: &ConfigurationVersionRecord,
    revision: storage::Revision,
) -> Result<bool, Error> {
    let Some(workspace) = load_workspace(state.storage(), &cv.workspace_id).await? else {
        return Ok(false);
    };
    if workspace.record.current_configuration_version_id.as_deref() == Some(cv.id.as_str()) {
        return Ok(false);
    }
    let runs = load_cv_runs(state.storage(), &cv.id).await?;
    if runs.iter().any(|run| !run.status.is_final()) {
        return Ok(false);
    }
    let mut archived = cv.clone();
    archived.status = CvStatus::Archived;
    archived
        .status_timestamps
        .insert("archived-at".to_owned(), state.now_ms());
    if let Some(upload) = &mut archived.upload {
        upload.blob_key = None;
    }
    // Every run write also writes the workspace, so its revision covers the runs read.
    let txn = Txn::new()
        .when(Compare::ModRevision(cv_key(&cv.id), revision))
        .when(Compare::ModRevision(
            workspace_key(&workspace.record.id),
            workspace.revision,
        ))
        .then(put(cv_key(&cv.id), &archived)?);
    if !commit(state.storage(), txn).await? {
        return Ok(false);
    }
    if let Err(err) = state.blobs().delete_prefix(&blob_prefix(&cv.id)).await {
        tracing::warn!(cv_id = %cv.id, error = %err, "data retention: deleting an archive failed");
    }
    Ok(true)
}
