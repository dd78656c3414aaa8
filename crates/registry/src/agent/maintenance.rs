//! `/v1/agent/maintenance` and `/v1/agent/service/maintenance/:id`: maintenance mode, a
//! critical `_node_maintenance` (or `_service_maintenance:<id>`) check put or removed.
//!
//! Where it sits: writes through `domain/catalog.rs`, so sessions bound to the node's checks are
//! invalidated when the critical check lands.
//!
//! Invariant: `enable` is required and parsed as Go's `ParseBool`.

use axum::extract::{Path, State as AxumState};

use crate::acl::{Access, Authz, Resource};
use crate::agent::node::{agent_registration, node_name};
use crate::agent::services::{load_agent_service, unknown_service};
use crate::domain::catalog::{self as catalog, Removal};
use crate::meta::QueryParams;
use crate::store::catalog::{CheckDefinition, CheckKind, CheckRecord, CheckStatus, RECORD_VERSION};
use crate::{Error, State};

const NODE_MAINTENANCE_CHECK: &str = "_node_maintenance";
const SERVICE_MAINTENANCE_PREFIX: &str = "_service_maintenance:";

fn enable_param(query: &QueryParams) -> Result<bool, Error> {
    match query.get("enable") {
        None | Some("") => Err(Error::BadRequest("Missing value for enable".to_owned())),
        Some(raw) => stdx::strconv::parse_bool(raw)
            .ok_or_else(|| Error::BadRequest(format!("Invalid value for enable: {raw:?}"))),
    }
}

fn maintenance_check(
    node: &str,
    check_id: String,
    name: &str,
    reason: &str,
    service_id: String,
) -> CheckRecord {
    CheckRecord {
        version: RECORD_VERSION,
        node: node.to_owned(),
        check_id,
        name: name.to_owned(),
        status: CheckStatus::Critical,
        notes: reason.to_owned(),
        output: String::new(),
        service_id,
        service_name: String::new(),
        service_tags: Vec::new(),
        kind: CheckKind::None,
        definition: CheckDefinition::default(),
    }
}

/// `PUT /v1/agent/maintenance?enable=&reason=`: puts the node in maintenance (a critical
/// `_node_maintenance` check) or takes it out.
pub(crate) async fn update_node_maintenance(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    let enable = enable_param(&query)?;
    let node = node_name(&state).to_owned();
    authz.check(Resource::Node, &node, Access::Write)?;
    if enable {
        let reason = query.get("reason").filter(|r| !r.is_empty()).unwrap_or(
            "Maintenance mode is enabled for this node, but no reason was provided. This is a default message.",
        );
        let mut reg = agent_registration(&state);
        reg.checks.push(maintenance_check(
            &node,
            NODE_MAINTENANCE_CHECK.to_owned(),
            "Node Maintenance Mode",
            reason,
            String::new(),
        ));
        catalog::apply_registration(&state, reg).await
    } else {
        catalog::deregister(
            &state,
            &node,
            Removal::Check(NODE_MAINTENANCE_CHECK.to_owned()),
        )
        .await
        .map(drop)
    }
}

/// `PUT /v1/agent/service/maintenance/:id?enable=&reason=`.
pub(crate) async fn update_service_maintenance(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(service_id): Path<String>,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    let enable = enable_param(&query)?;
    let Some(service) = load_agent_service(&state, &service_id).await? else {
        return Err(unknown_service(&service_id));
    };
    authz.check(Resource::Service, &service.record.service, Access::Write)?;
    let node = node_name(&state).to_owned();
    let check_id = format!("{SERVICE_MAINTENANCE_PREFIX}{service_id}");
    if enable {
        let reason = query.get("reason").filter(|r| !r.is_empty()).unwrap_or(
            "Maintenance mode is enabled for this service, but no reason was provided. This is a default message.",
        );
        let mut reg = agent_registration(&state);
        reg.checks.push(maintenance_check(
            &node,
            check_id,
            "Service Maintenance Mode",
            reason,
            service_id,
        ));
        catalog::apply_registration(&state, reg).await
    } else {
        catalog::deregister(&state, &node, Removal::Check(check_id))
            .await
            .map(drop)
    }
}
