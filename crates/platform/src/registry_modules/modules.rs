//! Registry modules themselves: list (`q`, `filter[registry_name|provider|organization_name]`,
//! paging), create without VCS, read (by path, by id, and the deprecated `show` path), update
//! (`vcs-repo.branch`/`tags`, `test-config.tests-enabled`, `no-code`) and delete by name,
//! provider or version (current `DELETE` paths and the deprecated `POST …/actions/delete/…`).
//!
//! Where it sits: see `registry_modules/mod.rs`.
//!
//! Invariants: a delete answers 204 after the records are gone, then removes the archives
//! (a failure there leaves an orphan file, never a record naming a missing archive); deleting
//! a module's last version deletes the module, as TFE does.

use axum::extract::{Path, State as AxumState};
use axum::response::Response;
use http::HeaderMap;
use jsonapi::Document;

use super::{
    Coordinates, DeprecatedPath, ModulePath, can_manage_modules, check_registry, nested_bool,
    nested_string, origin, valid_name, valid_provider, visible_module,
};
use crate::auth::{Caller, OrgAccess};
use crate::render::{JsonApi, no_content, paged};
use crate::request::{Body, Query};
use crate::store::registry_modules::{
    ModuleRecord, ModuleStatus, blob_prefix, create_module as store_create, delete_module,
    load_module, load_modules_under, module_name_key, org_modules_prefix,
    update_module as store_update,
};
use crate::store::{MAX_ATTEMPTS, RECORD_VERSION};
use crate::views::registry_modules::module_resource;
use crate::{Error, State, ids};

/// `GET /api/v2/organizations/:org/registry-modules`: the organization's modules in name
/// order, filtered by `q` (a substring of the name, namespace or provider, ignoring case) and
/// `filter[registry_name|provider|organization_name]`, paged (default 20).
pub(crate) async fn list_modules(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(organization): Path<String>,
    headers: HeaderMap,
    query: Query,
) -> Result<JsonApi, Error> {
    let access = caller.organization(&state, &organization).await?;
    let page = query.page(jsonapi::DEFAULT_PAGE_SIZE)?;
    let search = query
        .get("q")
        .map(str::to_lowercase)
        .filter(|q| !q.is_empty());
    let registry_name = query.filter("registry_name");
    let provider = query.filter("provider");
    let organization_name = query.filter("organization_name");
    let modules: Vec<ModuleRecord> =
        load_modules_under(state.storage(), &org_modules_prefix(&organization))
            .await?
            .into_iter()
            .filter(|module| registry_name.is_none_or(|r| module.registry_name == r))
            .filter(|module| provider.is_none_or(|p| module.provider == p))
            .filter(|module| {
                organization_name.is_none_or(|o| module.organization == o || module.namespace == o)
            })
            .filter(|module| {
                search.as_deref().is_none_or(|q| {
                    [&module.name, &module.namespace, &module.provider]
                        .iter()
                        .any(|field| field.to_lowercase().contains(q))
                })
            })
            .collect();
    let origin = origin(&headers);
    let path = format!("/api/v2/organizations/{organization}/registry-modules");
    Ok(JsonApi::ok(paged(
        &modules,
        page,
        &path,
        &query,
        |module| module_resource(module, &access, &origin),
    )))
}

