//! Configuration versions (`/api/v2/workspaces/:id/configuration-versions`,
//! `/api/v2/configuration-versions/:id…`): create with a signed upload URL, list, show with
//! `include=ingress_attributes,run`, the ingress-attributes endpoint, the archive action,
//! downloads (302 to a signed blob URL) and the workspace's current configuration version.
//!
//! Where it sits: handlers called from `routes.rs`; the upload and the blob download behind
//! the signed URLs are in `objects.rs`; records in `store/configuration_versions.rs`, archives
//! in the blob store (`blobs.rs`); rendered by `views/configuration_versions.rs`.
//!
//! Invariants:
//! - `upload-url` appears only in the create response; every other representation is the
//!   same in create, list and show (go-tfe compares them).
//! - Creating needs `manage-workspaces` and a user or team token (organization tokens may
//!   not, TFE's rule); reading needs `read-workspaces`; both answer 404 otherwise.
//! - Archive is 202 only for an API-sourced, `uploaded` version that is not its workspace's
//!   current one and has no run in progress; otherwise 409 with title `transition not
//!   allowed` and a detail go-tfe matches. The record turns `archived` before the blob is
//!   deleted, so a failure in between leaves an orphan blob, never an archive-less
//!   `uploaded` version.
//! - Downloads answer 302 only for `uploaded` versions, else 404; the target needs no bearer.

use axum::extract::{Path, State as AxumState};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};
use jsonapi::Document;
use storage::{Compare, Txn};

use crate::auth::{Caller, OrgAccess, can_queue_runs, load_visible_workspace};
use crate::render::JsonApi;
use crate::request::{Body, Query};
use crate::run_state::RunStatus;
use crate::signed_url::{self, Access};
use crate::store::configuration_versions::{
    ConfigurationVersionRecord, CvStatus, blob_prefix, create_cv_ops, cv_key, load_cv,
    load_workspace_cv_ids,
};
use crate::store::runs::load_cv_runs;
use crate::store::workspaces::workspace_key;
use crate::store::{MAX_ATTEMPTS, RECORD_VERSION, Stored, commit};
use crate::views::configuration_versions::cv_resource;
use crate::views::runs::run_resource;
use crate::{Error, State, ids};

/// `include` names of a configuration version (`ingress-attributes` is accepted too).
const INCLUDES: &[&str] = &["ingress_attributes", "run"];
const INCLUDE_ALIASES: &[(&str, &str)] = &[("ingress-attributes", "ingress_attributes")];

/// The version `id` and the caller's access; 404 when missing or not readable.
async fn load_visible_cv(
    state: &State,
    caller: &Caller,
    id: &str,
) -> Result<(Stored<ConfigurationVersionRecord>, OrgAccess), Error> {
    let cv = load_cv(state.storage(), id).await?.ok_or(Error::NotFound)?;
    let (_, access) = load_visible_workspace(state, caller, &cv.record.workspace_id).await?;
    Ok((cv, access))
}

/// Adds what `include` asked for: the runs of the version for `run`; API-created versions
/// have no ingress attributes, so `ingress_attributes` adds nothing.
async fn add_includes(
    state: &State,
    document: &mut Document,
    caller: &Caller,
    access: &OrgAccess,
    cv: &ConfigurationVersionRecord,
    includes: &[String],
) -> Result<(), Error> {
    if includes.iter().any(|name| name == "run") {
        for run in load_cv_runs(state.storage(), &cv.id).await? {
            document.include(run_resource(&run, caller, access));
        }
    }
    Ok(())
}

