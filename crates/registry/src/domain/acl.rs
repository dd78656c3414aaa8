//! The ACL family's transactions: policy and token writes, the built-in policy and tokens
//! ensured at start, and the one-time bootstrap of the first management token.
//!
//! Where it sits: called by the `/v1/acl/*` handlers (`acl/policy.rs`, `acl/token.rs`,
//! `acl/bootstrap.rs`) and by `State::open` (the built-ins); reads and writes the records of
//! `store/acl.rs`; compiles rules with `acl_rules.rs`.
//!
//! Invariants:
//! - Every transaction that changes a policy rewrites the tokens linked to it; it compares
//!   `tokens-changed` (which every token write puts) and every policy it read, so a concurrent
//!   token write or policy change makes it retry rather than leave a token with stale rules. A
//!   token write compares the policies it links for the same reason.
//! - The ACL system is bootstrapped at most once: the `bootstrapped` sentinel is written, guarded
//!   by `Missing`, in the same transaction as the first management token (the bootstrap API's,
//!   or the configured initial management token), so of concurrent bootstraps exactly one wins.
//! - Every loop of compare-and-swap gives up with [`Error::Contention`] after
//!   [`MAX_ATTEMPTS`].

use std::collections::HashMap;

use stdx::time::format_rfc3339_millis;
use storage::{Compare, Op, Storage, Txn};

use crate::acl_rules::{self as rules, Rule};
use crate::domain::MAX_ATTEMPTS;
use crate::store::acl::{
    BOOTSTRAPPED, BootstrapRecord, NameRecord, PolicyLink, PolicyRecord, RECORD_VERSION,
    SecretRecord, TOKENS_CHANGED, TokenRecord, get_kv, policy_key, policy_name_key, secret_key,
    token, token_key, tokens_range,
};
use crate::store::{Stored, decode, encode};
use crate::{Error, State};

/// The built-in policy that makes a token a management token.
pub(crate) const GLOBAL_MANAGEMENT_ID: &str = "00000000-0000-0000-0000-000000000001";
pub(crate) const GLOBAL_MANAGEMENT_NAME: &str = "global-management";
/// Consul's rules text of `global-management` (only the `_prefix` rules grant anything here).
pub(crate) const GLOBAL_MANAGEMENT_RULES: &str = r#"
acl = "write"
agent_prefix "" {
  policy = "write"
}
event_prefix "" {
  policy = "write"
}
key_prefix "" {
  policy = "write"
}
keyring = "write"
node_prefix "" {
  policy = "write"
}
operator = "write"
mesh = "write"
peering = "write"
query_prefix "" {
  policy = "write"
}
service_prefix "" {
  policy = "write"
  intentions = "write"
}
session_prefix "" {
  policy = "write"
}
"#;

/// The token used by requests that present none.
pub(crate) const ANONYMOUS_ACCESSOR_ID: &str = "00000000-0000-0000-0000-000000000002";
pub(crate) const ANONYMOUS_SECRET: &str = "anonymous";

/// The description Consul gives the token created from `initial_management`.
const INITIAL_MANAGEMENT_DESCRIPTION: &str = "Initial Management Token";
/// The description Consul gives the token created by `PUT /v1/acl/bootstrap`.
const BOOTSTRAP_DESCRIPTION: &str = "Bootstrap Token (Global Management)";
const ANONYMOUS_DESCRIPTION: &str = "Anonymous Token";
const GLOBAL_MANAGEMENT_DESCRIPTION: &str = "Builtin Policy that grants unlimited access";

/// A policy as a create or update asks for it (validated by the caller).
#[derive(Debug, Clone)]
pub(crate) struct PolicyWrite {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) rules: String,
    pub(crate) datacenters: Vec<String>,
}

/// A policy reference in a token write: by ID, else by Name.
#[derive(Debug, Clone, Default)]
pub(crate) struct LinkRequest {
    pub(crate) id: String,
    pub(crate) name: String,
}

/// A token as a create or update asks for it.
#[derive(Debug, Clone, Default)]
pub(crate) struct TokenWrite {
    pub(crate) accessor_id: Option<String>,
    pub(crate) secret_id: Option<String>,
    pub(crate) description: String,
    pub(crate) policies: Vec<LinkRequest>,
    pub(crate) local: bool,
    pub(crate) namespace: Option<String>,
}

/// A policy record for `write`, with its content hash.
fn policy_record(id: String, write: PolicyWrite) -> PolicyRecord {
    let hash = content_hash(&[
        &write.name,
        &write.description,
        &write.rules,
        &write.datacenters.join(","),
    ]);
    PolicyRecord {
        version: RECORD_VERSION,
        id,
        name: write.name,
        description: write.description,
        rules: write.rules,
        datacenters: write.datacenters,
        hash,
    }
}

