//! ACL policies and tokens in storage: the records, their keys and every read and write.
//!
//! Layout (outside the scheduler's in-memory snapshot; read per request):
//! - `scheduler/acl/policies/<name>`: a [`PolicyRecord`] (JSON).
//! - `scheduler/acl/tokens/<accessor>`: a [`TokenRecord`] (JSON).
//! - `scheduler/acl/token-secrets/<secret>`: the accessor of the token with that secret,
//!   written and deleted in the same transaction as the token.
//! - `scheduler/acl/bootstrap`: present once ACLs are bootstrapped; its mod revision is the
//!   "reset index" upstream reports.
//!
//! `CreateIndex` and `ModifyIndex` are the storage revisions that created and last wrote a
//! record (never stored inside it); list indexes are the range revision of the prefix.
//!
//! The dev root token (`cairn dev`) is a management token whether or not it is stored;
//! [`ensure_root`] stores it (marked `dev_root`) the first time an ACL endpoint needs it as a
//! record, so it shows in lists and has an accessor. A stored root of an earlier run with a
//! different secret is dead: resolution ignores it and [`ensure_root`] deletes it.
//!
//! Invariants: a token and its secret index are only written or deleted together, guarded by
//! compares, so concurrent writers never leave a secret pointing at the wrong token; a secret
//! lookup re-checks the token's secret, so a stale index can never resolve.

use std::fmt;

use serde::{Deserialize, Serialize};
use storage::{Compare, KeyRange, KeyValue, Op, Revision, Storage, StorageExt, Txn};

use crate::Error;

pub(crate) const POLICIES: &str = "scheduler/acl/policies/";
pub(crate) const TOKENS: &str = "scheduler/acl/tokens/";
pub(crate) const TOKEN_SECRETS: &str = "scheduler/acl/token-secrets/";
pub(crate) const BOOTSTRAP: &str = "scheduler/acl/bootstrap";

pub(crate) const TOKEN_TYPE_CLIENT: &str = "client";
pub(crate) const TOKEN_TYPE_MANAGEMENT: &str = "management";

fn policy_key(name: &str) -> Vec<u8> {
    format!("{POLICIES}{name}").into_bytes()
}

fn token_key(accessor: &str) -> Vec<u8> {
    format!("{TOKENS}{accessor}").into_bytes()
}

fn secret_key(secret: &str) -> Vec<u8> {
    format!("{TOKEN_SECRETS}{secret}").into_bytes()
}

/// A stored policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct PolicyRecord {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) rules: String,
}

/// A record with the storage revisions that created and last modified it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored<T> {
    pub(crate) record: T,
    pub(crate) create_index: u64,
    pub(crate) modify_index: u64,
}

impl<T: for<'de> Deserialize<'de>> Stored<T> {
    fn decode(kv: &KeyValue) -> Result<Stored<T>, Error> {
        let record = serde_json::from_slice(&kv.value).map_err(|err| {
            Error::Internal(format!(
                "corrupt record at {}: {err}",
                String::from_utf8_lossy(&kv.key)
            ))
        })?;
        Ok(Stored {
            record,
            create_index: kv.create_revision,
            modify_index: kv.mod_revision,
        })
    }
}

/// A stored token. Times are Unix nanoseconds; the TTL is nanoseconds (0: none).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct TokenRecord {
    #[serde(rename = "AccessorID")]
    pub(crate) accessor_id: String,
    #[serde(rename = "SecretID")]
    pub(crate) secret_id: String,
    pub(crate) name: String,
    #[serde(rename = "Type")]
    pub(crate) token_type: String,
    pub(crate) policies: Vec<String>,
    pub(crate) global: bool,
    pub(crate) create_time: i64,
    pub(crate) expiration_time: Option<i64>,
    #[serde(rename = "ExpirationTTL")]
    pub(crate) expiration_ttl: i64,
    /// The `cairn dev` root token, stored by [`ensure_root`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) dev_root: bool,
}

impl fmt::Debug for TokenRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret.
        f.debug_struct("TokenRecord")
            .field("accessor_id", &self.accessor_id)
            .field("name", &self.name)
            .field("token_type", &self.token_type)
            .field("policies", &self.policies)
            .field("global", &self.global)
            .field("expiration_time", &self.expiration_time)
            .field("dev_root", &self.dev_root)
            .finish_non_exhaustive()
    }
}

impl TokenRecord {
    pub(crate) fn is_management(&self) -> bool {
        self.token_type == TOKEN_TYPE_MANAGEMENT
    }

