//! Every route of the registry, in one table: grep a URL here to find its handler. Handlers
//! live in the file (or folder) named after their URL family (`session.rs` for `/v1/session/*`,
//! `agent/checks.rs` for `/v1/agent/check*`, `acl/token.rs` for `/v1/acl/token*`); every handler
//! except the unauthenticated ones (`status.rs`'s and `acl/bootstrap.rs`'s) starts with the
//! `Authz` extractor.
//!
//! Unknown paths answer 404 and wrong methods 405, in Consul's plain-text shape, with the
//! index headers like every other response.

use axum::Router;
use axum::response::Redirect;
use axum::routing::{get, put};

use crate::acl::{bootstrap, policy, token};
use crate::{Error, State, agent, catalog, health, kv, meta, session, status};

/// Header pairs (canonical prefix, upstream alias) for docs/design.md §D1.
const HEADER_ALIASES: &[(&str, &str)] = &[("x-registry-", "x-consul-")];

/// The registry's router, with its state applied and its header hooks (aliases, index and
/// leader headers), without the shared request layer: what the registry's own tests call.
pub fn router(state: State) -> Router {
    let hooks = hooks(&state);
    http_kit::hooks(routes(state), hooks)
}

/// The registry's router inside the shared request layer (`http_kit::layers_with_hooks`), its
/// hooks in the same layer: what a server serves.
pub fn router_with(state: State, options: &http_kit::HttpOptions) -> Router {
    let hooks = hooks(&state);
    http_kit::layers_with_hooks(routes(state), options, hooks)
}

fn hooks(state: &State) -> http_kit::Hooks {
    http_kit::Hooks {
        aliases: HEADER_ALIASES,
        admit: None,
        finish: Some(meta::finish(state.clone())),
        fallback_route: None,
    }
}

