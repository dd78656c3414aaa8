//! Module versions: create (current path and the deprecated
//! `POST /registry-modules/:org/:name/:provider/versions` go-tfe and pytfe use), list, read
//! one (`…/version?module_version=`), and the upload of a version's archive to its signed
//! `links.upload` (`PUT /_archivist/v1/object/<signature>/registry-module-versions/<modver-id>`).
//!
//! Where it sits: see `registry_modules/mod.rs`; the upload streams into `blobs.rs`, then
//! `publish.rs` parses and records it.
//!
//! Invariants:
//! - Versions are created only for private modules without VCS, or branch-based VCS modules
//!   (403 for public modules, 422 for tag-based ones); the version must be a semantic version
//!   (pre-release and build metadata allowed) not yet in the module.
//! - The upload URL is signed for the version only, used without a bearer token, and valid
//!   for an hour; an upload to a version that is `ok` already is 409, to one whose archive
//!   was refused is accepted again (a retry).
//! - The upload answers after parsing: 200 when the version is `ok`, 422 with the reason when
//!   it is `reg_ingress_failed`; an archive over the size limit is 422 and changes nothing.

use axum::body::Body as HttpBody;
use axum::extract::{Path, State as AxumState};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};
use jsonapi::Document;

use super::publish::{Outcome, publish};
use super::{
    Coordinates, DeprecatedPath, ModulePath, can_manage_modules, check_registry, visible_module,
};
use crate::auth::{Caller, OrgAccess};
use crate::blobs::BlobError;
use crate::render::{JsonApi, paged};
use crate::request::{Body, Query};
use crate::semver::Version;
use crate::signed_url::{self, Access};
use crate::store::registry_modules::{
    ModuleRecord, ModuleVersionRecord, VersionStatus, blob_prefix, load_module,
    load_module_by_version_id, update_module,
};
use crate::store::{MAX_ATTEMPTS, Stored};
use crate::views::registry_modules::version_resource;
use crate::{Error, State, ids};

/// The signed object an upload URL of version `modver_id` reaches.
pub(crate) fn upload_object(modver_id: &str) -> String {
    format!("registry-module-versions/{modver_id}")
}

/// `POST /api/v2/organizations/:org/registry-modules/:registry/:namespace/:name/:provider/versions`.
pub(crate) async fn create_version(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(path): Path<ModulePath>,
    headers: HeaderMap,
    body: Body,
) -> Result<JsonApi, Error> {
    create(&state, &caller, &Coordinates::of(path), &headers, &body).await
}

/// `POST /api/v2/registry-modules/:org/:name/:provider/versions` (deprecated).
pub(crate) async fn create_version_deprecated(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(path): Path<DeprecatedPath>,
    headers: HeaderMap,
    body: Body,
) -> Result<JsonApi, Error> {
    create(
        &state,
        &caller,
        &Coordinates::deprecated(path),
        &headers,
        &body,
    )
    .await
}

async fn create(
    state: &State,
    caller: &Caller,
    coordinates: &Coordinates,
    headers: &HeaderMap,
    body: &Body,
) -> Result<JsonApi, Error> {
    if coordinates.registry_name == "public" {
        let access = caller
            .organization(state, &coordinates.organization)
            .await?;
        check_registry(state, "public")?;
        OrgAccess::check(can_manage_modules(&access))?;
        return Err(Error::Forbidden(
            "versions cannot be created for public modules".to_owned(),
        ));
    }
    body.expect_type(&["registry-module-versions"])?;
    let text = body.required_string("version")?;
    if Version::parse(&text).is_none() {
        return Err(Error::invalid_attribute(
            "version",
            format!("version {text:?} is not a valid semantic version"),
        ));
    }
    let commit_sha = body.string("commit-sha")?.filter(|sha| !sha.is_empty());
    for _ in 0..MAX_ATTEMPTS {
        let (module, access) = visible_module(state, caller, coordinates).await?;
        OrgAccess::check(can_manage_modules(&access))?;
        if module
            .record
            .vcs
            .as_ref()
            .is_some_and(|vcs| vcs.branch.is_empty())
        {
            return Err(Error::invalid_attribute(
                "version",
                "versions of a tag-based VCS module are published from its tags",
            ));
        }
        if module.record.find_version(&text).is_some() {
            return Err(Error::invalid_attribute(
                "version",
                format!("version {text} already exists"),
            ));
        }
        let now = state.now_ms();
        let version = ModuleVersionRecord {
            id: ids::new_id("modver"),
            version: text.clone(),
            status: VersionStatus::Pending,
            error: None,
            source: "tfe-api".to_owned(),
            commit_sha: commit_sha.clone(),
            tag: None,
            blob_key: None,
            size: 0,
            created_at_ms: now,
            updated_at_ms: now,
        };
        let mut next = module.record.clone();
        next.versions.push(version.clone());
        next.status = next.derived_status();
        next.updated_at_ms = now;
        if update_module(state.storage(), &module, &next, Vec::new()).await? {
            let signer = state.signer().await?;
            let path = signer.sign(
                Access::Upload,
                &upload_object(&version.id),
                state.now_secs() + signed_url::UPLOAD_TTL_SECS,
            );
            let resource = version_resource(&next, &version)
                .link("upload", signed_url::absolute_url(headers, &path));
            return Ok(JsonApi::created(Document::one(resource)));
        }
    }
    Err(Error::Contention)
}