// ---------------------------------------------------------------------------------------------
// Policy writes

/// Creates a policy with a new ID.
pub(crate) async fn create_policy(
    storage: &dyn Storage,
    write: PolicyWrite,
) -> Result<Stored<PolicyRecord>, Error> {
    let id = new_uuid();
    for _ in 0..MAX_ATTEMPTS {
        let name_key = policy_name_key(&write.name);
        if get_kv(storage, &name_key).await?.is_some() {
            return Err(name_in_use(&write.name));
        }
        let record = policy_record(id.clone(), write.clone());
        let key = policy_key(&id);
        let txn = Txn::new()
            .when(Compare::Missing(key.clone()))
            .when(Compare::Missing(name_key.clone()))
            .then(put(key.clone(), encode(&key, &record)?))
            .then(put(name_key.clone(), name_index(&name_key, &id)?));
        let result = storage.txn(txn).await?;
        if result.succeeded {
            return Ok(Stored {
                record,
                create_index: result.revision,
                modify_index: result.revision,
            });
        }
    }
    Err(Error::Contention)
}

/// Replaces policy `id` and rewrites the tokens linked to it.
pub(crate) async fn update_policy(
    storage: &dyn Storage,
    datacenter: &str,
    id: &str,
    write: PolicyWrite,
) -> Result<Stored<PolicyRecord>, Error> {
    let key = policy_key(id);
    for _ in 0..MAX_ATTEMPTS {
        let Some(kv) = get_kv(storage, &key).await? else {
            return Err(Error::Invalid(format!("Cannot find policy {id}")));
        };
        let existing: PolicyRecord = decode(&kv.key, &kv.value)?;
        if id == GLOBAL_MANAGEMENT_ID {
            if write.rules != existing.rules {
                return Err(Error::Invalid(
                    "Changing the Rules for the builtin global-management policy is not permitted"
                        .to_owned(),
                ));
            }
            if write.datacenters != existing.datacenters {
                return Err(Error::Invalid(
                    "Changing the Datacenters of the builtin global-management policy is not \
                     permitted"
                        .to_owned(),
                ));
            }
        }
        let record = policy_record(id.to_owned(), write.clone());
        let mut txn = Txn::new()
            .when(Compare::ModRevision(key.clone(), kv.mod_revision))
            .then(put(key.clone(), encode(&key, &record)?));
        let old_name_key = policy_name_key(&existing.name);
        let new_name_key = policy_name_key(&record.name);
        if old_name_key != new_name_key {
            if get_kv(storage, &new_name_key).await?.is_some() {
                return Err(name_in_use(&record.name));
            }
            let old_revision = get_kv(storage, &old_name_key)
                .await?
                .map_or(0, |kv| kv.mod_revision);
            txn = txn
                .when(Compare::Missing(new_name_key.clone()))
                .when(Compare::ModRevision(old_name_key.clone(), old_revision))
                .then(Op::Delete { key: old_name_key })
                .then(put(new_name_key.clone(), name_index(&new_name_key, id)?));
        }
        let txn = relink_tokens(storage, datacenter, id, Some(&record), txn).await?;
        let result = storage.txn(txn).await?;
        if result.succeeded {
            return Ok(Stored {
                record,
                create_index: kv.create_revision,
                modify_index: result.revision,
            });
        }
    }
    Err(Error::Contention)
}

/// Deletes policy `id` (a missing one is not an error) and unlinks it from every token.
pub(crate) async fn delete_policy(
    storage: &dyn Storage,
    datacenter: &str,
    id: &str,
) -> Result<(), Error> {
    if id == GLOBAL_MANAGEMENT_ID {
        return Err(Error::Invalid(
            "Delete operation not permitted on the builtin global-management policy".to_owned(),
        ));
    }
    let key = policy_key(id);
    for _ in 0..MAX_ATTEMPTS {
        let Some(kv) = get_kv(storage, &key).await? else {
            return Ok(());
        };
        let existing: PolicyRecord = decode(&kv.key, &kv.value)?;
        let name_key = policy_name_key(&existing.name);
        let name_revision = get_kv(storage, &name_key)
            .await?
            .map_or(0, |kv| kv.mod_revision);
        let txn = Txn::new()
            .when(Compare::ModRevision(key.clone(), kv.mod_revision))
            .when(Compare::ModRevision(name_key.clone(), name_revision))
            .then(Op::Delete { key: key.clone() })
            .then(Op::Delete { key: name_key });
        let txn = relink_tokens(storage, datacenter, id, None, txn).await?;
        if storage.txn(txn).await?.succeeded {
            return Ok(());
        }
    }
    Err(Error::Contention)
}