/// `GET /api/v2/workspaces/:id/configuration-versions`: newest first, paged (default 20).
pub(crate) async fn list_configuration_versions(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(workspace_id): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    let (_, access) = load_visible_workspace(&state, &caller, &workspace_id).await?;
    let page = query.page(jsonapi::DEFAULT_PAGE_SIZE)?;
    let includes = query.includes(INCLUDES, INCLUDE_ALIASES)?;
    let mut cv_ids = load_workspace_cv_ids(state.storage(), &workspace_id).await?;
    cv_ids.reverse();
    let mut page_cvs = Vec::new();
    for id in &cv_ids[page.range(cv_ids.len())] {
        if let Some(cv) = load_cv(state.storage(), id).await? {
            page_cvs.push(cv.record);
        }
    }
    let total = cv_ids.len() as u64;
    let mut document = Document::many(page_cvs.iter().map(cv_resource).collect())
        .with_meta("pagination", page.meta(total));
    let path = format!("/api/v2/workspaces/{workspace_id}/configuration-versions");
    document.links = page.links(&path, query.pairs(), total);
    for cv in &page_cvs {
        add_includes(&state, &mut document, &caller, &access, cv, &includes).await?;
    }
    Ok(JsonApi::ok(document))
}

/// `POST /api/v2/workspaces/:id/configuration-versions`: 201 with `upload-url` and status
/// `pending`; 404 for organization tokens and callers who may not queue runs; 422 for a
/// wrongly typed attribute.
pub(crate) async fn create_configuration_version(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(workspace_id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<JsonApi, Error> {
    let (workspace, access) = load_visible_workspace(&state, &caller, &workspace_id).await?;
    OrgAccess::check(can_queue_runs(&caller, &access))?;
    body.expect_type(&["configuration-versions"])?;
    let auto_queue_runs = body.bool("auto-queue-runs")?.unwrap_or(true);
    let speculative = body.bool("speculative")?.unwrap_or(false);
    let provisional = body.bool("provisional")?.unwrap_or(false);
    // Terraform's cloud and remote backends say who they are; OTF reads the same header.
    let source = match headers
        .get("x-terraform-integration")
        .and_then(|v| v.to_str().ok())
    {
        Some("cloud") => "terraform+cloud",
        Some("remote") => "terraform",
        _ => "tfe-api",
    };
    let cv = ConfigurationVersionRecord {
        version: RECORD_VERSION,
        id: ids::new_id("cv"),
        workspace_id: workspace_id.clone(),
        organization: workspace.record.organization.clone(),
        auto_queue_runs,
        speculative,
        provisional,
        source: source.to_owned(),
        status: CvStatus::Pending,
        status_timestamps: Default::default(),
        error: None,
        error_message: None,
        upload: None,
        created_by: caller.user().map(|user| user.id.clone()),
        created_at_ms: state.now_ms(),
    };
    let (mut compares, ops) = create_cv_ops(&cv)?;
    // The workspace must still exist when the version is written.
    compares.push(Compare::Exists(workspace_key(&workspace_id)));
    let txn = Txn {
        compares,
        success: ops,
        failure: Vec::new(),
    };
    if !commit(state.storage(), txn).await? {
        return Err(Error::NotFound);
    }
    let signer = state.signer().await?;
    let path = signer.sign(
        Access::Upload,
        &upload_object(&cv.id),
        state.now_secs() + signed_url::UPLOAD_TTL_SECS,
    );
    let resource =
        cv_resource(&cv).attribute("upload-url", signed_url::absolute_url(&headers, &path));
    Ok(JsonApi::created(Document::one(resource)))
}

/// The signed object an upload URL of version `id` reaches.
pub(crate) fn upload_object(id: &str) -> String {
    format!("configuration-versions/{id}")
}

/// The signed object a download URL of version `id` reaches.
pub(crate) fn download_object(id: &str) -> String {
    format!("configuration-versions/{id}.tar.gz")
}

/// `GET /api/v2/configuration-versions/:id` (`include=ingress_attributes,run`).
pub(crate) async fn read_configuration_version(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    let includes = query.includes(INCLUDES, INCLUDE_ALIASES)?;
    let (cv, access) = load_visible_cv(&state, &caller, &id).await?;
    let mut document = Document::one(cv_resource(&cv.record));
    add_includes(
        &state,
        &mut document,
        &caller,
        &access,
        &cv.record,
        &includes,
    )
    .await?;
    Ok(JsonApi::ok(document))
}

/// `GET /api/v2/workspaces/:id/current-configuration-version`: the workspace's current
/// version, or 404 when it has none.
pub(crate) async fn read_current_configuration_version(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(workspace_id): Path<String>,
) -> Result<JsonApi, Error> {
    let (workspace, _) = load_visible_workspace(&state, &caller, &workspace_id).await?;
    let id = workspace
        .record
        .current_configuration_version_id
        .ok_or(Error::NotFound)?;
    let cv = load_cv(state.storage(), &id)
        .await?
        .ok_or(Error::NotFound)?;
    Ok(JsonApi::ok(Document::one(cv_resource(&cv.record))))
}

/// `GET /api/v2/configuration-versions/:id/ingress-attributes`: `{"data": null}` for the
/// API-created versions cairn has (pytfe reads that as "none").
pub(crate) async fn read_ingress_attributes(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Error> {
    load_visible_cv(&state, &caller, &id).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, jsonapi::MEDIA_TYPE)],
        r#"{"data":null}"#,
    )
        .into_response())
}

