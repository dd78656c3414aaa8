//! `/v1/health/*` endpoints: the health checks of the catalog, by node, by service, by state,
//! and the instances of a service with their node and checks.
//!
//! Where it sits: reads only, over the records of `store/catalog.rs`, rendered by `views.rs`
//! and filtered by `filter.rs`; checks are written through `domain/` by the catalog and agent
//! endpoints and by `tasks/check_runner.rs`.
//!
//! Invariants: every read is a blocking query whose index is the last change to what it reads
//! (a node's checks, all checks, or the whole catalog for service entries); lists drop what
//! the token may not read and then say so with the filtered-results header; results are never
//! `null` (an empty list is `[]`).

use std::collections::BTreeMap;

use axum::extract::{Path, State as AxumState};
use serde_json::{Value, json};
use storage::KeyRange;

use crate::acl::{Access, Authz, Resource};
use crate::domain::catalog::service_instances;
use crate::filter::{
    apply_filter, filter_param, node_matches_meta, node_meta_filter, service_has_tags, tag_filter,
};
use crate::meta::{Indexed, QueryParams};
use crate::store::catalog::{
    CheckRecord, CheckStatus, catalog_range, checks_range, node_checks_range, valid_key_part,
};
use crate::store::{Stored, scan_records};
use crate::views::{check_json, node_json, service_json};
use crate::{Error, State};

pub(crate) async fn read_unnamed_node() -> Error {
    Error::BadRequest("Missing node name".to_owned())
}

pub(crate) async fn read_unnamed_service() -> Error {
    Error::BadRequest("Missing service name".to_owned())
}

/// Whether the token may read a check: node:read on its node, and service:read on its service
/// when it has one.
fn may_read(authz: &Authz, check: &CheckRecord) -> bool {
    authz.allows(Resource::Node, &check.node, Access::Read)
        && (check.service_id.is_empty()
            || authz.allows(Resource::Service, &check.service_name, Access::Read))
}

/// Checks that pass `keep`, ACL-filtered, as JSON; and whether the ACL dropped any.
fn filter_checks(
    authz: &Authz,
    checks: &[Stored<CheckRecord>],
    keep: impl Fn(&CheckRecord) -> bool,
) -> (Vec<Value>, bool) {
    let mut filtered = false;
    let mut out = Vec::new();
    for check in checks.iter().filter(|check| keep(&check.record)) {
        if may_read(authz, &check.record) {
            out.push(check_json(check));
        } else {
            filtered = true;
        }
    }
    (out, filtered)
}

/// A blocking read of the checks in `range` that pass `keep` and `?filter=`, ACL-filtered.
async fn read_checks(
    state: &State,
    authz: &Authz,
    query: &QueryParams,
    range: KeyRange,
    keep: impl Fn(&CheckRecord) -> bool,
) -> Result<Indexed<Vec<Value>>, Error> {
    let options = query.options(state)?;
    let filter = filter_param(query)?;
    let ((checks, filtered), index) = options
        .read(state.storage(), range.clone(), || async {
            let checks: Vec<Stored<CheckRecord>> =
                scan_records(state.storage(), range.clone()).await?;
            let (mut out, filtered) = filter_checks(authz, &checks, &keep);
            apply_filter(filter.as_ref(), &mut out)?;
            Ok((out, filtered))
        })
        .await?;
    Ok(Indexed::new(index, checks).filtered(filtered))
}

/// `GET /v1/health/node/:node`: the checks of a node (`[]` when unknown). Blocking.
pub(crate) async fn list_node_checks(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(node): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    if !valid_key_part(&node) {
        // No such node can exist: nothing, at the index of every check.
        return read_checks(&state, &authz, &query, checks_range(), |_| false).await;
    }
    read_checks(&state, &authz, &query, node_checks_range(&node), |_| true).await
}

/// `GET /v1/health/checks/:service`: the checks of every instance of a service. Blocking.
pub(crate) async fn list_service_checks(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(service): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    read_checks(&state, &authz, &query, checks_range(), |check| {
        !check.service_id.is_empty() && check.service_name == service
    })
    .await
}

