//! Stored records and keys of the registry's ACL family (see `store/mod.rs` for the layout),
//! and the reads over them; the transactions that change them are `domain/acl.rs`.
//!
//! ```text
//! registry/acl/policies/<id>                 PolicyRecord
//! registry/acl/policy-names/<lowercase name> NameRecord (policy names are unique, ignoring case)
//! registry/acl/tokens/<accessor-id>          TokenRecord
//! registry/acl/secrets/<secret-id>           SecretRecord (secret → accessor)
//! registry/acl/tokens-changed                written by every transaction that writes a token
//! registry/acl/bootstrapped                  BootstrapRecord (the first management token exists)
//! ```
//!
//! Invariants:
//! - A token record carries its policy links (ID and current Name) and the rules of those
//!   policies already parsed and merged (`rules`, `management`), so resolving a request's token
//!   is two gets (secret, then token).
//! - A policy, its name key, a token and its secret key are written and deleted together.
//! - `bootstrapped` is written once, in the transaction that creates the first management token
//!   (`PUT /v1/acl/bootstrap`, or the configured initial management token), and never rewritten:
//!   its create revision is Consul's bootstrap reset index.
//! - CreateIndex and ModifyIndex are the storage revisions of the record's key (create and last
//!   modification), not stored fields.

use serde::{Deserialize, Serialize};
use storage::{KeyRange, KeyValue, Storage};

use crate::Error;
use crate::acl_rules::Rule;
use crate::store::{Stored, decode};

const POLICIES: &str = "registry/acl/policies/";
const POLICY_NAMES: &str = "registry/acl/policy-names/";
const TOKENS: &str = "registry/acl/tokens/";
const SECRETS: &str = "registry/acl/secrets/";

/// Written (empty) by every transaction that writes a token, and compared by every transaction
/// that rewrites tokens for a policy change.
pub(crate) const TOKENS_CHANGED: &str = "registry/acl/tokens-changed";

/// Consul's bootstrap sentinel: present once the ACL system has its first management token.
pub(crate) const BOOTSTRAPPED: &str = "registry/acl/bootstrapped";

/// The current version of every record in this file.
pub(crate) const RECORD_VERSION: u32 = 1;

pub(crate) fn policy_key(id: &str) -> Vec<u8> {
    format!("{POLICIES}{id}").into_bytes()
}

pub(crate) fn policy_name_key(name: &str) -> Vec<u8> {
    format!("{POLICY_NAMES}{}", name.to_lowercase()).into_bytes()
}

pub(crate) fn token_key(accessor: &str) -> Vec<u8> {
    format!("{TOKENS}{accessor}").into_bytes()
}

pub(crate) fn secret_key(secret: &str) -> Vec<u8> {
    format!("{SECRETS}{secret}").into_bytes()
}

/// What the policy list reads (its blocking index).
pub(crate) fn policies_range() -> KeyRange {
    KeyRange::prefix(POLICIES)
}

/// What the token list reads (its blocking index).
pub(crate) fn tokens_range() -> KeyRange {
    KeyRange::prefix(TOKENS)
}

/// The range of one policy's record.
pub(crate) fn policy_range(id: &str) -> KeyRange {
    KeyRange::key(policy_key(id))
}

/// The range of one token's record.
pub(crate) fn token_range(accessor: &str) -> KeyRange {
    KeyRange::key(token_key(accessor))
}

/// A stored policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PolicyRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) description: String,
    /// The rules text as the client sent it.
    pub(crate) rules: String,
    /// Where the policy applies; empty means every datacenter.
    pub(crate) datacenters: Vec<String>,
    pub(crate) hash: String,
}

impl PolicyRecord {
    /// Whether the policy's rules apply in `datacenter`.
    pub(crate) fn applies_in(&self, datacenter: &str) -> bool {
        self.datacenters.is_empty() || self.datacenters.iter().any(|dc| dc == datacenter)
    }
}

/// A token's reference to a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PolicyLink {
    pub(crate) id: String,
    pub(crate) name: String,
}

/// A stored token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TokenRecord {
    pub(crate) version: u32,
    pub(crate) accessor_id: String,
    pub(crate) secret_id: String,
    pub(crate) description: String,
    pub(crate) policies: Vec<PolicyLink>,
    pub(crate) local: bool,
    /// RFC 3339, UTC.
    pub(crate) create_time: String,
    pub(crate) hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) namespace: Option<String>,
    /// Linked to `global-management`: may do everything.
    pub(crate) management: bool,
    /// The merged rules of the linked policies that apply in this datacenter.
    pub(crate) rules: Vec<Rule>,
}

/// The index from a secret to its token's accessor.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SecretRecord {
    pub(crate) version: u32,
    pub(crate) accessor_id: String,
}

/// The bootstrap sentinel's record ([`BOOTSTRAPPED`]); what counts is that it exists and the
/// revision it was created at.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct BootstrapRecord {
    pub(crate) version: u32,
}

/// The index from a policy's (lowercase) name to its ID.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct NameRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
}

// ---------------------------------------------------------------------------------------------
// Reads

pub(crate) async fn get_kv(storage: &dyn Storage, key: &[u8]) -> Result<Option<KeyValue>, Error> {
    Ok(storage.get(key).await?)
}

pub(crate) async fn policy(
    storage: &dyn Storage,
    id: &str,
) -> Result<Option<Stored<PolicyRecord>>, Error> {
    get_kv(storage, &policy_key(id))
        .await?
        .map(|kv| Stored::from_kv(&kv))
        .transpose()
}

pub(crate) async fn policy_by_name(
    storage: &dyn Storage,
    name: &str,
) -> Result<Option<Stored<PolicyRecord>>, Error> {
    let Some(kv) = get_kv(storage, &policy_name_key(name)).await? else {
        return Ok(None);
    };
    let index: NameRecord = decode(&kv.key, &kv.value)?;
    Ok(policy(storage, &index.id)
        .await?
        .filter(|stored| stored.record.name.eq_ignore_ascii_case(name)))
}

pub(crate) async fn policies(storage: &dyn Storage) -> Result<Vec<Stored<PolicyRecord>>, Error> {
    storage
        .scan(policies_range(), None)
        .await?
        .kvs
        .iter()
        .map(Stored::from_kv)
        .collect()
}

pub(crate) async fn token(
    storage: &dyn Storage,
    accessor: &str,
) -> Result<Option<Stored<TokenRecord>>, Error> {
    get_kv(storage, &token_key(accessor))
        .await?
        .map(|kv| Stored::from_kv(&kv))
        .transpose()
}

pub(crate) async fn tokens(storage: &dyn Storage) -> Result<Vec<Stored<TokenRecord>>, Error> {
    storage
        .scan(tokens_range(), None)
        .await?
        .kvs
        .iter()
        .map(Stored::from_kv)
        .collect()
}

/// The token whose SecretID is `secret`: two gets.
pub(crate) async fn token_by_secret(
    storage: &dyn Storage,
    secret: &str,
) -> Result<Option<TokenRecord>, Error> {
    let Some(kv) = get_kv(storage, &secret_key(secret)).await? else {
        return Ok(None);
    };
    let index: SecretRecord = decode(&kv.key, &kv.value)?;
    // The token may have been deleted between the two reads: then it is unknown.
    Ok(token(storage, &index.accessor_id)
        .await?
        .map(|stored| stored.record)
        .filter(|token| token.secret_id == secret))
}