/// Adds to `txn` the rewrite of every token linked to policy `id`: with `replacement` its link
/// gets the new name and its rules are recompiled; without, the link is removed. Guards the
/// rewrite with `tokens-changed` and the revisions of every other policy read.
async fn relink_tokens(
    storage: &dyn Storage,
    datacenter: &str,
    id: &str,
    replacement: Option<&PolicyRecord>,
    mut txn: Txn,
) -> Result<Txn, Error> {
    let changed_key = TOKENS_CHANGED.as_bytes().to_vec();
    let changed_revision = get_kv(storage, &changed_key)
        .await?
        .map_or(0, |kv| kv.mod_revision);
    txn = txn
        .when(Compare::ModRevision(changed_key.clone(), changed_revision))
        .then(put(changed_key, Vec::new()));
    let mut others: HashMap<String, Option<PolicyRecord>> = HashMap::new();
    for kv in storage.scan(tokens_range(), None).await?.kvs {
        let mut token: TokenRecord = decode(&kv.key, &kv.value)?;
        if !token.policies.iter().any(|link| link.id == id) {
            continue;
        }
        let mut linked: Vec<PolicyRecord> = Vec::new();
        let mut links: Vec<PolicyLink> = Vec::new();
        for link in &token.policies {
            let policy = if link.id == id {
                replacement.cloned()
            } else {
                if !others.contains_key(&link.id) {
                    let other_key = policy_key(&link.id);
                    let other = get_kv(storage, &other_key).await?;
                    txn = txn.when(Compare::ModRevision(
                        other_key,
                        other.as_ref().map_or(0, |kv| kv.mod_revision),
                    ));
                    let other = other
                        .map(|kv| decode::<PolicyRecord>(&kv.key, &kv.value))
                        .transpose()?;
                    others.insert(link.id.clone(), other);
                }
                others.get(&link.id).cloned().flatten()
            };
            // A link to a policy that no longer exists is dropped.
            if let Some(policy) = policy {
                links.push(PolicyLink {
                    id: policy.id.clone(),
                    name: policy.name.clone(),
                });
                linked.push(policy);
            }
        }
        let (management, rules) = compile(&linked, datacenter)?;
        token.policies = links;
        token.management = management;
        token.rules = rules;
        token.hash = token_hash(&token);
        txn = txn
            .when(Compare::ModRevision(kv.key.clone(), kv.mod_revision))
            .then(put(kv.key.clone(), encode(&kv.key, &token)?));
    }
    Ok(txn)
}

// ---------------------------------------------------------------------------------------------
// Token writes

/// Creates a token; AccessorID and SecretID are generated unless given (then validated).
pub(crate) async fn create_token(
    storage: &dyn Storage,
    datacenter: &str,
    write: TokenWrite,
    now_ms: i64,
) -> Result<Stored<TokenRecord>, Error> {
    if let Some(accessor) = &write.accessor_id {
        validate_id("AccessorID", accessor)?;
    }
    if let Some(secret) = &write.secret_id {
        validate_id("SecretID", secret)?;
    }
    let mut accessor = write.accessor_id.clone().unwrap_or_else(new_uuid);
    let mut secret = write.secret_id.clone().unwrap_or_else(new_uuid);
    for _ in 0..MAX_ATTEMPTS {
        let key = token_key(&accessor);
        if get_kv(storage, &key).await?.is_some() {
            if write.accessor_id.is_some() {
                return Err(Error::Invalid(
                    "Invalid Token: AccessorID is already in use".to_owned(),
                ));
            }
            accessor = new_uuid();
            continue;
        }
        let secret_key = secret_key(&secret);
        if get_kv(storage, &secret_key).await?.is_some() {
            if write.secret_id.is_some() {
                return Err(Error::Invalid(
                    "Invalid Token: SecretID is already in use".to_owned(),
                ));
            }
            secret = new_uuid();
            continue;
        }
        let txn = Txn::new()
            .when(Compare::Missing(key.clone()))
            .when(Compare::Missing(secret_key.clone()));
        let (txn, linked) = resolve_links(storage, &write.policies, txn).await?;
        let record = token_record(
            accessor.clone(),
            secret.clone(),
            &write,
            &linked,
            datacenter,
            format_rfc3339_millis(now_ms),
            write.namespace.clone(),
        )?;
        let txn = txn
            .then(put(key.clone(), encode(&key, &record)?))
            .then(put(
                secret_key.clone(),
                secret_index(&secret_key, &accessor)?,
            ))
            .then(put(TOKENS_CHANGED.as_bytes().to_vec(), Vec::new()));
        let result = storage.txn(txn).await?;
        if result.succeeded {
            return Ok(Stored {
                record,
                create_index: result.revision,
                modify_index: result.revision,
            });
        }
    }
    Err(Error::Contention)
}

