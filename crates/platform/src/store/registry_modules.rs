//! Stored registry modules, their versions and what each version declares (see `store/mod.rs`
//! for the layout).
//!
//! ```text
//! platform/registry-modules/<mod-id>                                   ModuleRecord (with its versions)
//! platform/org-registry-modules/<org>/<registry>/<namespace>/<name>/<provider>
//!                                                                      IdRef → module (unique; the list's order)
//! platform/registry-module-versions/<modver-id>                        IdRef → module
//! platform/registry-module-details/<modver-id>                         DetailRecord (the parsed configuration)
//! platform/registry-module-webhooks/<webhook-id>                       IdRef → module (VCS modules)
//! ```
//!
//! Invariants:
//! - A module is one record holding its versions, so its `version-statuses` and module status
//!   change in the same compare-and-swap as the version; the name index, the version index, the
//!   webhook index and the details are written and removed in the same transactions as the
//!   record.
//! - Names reaching keys are validated first (organization names by `organizations.rs`; module
//!   names, namespaces and providers by `registry_modules/`), so a `/` never splits a key.
//! - A version's archive lives in the blob store under `registry-modules/<mod-id>/…`, named by
//!   `blob_key` only once it is complete and accepted.

use serde::{Deserialize, Serialize};
use storage::{Compare, KeyRange, Storage, Txn};

use crate::Error;
use crate::module_config::ModuleDetail;
use crate::semver::Version;
use crate::store::{IdRef, PREFIX, RECORD_VERSION, Stored, commit, delete, load, put};

/// `attributes.status` of a module (pytfe's enum).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ModuleStatus {
    Pending,
    NoVersionTags,
    SetupFailed,
    SetupComplete,
}

impl ModuleStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ModuleStatus::Pending => "pending",
            ModuleStatus::NoVersionTags => "no_version_tags",
            ModuleStatus::SetupFailed => "setup_failed",
            ModuleStatus::SetupComplete => "setup_complete",
        }
    }
}

/// `attributes.status` of a module version (pytfe's enum).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum VersionStatus {
    Pending,
    CloneFailed,
    RegIngressFailed,
    Ok,
}

impl VersionStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            VersionStatus::Pending => "pending",
            VersionStatus::CloneFailed => "clone_failed",
            VersionStatus::RegIngressFailed => "reg_ingress_failed",
            VersionStatus::Ok => "ok",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ModuleRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) organization: String,
    /// `private` or `public`.
    pub(crate) registry_name: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) provider: String,
    pub(crate) no_code: bool,
    pub(crate) tests_enabled: bool,
    pub(crate) status: ModuleStatus,
    /// Set for modules published from a repository.
    #[serde(default)]
    pub(crate) vcs: Option<VcsRepoRecord>,
    /// Every version, in no particular order (views sort by precedence).
    #[serde(default)]
    pub(crate) versions: Vec<ModuleVersionRecord>,
    pub(crate) created_at_ms: u64,
    pub(crate) updated_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct VcsRepoRecord {
    /// `:org/:repo` on the connection's host.
    pub(crate) identifier: String,
    pub(crate) display_identifier: String,
    pub(crate) oauth_token_id: String,
    /// The branch versions publish from (branch-based modules); `""` for tag-based ones.
    pub(crate) branch: String,
    pub(crate) tags: bool,
    pub(crate) ingress_submodules: bool,
    /// The unguessable last segment of the webhook URL.
    pub(crate) webhook_id: String,
    /// The repository's clone URL (`<http-url>/<identifier>.git`).
    pub(crate) repository_http_url: String,
    pub(crate) service_provider: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ModuleVersionRecord {
    pub(crate) id: String,
    pub(crate) version: String,
    pub(crate) status: VersionStatus,
    /// Why ingestion failed (`reg_ingress_failed`, `clone_failed`).
    #[serde(default)]
    pub(crate) error: Option<String>,
    /// `tfe-api` for uploads, the VCS provider for tags.
    pub(crate) source: String,
    #[serde(default)]
    pub(crate) commit_sha: Option<String>,
    /// The repository tag it was published from.
    #[serde(default)]
    pub(crate) tag: Option<String>,
    /// The accepted archive.
    #[serde(default)]
    pub(crate) blob_key: Option<String>,
    #[serde(default)]
    pub(crate) size: u64,
    pub(crate) created_at_ms: u64,
    pub(crate) updated_at_ms: u64,
}

impl ModuleRecord {
    pub(crate) fn find_version(&self, version: &str) -> Option<&ModuleVersionRecord> {
        self.versions.iter().find(|v| v.version == version)
    }

    /// The versions, highest precedence first.
    pub(crate) fn versions_descending(&self) -> Vec<&ModuleVersionRecord> {
        let mut versions: Vec<(Option<Version>, &ModuleVersionRecord)> = self
            .versions
            .iter()
            .map(|v| (Version::parse(&v.version), v))
            .collect();
        versions.sort_by(|(a, _), (b, _)| b.cmp(a));
        versions.into_iter().map(|(_, v)| v).collect()
    }

    /// The `ok` versions, highest precedence first.
    pub(crate) fn ok_versions(&self) -> Vec<&ModuleVersionRecord> {
        self.versions_descending()
            .into_iter()
            .filter(|v| v.status == VersionStatus::Ok)
            .collect()
    }

    /// The version `latest` means: the highest `ok` release, else the highest `ok` version.
    pub(crate) fn latest_version(&self) -> Option<&ModuleVersionRecord> {
        let ok = self.ok_versions();
        ok.iter()
            .find(|v| Version::parse(&v.version).is_some_and(|parsed| !parsed.is_prerelease()))
            .or_else(|| ok.first())
            .copied()
    }

    /// The module status its versions imply.
    pub(crate) fn derived_status(&self) -> ModuleStatus {
        if self.versions.iter().any(|v| v.status == VersionStatus::Ok) {
            ModuleStatus::SetupComplete
        } else if self.vcs.is_some() && self.versions.is_empty() {
            ModuleStatus::NoVersionTags
        } else if self.vcs.is_some()
            && self
                .versions
                .iter()
                .all(|v| v.status != VersionStatus::Pending)
        {
            ModuleStatus::SetupFailed
        } else {
            ModuleStatus::Pending
        }
    }
}

/// What a version's configuration declares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DetailRecord {
    pub(crate) version: u32,
    pub(crate) detail: ModuleDetail,
}

