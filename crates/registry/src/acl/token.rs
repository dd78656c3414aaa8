//! `/v1/acl/token*` and `/v1/acl/tokens`: ACL tokens in Consul's shape.
//!
//! | method | path | answer |
//! |---|---|---|
//! | PUT | `/v1/acl/token` | the created token |
//! | GET | `/v1/acl/token/self` | the request's own token (no management needed) |
//! | GET | `/v1/acl/token/:accessor_id` | the token (blocking) |
//! | PUT | `/v1/acl/token/:accessor_id` | the updated token |
//! | DELETE | `/v1/acl/token/:accessor_id` | `true` |
//! | PUT | `/v1/acl/token/:accessor_id/clone` | a copy with new IDs |
//! | GET | `/v1/acl/tokens` | every token, `?policy=<id>` to filter (blocking) |
//!
//! Every endpoint answers 401 `ACL support disabled` when ACLs are off; all but `token/self`
//! need a management token. Policies are linked by `ID` or `Name`; AccessorID and SecretID are
//! generated unless given (then they must be UUIDs outside Consul's reserved range and unused).
//! An update replaces Description and Policies, as Consul's does; it may not change the
//! SecretID or Local. The namespace of a new token is its `Namespace` field, else `ns`, else
//! `X-Registry-Namespace`; none means the token has none (requests then use `default`).
//! Roles, service and node identities, templated policies and expiration are not supported:
//! asking for them is a 400 rather than a token that silently lacks them. An unknown token is
//! a 403 `ACL not found`; deleting an unknown token succeeds.

use axum::extract::{Path, State as AxumState};
use http::HeaderMap;
use http_kit::Json;
use http_kit::RawBody;
use serde::{Deserialize, Serialize};

use super::{Authz, decode_body, ensure_enabled, fold_keys};
use crate::domain::acl::{self as domain, LinkRequest, TokenWrite};
use crate::meta::{Indexed, QueryParams, requested_namespace, valid_namespace};
use crate::store::Stored;
use crate::store::acl::{self as store, TokenRecord};
use crate::{Error, State};

/// A policy link as Consul shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct LinkView {
    #[serde(rename = "ID")]
    id: String,
    name: String,
}

/// A token as Consul shows it (also its list form: Consul's stubs carry the same fields).
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct TokenView {
    #[serde(rename = "AccessorID")]
    accessor_id: String,
    #[serde(rename = "SecretID")]
    secret_id: String,
    description: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    policies: Vec<LinkView>,
    local: bool,
    create_time: String,
    hash: String,
    create_index: u64,
    modify_index: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
}

impl From<Stored<TokenRecord>> for TokenView {
    fn from(stored: Stored<TokenRecord>) -> TokenView {
        let token = stored.record;
        TokenView {
            accessor_id: token.accessor_id,
            secret_id: token.secret_id,
            description: token.description,
            policies: token
                .policies
                .into_iter()
                .map(|link| LinkView {
                    id: link.id,
                    name: link.name,
                })
                .collect(),
            local: token.local,
            create_time: token.create_time,
            hash: token.hash,
            create_index: stored.create_index,
            modify_index: stored.modify_index,
            namespace: token.namespace,
        }
    }
}

/// A token create, update or clone body.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TokenBody {
    #[serde(rename = "AccessorID")]
    accessor_id: Option<String>,
    #[serde(rename = "SecretID")]
    secret_id: Option<String>,
    description: Option<String>,
    policies: Option<Vec<LinkBody>>,
    local: Option<bool>,
    namespace: Option<String>,
    roles: Option<Vec<serde_json::Value>>,
    service_identities: Option<Vec<serde_json::Value>>,
    node_identities: Option<Vec<serde_json::Value>>,
    templated_policies: Option<Vec<serde_json::Value>>,
    expiration_time: Option<serde_json::Value>,
    #[serde(rename = "ExpirationTTL")]
    expiration_ttl: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct LinkBody {
    #[serde(rename = "ID")]
    id: Option<String>,
    name: Option<String>,
}

const TOKEN_FIELDS: &[&str] = &[
    "AccessorID",
    "SecretID",
    "Description",
    "Policies",
    "Local",
    "Namespace",
    "Roles",
    "ServiceIdentities",
    "NodeIdentities",
    "TemplatedPolicies",
    "ExpirationTime",
    "ExpirationTTL",
];

