//! The platform: a Terraform Enterprise API v2-compatible JSON:API service on its own listener
//! (default 127.0.0.1:8080), under `/api/v2`.
//!
//! Request flow: `cairn` binds the listener and serves [`router`]; `routes.rs` lists every
//! (method, path); handlers live in one file per URL family (`ping.rs` for `/api/v2/ping`);
//! errors go through [`Error`], rendered as JSON:API error documents by the `jsonapi` crate.
//!
//! What exists today: `/api/v2/ping`, and the `TFP-API-Version` header on every response.
//! Organizations, users, teams, tokens, memberships, workspaces, configuration versions and
//! runs arrive with the platform issue.
//!
//! Invariants:
//! - Everything this crate stores lives under the `platform/` key prefix.
//! - Every response carries `TFP-API-Version: 2.5` (Terraform refuses older servers).
//! - Error `status` members are strings; "no access" is 404, never 403 (TFE's rule).
//! - The platform crate never depends on another service crate.

mod error;
mod ping;
mod routes;

use std::sync::Arc;

use storage::Storage;

pub use error::Error;
pub use routes::router;

/// The JSON:API version this server speaks, sent as `TFP-API-Version`.
pub const API_VERSION: &str = "2.5";

/// How the platform is started.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `cairn dev`: the site administrator's token.
    pub dev_root_token: Option<String>,
}

/// Shared state of the platform; cheap to clone.
#[derive(Debug, Clone)]
pub struct State {
    #[allow(
        dead_code,
        reason = "the handlers of the platform issue read it; ping needs nothing"
    )]
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    #[allow(
        dead_code,
        reason = "organizations and workspaces of the platform issue write through it"
    )]
    storage: Arc<dyn Storage>,
    #[allow(
        dead_code,
        reason = "the site administrator of the platform issue is bootstrapped from it"
    )]
    config: Config,
}

impl State {
    pub fn new(storage: Arc<dyn Storage>, config: Config) -> State {
        State {
            inner: Arc::new(Inner { storage, config }),
        }
    }
}
