//! Every route of the registry. Each URL family's file lists its own routes in a `routes()`
//! function next to its handlers; this file merges them and adds what every response shares.
//!
//! | file | routes |
//! |---|---|
//! | `session.rs` | `/v1/session/{create,destroy/:id,info/:id,node/:node,list,renew/:id}` |
//! | `kv.rs` | `/v1/kv/*key` |
//! | `catalog.rs` | `/v1/catalog/{register,deregister,nodes,node/:node,services,service/:service,datacenters}` |
//! | `health.rs` | `/v1/health/{node/:node,checks/:service,service/:service,state/:state}` |
//! | `agent.rs` | `/v1/agent/{self,checks,services,check/*,service/*}` |
//! | `status.rs` | `/v1/status/{leader,peers}` |
//! | `acl/policy.rs`, `acl/token.rs` | `/v1/acl/policy*`, `/v1/acl/token*`, `/v1/acl/policies`, `/v1/acl/tokens` |
//!
//! Unknown paths answer 404 and wrong methods 405, in Consul's plain-text shape, with the
//! index headers like every other response.

use axum::Router;

use crate::{Error, State, agent, catalog, health, kv, meta, session, status};

/// Header pairs (canonical prefix, upstream alias) for DESIGN.md decision 1.
const HEADER_ALIASES: &[(&str, &str)] = &[("x-registry-", "x-consul-")];

/// The registry's router, with its state applied.
pub fn router(state: State) -> Router {
    let routes = Router::new()
        .merge(status::routes())
        .merge(session::routes())
        .merge(kv::routes())
        .merge(catalog::routes())
        .merge(health::routes())
        .merge(agent::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state.clone());
    http_kit::header_aliases(meta::layer(routes, state), HEADER_ALIASES)
}

async fn not_found(uri: axum::http::Uri) -> Error {
    Error::NoRoute(uri.path().to_owned())
}

async fn method_not_allowed(method: axum::http::Method) -> Error {
    Error::MethodNotAllowed(method.to_string())
}
