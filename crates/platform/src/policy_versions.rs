//! Policy-engine versions (TFE's self-hosted admin catalogue): list, create, show, update and
//! delete at `/api/v2/admin/policy-engine-versions`, and the same at upstream's
//! `/api/v2/admin/sentinel-versions`, where the resources have type `sentinel-versions`.
//!
//! Where it sits: handlers called from `routes.rs`, for site administrators only
//! (`auth::SiteAdmin`: 404 for anyone else); records in `store/policy_versions.rs`, rendered
//! by `views/policy_versions.rs`.
//!
//! Invariants:
//! - `version` is `N.N.N` or `N.N.N-name` and unique; `url` is an absolute `https` URL; `sha`
//!   is a SHA-256 in 64 hex digits (stored lowercased); invalid or missing values are 422s
//!   pointing at the attribute. Defaults on create: `deprecated` false, `official` false,
//!   `enabled` true, `beta` false; `deprecated-reason` is kept only while `deprecated` is true.
//! - `usage` counts the workspaces whose `policy-engine-version` setting names the version
//!   (read at every answer, never stored); a version that is official or in use cannot be
//!   deleted (422).
//! - Lists are in creation order, `page[size]` 20 by default; `filter[version]` matches
//!   exactly and wins over `search[version]`, a substring match.

use std::collections::HashMap;

use axum::extract::{MatchedPath, Path, State as AxumState};
use axum::response::Response;
use jsonapi::Document;
use serde_json::Value;

use crate::auth::SiteAdmin;
use crate::render::{JsonApi, no_content, page_document};
use crate::request::{Body, Query};
use crate::store::policy_versions::{
    PolicyEngineVersionRecord, create_version, delete_version, load_version, load_versions,
    name_taken, update_version,
};
use crate::store::workspaces::{WorkspaceRecord, workspaces_prefix};
use crate::store::{MAX_ATTEMPTS, RECORD_VERSION, load_all};
use crate::views::policy_versions::version_resource;
use crate::{Error, State, ids};

/// The workspace setting that names the policy-engine version a workspace uses.
pub(crate) const WORKSPACE_SETTING: &str = "policy-engine-version";

const POLICY_TYPE: &str = "policy-engine-versions";
const SENTINEL_TYPE: &str = "sentinel-versions";

/// The resource type the route speaks.
fn kind_of(path: &MatchedPath) -> &'static str {
    if path.as_str().contains("/sentinel-versions") {
        SENTINEL_TYPE
    } else {
        POLICY_TYPE
    }
}

/// How many workspaces use each version string.
async fn usage_counts(state: &State) -> Result<HashMap<String, usize>, Error> {
    let workspaces = load_all::<WorkspaceRecord>(state.storage(), &workspaces_prefix()).await?;
    let mut counts = HashMap::new();
    for workspace in workspaces {
        if let Some(Value::String(version)) = workspace.record.settings.get(WORKSPACE_SETTING) {
            *counts.entry(version.clone()).or_insert(0) += 1;
        }
    }
    Ok(counts)
}

fn usage_of(counts: &HashMap<String, usize>, record: &PolicyEngineVersionRecord) -> usize {
    counts.get(&record.engine_version).copied().unwrap_or(0)
}

/// `GET /api/v2/admin/policy-engine-versions` (and `sentinel-versions`).
pub(crate) async fn list_versions(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    path: MatchedPath,
    query: Query,
) -> Result<JsonApi, Error> {
    let page = query.page(jsonapi::DEFAULT_PAGE_SIZE)?;
    let mut versions = load_versions(state.storage()).await?;
    if let Some(exact) = query.filter("version") {
        versions.retain(|record| record.engine_version == exact);
    } else if let Some(needle) = query.get("search[version]").filter(|n| !n.is_empty()) {
        versions.retain(|record| record.engine_version.contains(needle));
    }
    let counts = usage_counts(&state).await?;
    let kind = kind_of(&path);
    let resources = versions[page.range(versions.len())]
        .iter()
        .map(|record| version_resource(kind, record, usage_of(&counts, record)))
        .collect();
    Ok(JsonApi::ok(page_document(
        page,
        versions.len(),
        resources,
        path.as_str(),
        &query,
    )))
}

