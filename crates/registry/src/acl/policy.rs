//! `/v1/acl/policy*` and `/v1/acl/policies`: ACL policies in Consul's shape.
//!
//! | method | path | answer |
//! |---|---|---|
//! | PUT | `/v1/acl/policy` | the created policy |
//! | GET | `/v1/acl/policy/:id` | the policy (blocking) |
//! | PUT | `/v1/acl/policy/:id` | the updated policy |
//! | DELETE | `/v1/acl/policy/:id` | `true` |
//! | GET | `/v1/acl/policy/name/:name` | the policy (blocking) |
//! | GET | `/v1/acl/policies` | policy stubs, without `Rules` (blocking) |
//!
//! Every endpoint answers 401 `ACL support disabled` when ACLs are off and needs a management
//! token (403 `Permission denied: ... lacks permission 'acl:read'` / `'acl:write'`). An unknown
//! policy is a 403 `ACL not found`, as Consul answers (py-consul relies on it not being a 404).
//! Validation errors, which Consul answers with 500, are 400 with Consul's messages; rules that
//! do not parse are 400 `Failed to parse policy: <reason>`. Deleting an unknown policy succeeds.

use axum::extract::{Path, State as AxumState};
use http_kit::Json;
use http_kit::RawBody;
use serde::{Deserialize, Serialize};

use super::{Authz, decode_body, ensure_enabled};
use crate::acl_rules;
use crate::domain::acl::{self as domain, PolicyWrite};
use crate::meta::{Indexed, QueryParams};
use crate::store::Stored;
use crate::store::acl::{self as store, PolicyRecord};
use crate::{Error, State};

/// A policy as Consul shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct PolicyView {
    #[serde(rename = "ID")]
    id: String,
    name: String,
    description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    rules: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    datacenters: Vec<String>,
    hash: String,
    create_index: u64,
    modify_index: u64,
}

impl PolicyView {
    fn full(stored: Stored<PolicyRecord>) -> PolicyView {
        let rules = stored.record.rules.clone();
        PolicyView {
            rules: Some(rules),
            ..PolicyView::stub(stored)
        }
    }

    /// The list form (Consul's `ACLPolicyListStub`): no `Rules`.
    fn stub(stored: Stored<PolicyRecord>) -> PolicyView {
        PolicyView {
            id: stored.record.id,
            name: stored.record.name,
            description: stored.record.description,
            rules: None,
            datacenters: stored.record.datacenters,
            hash: stored.record.hash,
            create_index: stored.create_index,
            modify_index: stored.modify_index,
        }
    }
}

/// A policy create or update body.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PolicyBody {
    #[serde(rename = "ID")]
    id: Option<String>,
    name: Option<String>,
    description: Option<String>,
    rules: Option<String>,
    datacenters: Option<Vec<String>>,
}

const POLICY_FIELDS: &[&str] = &["ID", "Name", "Description", "Rules", "Datacenters"];

impl PolicyBody {
    fn decode(bytes: &[u8]) -> Result<PolicyBody, Error> {
        decode_body(bytes, "Policy", POLICY_FIELDS, |_| {})
    }

    /// Validates the body into a write (Consul's `PolicySet` checks, in its words).
    fn into_write(self) -> Result<PolicyWrite, Error> {
        let name = self.name.unwrap_or_default();
        if name.is_empty() {
            return Err(Error::Invalid("Invalid Policy: no Name is set".to_owned()));
        }
        if !valid_policy_name(&name) {
            return Err(Error::Invalid(
                "Invalid Policy: invalid Name. Only alphanumeric characters, '-' and '_' are \
                 allowed"
                    .to_owned(),
            ));
        }
        let rules = self.rules.unwrap_or_default();
        acl_rules::parse(&rules)
            .map_err(|reason| Error::Invalid(format!("Failed to parse policy: {reason}")))?;
        let datacenters = self.datacenters.unwrap_or_default();
        if datacenters.iter().any(String::is_empty) {
            return Err(Error::Invalid(
                "Invalid Policy: a datacenter name is empty".to_owned(),
            ));
        }
        Ok(PolicyWrite {
            name,
            description: self.description.unwrap_or_default(),
            rules,
            datacenters,
        })
    }
}

