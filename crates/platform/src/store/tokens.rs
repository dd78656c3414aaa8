//! Stored API tokens: user, team and organization tokens (see `store/mod.rs` for the layout).
//!
//! Invariants:
//! - A token is stored under the SHA-256 of its secret; the secret itself is never stored
//!   and is shown once, in the create response.
//! - `token-ids/<id>` and the owner's index (`user-tokens/…`, `team-tokens/<team>`,
//!   `organization-tokens/<org>`) are written and deleted with the token record.
//! - A team and an organization have at most one token each; issuing a new one deletes the
//!   old one in the same transaction (TFE's "regenerate").

use serde::{Deserialize, Serialize};
use storage::{Op, Storage};

use crate::Error;
use crate::store::{PREFIX, RECORD_VERSION, Stored, load};

/// Whose token it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub(crate) enum TokenOwner {
    User {
        user_id: String,
    },
    Team {
        team_id: String,
        organization: String,
    },
    Organization {
        organization: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TokenRecord {
    pub(crate) version: u32,
    /// `at-<16 base58>`.
    pub(crate) id: String,
    pub(crate) hash: String,
    pub(crate) owner: TokenOwner,
    #[serde(default)]
    pub(crate) description: Option<String>,
    pub(crate) created_at_ms: u64,
    #[serde(default)]
    pub(crate) expired_at_ms: Option<u64>,
    /// The user who issued it (`None` for tokens made at bootstrap).
    #[serde(default)]
    pub(crate) created_by: Option<String>,
}

/// An index record pointing at a token by its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HashRef {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) hash: String,
}

impl HashRef {
    pub(crate) fn of(token: &TokenRecord) -> HashRef {
        HashRef {
            version: RECORD_VERSION,
            id: token.id.clone(),
            hash: token.hash.clone(),
        }
    }
}

pub(crate) fn token_key(hash: &str) -> Vec<u8> {
    format!("{PREFIX}tokens/{hash}").into_bytes()
}

pub(crate) fn token_id_key(id: &str) -> Vec<u8> {
    format!("{PREFIX}token-ids/{id}").into_bytes()
}

pub(crate) fn user_tokens_prefix(user_id: &str) -> String {
    format!("{PREFIX}user-tokens/{user_id}/")
}

pub(crate) fn user_token_key(user_id: &str, id: &str) -> Vec<u8> {
    format!("{PREFIX}user-tokens/{user_id}/{id}").into_bytes()
}

pub(crate) fn team_token_key(team_id: &str) -> Vec<u8> {
    format!("{PREFIX}team-tokens/{team_id}").into_bytes()
}

pub(crate) fn organization_token_key(organization: &str) -> Vec<u8> {
    format!("{PREFIX}organization-tokens/{organization}").into_bytes()
}

/// The key of the owner's index record for `token`.
pub(crate) fn owner_index_key(token: &TokenRecord) -> Vec<u8> {
    match &token.owner {
        TokenOwner::User { user_id } => user_token_key(user_id, &token.id),
        TokenOwner::Team { team_id, .. } => team_token_key(team_id),
        TokenOwner::Organization { organization } => organization_token_key(organization),
    }
}

pub(crate) async fn load_token_by_hash(
    storage: &dyn Storage,
    hash: &str,
) -> Result<Option<Stored<TokenRecord>>, Error> {
    load(storage, &token_key(hash)).await
}

pub(crate) async fn load_token(
    storage: &dyn Storage,
    id: &str,
) -> Result<Option<Stored<TokenRecord>>, Error> {
    match load::<HashRef>(storage, &token_id_key(id)).await? {
        Some(index) => load_token_by_hash(storage, &index.record.hash).await,
        None => Ok(None),
    }
}

/// The token an owner index record (`team-tokens/<team>`, ...) points at.
pub(crate) async fn load_indexed_token(
    storage: &dyn Storage,
    index_key: &[u8],
) -> Result<Option<Stored<TokenRecord>>, Error> {
    match load::<HashRef>(storage, index_key).await? {
        Some(index) => load_token_by_hash(storage, &index.record.hash).await,
        None => Ok(None),
    }
}

/// A user's tokens, in creation order.
pub(crate) async fn load_user_tokens(
    storage: &dyn Storage,
    user_id: &str,
) -> Result<Vec<TokenRecord>, Error> {
    let mut tokens = Vec::new();
    for index in super::load_all::<HashRef>(storage, &user_tokens_prefix(user_id)).await? {
        if let Some(token) = load_token_by_hash(storage, &index.record.hash).await? {
            tokens.push(token);
        }
    }
    tokens.sort_by_key(|token| token.created);
    Ok(tokens.into_iter().map(|token| token.record).collect())
}

/// The puts that store `token` with its indexes.
pub(crate) fn save_token_ops(token: &TokenRecord) -> Result<Vec<Op>, Error> {
    Ok(vec![
        super::put(token_key(&token.hash), token)?,
        super::put(token_id_key(&token.id), &HashRef::of(token))?,
        super::put(owner_index_key(token), &HashRef::of(token))?,
    ])
}

/// The deletes that remove `token` with its indexes.
pub(crate) fn remove_token_ops(token: &TokenRecord) -> Vec<Op> {
    vec![
        Op::Delete {
            key: token_key(&token.hash),
        },
        Op::Delete {
            key: token_id_key(&token.id),
        },
        Op::Delete {
            key: owner_index_key(token),
        },
    ]
}

pub(crate) async fn delete_team_token_ops(
    storage: &dyn Storage,
    team_id: &str,
) -> Result<Vec<Op>, Error> {
    Ok(load_indexed_token(storage, &team_token_key(team_id))
        .await?
        .map(|token| remove_token_ops(&token.record))
        .unwrap_or_default())
}

pub(crate) async fn delete_organization_token_ops(
    storage: &dyn Storage,
    organization: &str,
) -> Result<Vec<Op>, Error> {
    Ok(
        load_indexed_token(storage, &organization_token_key(organization))
            .await?
            .map(|token| remove_token_ops(&token.record))
            .unwrap_or_default(),
    )
}