/// `GET /v1/health/state/:state`: every check in a state (`any`, `passing`, `warning`,
/// `critical`). Blocking.
pub(crate) async fn list_checks_in_state(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(wanted): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    let wanted = match wanted.as_str() {
        "any" => None,
        other => Some(
            CheckStatus::parse(other)
                .filter(|_| other == other.to_lowercase())
                .ok_or_else(|| Error::BadRequest(format!("Invalid check state {other:?}")))?,
        ),
    };
    read_checks(&state, &authz, &query, checks_range(), |check| {
        wanted.is_none_or(|status| check.status == status)
    })
    .await
}

/// `GET /v1/health/service/:service`: each instance of a service with its node and the checks
/// that apply to it (the node's own checks and the instance's), filtered by `?passing` (only
/// instances whose every check passes), `?tag=`, `?node-meta=` and `?peer=` (no peers exist,
/// so any peer matches nothing). Blocking.
pub(crate) async fn list_service_entries(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(service): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    let options = query.options(&state)?;
    let passing_only = query
        .bool("passing")
        .map_err(|_| {
            let raw = query.get("passing").unwrap_or_default();
            Error::BadRequest(format!("Invalid value for ?passing: {raw:?}"))
        })?
        .unwrap_or(false);
    let tags = tag_filter(&query);
    let meta_filter = node_meta_filter(&query)?;
    let peered = query.get("peer").is_some_and(|peer| !peer.is_empty());
    let filter = filter_param(&query)?;
    let ((entries, filtered), index) = options
        .block(state.storage(), catalog_range(), || async {
            let storage = state.storage();
            let checks_index = storage.range_revision(checks_range()).await?;
            let instances = service_instances(storage, &service).await?;
            let index = instances.index.max(checks_index);
            if peered {
                return Ok::<_, Error>(((Vec::new(), false), index));
            }
            let checks: Vec<Stored<CheckRecord>> = scan_records(storage, checks_range()).await?;
            let mut by_node: BTreeMap<&str, Vec<&Stored<CheckRecord>>> = BTreeMap::new();
            for check in &checks {
                by_node.entry(&check.record.node).or_default().push(check);
            }
            let mut filtered = false;
            let mut out = Vec::new();
            for (node, svc) in &instances.items {
                if !authz.allows(Resource::Node, &node.record.node, Access::Read)
                    || !authz.allows(Resource::Service, &svc.record.service, Access::Read)
                {
                    filtered = true;
                    continue;
                }
                if !service_has_tags(&svc.record, &tags)
                    || !node_matches_meta(&node.record, &meta_filter)
                {
                    continue;
                }
                let own: Vec<&Stored<CheckRecord>> = by_node
                    .get(node.record.node.as_str())
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|check| {
                        check.record.service_id.is_empty()
                            || check.record.service_id == svc.record.id
                    })
                    .collect();
                if passing_only
                    && own
                        .iter()
                        .any(|check| check.record.status != CheckStatus::Passing)
                {
                    continue;
                }
                out.push(json!({
                    "Node": node_json(node),
                    "Service": service_json(svc),
                    "Checks": own.into_iter().map(check_json).collect::<Vec<_>>(),
                }));
            }
            apply_filter(filter.as_ref(), &mut out)?;
            Ok(((out, filtered), index))
        })
        .await?;
    Ok(Indexed::new(index, entries).filtered(filtered))
}

/// `GET /v1/health/connect/:service` and `/v1/health/ingress/:service`: this server has no
/// service mesh, so no service is connect-capable or behind an ingress gateway: always `[]`.
pub(crate) async fn list_connect_entries(
    AxumState(state): AxumState<State>,
    Path(_service): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    query.options(&state)?;
    let index = state.storage().range_revision(catalog_range()).await?;
    Ok(Indexed::new(index, Vec::new()))
}
