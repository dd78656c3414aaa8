//! The mount table: which backend serves which path prefix, persisted through the barrier.
//!
//! Two tables, as Vault: secrets engines (`core/mounts`: `sys/`, `identity/`, `secret/` in dev,
//! and every `sys/mounts/:path`) and auth methods (`core/auth`: `auth/token/` and every
//! `sys/auth/:path`, stored with their full `auth/<path>/` path). Routing is by longest prefix
//! over both (`route`), and `foo` also finds a mount at `foo/` (Vault's router does the same).
//!
//! Storage keys (through the barrier): `core/mounts`, `core/auth` (one JSON record each);
//! engine data lives under `logical/<mount uuid>/`, auth method data under
//! `auth/<mount uuid>/`, so moving a mount (`sys/remount`) changes only the table.
//!
//! Built-ins: `sys/` (system), `identity/` (identity), `auth/token/` (token) always exist and
//! are re-added on load if missing, and so is `cubbyhole/` (the `secrets-cubbyhole` engine,
//! `local`, described as Vault describes it; it cannot be unmounted, moved, or mounted again
//! elsewhere: 403 `mount type of "cubbyhole" is not mountable`); in `cairn dev`
//! the first start mounts `kv` version 2 at `secret/` (options `{"version": "2"}`), as Vault's
//! dev server does. Deleting `secret/` sticks, as in Vault.
//!
//! kv versions (Vault's `handleMount` and tune): mounting type `kv-v1` or `kv-v2` mounts `kv`
//! with `options.version` 1 or 2; any other secrets engine refuses a `version` option. Tuning
//! `options.version` accepts 1 or 2 only and never goes down (`cannot downgrade mount from
//! version 2`); going from 1 to 2 rebuilds the engine, which upgrades the mount's secrets.
//!
//! Invariants: the in-memory table always equals the stored one after a successful change
//! (changes are serialized by `change`, persisted first, then swapped in); a path is in at most
//! one mount and no mount path is a prefix of another; reads never block on writers for long
//! (a `std::sync::RwLock` around an `Arc` snapshot).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use secrets_sdk::{Engine, EngineConfig, EngineError};
use serde::{Deserialize, Serialize};

use crate::{Error, State, engines};

/// Where the secrets-engine table is stored (through the barrier).
pub(crate) const MOUNTS_KEY: &str = "core/mounts";
/// Where the auth-method table is stored (through the barrier).
pub(crate) const AUTH_KEY: &str = "core/auth";

/// Vault's system default lease TTL, also the system max: 768h (32 days).
pub(crate) const SYSTEM_DEFAULT_LEASE_TTL: Duration = Duration::from_secs(768 * 3600);
/// Vault's system max lease TTL.
pub(crate) const SYSTEM_MAX_LEASE_TTL: Duration = Duration::from_secs(768 * 3600);

/// Paths no `sys/mounts` call may mount at or under (Vault's `protectedMounts`).
const PROTECTED: &[&str] = &["sys/", "auth/", "identity/", "cubbyhole/", "audit/"];

/// One mounted backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MountEntry {
    /// The full path with a trailing slash: `secret/`, `auth/userpass/`.
    pub(crate) path: String,
    /// The backend type (`kv`, `userpass`, `system`, `token`, `identity`).
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) accessor: String,
    pub(crate) uuid: String,
    #[serde(default)]
    pub(crate) description: String,
    #[serde(default)]
    pub(crate) config: MountConfig,
    #[serde(default)]
    pub(crate) options: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) local: bool,
    #[serde(default)]
    pub(crate) seal_wrap: bool,
    #[serde(default)]
    pub(crate) external_entropy_access: bool,
}

/// A mount's tunable configuration. Zero TTLs mean "the system default".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct MountConfig {
    #[serde(with = "secs")]
    pub(crate) default_lease_ttl: Duration,
    #[serde(with = "secs")]
    pub(crate) max_lease_ttl: Duration,
    #[serde(default)]
    pub(crate) force_no_cache: bool,
}

mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