    /// Whether the token has expired at `now` (Unix nanoseconds).
    pub(crate) fn is_expired(&self, now: i64) -> bool {
        self.expiration_time.is_some_and(|expires| expires < now)
    }
}

/// A token as the API shows it (upstream's `ACLToken`, or its list stub without the secret
/// and TTL).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct TokenView {
    #[serde(rename = "AccessorID")]
    pub(crate) accessor_id: String,
    #[serde(rename = "SecretID", skip_serializing_if = "Option::is_none")]
    pub(crate) secret_id: Option<String>,
    pub(crate) name: String,
    #[serde(rename = "Type")]
    pub(crate) token_type: String,
    pub(crate) policies: Option<Vec<String>>,
    pub(crate) roles: Option<Vec<serde_json::Value>>,
    pub(crate) global: bool,
    pub(crate) create_time: String,
    pub(crate) expiration_time: Option<String>,
    #[serde(rename = "ExpirationTTL", skip_serializing_if = "Option::is_none")]
    pub(crate) expiration_ttl: Option<String>,
    pub(crate) create_index: u64,
    pub(crate) modify_index: u64,
}

impl Stored<TokenRecord> {
    /// The full token, secret included.
    pub(crate) fn view(&self) -> TokenView {
        let mut view = self.stub();
        view.secret_id = Some(self.record.secret_id.clone());
        view.expiration_ttl = Some(if self.record.expiration_ttl == 0 {
            String::new()
        } else {
            stdx::duration::format_go(self.record.expiration_ttl)
        });
        view
    }

