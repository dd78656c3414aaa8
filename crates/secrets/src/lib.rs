//! The secrets store: a Vault/OpenBao-compatible HTTP API on its own listener (default
//! 127.0.0.1:8200).
//!
//! Request flow: `routes.rs` serves the few unauthenticated `sys/` paths that work while
//! sealed (health, seal-status, init, unseal) and sends everything else under `/v1/` to
//! `dispatch.rs`, which turns the HTTP request into a logical request (`request.rs`: verb →
//! operation, body or query → data), refuses it while sealed, resolves the token (`tokens/`),
//! finds the backend by longest prefix (`mounts.rs`: `sys/`, `auth/token/`, `identity/`, and
//! every mounted engine or auth method), asks the engine's existence check for create vs
//! update, checks the ACL (`policy/`), calls the backend, and turns the answer into Vault's
//! envelope, creating a token for a login and a lease for a leased secret (`leases.rs`). A
//! request with a wrap TTL gets its envelope wrapped instead (`wrapping.rs`: kept in a new
//! single-use token's cubbyhole, the `secrets-cubbyhole` engine every store mounts at
//! `cubbyhole/`; `sys/wrapping/*` in `sys/wrapping.rs` unwraps, looks up and rewraps).
//!
//! Everything persisted goes through the barrier (`barrier.rs`: AES-256-GCM keyring), itself
//! unlocked by the seal (`seal.rs`: Shamir shares).
//!
//! Invariants:
//! - Nothing this crate writes reaches the store unencrypted, except the seal configuration
//!   and the encrypted keyring; every key starts with `secrets/`.
//! - Engines see only their mount's barrier view, through `secrets-sdk`.
//! - Every lease and token expiry (wrapping tokens included) is rebuilt from storage after a
//!   restart and unseal, and again whenever the expiry loop starts (this server gained
//!   leadership); a revoked or expired token's cubbyhole goes with it.
//! - One clock ([`State::open_with_clock`]; the system clock by default) stamps and expires
//!   everything: tokens, leases, policies and the keyring's install times.
//! - The secrets crate never depends on another service crate.

mod barrier;
mod dispatch;
mod engines;
mod error;
mod follow;
mod identity;
mod leases;
mod mfa;
mod mounts;
mod periodic;
mod policy;
mod request;
mod routes;
mod seal;
mod snapshots;
mod store;
mod sys;
mod tokens;
mod userpass;
mod wrapping;

use std::sync::Arc;

use stdx::clock::{SharedClock, SystemClock};
use storage::Storage;

pub use error::Error;
pub use routes::{router, router_with};

/// Query strings whose errors render in Vault's shape.
pub(crate) type Query<T> = http_kit::ApiQuery<T, Error>;

/// The version reported to clients: a Vault-compatible core version (so clients that gate
/// features on the server version work) with cairn's own version as build metadata.
pub const REPORTED_VERSION: &str = concat!("1.17.0+cairn.", env!("CARGO_PKG_VERSION"));

/// How the secrets service is started.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `cairn dev`: initialise with one key share, unseal automatically, and use this as the
    /// root token. `None` in `cairn server` (an operator runs `sys/init` and `sys/unseal`).
    pub dev_root_token: Option<String>,
    /// `cairn dev --data-dir`: where the dev unseal key is kept so a restart can unseal itself
    /// (development only: it sits next to the data it protects).
    pub dev_unseal_key_file: Option<std::path::PathBuf>,
    /// The process's metrics registry (`cairn` shares one with every service); served at
    /// `sys/metrics` with this service's figures.
    pub metrics: http_kit::metrics::Metrics,
    /// Who leads and who the servers are (`sys/leader`, `sys/ha-status`, `sys/health`'s
    /// standby code); `None`: a single server without HA.
    pub cluster: Option<std::sync::Arc<dyn cluster::Leadership>>,
}

/// Shared state of the secrets service; cheap to clone.
#[derive(Debug, Clone)]
pub struct State {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    cluster: store::ClusterIdentity,
    config: Config,
    clock: SharedClock,
    barrier: Arc<barrier::Barrier>,
    seal: seal::Seal,
    mounts: mounts::MountTable,
    tokens: tokens::TokenStore,
    policies: policy::PolicyStore,
    leases: leases::ExpirationManager,
}

impl State {
    /// Loads (or, on first start, creates and persists) the service's state, on the system
    /// clock. In dev mode the store is initialised and unsealed here.
    pub async fn open(storage: Arc<dyn Storage>, config: Config) -> Result<State, Error> {
        State::open_with_clock(storage, config, Arc::new(SystemClock)).await
    }

