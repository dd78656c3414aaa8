//! `/v1/status/*`: the leader and the raft peers, as Consul reports them.
//!
//! cairn runs the registry as a single server, so it is always its own leader and only peer.
//! py-consul's test harness polls `/v1/status/leader` until it is not `""`.

use axum::Json;
use axum::extract::State;

/// `GET /v1/status/leader`: the leader's address as a JSON string, `"ip:port"`.
pub(crate) async fn read_leader(State(state): State<crate::State>) -> Json<String> {
    Json(state.advertise_addr().to_string())
}

/// `GET /v1/status/peers`: the raft peers' addresses.
pub(crate) async fn list_peers(State(state): State<crate::State>) -> Json<Vec<String>> {
    Json(vec![state.advertise_addr().to_string()])
}