/// Replaces token `accessor`'s description and policies (its secret, locality, creation time
/// and namespace stay).
pub(crate) async fn update_token(
    storage: &dyn Storage,
    datacenter: &str,
    accessor: &str,
    write: TokenWrite,
) -> Result<Stored<TokenRecord>, Error> {
    let key = token_key(accessor);
    for _ in 0..MAX_ATTEMPTS {
        let Some(kv) = get_kv(storage, &key).await? else {
            return Err(Error::Invalid(format!("Cannot find token {accessor:?}")));
        };
        let existing: TokenRecord = decode(&kv.key, &kv.value)?;
        if let Some(secret) = &write.secret_id
            && *secret != existing.secret_id
        {
            return Err(Error::Invalid(
                "Changing a token's SecretID is not permitted".to_owned(),
            ));
        }
        if write.local != existing.local {
            return Err(Error::Invalid(format!(
                "Cannot toggle local mode of {accessor}"
            )));
        }
        let txn = Txn::new().when(Compare::ModRevision(key.clone(), kv.mod_revision));
        let (txn, linked) = resolve_links(storage, &write.policies, txn).await?;
        let record = token_record(
            existing.accessor_id.clone(),
            existing.secret_id.clone(),
            &write,
            &linked,
            datacenter,
            existing.create_time.clone(),
            existing.namespace.clone(),
        )?;
        let txn = txn
            .then(put(key.clone(), encode(&key, &record)?))
            .then(put(TOKENS_CHANGED.as_bytes().to_vec(), Vec::new()));
        let result = storage.txn(txn).await?;
        if result.succeeded {
            return Ok(Stored {
                record,
                create_index: kv.create_revision,
                modify_index: result.revision,
            });
        }
    }
    Err(Error::Contention)
}

/// Creates a copy of token `accessor` with new IDs; `description` replaces the copied one when
/// not empty.
pub(crate) async fn clone_token(
    storage: &dyn Storage,
    datacenter: &str,
    accessor: &str,
    description: String,
    now_ms: i64,
) -> Result<Stored<TokenRecord>, Error> {
    let Some(source) = token(storage, accessor).await? else {
        return Err(Error::Invalid(format!("Cannot find token {accessor:?}")));
    };
    let source = source.record;
    let write = TokenWrite {
        accessor_id: None,
        secret_id: None,
        description: if description.is_empty() {
            source.description
        } else {
            description
        },
        policies: source
            .policies
            .into_iter()
            .map(|link| LinkRequest {
                id: link.id,
                name: String::new(),
            })
            .collect(),
        local: source.local,
        namespace: source.namespace,
    };
    create_token(storage, datacenter, write, now_ms).await
}

/// Deletes token `accessor` (a missing one is not an error). `requester` is the AccessorID of
/// the token making the request, which may not delete itself.
pub(crate) async fn delete_token(
    storage: &dyn Storage,
    accessor: &str,
    requester: &str,
) -> Result<(), Error> {
    if accessor == ANONYMOUS_ACCESSOR_ID {
        return Err(Error::Invalid(
            "Delete operation not permitted on the anonymous token".to_owned(),
        ));
    }
    if accessor == requester {
        return Err(Error::Invalid(
            "Deletion of the request's authorization token is not permitted".to_owned(),
        ));
    }
    let key = token_key(accessor);
    for _ in 0..MAX_ATTEMPTS {
        let Some(kv) = get_kv(storage, &key).await? else {
            return Ok(());
        };
        let existing: TokenRecord = decode(&kv.key, &kv.value)?;
        let secret_key = secret_key(&existing.secret_id);
        let txn = Txn::new()
            .when(Compare::ModRevision(key.clone(), kv.mod_revision))
            .then(Op::Delete { key: key.clone() })
            .then(Op::Delete { key: secret_key })
            .then(put(TOKENS_CHANGED.as_bytes().to_vec(), Vec::new()));
        if storage.txn(txn).await?.succeeded {
            return Ok(());
        }
    }
    Err(Error::Contention)
}

