//! The private module registry's JSON:API side (`/api/v2/organizations/:org/registry-modules…`,
//! `/api/v2/registry-modules…`, the version upload URLs and the VCS webhooks):
//! - `modules.rs`: list, create without VCS, read, update and delete (current and deprecated
//!   paths);
//! - `versions.rs`: create, list and read versions, and the upload of a version's archive;
//! - `vcs.rs`: publishing from a git repository over HTTP(S) through an OAuth client's token
//!   (every semver tag), and the webhook that publishes new tags on a push;
//! - `publish.rs`: what an upload and a tag have in common: parse a stored archive
//!   (`module_config.rs`) and record the outcome on the version.
//!
//! Where it sits: handlers called from `routes.rs`; records in `store/registry_modules.rs`,
//! archives in the blob store (`blobs.rs`) under `registry-modules/<mod-id>/`; rendered by
//! `views/registry_modules.rs`. The registry protocol over the same records is
//! `registry_protocol.rs`.
//!
//! Invariants:
//! - Reading needs access to the organization; creating, publishing, versioning, updating and
//!   deleting need the owners team or `manage-modules` (an organization token may not; TFE's
//!   token table); anyone else gets 404.
//! - `registry-name` `public` is answered 403 unless public module curation is on
//!   ([`crate::Config::public_module_curation`], off as on TFE's self-hosted edition).
//! - Names: `name` and `namespace` are alphanumerics, `-` and `_`, not leading or trailing,
//!   at most 64 characters; `provider` lowercase alphanumerics, at most 64. A private module's
//!   namespace is its organization.
//! - A version is `pending` until its archive is parsed, then `ok` or `reg_ingress_failed`
//!   (with the reason in `error`); the module's status follows its versions
//!   (`ModuleRecord::derived_status`) in the same write.

mod modules;
mod publish;
mod vcs;
mod versions;

pub(crate) use modules::{
    create_module, delete_by_path, delete_deprecated, delete_provider_by_path,
    delete_version_by_path, list_modules, read_module, read_module_by_id, read_module_deprecated,
    update_module,
};
pub(crate) use vcs::{create_vcs_module, create_vcs_module_deprecated, receive_webhook};
pub(crate) use versions::{
    create_version, create_version_deprecated, list_versions, list_versions_by_id, read_version,
    upload_version_archive,
};

use http::HeaderMap;

use crate::auth::{Caller, OrgAccess};
use crate::store::Stored;
use crate::store::registry_modules::{ModuleRecord, load_module_by_name};
use crate::{Error, State};

/// The longest module name, namespace or provider.
const MAX_NAME_LEN: usize = 64;

/// `name` and `namespace`: alphanumerics, `-` and `_`, not leading or trailing.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !name.starts_with(['-', '_'])
        && !name.ends_with(['-', '_'])
}

/// `provider`: lowercase alphanumerics.
pub(crate) fn valid_provider(provider: &str) -> bool {
    !provider.is_empty()
        && provider.len() <= MAX_NAME_LEN
        && provider
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Whether the caller may create, publish, update and delete modules: owners and teams with
/// `manage-modules`, never the organization token (it carries every other permission).
pub(crate) fn can_manage_modules(access: &OrgAccess) -> bool {
    !access.is_organization_token() && (access.is_owner() || access.permissions.manage_modules)
}

/// 403 for the public registry while public module curation is off; 404 for an unknown
/// registry name.
fn check_registry(state: &State, registry_name: &str) -> Result<(), Error> {
    match registry_name {
        "private" => Ok(()),
        "public" if state.config().public_module_curation => Ok(()),
        "public" => Err(Error::Forbidden(
            "public module curation is disabled on this server".to_owned(),
        )),
        _ => Err(Error::NotFound),
    }
}

/// The scheme and host the request came to (`http://127.0.0.1:8080`), for absolute URLs.
pub(crate) fn origin(headers: &HeaderMap) -> String {
    crate::signed_url::absolute_url(headers, "")
}

/// The module at a path's coordinates and the caller's access; 404 when missing or not
/// readable, 403 for the public registry while curation is off.
async fn visible_module(
    state: &State,
    caller: &Caller,
    coordinates: &Coordinates,
) -> Result<(Stored<ModuleRecord>, OrgAccess), Error> {
    let access = caller
        .organization(state, &coordinates.organization)
        .await?;
    check_registry(state, &coordinates.registry_name)?;
    let module = load_module_by_name(
        state.storage(),
        &coordinates.organization,
        &coordinates.registry_name,
        &coordinates.namespace,
        &coordinates.name,
        &coordinates.provider,
    )
    .await?
    .ok_or(Error::NotFound)?;
    Ok((module, access))
}

/// Where a module is in the URL space. Paths are extracted as tuples (the router needs one
/// parameter name per position across routes, so names cannot say what each segment is).
#[derive(Debug, Clone)]
pub(crate) struct Coordinates {
    pub(crate) organization: String,
    pub(crate) registry_name: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) provider: String,
}

/// `(organization, registry, namespace, name, provider)` of the current paths.
pub(crate) type ModulePath = (String, String, String, String, String);

/// `(organization, name, provider)` of the deprecated paths: a private module.
pub(crate) type DeprecatedPath = (String, String, String);

impl Coordinates {
    pub(crate) fn of(path: ModulePath) -> Coordinates {
        let (organization, registry_name, namespace, name, provider) = path;
        Coordinates {
            organization,
            registry_name,
            namespace,
            name,
            provider,
        }
    }

    pub(crate) fn deprecated(path: DeprecatedPath) -> Coordinates {
        let (organization, name, provider) = path;
        Coordinates {
            registry_name: "private".to_owned(),
            namespace: organization.clone(),
            organization,
            name,
            provider,
        }
    }
}

/// A nested attribute of an object attribute, kebab-case or snake_case (`vcs-repo.oauth-token-id`
/// or `vcs_repo.oauth_token_id`); `null` reads as absent.
pub(crate) fn nested<'a>(
    object: &'a serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Option<&'a serde_json::Value> {
    object
        .get(name)
        .or_else(|| object.get(&name.replace('-', "_")))
        .filter(|value| !value.is_null())
}

/// A nested string attribute; 422 pointing at it when it is not a string.
pub(crate) fn nested_string(
    object: &serde_json::Map<String, serde_json::Value>,
    parent: &str,
    name: &str,
) -> Result<Option<String>, Error> {
    match nested(object, name) {
        None => Ok(None),
        Some(serde_json::Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(Error::invalid(
            format!("/data/attributes/{parent}/{name}"),
            format!("{parent}.{name} must be a string"),
        )),
    }
}

/// A nested boolean attribute; 422 pointing at it when it is not a boolean.
pub(crate) fn nested_bool(
    object: &serde_json::Map<String, serde_json::Value>,
    parent: &str,
    name: &str,
) -> Result<Option<bool>, Error> {
    match nested(object, name) {
        None => Ok(None),
        Some(serde_json::Value::Bool(value)) => Ok(Some(*value)),
        Some(_) => Err(Error::invalid(
            format!("/data/attributes/{parent}/{name}"),
            format!("{parent}.{name} must be a boolean"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_registry_rules() {
        for good in ["vpc", "my-module", "my_module", "a1", &"a".repeat(64)] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "-vpc", "vpc_", "a/b", "a.b", "ünï", &"a".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert!(valid_provider("aws"));
        assert!(valid_provider("azurerm2"));
        for bad in ["", "AWS", "my-provider", "a_b", &"a".repeat(65)] {
            assert!(!valid_provider(bad), "{bad}");
        }
    }
}