fn routes(state: State) -> Router {
    Router::new()
        // status.rs  (unauthenticated)
        .route("/v1/status/leader", get(status::read_leader))
        .route("/v1/status/peers", get(status::list_peers))
        // acl/bootstrap.rs  (unauthenticated)
        .route("/v1/acl/bootstrap", put(bootstrap::create_bootstrap_token))
        // session.rs
        .route("/v1/session/create", put(session::create_session))
        .route("/v1/session/destroy/{id}", put(session::destroy_session))
        .route("/v1/session/destroy/", put(session::missing_session))
        .route("/v1/session/info/{id}", get(session::info_session))
        .route("/v1/session/info/", get(session::missing_session))
        .route("/v1/session/node/{node}", get(session::node_sessions))
        .route("/v1/session/node/", get(session::missing_node))
        .route("/v1/session/list", get(session::list_sessions))
        .route("/v1/session/renew/{id}", put(session::renew_session))
        .route("/v1/session/renew/", put(session::missing_session))
        // catalog/
        .route(
            "/v1/catalog/register",
            put(catalog::writes::update_registration),
        )
        .route(
            "/v1/catalog/deregister",
            put(catalog::writes::delete_registration),
        )
        .route(
            "/v1/catalog/datacenters",
            get(catalog::reads::list_datacenters),
        )
        .route("/v1/catalog/nodes", get(catalog::reads::list_nodes))
        .route("/v1/catalog/node/", get(catalog::reads::read_node_unnamed))
        .route("/v1/catalog/node/{node}", get(catalog::reads::read_node))
        .route("/v1/catalog/services", get(catalog::reads::list_services))
        .route(
            "/v1/catalog/service/",
            get(catalog::reads::list_service_instances_unnamed),
        )
        .route(
            "/v1/catalog/service/{service}",
            get(catalog::reads::list_service_instances),
        )
        // health.rs
        .route("/v1/health/node/", get(health::read_unnamed_node))
        .route("/v1/health/node/{node}", get(health::list_node_checks))
        .route("/v1/health/checks/", get(health::read_unnamed_service))
        .route(
            "/v1/health/checks/{service}",
            get(health::list_service_checks),
        )
        .route("/v1/health/service/", get(health::read_unnamed_service))
        .route(
            "/v1/health/service/{service}",
            get(health::list_service_entries),
        )
        .route(
            "/v1/health/connect/{service}",
            get(health::list_connect_entries),
        )
        .route(
            "/v1/health/ingress/{service}",
            get(health::list_connect_entries),
        )
        .route(
            "/v1/health/state/{state}",
            get(health::list_checks_in_state),
        )
        // agent/
        .route("/v1/agent/self", get(agent::node::read_self))
        .route("/v1/agent/members", get(agent::node::list_members))
        .route("/v1/agent/metrics", get(agent::metrics::read_metrics))
        .route("/v1/agent/checks", get(agent::checks::list_checks))
        .route("/v1/agent/services", get(agent::services::list_services))
        .route(
            "/v1/agent/service/{*service_id}",
            get(agent::services::read_service),
        )
        .route(
            "/v1/agent/maintenance",
            put(agent::maintenance::update_node_maintenance),
        )
        .route("/v1/agent/check/register", put(agent::checks::create_check))
        .route(
            "/v1/agent/check/deregister/{*check_id}",
            put(agent::checks::delete_check),
        )
        .route(
            "/v1/agent/check/pass/{*check_id}",
            put(agent::checks::update_check_pass),
        )
        .route(
            "/v1/agent/check/warn/{*check_id}",
            put(agent::checks::update_check_warn),
        )
        .route(
            "/v1/agent/check/fail/{*check_id}",
            put(agent::checks::update_check_fail),
        )
        .route(
            "/v1/agent/check/update/{*check_id}",
            put(agent::checks::update_check),
        )
        .route(
            "/v1/agent/service/register",
            put(agent::services::create_service),
        )
        .route(
            "/v1/agent/service/deregister/{*service_id}",
            put(agent::services::delete_service),
        )
        .route(
            "/v1/agent/service/maintenance/{*service_id}",
            put(agent::maintenance::update_service_maintenance),
        )
        // acl/policy.rs
        .route("/v1/acl/policy", put(policy::create_policy))
        .route(
            "/v1/acl/policy/{id}",
            get(policy::read_policy)
                .put(policy::update_policy)
                .delete(policy::delete_policy),
        )
        .route(
            "/v1/acl/policy/name/{name}",
            get(policy::read_policy_by_name),
        )
        .route("/v1/acl/policies", get(policy::list_policies))
        // acl/token.rs
        .route("/v1/acl/token", put(token::create_token))
        .route("/v1/acl/token/self", get(token::read_token_self))
        .route(
            "/v1/acl/token/{accessor_id}",
            get(token::read_token)
                .put(token::update_token)
                .delete(token::delete_token),
        )
        .route("/v1/acl/token/{accessor_id}/clone", put(token::clone_token))
        .route("/v1/acl/tokens", get(token::list_tokens))
        // kv.rs: values have their own, smaller body limit.
        .merge(http_kit::with_body_limit(
            Router::new()
                .route(
                    "/v1/kv/",
                    get(kv::get_kv_root)
                        .put(kv::put_kv_root)
                        .delete(kv::delete_kv_root),
                )
                .route(
                    "/v1/kv/{*key}",
                    get(kv::get_kv).put(kv::put_kv).delete(kv::delete_kv),
                ),
            kv::MAX_VALUE_SIZE,
        ))
        // Consul answers `/` with a redirect to its UI; HTTP checks that probe the agent
        // (py-consul's own tests do) expect a 2xx there.
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route(
            "/ui/",
            get(|| async { "cairn registry: Consul-compatible API, no web UI\n" }),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn not_found(uri: axum::http::Uri) -> Error {
    Error::NoRoute(uri.path().to_owned())
}

async fn method_not_allowed(method: axum::http::Method) -> Error {
    Error::MethodNotAllowed(method.to_string())
}