/// Looks up every policy a token write links (by ID, else by Name), adding compares on what it
/// read to `txn`; duplicates are linked once.
async fn resolve_links(
    storage: &dyn Storage,
    links: &[LinkRequest],
    mut txn: Txn,
) -> Result<(Txn, Vec<PolicyRecord>), Error> {
    let mut linked: Vec<PolicyRecord> = Vec::new();
    for link in links {
        let kv = if !link.id.is_empty() {
            let Some(kv) = get_kv(storage, &policy_key(&link.id)).await? else {
                return Err(Error::Invalid(format!(
                    "No such ACL policy with ID {:?}",
                    link.id
                )));
            };
            kv
        } else if !link.name.is_empty() {
            let not_found =
                || Error::Invalid(format!("No such ACL policy with name {:?}", link.name));
            let name_key = policy_name_key(&link.name);
            let Some(name_kv) = get_kv(storage, &name_key).await? else {
                return Err(not_found());
            };
            let index: NameRecord = decode(&name_kv.key, &name_kv.value)?;
            txn = txn.when(Compare::ModRevision(name_key, name_kv.mod_revision));
            let Some(kv) = get_kv(storage, &policy_key(&index.id)).await? else {
                return Err(not_found());
            };
            kv
        } else {
            return Err(Error::Invalid(
                "Invalid Token: a policy link needs an ID or a Name".to_owned(),
            ));
        };
        let policy: PolicyRecord = decode(&kv.key, &kv.value)?;
        if linked.iter().any(|known| known.id == policy.id) {
            continue;
        }
        txn = txn.when(Compare::ModRevision(kv.key.clone(), kv.mod_revision));
        linked.push(policy);
    }
    Ok((txn, linked))
}

fn token_record(
    accessor_id: String,
    secret_id: String,
    write: &TokenWrite,
    linked: &[PolicyRecord],
    datacenter: &str,
    create_time: String,
    namespace: Option<String>,
) -> Result<TokenRecord, Error> {
    let (management, rules) = compile(linked, datacenter)?;
    let mut record = TokenRecord {
        version: RECORD_VERSION,
        accessor_id,
        secret_id,
        description: write.description.clone(),
        policies: linked
            .iter()
            .map(|policy| PolicyLink {
                id: policy.id.clone(),
                name: policy.name.clone(),
            })
            .collect(),
        local: write.local,
        create_time,
        hash: String::new(),
        namespace,
        management,
        rules,
    };
    record.hash = token_hash(&record);
    Ok(record)
}

/// A token's authority from its policies: management if one is `global-management`, and the
/// merged rules of those that apply in `datacenter`.
fn compile(policies: &[PolicyRecord], datacenter: &str) -> Result<(bool, Vec<Rule>), Error> {
    let management = policies
        .iter()
        .any(|policy| policy.id == GLOBAL_MANAGEMENT_ID);
    let mut all = Vec::new();
    for policy in policies
        .iter()
        .filter(|policy| policy.applies_in(datacenter))
    {
        // Rules were validated when the policy was written; a failure here is corruption.
        let parsed = rules::parse(&policy.rules).map_err(|reason| Error::CorruptRecord {
            key: String::from_utf8_lossy(&policy_key(&policy.id)).into_owned(),
            reason,
        })?;
        all.extend(parsed);
    }
    Ok((management, rules::merge(all)))
}

// ---------------------------------------------------------------------------------------------
// Bootstrap

/// Creates the built-in `global-management` policy, the anonymous token and the initial
/// management token (when configured) if ACLs are enabled and they do not exist yet.
/// Idempotent: a restart finds them and changes nothing.
pub(crate) async fn bootstrap(state: &State) -> Result<(), Error> {
    let acl = &state.config().acl;
    if !acl.enabled {
        return Ok(());
    }
    ensure_builtins(
        state.storage(),
        &state.config().datacenter,
        acl.initial_management_token.as_deref(),
        state.clock().now_ms(),
    )
    .await
}

