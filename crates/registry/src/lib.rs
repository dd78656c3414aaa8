//! The session registry: a Consul-compatible HTTP API on its own listener (default
//! 127.0.0.1:8500).
//!
//! Request flow: `cairn` binds the listener and serves [`router`]; `routes.rs` lists every
//! (method, path); handlers live in one file (or folder) per URL family (`session.rs` for
//! `/v1/session/*`, `kv.rs`, `catalog/`, `health.rs`, `agent/`, `status.rs`, `acl/`); every
//! handler starts with the [`acl::Authz`] extractor (the token, its rules and namespace) and
//! the common query options of `meta.rs`; errors go through [`Error`], rendered as Consul's
//! plain text. Handlers decode, authorize, call `domain/` (the model's transactions, over the
//! keys and records of `store/`) and render (`views.rs`). Background work (session TTLs, check
//! runners) lives in `tasks/`, registered with `cairn`'s `cluster::Runner` by [`start_tasks`];
//! it calls `domain/` too, never a handler.
//!
//! Invariants:
//! - Everything this crate stores lives under the `registry/` key prefix (`store/`).
//! - Every response carries `X-Registry-Index`, `-KnownLeader` and `-LastContact` (and their
//!   `X-Consul-*` twins), errors included; an index is never 0.
//! - A write that changes several records (session invalidation, KV acquire) is one storage
//!   transaction, guarded by compare-and-swap on what it read; nothing holds a lock across I/O.
//! - Every timer (session TTL, TTL check, lock-delay) is rebuilt from storage at start.
//! - The registry crate never depends on another service crate.

pub mod acl;
mod acl_rules;
mod agent;
mod body;
mod catalog;
mod domain;
mod error;
mod filter;
mod health;
mod kv;
mod meta;
mod routes;
mod session;
mod status;
mod store;
mod tasks;
mod views;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use storage::Storage;

pub use error::Error;
pub use routes::{router, router_with};
pub use stdx::clock::{Clock, ManualClock, SharedClock, SystemClock};

/// The datacenter name this server reports and accepts.
pub const DEFAULT_DATACENTER: &str = "dc1";

/// The id of the default node health check every node gets.
pub const SERF_HEALTH_CHECK: &str = "serfHealth";

/// How the registry is started.
#[derive(Debug, Clone)]
pub struct Config {
    /// The address this server advertises as the leader (its own: cairn runs one server).
    pub advertise_addr: SocketAddr,
    /// This server's own node name, registered at start with a passing `serfHealth` check.
    pub node_name: String,
    pub datacenter: String,
    /// The shortest session TTL accepted (Consul's `session_ttl_min`, default 10 s).
    pub session_ttl_min: Duration,
    pub acl: AclConfig,
    /// The process's metrics registry (`cairn` shares one with every service); served at
    /// `/v1/agent/metrics` with this service's figures.
    pub metrics: http_kit::metrics::Metrics,
    /// Who leads and who the servers are (`/v1/status/*`, `X-Registry-KnownLeader`); `None`:
    /// a single server, its own leader at `advertise_addr`.
    pub cluster: Option<Arc<dyn cluster::Leadership>>,
}

/// ACL settings. With ACLs disabled every request is allowed.
#[derive(Debug, Clone, Default)]
pub struct AclConfig {
    pub enabled: bool,
    /// The secret of the initial management token (`cairn dev`: the root token).
    pub initial_management_token: Option<String>,
    /// Whether an anonymous request may read (`allow`) or nothing (`deny`, the default).
    pub default_policy_allow: bool,
}

impl Config {
    /// Consul's defaults for a server reachable at `advertise_addr`.
    pub fn new(advertise_addr: SocketAddr) -> Config {
        Config {
            advertise_addr,
            node_name: default_node_name(),
            datacenter: DEFAULT_DATACENTER.to_owned(),
            session_ttl_min: Duration::from_secs(10),
            acl: AclConfig::default(),
            metrics: http_kit::metrics::Metrics::default(),
            cluster: None,
        }
    }
}

fn default_node_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "cairn".to_owned())
}

