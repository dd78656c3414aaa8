//! ACL policies: the store of named policies and the ACLs built from them.
//!
//! - `parse.rs`: HCL/JSON policy documents → [`parse::Policy`] (pure).
//! - `acl.rs`: [`Acl`], Vault's matching, priority, merging and parameter rules (pure).
//! - this file: [`PolicyStore`], named policies persisted through the barrier and cached.
//!
//! Storage keys (through the barrier):
//! - `sys/policy/<name>`: an ACL policy, [`PolicyRecord`] as JSON;
//! - `sys/policy-rgp/<name>`, `sys/policy-egp/<name>`: role and endpoint governing policies,
//!   [`GoverningRecord`] as JSON (stored and validated, never evaluated).
//!
//! Invariants:
//! - `root` is never stored, cannot be written or deleted, and short-circuits every check;
//! - `response-wrapping` (what a wrapping token holds: create and read on `cubbyhole/response`,
//!   update on `sys/wrapping/unwrap`) is never stored, listed, written or deleted; its ACL is
//!   built from [`RESPONSE_WRAPPING_POLICY_TEXT`], and no other token can be given it;
//! - `default` always exists after [`PolicyStore::load`] (created with Vault's text when
//!   missing), may be edited, cannot be deleted;
//! - names are lower-case; the cache holds every stored ACL policy, parsed, while unsealed and
//!   nothing after [`PolicyStore::clear`];
//! - a name on a token that no longer exists acts as an empty policy.

pub(crate) mod acl;
pub(crate) mod names;
pub(crate) mod parse;

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use serde::{Deserialize, Serialize};

pub(crate) use acl::{Acl, TemplateIdentity};
pub(crate) use names::RESPONSE_WRAPPING_POLICY;

use crate::{Error, State};

/// Key prefix of ACL policies.
pub(crate) const ACL_PREFIX: &str = "sys/policy/";
/// Key prefix of role governing policies.
pub(crate) const RGP_PREFIX: &str = "sys/policy-rgp/";
/// Key prefix of endpoint governing policies.
pub(crate) const EGP_PREFIX: &str = "sys/policy-egp/";

/// Vault's `response-wrapping` policy: what a wrapping token may do.
pub(crate) const RESPONSE_WRAPPING_POLICY_TEXT: &str = r#"
path "cubbyhole/response" {
    capabilities = ["create", "read"]
}

path "sys/wrapping/unwrap" {
    capabilities = ["update"]
}
"#;

/// Vault's `default` policy.
pub(crate) const DEFAULT_POLICY: &str = r#"
# Allow tokens to look up their own properties
path "auth/token/lookup-self" {
    capabilities = ["read"]
}

# Allow tokens to renew themselves
path "auth/token/renew-self" {
    capabilities = ["update"]
}

# Allow tokens to revoke themselves
path "auth/token/revoke-self" {
    capabilities = ["update"]
}

# Allow a token to look up its own capabilities on a path
path "sys/capabilities-self" {
    capabilities = ["update"]
}

# Allow a token to look up its own entity by id or name
path "identity/entity/id/{{identity.entity.id}}" {
  capabilities = ["read"]
}
path "identity/entity/name/{{identity.entity.name}}" {
  capabilities = ["read"]
}

# Allow a token to look up its resultant ACL from all policies. This is useful
# for UIs. It is an internal path because the format may change at any time
# based on how the internal ACL features and capabilities change.
path "sys/internal/ui/resultant-acl" {
    capabilities = ["read"]
}

# Allow a token to renew a lease via lease_id in the request body; old path for
# old clients, new path for newer
path "sys/renew" {
    capabilities = ["update"]
}
path "sys/leases/renew" {
    capabilities = ["update"]
}

# Allow looking up lease properties. This requires knowing the lease ID ahead
# of time and does not divulge any sensitive information.
path "sys/leases/lookup" {
    capabilities = ["update"]
}

# Allow a token to manage its own cubbyhole
path "cubbyhole/*" {
    capabilities = ["create", "read", "update", "delete", "list"]
}