impl TokenBody {
    fn decode(bytes: &[u8]) -> Result<TokenBody, Error> {
        decode_body(bytes, "Token", TOKEN_FIELDS, |value| {
            if let Some(serde_json::Value::Array(links)) = value.get_mut("Policies") {
                for link in links {
                    fold_keys(link, &["ID", "Name"]);
                }
            }
        })
    }

    /// The write this body asks for; features cairn lacks are refused.
    fn into_write(self, namespace: Option<String>) -> Result<TokenWrite, Error> {
        let unsupported = [
            ("Roles", self.roles.as_ref().is_some_and(|v| !v.is_empty())),
            (
                "ServiceIdentities",
                self.service_identities
                    .as_ref()
                    .is_some_and(|v| !v.is_empty()),
            ),
            (
                "NodeIdentities",
                self.node_identities.as_ref().is_some_and(|v| !v.is_empty()),
            ),
            (
                "TemplatedPolicies",
                self.templated_policies
                    .as_ref()
                    .is_some_and(|v| !v.is_empty()),
            ),
            (
                "ExpirationTime",
                self.expiration_time.as_ref().is_some_and(|v| !v.is_null()),
            ),
            (
                "ExpirationTTL",
                self.expiration_ttl.as_ref().is_some_and(|v| {
                    !(v.is_null() || v == &serde_json::json!(0) || v == "" || v == "0s")
                }),
            ),
        ];
        if let Some((field, _)) = unsupported.iter().find(|(_, set)| *set) {
            return Err(Error::BadRequest(format!(
                "Invalid Token: {field} are not supported by this server"
            )));
        }
        let non_empty = |value: Option<String>| value.filter(|v| !v.is_empty());
        let namespace = non_empty(self.namespace).or(namespace);
        if let Some(namespace) = &namespace
            && !valid_namespace(namespace)
        {
            return Err(Error::BadRequest(format!(
                "Invalid namespace {namespace:?}"
            )));
        }
        Ok(TokenWrite {
            accessor_id: non_empty(self.accessor_id),
            secret_id: non_empty(self.secret_id),
            description: self.description.unwrap_or_default(),
            policies: self
                .policies
                .unwrap_or_default()
                .into_iter()
                .map(|link| LinkRequest {
                    id: link.id.unwrap_or_default(),
                    name: link.name.unwrap_or_default(),
                })
                .collect(),
            local: self.local.unwrap_or(false),
            namespace,
        })
    }
}

/// `PUT /v1/acl/token`: creates a token.
pub(crate) async fn create_token(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
    headers: HeaderMap,
    RawBody { bytes, .. }: RawBody<Error>,
) -> Result<Json<TokenView>, Error> {
    ensure_enabled(&state)?;
    authz.require_management("acl:write")?;
    query.options(&state)?;
    let write = TokenBody::decode(&bytes)?
        .into_write(requested_namespace(&query, &headers).map(str::to_owned))?;
    let stored = domain::create_token(
        state.storage(),
        &state.config().datacenter,
        write,
        state.clock().now_ms(),
    )
    .await?;
    Ok(Json(stored.into()))
}