/// Shared state of the registry; cheap to clone.
#[derive(Debug, Clone)]
pub struct State {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    storage: Arc<dyn Storage>,
    config: Config,
    clock: SharedClock,
    sessions: domain::session_timers::SessionTimers,
    /// One lock per KV key around its read and compare-and-swap write (`domain/kv.rs`), so
    /// that writers of one hot key on this server queue instead of exhausting the retries
    /// (16 connections putting one key got 503s); the compare-and-swap stays for servers
    /// sharing a store.
    kv_locks: stdx::keyed_lock::KeyedLocks,
}

impl State {
    /// Opens the registry over `storage`: registers this server's node and its `serfHealth`
    /// check, bootstraps the initial management token, and loads session timers.
    pub async fn open(
        storage: Arc<dyn Storage>,
        config: Config,
        clock: SharedClock,
    ) -> Result<State, Error> {
        let sessions = domain::session_timers::SessionTimers::default();
        let state = State {
            inner: Arc::new(Inner {
                storage,
                config,
                clock,
                sessions,
                kv_locks: stdx::keyed_lock::KeyedLocks::default(),
            }),
        };
        domain::catalog::register_self(&state).await?;
        domain::acl::bootstrap(&state).await?;
        domain::session_timers::load(&state).await?;
        Ok(state)
    }

    pub(crate) fn storage(&self) -> &dyn Storage {
        self.inner.storage.as_ref()
    }

    /// Waits for the lock of KV key `key` in `namespace` (see `Inner::kv_locks`).
    pub(crate) async fn lock_kv_key(
        &self,
        namespace: &str,
        key: &str,
    ) -> stdx::keyed_lock::KeyedGuard<'_> {
        self.inner
            .kv_locks
            .lock(&format!("{namespace}\0{key}"))
            .await
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn clock(&self) -> &dyn Clock {
        self.inner.clock.as_ref()
    }

    /// Now, in Unix milliseconds (what stored deadlines are), from the injected clock.
    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.inner.clock.now_ms()).unwrap_or(0)
    }

    pub(crate) fn session_timers(&self) -> &domain::session_timers::SessionTimers {
        &self.inner.sessions
    }

    fn advertise_addr(&self) -> SocketAddr {
        self.inner.config.advertise_addr
    }

    /// The leader's registry address (`ip:port`), `None` while no leader is known.
    pub(crate) fn leader_addr(&self) -> Option<String> {
        match &self.inner.config.cluster {
            None => Some(self.advertise_addr().to_string()),
            Some(cluster) => cluster.leader_addr("registry"),
        }
    }

    /// Whether a leader is known (the KnownLeader header).
    pub(crate) fn knows_leader(&self) -> bool {
        self.inner
            .config
            .cluster
            .as_ref()
            .is_none_or(|cluster| cluster.knows_leader())
    }

    /// The registry address (`ip:port`) of every server known to serve.
    pub(crate) fn peer_addrs(&self) -> Vec<String> {
        match &self.inner.config.cluster {
            None => vec![self.advertise_addr().to_string()],
            Some(cluster) => cluster
                .peers()
                .iter()
                .filter_map(|peer| peer.addr("registry").map(str::to_owned))
                .collect(),
        }
    }
}

/// Registers the registry's background loops with `runner` and returns at once. Both run once
/// per cluster, as leader loops: the session TTL reaper (`tasks/ttl_reaper.rs`) and the check
/// runner (`tasks/check_runner.rs`). Each stops when its token is cancelled (leadership lost,
/// or shutdown), the reaper after a final checkpoint of renewed deadlines.
pub fn start_tasks(state: &State, runner: &cluster::Runner) {
    if runner.leadership().is_elected() {
        // Several servers: every server's session timers follow the store's watch.
        runner.local_loop(
            "registry follow session timers",
            tasks::follow_sessions::run(state.clone(), runner.shutdown_token()),
        );
    }
    let reaper = state.clone();
    runner.leader_loop("registry session TTL reaper", move |term| {
        tasks::ttl_reaper::run(reaper.clone(), term)
    });
    let checks = state.clone();
    runner.leader_loop("registry check runner", move |term| {
        tasks::check_runner::run(checks.clone(), term)
    });
}