/// Ensures the `global-management` policy, the anonymous token and (when given) a management
/// token with SecretID `initial_management` exist. Writes only what is missing, in one
/// transaction guarded by `Missing` compares; a restart finds everything and writes nothing.
async fn ensure_builtins(
    storage: &dyn Storage,
    datacenter: &str,
    initial_management: Option<&str>,
    now_ms: i64,
) -> Result<(), Error> {
    let management_policy = policy_record(
        GLOBAL_MANAGEMENT_ID.to_owned(),
        PolicyWrite {
            name: GLOBAL_MANAGEMENT_NAME.to_owned(),
            description: GLOBAL_MANAGEMENT_DESCRIPTION.to_owned(),
            rules: GLOBAL_MANAGEMENT_RULES.to_owned(),
            datacenters: Vec::new(),
        },
    );
    for _ in 0..MAX_ATTEMPTS {
        let mut txn = Txn::new();
        let mut missing = false;
        let policy_key = policy_key(GLOBAL_MANAGEMENT_ID);
        let policy = match get_kv(storage, &policy_key).await? {
            Some(kv) => decode::<PolicyRecord>(&kv.key, &kv.value)?,
            None => {
                missing = true;
                let name_key = policy_name_key(GLOBAL_MANAGEMENT_NAME);
                txn = txn.when(Compare::Missing(policy_key.clone())).then(put(
                    policy_key.clone(),
                    encode(&policy_key, &management_policy)?,
                ));
                if get_kv(storage, &name_key).await?.is_none() {
                    txn = txn.when(Compare::Missing(name_key.clone())).then(put(
                        name_key.clone(),
                        name_index(&name_key, GLOBAL_MANAGEMENT_ID)?,
                    ));
                }
                management_policy.clone()
            }
        };
        let mut ensure_token =
            |accessor: String, secret: &str, write: TokenWrite, linked: &[PolicyRecord]| {
                missing = true;
                let key = token_key(&accessor);
                let secret_key = secret_key(secret);
                let record = token_record(
                    accessor.clone(),
                    secret.to_owned(),
                    &write,
                    linked,
                    datacenter,
                    format_rfc3339_millis(now_ms),
                    None,
                )?;
                txn = std::mem::take(&mut txn)
                    .when(Compare::Missing(key.clone()))
                    .when(Compare::Missing(secret_key.clone()))
                    .then(put(key.clone(), encode(&key, &record)?))
                    .then(put(
                        secret_key.clone(),
                        secret_index(&secret_key, &accessor)?,
                    ));
                Ok::<(), Error>(())
            };
        if get_kv(storage, &token_key(ANONYMOUS_ACCESSOR_ID))
            .await?
            .is_none()
        {
            let write = TokenWrite {
                description: ANONYMOUS_DESCRIPTION.to_owned(),
                ..TokenWrite::default()
            };
            ensure_token(
                ANONYMOUS_ACCESSOR_ID.to_owned(),
                ANONYMOUS_SECRET,
                write,
                &[],
            )?;
        }
        if let Some(secret) = initial_management
            && get_kv(storage, &secret_key(secret)).await?.is_none()
        {
            let write = TokenWrite {
                description: INITIAL_MANAGEMENT_DESCRIPTION.to_owned(),
                ..TokenWrite::default()
            };
            ensure_token(new_uuid(), secret, write, std::slice::from_ref(&policy))?;
        }
        // A configured initial management token is the bootstrap, as in Consul: from then on
        // (and for a store whose token predates the sentinel) the bootstrap API refuses.
        let bootstrapped_key = BOOTSTRAPPED.as_bytes().to_vec();
        if initial_management.is_some() && get_kv(storage, &bootstrapped_key).await?.is_none() {
            missing = true;
            txn = txn
                .when(Compare::Missing(bootstrapped_key.clone()))
                .then(put(
                    bootstrapped_key.clone(),
                    bootstrap_mark(&bootstrapped_key)?,
                ));
        }
        if !missing {
            return Ok(());
        }
        let txn = txn.then(put(TOKENS_CHANGED.as_bytes().to_vec(), Vec::new()));
        if storage.txn(txn).await?.succeeded {
            return Ok(());
        }
    }
    Err(Error::Contention)
}