impl MountEntry {
    /// The default lease TTL in force: the mount's, else the system's.
    pub(crate) fn default_lease_ttl(&self) -> Duration {
        let ttl = if self.config.default_lease_ttl.is_zero() {
            SYSTEM_DEFAULT_LEASE_TTL
        } else {
            self.config.default_lease_ttl
        };
        ttl.min(self.max_lease_ttl())
    }

    /// The max lease TTL in force: the mount's, else the system's.
    pub(crate) fn max_lease_ttl(&self) -> Duration {
        if self.config.max_lease_ttl.is_zero() {
            SYSTEM_MAX_LEASE_TTL
        } else {
            self.config.max_lease_ttl
        }
    }

    /// Whether this entry lives in the auth table (`auth/...`).
    pub(crate) fn is_auth(&self) -> bool {
        self.path.starts_with("auth/")
    }

    /// The barrier prefix of this mount's own data.
    pub(crate) fn storage_prefix(&self) -> String {
        if self.is_auth() {
            format!("auth/{}/", self.uuid)
        } else {
            format!("logical/{}/", self.uuid)
        }
    }

    /// `sys/mounts`-style JSON of this entry.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "type": self.kind,
            "description": self.description,
            "accessor": self.accessor,
            "uuid": self.uuid,
            "config": {
                "default_lease_ttl": self.config.default_lease_ttl.as_secs(),
                "max_lease_ttl": self.config.max_lease_ttl.as_secs(),
                "force_no_cache": self.config.force_no_cache,
            },
            "options": if self.options.is_empty() && self.kind != "kv" {
                serde_json::Value::Null
            } else {
                serde_json::to_value(&self.options).unwrap_or_default()
            },
            "local": self.local,
            "seal_wrap": self.seal_wrap,
            "external_entropy_access": self.external_entropy_access,
        })
    }
}

/// What serves a mount.
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    /// `sys/`: `sys::handle`.
    System,
    /// `auth/token/`: `tokens::handle`.
    Token,
    /// `identity/`: `identity::handle`.
    Identity,
    /// A secrets engine or auth method from the registry.
    Engine(Arc<dyn Engine>),
}

#[derive(Debug, Clone)]
struct Mounted {
    /// Shared with every request routed to it (`route`), so routing clones no entry.
    entry: Arc<MountEntry>,
    backend: Backend,
}

/// The stored form of one table.
#[derive(Debug, Serialize, Deserialize)]
struct StoredTable {
    version: u32,
    entries: Vec<MountEntry>,
}

/// Both tables, in memory, behind one lock.
#[derive(Debug, Default)]
pub(crate) struct MountTable {
    table: RwLock<Arc<Vec<Mounted>>>,
    /// Serializes changes (enable, disable, tune, remount, load).
    change: tokio::sync::Mutex<()>,
    /// Remount migrations, for `sys/remount/status/:id`: id → (from, to).
    migrations: RwLock<HashMap<String, (String, String)>>,
}

