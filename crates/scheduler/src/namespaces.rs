//! Namespaces (`/v1/namespaces`, `/v1/namespace/{name}`) in Nomad's shape, and [`exists`], which
//! job registration asks.
//!
//! Where it sits: routed from `routes.rs`; records live in storage under
//! `scheduler/namespaces/<name>` (JSON, outside the in-memory snapshot), read per request.
//! `CreateIndex`/`ModifyIndex` are the storage revisions that created and last wrote a record;
//! the list index is the range revision of the prefix.
//!
//! Behaviour (upstream's `nomad/namespace_endpoint.go`):
//! - `default` always exists. Until written it is upstream's built-in (`Default shared
//!   namespace`, indexes 1); it may be updated but never deleted.
//! - Lists and reads show only namespaces the token may do something in (any capability that is
//!   not `deny`); reading a hidden namespace is a 403, a missing one a 404
//!   `Namespace not found`. Both block with `?index=&wait=`.
//! - Writes and deletes need a management token. A write's name must match
//!   `^[a-zA-Z0-9-]{1,128}$` and the path's name; the description is at most 256 bytes.
//!   Deleting a namespace that still has non-terminal jobs or allocations is refused (upstream
//!   answers these validation failures with 500s; here they are 400s); deleting a missing
//!   namespace succeeds.
//! - Writes answer 200 with an empty body and `X-Scheduler-Index`, as upstream.
//!
//! Invariants: a record's `Name` equals its key; `exists` is true exactly for `default` and the
//! stored namespaces. The check for jobs before a delete reads the current snapshot: a job
//! registered into the namespace at the same instant can slip past it (upstream has the same
//! window between its check and its Raft apply).

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use storage::{KeyRange, KeyValue, Storage, StorageExt};

use crate::Error;
use crate::acl::{Authz, Fields, decode, null_as_default};
use crate::meta::{Indexed, QueryParams, index_headers};
use crate::structs::{DEFAULT_NAMESPACE, JOB_STATUS_DEAD};

const PREFIX: &str = "scheduler/namespaces/";
const DEFAULT_DESCRIPTION: &str = "Default shared namespace";
const MAX_DESCRIPTION: usize = 256;

fn key(name: &str) -> Vec<u8> {
    format!("{PREFIX}{name}").into_bytes()
}

/// What is stored for a namespace (and accepted in a write body).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct NamespaceRecord {
    #[serde(deserialize_with = "null_as_default")]
    name: String,
    #[serde(deserialize_with = "null_as_default")]
    description: String,
    #[serde(deserialize_with = "null_as_default")]
    quota: String,
    capabilities: Option<NamespaceCapabilities>,
    node_pool_configuration: Option<NodePoolConfiguration>,
    meta: Option<BTreeMap<String, String>>,
}

/// Upstream's `NamespaceCapabilities`: drivers and network modes jobs may use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct NamespaceCapabilities {
    enabled_task_drivers: Option<Vec<String>>,
    disabled_task_drivers: Option<Vec<String>>,
    enabled_network_modes: Option<Vec<String>>,
    disabled_network_modes: Option<Vec<String>>,
}

/// Upstream's `NamespaceNodePoolConfiguration`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct NodePoolConfiguration {
    #[serde(deserialize_with = "null_as_default")]
    default: String,
    allowed: Option<Vec<String>>,
    denied: Option<Vec<String>>,
}

const FIELDS: Fields = Fields {
    names: &[
        "Name",
        "Description",
        "Quota",
        "Capabilities",
        "NodePoolConfiguration",
        "Meta",
    ],
    nested: &[
        (
            "Capabilities",
            Fields::flat(&[
                "EnabledTaskDrivers",
                "DisabledTaskDrivers",
                "EnabledNetworkModes",
                "DisabledNetworkModes",
            ]),
        ),
        (
            "NodePoolConfiguration",
            Fields::flat(&["Default", "Allowed", "Denied"]),
        ),
    ],
};

/// A namespace as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct NamespaceView {
    #[serde(flatten)]
    record: NamespaceRecord,
    create_index: u64,
    modify_index: u64,
}

impl NamespaceView {
    fn decode(kv: &KeyValue) -> Result<NamespaceView, Error> {
        let record = serde_json::from_slice(&kv.value).map_err(|err| {
            Error::Internal(format!(
                "corrupt namespace at {}: {err}",
                String::from_utf8_lossy(&kv.key)
            ))
        })?;
        Ok(NamespaceView {
            record,
            create_index: kv.create_revision,
            modify_index: kv.mod_revision,
        })
    }

    /// Upstream's built-in `default`, before anyone writes it.
    fn builtin_default() -> NamespaceView {
        NamespaceView {
            record: NamespaceRecord {
                name: DEFAULT_NAMESPACE.to_owned(),
                description: DEFAULT_DESCRIPTION.to_owned(),
                ..NamespaceRecord::default()
            },
            create_index: 1,
            modify_index: 1,
        }
    }
}

fn path_param(path: Result<Path<String>, PathRejection>) -> Result<String, Error> {
    path.map(|Path(value)| value)
        .map_err(|err| Error::BadRequest(format!("invalid path parameter: {err}")))
}

