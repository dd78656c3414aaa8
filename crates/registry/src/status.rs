//! `/v1/status/*`: the leader and the raft peers, as Consul reports them.
//!
//! With the embedded store the registry is a single server, its own leader and only peer; on
//! etcd the answers come from `cluster`'s membership: the leader's and every live server's
//! registry listener (`""` while no leader is known, as Consul during an election).
//! py-consul's test harness polls `/v1/status/leader` until it is not `""`.

use axum::extract::State;
use http_kit::Json;

/// `GET /v1/status/leader`: the leader's address as a JSON string, `"ip:port"`.
pub(crate) async fn read_leader(State(state): State<crate::State>) -> Json<String> {
    Json(state.leader_addr().unwrap_or_default())
}

/// `GET /v1/status/peers`: the raft peers' addresses.
pub(crate) async fn list_peers(State(state): State<crate::State>) -> Json<Vec<String>> {
    Json(state.peer_addrs())
}