impl MountTable {
    fn snapshot(&self) -> Arc<Vec<Mounted>> {
        self.table
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn swap(&self, mounted: Vec<Mounted>) {
        *self
            .table
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(mounted);
    }

    /// Loads both tables from the barrier (creating the built-ins on first start) and builds
    /// every backend. Called from `State::post_unseal`.
    pub(crate) async fn load(&self, state: &State) -> Result<(), Error> {
        let _guard = self.change.lock().await;
        let dev = state.config().dev_root_token.is_some();
        let (mut mounts, fresh_mounts) = read_table(state, MOUNTS_KEY).await?;
        let (mut auths, fresh_auth) = read_table(state, AUTH_KEY).await?;
        let mut changed_mounts = fresh_mounts;
        let mut changed_auth = fresh_auth;
        for (path, kind) in [("sys/", "system"), ("identity/", "identity")] {
            if !mounts.iter().any(|e| e.path == path) {
                mounts.push(new_entry(path, kind));
                changed_mounts = true;
            }
        }
        if !mounts.iter().any(|e| e.path == "cubbyhole/") {
            let mut entry = new_entry("cubbyhole/", "cubbyhole");
            entry.description = "per-token private secret storage".to_owned();
            entry.local = true;
            mounts.push(entry);
            changed_mounts = true;
        }
        if fresh_mounts && dev && !mounts.iter().any(|e| e.path == "secret/") {
            let mut entry = new_entry("secret/", "kv");
            entry.description = "key/value secret storage".to_owned();
            entry.options.insert("version".to_owned(), "2".to_owned());
            mounts.push(entry);
        }
        if !auths.iter().any(|e| e.path == "auth/token/") {
            let mut entry = new_entry("auth/token/", "token");
            entry.description = "token based credentials".to_owned();
            auths.push(entry);
            changed_auth = true;
        }
        if changed_mounts {
            write_table(state, MOUNTS_KEY, &mounts).await?;
        }
        if changed_auth {
            write_table(state, AUTH_KEY, &auths).await?;
        }
        let mut mounted = Vec::with_capacity(mounts.len() + auths.len());
        for entry in mounts.into_iter().chain(auths) {
            match build_backend(state, &entry) {
                Ok(backend) => mounted.push(Mounted {
                    entry: Arc::new(entry),
                    backend,
                }),
                Err(err) => {
                    tracing::error!(
                        message = "Mount could not be set up; it is skipped.",
                        path = %entry.path,
                        kind = %entry.kind,
                        error = %err
                    );
                }
            }
        }
        self.swap(mounted);
        Ok(())
    }

    /// Forgets every mount (on seal).
    pub(crate) fn clear(&self) {
        self.swap(Vec::new());
    }

    /// The mount serving `path` (longest prefix; `foo` also finds `foo/`), its backend and the
    /// path relative to the mount.
    pub(crate) fn route(&self, path: &str) -> Option<(Arc<MountEntry>, Backend, String)> {
        let table = self.snapshot();
        let find = |candidate: &str| {
            table
                .iter()
                .filter(|m| candidate.starts_with(m.entry.path.as_str()))
                .max_by_key(|m| m.entry.path.len())
        };
        let (found, full) = match find(path) {
            Some(found) => (found, path.to_owned()),
            None if !path.ends_with('/') => {
                let with_slash = format!("{path}/");
                (find(&with_slash)?, with_slash)
            }
            None => return None,
        };
        let relative = full[found.entry.path.len()..].to_owned();
        Some((Arc::clone(&found.entry), found.backend.clone(), relative))
    }

    /// Every entry (both tables), sorted by path.
    pub(crate) fn entries(&self) -> Vec<MountEntry> {
        let mut entries: Vec<MountEntry> = self
            .snapshot()
            .iter()
            .map(|m| MountEntry::clone(&m.entry))
            .collect();
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        entries
    }

    /// The entry mounted exactly at `path` (with a trailing slash).
    pub(crate) fn get(&self, path: &str) -> Option<MountEntry> {
        self.snapshot()
            .iter()
            .find(|m| m.entry.path == path)
            .map(|m| MountEntry::clone(&m.entry))
    }

    /// The entry with this uuid (leases and tokens may refer to mounts by uuid).
    pub(crate) fn by_uuid(&self, uuid: &str) -> Option<(MountEntry, Backend)> {
        self.snapshot()
            .iter()
            .find(|m| m.entry.uuid == uuid)
            .map(|m| (MountEntry::clone(&m.entry), m.backend.clone()))
    }

    /// Every mounted engine (secrets engines and auth methods from the registry), with its
    /// mount path: what the periodic loop calls.
    pub(crate) fn engines(&self) -> Vec<(String, Arc<dyn Engine>)> {
        self.snapshot()
            .iter()
            .filter_map(|m| match &m.backend {
                Backend::Engine(engine) => Some((m.entry.path.clone(), engine.clone())),
                _ => None,
            })
            .collect()
    }

    /// The entry with this accessor.
    pub(crate) fn by_accessor(&self, accessor: &str) -> Option<MountEntry> {
        self.snapshot()
            .iter()
            .find(|m| m.entry.accessor == accessor)
            .map(|m| MountEntry::clone(&m.entry))
    }

    /// Mounts a new backend. `entry.path` must be normalised (trailing slash) and, for auth
    /// methods, start with `auth/`. Checks the type, the reserved paths and conflicts.
    pub(crate) async fn mount(&self, state: &State, mut entry: MountEntry) -> Result<(), Error> {
        let _guard = self.change.lock().await;
        validate_path(&entry.path)?;
        let auth = entry.is_auth();
        if !auth {
            if let Some(reserved) = PROTECTED.iter().find(|p| entry.path.starts_with(**p)) {
                let _ = reserved;
                return Err(Error::Forbidden(format!("cannot mount {:?}", entry.path)));
            }
            if entry.kind == "cubbyhole" {
                return Err(Error::Forbidden(format!(
                    "mount type of {:?} is not mountable",
                    entry.kind
                )));
            }
        } else if entry.kind == "token" {
            return Err(Error::InvalidParameter(
                "token credential backend cannot be instantiated".to_owned(),
            ));
        }
        if !auth {
            kv_version_on_mount(&mut entry)?;
        }
        if !engines::is_known(&entry.kind, auth) {
            return Err(Error::InvalidParameter(format!(
                "unknown backend type: {:?}",
                entry.kind
            )));
        }
        let table = self.snapshot();
        if let Some(existing) = conflict(&table, &entry.path) {
            return Err(Error::Conflict(format!(
                "path is already in use at {existing}"
            )));
        }
        if entry.uuid.is_empty() {
            entry.uuid = uuid::Uuid::new_v4().to_string();
        }
        if entry.accessor.is_empty() {
            entry.accessor = new_accessor(&entry.kind, auth);
        }
        let backend = build_backend(state, &entry)?;
        let mut next: Vec<Mounted> = table.as_ref().clone();
        next.push(Mounted {
            entry: Arc::new(entry),
            backend,
        });
        persist(state, &next, Some(auth)).await?;
        self.swap(next);
        Ok(())
    }

    /// Unmounts `path`: revokes its leases, deletes its data, removes it from the table.
    /// A missing mount is not an error (Vault answers 204).
    pub(crate) async fn unmount(&self, state: &State, path: &str) -> Result<(), Error> {
        let _guard = self.change.lock().await;
        let table = self.snapshot();
        let Some(found) = table.iter().find(|m| m.entry.path == path) else {
            return Ok(());
        };
        if is_builtin(&found.entry) {
            return Err(Error::InvalidParameter(format!(
                "cannot unmount {:?}",
                found.entry.path
            )));
        }
        let entry = MountEntry::clone(&found.entry);
        state
            .leases()
            .revoke_prefix(state, &entry.path, true)
            .await?;
        let next: Vec<Mounted> = table
            .iter()
            .filter(|m| m.entry.path != entry.path)
            .cloned()
            .collect();
        persist(state, &next, Some(entry.is_auth())).await?;
        self.swap(next);
        let prefix = entry.storage_prefix();
        for (key, _) in state.barrier().scan(&prefix).await? {
            state.barrier().delete(&key).await?;
        }
        Ok(())
    }

    /// Changes a mount's tunables (`None`: unchanged). Rebuilds the backend when `options`
    /// change (so kv can refuse an unsupported version).
    pub(crate) async fn tune(&self, state: &State, path: &str, tune: Tune) -> Result<(), Error> {
        let _guard = self.change.lock().await;
        let table = self.snapshot();
        let Some(index) = table.iter().position(|m| m.entry.path == path) else {
            return Err(Error::InvalidParameter(format!(
                "cannot tune \"{path}\": no mount at this path"
            )));
        };
        let mut next: Vec<Mounted> = table.as_ref().clone();
        let mounted = &mut next[index];
        let mut entry = MountEntry::clone(&mounted.entry);
        if let Some(ttl) = tune.default_lease_ttl {
            entry.config.default_lease_ttl = ttl;
        }
        if let Some(ttl) = tune.max_lease_ttl {
            entry.config.max_lease_ttl = ttl;
        }
        if entry.default_lease_ttl_raw_exceeds_max() {
            return Err(Error::InvalidParameter(
                "default lease TTL cannot be larger than max lease TTL".to_owned(),
            ));
        }
        if let Some(description) = tune.description {
            entry.description = description;
        }
        let rebuild = tune.options.is_some();
        if let Some(version) = tune.options.as_ref().and_then(|o| o.get("version")) {
            check_version_tune(&entry, version)?;
        }
        if let Some(options) = tune.options {
            for (key, value) in options {
                entry.options.insert(key, value);
            }
        }
        if rebuild && matches!(mounted.backend, Backend::Engine(_)) {
            mounted.backend = build_backend(state, &entry)?;
        }
        let auth = entry.is_auth();
        mounted.entry = Arc::new(entry);
        persist(state, &next, Some(auth)).await?;
        self.swap(next);
        Ok(())
    }

    /// Moves a mount from `from` to `to` (both normalised). Leases under the old path are
    /// revoked (as Vault's remount does); the data stays where it is (keyed by uuid).
    /// Returns the migration id.
    pub(crate) async fn remount(
        &self,
        state: &State,
        from: &str,
        to: &str,
    ) -> Result<String, Error> {
        let _guard = self.change.lock().await;
        validate_path(to)?;
        let table = self.snapshot();
        let Some(index) = table.iter().position(|m| m.entry.path == from) else {
            return Err(Error::InvalidParameter(format!(
                "no matching mount at \"{from}\""
            )));
        };
        let entry = MountEntry::clone(&table[index].entry);
        if is_builtin(&entry) {
            return Err(Error::InvalidParameter(format!("cannot remount {from:?}")));
        }
        if entry.is_auth() != to.starts_with("auth/") {
            return Err(Error::InvalidParameter(format!(
                "cannot remount {from:?} to {to:?}: auth methods and secrets engines cannot be moved into each other"
            )));
        }
        if !entry.is_auth() && PROTECTED.iter().any(|p| to.starts_with(*p)) {
            return Err(Error::Forbidden(format!("cannot remount to {to:?}")));
        }
        let others: Vec<Mounted> = table
            .iter()
            .filter(|m| m.entry.path != from)
            .cloned()
            .collect();
        if let Some(existing) = conflict(&others, to) {
            return Err(Error::Conflict(format!(
                "path is already in use at {existing}"
            )));
        }
        state.leases().revoke_prefix(state, from, true).await?;
        let mut moved = entry.clone();
        moved.path = to.to_owned();
        let backend = build_backend(state, &moved)?;
        let mut next = others;
        next.push(Mounted {
            entry: Arc::new(moved),
            backend,
        });
        persist(state, &next, Some(entry.is_auth())).await?;
        self.swap(next);
        let id = uuid::Uuid::new_v4().to_string();
        self.migrations
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id.clone(), (from.to_owned(), to.to_owned()));
        Ok(id)
    }

