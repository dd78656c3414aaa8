//! Every route of the scheduler, in one table.
//!
//! Unknown paths answer 404 and wrong methods 405, both in Nomad's plain-text shape. Paths
//! take the job or allocation ID as one segment; Nomad's job IDs may contain `/` only when
//! URL-encoded (`%2F`), which axum decodes.

use axum::Router;
use axum::routing::{get, post, put};

use crate::forward::ForwardLayer;
use crate::{
    Error, State, acl, agent, allocations, client_fs, client_rpc, client_stats, exec, gc, jobs,
    metrics, namespaces, nodes, pause, services,
};

/// Header pairs (canonical prefix, upstream alias) for docs/design.md §D1.
const HEADER_ALIASES: &[(&str, &str)] = &[("x-scheduler-", "x-nomad-")];

/// The scheduler's router, with its state applied and its header aliases, without the shared
/// request layer: what the scheduler's own tests call.
pub fn router(state: State) -> Router {
    http_kit::hooks(routes(state), hooks())
}

/// The router inside the shared request layer (`http_kit::layers_with_hooks`), its header
/// aliases in the same layer: what a server serves.
pub fn router_with(state: State, options: &http_kit::HttpOptions) -> Router {
    http_kit::layers_with_hooks(routes(state), options, hooks())
}

fn hooks() -> http_kit::Hooks {
    http_kit::Hooks {
        aliases: HEADER_ALIASES,
        admit: None,
        finish: None,
        fallback_route: None,
    }
}

