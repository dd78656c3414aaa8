//! High availability answers: `GET /v1/sys/leader` (unauthenticated, its own route in
//! `routes.rs`) and `GET sys/ha-status` (through dispatch, with a token), from the `cluster`
//! membership in [`crate::Config::cluster`]; `sys/health` (`health.rs`) asks [`is_standby`].
//!
//! On etcd (`ha_enabled`), the active node is the cluster's leader, and the others are
//! standbys; every server serves every request from the shared store, so a standby answers
//! rather than forwards. With the embedded store (or no cluster given) the node is the single
//! active one and `ha_enabled` is false, as a Vault server whose storage has no HA.
//!
//! cairn has no separate cluster port: `leader_cluster_address` and each node's
//! `cluster_address` are its API address.
//!
//! `active_time` is when the active node's current term of leadership began (RFC 3339); a
//! standby, and a node without HA, report Vault's zero time.
//!
//! Invariant: a sealed node answers `sys/leader` with 503 (`Vault is sealed`), as Vault does;
//! an unknown leader is `""`, never a guess.

use secrets_sdk::{Data, Operation, Request, Response};
use serde::Serialize;
use serde_json::{Value, json};

use crate::request::RequestContext;
use crate::{Error, REPORTED_VERSION, State};

/// Vault's zero time, for `active_time` when no time is known.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// The body of `sys/leader`.
#[derive(Debug, Serialize)]
struct LeaderResponse {
    ha_enabled: bool,
    is_self: bool,
    active_time: String,
    leader_address: String,
    leader_cluster_address: String,
    performance_standby: bool,
    performance_standby_last_remote_wal: u64,
    raft_committed_index: u64,
    raft_applied_index: u64,
}

/// `at` in RFC 3339 (UTC, milliseconds).
fn rfc3339(at: std::time::SystemTime) -> String {
    let since_epoch = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let millis = i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX);
    stdx::time::format_rfc3339_millis(millis)
}

/// Whether this node is an HA standby: leadership is elected and another server holds it.
pub(crate) fn is_standby(state: &State) -> bool {
    state
        .config()
        .cluster
        .as_ref()
        .is_some_and(|cluster| cluster.is_elected() && !cluster.is_leader())
}

/// `GET /v1/sys/leader`.
pub(crate) async fn read_leader(
    axum::extract::State(state): axum::extract::State<State>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if !state.seal().is_unsealed() {
        // A 5xx's message is hidden by http-kit; "sealed" is the one Vault clients must see.
        return http_kit::shape::errors_json(
            http::StatusCode::SERVICE_UNAVAILABLE,
            &[&Error::Sealed.to_string()],
        );
    }
    let mut body = LeaderResponse {
        ha_enabled: false,
        is_self: false,
        active_time: ZERO_TIME.to_owned(),
        leader_address: String::new(),
        leader_cluster_address: String::new(),
        performance_standby: false,
        performance_standby_last_remote_wal: 0,
        raft_committed_index: 0,
        raft_applied_index: 0,
    };
    if let Some(cluster) = state.config().cluster.as_ref().filter(|c| c.is_elected()) {
        body.ha_enabled = true;
        body.is_self = cluster.is_leader();
        if body.is_self
            && let Some(since) = cluster.active_since()
        {
            body.active_time = rfc3339(since);
        }
        if let Some(leader) = cluster.leader() {
            let address = leader.url("secrets").unwrap_or_default().to_owned();
            body.leader_cluster_address.clone_from(&address);
            body.leader_address = address;
        }
    }
    http_kit::Json(body).into_response()
}

/// `GET sys/ha-status`: every server known to serve, the active one marked.
pub(crate) async fn handle(
    state: &State,
    _ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    if req.path.trim_end_matches('/') != "ha-status" {
        return Err(Error::UnsupportedPath);
    }
    if req.operation != Operation::Read {
        return Err(Error::UnsupportedOperation);
    }
    let nodes: Vec<Value> = match &state.config().cluster {
        None => Vec::new(),
        Some(cluster) => {
            let leader = cluster.leader().map(|leader| leader.id);
            cluster
                .peers()
                .into_iter()
                .map(|peer| {
                    let address = peer.url("secrets").unwrap_or_default().to_owned();
                    json!({
                        "hostname": peer.hostname,
                        "api_address": address,
                        "cluster_address": address,
                        "active_node": leader.as_deref() == Some(peer.id.as_str()),
                        "last_echo": Value::Null,
                        "version": REPORTED_VERSION,
                    })
                })
                .collect()
        }
    };
    let mut data = Data::new();
    data.insert("nodes".to_owned(), Value::Array(nodes));
    Ok(Some(Response::data(data)))
}