    /// A finished remount, by migration id: (from, to).
    pub(crate) fn migration(&self, id: &str) -> Option<(String, String)> {
        self.migrations
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(id)
            .cloned()
    }
}

impl MountEntry {
    fn default_lease_ttl_raw_exceeds_max(&self) -> bool {
        !self.config.default_lease_ttl.is_zero()
            && self.config.default_lease_ttl > self.max_lease_ttl()
    }
}

/// Tunable fields; `None` leaves a field as it is.
#[derive(Debug, Default)]
pub(crate) struct Tune {
    pub(crate) default_lease_ttl: Option<Duration>,
    pub(crate) max_lease_ttl: Option<Duration>,
    pub(crate) description: Option<String>,
    pub(crate) options: Option<BTreeMap<String, String>>,
}

/// Vault's kv aliases on mount: `kv-v1`/`kv-v2` are `kv` with `options.version` 1/2; any other
/// secrets engine refuses a `version` option.
fn kv_version_on_mount(entry: &mut MountEntry) -> Result<(), Error> {
    let version = match entry.kind.as_str() {
        "kv" => return Ok(()),
        "kv-v1" => "1",
        "kv-v2" => "2",
        kind => {
            if entry.options.get("version").is_some_and(|v| !v.is_empty()) {
                return Err(Error::InvalidParameter(format!(
                    "secrets engine {kind:?} does not allow setting a version"
                )));
            }
            return Ok(());
        }
    };
    entry.kind = "kv".to_owned();
    entry
        .options
        .insert("version".to_owned(), version.to_owned());
    Ok(())
}

