//! `PUT /v1/catalog/register` and `PUT /v1/catalog/deregister`: the catalog's writes.
//!
//! Where it sits: bodies are `catalog/body.rs`; handlers validate and authorize them, then hand
//! a [`Registration`] or a [`Removal`] to `domain/catalog.rs`, which writes it in one
//! transaction.
//!
//! Invariants: a body naming another datacenter is refused; a write needs node:write (a
//! SkipNodeUpdate of an existing node does not), and service:write on every service it touches,
//! all checked before anything is written; both answer `true`, deregistration also when nothing
//! matched.

use std::collections::BTreeSet;

use axum::extract::State as AxumState;

use crate::acl::{Access, Authz, Resource};
use crate::body::decode_body;
use crate::catalog::body::{
    DEREGISTER_FIELDS, DefinitionBody, DeregisterBody, REGISTER_FIELDS, RegisterBody,
};
use crate::domain::catalog::{
    self as domain, Registration, Removal, validate_id, validate_meta, validate_node_name,
};
use crate::domain::checks::{parse_status, truncate_output};
use crate::meta::QueryParams;
use crate::store::catalog::{
    CheckKind, CheckRecord, NodeRecord, RECORD_VERSION, ServiceRecord, load_check, load_node,
    service_key,
};
use crate::store::decode;
use crate::{Error, State};

/// A `Datacenter` in a body must be ours (or empty).
fn check_body_datacenter(state: &State, datacenter: Option<&str>) -> Result<(), Error> {
    match datacenter {
        Some(dc) if !dc.is_empty() && dc != state.config().datacenter => {
            Err(Error::UnknownDatacenter(dc.to_owned()))
        }
        _ => Ok(()),
    }
}

/// `PUT /v1/catalog/register`: registers or updates a node, optionally with a service and
/// checks. Answers `true`.
pub(crate) async fn update_registration(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
    http_kit::RawBody { bytes, .. }: http_kit::RawBody<Error>,
) -> Result<http_kit::Json<bool>, Error> {
    query.options(&state)?;
    let body: RegisterBody = decode_body(&bytes, REGISTER_FIELDS)?;
    check_body_datacenter(&state, body.datacenter.as_deref())?;
    let node_name = body.node.unwrap_or_default();
    validate_node_name(&node_name)?;
    let skip_node_update = body.skip_node_update.unwrap_or(false);
    let address = body.address.unwrap_or_default();
    if address.is_empty() && !skip_node_update {
        return Err(Error::Invalid("Must provide address".to_owned()));
    }
    let id = body.id.unwrap_or_default();
    if !id.is_empty() && uuid::Uuid::parse_str(&id).is_err() {
        return Err(Error::Invalid(format!(
            "Invalid node ID {id:?}: must be a UUID"
        )));
    }
    let node_meta = body.node_meta.unwrap_or_default();
    validate_meta(&node_meta, "Node", true)?;
    let mut reg = Registration::new(NodeRecord {
        version: RECORD_VERSION,
        id: id.to_lowercase(),
        node: node_name.clone(),
        address,
        datacenter: state.config().datacenter.clone(),
        tagged_addresses: body.tagged_addresses.unwrap_or_default(),
        meta: node_meta,
    });
    reg.skip_node_update = skip_node_update;
    // SkipNodeUpdate leaves an existing node alone (no node:write needed); a missing node is
    // still created, which needs node:write.
    if !skip_node_update || load_node(state.storage(), &node_name).await?.is_none() {
        authz.check(Resource::Node, &node_name, Access::Write)?;
    }

    if let Some(service) = body.service {
        let name = service.service.unwrap_or_default();
        if name.is_empty() {
            return Err(Error::Invalid("Must provide service name".to_owned()));
        }
        let id = service
            .id
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| name.clone());
        validate_id(&id, "service ID")?;
        let meta = service.meta.unwrap_or_default();
        validate_meta(&meta, "Service", false)?;
        authz.check(Resource::Service, &name, Access::Write)?;
        reg.services.push(ServiceRecord {
            version: RECORD_VERSION,
            id,
            service: name,
            tags: service.tags.unwrap_or_default(),
            address: service.address.unwrap_or_default(),
            port: service.port.unwrap_or_default(),
            meta,
            enable_tag_override: service.enable_tag_override.unwrap_or(false),
        });
    }

    let checks = body
        .check
        .into_iter()
        .chain(body.checks.unwrap_or_default());
    let mut seen = BTreeSet::new();
    for check in checks {
        let check_node = check
            .node
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| node_name.clone());
        let name = check.name.unwrap_or_default();
        let check_id = check
            .check_id
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| name.clone());
        if check_node != node_name {
            return Err(Error::Invalid(format!(
                "Node '{check_node}' for check '{check_id}' doesn't match register request node '{node_name}'"
            )));
        }
        validate_id(&check_id, "check ID")?;
        if !seen.insert(check_id.clone()) {
            return Err(Error::Invalid(format!("Duplicate check ID {check_id:?}")));
        }
        let service_id = check.service_id.unwrap_or_default();
        // A service check needs service:write on its service (checked below once the service
        // is known); a node check needs node:write.
        if service_id.is_empty() {
            authz.check(Resource::Node, &node_name, Access::Write)?;
        }
        reg.checks.push(CheckRecord {
            version: RECORD_VERSION,
            node: node_name.clone(),
            name: if name.is_empty() {
                check_id.clone()
            } else {
                name
            },
            check_id,
            status: parse_status(check.status.as_deref())?,
            notes: check.notes.unwrap_or_default(),
            output: truncate_output(&check.output.unwrap_or_default()),
            service_id,
            service_name: String::new(),
            service_tags: Vec::new(),
            kind: CheckKind::None,
            definition: check
                .definition
                .map(DefinitionBody::into_definition)
                .unwrap_or_default(),
        });
    }
    authorize_service_checks(&state, &authz, &reg).await?;
    domain::apply_registration(&state, reg).await?;
    Ok(http_kit::Json(true))
}

