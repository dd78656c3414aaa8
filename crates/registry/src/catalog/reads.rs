//! The catalog's reads: `/v1/catalog/datacenters`, `/nodes`, `/node/:node`, `/services` and
//! `/service/:service`.
//!
//! Where it sits: blocking queries over the records of `store/catalog.rs`, rendered by
//! `views.rs` and filtered (`?filter=`, `?node-meta=`, `?tag=`) by `filter.rs`.
//!
//! Invariants: each read's index is the last change to what it read; lists drop what the token
//! may not read and then say so with the filtered-results header; an unknown node is `null`, as
//! Consul answers.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{Path, State as AxumState};
use serde_json::{Map, Value, json};
use storage::KeyRange;

use crate::acl::{Access, Authz, Resource};
use crate::domain::catalog::service_instances;
use crate::filter::{
    apply_filter, filter_param, node_matches_meta, node_meta_filter, service_has_tags, tag_filter,
};
use crate::meta::{Indexed, QueryParams};
use crate::store::catalog::{
    NodeRecord, ServiceRecord, catalog_range, load_node, node_key, node_of_service_key,
    node_services_range, nodes_range, services_range, valid_key_part,
};
use crate::store::{Stored, decode, ranges_index, scan_records};
use crate::views::{node_json, service_json, service_node_json};
use crate::{Error, State};

/// `GET /v1/catalog/datacenters`: only ours.
pub(crate) async fn list_datacenters(
    AxumState(state): AxumState<State>,
) -> http_kit::Json<Vec<String>> {
    http_kit::Json(vec![state.config().datacenter.clone()])
}

/// `GET /v1/catalog/nodes`: every node the token may read (blocking; `?node-meta=`).
pub(crate) async fn list_nodes(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    let options = query.options(&state)?;
    let meta_filter = node_meta_filter(&query)?;
    let filter = filter_param(&query)?;
    let ((mut nodes, filtered), index) = options
        .read(state.storage(), nodes_range(), || {
            read_nodes(&state, &authz, &meta_filter)
        })
        .await?;
    apply_filter(filter.as_ref(), &mut nodes)?;
    Ok(Indexed::new(index, nodes).filtered(filtered))
}

async fn read_nodes(
    state: &State,
    authz: &Authz,
    meta_filter: &[(String, String)],
) -> Result<(Vec<Value>, bool), Error> {
    let storage = state.storage();
    let nodes: Vec<Stored<NodeRecord>> = scan_records(storage, nodes_range()).await?;
    let mut filtered = false;
    let mut out = Vec::new();
    for node in &nodes {
        if !authz.allows(Resource::Node, &node.record.node, Access::Read) {
            filtered = true;
            continue;
        }
        if node_matches_meta(&node.record, meta_filter) {
            out.push(node_json(node));
        }
    }
    Ok((out, filtered))
}

pub(crate) async fn read_node_unnamed() -> Error {
    Error::BadRequest("Missing node name".to_owned())
}

pub(crate) async fn list_service_instances_unnamed() -> Error {
    Error::BadRequest("Missing service name".to_owned())
}