# Allow a token to wrap arbitrary values in a response-wrapping token
path "sys/wrapping/wrap" {
    capabilities = ["update"]
}

# Allow a token to look up the creation time and TTL of a given
# response-wrapping token
path "sys/wrapping/lookup" {
    capabilities = ["update"]
}

# Allow a token to unwrap a response-wrapping token. This is a convenience to
# avoid client token swapping since this is also part of the response wrapping
# policy.
path "sys/wrapping/unwrap" {
    capabilities = ["update"]
}

# Allow general purpose tools
path "sys/tools/hash" {
    capabilities = ["update"]
}
path "sys/tools/hash/*" {
    capabilities = ["update"]
}

# Allow checking the status of a control group request if the user has the
# accessor
path "sys/control-group/request" {
    capabilities = ["update"]
}

# Allow a token to make requests to the Authorization Endpoint for OIDC providers.
path "identity/oidc/provider/+/authorize" {
    capabilities = ["read", "update"]
}
"#;

/// A stored ACL policy.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PolicyRecord {
    pub(crate) version: u32,
    pub(crate) name: String,
    /// The document as written (after base64 decoding).
    pub(crate) raw: String,
    /// Bumped on every write (Vault's `DataVersion`).
    pub(crate) data_version: u64,
    /// Unix milliseconds of the last write.
    pub(crate) modified_ms: u64,
}

/// A stored RGP or EGP.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct GoverningRecord {
    pub(crate) version: u32,
    pub(crate) name: String,
    pub(crate) policy: String,
    pub(crate) enforcement_level: String,
    /// EGP only: the paths as given (a trailing `*` is a glob).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) paths: Vec<String>,
}

#[derive(Debug)]
struct Cached {
    record: PolicyRecord,
    parsed: parse::Policy,
}

#[derive(Debug, Default)]
struct Cache {
    policies: HashMap<String, Arc<Cached>>,
    /// ACLs by sorted, de-duplicated policy names (plus the identity when templated).
    acls: HashMap<(Vec<String>, Option<TemplateIdentity>), Acl>,
    /// Bumped by every change to `policies`.
    generation: u64,
}

/// Named ACL policies, persisted through the barrier and cached in memory.
#[derive(Debug, Default)]
pub(crate) struct PolicyStore {
    cache: RwLock<Cache>,
    /// Serialises writers (cache and storage stay in step).
    write: tokio::sync::Mutex<()>,
}

/// Bound on cached ACLs; past it the ACL cache is simply dropped and refilled.
const ACL_CACHE_LIMIT: usize = 4096;

impl PolicyStore {
    /// Loads every stored ACL policy into the cache, creating `default` when missing. Called
    /// after unseal.
    pub(crate) async fn load(&self, state: &State) -> Result<(), Error> {
        let _guard = self.write.lock().await;
        let mut policies = HashMap::new();
        for (key, bytes) in state.barrier().scan(ACL_PREFIX).await? {
            let record: PolicyRecord = match serde_json::from_slice(&bytes) {
                Ok(record) => record,
                Err(err) => {
                    tracing::warn!(key, error = %err, "skipping an unreadable policy record");
                    continue;
                }
            };
            match parse::parse(&record.raw) {
                Ok(parsed) => {
                    policies.insert(record.name.clone(), Arc::new(Cached { record, parsed }));
                }
                Err(err) => tracing::warn!(key, error = %err, "skipping an unparsable policy"),
            }
        }
        if !policies.contains_key("default") {
            let record = PolicyRecord {
                version: 1,
                name: "default".to_owned(),
                raw: DEFAULT_POLICY.to_owned(),
                data_version: 1,
                modified_ms: u64::try_from(state.now_ms()).unwrap_or(0),
            };
            put_record(state, &record).await?;
            let parsed = parse::parse(DEFAULT_POLICY).map_err(Error::InvalidParameter)?;
            policies.insert(record.name.clone(), Arc::new(Cached { record, parsed }));
        }
        let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
        cache.policies = policies;
        cache.acls.clear();
        cache.generation += 1;
        Ok(())
    }

