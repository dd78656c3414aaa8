//! Stored VCS connections: OAuth clients and their OAuth tokens (see `store/mod.rs` for the
//! layout).
//!
//! ```text
//! platform/oauth-clients/<oc-id>                  OAuthClientRecord
//! platform/org-oauth-clients/<org>/<oc-id>        IdRef (the organization's clients)
//! platform/oauth-tokens/<ot-id>                   OAuthTokenRecord
//! platform/org-oauth-tokens/<org>/<ot-id>         IdRef (the organization's tokens)
//! ```
//!
//! Invariants: a client and its token are created and deleted together (TFE creates the token
//! from `oauth-token-string`); the VCS token itself is kept, because cloning needs it, and is
//! never rendered; lists are in creation order (the revision that created each index key).

use serde::{Deserialize, Serialize};
use storage::{Compare, Storage, Txn};

use crate::Error;
use crate::store::{IdRef, PREFIX, Stored, commit, delete, load, load_ids_in_creation_order, put};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OAuthClientRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) organization: String,
    pub(crate) name: Option<String>,
    /// `github`, `gitlab_hosted`, ... (pytfe's enum).
    pub(crate) service_provider: String,
    /// The host's web address; repositories clone from `<http-url>/<identifier>.git`.
    pub(crate) http_url: String,
    pub(crate) api_url: String,
    #[serde(default)]
    pub(crate) key: Option<String>,
    #[serde(default)]
    pub(crate) rsa_public_key: Option<String>,
    pub(crate) organization_scoped: bool,
    /// The client's token, when it was given one.
    #[serde(default)]
    pub(crate) token_id: Option<String>,
    pub(crate) created_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OAuthTokenRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) client_id: String,
    pub(crate) organization: String,
    /// The VCS host's token (used as the HTTPS password when cloning); never rendered.
    pub(crate) token: String,
    #[serde(default)]
    pub(crate) ssh_key: Option<String>,
    pub(crate) service_provider_user: String,
    pub(crate) created_at_ms: u64,
}

pub(crate) fn client_key(id: &str) -> Vec<u8> {
    format!("{PREFIX}oauth-clients/{id}").into_bytes()
}

fn org_clients_prefix(organization: &str) -> String {
    format!("{PREFIX}org-oauth-clients/{organization}/")
}

pub(crate) fn token_key(id: &str) -> Vec<u8> {
    format!("{PREFIX}oauth-tokens/{id}").into_bytes()
}

fn org_tokens_prefix(organization: &str) -> String {
    format!("{PREFIX}org-oauth-tokens/{organization}/")
}

pub(crate) async fn load_client(
    storage: &dyn Storage,
    id: &str,
) -> Result<Option<Stored<OAuthClientRecord>>, Error> {
    load(storage, &client_key(id)).await
}

pub(crate) async fn load_token(
    storage: &dyn Storage,
    id: &str,
) -> Result<Option<Stored<OAuthTokenRecord>>, Error> {
    load(storage, &token_key(id)).await
}

/// An organization's clients, oldest first.
pub(crate) async fn load_org_clients(
    storage: &dyn Storage,
    organization: &str,
) -> Result<Vec<OAuthClientRecord>, Error> {
    let mut clients = Vec::new();
    for id in load_ids_in_creation_order(storage, &org_clients_prefix(organization)).await? {
        if let Some(client) = load_client(storage, &id).await? {
            clients.push(client.record);
        }
    }
    Ok(clients)
}

/// An organization's tokens, oldest first.
pub(crate) async fn load_org_tokens(
    storage: &dyn Storage,
    organization: &str,
) -> Result<Vec<OAuthTokenRecord>, Error> {
    let mut tokens = Vec::new();
    for id in load_ids_in_creation_order(storage, &org_tokens_prefix(organization)).await? {
        if let Some(token) = load_token(storage, &id).await? {
            tokens.push(token.record);
        }
    }
    Ok(tokens)
}