/// `GET /v1/catalog/node/:node`: the node and its services (`null` for an unknown node, as
/// Consul answers). Blocking.
pub(crate) async fn read_node(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(node): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Value>, Error> {
    let options = query.options(&state)?;
    let range = catalog_range();
    let ((body, filtered), index) = options
        .block(state.storage(), range, || {
            read_node_services(&state, &authz, &node)
        })
        .await?;
    Ok(Indexed::new(index, body).filtered(filtered))
}

async fn read_node_services(
    state: &State,
    authz: &Authz,
    node: &str,
) -> Result<((Value, bool), u64), Error> {
    let storage = state.storage();
    if !valid_key_part(node) {
        let index = ranges_index(storage, &[nodes_range()]).await?;
        return Ok(((Value::Null, false), index));
    }
    let index = ranges_index(
        storage,
        &[KeyRange::prefix(node_key(node)), node_services_range(node)],
    )
    .await?;
    let Some(stored) = load_node(storage, node).await? else {
        return Ok(((Value::Null, false), index));
    };
    if !authz.allows(Resource::Node, node, Access::Read) {
        return Ok(((Value::Null, true), index));
    }
    let services: Vec<Stored<ServiceRecord>> =
        scan_records(storage, node_services_range(node)).await?;
    let mut filtered = false;
    let mut map = Map::new();
    for service in &services {
        if authz.allows(Resource::Service, &service.record.service, Access::Read) {
            map.insert(service.record.id.clone(), service_json(service));
        } else {
            filtered = true;
        }
    }
    Ok((
        (
            json!({"Node": node_json(&stored), "Services": Value::Object(map)}),
            filtered,
        ),
        index,
    ))
}

/// `GET /v1/catalog/services`: service name → the union of its instances' tags. Blocking.
pub(crate) async fn list_services(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<Indexed<BTreeMap<String, Vec<String>>>, Error> {
    let options = query.options(&state)?;
    let meta_filter = node_meta_filter(&query)?;
    let ((services, filtered), index) = options
        .block(state.storage(), catalog_range(), || {
            read_services(&state, &authz, &meta_filter)
        })
        .await?;
    Ok(Indexed::new(index, services).filtered(filtered))
}

async fn read_services(
    state: &State,
    authz: &Authz,
    meta_filter: &[(String, String)],
) -> Result<((BTreeMap<String, Vec<String>>, bool), u64), Error> {
    let storage = state.storage();
    let mut ranges = vec![services_range()];
    if !meta_filter.is_empty() {
        ranges.push(nodes_range());
    }
    let index = ranges_index(storage, &ranges).await?;
    let nodes: BTreeMap<String, NodeRecord> = if meta_filter.is_empty() {
        BTreeMap::new()
    } else {
        scan_records::<NodeRecord>(storage, nodes_range())
            .await?
            .into_iter()
            .map(|node| (node.record.node.clone(), node.record))
            .collect()
    };
    let scanned = storage.scan(services_range(), None).await?;
    let mut filtered = false;
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for kv in &scanned.kvs {
        let record: ServiceRecord = decode(&kv.key, &kv.value)?;
        if !authz.allows(Resource::Service, &record.service, Access::Read) {
            filtered = true;
            continue;
        }
        if !meta_filter.is_empty() {
            let node = node_of_service_key(&kv.key).and_then(|name| nodes.get(&name));
            if !node.is_some_and(|node| node_matches_meta(node, meta_filter)) {
                continue;
            }
        }
        out.entry(record.service).or_default().extend(record.tags);
    }
    let out = out
        .into_iter()
        .map(|(name, tags)| (name, tags.into_iter().collect()))
        .collect();
    Ok(((out, filtered), index))
}

/// `GET /v1/catalog/service/:service`: the instances of a service, with their nodes
/// (`?tag=`, `?node-meta=`). Blocking.
pub(crate) async fn list_service_instances(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(service): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    let options = query.options(&state)?;
    let meta_filter = node_meta_filter(&query)?;
    let tags = tag_filter(&query);
    let filter = filter_param(&query)?;
    let ((mut instances, filtered), index) = options
        .block(state.storage(), catalog_range(), || async {
            let instances = service_instances(state.storage(), &service).await?;
            let mut filtered = false;
            let mut out = Vec::new();
            for (node, svc) in &instances.items {
                if !authz.allows(Resource::Service, &svc.record.service, Access::Read)
                    || !authz.allows(Resource::Node, &node.record.node, Access::Read)
                {
                    filtered = true;
                    continue;
                }
                if node_matches_meta(&node.record, &meta_filter)
                    && service_has_tags(&svc.record, &tags)
                {
                    out.push(service_node_json(node, svc));
                }
            }
            Ok::<_, Error>(((out, filtered), instances.index))
        })
        .await?;
    apply_filter(filter.as_ref(), &mut instances)?;
    Ok(Indexed::new(index, instances).filtered(filtered))
}
