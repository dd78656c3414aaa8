//! `/v1/agent/services`, `/v1/agent/service/:id` and `/v1/agent/service/{register,deregister}`:
//! this agent's services, with their checks.
//!
//! Where it sits: bodies are `agent/body.rs`; writes go to `domain/catalog.rs` as one
//! registration (the service and its checks) or one deregistration (the service and its
//! checks).
//!
//! Invariants: this server's own `consul` service is neither listed nor writable here; a
//! service's checks are named `service:<id>` (or `service:<id>:<n>` when there are several)
//! unless they name themselves.

use axum::extract::{Path, State as AxumState};
use serde_json::{Map, Value, json};

use crate::acl::{Access, Authz, Resource};
use crate::agent::body::{AGENT_SERVICE_FIELDS, AgentCheckBody, ServiceBody};
use crate::agent::node::{agent_registration, node_name};
use crate::body::decode_body;
use crate::domain::catalog::{
    self as catalog, CONSUL_SERVICE, Removal, validate_id, validate_meta,
};
use crate::filter::filter_param;
use crate::meta::QueryParams;
use crate::store::catalog::{RECORD_VERSION, ServiceRecord, node_services_range, service_key};
use crate::store::{Stored, scan_records};
use crate::{Error, State};

fn agent_service_json(state: &State, service: &Stored<ServiceRecord>) -> Value {
    let record = &service.record;
    json!({
        "ID": record.id,
        "Service": record.service,
        "Tags": record.tags,
        "Meta": record.meta,
        "Port": record.port,
        "Address": record.address,
        "Weights": {"Passing": 1, "Warning": 1},
        "EnableTagOverride": record.enable_tag_override,
        "Datacenter": state.config().datacenter,
    })
}

/// `GET /v1/agent/services`: this agent's services by ID (those the token may read).
pub(crate) async fn list_services(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<http_kit::Json<Map<String, Value>>, Error> {
    query.options(&state)?;
    let filter = filter_param(&query)?;
    let services: Vec<Stored<ServiceRecord>> =
        scan_records(state.storage(), node_services_range(node_name(&state))).await?;
    let mut out = Map::new();
    for service in &services {
        if service.record.id == CONSUL_SERVICE
            || !authz.allows(Resource::Service, &service.record.service, Access::Read)
        {
            continue;
        }
        let view = agent_service_json(&state, service);
        if filter
            .as_ref()
            .map_or(Ok(true), |filter| filter.matches(&view))?
        {
            out.insert(service.record.id.clone(), view);
        }
    }
    Ok(http_kit::Json(out))
}

pub(crate) async fn load_agent_service(
    state: &State,
    service_id: &str,
) -> Result<Option<Stored<ServiceRecord>>, Error> {
    if service_id == CONSUL_SERVICE {
        return Ok(None);
    }
    match state
        .storage()
        .get(&service_key(node_name(state), service_id))
        .await?
    {
        Some(kv) => Ok(Some(Stored::from_kv(&kv)?)),
        None => Ok(None),
    }
}

pub(crate) fn unknown_service(service_id: &str) -> Error {
    Error::NotFound(format!(
        "Unknown service ID {service_id:?}. Ensure that the service ID is passed, not the service name."
    ))
}

/// `GET /v1/agent/service/:id`: one service of this agent, with a `ContentHash`.
pub(crate) async fn read_service(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(service_id): Path<String>,
    query: QueryParams,
) -> Result<http_kit::Json<Value>, Error> {
    query.options(&state)?;
    let Some(service) = load_agent_service(&state, &service_id).await? else {
        return Err(unknown_service(&service_id));
    };
    authz.check(Resource::Service, &service.record.service, Access::Read)?;
    let mut body = agent_service_json(&state, &service);
    let hash = format!("{:016x}", stdx::hash::fnv1a_64(body.to_string().as_bytes()));
    body["ContentHash"] = Value::String(hash);
    Ok(http_kit::Json(body))
}

/// `PUT /v1/agent/service/register[?replace-existing-checks]`: adds or replaces a service of
/// this node, with its checks (`service:<id>`, or `service:<id>:<n>` when there are several).
pub(crate) async fn create_service(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
    http_kit::RawBody { bytes, .. }: http_kit::RawBody<Error>,
) -> Result<(), Error> {
    query.options(&state)?;
    let body: ServiceBody = decode_body(&bytes, AGENT_SERVICE_FIELDS)?;
    let name = body.name.unwrap_or_default();
    if name.is_empty() {
        return Err(Error::Invalid("Missing service name".to_owned()));
    }
    let id = body
        .id
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| name.clone());
    validate_id(&id, "service ID")?;
    if id == CONSUL_SERVICE {
        return Err(Error::Invalid(format!(
            "Service ID {CONSUL_SERVICE:?} is reserved for this server"
        )));
    }
    let meta = body.meta.unwrap_or_default();
    validate_meta(&meta, "Service", false)?;
    authz.check(Resource::Service, &name, Access::Write)?;
    let replace = query.lenient_bool("replace-existing-checks");

    let node = node_name(&state).to_owned();
    let bodies: Vec<AgentCheckBody> = body
        .check
        .into_iter()
        .chain(body.checks.unwrap_or_default())
        .filter(|check| !check.is_empty())
        .collect();
    let several = bodies.len() > 1;
    let mut reg = agent_registration(&state);
    for (n, check) in bodies.into_iter().enumerate() {
        let default_id = if several {
            format!("service:{id}:{}", n + 1)
        } else {
            format!("service:{id}")
        };
        let record = check.into_record(
            &node,
            default_id,
            format!("Service '{name}' check"),
            id.clone(),
        )?;
        if reg.checks.iter().any(|c| c.check_id == record.check_id) {
            return Err(Error::Invalid(format!(
                "Duplicate check ID {:?}",
                record.check_id
            )));
        }
        reg.checks.push(record);
    }
    reg.services.push(ServiceRecord {
        version: RECORD_VERSION,
        id: id.clone(),
        service: name,
        tags: body.tags.unwrap_or_default(),
        address: body.address.unwrap_or_default(),
        port: body.port.unwrap_or_default(),
        meta,
        enable_tag_override: body.enable_tag_override.unwrap_or(false),
    });
    if replace {
        reg.replace_checks_of = Some(id);
    }
    catalog::apply_registration(&state, reg).await
}

/// `PUT /v1/agent/service/deregister/:id`: removes a service and its checks.
pub(crate) async fn delete_service(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(service_id): Path<String>,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    let Some(service) = load_agent_service(&state, &service_id).await? else {
        return Err(unknown_service(&service_id));
    };
    authz.check(Resource::Service, &service.record.service, Access::Write)?;
    let node = node_name(&state).to_owned();
    if !catalog::deregister(&state, &node, Removal::Service(service_id.clone())).await? {
        return Err(unknown_service(&service_id));
    }
    Ok(())
}