/// Creates `client` and, when given, its `token`, while the organization is at `org_revision`.
pub(crate) async fn create_client(
    storage: &dyn Storage,
    organization_key: Vec<u8>,
    org_revision: storage::Revision,
    client: &OAuthClientRecord,
    token: Option<&OAuthTokenRecord>,
) -> Result<bool, Error> {
    let mut txn = Txn::new()
        .when(Compare::ModRevision(organization_key, org_revision))
        .when(Compare::Missing(client_key(&client.id)))
        .then(put(client_key(&client.id), client)?)
        .then(put(
            format!("{}{}", org_clients_prefix(&client.organization), client.id).into_bytes(),
            &IdRef::new(&client.id),
        )?);
    if let Some(token) = token {
        txn = txn.then(put(token_key(&token.id), token)?).then(put(
            format!("{}{}", org_tokens_prefix(&token.organization), token.id).into_bytes(),
            &IdRef::new(&token.id),
        )?);
    }
    commit(storage, txn).await
}

/// Replaces the client read at `previous`, and puts/deletes tokens as given.
pub(crate) async fn update_client(
    storage: &dyn Storage,
    previous: &Stored<OAuthClientRecord>,
    next: &OAuthClientRecord,
    put_token: Option<&OAuthTokenRecord>,
    delete_token: Option<&str>,
) -> Result<bool, Error> {
    let mut txn = Txn::new()
        .when(Compare::ModRevision(
            client_key(&next.id),
            previous.revision,
        ))
        .then(put(client_key(&next.id), next)?);
    if let Some(id) = delete_token {
        txn = txn.then(delete(token_key(id))).then(delete(
            format!("{}{id}", org_tokens_prefix(&next.organization)).into_bytes(),
        ));
    }
    if let Some(token) = put_token {
        txn = txn.then(put(token_key(&token.id), token)?).then(put(
            format!("{}{}", org_tokens_prefix(&token.organization), token.id).into_bytes(),
            &IdRef::new(&token.id),
        )?);
    }
    commit(storage, txn).await
}

/// Replaces the token read at `previous`.
pub(crate) async fn update_token(
    storage: &dyn Storage,
    previous: &Stored<OAuthTokenRecord>,
    next: &OAuthTokenRecord,
) -> Result<bool, Error> {
    let txn = Txn::new()
        .when(Compare::ModRevision(token_key(&next.id), previous.revision))
        .then(put(token_key(&next.id), next)?);
    commit(storage, txn).await
}

/// Deletes the client read at `previous` and its token.
pub(crate) async fn delete_client(
    storage: &dyn Storage,
    previous: &Stored<OAuthClientRecord>,
) -> Result<bool, Error> {
    let client = &previous.record;
    let mut txn = Txn::new()
        .when(Compare::ModRevision(
            client_key(&client.id),
            previous.revision,
        ))
        .then(delete(client_key(&client.id)))
        .then(delete(
            format!("{}{}", org_clients_prefix(&client.organization), client.id).into_bytes(),
        ));
    if let Some(id) = &client.token_id {
        txn = txn.then(delete(token_key(id))).then(delete(
            format!("{}{id}", org_tokens_prefix(&client.organization)).into_bytes(),
        ));
    }
    commit(storage, txn).await
}

/// Deletes a token (the client keeps no token afterwards).
pub(crate) async fn delete_token(
    storage: &dyn Storage,
    token: &Stored<OAuthTokenRecord>,
    client: Option<(&Stored<OAuthClientRecord>, &OAuthClientRecord)>,
) -> Result<bool, Error> {
    let record = &token.record;
    let mut txn = Txn::new()
        .when(Compare::ModRevision(token_key(&record.id), token.revision))
        .then(delete(token_key(&record.id)))
        .then(delete(
            format!("{}{}", org_tokens_prefix(&record.organization), record.id).into_bytes(),
        ));
    if let Some((previous, next)) = client {
        txn = txn
            .when(Compare::ModRevision(
                client_key(&next.id),
                previous.revision,
            ))
            .then(put(client_key(&next.id), next)?);
    }
    commit(storage, txn).await
}