/// The one-time bootstrap (`PUT /v1/acl/bootstrap`): creates a management token linked to
/// `global-management`, with a fresh AccessorID and `secret_id` (else a fresh one) as SecretID,
/// and marks the ACL system bootstrapped in the same transaction. Once it is marked (by this or
/// by a configured initial management token), a 403 naming the index at which that happened.
/// A given `secret_id` must be a UUID that no token uses and outside the reserved range.
pub(crate) async fn bootstrap_token(
    storage: &dyn Storage,
    datacenter: &str,
    secret_id: Option<&str>,
    now_ms: i64,
) -> Result<Stored<TokenRecord>, Error> {
    let bootstrapped_key = BOOTSTRAPPED.as_bytes().to_vec();
    let policy_key = policy_key(GLOBAL_MANAGEMENT_ID);
    for _ in 0..MAX_ATTEMPTS {
        // Consul checks the sentinel before it looks at the secret.
        if let Some(kv) = get_kv(storage, &bootstrapped_key).await? {
            return Err(Error::AclBootstrapNotAllowed {
                reset_index: kv.create_revision,
            });
        }
        let secret = match secret_id {
            Some(secret) => {
                if let Some(reason) = go_uuid_error(secret) {
                    return Err(Error::Invalid(reason));
                }
                if !id_unused(storage, secret).await? {
                    return Err(Error::Invalid(
                        "Provided token cannot be used because a token with that secret already \
                         exists."
                            .to_owned(),
                    ));
                }
                secret.to_owned()
            }
            None => unused_id(storage).await?,
        };
        let accessor = unused_id(storage).await?;
        // `State::open` creates the policy whenever ACLs are on, and it cannot be deleted.
        let Some(policy_kv) = get_kv(storage, &policy_key).await? else {
            return Err(Error::CorruptRecord {
                key: String::from_utf8_lossy(&policy_key).into_owned(),
                reason: "the builtin global-management policy is missing".to_owned(),
            });
        };
        let policy: PolicyRecord = decode(&policy_kv.key, &policy_kv.value)?;
        let write = TokenWrite {
            description: BOOTSTRAP_DESCRIPTION.to_owned(),
            ..TokenWrite::default()
        };
        let record = token_record(
            accessor.clone(),
            secret.clone(),
            &write,
            std::slice::from_ref(&policy),
            datacenter,
            format_rfc3339_millis(now_ms),
            None,
        )?;
        let key = token_key(&accessor);
        let secret_key = secret_key(&secret);
        let txn = Txn::new()
            .when(Compare::Missing(bootstrapped_key.clone()))
            .when(Compare::ModRevision(
                policy_key.clone(),
                policy_kv.mod_revision,
            ))
            .when(Compare::Missing(key.clone()))
            .when(Compare::Missing(secret_key.clone()))
            .then(put(key.clone(), encode(&key, &record)?))
            .then(put(
                secret_key.clone(),
                secret_index(&secret_key, &accessor)?,
            ))
            .then(put(
                bootstrapped_key.clone(),
                bootstrap_mark(&bootstrapped_key)?,
            ))
            .then(put(TOKENS_CHANGED.as_bytes().to_vec(), Vec::new()));
        let result = storage.txn(txn).await?;
        if result.succeeded {
            return Ok(Stored {
                record,
                create_index: result.revision,
                modify_index: result.revision,
            });
        }
    }
    Err(Error::Contention)
}

/// Whether `id` may become a token's AccessorID or SecretID: no token uses it as either, and it
/// is outside the reserved range (Consul's `checkTokenUUID`).
async fn id_unused(storage: &dyn Storage, id: &str) -> Result<bool, Error> {
    Ok(!id.starts_with(RESERVED_ID_PREFIX)
        && get_kv(storage, &token_key(id)).await?.is_none()
        && get_kv(storage, &secret_key(id)).await?.is_none())
}

/// A fresh UUID that [`id_unused`] accepts.
async fn unused_id(storage: &dyn Storage) -> Result<String, Error> {
    for _ in 0..MAX_ATTEMPTS {
        let id = new_uuid();
        if id_unused(storage, &id).await? {
            return Ok(id);
        }
    }
    Err(Error::Contention)
}

/// Why `value` is not a UUID as go-uuid's `ParseUUID` reads one (36 bytes, dashes at 8, 13, 18
/// and 23, hex of either case elsewhere), in its words; `None` when it is one.
fn go_uuid_error(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    if bytes.len() != 36 {
        return Some("uuid string is wrong length".to_owned());
    }
    if [8, 13, 18, 23].iter().any(|&index| bytes[index] != b'-') {
        return Some("uuid is improperly formatted".to_owned());
    }
    let invalid = bytes
        .iter()
        .enumerate()
        .find(|(index, byte)| ![8, 13, 18, 23].contains(index) && !byte.is_ascii_hexdigit())?;
    Some(format!(
        "encoding/hex: invalid byte: {}",
        go_quoted_rune(char::from(*invalid.1))
    ))
}

