//! The secrets store: a Vault/OpenBao-compatible HTTP API on its own listener (default
//! 127.0.0.1:8200).
//!
//! Request flow: `cairn` binds the listener and serves [`router`]; `routes.rs` lists every
//! (method, path); handlers live in one file per URL family (`sys/health.rs` for
//! `/v1/sys/health`) and answer errors through [`Error`], rendered as Vault's
//! `{"errors":[...]}` with `Content-Type: application/json`.
//!
//! What exists today: the health endpoint and the cluster identity. Seal and barrier, tokens,
//! policies, mounts and engines arrive with the secrets-core issue; this crate is where they go.
//!
//! Invariants:
//! - Everything this crate stores lives under the `secrets/` key prefix (see `store.rs`).
//! - The secrets crate never depends on another service crate.

mod error;
mod routes;
mod store;
mod sys;

use std::sync::Arc;

use storage::Storage;

pub use error::Error;
pub use routes::router;

/// Query strings whose errors render in Vault's shape.
pub(crate) type Query<T> = http_kit::ApiQuery<T, Error>;

/// The version reported to clients: a Vault-compatible core version (so clients that gate
/// features on the server version work) with cairn's own version as build metadata.
pub const REPORTED_VERSION: &str = concat!("1.17.0+cairn.", env!("CARGO_PKG_VERSION"));

/// How the secrets service is started.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `cairn dev`: the root token to create. `None` in `cairn server`.
    pub dev_root_token: Option<String>,
}

/// Shared state of the secrets service; cheap to clone.
#[derive(Debug, Clone)]
pub struct State {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    storage: Arc<dyn Storage>,
    cluster: store::ClusterIdentity,
    #[allow(
        dead_code,
        reason = "used by the token store of the secrets-core issue"
    )]
    config: Config,
}

impl State {
    /// Loads (or, on first start, creates and persists) the service's state.
    pub async fn open(storage: Arc<dyn Storage>, config: Config) -> Result<State, Error> {
        let cluster = store::load_or_create_cluster(storage.as_ref()).await?;
        Ok(State {
            inner: Arc::new(Inner {
                storage,
                cluster,
                config,
            }),
        })
    }

    fn cluster(&self) -> &store::ClusterIdentity {
        &self.inner.cluster
    }

    #[allow(
        dead_code,
        reason = "handlers of later issues read and write through it"
    )]
    fn storage(&self) -> &dyn Storage {
        self.inner.storage.as_ref()
    }
}