/// Service checks need service:write on the service they belong to.
async fn authorize_service_checks(
    state: &State,
    authz: &Authz,
    reg: &Registration,
) -> Result<(), Error> {
    for check in reg.checks.iter().filter(|c| !c.service_id.is_empty()) {
        let in_request = reg.services.iter().find(|s| s.id == check.service_id);
        let name = match in_request {
            Some(service) => service.service.clone(),
            None => match state
                .storage()
                .get(&service_key(&reg.node.node, &check.service_id))
                .await?
            {
                Some(kv) => decode::<ServiceRecord>(&kv.key, &kv.value)?.service,
                None => return Err(Error::Invalid((reg.missing_service)(&check.service_id))),
            },
        };
        authz.check(Resource::Service, &name, Access::Write)?;
    }
    Ok(())
}

/// `PUT /v1/catalog/deregister`: removes a node (with everything on it), one service (with its
/// checks) or one check. Answers `true`, also when nothing matched.
pub(crate) async fn delete_registration(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
    http_kit::RawBody { bytes, .. }: http_kit::RawBody<Error>,
) -> Result<http_kit::Json<bool>, Error> {
    query.options(&state)?;
    let body: DeregisterBody = decode_body(&bytes, DEREGISTER_FIELDS)?;
    check_body_datacenter(&state, body.datacenter.as_deref())?;
    let node = body.node.unwrap_or_default();
    validate_node_name(&node)?;
    let service_id = body.service_id.unwrap_or_default();
    let check_id = body.check_id.unwrap_or_default();
    let removal = match (service_id.is_empty(), check_id.is_empty()) {
        (true, true) => {
            authz.check(Resource::Node, &node, Access::Write)?;
            Removal::Node
        }
        (false, _) => {
            authz_service_of(&state, &authz, &node, &service_id).await?;
            Removal::Service(service_id)
        }
        (true, false) => {
            match load_check(state.storage(), &node, &check_id).await? {
                Some(check) if !check.record.service_id.is_empty() => {
                    authz.check(Resource::Service, &check.record.service_name, Access::Write)?;
                }
                _ => authz.check(Resource::Node, &node, Access::Write)?,
            }
            Removal::Check(check_id)
        }
    };
    domain::deregister(&state, &node, removal).await?;
    Ok(http_kit::Json(true))
}

/// service:write on the stored service (node:write when it does not exist).
async fn authz_service_of(
    state: &State,
    authz: &Authz,
    node: &str,
    service_id: &str,
) -> Result<(), Error> {
    match state.storage().get(&service_key(node, service_id)).await? {
        Some(kv) => {
            let service: ServiceRecord = decode(&kv.key, &kv.value)?;
            authz.check(Resource::Service, &service.service, Access::Write)
        }
        None => authz.check(Resource::Node, node, Access::Write),
    }
}