    /// Drops everything cached (at seal).
    pub(crate) fn clear(&self) {
        let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
        *cache = Cache {
            generation: cache.generation + 1,
            ..Cache::default()
        };
    }

    /// The ACL for a token's policies. `root` among them gives the root ACL; unknown names
    /// count as empty policies; templated paths (`{{identity.entity.id}}`) are skipped (use
    /// [`PolicyStore::acl_for_identity`] to resolve them).
    pub(crate) async fn acl(&self, state: &State, policies: &[String]) -> Result<Acl, Error> {
        self.acl_for_identity(state, policies, None).await
    }

    /// [`PolicyStore::acl`], resolving templated paths against the token's entity.
    pub(crate) async fn acl_for_identity(
        &self,
        _state: &State,
        policies: &[String],
        identity: Option<&TemplateIdentity>,
    ) -> Result<Acl, Error> {
        Ok(self.acl_cached(policies, identity))
    }

    /// The generation of the policies in memory: moved by every change to them.
    fn generation(&self) -> u64 {
        self.cache
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .generation
    }

    fn acl_cached(&self, policies: &[String], identity: Option<&TemplateIdentity>) -> Acl {
        if policies.iter().any(|p| p == "root") {
            return Acl::root();
        }
        if let [only] = policies
            && only == RESPONSE_WRAPPING_POLICY
        {
            return response_wrapping_acl();
        }
        let mut names: Vec<String> = policies.to_vec();
        names.sort();
        names.dedup();
        let cache = self.cache.read().unwrap_or_else(PoisonError::into_inner);
        let templated = names
            .iter()
            .any(|n| cache.policies.get(n).is_some_and(|c| c.parsed.templated));
        let key = (names, identity.filter(|_| templated).cloned());
        if let Some(acl) = cache.acls.get(&key) {
            return acl.clone();
        }
        let generation = cache.generation;
        let parsed: Vec<Arc<Cached>> = key
            .0
            .iter()
            .filter_map(|n| cache.policies.get(n).cloned())
            .collect();
        drop(cache);
        let acl = Acl::new(parsed.iter().map(|c| &c.parsed), key.1.as_ref());
        let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
        // A write since the read above may have changed a policy: don't cache a stale ACL.
        if cache.generation == generation {
            if cache.acls.len() >= ACL_CACHE_LIMIT {
                cache.acls.clear();
            }
            cache.acls.insert(key, acl.clone());
        }
        acl
    }

    /// A stored ACL policy by (lower-cased) name; `None` for `root` and missing names.
    pub(crate) fn get(&self, name: &str) -> Option<PolicyRecord> {
        let cache = self.cache.read().unwrap_or_else(PoisonError::into_inner);
        cache.policies.get(name).map(|c| c.record.clone())
    }

    /// Every stored ACL policy name, sorted (without `root`).
    pub(crate) fn names(&self) -> Vec<String> {
        let cache = self.cache.read().unwrap_or_else(PoisonError::into_inner);
        let mut names: Vec<String> = cache.policies.keys().cloned().collect();
        names.sort();
        names
    }

    /// Creates or replaces an ACL policy. `raw` is already base64-decoded; a parse error is
    /// a 400 with Vault's `failed to parse policy: ...` message.
    pub(crate) async fn set(&self, state: &State, name: &str, raw: &str) -> Result<(), Error> {
        if name == "root" || name == RESPONSE_WRAPPING_POLICY {
            return Err(Error::InvalidParameter(format!(
                "cannot update {name:?} policy"
            )));
        }
        let parsed = parse::parse(raw).map_err(Error::InvalidParameter)?;
        let _guard = self.write.lock().await;
        let data_version = self.get(name).map_or(0, |r| r.data_version) + 1;
        let record = PolicyRecord {
            version: 1,
            name: name.to_owned(),
            raw: raw.to_owned(),
            data_version,
            modified_ms: u64::try_from(state.now_ms()).unwrap_or(0),
        };
        put_record(state, &record).await?;
        let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
        cache
            .policies
            .insert(name.to_owned(), Arc::new(Cached { record, parsed }));
        cache.acls.clear();
        cache.generation += 1;
        Ok(())
    }