/// `POST /api/v2/admin/policy-engine-versions` (and `sentinel-versions`): 201.
pub(crate) async fn create_policy_version(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    path: MatchedPath,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&[POLICY_TYPE, SENTINEL_TYPE])?;
    let engine_version = checked_version(&body.required_string("version")?)?;
    let url = checked_url(&body.required_string("url")?)?;
    let sha = checked_sha(&body.required_string("sha")?)?;
    let deprecated = body.bool("deprecated")?.unwrap_or(false);
    let record = PolicyEngineVersionRecord {
        version: RECORD_VERSION,
        id: ids::new_id("tool"),
        engine_version,
        url,
        sha,
        deprecated,
        deprecated_reason: if deprecated {
            body.string("deprecated-reason")?
        } else {
            None
        },
        official: body.bool("official")?.unwrap_or(false),
        enabled: body.bool("enabled")?.unwrap_or(true),
        beta: body.bool("beta")?.unwrap_or(false),
        created_at_ms: state.now_ms(),
    };
    if !create_version(state.storage(), &record).await? {
        return Err(taken());
    }
    let counts = usage_counts(&state).await?;
    Ok(JsonApi::created(Document::one(version_resource(
        kind_of(&path),
        &record,
        usage_of(&counts, &record),
    ))))
}

/// `GET /api/v2/admin/policy-engine-versions/:id` (and `sentinel-versions`).
pub(crate) async fn read_policy_version(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    path: MatchedPath,
    Path(id): Path<String>,
) -> Result<JsonApi, Error> {
    let record = load_version(state.storage(), &id)
        .await?
        .ok_or(Error::NotFound)?
        .record;
    let counts = usage_counts(&state).await?;
    Ok(JsonApi::ok(Document::one(version_resource(
        kind_of(&path),
        &record,
        usage_of(&counts, &record),
    ))))
}

/// `PATCH /api/v2/admin/policy-engine-versions/:id` (and `sentinel-versions`): every
/// attribute defaults to its previous value.
pub(crate) async fn update_policy_version(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    path: MatchedPath,
    Path(id): Path<String>,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&[POLICY_TYPE, SENTINEL_TYPE])?;
    let engine_version = body
        .string("version")?
        .map(|value| checked_version(&value))
        .transpose()?;
    let url = body
        .string("url")?
        .map(|value| checked_url(&value))
        .transpose()?;
    let sha = body
        .string("sha")?
        .map(|value| checked_sha(&value))
        .transpose()?;
    let deprecated = body.bool("deprecated")?;
    let reason = if body.has_attribute("deprecated-reason")? {
        Some(body.string("deprecated-reason")?)
    } else {
        None
    };
    let official = body.bool("official")?;
    let enabled = body.bool("enabled")?;
    let beta = body.bool("beta")?;
    for _ in 0..MAX_ATTEMPTS {
        let stored = load_version(state.storage(), &id)
            .await?
            .ok_or(Error::NotFound)?;
        let mut record = stored.record.clone();
        if let Some(value) = &engine_version {
            record.engine_version.clone_from(value);
        }
        if let Some(value) = &url {
            record.url.clone_from(value);
        }
        if let Some(value) = &sha {
            record.sha.clone_from(value);
        }
        if let Some(value) = deprecated {
            record.deprecated = value;
        }
        if let Some(value) = &reason {
            record.deprecated_reason.clone_from(value);
        }
        if !record.deprecated {
            record.deprecated_reason = None;
        }
        if let Some(value) = official {
            record.official = value;
        }
        if let Some(value) = enabled {
            record.enabled = value;
        }
        if let Some(value) = beta {
            record.beta = value;
        }
        if record.engine_version != stored.record.engine_version
            && name_taken(state.storage(), &record.engine_version).await?
        {
            return Err(taken());
        }
        if update_version(state.storage(), &stored.record, stored.revision, &record).await? {
            let counts = usage_counts(&state).await?;
            return Ok(JsonApi::ok(Document::one(version_resource(
                kind_of(&path),
                &record,
                usage_of(&counts, &record),
            ))));
        }
    }
    Err(Error::Contention)
}