fn routes(state: State) -> Router {
    let routes = Router::new()
        // Agent and status (unauthenticated):
        .route("/v1/agent/health", get(agent::read_health))
        .route("/v1/status/leader", get(agent::read_leader))
        .route("/v1/status/peers", get(agent::read_peers))
        .route("/v1/agent/self", get(agent::read_self))
        .route("/v1/regions", get(agent::list_regions))
        .route("/v1/system/gc", put(gc::force))
        .route("/v1/metrics", get(metrics::read_metrics))
        // The path Consul serves metrics at, for scrapers configured once for both agents.
        .route("/v1/agent/metrics", get(metrics::read_metrics))
        // Jobs (jobs/):
        .route(
            "/v1/jobs",
            get(jobs::list).post(jobs::register).put(jobs::register),
        )
        .route("/v1/jobs/parse", post(jobs::parse).put(jobs::parse))
        .route(
            "/v1/job/{job_id}",
            get(jobs::read)
                .post(jobs::register_at)
                .put(jobs::register_at)
                .delete(jobs::deregister),
        )
        .route("/v1/job/{job_id}/submission", get(jobs::submission))
        .route("/v1/job/{job_id}/versions", get(jobs::versions))
        .route("/v1/job/{job_id}/allocations", get(jobs::allocations))
        .route("/v1/job/{job_id}/evaluations", get(jobs::evaluations))
        .route("/v1/job/{job_id}/summary", get(jobs::summary))
        // Allocations and evaluations (allocations.rs):
        .route("/v1/allocations", get(allocations::list))
        .route("/v1/allocation/{alloc_id}", get(allocations::read))
        .route(
            "/v1/allocation/{alloc_id}/stop",
            post(allocations::stop).put(allocations::stop),
        )
        // Client allocation endpoints (allocations.rs, exec.rs, client_fs.rs, client_stats.rs):
        .route(
            "/v1/client/allocation/{alloc_id}/signal",
            post(allocations::signal).put(allocations::signal),
        )
        .route(
            "/v1/client/allocation/{alloc_id}/restart",
            post(allocations::restart).put(allocations::restart),
        )
        .route("/v1/client/allocation/{alloc_id}/exec", get(exec::exec))
        .route(
            "/v1/client/allocation/{alloc_id}/stats",
            get(client_stats::alloc),
        )
        .route(
            "/v1/client/allocation/{alloc_id}/gc",
            get(client_stats::gc_alloc)
                .put(client_stats::gc_alloc)
                .post(client_stats::gc_alloc),
        )
        .route("/v1/client/stats", get(client_stats::host))
        .route(
            "/v1/client/gc",
            get(client_stats::gc_node)
                .put(client_stats::gc_node)
                .post(client_stats::gc_node),
        )
        .route("/v1/client/fs/ls/{alloc_id}", get(client_fs::ls))
        .route("/v1/client/fs/stat/{alloc_id}", get(client_fs::stat))
        .route("/v1/client/fs/cat/{alloc_id}", get(client_fs::cat))
        .route("/v1/client/fs/readat/{alloc_id}", get(client_fs::readat))
        .route("/v1/client/fs/logs/{alloc_id}", get(client_fs::logs))
        .route("/v1/client/fs/stream/{alloc_id}", get(client_fs::stream))
        .route("/v1/evaluations", get(allocations::list_evaluations))
        .route(
            "/v1/evaluation/{eval_id}",
            get(allocations::read_evaluation),
        )
        // Services, checks and pause overrides (services.rs, pause.rs):
        .route("/v1/services", get(services::list))
        .route("/v1/service/{name}", get(services::read))
        .route(
            "/v1/allocation/{alloc_id}/services",
            get(services::for_alloc),
        )
        .route("/v1/allocation/{alloc_id}/checks", get(services::checks))
        .route(
            "/v1/client/allocation/{alloc_id}/pause",
            get(pause::read).post(pause::write).put(pause::write),
        )
        .route(
            "/v1/internal/node/{node_id}/runtime",
            put(services::report).post(services::report),
        )
        .route(
            "/v1/internal/node/{node_id}/overrides",
            get(pause::for_node),
        )
        // Nodes and node pools (nodes.rs):
        .route("/v1/nodes", get(nodes::list))
        .route("/v1/node/{node_id}", get(nodes::read))
        .route("/v1/node/{node_id}/allocations", get(nodes::allocations))
        .route("/v1/node/pools", get(nodes::list_pools))
        .route("/v1/node/pool/{pool}", get(nodes::read_pool))
        // The cairn-internal client protocol (client_rpc.rs):
        .route(
            "/v1/internal/node/register",
            put(client_rpc::register).post(client_rpc::register),
        )
        .route(
            "/v1/internal/node/{node_id}/heartbeat",
            put(client_rpc::heartbeat).post(client_rpc::heartbeat),
        )
        .route(
            "/v1/internal/node/{node_id}/allocations",
            get(client_rpc::allocations),
        )
        .route(
            "/v1/internal/allocations",
            put(client_rpc::update_allocations).post(client_rpc::update_allocations),
        )
        .route("/v1/internal/node/{node_id}/calls", get(client_rpc::calls))
        .route(
            "/v1/internal/node/{node_id}/call/{call_id}",
            get(client_rpc::dial_back),
        )
        // ACL (acl/):
        .route(
            "/v1/acl/bootstrap",
            post(acl::bootstrap).put(acl::bootstrap),
        )
        .route("/v1/acl/policies", get(acl::list_policies))
        .route(
            "/v1/acl/policy/{name}",
            get(acl::read_policy)
                .post(acl::write_policy)
                .put(acl::write_policy)
                .delete(acl::delete_policy),
        )
        .route("/v1/acl/tokens", get(acl::list_tokens))
        .route(
            "/v1/acl/token",
            post(acl::create_token).put(acl::create_token),
        )
        .route("/v1/acl/token/self", get(acl::read_self_token))
        .route(
            "/v1/acl/token/{accessor_id}",
            get(acl::read_token)
                .post(acl::update_token)
                .put(acl::update_token)
                .delete(acl::delete_token),
        )
        // Namespaces (namespaces.rs):
        .route("/v1/namespaces", get(namespaces::list))
        .route(
            "/v1/namespace",
            post(namespaces::write).put(namespaces::write),
        )
        .route(
            "/v1/namespace/{name}",
            get(namespaces::read)
                .post(namespaces::write_named)
                .put(namespaces::write_named)
                .delete(namespaces::delete),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state.clone());
    // On several servers, one that does not lead sends writes to the leader (forward.rs). A
    // single server never forwards, so it goes without the layer (one boxed `Route` less on
    // every request).
    if state.config().cluster.is_some() {
        routes.layer(ForwardLayer::new(state))
    } else {
        routes
    }
}

async fn not_found() -> Error {
    Error::NoRoute
}

async fn method_not_allowed() -> Error {
    Error::MethodNotAllowed
}