    /// Deletes an ACL policy (a missing one is fine). `root` and `default` cannot be deleted.
    pub(crate) async fn delete(&self, state: &State, name: &str) -> Result<(), Error> {
        match name {
            "root" | RESPONSE_WRAPPING_POLICY => {
                return Err(Error::InvalidParameter(format!(
                    "cannot delete {name:?} policy"
                )));
            }
            "default" => {
                return Err(Error::InvalidParameter(
                    "cannot delete default policy".to_owned(),
                ));
            }
            _ => {}
        }
        let _guard = self.write.lock().await;
        state
            .barrier()
            .delete(&format!("{ACL_PREFIX}{name}"))
            .await?;
        let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
        cache.policies.remove(name);
        cache.acls.clear();
        cache.generation += 1;
        Ok(())
    }
}

/// The two kinds of governing policies (stored and validated only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Governing {
    Rgp,
    Egp,
}

impl Governing {
    fn prefix(self) -> &'static str {
        match self {
            Governing::Rgp => RGP_PREFIX,
            Governing::Egp => EGP_PREFIX,
        }
    }
}

impl PolicyStore {
    /// A stored RGP or EGP.
    pub(crate) async fn get_governing(
        &self,
        state: &State,
        kind: Governing,
        name: &str,
    ) -> Result<Option<GoverningRecord>, Error> {
        let key = format!("{}{name}", kind.prefix());
        match state.barrier().get(&key).await? {
            None => Ok(None),
            Some(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|err| Error::CorruptRecord {
                        key,
                        reason: err.to_string(),
                    })
            }
        }
    }

    /// Every stored RGP or EGP, by name.
    pub(crate) async fn list_governing(
        &self,
        state: &State,
        kind: Governing,
    ) -> Result<Vec<GoverningRecord>, Error> {
        let mut out = Vec::new();
        for (key, bytes) in state.barrier().scan(kind.prefix()).await? {
            match serde_json::from_slice::<GoverningRecord>(&bytes) {
                Ok(record) => out.push(record),
                Err(err) => tracing::warn!(key, error = %err, "skipping an unreadable policy"),
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    pub(crate) async fn set_governing(
        &self,
        state: &State,
        kind: Governing,
        record: &GoverningRecord,
    ) -> Result<(), Error> {
        let key = format!("{}{}", kind.prefix(), record.name);
        let bytes = serde_json::to_vec(record).map_err(|err| Error::CorruptRecord {
            key: key.clone(),
            reason: err.to_string(),
        })?;
        let _guard = self.write.lock().await;
        state.barrier().put(&key, &bytes).await
    }

    pub(crate) async fn delete_governing(
        &self,
        state: &State,
        kind: Governing,
        name: &str,
    ) -> Result<(), Error> {
        let _guard = self.write.lock().await;
        state
            .barrier()
            .delete(&format!("{}{name}", kind.prefix()))
            .await
    }

    /// The ACL for a token: its own policies plus its entity's, with templated paths resolved
    /// against the entity (Vault's `fetchEntityAndDerivedPolicies`). A token bound to a
    /// disabled or missing entity gets an empty ACL (Vault denies such tokens).
    pub(crate) async fn acl_for_token(
        &self,
        state: &State,
        token: &crate::tokens::TokenEntry,
    ) -> Result<Acl, Error> {
        let Some(entity_id) = token.entity_id.as_deref().filter(|id| !id.is_empty()) else {
            // Read before building: the memo is never newer than the ACL it keeps.
            let generation = self.generation();
            if let Some(acl) = token.acl_memo.get(generation) {
                return Ok(acl);
            }
            let acl = self.acl(state, &token.policies).await?;
            token.acl_memo.set(generation, &acl);
            return Ok(acl);
        };
        let entity = read_entity(state, entity_id).await?;
        let Some(entity) = entity.filter(|e| !e.disabled) else {
            return Ok(Acl::new(std::iter::empty(), None));
        };
        let mut names = token.policies.clone();
        names.extend(entity.policies);
        let identity = TemplateIdentity {
            entity_id: entity.id,
            entity_name: entity.name,
        };
        self.acl_for_identity(state, &names, Some(&identity)).await
    }
}

/// The fields of an identity entity an ACL needs (read-only view of identity.rs's record at
/// `identity/entity/<id>`).
#[derive(Debug, Deserialize)]
struct EntityView {
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    policies: Vec<String>,
    #[serde(default)]
    disabled: bool,
}

async fn read_entity(state: &State, id: &str) -> Result<Option<EntityView>, Error> {
    let key = format!("identity/entity/{id}");
    match state.barrier().get(&key).await? {
        None => Ok(None),
        Some(bytes) => {
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|err| Error::CorruptRecord {
                    key,
                    reason: err.to_string(),
                })
        }
    }
}

async fn put_record(state: &State, record: &PolicyRecord) -> Result<(), Error> {
    let key = format!("{ACL_PREFIX}{}", record.name);
    let bytes = serde_json::to_vec(record).map_err(|err| Error::CorruptRecord {
        key: key.clone(),
        reason: err.to_string(),
    })?;
    state.barrier().put(&key, &bytes).await
}

/// The ACL of a response-wrapping token, built once.
fn response_wrapping_acl() -> Acl {
    static ACL: std::sync::OnceLock<Acl> = std::sync::OnceLock::new();
    ACL.get_or_init(|| match parse::parse(RESPONSE_WRAPPING_POLICY_TEXT) {
        Ok(policy) => Acl::new([&policy], None),
        // The text is a constant that a unit test parses; should it ever fail, deny all.
        Err(_) => Acl::new(std::iter::empty(), None),
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn default_policy_text_parses() {
        let parsed = parse::parse(DEFAULT_POLICY).unwrap();
        assert!(parsed.templated);
        let acl = Acl::new([&parsed], None);
        let empty = secrets_sdk::Data::new();
        assert!(acl.allows(
            "auth/token/lookup-self",
            secrets_sdk::Operation::Read,
            &empty,
            false
        ));
        assert!(acl.allows(
            "sys/capabilities-self",
            secrets_sdk::Operation::Update,
            &empty,
            false
        ));
        assert!(!acl.allows("secret/x", secrets_sdk::Operation::Read, &empty, false));
    }

    #[test]
    fn response_wrapping_acl_allows_only_the_unwrap_paths() {
        parse::parse(RESPONSE_WRAPPING_POLICY_TEXT).unwrap();
        let store = PolicyStore::default();
        let acl = store.acl_cached(&list(&[RESPONSE_WRAPPING_POLICY]), None);
        let empty = secrets_sdk::Data::new();
        use secrets_sdk::Operation::{Create, Read, Update};
        for (path, op, allowed) in [
            ("sys/wrapping/unwrap", Update, true),
            ("cubbyhole/response", Read, true),
            ("cubbyhole/response", Create, true),
            ("cubbyhole/other", Read, false),
            ("sys/wrapping/rewrap", Update, false),
            ("auth/token/lookup-self", Read, false),
            ("secret/x", Read, false),
        ] {
            assert_eq!(
                acl.allows(path, op, &empty, false),
                allowed,
                "{path} {op:?}"
            );
        }
    }

    #[test]
    fn acl_cache_collapses_root_and_unknown_names() {
        let store = PolicyStore::default();
        assert!(store.acl_cached(&list(&["dev", "root"]), None).is_root());
        let acl = store.acl_cached(&list(&["missing"]), None);
        assert!(!acl.is_root());
        assert_eq!(acl.capabilities("secret/x"), vec!["deny"]);
    }
}
