//! The module registry protocol over the private registry (`/.well-known/terraform.json` and
//! `/api/registry/v1/modules/…`), as `terraform init` and the registry clients use it: list
//! and search modules, list versions (each with its providers, dependencies and submodules),
//! the latest version of each provider, module detail JSON (root, submodules and examples with
//! inputs, outputs, dependencies, provider dependencies and resources), and downloads: `204`
//! with `X-Terraform-Get` naming a pre-signed `.tar.gz` URL that needs no bearer token, served
//! by [`download_archive`].
//!
//! Where it sits: handlers called from `routes.rs`; reads `store/registry_modules.rs` (the
//! records `registry_modules/` writes) and the archives in `blobs.rs`; signs with
//! `signed_url.rs`.
//!
//! Invariants:
//! - Bodies are plain `application/json` in the public registry's lowercase shape (not
//!   JSON:API); discovery's media type is exactly `application/json` (Terraform refuses
//!   anything else).
//! - `:namespace` is an organization; only its private modules are served, and only to callers
//!   with access to it (others get 404, as for a missing module). Only `ok` versions are
//!   listed or downloadable; "latest" is the highest `ok` release, else the highest `ok`
//!   pre-release.
//! - A download URL names one version's archive, expires after
//!   [`signed_url::DOWNLOAD_TTL_SECS`], ends in `.tar.gz` (go-getter picks its decompressor by
//!   suffix) and ignores whatever headers clients send with it.

use axum::extract::{Path, State as AxumState};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use crate::auth::Caller;
use crate::module_config::{ModuleDetail, ModulePart};
use crate::request::Query;
use crate::signed_url::{self, Access};
use crate::store::registry_modules::{
    ModuleRecord, ModuleVersionRecord, VersionStatus, all_modules_prefix, load_detail,
    load_module_by_name, load_module_by_version_id, load_modules_under, org_modules_prefix,
};
use crate::{Error, State, ids};

/// Where the private registry's module API lives (discovery's `modules.v1`).
pub(crate) const MODULES_V1: &str = "/api/registry/v1/modules/";

/// The default and largest page of a module list (the public registry's).
const DEFAULT_LIMIT: usize = 15;
const MAX_LIMIT: usize = 100;

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `GET /.well-known/terraform.json`: the service discovery document.
pub(crate) async fn discovery() -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "modules.v1": MODULES_V1,
            "state.v2": "/api/v2/",
            "tfe.v2": "/api/v2/",
            "tfe.v2.1": "/api/v2/",
            "tfe.v2.2": "/api/v2/",
        }),
    )
}

/// The signed object a download URL of version `modver_id` reaches.
fn download_object(modver_id: &str) -> String {
    format!("registry-module-versions/{modver_id}.tar.gz")
}

/// The private modules of `namespace` (an organization) the caller may see; 404 for an
/// organization the caller has no access to.
async fn namespace_modules(
    state: &State,
    caller: &Caller,
    namespace: &str,
) -> Result<Vec<ModuleRecord>, Error> {
    caller.organization(state, namespace).await?;
    Ok(
        load_modules_under(state.storage(), &org_modules_prefix(namespace))
            .await?
            .into_iter()
            .filter(|module| module.registry_name == "private")
            .collect(),
    )
}

/// Every private module the caller may see, in namespace, name, provider order.
async fn visible_modules(state: &State, caller: &Caller) -> Result<Vec<ModuleRecord>, Error> {
    let mut visible = Vec::new();
    let mut access: Option<(String, bool)> = None;
    for module in load_modules_under(state.storage(), &all_modules_prefix()).await? {
        if module.registry_name != "private" {
            continue;
        }
        let allowed = match &access {
            Some((organization, allowed)) if *organization == module.organization => *allowed,
            _ => {
                let allowed = caller
                    .try_organization(state, &module.organization)
                    .await?
                    .is_some();
                access = Some((module.organization.clone(), allowed));
                allowed
            }
        };
        if allowed {
            visible.push(module);
        }
    }
    Ok(visible)
}