/// Consul's `validPolicyName`: 1 to 128 of `A-Z a-z 0-9 - _`.
fn valid_policy_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `PUT /v1/acl/policy`: creates a policy; the ID is generated.
pub(crate) async fn create_policy(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
    RawBody { bytes, .. }: RawBody<Error>,
) -> Result<Json<PolicyView>, Error> {
    ensure_enabled(&state)?;
    authz.require_management("acl:write")?;
    query.options(&state)?;
    let body = PolicyBody::decode(&bytes)?;
    if body.id.as_deref().is_some_and(|id| !id.is_empty()) {
        return Err(Error::BadRequest(
            "Cannot specify the ID when creating a new policy".to_owned(),
        ));
    }
    let stored = domain::create_policy(state.storage(), body.into_write()?).await?;
    Ok(Json(PolicyView::full(stored)))
}

/// `GET /v1/acl/policy/:id`: one policy; blocking on it.
pub(crate) async fn read_policy(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<PolicyView>, Error> {
    ensure_enabled(&state)?;
    authz.require_management("acl:read")?;
    let options = query.options(&state)?;
    let storage = state.storage();
    let (found, index) = options
        .read(storage, store::policy_range(&id), || {
            store::policy(storage, &id)
        })
        .await?;
    let stored = found.ok_or(Error::AclNotFound)?;
    Ok(Indexed::new(index, PolicyView::full(stored)))
}

/// `GET /v1/acl/policy/name/:name`: one policy by name; blocking on every policy.
pub(crate) async fn read_policy_by_name(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(name): Path<String>,
    query: QueryParams,
) -> Result<Indexed<PolicyView>, Error> {
    ensure_enabled(&state)?;
    authz.require_management("acl:read")?;
    let options = query.options(&state)?;
    let storage = state.storage();
    let (found, index) = options
        .read(storage, store::policies_range(), || {
            store::policy_by_name(storage, &name)
        })
        .await?;
    let stored = found.ok_or(Error::AclNotFound)?;
    Ok(Indexed::new(index, PolicyView::full(stored)))
}

/// `PUT /v1/acl/policy/:id`: replaces a policy (the built-in one keeps its rules and
/// datacenters) and updates every token linked to it.
pub(crate) async fn update_policy(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(id): Path<String>,
    query: QueryParams,
    RawBody { bytes, .. }: RawBody<Error>,
) -> Result<Json<PolicyView>, Error> {
    ensure_enabled(&state)?;
    authz.require_management("acl:write")?;
    query.options(&state)?;
    let body = PolicyBody::decode(&bytes)?;
    if let Some(body_id) = body.id.as_deref()
        && !body_id.is_empty()
        && body_id != id
    {
        return Err(Error::BadRequest(
            "Policy ID in URL and payload do not match".to_owned(),
        ));
    }
    let write = body.into_write()?;
    let stored =
        domain::update_policy(state.storage(), &state.config().datacenter, &id, write).await?;
    Ok(Json(PolicyView::full(stored)))
}

/// `DELETE /v1/acl/policy/:id`: `true`; the policy is unlinked from every token.
pub(crate) async fn delete_policy(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(id): Path<String>,
    query: QueryParams,
) -> Result<Json<bool>, Error> {
    ensure_enabled(&state)?;
    authz.require_management("acl:write")?;
    query.options(&state)?;
    domain::delete_policy(state.storage(), &state.config().datacenter, &id).await?;
    Ok(Json(true))
}

/// `GET /v1/acl/policies`: every policy, by ID, without rules.
pub(crate) async fn list_policies(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<Indexed<Vec<PolicyView>>, Error> {
    ensure_enabled(&state)?;
    authz.require_management("acl:read")?;
    let options = query.options(&state)?;
    let storage = state.storage();
    let (policies, index) = options
        .read(storage, store::policies_range(), || {
            store::policies(storage)
        })
        .await?;
    Ok(Indexed::new(
        index,
        policies.into_iter().map(PolicyView::stub).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_follow_consul() {
        assert!(valid_policy_name("node-read_1"));
        assert!(!valid_policy_name(""));
        assert!(!valid_policy_name("a b"));
        assert!(!valid_policy_name("a/b"));
        assert!(!valid_policy_name(&"x".repeat(129)));
    }

    #[test]
    fn policy_bodies_decode_case_insensitively() {
        let body =
            PolicyBody::decode(br#"{"name": "n", "RULES": "", "description": "d"}"#).unwrap();
        assert_eq!(body.name.as_deref(), Some("n"));
        assert_eq!(body.rules.as_deref(), Some(""));
        assert_eq!(body.description.as_deref(), Some("d"));
        assert!(PolicyBody::decode(b"").unwrap().name.is_none());
        assert!(PolicyBody::decode(b"[1]").is_err());
        assert!(PolicyBody::decode(br#"{"Name": 5}"#).is_err());
    }
}