/// `POST /api/v2/configuration-versions/:id/actions/archive`: 202 with no body, then the
/// version is `archived` and its archive deleted; 409 (`transition not allowed`) when it was
/// created from VCS, is not `uploaded`, is its workspace's current version, or has runs in
/// progress; 404 without `manage-workspaces`.
pub(crate) async fn archive_configuration_version(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Error> {
    let (_, access) = load_visible_cv(&state, &caller, &id).await?;
    OrgAccess::check(access.can_manage_workspaces())?;
    for _ in 0..MAX_ATTEMPTS {
        let cv = load_cv(state.storage(), &id)
            .await?
            .ok_or(Error::NotFound)?;
        let workspace =
            crate::store::workspaces::load_workspace(state.storage(), &cv.record.workspace_id)
                .await?
                .ok_or(Error::NotFound)?;
        let cv_runs = load_cv_runs(state.storage(), &id).await?;
        let statuses: Vec<RunStatus> = cv_runs.iter().map(|run| run.status).collect();
        let is_current =
            workspace.record.current_configuration_version_id.as_deref() == Some(id.as_str());
        archive_refusal(&cv.record, is_current, &statuses).map_or(Ok(()), Err)?;

        let mut archived = cv.record.clone();
        archived.status = CvStatus::Archived;
        archived
            .status_timestamps
            .insert("archived-at".to_owned(), state.now_ms());
        if let Some(upload) = &mut archived.upload {
            upload.blob_key = None;
        }
        let txn = Txn::new()
            .when(Compare::ModRevision(cv_key(&id), cv.revision))
            .when(Compare::ModRevision(
                workspace_key(&workspace.record.id),
                workspace.revision,
            ))
            .then(crate::store::put(cv_key(&id), &archived)?);
        // Every run write also writes the workspace, so its revision covers the runs read.
        if commit(state.storage(), txn).await? {
            discard_blobs(&state, &id).await;
            return Ok(StatusCode::ACCEPTED.into_response());
        }
    }
    Err(Error::Contention)
}

/// Why `cv` may not be archived, if it may not (TFE's and go-tfe's wording).
fn archive_refusal(
    cv: &ConfigurationVersionRecord,
    is_current: bool,
    run_statuses: &[RunStatus],
) -> Option<Error> {
    let refuse = |why: &str| {
        Some(Error::TransitionNotAllowed(format!(
            "configuration could not be archived because {why}"
        )))
    };
    if !cv.is_api_sourced() {
        return refuse("it was created from VCS; it is archived automatically");
    }
    match cv.status {
        CvStatus::Uploaded => {}
        CvStatus::Archived => return refuse("it is already archived"),
        CvStatus::Pending | CvStatus::Fetching => return refuse("it has not been uploaded"),
        CvStatus::Errored => return refuse("it errored"),
    }
    if is_current {
        return refuse("it is current");
    }
    if run_statuses.iter().any(|status| !status.is_final()) {
        return refuse("it has runs in progress");
    }
    None
}

/// Deletes every blob of version `id`; a failure is logged (the version no longer points at
/// them, so the worst case is an orphan file).
pub(crate) async fn discard_blobs(state: &State, id: &str) {
    if let Err(err) = state.blobs().delete_prefix(&blob_prefix(id)).await {
        tracing::warn!(message = "Deleting configuration archives failed.", cv_id = id, error = %err);
    }
}

/// `GET /api/v2/configuration-versions/:id/download`: 302 to a short-lived signed URL of the
/// archive; 404 unless the version is `uploaded`.
pub(crate) async fn download_configuration_version(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Error> {
    let (cv, _) = load_visible_cv(&state, &caller, &id).await?;
    redirect_to_archive(&state, &cv.record, &headers).await
}

/// `GET /api/v2/runs/:id/configuration-version/download`: as above, for the run's version.
pub(crate) async fn download_run_configuration_version(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Error> {
    let run = crate::store::runs::load_run(state.storage(), &run_id)
        .await?
        .ok_or(Error::NotFound)?;
    load_visible_workspace(&state, &caller, &run.record.workspace_id).await?;
    let cv = load_cv(state.storage(), &run.record.configuration_version_id)
        .await?
        .ok_or(Error::NotFound)?;
    redirect_to_archive(&state, &cv.record, &headers).await
}

async fn redirect_to_archive(
    state: &State,
    cv: &ConfigurationVersionRecord,
    headers: &HeaderMap,
) -> Result<Response, Error> {
    let has_blob = cv
        .upload
        .as_ref()
        .is_some_and(|upload| upload.blob_key.is_some());
    if cv.status != CvStatus::Uploaded || !has_blob {
        return Err(Error::NotFound);
    }
    let signer = state.signer().await?;
    let path = signer.sign(
        Access::Download,
        &download_object(&cv.id),
        state.now_secs() + signed_url::DOWNLOAD_TTL_SECS,
    );
    let location = signed_url::absolute_url(headers, &path);
    Ok((StatusCode::FOUND, [(header::LOCATION, location)]).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::configuration_versions::UploadRecord;

    fn cv(status: CvStatus, source: &str) -> ConfigurationVersionRecord {
        ConfigurationVersionRecord {
            version: 1,
            id: "cv-1".to_owned(),
            workspace_id: "ws-1".to_owned(),
            organization: "acme".to_owned(),
            auto_queue_runs: false,
            speculative: false,
            provisional: false,
            source: source.to_owned(),
            status,
            status_timestamps: Default::default(),
            error: None,
            error_message: None,
            upload: Some(UploadRecord {
                sha256: None,
                size: 1,
                blob_key: Some("k".to_owned()),
            }),
            created_by: None,
            created_at_ms: 0,
        }
    }

    fn refusal(
        cv: &ConfigurationVersionRecord,
        current: bool,
        runs: &[RunStatus],
    ) -> Option<String> {
        archive_refusal(cv, current, runs).map(|err| err.to_string())
    }

    #[test]
    fn archive_allowed_for_uploaded_api_version_not_current_without_active_runs() {
        let uploaded = cv(CvStatus::Uploaded, "tfe-api");
        assert_eq!(
            refusal(
                &uploaded,
                false,
                &[RunStatus::Discarded, RunStatus::Canceled]
            ),
            None
        );
        assert_eq!(
            refusal(&cv(CvStatus::Uploaded, "terraform+cloud"), false, &[]),
            None
        );
    }

    #[test]
    fn archive_refusals_name_the_reason() {
        let uploaded = cv(CvStatus::Uploaded, "tfe-api");
        let cases = [
            (refusal(&uploaded, true, &[]), "because it is current"),
            (
                refusal(&uploaded, false, &[RunStatus::Pending]),
                "has runs in progress",
            ),
            (
                refusal(&cv(CvStatus::Pending, "tfe-api"), false, &[]),
                "has not been uploaded",
            ),
            (
                refusal(&cv(CvStatus::Archived, "tfe-api"), false, &[]),
                "already archived",
            ),
            (
                refusal(&cv(CvStatus::Errored, "tfe-api"), false, &[]),
                "errored",
            ),
            (
                refusal(&cv(CvStatus::Uploaded, "github"), false, &[]),
                "created from VCS",
            ),
        ];
        for (got, expected) in cases {
            let got = got.expect("refused");
            assert!(
                got.starts_with("configuration could not be archived because"),
                "{got}"
            );
            assert!(got.contains(expected), "{got} / {expected}");
        }
    }
}