/// The versions of a module, highest precedence first.
fn versions_document(module: &ModuleRecord, query: &Query, path: &str) -> Result<JsonApi, Error> {
    let page = query.page(jsonapi::DEFAULT_PAGE_SIZE)?;
    let versions: Vec<ModuleVersionRecord> =
        module.versions_descending().into_iter().cloned().collect();
    Ok(JsonApi::ok(paged(
        &versions,
        page,
        path,
        query,
        |version| version_resource(module, version),
    )))
}

/// `GET /api/v2/organizations/:org/registry-modules/:registry/:namespace/:name/:provider/versions`.
pub(crate) async fn list_versions(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(path): Path<ModulePath>,
    query: Query,
) -> Result<JsonApi, Error> {
    let coordinates = Coordinates::of(path);
    let (module, _) = visible_module(&state, &caller, &coordinates).await?;
    let path = format!(
        "{}/versions",
        crate::views::registry_modules::module_path(&module.record)
    );
    versions_document(&module.record, &query, &path)
}

/// `GET /api/v2/registry-modules/:id/versions`.
pub(crate) async fn list_versions_by_id(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    let module = load_module(state.storage(), &id)
        .await?
        .ok_or(Error::NotFound)?;
    caller
        .organization(&state, &module.record.organization)
        .await?;
    check_registry(&state, &module.record.registry_name)?;
    versions_document(
        &module.record,
        &query,
        &format!("/api/v2/registry-modules/{id}/versions"),
    )
}

/// `GET /api/v2/organizations/:org/registry-modules/:registry/:namespace/:name/:provider/version?module_version=`.
pub(crate) async fn read_version(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(path): Path<ModulePath>,
    query: Query,
) -> Result<JsonApi, Error> {
    let wanted = query
        .get("module_version")
        .or_else(|| query.get("module-version"))
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Error::bad_parameter("module_version", "module_version is required"))?
        // pytfe puts the version in the query unencoded, so build metadata's `+` arrives as a
        // space; a semantic version has no spaces.
        .replace(' ', "+");
    let (module, _) = visible_module(&state, &caller, &Coordinates::of(path)).await?;
    let version = module.record.find_version(&wanted).ok_or(Error::NotFound)?;
    Ok(JsonApi::ok(Document::one(version_resource(
        &module.record,
        version,
    ))))
}

/// `PUT /_archivist/v1/object/:signature/registry-module-versions/:modver-id`: the archive
/// upload. 200 when published; 422 when refused (with the reason) or over the size limit;
/// 409 when the version is `ok` already; 404 for a bad or expired URL.
pub(crate) async fn upload_version_archive(
    AxumState(state): AxumState<State>,
    Path((signature, modver_id)): Path<(String, String)>,
    headers: HeaderMap,
    body: HttpBody,
) -> Result<Response, Error> {
    let signer = state.signer().await?;
    signer
        .verify(
            Access::Upload,
            &upload_object(&modver_id),
            &signature,
            state.now_secs(),
        )
        .map_err(|_| Error::NotFound)?;
    let module: Stored<ModuleRecord> = load_module_by_version_id(state.storage(), &modver_id)
        .await?
        .ok_or(Error::NotFound)?;
    let version = module
        .record
        .versions
        .iter()
        .find(|v| v.id == modver_id)
        .ok_or(Error::NotFound)?;
    if version.status == VersionStatus::Ok {
        return Err(Error::Conflict(format!(
            "version {} was published already; create a new version",
            version.version
        )));
    }
    let limit = state.blobs().max_upload_bytes();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(Error::ArchiveTooLarge { limit });
    }
    let blob_key = format!(
        "{}/{modver_id}/{}.tar.gz",
        blob_prefix(&module.record.id),
        ids::new_id("upload")
    );
    let stored = match state
        .blobs()
        .put_stream(&blob_key, body.into_data_stream(), None)
        .await
    {
        Ok(stored) => stored,
        Err(BlobError::TooLarge { limit }) => return Err(Error::ArchiveTooLarge { limit }),
        Err(BlobError::Body(reason)) => {
            return Err(Error::Rejected(http_kit::Rejection::BodyReadFailed(reason)));
        }
        Err(other) => return Err(Error::Internal(other.to_string())),
    };
    match publish(
        &state,
        &module.record.id,
        &modver_id,
        &stored.key,
        stored.size,
    )
    .await?
    {
        Outcome::Published => Ok(StatusCode::OK.into_response()),
        Outcome::Refused(reason) => Err(Error::Invalid {
            pointer: None,
            detail: format!("the module archive was refused: {reason}"),
        }),
    }
}