async fn get(storage: &dyn Storage, name: &str) -> Result<Option<NamespaceView>, Error> {
    match storage.get(&key(name)).await? {
        Some(kv) => NamespaceView::decode(&kv).map(Some),
        None if name == DEFAULT_NAMESPACE => Ok(Some(NamespaceView::builtin_default())),
        None => Ok(None),
    }
}

/// Every namespace (the built-in `default` included) in name order, and the table's index.
async fn all(storage: &dyn Storage) -> Result<(Vec<NamespaceView>, u64), Error> {
    let scan = storage.scan_prefix(PREFIX.as_bytes()).await?;
    let index = storage.range_revision(KeyRange::prefix(PREFIX)).await?;
    let mut namespaces: Vec<NamespaceView> = scan
        .kvs
        .iter()
        .map(NamespaceView::decode)
        .collect::<Result<_, _>>()?;
    if !namespaces
        .iter()
        .any(|namespace| namespace.record.name == DEFAULT_NAMESPACE)
    {
        namespaces.push(NamespaceView::builtin_default());
        namespaces.sort_by(|a, b| a.record.name.cmp(&b.record.name));
    }
    Ok((namespaces, index))
}

async fn blocking<T, F, Fut>(
    state: &crate::State,
    query: &QueryParams,
    run: F,
) -> Result<Indexed<T>, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(T, u64), Error>>,
{
    let params = query.blocking()?;
    let (body, index) = http_kit::blocking::block(
        state.storage().as_ref(),
        KeyRange::prefix(PREFIX),
        &params,
        Some(state.shutdown_token()),
        run,
    )
    .await?;
    Ok(Indexed::new(index, body))
}

/// `GET /v1/namespaces` (`?prefix=`): the namespaces the token may see.
pub(crate) async fn list(
    State(state): State<crate::State>,
    authz: Authz,
    query: QueryParams,
) -> Result<Indexed<Vec<NamespaceView>>, Error> {
    let prefix = query.get("prefix").unwrap_or("").to_owned();
    let storage = state.storage().clone();
    blocking(&state, &query, || {
        let (storage, authz, prefix) = (storage.clone(), authz.clone(), prefix.clone());
        async move {
            let (namespaces, index) = all(storage.as_ref()).await?;
            let visible = namespaces
                .into_iter()
                .filter(|namespace| namespace.record.name.starts_with(&prefix))
                .filter(|namespace| authz.allows_any_in_namespace(&namespace.record.name))
                .collect();
            Ok((visible, index))
        }
    })
    .await
}

/// `GET /v1/namespace/{name}`.
pub(crate) async fn read(
    State(state): State<crate::State>,
    authz: Authz,
    path: Result<Path<String>, PathRejection>,
    query: QueryParams,
) -> Result<Indexed<NamespaceView>, Error> {
    let name = path_param(path)?;
    if !authz.allows_any_in_namespace(&name) {
        return Err(Error::PermissionDenied);
    }
    let storage = state.storage().clone();
    let answer = blocking(&state, &query, || {
        let (storage, name) = (storage.clone(), name.clone());
        async move {
            match get(storage.as_ref(), &name).await? {
                Some(namespace) => {
                    let index = namespace.modify_index;
                    Ok((Some(namespace), index))
                }
                None => {
                    let index = storage.range_revision(KeyRange::prefix(PREFIX)).await?;
                    Ok((None, index))
                }
            }
        }
    })
    .await?;
    let namespace = answer
        .body
        .ok_or_else(|| Error::NotFound("Namespace not found".to_owned()))?;
    Ok(Indexed::new(answer.index, namespace))
}

/// `POST|PUT /v1/namespace`: creates or updates the namespace the body names.
pub(crate) async fn write(
    State(state): State<crate::State>,
    authz: Authz,
    body: http_kit::RawBody<Error>,
) -> Result<Response, Error> {
    upsert(&state, &authz, None, &body.bytes).await
}

/// `POST|PUT /v1/namespace/{name}`: the body's `Name` must match the path.
pub(crate) async fn write_named(
    State(state): State<crate::State>,
    authz: Authz,
    path: Result<Path<String>, PathRejection>,
    body: http_kit::RawBody<Error>,
) -> Result<Response, Error> {
    let name = path_param(path)?;
    upsert(&state, &authz, Some(&name), &body.bytes).await
}

/// Upstream's `Namespace.Validate`, as the list of problems.
fn validate(namespace: &NamespaceRecord) -> Vec<String> {
    let mut errors = Vec::new();
    let name_ok = (1..=128).contains(&namespace.name.len())
        && namespace
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !name_ok {
        errors.push(format!(
            "invalid name {:?}. Must match regex ^[a-zA-Z0-9-]{{1,128}}$",
            namespace.name
        ));
    }
    if namespace.description.len() > MAX_DESCRIPTION {
        errors.push(format!("description longer than {MAX_DESCRIPTION}"));
    }
    if let Some(pools) = &namespace.node_pool_configuration
        && pools.allowed.is_some()
        && pools.denied.is_some()
    {
        errors.push(
            "invalid node pool configuration: only one of Allowed and Denied may be set".to_owned(),
        );
    }
    errors
}