/// The module `namespace/name/provider` in the private registry; 404 when missing or not
/// visible.
async fn visible_module(
    state: &State,
    caller: &Caller,
    namespace: &str,
    name: &str,
    provider: &str,
) -> Result<ModuleRecord, Error> {
    caller.organization(state, namespace).await?;
    Ok(load_module_by_name(
        state.storage(),
        namespace,
        "private",
        namespace,
        name,
        provider,
    )
    .await?
    .ok_or(Error::NotFound)?
    .record)
}

/// The module's repository URL for VCS modules, else its registry address.
fn source_of(module: &ModuleRecord) -> String {
    match &module.vcs {
        Some(vcs) => vcs.repository_http_url.clone(),
        None => format!("{}/{}/{}", module.namespace, module.name, module.provider),
    }
}

/// The first paragraph line of a README that is not a heading or a badge: the description.
fn description(readme: &str) -> String {
    readme
        .lines()
        .map(str::trim)
        .find(|line| {
            !line.is_empty()
                && !line.starts_with('#')
                && !line.starts_with('[')
                && !line.starts_with('!')
        })
        .unwrap_or_default()
        .to_owned()
}

/// A module version in the public registry's list shape.
fn summary(module: &ModuleRecord, version: &ModuleVersionRecord, readme: &str) -> Value {
    json!({
        "id": format!("{}/{}/{}/{}", module.namespace, module.name, module.provider, version.version),
        "owner": "",
        "namespace": module.namespace,
        "name": module.name,
        "version": version.version,
        "provider": module.provider,
        "provider_logo_url": "",
        "description": description(readme),
        "source": source_of(module),
        "tag": version.tag.clone().unwrap_or_default(),
        "published_at": ids::format_time(version.updated_at_ms),
        "downloads": 0,
        "verified": false,
    })
}

/// The latest version of each module with one, as list entries.
async fn summaries(state: &State, modules: &[ModuleRecord]) -> Result<Vec<Value>, Error> {
    let mut entries = Vec::new();
    for module in modules {
        if let Some(latest) = module.latest_version() {
            let readme = load_detail(state.storage(), &latest.id)
                .await?
                .map(|detail| detail.root.readme)
                .unwrap_or_default();
            entries.push(summary(module, latest, &readme));
        }
    }
    Ok(entries)
}

/// `offset` and `limit` (400 naming the parameter when not a number).
fn window(query: &Query) -> Result<(usize, usize), Error> {
    let number = |name: &str, default: usize| match query.get(name) {
        None | Some("") => Ok(default),
        Some(raw) => raw.parse::<usize>().map_err(|_| {
            Error::bad_parameter(name, format!("{name} must be a non-negative integer"))
        }),
    };
    Ok((
        number("offset", 0)?,
        number("limit", DEFAULT_LIMIT)?.clamp(1, MAX_LIMIT),
    ))
}

/// A list response: one window of `entries` with the public registry's `meta`.
fn list_response(entries: Vec<Value>, query: &Query) -> Result<Response, Error> {
    let (offset, limit) = window(query)?;
    let total = entries.len();
    let page: Vec<Value> = entries.into_iter().skip(offset).take(limit).collect();
    let mut meta = json!({"limit": limit, "current_offset": offset});
    if offset + limit < total {
        meta["next_offset"] = json!(offset + limit);
    }
    if offset > 0 {
        meta["prev_offset"] = json!(offset.saturating_sub(limit));
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({"meta": meta, "modules": page}),
    ))
}

/// Keeps the modules of `provider` when the query names one.
fn filter_provider(modules: Vec<ModuleRecord>, query: &Query) -> Vec<ModuleRecord> {
    match query.get("provider").filter(|p| !p.is_empty()) {
        Some(provider) => modules
            .into_iter()
            .filter(|module| module.provider == provider)
            .collect(),
        None => modules,
    }
}

/// `GET /api/registry/v1/modules`: every visible module's latest version (`offset`, `limit`,
/// `provider`).
pub(crate) async fn list_all(
    AxumState(state): AxumState<State>,
    caller: Caller,
    query: Query,
) -> Result<Response, Error> {
    let modules = filter_provider(visible_modules(&state, &caller).await?, &query);
    list_response(summaries(&state, &modules).await?, &query)
}