    /// [`State::open`] on `clock`: tests pass a `ManualClock` to move token, lease and policy
    /// time together.
    pub async fn open_with_clock(
        storage: Arc<dyn Storage>,
        config: Config,
        clock: SharedClock,
    ) -> Result<State, Error> {
        let cluster = store::load_or_create_cluster(storage.as_ref()).await?;
        let barrier = Arc::new(barrier::Barrier::new(storage.clone(), clock.clone()));
        if !config.cluster.as_ref().is_some_and(|c| c.is_elected()) {
            // The only writer of its store (no elected leadership: no other server): every
            // change passes through this barrier, which may then keep what it reads.
            barrier.cache_reads();
        }
        let state = State {
            inner: Arc::new(Inner {
                seal: seal::Seal::new(storage.clone(), barrier.clone()),
                mounts: mounts::MountTable::default(),
                tokens: tokens::TokenStore::default(),
                policies: policy::PolicyStore::default(),
                leases: leases::ExpirationManager::default(),
                cluster,
                config,
                clock,
                barrier,
            }),
        };
        if state.config().dev_root_token.is_some() {
            seal::dev_init_and_unseal(&state).await?;
        } else if state.seal().is_unsealed() {
            state.post_unseal().await?;
        }
        state.report_fitness();
        Ok(state)
    }

    /// Tells the cluster's leadership whether this server is fit to lead: only while its
    /// store is unsealed (an unsealed server leads whenever one serves, so the lease expiry
    /// and token tidy loops run; see docs/running-several-servers.md). Called after every
    /// seal and unseal.
    pub(crate) fn report_fitness(&self) {
        if let Some(cluster) = &self.config().cluster {
            cluster.set_fit(self.seal().is_unsealed());
        }
    }

    /// Everything that must happen once the barrier is open: load mounts, policies, tokens
    /// and lease timers from storage. Called by `sys/unseal` and at dev start.
    pub(crate) async fn post_unseal(&self) -> Result<(), Error> {
        self.mounts().load(self).await?;
        self.policies().load(self).await?;
        self.tokens().load(self).await?;
        self.leases().load(self).await?;
        Ok(())
    }

    /// Everything that must happen when sealing: drop in-memory secrets and timers.
    pub(crate) async fn pre_seal(&self) {
        self.leases().clear();
        self.tokens().clear();
        self.policies().clear();
        self.mounts().clear();
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The one clock: now, in Unix milliseconds.
    pub(crate) fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    pub(crate) fn clock(&self) -> &SharedClock {
        &self.inner.clock
    }

    pub(crate) fn cluster(&self) -> &store::ClusterIdentity {
        &self.inner.cluster
    }

    pub(crate) fn barrier(&self) -> &Arc<barrier::Barrier> {
        &self.inner.barrier
    }

    pub(crate) fn seal(&self) -> &seal::Seal {
        &self.inner.seal
    }

    pub(crate) fn mounts(&self) -> &mounts::MountTable {
        &self.inner.mounts
    }

    pub(crate) fn tokens(&self) -> &tokens::TokenStore {
        &self.inner.tokens
    }

    pub(crate) fn policies(&self) -> &policy::PolicyStore {
        &self.inner.policies
    }

    pub(crate) fn leases(&self) -> &leases::ExpirationManager {
        &self.inner.leases
    }
}

/// Registers the secrets service's background work with `runner` and returns at once: three
/// cluster-wide loops that run while this server leads: lease expiry and token tidy
/// (`leases::run`, which rebuilds its timers from storage each time it starts), the
/// engines' periodic work (`periodic::run`: static role rotations and the like) and the
/// automated snapshots (`snapshots::schedule::run`). With elected leadership (several
/// servers over one store), also a local loop that follows what other servers change
/// (`follow::run`: keyring, tokens, policies, mounts).
pub fn start_tasks(state: &State, runner: &cluster::Runner) {
    if runner.leadership().is_elected() {
        runner.local_loop(
            "secrets follow the shared store",
            follow::run(state.clone(), runner.shutdown_token()),
        );
    }
    let leases_state = state.clone();
    runner.leader_loop("secrets lease expiry and token tidy", move |term| {
        leases::run(leases_state.clone(), term)
    });
    let periodic_state = state.clone();
    runner.leader_loop("secrets engines' periodic work", move |term| {
        periodic::run(periodic_state.clone(), term)
    });
    let snapshot_state = state.clone();
    runner.leader_loop("secrets automated snapshots", move |term| {
        snapshots::schedule::run(snapshot_state.clone(), term)
    });
}