    /// The list stub: no secret, no TTL.
    pub(crate) fn stub(&self) -> TokenView {
        let record = &self.record;
        TokenView {
            accessor_id: record.accessor_id.clone(),
            secret_id: None,
            name: record.name.clone(),
            token_type: record.token_type.clone(),
            policies: (!record.policies.is_empty()).then(|| record.policies.clone()),
            roles: None,
            global: record.global,
            create_time: stdx::time::format_rfc3339_nanos(record.create_time),
            expiration_time: record.expiration_time.map(stdx::time::format_rfc3339_nanos),
            expiration_ttl: None,
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }
}

pub(crate) type StoredPolicy = Stored<PolicyRecord>;
pub(crate) type StoredToken = Stored<TokenRecord>;

fn encode<T: Serialize>(record: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(record).map_err(|err| Error::Internal(format!("encoding a record: {err}")))
}

// ---- policies ----

pub(crate) async fn policy(
    storage: &dyn Storage,
    name: &str,
) -> Result<Option<StoredPolicy>, Error> {
    match storage.get(&policy_key(name)).await? {
        Some(kv) => Stored::decode(&kv).map(Some),
        None => Ok(None),
    }
}

/// Every policy in name order, with the index of the policy table.
pub(crate) async fn policies(storage: &dyn Storage) -> Result<(Vec<StoredPolicy>, u64), Error> {
    let scan = storage.scan_prefix(POLICIES.as_bytes()).await?;
    let index = storage.range_revision(KeyRange::prefix(POLICIES)).await?;
    let policies = scan
        .kvs
        .iter()
        .map(Stored::decode)
        .collect::<Result<_, _>>()?;
    Ok((policies, index))
}

/// Index of the policy table (for a read of a missing policy).
pub(crate) async fn policies_index(storage: &dyn Storage) -> Result<u64, Error> {
    Ok(storage.range_revision(KeyRange::prefix(POLICIES)).await?)
}

/// Creates or replaces a policy; returns the write's revision.
pub(crate) async fn put_policy(
    storage: &dyn Storage,
    record: &PolicyRecord,
) -> Result<Revision, Error> {
    Ok(storage
        .put(&policy_key(&record.name), &encode(record)?)
        .await?)
}

/// Deletes a policy (a no-op when missing); returns the store revision afterwards.
pub(crate) async fn delete_policy(storage: &dyn Storage, name: &str) -> Result<Revision, Error> {
    Ok(storage.delete(&policy_key(name)).await?)
}

// ---- tokens ----

pub(crate) async fn token(
    storage: &dyn Storage,
    accessor: &str,
) -> Result<Option<StoredToken>, Error> {
    match storage.get(&token_key(accessor)).await? {
        Some(kv) => Stored::decode(&kv).map(Some),
        None => Ok(None),
    }
}

/// The token whose secret is `secret`, if any.
pub(crate) async fn token_by_secret(
    storage: &dyn Storage,
    secret: &str,
) -> Result<Option<StoredToken>, Error> {
    let Some(index) = storage.get(&secret_key(secret)).await? else {
        return Ok(None);
    };
    let accessor = String::from_utf8_lossy(&index.value).into_owned();
    Ok(token(storage, &accessor)
        .await?
        .filter(|token| token.record.secret_id == secret))
}

/// Every token in accessor order, with the index of the token table.
pub(crate) async fn tokens(storage: &dyn Storage) -> Result<(Vec<StoredToken>, u64), Error> {
    let scan = storage.scan_prefix(TOKENS.as_bytes()).await?;
    let index = tokens_index(storage).await?;
    let tokens = scan
        .kvs
        .iter()
        .map(Stored::decode)
        .collect::<Result<_, _>>()?;
    Ok((tokens, index))
}

pub(crate) async fn tokens_index(storage: &dyn Storage) -> Result<u64, Error> {
    Ok(storage.range_revision(KeyRange::prefix(TOKENS)).await?)
}

/// Stores a new token and its secret index. `None` when the accessor or the secret is taken.
pub(crate) async fn create_token(
    storage: &dyn Storage,
    record: &TokenRecord,
) -> Result<Option<StoredToken>, Error> {
    let txn = Txn::new()
        .when(Compare::Missing(token_key(&record.accessor_id)))
        .when(Compare::Missing(secret_key(&record.secret_id)));
    let result = storage.txn(put_token_ops(txn, record)?).await?;
    Ok(result.succeeded.then(|| Stored {
        record: record.clone(),
        create_index: result.revision,
        modify_index: result.revision,
    }))
}

fn put_token_ops(txn: Txn, record: &TokenRecord) -> Result<Txn, Error> {
    Ok(txn
        .then(Op::Put {
            key: token_key(&record.accessor_id),
            value: encode(record)?,
        })
        .then(Op::Put {
            key: secret_key(&record.secret_id),
            value: record.accessor_id.clone().into_bytes(),
        }))
}

/// Replaces `existing` with `record` (same accessor and secret) if nobody wrote it since it
/// was read; `None` when someone did.
pub(crate) async fn update_token(
    storage: &dyn Storage,
    existing: &StoredToken,
    record: &TokenRecord,
) -> Result<Option<StoredToken>, Error> {
    let txn = Txn::new()
        .when(Compare::ModRevision(
            token_key(&existing.record.accessor_id),
            existing.modify_index,
        ))
        .then(Op::Put {
            key: token_key(&record.accessor_id),
            value: encode(record)?,
        });
    let result = storage.txn(txn).await?;
    Ok(result.succeeded.then(|| Stored {
        record: record.clone(),
        create_index: existing.create_index,
        modify_index: result.revision,
    }))
}

/// Deletes a token and its secret index; returns the store revision afterwards.
pub(crate) async fn delete_token(
    storage: &dyn Storage,
    token: &StoredToken,
) -> Result<Revision, Error> {
    let txn = Txn::new()
        .then(Op::Delete {
            key: token_key(&token.record.accessor_id),
        })
        .then(Op::Delete {
            key: secret_key(&token.record.secret_id),
        });
    Ok(storage.txn(txn).await?.revision)
}

// ---- bootstrap and the dev root token ----

/// What a bootstrap attempt did.
#[derive(Debug)]
pub(crate) enum Bootstrap {
    Done(StoredToken),
    /// Bootstrap happened before; the reset index upstream reports.
    AlreadyDone(u64),
    /// The requested secret belongs to another token.
    SecretTaken,
}

/// Stores `record` as the bootstrap management token, once.
pub(crate) async fn bootstrap(
    storage: &dyn Storage,
    record: &TokenRecord,
) -> Result<Bootstrap, Error> {
    let txn = Txn::new()
        .when(Compare::Missing(BOOTSTRAP.as_bytes().to_vec()))
        .when(Compare::Missing(token_key(&record.accessor_id)))
        .when(Compare::Missing(secret_key(&record.secret_id)))
        .then(Op::Put {
            key: BOOTSTRAP.as_bytes().to_vec(),
            value: record.accessor_id.clone().into_bytes(),
        });
    let result = storage.txn(put_token_ops(txn, record)?).await?;
    if result.succeeded {
        return Ok(Bootstrap::Done(Stored {
            record: record.clone(),
            create_index: result.revision,
            modify_index: result.revision,
        }));
    }
    match storage.get(BOOTSTRAP.as_bytes()).await? {
        Some(marker) => Ok(Bootstrap::AlreadyDone(marker.mod_revision)),
        None => Ok(Bootstrap::SecretTaken),
    }
}

/// The stored record of the dev root token `secret`, storing it first if needed (with the
/// bootstrap marker, since a configured root token means bootstrap is done). Deletes stored
/// roots of earlier runs.
pub(crate) async fn ensure_root(
    storage: &dyn Storage,
    secret: &str,
    now: i64,
) -> Result<StoredToken, Error> {
    for _attempt in 0..5 {
        if let Some(token) = token_by_secret(storage, secret).await? {
            return Ok(token);
        }
        let (tokens, _) = tokens(storage).await?;
        let mut txn = Txn::new().when(Compare::Missing(secret_key(secret)));
        for stale in tokens.iter().filter(|token| token.record.dev_root) {
            txn = txn
                .when(Compare::ModRevision(
                    token_key(&stale.record.accessor_id),
                    stale.modify_index,
                ))
                .then(Op::Delete {
                    key: token_key(&stale.record.accessor_id),
                })
                .then(Op::Delete {
                    key: secret_key(&stale.record.secret_id),
                });
        }
        let record = TokenRecord {
            accessor_id: uuid::Uuid::new_v4().to_string(),
            secret_id: secret.to_owned(),
            name: "Bootstrap Token".to_owned(),
            token_type: TOKEN_TYPE_MANAGEMENT.to_owned(),
            policies: Vec::new(),
            global: true,
            create_time: now,
            expiration_time: None,
            expiration_ttl: 0,
            dev_root: true,
        };
        txn = txn.when(Compare::Missing(token_key(&record.accessor_id)));
        if storage.get(BOOTSTRAP.as_bytes()).await?.is_none() {
            txn = txn
                .when(Compare::Missing(BOOTSTRAP.as_bytes().to_vec()))
                .then(Op::Put {
                    key: BOOTSTRAP.as_bytes().to_vec(),
                    value: record.accessor_id.clone().into_bytes(),
                });
        }
        let result = storage.txn(put_token_ops(txn, &record)?).await?;
        if result.succeeded {
            return Ok(Stored {
                record,
                create_index: result.revision,
                modify_index: result.revision,
            });
        }
        // Someone else wrote meanwhile (most likely the same root token): look again.
    }
    Err(Error::Conflict(
        "ACL tokens changed concurrently while storing the root token; retry".to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(create_time: i64, expiration_ttl: i64) -> Stored<TokenRecord> {
        Stored {
            record: TokenRecord {
                accessor_id: "a".to_owned(),
                secret_id: "s".to_owned(),
                name: String::new(),
                token_type: TOKEN_TYPE_CLIENT.to_owned(),
                policies: vec!["p".to_owned()],
                global: false,
                create_time,
                expiration_time: (expiration_ttl != 0)
                    .then(|| create_time.saturating_add(expiration_ttl)),
                expiration_ttl,
                dev_root: false,
            },
            create_index: 1,
            modify_index: 1,
        }
    }

    #[test]
    fn token_times_render_like_go_rfc3339nano() {
        let times = |create_time: i64| {
            let view = token(create_time, 0).view();
            (view.create_time, view.expiration_time)
        };
        assert_eq!(times(0), ("1970-01-01T00:00:00Z".to_owned(), None));
        assert_eq!(times(951_782_400_123_000_000).0, "2000-02-29T00:00:00.123Z");
        assert_eq!(
            times(1_700_000_000_000_000_001).0,
            "2023-11-14T22:13:20.000000001Z"
        );
        assert_eq!(times(-1_000_000_000).0, "1969-12-31T23:59:59Z");
        let expiring = token(0, 90_000_000_000).view();
        assert_eq!(
            expiring.expiration_time.as_deref(),
            Some("1970-01-01T00:01:30Z")
        );
    }

    #[test]
    fn token_ttls_render_like_go_durations() {
        let ttl = |nanos: i64| token(0, nanos).view().expiration_ttl;
        assert_eq!(ttl(0).as_deref(), Some(""));
        assert_eq!(ttl(1).as_deref(), Some("1ns"));
        assert_eq!(ttl(1_500).as_deref(), Some("1.5µs"));
        assert_eq!(ttl(300_000_000).as_deref(), Some("300ms"));
        assert_eq!(ttl(1_500_000_000).as_deref(), Some("1.5s"));
        assert_eq!(ttl(90_000_000_000).as_deref(), Some("1m30s"));
        assert_eq!(ttl(3_600_000_000_000).as_deref(), Some("1h0m0s"));
        assert_eq!(ttl(86_400_000_000_000).as_deref(), Some("24h0m0s"));
        assert_eq!(ttl(-60_000_000_000).as_deref(), Some("-1m0s"));
        assert_eq!(ttl(i64::MIN).as_deref(), Some("-2562047h47m16.854775808s"));
    }
}