/// `POST /api/v2/organizations/:org/registry-modules`: a module without VCS; 201 with status
/// `pending` and no versions; 422 for bad names or a duplicate; 403 for `public` while
/// curation is off.
pub(crate) async fn create_module(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(organization): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<JsonApi, Error> {
    let access = caller.organization(&state, &organization).await?;
    OrgAccess::check(can_manage_modules(&access))?;
    body.expect_type(&["registry-modules"])?;
    let name = body.required_string("name")?;
    if !valid_name(&name) {
        return Err(Error::invalid_attribute(
            "name",
            "name may contain only letters, digits, - and _ (not leading or trailing), at most 64 characters",
        ));
    }
    let provider = body.required_string("provider")?;
    if !valid_provider(&provider) {
        return Err(Error::invalid_attribute(
            "provider",
            "provider may contain only lowercase letters and digits, at most 64 characters",
        ));
    }
    let registry_name = body
        .string("registry-name")?
        .unwrap_or_else(|| "private".to_owned());
    let namespace = body.string("namespace")?.filter(|n| !n.is_empty());
    let namespace = match registry_name.as_str() {
        "private" => match namespace {
            Some(namespace) if namespace != organization => {
                return Err(Error::invalid_attribute(
                    "namespace",
                    "namespace cannot be set for private modules",
                ));
            }
            _ => organization.clone(),
        },
        "public" => {
            check_registry(&state, "public")?;
            let namespace = namespace.ok_or_else(|| {
                Error::invalid_attribute("namespace", "namespace is required for public modules")
            })?;
            if !valid_name(&namespace) {
                return Err(Error::invalid_attribute(
                    "namespace",
                    "namespace may contain only letters, digits, - and _ (not leading or trailing), at most 64 characters",
                ));
            }
            namespace
        }
        _ => {
            return Err(Error::invalid_attribute(
                "registry-name",
                "registry-name must be private or public",
            ));
        }
    };
    let now = state.now_ms();
    let module = ModuleRecord {
        version: RECORD_VERSION,
        id: ids::new_id("mod"),
        organization: organization.clone(),
        registry_name,
        namespace,
        name,
        provider,
        no_code: body.bool("no-code")?.unwrap_or(false),
        tests_enabled: false,
        status: ModuleStatus::Pending,
        vcs: None,
        versions: Vec::new(),
        created_at_ms: now,
        updated_at_ms: now,
    };
    insert(&state, &module).await?;
    Ok(JsonApi::created(Document::one(module_resource(
        &module,
        &access,
        &origin(&headers),
    ))))
}

/// Stores a new module; 422 when its coordinates are taken, 404 when the organization went.
pub(super) async fn insert(state: &State, module: &ModuleRecord) -> Result<(), Error> {
    if store_create(state.storage(), module).await? {
        return Ok(());
    }
    let taken = state
        .storage()
        .get(&module_name_key(
            &module.organization,
            &module.registry_name,
            &module.namespace,
            &module.name,
            &module.provider,
        ))
        .await?
        .is_some();
    if taken {
        Err(Error::invalid_attribute(
            "name",
            format!(
                "a module {}/{}/{} already exists in the {} registry",
                module.namespace, module.name, module.provider, module.registry_name
            ),
        ))
    } else {
        Err(Error::Contention)
    }
}

/// `GET /api/v2/organizations/:org/registry-modules/:registry/:namespace/:name/:provider`.
pub(crate) async fn read_module(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(path): Path<ModulePath>,
    headers: HeaderMap,
) -> Result<JsonApi, Error> {
    let (module, access) = visible_module(&state, &caller, &Coordinates::of(path)).await?;
    Ok(JsonApi::ok(Document::one(module_resource(
        &module.record,
        &access,
        &origin(&headers),
    ))))
}

/// `GET /api/v2/registry-modules/show/:org/:name/:provider` (deprecated).
pub(crate) async fn read_module_deprecated(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(path): Path<DeprecatedPath>,
    headers: HeaderMap,
) -> Result<JsonApi, Error> {
    let (module, access) = visible_module(&state, &caller, &Coordinates::deprecated(path)).await?;
    Ok(JsonApi::ok(Document::one(module_resource(
        &module.record,
        &access,
        &origin(&headers),
    ))))
}

/// `GET /api/v2/registry-modules/:id`.
pub(crate) async fn read_module_by_id(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<JsonApi, Error> {
    let module = load_module(state.storage(), &id)
        .await?
        .ok_or(Error::NotFound)?;
    let access = caller
        .organization(&state, &module.record.organization)
        .await?;
    check_registry(&state, &module.record.registry_name)?;
    Ok(JsonApi::ok(Document::one(module_resource(
        &module.record,
        &access,
        &origin(&headers),
    ))))
}

/// `PATCH /api/v2/organizations/:org/registry-modules/:registry/:namespace/:name/:provider[/]`:
/// `vcs-repo.branch` and `vcs-repo.tags` (exclusive; VCS modules only), `test-config
/// .tests-enabled`, `no-code`; each keeps its value when omitted.
pub(crate) async fn update_module(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(path): Path<ModulePath>,
    headers: HeaderMap,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["registry-modules"])?;
    let coordinates = Coordinates::of(path);
    let vcs_repo = body.object("vcs-repo")?.cloned();
    let (branch, tags) = match &vcs_repo {
        Some(repo) => (
            nested_string(repo, "vcs-repo", "branch")?,
            nested_bool(repo, "vcs-repo", "tags")?,
        ),
        None => (None, None),
    };
    let branch = branch.filter(|branch| !branch.is_empty());
    if branch.is_some() && tags == Some(true) {
        return Err(Error::invalid_attribute(
            "vcs-repo",
            "vcs-repo.branch and vcs-repo.tags cannot both be set",
        ));
    }
    let tests_enabled = match body.object("test-config")? {
        Some(config) => nested_bool(config, "test-config", "tests-enabled")?,
        None => None,
    };
    let no_code = body.bool("no-code")?;
    for _ in 0..MAX_ATTEMPTS {
        let (module, access) = visible_module(&state, &caller, &coordinates).await?;
        OrgAccess::check(can_manage_modules(&access))?;
        let mut next = module.record.clone();
        match (&mut next.vcs, &branch, tags) {
            (None, None, None) => {}
            (None, _, _) => {
                return Err(Error::invalid_attribute(
                    "vcs-repo",
                    "the module is not published from a VCS repository",
                ));
            }
            (Some(vcs), Some(branch), _) => {
                vcs.branch = branch.clone();
                vcs.tags = false;
            }
            (Some(vcs), None, Some(tags)) => {
                vcs.tags = tags;
                if tags {
                    vcs.branch = String::new();
                }
            }
            (Some(_), None, None) => {}
        }
        if let Some(enabled) = tests_enabled {
            next.tests_enabled = enabled;
        }
        if let Some(no_code) = no_code {
            next.no_code = no_code;
        }
        next.updated_at_ms = state.now_ms();
        if store_update(state.storage(), &module, &next, Vec::new()).await? {
            return Ok(JsonApi::ok(Document::one(module_resource(
                &next,
                &access,
                &origin(&headers),
            ))));
        }
    }
    Err(Error::Contention)
}

/// What a delete removes.
#[derive(Debug, Clone, Copy)]
enum Scope<'a> {
    /// Every provider of the name.
    Name,
    Provider(&'a str),
    Version(&'a str, &'a str),
}

/// Deletes in the registry at `(organization, registry_name, namespace, name)` what `scope`
/// names; 404 when nothing matches.
async fn delete_scope(
    state: &State,
    caller: &Caller,
    organization: &str,
    registry_name: &str,
    namespace: &str,
    name: &str,
    scope: Scope<'_>,
) -> Result<Response, Error> {
    let access = caller.organization(state, organization).await?;
    OrgAccess::check(can_manage_modules(&access))?;
    check_registry(state, registry_name)?;
    let prefix = format!(
        "{}{registry_name}/{namespace}/{name}/",
        org_modules_prefix(organization)
    );
    let candidates: Vec<ModuleRecord> = load_modules_under(state.storage(), &prefix)
        .await?
        .into_iter()
        .filter(|module| match scope {
            Scope::Name => true,
            Scope::Provider(provider) | Scope::Version(provider, _) => module.provider == provider,
        })
        .collect();
    if candidates.is_empty() {
        return Err(Error::NotFound);
    }
    for candidate in candidates {
        'attempts: {
            for _ in 0..MAX_ATTEMPTS {
                let Some(module) = load_module(state.storage(), &candidate.id).await? else {
                    break 'attempts;
                };
                let (committed, blobs) = match scope {
                    Scope::Version(_, version) => {
                        let Some(doomed) = module.record.find_version(version).cloned() else {
                            return Err(Error::NotFound);
                        };
                        let mut next = module.record.clone();
                        next.versions.retain(|v| v.id != doomed.id);
                        if next.versions.is_empty() {
                            let done = delete_module(state.storage(), &module).await?;
                            (done, Some(blob_prefix(&module.record.id)))
                        } else {
                            next.status = next.derived_status();
                            next.updated_at_ms = state.now_ms();
                            let done =
                                store_update(state.storage(), &module, &next, Vec::new()).await?;
                            (
                                done,
                                Some(format!("{}/{}", blob_prefix(&module.record.id), doomed.id)),
                            )
                        }
                    }
                    Scope::Name | Scope::Provider(_) => {
                        let done = delete_module(state.storage(), &module).await?;
                        (done, Some(blob_prefix(&module.record.id)))
                    }
                };
                if committed {
                    if let Some(prefix) = blobs
                        && let Err(err) = state.blobs().delete_prefix(&prefix).await
                    {
                        tracing::warn!(message = "Deleting module archives failed.", prefix, error = %err);
                    }
                    break 'attempts;
                }
            }
            return Err(Error::Contention);
        }
    }
    Ok(no_content())
}