/// `DELETE /api/v2/admin/policy-engine-versions/:id` (and `sentinel-versions`): 204; 422 when
/// the version is official or used by a workspace.
pub(crate) async fn delete_policy_version(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    Path(id): Path<String>,
) -> Result<Response, Error> {
    for _ in 0..MAX_ATTEMPTS {
        let stored = load_version(state.storage(), &id)
            .await?
            .ok_or(Error::NotFound)?;
        if stored.record.official {
            return Err(Error::Invalid {
                pointer: None,
                detail: format!(
                    "version {} is official and cannot be deleted",
                    stored.record.engine_version
                ),
            });
        }
        let usage = usage_of(&usage_counts(&state).await?, &stored.record);
        if usage > 0 {
            return Err(Error::Invalid {
                pointer: None,
                detail: format!(
                    "version {} is used by {usage} workspace(s) and cannot be deleted",
                    stored.record.engine_version
                ),
            });
        }
        if delete_version(state.storage(), &stored.record, stored.revision).await? {
            return Ok(no_content());
        }
    }
    Err(Error::Contention)
}

fn taken() -> Error {
    Error::invalid_attribute("version", "version has already been taken")
}

/// `N.N.N` or `N.N.N-name` (name: letters, digits, `.`, `_` and `-`).
fn checked_version(raw: &str) -> Result<String, Error> {
    let value = raw.trim();
    let (core, bundle) = match value.split_once('-') {
        Some((core, bundle)) => (core, Some(bundle)),
        None => (value, None),
    };
    let numbers: Vec<&str> = core.split('.').collect();
    let core_ok = numbers.len() == 3
        && numbers.iter().all(|part| {
            !part.is_empty() && part.len() <= 9 && part.bytes().all(|b| b.is_ascii_digit())
        });
    let bundle_ok = bundle.is_none_or(|bundle| {
        !bundle.is_empty()
            && bundle.len() <= 64
            && bundle
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    });
    if core_ok && bundle_ok {
        Ok(value.to_owned())
    } else {
        Err(Error::invalid_attribute(
            "version",
            "version must be N.N.N or N.N.N-name",
        ))
    }
}

fn checked_url(raw: &str) -> Result<String, Error> {
    let value = raw.trim();
    let https = reqwest::Url::parse(value)
        .is_ok_and(|url| url.scheme() == "https" && url.host_str().is_some_and(|h| !h.is_empty()));
    if https {
        Ok(value.to_owned())
    } else {
        Err(Error::invalid_attribute("url", "url must be an https URL"))
    }
}

fn checked_sha(raw: &str) -> Result<String, Error> {
    let value = raw.trim();
    if value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(Error::invalid_attribute(
            "sha",
            "sha must be a SHA-256 checksum in 64 hexadecimal digits",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_three_numbers_with_an_optional_bundle_name() {
        for good in ["0.26.0", "1.2.3-bundle", "10.0.11-linux_amd64.v2"] {
            assert_eq!(checked_version(good).unwrap(), good);
        }
        for bad in [
            "0.26",
            "1.2.3.4",
            "v1.2.3",
            "1.2.3-",
            "1.2.x",
            "1.2.3-a/b",
            "",
        ] {
            assert!(checked_version(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn urls_must_be_https_and_shas_sixty_four_hex_digits() {
        assert!(checked_url("https://releases.example.com/s.zip").is_ok());
        assert!(checked_url("http://releases.example.com/s.zip").is_err());
        assert!(checked_url("releases.example.com").is_err());
        let sha = "A".repeat(64);
        assert_eq!(checked_sha(&sha).unwrap(), "a".repeat(64));
        assert!(checked_sha(&"a".repeat(63)).is_err());
        assert!(checked_sha(&"g".repeat(64)).is_err());
    }
}