async fn upsert(
    state: &crate::State,
    authz: &Authz,
    path_name: Option<&str>,
    body: &[u8],
) -> Result<Response, Error> {
    let namespace: NamespaceRecord = decode(body, FIELDS)?;
    if let Some(path_name) = path_name
        && namespace.name != path_name
    {
        return Err(Error::BadRequest(
            "Namespace name does not match request path".to_owned(),
        ));
    }
    authz.require_management()?;
    let errors = validate(&namespace);
    if !errors.is_empty() {
        return Err(Error::BadRequest(format!(
            "Invalid namespace {:?}: {}",
            namespace.name,
            errors.join("; ")
        )));
    }
    let value = serde_json::to_vec(&namespace)
        .map_err(|err| Error::Internal(format!("encoding a namespace: {err}")))?;
    let index = state.storage().put(&key(&namespace.name), &value).await?;
    Ok(empty_written(index))
}

/// `DELETE /v1/namespace/{name}`.
pub(crate) async fn delete(
    State(state): State<crate::State>,
    authz: Authz,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, Error> {
    let name = path_param(path)?;
    authz.require_management()?;
    if name == DEFAULT_NAMESPACE {
        return Err(Error::BadRequest(
            "can not delete default namespace".to_owned(),
        ));
    }
    let stored = state.storage().get(&key(&name)).await?;
    let Some(stored) = stored else {
        // Upstream applies the delete anyway: nothing to do, success.
        let index = state.storage().revision().await?;
        return Ok(empty_written(index));
    };
    let region = &state.config().region;
    let snapshot = state.store().snapshot();
    let live_jobs = snapshot
        .jobs
        .values()
        .any(|job| job.namespace == name && job.status != JOB_STATUS_DEAD);
    if live_jobs {
        return Err(Error::BadRequest(format!(
            "namespace {name:?} has non-terminal jobs in regions: [{region}]"
        )));
    }
    let live_allocs = snapshot
        .allocs
        .values()
        .any(|alloc| alloc.namespace == name && !alloc.client_terminal());
    if live_allocs {
        return Err(Error::BadRequest(format!(
            "namespace {name:?} has non-terminal allocations in regions: [{region}]"
        )));
    }
    let namespace = NamespaceView::decode(&stored)?;
    if !namespace.record.quota.is_empty() {
        return Err(Error::BadRequest(format!(
            "namespace {name:?} has quotas associated with it: [{}]",
            namespace.record.quota
        )));
    }
    let txn = storage::Txn::new()
        .when(storage::Compare::ModRevision(
            key(&name),
            stored.mod_revision,
        ))
        .then(storage::Op::Delete { key: key(&name) });
    let result = state.storage().txn(txn).await?;
    if !result.succeeded {
        return Err(Error::Conflict(format!(
            "namespace {name:?} was modified concurrently; retry"
        )));
    }
    Ok(empty_written(result.revision))
}

/// A 200 with an empty body and the index headers (upstream's nil-body writes).
fn empty_written(index: u64) -> Response {
    let mut response = Body::empty().into_response();
    index_headers(response.headers_mut(), index);
    response
}

/// Whether a namespace exists (`default` always does).
pub(crate) async fn exists(state: &crate::State, name: &str) -> Result<bool, Error> {
    if name == DEFAULT_NAMESPACE {
        return Ok(true);
    }
    Ok(state.storage().get(&key(name)).await?.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str) -> NamespaceRecord {
        NamespaceRecord {
            name: name.to_owned(),
            ..NamespaceRecord::default()
        }
    }

    #[test]
    fn names_follow_upstream_pattern() {
        assert!(validate(&record("team-a-1")).is_empty());
        for bad in ["", "a b", "a_b", "a.b", "ns/x", "*"] {
            assert_eq!(validate(&record(bad)).len(), 1, "{bad:?}");
        }
        assert_eq!(validate(&record(&"n".repeat(129))).len(), 1);
    }

    #[test]
    fn long_descriptions_and_conflicting_pool_rules_are_invalid() {
        let mut namespace = record("a");
        namespace.description = "d".repeat(257);
        namespace.node_pool_configuration = Some(NodePoolConfiguration {
            default: String::new(),
            allowed: Some(vec!["x".to_owned()]),
            denied: Some(Vec::new()),
        });
        assert_eq!(validate(&namespace).len(), 2);
    }

    #[test]
    fn builtin_default_shows_upstream_fields() {
        let json = serde_json::to_value(NamespaceView::builtin_default()).unwrap_or_default();
        assert_eq!(json["Name"], "default");
        assert_eq!(json["Description"], DEFAULT_DESCRIPTION);
        assert_eq!(json["CreateIndex"], 1);
        assert!(json["Meta"].is_null());
        assert!(json["Capabilities"].is_null());
        assert!(json["NodePoolConfiguration"].is_null());
        assert_eq!(json["Quota"], "");
    }
}