/// `DELETE /api/v2/organizations/:org/registry-modules/:registry/:namespace/:name`: every
/// provider of the name.
pub(crate) async fn delete_by_path(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path((organization, registry, namespace, name)): Path<(String, String, String, String)>,
) -> Result<Response, Error> {
    delete_scope(
        &state,
        &caller,
        &organization,
        &registry,
        &namespace,
        &name,
        Scope::Name,
    )
    .await
}

/// `DELETE /api/v2/organizations/:org/registry-modules/:registry/:namespace/:name/:provider`.
pub(crate) async fn delete_provider_by_path(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(path): Path<ModulePath>,
) -> Result<Response, Error> {
    let c = Coordinates::of(path);
    delete_scope(
        &state,
        &caller,
        &c.organization,
        &c.registry_name,
        &c.namespace,
        &c.name,
        Scope::Provider(&c.provider),
    )
    .await
}

/// `DELETE /api/v2/organizations/:org/registry-modules/:registry/:namespace/:name/:provider/:version`.
pub(crate) async fn delete_version_by_path(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path((organization, registry, namespace, name, provider, version)): Path<(
        String,
        String,
        String,
        String,
        String,
        String,
    )>,
) -> Result<Response, Error> {
    delete_scope(
        &state,
        &caller,
        &organization,
        &registry,
        &namespace,
        &name,
        Scope::Version(&provider, &version),
    )
    .await
}

/// `POST /api/v2/registry-modules/actions/delete/:org/:name[/:provider[/:version]]`
/// (deprecated; pytfe deletes through these): a private module's name, provider or version.
pub(crate) async fn delete_deprecated(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(segments): Path<Vec<(String, String)>>,
) -> Result<Response, Error> {
    let values: Vec<&str> = segments.iter().map(|(_, value)| value.as_str()).collect();
    let (organization, name, scope) = match values.as_slice() {
        [organization, name] => (*organization, *name, Scope::Name),
        [organization, name, provider] => (*organization, *name, Scope::Provider(provider)),
        [organization, name, provider, version] => {
            (*organization, *name, Scope::Version(provider, version))
        }
        _ => return Err(Error::NotFound),
    };
    delete_scope(
        &state,
        &caller,
        organization,
        "private",
        organization,
        name,
        scope,
    )
    .await
}
