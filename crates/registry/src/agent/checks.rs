//! `/v1/agent/checks` and `/v1/agent/check/*`: this agent's health checks: list, register,
//! deregister, and the TTL updates (pass, warn, fail, update).
//!
//! Where it sits: bodies are `agent/body.rs`; writes go to `domain/catalog.rs` (registration,
//! deregistration) and `domain/checks.rs` (status updates, which move a TTL check's deadline).
//!
//! Invariants: the leader-managed `serfHealth` check is neither listed nor writable here; a
//! check needs service:<access> on its service, else node:<access>; a check update answers 404
//! in Consul's words for an unknown check.

use axum::extract::{Path, State as AxumState};
use serde_json::{Map, Value};

use crate::acl::{Access, Authz, Resource};
use crate::agent::body::{
    AGENT_CHECK_FIELDS, AgentCheckBody, CHECK_UPDATE_FIELDS, CheckUpdateBody,
};
use crate::agent::node::{agent_missing_service, agent_registration, node_name};
use crate::body::decode_body;
use crate::domain::catalog::{self as catalog, Removal};
use crate::domain::checks::{self, TtlUpdate, unknown_check};
use crate::filter::filter_param;
use crate::meta::QueryParams;
use crate::store::catalog::{
    CheckRecord, CheckStatus, ServiceRecord, load_check, node_checks_range, service_key,
};
use crate::store::{Stored, decode, scan_records};
use crate::views::check_json;
use crate::{Error, SERF_HEALTH_CHECK, State};

/// Whether the token may read a check: service:read on its service, or node:read on the node.
fn may_read_check(authz: &Authz, check: &CheckRecord) -> bool {
    if check.service_id.is_empty() {
        authz.allows(Resource::Node, &check.node, Access::Read)
    } else {
        authz.allows(Resource::Service, &check.service_name, Access::Read)
    }
}

/// `GET /v1/agent/checks`: this agent's checks by ID (those the token may read).
pub(crate) async fn list_checks(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<http_kit::Json<Map<String, Value>>, Error> {
    query.options(&state)?;
    let filter = filter_param(&query)?;
    let checks: Vec<Stored<CheckRecord>> =
        scan_records(state.storage(), node_checks_range(node_name(&state))).await?;
    let mut out = Map::new();
    for check in &checks {
        if check.record.check_id == SERF_HEALTH_CHECK || !may_read_check(&authz, &check.record) {
            continue;
        }
        let view = check_json(check);
        if filter
            .as_ref()
            .map_or(Ok(true), |filter| filter.matches(&view))?
        {
            out.insert(check.record.check_id.clone(), view);
        }
    }
    Ok(http_kit::Json(out))
}

/// The permission a check needs: service:<access> on its service, else node:<access>.
async fn authorize_check(
    state: &State,
    authz: &Authz,
    check: &CheckRecord,
    access: Access,
) -> Result<(), Error> {
    if check.service_id.is_empty() {
        return authz.check(Resource::Node, &check.node, access);
    }
    let name = if check.service_name.is_empty() {
        match state
            .storage()
            .get(&service_key(&check.node, &check.service_id))
            .await?
        {
            Some(kv) => decode::<ServiceRecord>(&kv.key, &kv.value)?.service,
            None => {
                return Err(Error::Invalid(agent_missing_service(&check.service_id)));
            }
        }
    } else {
        check.service_name.clone()
    };
    authz.check(Resource::Service, &name, access)
}

/// `PUT /v1/agent/check/register`: adds (or replaces) a TTL, HTTP or TCP check of this node.
pub(crate) async fn create_check(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
    http_kit::RawBody { bytes, .. }: http_kit::RawBody<Error>,
) -> Result<(), Error> {
    query.options(&state)?;
    let body: AgentCheckBody = decode_body(&bytes, AGENT_CHECK_FIELDS)?;
    let name = body.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(Error::Invalid("Missing check name".to_owned()));
    }
    let service_id = body.service_id.clone().unwrap_or_default();
    let node = node_name(&state).to_owned();
    let check = body.into_record(&node, name.clone(), name, service_id)?;
    if check.check_id == SERF_HEALTH_CHECK {
        return Err(Error::Invalid(format!(
            "Check ID {SERF_HEALTH_CHECK:?} is reserved"
        )));
    }
    authorize_check(&state, &authz, &check, Access::Write).await?;
    let mut reg = agent_registration(&state);
    reg.checks.push(check);
    catalog::apply_registration(&state, reg).await
}

/// Loads an agent check for a write, or Consul's 404.
async fn agent_check_for_write(
    state: &State,
    authz: &Authz,
    check_id: &str,
) -> Result<CheckRecord, Error> {
    if check_id == SERF_HEALTH_CHECK {
        return Err(unknown_check(check_id));
    }
    let Some(check) = load_check(state.storage(), node_name(state), check_id).await? else {
        return Err(unknown_check(check_id));
    };
    authorize_check(state, authz, &check.record, Access::Write).await?;
    Ok(check.record)
}

/// `PUT /v1/agent/check/deregister/:id`: removes a check (its sessions are invalidated).
pub(crate) async fn delete_check(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(check_id): Path<String>,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    agent_check_for_write(&state, &authz, &check_id).await?;
    let node = node_name(&state).to_owned();
    if !catalog::deregister(&state, &node, Removal::Check(check_id.clone())).await? {
        return Err(unknown_check(&check_id));
    }
    Ok(())
}

async fn heartbeat(
    state: &State,
    authz: &Authz,
    check_id: &str,
    status: CheckStatus,
    output: &str,
) -> Result<(), Error> {
    agent_check_for_write(state, authz, check_id).await?;
    let node = node_name(state).to_owned();
    checks::update_check_status(state, &node, check_id, status, output, TtlUpdate::Heartbeat)
        .await?;
    Ok(())
}

/// `PUT /v1/agent/check/pass/:id?note=`: a TTL check is passing (the note is its output).
pub(crate) async fn update_check_pass(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(check_id): Path<String>,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    let note = query.get("note").unwrap_or("");
    heartbeat(&state, &authz, &check_id, CheckStatus::Passing, note).await
}

/// `PUT /v1/agent/check/warn/:id?note=`.
pub(crate) async fn update_check_warn(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(check_id): Path<String>,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    let note = query.get("note").unwrap_or("");
    heartbeat(&state, &authz, &check_id, CheckStatus::Warning, note).await
}

/// `PUT /v1/agent/check/fail/:id?note=`: critical; sessions bound to it are invalidated.
pub(crate) async fn update_check_fail(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(check_id): Path<String>,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    let note = query.get("note").unwrap_or("");
    heartbeat(&state, &authz, &check_id, CheckStatus::Critical, note).await
}

/// `PUT /v1/agent/check/update/:id` `{Status, Output}`.
pub(crate) async fn update_check(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(check_id): Path<String>,
    query: QueryParams,
    http_kit::RawBody { bytes, .. }: http_kit::RawBody<Error>,
) -> Result<(), Error> {
    query.options(&state)?;
    let body: CheckUpdateBody = decode_body(&bytes, CHECK_UPDATE_FIELDS)?;
    let raw = body.status.unwrap_or_default();
    let status = CheckStatus::parse(&raw)
        .ok_or_else(|| Error::BadRequest(format!("Invalid check status: '{raw}'")))?;
    let output = body.output.unwrap_or_default();
    heartbeat(&state, &authz, &check_id, status, &output).await
}
