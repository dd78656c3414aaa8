//! The session registry: a Consul-compatible HTTP API on its own listener (default
//! 127.0.0.1:8500).
//!
//! Request flow: `cairn` binds the listener and serves [`router`]; `routes.rs` lists every
//! (method, path); handlers live in one file per URL family (`status.rs` for `/v1/status/*`);
//! errors go through [`Error`], rendered as Consul's plain text.
//!
//! What exists today: `/v1/status/leader` and `/v1/status/peers`. Sessions, catalog, health
//! checks, KV and ACL arrive with the session-registry issue.
//!
//! Invariants:
//! - Everything this crate stores lives under the `registry/` key prefix.
//! - Responses carry `X-Registry-*` headers and, through the alias layer, `X-Consul-*` twins.
//! - The registry crate never depends on another service crate.

mod error;
mod routes;
mod status;

use std::net::SocketAddr;
use std::sync::Arc;

use storage::Storage;

pub use error::Error;
pub use routes::router;

/// How the registry is started.
#[derive(Debug, Clone)]
pub struct Config {
    /// The address this server advertises as the leader (its own: cairn runs one server).
    pub advertise_addr: SocketAddr,
    /// `cairn dev`: the initial ACL management token.
    pub dev_root_token: Option<String>,
}

/// Shared state of the registry; cheap to clone.
#[derive(Debug, Clone)]
pub struct State {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    #[allow(
        dead_code,
        reason = "sessions and KV of the session-registry issue write through it"
    )]
    storage: Arc<dyn Storage>,
    config: Config,
}

impl State {
    pub fn new(storage: Arc<dyn Storage>, config: Config) -> State {
        State {
            inner: Arc::new(Inner { storage, config }),
        }
    }

    fn advertise_addr(&self) -> SocketAddr {
        self.inner.config.advertise_addr
    }
}
