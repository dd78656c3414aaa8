//! `/v1/agent/*`, `/v1/status/*` and `/v1/regions`: the local agent's own view.
//!
//! A lone server (the embedded store) is its own leader and only peer; its RPC address is
//! reported as Nomad's would be: the host the client reached, on Nomad's RPC port 4647. With
//! several servers (`Config::cluster`), the leader and peers are the servers' scheduler
//! listeners (`ip:port`) from the cluster membership, and `""` while no leader is known. `GET /v1/agent/health` reports the server part and, when a client runs in
//! this process, the client part, as Nomad does (a server-only agent omits `client`).
//!
//! Invariants: only `/v1/agent/self` needs a token (`agent:read`, as upstream); the others
//! never fail.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use http::{HeaderMap, HeaderValue, header};
use http_kit::Json;
use serde_json::{Value, json};

use crate::Error;
use crate::acl::Authz;

/// The Nomad version cairn's scheduler API corresponds to (reported in `/v1/agent/self`).
const NOMAD_COMPAT_VERSION: &str = "1.10.0";

/// Nomad's RPC port, reported in the leader and peer addresses.
const RPC_PORT: u16 = 4647;

/// `GET /v1/agent/health`: one of two fixed answers (with and without the client part), the
/// bytes Nomad's health type serialises to (the tests' `AgentHealth`), sent without
/// serialising or allocating.
pub(crate) async fn read_health(State(state): State<crate::State>) -> Response {
    let body: &'static [u8] = if state.client_enabled() {
        HEALTH_WITH_CLIENT
    } else {
        HEALTH_SERVER_ONLY
    };
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

const HEALTH_WITH_CLIENT: &[u8] =
    br#"{"client":{"ok":true,"message":"ok"},"server":{"ok":true,"message":"ok"}}"#;
const HEALTH_SERVER_ONLY: &[u8] = br#"{"server":{"ok":true,"message":"ok"}}"#;

/// The host the client reached us at (from `Host`), or loopback.
fn host_of(headers: &HeaderMap) -> String {
    let host = headers
        .get(http::header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("127.0.0.1");
    let host = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().map(|inner| format!("[{inner}]"))
    } else {
        host.split(':').next().map(str::to_owned)
    };
    match host {
        Some(host) if !host.is_empty() && host != "[]" => host,
        _ => "127.0.0.1".to_owned(),
    }
}

/// Our RPC address as Nomad reports it (`127.0.0.1:4647`).
fn rpc_address(headers: &HeaderMap) -> String {
    format!("{}:{RPC_PORT}", host_of(headers))
}

/// The leader's address: with several servers, the leader's scheduler listener (`""` while
/// none is known, as Nomad); alone, our own RPC address.
fn leader_address(state: &crate::State, headers: &HeaderMap) -> String {
    match &state.config().cluster {
        Some(cluster) => cluster.leader_address().unwrap_or_default(),
        None => rpc_address(headers),
    }
}

/// `GET /v1/status/leader`.
pub(crate) async fn read_leader(
    State(state): State<crate::State>,
    headers: HeaderMap,
) -> Json<String> {
    Json(leader_address(&state, &headers))
}

/// `GET /v1/status/peers`.
pub(crate) async fn read_peers(
    State(state): State<crate::State>,
    headers: HeaderMap,
) -> Json<Vec<String>> {
    match &state.config().cluster {
        Some(cluster) => Json((cluster.peers)()),
        None => Json(vec![rpc_address(&headers)]),
    }
}

/// `GET /v1/agent/self`: a small subset of Nomad's answer (`config`, `member`, `stats`);
/// needs `agent:read`, as upstream.
pub(crate) async fn read_self(
    authz: Authz,
    State(state): State<crate::State>,
    headers: HeaderMap,
) -> Result<Json<Value>, Error> {
    authz.allow_agent_read()?;
    let config = state.config();
    let host = host_of(&headers);
    let name = format!("cairn.{}", config.region);
    Ok(Json(json!({
        "config": {
            "Region": config.region,
            "Datacenter": config.datacenter,
            "NodeName": name,
            "Version": {
                "Version": NOMAD_COMPAT_VERSION,
                "VersionPrerelease": "",
                "VersionMetadata": format!("cairn.{}", env!("CARGO_PKG_VERSION")),
                "Revision": "",
            },
            "Server": {"Enabled": true, "BootstrapExpect": 1, "NumSchedulers": config.workers},
            "Client": {"Enabled": config.client_enabled},
            "ACL": {"Enabled": config.acl_enabled},
        },
        "member": {
            "Name": name,
            "Addr": host.trim_start_matches('[').trim_end_matches(']'),
            "Port": 4648,
            "Status": "alive",
            "Tags": {
                "region": config.region,
                "dc": config.datacenter,
                "role": "nomad",
                "build": NOMAD_COMPAT_VERSION,
                "port": RPC_PORT.to_string(),
                "bootstrap": "1",
            },
        },
        "stats": {
            "nomad": {
                "server": "true",
                "leader": if state.role().leading() || config.cluster.is_none() { "true" } else { "false" },
                "leader_addr": leader_address(&state, &headers),
                "bootstrap": "true",
                "known_regions": "1",
            },
            "client": {"known_servers": if config.client_enabled { "1" } else { "0" }},
        },
    })))
}

/// `GET /v1/regions`.
pub(crate) async fn list_regions(State(state): State<crate::State>) -> Json<Vec<String>> {
    Json(vec![state.config().region.clone()])
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;

    /// Nomad's health answer as a type: what the fixed answers must be.
    #[derive(Debug, Serialize)]
    struct AgentHealth {
        #[serde(skip_serializing_if = "Option::is_none")]
        client: Option<HealthPart>,
        server: HealthPart,
    }

    #[derive(Debug, Serialize)]
    struct HealthPart {
        ok: bool,
        message: &'static str,
    }

    #[test]
    fn the_fixed_health_answers_are_the_serialised_ones() {
        let ok = || HealthPart {
            ok: true,
            message: "ok",
        };
        let with_client = AgentHealth {
            client: Some(ok()),
            server: ok(),
        };
        let server_only = AgentHealth {
            client: None,
            server: ok(),
        };
        assert_eq!(
            HEALTH_WITH_CLIENT,
            serde_json::to_vec(&with_client).unwrap()
        );
        assert_eq!(
            HEALTH_SERVER_ONLY,
            serde_json::to_vec(&server_only).unwrap()
        );
    }

    fn with_host(host: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::HOST,
            HeaderValue::from_str(host).unwrap_or(HeaderValue::from_static("x")),
        );
        headers
    }

    #[test]
    fn rpc_address_uses_the_reached_host_on_the_rpc_port() {
        assert_eq!(rpc_address(&HeaderMap::new()), "127.0.0.1:4647");
        assert_eq!(rpc_address(&with_host("10.1.2.3:4646")), "10.1.2.3:4647");
        assert_eq!(rpc_address(&with_host("[::1]:4646")), "[::1]:4647");
        assert_eq!(rpc_address(&with_host("example.com")), "example.com:4647");
    }
}