/// `GET /api/registry/v1/modules/search?q=`: modules whose name, namespace, provider or
/// description contains `q` (ignoring case); `namespace` and `provider` narrow it.
pub(crate) async fn search(
    AxumState(state): AxumState<State>,
    caller: Caller,
    query: Query,
) -> Result<Response, Error> {
    let q = query
        .get("q")
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .ok_or_else(|| Error::bad_parameter("q", "q is required"))?
        .to_lowercase();
    let mut modules = filter_provider(visible_modules(&state, &caller).await?, &query);
    if let Some(namespace) = query.get("namespace").filter(|n| !n.is_empty()) {
        modules.retain(|module| module.namespace == namespace);
    }
    let entries: Vec<Value> = summaries(&state, &modules)
        .await?
        .into_iter()
        .filter(|entry| {
            ["name", "namespace", "provider", "description"]
                .iter()
                .any(|field| {
                    entry[*field]
                        .as_str()
                        .is_some_and(|text| text.to_lowercase().contains(&q))
                })
        })
        .collect();
    list_response(entries, &query)
}

/// `GET /api/registry/v1/modules/:namespace`.
pub(crate) async fn list_namespace(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(namespace): Path<String>,
    query: Query,
) -> Result<Response, Error> {
    let modules = filter_provider(
        namespace_modules(&state, &caller, &namespace).await?,
        &query,
    );
    list_response(summaries(&state, &modules).await?, &query)
}

/// `GET /api/registry/v1/modules/:namespace/:name`: the latest version of each provider.
pub(crate) async fn latest_per_provider(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    query: Query,
) -> Result<Response, Error> {
    let modules: Vec<ModuleRecord> = namespace_modules(&state, &caller, &namespace)
        .await?
        .into_iter()
        .filter(|module| module.name == name)
        .collect();
    let entries = summaries(&state, &modules).await?;
    if entries.is_empty() {
        return Err(Error::NotFound);
    }
    list_response(entries, &query)
}

/// The registry JSON of one module directory's providers and module calls.
fn requirements(part: &ModulePart) -> (Value, Value) {
    (json!(part.provider_dependencies), json!(part.dependencies))
}

/// `GET /api/registry/v1/modules/:namespace/:name/:provider/versions`.
pub(crate) async fn list_versions(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path((namespace, name, provider)): Path<(String, String, String)>,
) -> Result<Response, Error> {
    let module = visible_module(&state, &caller, &namespace, &name, &provider).await?;
    let mut versions = Vec::new();
    for version in module.ok_versions() {
        let detail = load_detail(state.storage(), &version.id)
            .await?
            .unwrap_or_default();
        let (providers, dependencies) = requirements(&detail.root);
        let submodules: Vec<Value> = detail
            .submodules
            .iter()
            .map(|part| {
                let (providers, dependencies) = requirements(part);
                json!({"path": part.path, "providers": providers, "dependencies": dependencies})
            })
            .collect();
        versions.push(json!({
            "version": version.version,
            "root": {"providers": providers, "dependencies": dependencies},
            "submodules": submodules,
        }));
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({"modules": [{
            "source": format!("{namespace}/{name}/{provider}"),
            "versions": versions,
        }]}),
    ))
}

/// The module detail JSON of `version`.
async fn detail_response(
    state: &State,
    caller: &Caller,
    module: &ModuleRecord,
    version: &ModuleVersionRecord,
) -> Result<Response, Error> {
    let detail: ModuleDetail = load_detail(state.storage(), &version.id)
        .await?
        .unwrap_or_default();
    let mut body = summary(module, version, &detail.root.readme);
    let mut root = json!(detail.root);
    root["name"] = json!(module.name);
    body["root"] = root;
    body["submodules"] = json!(detail.submodules);
    body["examples"] = json!(detail.examples);
    let providers: Vec<String> = namespace_modules(state, caller, &module.namespace)
        .await?
        .into_iter()
        .filter(|other| other.name == module.name && other.latest_version().is_some())
        .map(|other| other.provider)
        .collect();
    body["providers"] = json!(providers);
    let versions: Vec<&str> = module
        .ok_versions()
        .iter()
        .map(|v| v.version.as_str())
        .collect();
    body["versions"] = json!(versions);
    Ok(json_response(StatusCode::OK, &body))
}