impl DetailRecord {
    pub(crate) fn new(detail: ModuleDetail) -> DetailRecord {
        DetailRecord {
            version: RECORD_VERSION,
            detail,
        }
    }
}

pub(crate) fn module_key(id: &str) -> Vec<u8> {
    format!("{PREFIX}registry-modules/{id}").into_bytes()
}

pub(crate) fn org_modules_prefix(organization: &str) -> String {
    format!("{PREFIX}org-registry-modules/{organization}/")
}

/// Every organization's index, for the registry protocol's lists across namespaces.
pub(crate) fn all_modules_prefix() -> String {
    format!("{PREFIX}org-registry-modules/")
}

pub(crate) fn module_name_key(
    organization: &str,
    registry_name: &str,
    namespace: &str,
    name: &str,
    provider: &str,
) -> Vec<u8> {
    format!(
        "{}{registry_name}/{namespace}/{name}/{provider}",
        org_modules_prefix(organization)
    )
    .into_bytes()
}

fn name_key_of(module: &ModuleRecord) -> Vec<u8> {
    module_name_key(
        &module.organization,
        &module.registry_name,
        &module.namespace,
        &module.name,
        &module.provider,
    )
}

pub(crate) fn version_index_key(modver_id: &str) -> Vec<u8> {
    format!("{PREFIX}registry-module-versions/{modver_id}").into_bytes()
}

pub(crate) fn detail_key(modver_id: &str) -> Vec<u8> {
    format!("{PREFIX}registry-module-details/{modver_id}").into_bytes()
}

pub(crate) fn webhook_key(webhook_id: &str) -> Vec<u8> {
    format!("{PREFIX}registry-module-webhooks/{webhook_id}").into_bytes()
}

/// Where the archives of module `id` live in the blob store.
pub(crate) fn blob_prefix(id: &str) -> String {
    format!("registry-modules/{id}")
}

pub(crate) async fn load_module(
    storage: &dyn Storage,
    id: &str,
) -> Result<Option<Stored<ModuleRecord>>, Error> {
    load(storage, &module_key(id)).await
}

/// The module an index record at `key` points at.
async fn load_via(
    storage: &dyn Storage,
    key: &[u8],
) -> Result<Option<Stored<ModuleRecord>>, Error> {
    match load::<IdRef>(storage, key).await? {
        Some(reference) => load_module(storage, &reference.record.id).await,
        None => Ok(None),
    }
}