/// `GET /v1/acl/token/self`: the token the request presents (the anonymous token without one).
pub(crate) async fn read_token_self(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<Indexed<TokenView>, Error> {
    ensure_enabled(&state)?;
    query.options(&state)?;
    let storage = state.storage();
    let index = storage
        .range_revision(store::token_range(authz.accessor()))
        .await?;
    let stored = store::token(storage, authz.accessor())
        .await?
        .ok_or(Error::AclNotFound)?;
    Ok(Indexed::new(index, stored.into()))
}

/// `GET /v1/acl/token/:accessor_id`: one token; blocking on it.
pub(crate) async fn read_token(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(accessor): Path<String>,
    query: QueryParams,
) -> Result<Indexed<TokenView>, Error> {
    ensure_enabled(&state)?;
    authz.require_management("acl:read")?;
    let options = query.options(&state)?;
    let storage = state.storage();
    let (found, index) = options
        .read(storage, store::token_range(&accessor), || {
            store::token(storage, &accessor)
        })
        .await?;
    let stored = found.ok_or(Error::AclNotFound)?;
    Ok(Indexed::new(index, stored.into()))
}

/// `PUT /v1/acl/token/:accessor_id`: replaces a token's description and policies.
pub(crate) async fn update_token(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(accessor): Path<String>,
    query: QueryParams,
    RawBody { bytes, .. }: RawBody<Error>,
) -> Result<Json<TokenView>, Error> {
    ensure_enabled(&state)?;
    authz.require_management("acl:write")?;
    query.options(&state)?;
    let body = TokenBody::decode(&bytes)?;
    if let Some(body_accessor) = body.accessor_id.as_deref()
        && !body_accessor.is_empty()
        && body_accessor != accessor
    {
        return Err(Error::BadRequest(
            "Token Accessor ID in URL and payload do not match".to_owned(),
        ));
    }
    let write = body.into_write(None)?;
    let stored = domain::update_token(
        state.storage(),
        &state.config().datacenter,
        &accessor,
        write,
    )
    .await?;
    Ok(Json(stored.into()))
}

/// `PUT /v1/acl/token/:accessor_id/clone`: a new token with the same policies; `Description`
/// in the body replaces the copied one.
pub(crate) async fn clone_token(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(accessor): Path<String>,
    query: QueryParams,
    RawBody { bytes, .. }: RawBody<Error>,
) -> Result<Json<TokenView>, Error> {
    ensure_enabled(&state)?;
    authz.require_management("acl:write")?;
    query.options(&state)?;
    let body = TokenBody::decode(&bytes)?;
    let stored = domain::clone_token(
        state.storage(),
        &state.config().datacenter,
        &accessor,
        body.description.unwrap_or_default(),
        state.clock().now_ms(),
    )
    .await?;
    Ok(Json(stored.into()))
}

/// `DELETE /v1/acl/token/:accessor_id`: `true`. The anonymous token and the request's own token
/// cannot be deleted.
pub(crate) async fn delete_token(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(accessor): Path<String>,
    query: QueryParams,
) -> Result<Json<bool>, Error> {
    ensure_enabled(&state)?;
    authz.require_management("acl:write")?;
    query.options(&state)?;
    domain::delete_token(state.storage(), &accessor, authz.accessor()).await?;
    Ok(Json(true))
}

/// `GET /v1/acl/tokens`: every token by AccessorID; `?policy=<id>` keeps those linked to it.
pub(crate) async fn list_tokens(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<Indexed<Vec<TokenView>>, Error> {
    ensure_enabled(&state)?;
    authz.require_management("acl:read")?;
    let options = query.options(&state)?;
    let policy = query.get("policy").filter(|id| !id.is_empty());
    let storage = state.storage();
    let (tokens, index) = options
        .read(storage, store::tokens_range(), || store::tokens(storage))
        .await?;
    let tokens = tokens
        .into_iter()
        .filter(|stored| {
            policy.is_none_or(|id| stored.record.policies.iter().any(|link| link.id == id))
        })
        .map(TokenView::from)
        .collect();
    Ok(Indexed::new(index, tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_bodies_decode_case_insensitively() {
        let body = TokenBody::decode(
            br#"{"description": "d", "policies": [{"id": "p1"}, {"NAME": "n"}], "Local": true}"#,
        )
        .unwrap();
        let write = body.into_write(None).unwrap();
        assert_eq!(write.description, "d");
        assert_eq!(write.policies[0].id, "p1");
        assert_eq!(write.policies[1].name, "n");
        assert!(write.local);
    }

    #[test]
    fn unsupported_token_features_are_refused() {
        for body in [
            r#"{"Roles": [{"Name": "r"}]}"#,
            r#"{"ServiceIdentities": [{"ServiceName": "web"}]}"#,
            r#"{"ExpirationTTL": "1h"}"#,
        ] {
            let err = TokenBody::decode(body.as_bytes())
                .unwrap()
                .into_write(None)
                .unwrap_err();
            assert!(err.to_string().contains("not supported"), "{body}: {err}");
        }
        for body in [r#"{"Roles": []}"#, r#"{"ExpirationTTL": "0s"}"#, "{}"] {
            assert!(
                TokenBody::decode(body.as_bytes())
                    .unwrap()
                    .into_write(None)
                    .is_ok(),
                "{body}"
            );
        }
    }

    #[test]
    fn token_namespace_comes_from_the_body_then_the_request() {
        let write = TokenBody::decode(br#"{"Namespace": "team-a"}"#)
            .unwrap()
            .into_write(Some("other".to_owned()))
            .unwrap();
        assert_eq!(write.namespace.as_deref(), Some("team-a"));
        let write = TokenBody::decode(b"{}")
            .unwrap()
            .into_write(Some("other".to_owned()))
            .unwrap();
        assert_eq!(write.namespace.as_deref(), Some("other"));
        assert!(
            TokenBody::decode(br#"{"Namespace": "a/b"}"#)
                .unwrap()
                .into_write(None)
                .is_err()
        );
    }
}