/// Vault's rule for `options.version` on tune: 1 or 2, never lower than the mount's (a missing
/// or empty version counts as 0).
fn check_version_tune(entry: &MountEntry, requested: &str) -> Result<(), Error> {
    let parse = |raw: &str| -> Result<i64, std::num::ParseIntError> {
        let raw = raw.trim();
        if raw.is_empty() { Ok(0) } else { raw.parse() }
    };
    let current = entry
        .options
        .get("version")
        .map_or(Ok(0), |raw| parse(raw))
        .map_err(|err| Error::InvalidParameter(format!("unable to parse mount entry: {err}")))?;
    let requested = parse(requested)
        .map_err(|err| Error::InvalidParameter(format!("unable to parse options: {err}")))?;
    if !matches!(requested, 1 | 2) {
        return Err(Error::InvalidParameter(format!(
            "invalid version provided: {requested}"
        )));
    }
    if current > requested {
        return Err(Error::InvalidParameter(format!(
            "cannot downgrade mount from version {current}"
        )));
    }
    Ok(())
}

/// A fresh entry (new uuid and accessor) for `path` of type `kind`.
pub(crate) fn new_entry(path: &str, kind: &str) -> MountEntry {
    let auth = path.starts_with("auth/");
    MountEntry {
        path: path.to_owned(),
        kind: kind.to_owned(),
        accessor: new_accessor(kind, auth),
        uuid: uuid::Uuid::new_v4().to_string(),
        description: String::new(),
        config: MountConfig::default(),
        options: BTreeMap::new(),
        local: false,
        seal_wrap: false,
        external_entropy_access: false,
    }
}