/// Go's `%#U` of a rune below U+0100: `U+0067 'g'`, without the quoted character when Go's
/// `strconv.IsPrint` says it is not printable (controls, U+00A0 and U+00AD).
fn go_quoted_rune(rune: char) -> String {
    let code = u32::from(rune);
    let printable = matches!(code, 0x20..=0x7e | 0xa1..=0xff) && code != 0xad;
    if printable {
        format!("U+{code:04X} '{rune}'")
    } else {
        format!("U+{code:04X}")
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn bootstrap_mark(key: &[u8]) -> Result<Vec<u8>, Error> {
    encode(
        key,
        &BootstrapRecord {
            version: RECORD_VERSION,
        },
    )
}

fn put(key: Vec<u8>, value: Vec<u8>) -> Op {
    Op::Put { key, value }
}

fn name_index(key: &[u8], id: &str) -> Result<Vec<u8>, Error> {
    encode(
        key,
        &NameRecord {
            version: RECORD_VERSION,
            id: id.to_owned(),
        },
    )
}

fn secret_index(key: &[u8], accessor: &str) -> Result<Vec<u8>, Error> {
    encode(
        key,
        &SecretRecord {
            version: RECORD_VERSION,
            accessor_id: accessor.to_owned(),
        },
    )
}

fn name_in_use(name: &str) -> Error {
    Error::Invalid(format!(
        "Invalid Policy: A Policy with Name {name:?} already exists"
    ))
}

fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Consul's reserved ID prefix (`structs.ACLReservedIDPrefix`).
const RESERVED_ID_PREFIX: &str = "00000000-0000-0000-0000-0000000000";

/// A client-chosen AccessorID or SecretID must be a hyphenated UUID outside the reserved range.
fn validate_id(field: &str, value: &str) -> Result<(), Error> {
    if value.len() != 36 || uuid::Uuid::try_parse(value).is_err() {
        return Err(Error::Invalid(format!(
            "Invalid Token: {field} is not a valid UUID"
        )));
    }
    if value.starts_with(RESERVED_ID_PREFIX) {
        return Err(Error::Invalid(format!(
            "Invalid Token: UUIDs with the prefix {RESERVED_ID_PREFIX:?} are reserved"
        )));
    }
    Ok(())
}

fn token_hash(token: &TokenRecord) -> String {
    let policies: Vec<&str> = token.policies.iter().map(|link| link.id.as_str()).collect();
    content_hash(&[
        &token.description,
        &policies.join(","),
        if token.local { "local" } else { "global" },
    ])
}

/// A 32-byte content hash, base64 (Consul's `Hash` field has the same shape; its value is only
/// compared for equality by clients). Four FNV-1a lanes with different offsets.
fn content_hash(parts: &[&str]) -> String {
    use base64::Engine;
    use stdx::hash::Fnv1a64;
    let mut lanes = [
        0xcbf2_9ce4_8422_2325,
        0x8422_2325_cbf2_9ce4,
        0x9e37_79b9_7f4a_7c15,
        0x7f4a_7c15_9e37_79b9,
    ]
    .map(Fnv1a64::with_offset);
    for (lane_index, lane) in lanes.iter_mut().enumerate() {
        for part in parts {
            lane.write(part.as_bytes());
            lane.write(&[0xff, lane_index as u8]);
        }
    }
    let mut bytes = Vec::with_capacity(32);
    for lane in lanes {
        bytes.extend_from_slice(&lane.finish().to_be_bytes());
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_management_rules_grant_every_prefix_and_parse_the_rest() {
        let parsed = rules::parse(GLOBAL_MANAGEMENT_RULES).unwrap();
        assert!(
            parsed
                .iter()
                .all(|rule| rule.policy == rules::Policy::Write && rule.prefix)
        );
        assert_eq!(parsed.len(), 5);
    }

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(format_rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_rfc3339_millis(951_782_400_123),
            "2000-02-29T00:00:00.123Z"
        );
        assert_eq!(
            format_rfc3339_millis(1_700_000_000_000),
            "2023-11-14T22:13:20.000Z"
        );
    }

    #[test]
    fn content_hash_is_stable_and_distinguishes_parts() {
        let a = content_hash(&["ab", "c"]);
        assert_eq!(a, content_hash(&["ab", "c"]));
        assert_ne!(a, content_hash(&["a", "bc"]));
        assert_eq!(a.len(), 44);
    }

    #[test]
    fn bootstrap_secrets_are_checked_as_go_uuid_parses_them() {
        assert_eq!(go_uuid_error("8c5c5c6e-bd3c-4b0a-9f5e-2b0e0b5b7a11"), None);
        assert_eq!(go_uuid_error("8C5C5C6E-BD3C-4B0A-9F5E-2B0E0B5B7A11"), None);
        assert_eq!(
            go_uuid_error("not-a-uuid").as_deref(),
            Some("uuid string is wrong length")
        );
        assert_eq!(
            go_uuid_error("8c5c5c6e0bd3c-4b0a-9f5e-2b0e0b5b7a11").as_deref(),
            Some("uuid is improperly formatted")
        );
        assert_eq!(
            go_uuid_error("8c5c5c6e-bd3c-4b0a-9f5e-2b0e0b5b7azz").as_deref(),
            Some("encoding/hex: invalid byte: U+007A 'z'")
        );
        assert_eq!(
            go_uuid_error("8c5c5c6e-bd3c-4b0a-9f5e-2b0e0b5b7a\u{1}1").as_deref(),
            Some("encoding/hex: invalid byte: U+0001")
        );
    }

    #[test]
    fn client_ids_must_be_unreserved_uuids() {
        assert!(validate_id("AccessorID", "00000000-DEAD-BEEF-0000-000000000000").is_ok());
        assert!(validate_id("AccessorID", "unknown").is_err());
        assert!(validate_id("AccessorID", "00000000deadbeef0000000000000000").is_err());
        assert!(validate_id("SecretID", "00000000-0000-0000-0000-000000000042").is_err());
    }
}
