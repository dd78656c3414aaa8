//! Every route of the secrets service, in one table.
//!
//! Grep a URL here to find its handler's file. Unknown paths and methods fall back to Vault's
//! shapes: 404 `no handler for route` and 405 `unsupported operation`. Every `/v1/*` path
//! without its own line here goes to `dispatch::handle` (any method, including `LIST`).

use axum::Router;
use axum::routing::{get, post, put};

use crate::{Error, State, dispatch, seal, sys};

/// Header pairs (canonical prefix, upstream alias) for docs/design.md §D1.
const HEADER_ALIASES: &[(&str, &str)] = &[("x-secrets-", "x-vault-")];

/// The secrets service's router, with its state applied and its header aliases, without the
/// shared request layer: what the service's own tests call.
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
        fallback_route: Some(DISPATCH),
    }
}

fn routes(state: State) -> Router {
    Router::new()
        // Unauthenticated:
        .route("/v1/sys/health", get(sys::health::read_health))
        .route("/v1/sys/seal-status", get(seal::read_seal_status))
        .route("/v1/sys/leader", get(sys::ha::read_leader))
        .route(
            "/v1/sys/init",
            get(seal::read_init)
                .put(seal::write_init)
                .post(seal::write_init),
        )
        .route(
            "/v1/sys/unseal",
            put(seal::write_unseal).post(seal::write_unseal),
        )
        // Snapshot restores take a raw body (their own checks; other methods: dispatch).
        .merge(http_kit::with_body_limit(
            Router::new()
                .route(
                    "/v1/sys/storage/raft/snapshot",
                    post(sys::snapshots::restore)
                        .put(sys::snapshots::restore)
                        .fallback(dispatch::handle),
                )
                .route(
                    "/v1/sys/storage/raft/snapshot-force",
                    post(sys::snapshots::restore_force)
                        .put(sys::snapshots::restore_force)
                        .fallback(dispatch::handle),
                ),
            sys::snapshots::RESTORE_BODY_LIMIT,
        ))
        // Everything else under /v1/: token, ACL, mounts (dispatch.rs), as the fallback (see
        // `fallback`).
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// The requests `dispatch` serves (every `/v1/` path without its own route, not `/v1/`
/// itself), and the route label the request metrics give them.
const DISPATCH: http_kit::FallbackRoute = http_kit::FallbackRoute {
    prefix: "/v1/",
    label: "/v1/{*path}",
};

/// Every `/v1/` path without its own route goes to `dispatch::handle`; anything else is a 404.
/// A fallback rather than a `/v1/{*path}` route: axum then neither percent-decodes and stores
/// the path parameter (which `dispatch` does not read) nor stores a `MatchedPath` (with the
/// shared layer's `BodyLimit` change, a kv v1 read with a limited token went from 36,415 to
/// 35,273 instructions, callgrind); the metrics still label these requests `/v1/{*path}`
/// ([`DISPATCH`], through the hooks).
async fn fallback(
    state: axum::extract::State<State>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if DISPATCH.holds(request.uri().path()) {
        dispatch::handle(state, request).await
    } else {
        not_found(request.uri().clone()).await.into_response()
    }
}

async fn not_found(uri: axum::http::Uri) -> Error {
    let path = uri.path().strip_prefix("/v1/").unwrap_or(uri.path());
    Error::NoHandler(path.to_owned())
}

async fn method_not_allowed() -> Error {
    Error::UnsupportedOperation
}
