//! The job scheduler: a Nomad-compatible HTTP API on its own listener (default
//! 127.0.0.1:4646).
//!
//! Request flow: `cairn` binds the listener and serves [`router`]; `routes.rs` lists every
//! (method, path); handlers live in one file per URL family (`agent.rs` for `/v1/agent/*`);
//! errors go through [`Error`], rendered as Nomad's plain text.
//!
//! What exists today: `/v1/agent/health`. Jobs, evaluations, placement, nodes and allocations
//! arrive with the job-scheduler issue; the client that runs tasks goes in `scheduler-agent`.
//!
//! Invariants:
//! - Everything this crate stores lives under the `scheduler/` key prefix.
//! - Placement stays a pure function over a state snapshot (no I/O in `placement/`).
//! - The scheduler crate never depends on another service crate.

mod agent;
pub mod diff;
mod error;
pub mod filter;
pub mod jobspec;
mod routes;

use std::sync::Arc;

use storage::Storage;

pub use error::Error;
pub use routes::router;

/// How the scheduler is started.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Whether a client runs in this process (`cairn dev` runs one once it exists).
    pub client_enabled: bool,
    /// `cairn dev`: the bootstrap ACL token.
    pub dev_root_token: Option<String>,
}

/// Shared state of the scheduler; cheap to clone.
#[derive(Debug, Clone)]
pub struct State {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    #[allow(
        dead_code,
        reason = "jobs and allocations of the job-scheduler issue write through it"
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

    fn client_enabled(&self) -> bool {
        self.inner.config.client_enabled
    }
}