/// Normalises a user-given mount path: no leading slash, one trailing slash.
pub(crate) fn normalise(path: &str) -> String {
    let trimmed = path.trim().trim_start_matches('/');
    let mut out = trimmed.trim_end_matches('/').to_owned();
    out.push('/');
    out
}

fn validate_path(path: &str) -> Result<(), Error> {
    if path == "/" || path.is_empty() {
        return Err(Error::InvalidParameter("path cannot be empty".to_owned()));
    }
    if path == "auth/" {
        return Err(Error::InvalidParameter(
            "auth path cannot be empty".to_owned(),
        ));
    }
    if path.contains("..") || path.contains("//") || path.contains('*') || path.contains('+') {
        return Err(Error::InvalidParameter(format!(
            "invalid mount path {path:?}"
        )));
    }
    Ok(())
}

fn is_builtin(entry: &MountEntry) -> bool {
    matches!(
        entry.kind.as_str(),
        "system" | "identity" | "token" | "cubbyhole"
    )
}

/// The existing mount that `path` would overlap (same, inside, or around), if any.
fn conflict(table: &[Mounted], path: &str) -> Option<String> {
    table
        .iter()
        .find(|m| path.starts_with(m.entry.path.as_str()) || m.entry.path.starts_with(path))
        .map(|m| m.entry.path.clone())
}

fn new_accessor(kind: &str, auth: bool) -> String {
    let short = &uuid::Uuid::new_v4().simple().to_string()[..8];
    if auth {
        format!("auth_{kind}_{short}")
    } else {
        format!("{kind}_{short}")
    }
}

fn build_backend(state: &State, entry: &MountEntry) -> Result<Backend, Error> {
    match entry.kind.as_str() {
        "system" => Ok(Backend::System),
        "identity" => Ok(Backend::Identity),
        "token" => Ok(Backend::Token),
        kind => {
            let factory = engines::registry().get(kind).copied().ok_or_else(|| {
                Error::InvalidParameter(format!("unknown backend type: {kind:?}"))
            })?;
            let engine = factory(EngineConfig {
                mount_point: entry.path.clone(),
                storage: state.barrier().view(entry.storage_prefix()),
                options: entry.options.clone(),
                clock: state.clock().clone(),
                passwords: secrets_sdk::Passwords::new(Arc::new(
                    crate::sys::password_policies::Source::new(state.barrier().clone()),
                )),
            })
            .map_err(|err| match err {
                EngineError::BadRequest(msg) | EngineError::Conflict(msg) => {
                    Error::InvalidParameter(msg)
                }
                other => Error::Engine(other),
            })?;
            Ok(Backend::Engine(engine))
        }
    }
}

