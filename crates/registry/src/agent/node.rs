//! `/v1/agent/self` and `/v1/agent/members`: this server as a Consul agent, and the node every
//! agent write belongs to (this server's own, `Config::node_name`).
//!
//! Where it sits: the agent's other files (`checks.rs`, `services.rs`, `maintenance.rs`) start
//! their registrations from [`agent_registration`].
//!
//! Invariant: the agent's registrations never rewrite the node record (SkipNodeUpdate); a check
//! naming a missing service is refused in the agent's words, not the catalog's.

use axum::extract::State as AxumState;
use serde_json::{Value, json};
use stdx::duration::format_go_std;

use crate::acl::{Access, Authz, Resource};
use crate::domain::catalog::{self as catalog, CONSUL_VERSION, Registration};
use crate::meta::QueryParams;
use crate::store::catalog::load_node;
use crate::{Error, State};

pub(crate) fn node_name(state: &State) -> &str {
    &state.config().node_name
}

async fn self_node_id(state: &State) -> Result<String, Error> {
    Ok(load_node(state.storage(), node_name(state))
        .await?
        .map(|node| node.record.id)
        .unwrap_or_default())
}

pub(crate) fn agent_missing_service(service_id: &str) -> String {
    format!("ServiceID {service_id:?} does not exist")
}

pub(crate) fn agent_registration(state: &State) -> Registration {
    let mut reg = Registration::new(catalog::self_node(state));
    reg.skip_node_update = true;
    reg.missing_service = agent_missing_service;
    reg
}

fn member_json(state: &State, node_id: &str, wan: bool) -> Value {
    let config = state.config();
    let name = if wan {
        format!("{}.{}", config.node_name, config.datacenter)
    } else {
        config.node_name.clone()
    };
    json!({
        "Name": name,
        "Addr": config.advertise_addr.ip().to_string(),
        "Port": if wan { 8302 } else { 8301 },
        "Tags": {
            "acls": if config.acl.enabled { "1" } else { "0" },
            "build": format!("{CONSUL_VERSION}:cairn"),
            "dc": config.datacenter,
            "id": node_id,
            "port": config.advertise_addr.port().to_string(),
            "raft_vsn": "3",
            "role": "consul",
            "segment": "",
            "vsn": "2",
            "vsn_max": "3",
            "vsn_min": "2",
        },
        "Status": 1,
        "ProtocolMin": 1,
        "ProtocolMax": 5,
        "ProtocolCur": 2,
        "DelegateMin": 2,
        "DelegateMax": 5,
        "DelegateCur": 4,
    })
}

/// `GET /v1/agent/self`: this agent's configuration and member record (agent:read).
pub(crate) async fn read_self(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<http_kit::Json<Value>, Error> {
    query.options(&state)?;
    authz.check(Resource::Agent, node_name(&state), Access::Read)?;
    let config = state.config();
    let node_id = self_node_id(&state).await?;
    Ok(http_kit::Json(json!({
        "Config": {
            "Datacenter": config.datacenter,
            "PrimaryDatacenter": config.datacenter,
            "NodeName": config.node_name,
            "NodeID": node_id,
            "Partition": "",
            "Revision": "cairn",
            "Server": true,
            "Version": CONSUL_VERSION,
            "BuildDate": "2023-11-01T00:00:00Z",
        },
        "DebugConfig": {
            "Datacenter": config.datacenter,
            "NodeName": config.node_name,
            "NodeID": node_id,
            "ServerMode": true,
            "ACLsEnabled": config.acl.enabled,
            "SessionTTLMin": format_go_std(config.session_ttl_min),
        },
        "Coord": {
            "Vec": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            "Error": 1.5,
            "Adjustment": 0.0,
            "Height": 1.0e-5,
        },
        "Member": member_json(&state, &node_id, false),
        "Stats": {
            "agent": {"check_monitors": "0", "check_ttls": "0", "checks": "0", "services": "0"},
            "consul": {
                "bootstrap": "true",
                "known_datacenters": "1",
                "leader": "true",
                "leader_addr": config.advertise_addr.to_string(),
                "server": "true",
            },
        },
        "Meta": {"consul-network-segment": ""},
        "xDS": {
            "SupportedProxies": {"envoy": []},
            "Port": -1,
            "Ports": {"Plaintext": -1, "TLS": -1},
        },
    })))
}

/// `GET /v1/agent/members`: this server, the only member (`?wan` names it `<node>.<dc>`).
pub(crate) async fn list_members(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<http_kit::Json<Vec<Value>>, Error> {
    query.options(&state)?;
    if !authz.allows(Resource::Node, node_name(&state), Access::Read) {
        return Ok(http_kit::Json(Vec::new()));
    }
    let node_id = self_node_id(&state).await?;
    let wan = query.lenient_bool("wan");
    Ok(http_kit::Json(vec![member_json(&state, &node_id, wan)]))
}