pub(crate) async fn load_module_by_name(
    storage: &dyn Storage,
    organization: &str,
    registry_name: &str,
    namespace: &str,
    name: &str,
    provider: &str,
) -> Result<Option<Stored<ModuleRecord>>, Error> {
    let key = module_name_key(organization, registry_name, namespace, name, provider);
    load_via(storage, &key).await
}

pub(crate) async fn load_module_by_version_id(
    storage: &dyn Storage,
    modver_id: &str,
) -> Result<Option<Stored<ModuleRecord>>, Error> {
    load_via(storage, &version_index_key(modver_id)).await
}

pub(crate) async fn load_module_by_webhook(
    storage: &dyn Storage,
    webhook_id: &str,
) -> Result<Option<Stored<ModuleRecord>>, Error> {
    load_via(storage, &webhook_key(webhook_id)).await
}

/// Every module under an index prefix (one organization's, or all), in key order: by
/// organization, registry, namespace, name, provider.
pub(crate) async fn load_modules_under(
    storage: &dyn Storage,
    prefix: &str,
) -> Result<Vec<ModuleRecord>, Error> {
    let scan = storage.scan(KeyRange::prefix(prefix), None).await?;
    let mut modules = Vec::with_capacity(scan.kvs.len());
    for kv in &scan.kvs {
        let reference: IdRef = super::decode(&kv.key, &kv.value)?;
        if let Some(module) = load_module(storage, &reference.id).await? {
            modules.push(module.record);
        }
    }
    Ok(modules)
}

pub(crate) async fn load_detail(
    storage: &dyn Storage,
    modver_id: &str,
) -> Result<Option<ModuleDetail>, Error> {
    Ok(load::<DetailRecord>(storage, &detail_key(modver_id))
        .await?
        .map(|stored| stored.record.detail))
}

/// Creates `module`; `false` when a module of the same organization, registry, namespace,
/// name and provider exists.
pub(crate) async fn create_module(
    storage: &dyn Storage,
    module: &ModuleRecord,
) -> Result<bool, Error> {
    let mut txn = Txn::new()
        .when(Compare::Missing(name_key_of(module)))
        .when(Compare::Missing(module_key(&module.id)))
        .then(put(module_key(&module.id), module)?)
        .then(put(name_key_of(module), &IdRef::new(&module.id))?);
    if let Some(vcs) = &module.vcs {
        txn = txn.then(put(webhook_key(&vcs.webhook_id), &IdRef::new(&module.id))?);
    }
    commit(storage, txn).await
}

/// Replaces the module read at `previous` with `next` (same id), adding the index records of
/// new versions and the details in `details` (version id → detail), and removing those of
/// versions `next` no longer has; `false` when the module changed since it was read.
pub(crate) async fn update_module(
    storage: &dyn Storage,
    previous: &Stored<ModuleRecord>,
    next: &ModuleRecord,
    details: Vec<(String, ModuleDetail)>,
) -> Result<bool, Error> {
    let mut txn = Txn::new()
        .when(Compare::ModRevision(
            module_key(&next.id),
            previous.revision,
        ))
        .then(put(module_key(&next.id), next)?);
    for version in &next.versions {
        if previous.record.versions.iter().all(|v| v.id != version.id) {
            txn = txn.then(put(version_index_key(&version.id), &IdRef::new(&next.id))?);
        }
    }
    for version in &previous.record.versions {
        if next.versions.iter().all(|v| v.id != version.id) {
            txn = txn
                .then(delete(version_index_key(&version.id)))
                .then(delete(detail_key(&version.id)));
        }
    }
    for (modver_id, detail) in details {
        txn = txn.then(put(detail_key(&modver_id), &DetailRecord::new(detail))?);
    }
    commit(storage, txn).await
}

/// Deletes the module read at `previous` with its indexes and details; `false` when it
/// changed since it was read.
pub(crate) async fn delete_module(
    storage: &dyn Storage,
    previous: &Stored<ModuleRecord>,
) -> Result<bool, Error> {
    let module = &previous.record;
    let mut txn = Txn::new()
        .when(Compare::ModRevision(
            module_key(&module.id),
            previous.revision,
        ))
        .then(delete(module_key(&module.id)))
        .then(delete(name_key_of(module)));
    if let Some(vcs) = &module.vcs {
        txn = txn.then(delete(webhook_key(&vcs.webhook_id)));
    }
    for version in &module.versions {
        txn = txn
            .then(delete(version_index_key(&version.id)))
            .then(delete(detail_key(&version.id)));
    }
    commit(storage, txn).await
}