async fn read_table(state: &State, key: &str) -> Result<(Vec<MountEntry>, bool), Error> {
    match state.barrier().get(key).await? {
        None => Ok((Vec::new(), true)),
        Some(bytes) => {
            let stored: StoredTable =
                serde_json::from_slice(&bytes).map_err(|err| Error::CorruptRecord {
                    key: key.to_owned(),
                    reason: err.to_string(),
                })?;
            Ok((stored.entries, false))
        }
    }
}

async fn write_table(state: &State, key: &str, entries: &[MountEntry]) -> Result<(), Error> {
    let stored = StoredTable {
        version: 1,
        entries: entries.to_vec(),
    };
    let bytes = serde_json::to_vec(&stored).map_err(|err| Error::CorruptRecord {
        key: key.to_owned(),
        reason: err.to_string(),
    })?;
    state.barrier().put(key, &bytes).await
}

/// Writes the table(s) `next` touches: `Some(true)` the auth table, `Some(false)` the mounts
/// table, `None` both.
async fn persist(state: &State, next: &[Mounted], which: Option<bool>) -> Result<(), Error> {
    let (auths, mounts): (Vec<MountEntry>, Vec<MountEntry>) = next
        .iter()
        .map(|m| MountEntry::clone(&m.entry))
        .partition(MountEntry::is_auth);
    if which != Some(true) {
        write_table(state, MOUNTS_KEY, &mounts).await?;
    }
    if which != Some(false) {
        write_table(state, AUTH_KEY, &auths).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_adds_one_trailing_slash() {
        assert_eq!(normalise("secret"), "secret/");
        assert_eq!(normalise("/a/b//"), "a/b/");
    }

    #[test]
    fn conflicts_are_prefixes_either_way() {
        let table = vec![Mounted {
            entry: Arc::new(new_entry("secret/", "kv")),
            backend: Backend::System,
        }];
        assert_eq!(conflict(&table, "secret/"), Some("secret/".to_owned()));
        assert_eq!(conflict(&table, "secret/a/"), Some("secret/".to_owned()));
        assert_eq!(conflict(&table, "sec/"), None);
        let table = vec![Mounted {
            entry: Arc::new(new_entry("a/b/", "kv")),
            backend: Backend::System,
        }];
        assert_eq!(conflict(&table, "a/"), Some("a/b/".to_owned()));
    }

    #[test]
    fn kv_aliases_set_the_version_and_other_engines_refuse_one() {
        let mut entry = new_entry("a/", "kv-v2");
        kv_version_on_mount(&mut entry).unwrap();
        assert_eq!(
            (entry.kind.as_str(), entry.options["version"].as_str()),
            ("kv", "2")
        );
        let mut entry = new_entry("a/", "kv-v1");
        kv_version_on_mount(&mut entry).unwrap();
        assert_eq!(
            (entry.kind.as_str(), entry.options["version"].as_str()),
            ("kv", "1")
        );
        let mut entry = new_entry("a/", "other");
        entry.options.insert("version".to_owned(), "2".to_owned());
        assert!(kv_version_on_mount(&mut entry).is_err());
    }

    #[test]
    fn version_tunes_go_up_to_2_and_never_down() {
        let mut entry = new_entry("a/", "kv");
        assert!(check_version_tune(&entry, "2").is_ok());
        assert!(check_version_tune(&entry, "1").is_ok());
        assert!(check_version_tune(&entry, "3").is_err());
        assert!(check_version_tune(&entry, "two").is_err());
        entry.options.insert("version".to_owned(), "2".to_owned());
        assert_eq!(
            check_version_tune(&entry, "1").unwrap_err().to_string(),
            "cannot downgrade mount from version 2"
        );
        assert!(check_version_tune(&entry, "2").is_ok());
    }

    #[test]
    fn effective_ttls_fall_back_to_the_system_defaults() {
        let mut entry = new_entry("x/", "kv");
        assert_eq!(entry.default_lease_ttl(), SYSTEM_DEFAULT_LEASE_TTL);
        assert_eq!(entry.max_lease_ttl(), SYSTEM_MAX_LEASE_TTL);
        entry.config.max_lease_ttl = Duration::from_secs(60);
        assert_eq!(entry.default_lease_ttl(), Duration::from_secs(60));
    }
}