/// `GET /api/registry/v1/modules/:namespace/:name/:provider`: the latest version's detail.
pub(crate) async fn latest(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path((namespace, name, provider)): Path<(String, String, String)>,
) -> Result<Response, Error> {
    let module = visible_module(&state, &caller, &namespace, &name, &provider).await?;
    let version = module.latest_version().ok_or(Error::NotFound)?.clone();
    detail_response(&state, &caller, &module, &version).await
}

/// `GET /api/registry/v1/modules/:namespace/:name/:provider/:version`: that version's detail.
pub(crate) async fn read_version(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path((namespace, name, provider, version)): Path<(String, String, String, String)>,
) -> Result<Response, Error> {
    let module = visible_module(&state, &caller, &namespace, &name, &provider).await?;
    let version = module
        .find_version(&version)
        .filter(|v| v.status == VersionStatus::Ok)
        .ok_or(Error::NotFound)?
        .clone();
    detail_response(&state, &caller, &module, &version).await
}

/// `GET /api/registry/v1/modules/:namespace/:name/:provider/:version/download`: 204 with
/// `X-Terraform-Get` (an absolute pre-signed `.tar.gz` URL).
pub(crate) async fn download(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path((namespace, name, provider, version)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, Error> {
    let module = visible_module(&state, &caller, &namespace, &name, &provider).await?;
    let version = module
        .find_version(&version)
        .filter(|v| v.status == VersionStatus::Ok && v.blob_key.is_some())
        .ok_or(Error::NotFound)?;
    let signer = state.signer().await?;
    let path = signer.sign(
        Access::Download,
        &download_object(&version.id),
        state.now_secs() + signed_url::DOWNLOAD_TTL_SECS,
    );
    let location = signed_url::absolute_url(&headers, &path);
    let mut response = StatusCode::NO_CONTENT.into_response();
    let value = HeaderValue::from_str(&location)
        .map_err(|err| Error::Internal(format!("download URL: {err}")))?;
    response.headers_mut().insert("x-terraform-get", value);
    Ok(response)
}

/// `GET /api/registry/v1/modules/:namespace/:name/:provider/download`: 302 to the latest
/// version's download.
pub(crate) async fn download_latest(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path((namespace, name, provider)): Path<(String, String, String)>,
) -> Result<Response, Error> {
    let module = visible_module(&state, &caller, &namespace, &name, &provider).await?;
    let latest = module.latest_version().ok_or(Error::NotFound)?;
    let location = format!(
        "{MODULES_V1}{namespace}/{name}/{provider}/{}/download",
        latest.version
    );
    Ok((StatusCode::FOUND, [(header::LOCATION, location)]).into_response())
}

/// `GET /_archivist/v1/object/:signature/registry-module-versions/:modver-id.tar.gz`: the
/// archive, `application/octet-stream`; 404 for a bad or expired URL or a version that is no
/// longer `ok`.
pub(crate) async fn download_archive(
    AxumState(state): AxumState<State>,
    Path((signature, file)): Path<(String, String)>,
) -> Result<Response, Error> {
    let id = file.strip_suffix(".tar.gz").ok_or(Error::NotFound)?;
    let signer = state.signer().await?;
    signer
        .verify(
            Access::Download,
            &download_object(id),
            &signature,
            state.now_secs(),
        )
        .map_err(|_| Error::NotFound)?;
    let module = load_module_by_version_id(state.storage(), id)
        .await?
        .ok_or(Error::NotFound)?;
    let version = module
        .record
        .versions
        .iter()
        .find(|v| v.id == id && v.status == VersionStatus::Ok)
        .ok_or(Error::NotFound)?;
    let key = version.blob_key.as_deref().ok_or(Error::NotFound)?;
    let content = state
        .blobs()
        .open(key)
        .await
        .map_err(|err| Error::Internal(err.to_string()))?
        .ok_or(Error::NotFound)?;
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, version.size.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!(
                    "attachment; filename=\"{}-{}-{}.tar.gz\"",
                    module.record.name, module.record.provider, version.version
                ),
            ),
        ],
        content.into_body(),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn description_is_the_first_plain_line_of_the_readme() {
        assert_eq!(
            description("# VPC\n\n[![badge](x)](y)\n\nCreates a VPC.\nMore."),
            "Creates a VPC."
        );
        assert_eq!(description(""), "");
    }
}
