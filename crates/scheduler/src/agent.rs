//! `/v1/agent/*`: the local agent's own view.
//!
//! `GET /v1/agent/health` reports the server part and, when a client runs in this process,
//! the client part, as Nomad does (a server-only agent omits `client`).

use axum::Json;
use axum::extract::State;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub(crate) struct AgentHealth {
    #[serde(skip_serializing_if = "Option::is_none")]
    client: Option<HealthPart>,
    server: HealthPart,
}

#[derive(Debug, Serialize)]
struct HealthPart {
    ok: bool,
    message: &'static str,
}

/// `GET /v1/agent/health`.
pub(crate) async fn read_health(State(state): State<crate::State>) -> Json<AgentHealth> {
    let ok = || HealthPart {
        ok: true,
        message: "ok",
    };
    Json(AgentHealth {
        client: state.client_enabled().then(ok),
        server: ok(),
    })
}
pub(crate) async fn read_leader() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn read_peers() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn read_self() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn list_regions() -> crate::Error {
    crate::Error::NoRoute
}

