//! The job scheduler: a Nomad-compatible HTTP API on its own listener (default
//! 127.0.0.1:4646).
//!
//! Request flow: `cairn` binds the listener and serves [`router`]; `routes.rs` lists every
//! (method, path); handlers live in one file per URL family (`jobs/` for `/v1/jobs` and
//! `/v1/job/*`, `allocations.rs`, `nodes.rs`, `namespaces.rs`, `acl/`, `client_rpc.rs` for the
//! cairn-internal client protocol, `agent.rs`); errors go through [`Error`], rendered as Nomad's
//! plain text.
//!
//! Writes go to the state writer (`state/`), which batches commands into one storage
//! transaction and publishes immutable snapshots; reads work on a snapshot. Every change that
//! needs scheduling writes an evaluation; the broker (`broker.rs`) hands evaluations to the
//! workers (`tasks/worker.rs`), which run the pure placement (`placement/`) and send the plan
//! back to the writer's plan applier. Clients (crate `scheduler-agent`) register nodes,
//! heartbeat (`tasks/heartbeat.rs` marks silent nodes down), pull their allocations and report
//! task states. The writer, broker, workers and heartbeat monitor run while this server leads
//! ([`start_tasks`] starts them through `cluster::Runner`).
//!
//! Invariants:
//! - Everything this crate stores lives under the `scheduler/` key prefix.
//! - Placement stays a pure function over a state snapshot (no I/O and no clock in
//!   `placement/`: time and seed come in).
//! - Every background timer (heartbeats, delayed evaluations) is rebuilt from storage each
//!   time this server gains leadership.
//! - The scheduler crate never depends on another service crate.

pub mod acl;
mod agent;
mod allocations;
mod blocking;
mod broker;
mod client_fs;
mod client_rpc;
mod client_stats;
mod clock;
mod error;
mod exec;
mod forward;
mod gc;
mod ha;
mod jobs;
mod meta;
mod metrics;
mod namespaces;
mod nodes;
mod pause;
mod placement;
mod routes;
mod services;
mod state;
mod tasks;

// The wire types, the jobspec parser, filter expressions and job diffs are crates of their
// own (the agent links the wire types without the server); they stay reachable here under
// their module names.
pub(crate) use bexpr as filter;
pub(crate) use scheduler_diff as diff;
pub(crate) use scheduler_jobspec as jobspec;
pub(crate) use scheduler_structs as structs;

use std::sync::Arc;
use std::time::Duration;

use storage::Storage;
use tokio_util::sync::CancellationToken;

use broker::Broker;
use state::StateStore;
use tasks::heartbeat::Heartbeats;

pub(crate) use clock::now_nanos;
pub use error::Error;
pub use gc::{GcClock, GcConfig};
pub use ha::ClusterView;
pub use routes::{router, router_with};
pub use state::TableIndexes;

/// The rate of heartbeats the TTL is scaled for (Nomad's `max_heartbeats_per_second`).
pub(crate) const MAX_HEARTBEATS_PER_SECOND: f64 = 50.0;

/// How the scheduler is started.
#[derive(Debug, Clone)]
pub struct Config {
    /// Whether a client runs in this process (`cairn dev`).
    pub client_enabled: bool,
    /// `cairn dev`: the bootstrap ACL token (a management token).
    pub dev_root_token: Option<String>,
    /// Whether ACLs are enforced (on in `cairn dev`, with the root token as management token).
    pub acl_enabled: bool,
    pub region: String,
    pub datacenter: String,
    /// The heartbeat TTL given to clients (Nomad's `min_heartbeat_ttl`, 10 s).
    pub heartbeat_ttl: Duration,
    /// Extra time before a silent node is marked down (Nomad's `heartbeat_grace`, 10 s).
    pub heartbeat_grace: Duration,
    /// With several servers, how long a node that is not down has to be heard from once a
    /// server gains leadership (Nomad's `failover_heartbeat_ttl`, 5 min): its agent may need
    /// that long to find a live server. A lone server gives the TTL plus grace.
    pub failover_heartbeat_ttl: Duration,
    /// Scheduling workers (Nomad's `num_schedulers`). They are async tasks, mostly waiting
    /// for their plan's commit: many of them keep the writer's batches full (one durable
    /// commit carries up to this many plans), while placement itself uses the runtime's
    /// threads.
    pub workers: usize,
    /// The process's metrics registry (`cairn` shares one with every service); served at
    /// `/v1/metrics` with this service's figures.
    pub metrics: http_kit::metrics::Metrics,
    /// Garbage collection of terminal state: Nomad's intervals and thresholds by default.
    pub gc: GcConfig,
    /// Several servers over one store: who leads (writes are forwarded there) and who the
    /// peers are. `None`: this server is the only one and always leads.
    pub cluster: Option<ClusterView>,
    /// Several servers whose scheduler listeners use TLS: the CA (the tls block's `ca_file`)
    /// a follower verifies the leader's certificate against when it forwards there. `None`:
    /// forwarding reaches `http://` leaders only.
    pub forward_tls: Option<cluster::PeerTls>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            client_enabled: false,
            dev_root_token: None,
            acl_enabled: false,
            region: "global".to_owned(),
            datacenter: "dc1".to_owned(),
            heartbeat_ttl: Duration::from_secs(10),
            heartbeat_grace: Duration::from_secs(10),
            failover_heartbeat_ttl: Duration::from_secs(300),
            workers: 64,
            metrics: http_kit::metrics::Metrics::default(),
            gc: GcConfig::default(),
            cluster: None,
            forward_tls: None,
        }
    }
}

/// Shared state of the scheduler; cheap to clone.
#[derive(Debug, Clone)]
pub struct State {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    storage: Arc<dyn Storage>,
    config: Config,
    store: StateStore,
    broker: Broker,
    heartbeats: Heartbeats,
    /// Calls waiting for the clients that run the allocations they concern.
    client_calls: client_rpc::ClientCalls,
    /// Service registrations, check results and pause overrides reported by clients.
    runtime: Arc<services::Runtime>,
    /// Cancelled when the server stops (ends blocking queries early).
    shutdown: CancellationToken,
    /// Whether this server leads; the follower's last contact with the store.
    role: Arc<ha::Role>,
    /// The store revision the state was loaded at (the follower watches from there).
    opened_at: storage::Revision,
}

impl State {
    /// Loads the scheduler's state from storage. Nothing is applied or scheduled until
    /// [`start_tasks`] runs (its leader loop queues the pending evaluations).
    pub async fn open(storage: Arc<dyn Storage>, config: Config) -> Result<State, Error> {
        // Read before the load: a watch from here replays whatever the load may have missed.
        let opened_at = storage.revision().await?;
        let store = StateStore::open(Arc::clone(&storage)).await?;
        let broker = Broker::new();
        let sink = broker.clone();
        store.set_pending_sink(Box::new(move |evals| sink.enqueue(evals)));
        Ok(State {
            inner: Arc::new(Inner {
                storage,
                config,
                store,
                broker,
                heartbeats: Heartbeats::default(),
                client_calls: client_rpc::ClientCalls::default(),
                runtime: Arc::default(),
                shutdown: CancellationToken::new(),
                role: Arc::default(),
                opened_at,
            }),
        })
    }

    /// The index of the last committed write to each table.
    pub fn table_indexes(&self) -> TableIndexes {
        self.inner.store.snapshot().tables
    }

    pub(crate) fn store(&self) -> &StateStore {
        &self.inner.store
    }

    pub(crate) fn broker(&self) -> &Broker {
        &self.inner.broker
    }

    pub(crate) fn heartbeats(&self) -> &Heartbeats {
        &self.inner.heartbeats
    }

    pub(crate) fn client_calls(&self) -> &client_rpc::ClientCalls {
        &self.inner.client_calls
    }

    pub(crate) fn runtime(&self) -> &services::Runtime {
        &self.inner.runtime
    }

    pub(crate) fn runtime_arc(&self) -> &Arc<services::Runtime> {
        &self.inner.runtime
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn storage(&self) -> &Arc<dyn Storage> {
        &self.inner.storage
    }

    pub(crate) fn shutdown_token(&self) -> &CancellationToken {
        &self.inner.shutdown
    }

    pub(crate) fn role(&self) -> &Arc<ha::Role> {
        &self.inner.role
    }

    /// The TTL handed to clients: at least `heartbeat_ttl`, and long enough that all nodes
    /// together send at most [`MAX_HEARTBEATS_PER_SECOND`] (Nomad's `RateScaledInterval`).
    pub(crate) fn heartbeat_ttl(&self) -> Duration {
        let nodes = self.inner.store.snapshot().nodes.len();
        let scaled = Duration::from_secs_f64(nodes as f64 / MAX_HEARTBEATS_PER_SECOND);
        self.inner.config.heartbeat_ttl.max(scaled)
    }

    fn client_enabled(&self) -> bool {
        self.inner.config.client_enabled
    }
}

/// Starts the scheduler's background loops through `runner` and returns at once: while this
/// server leads, the state writer, the scheduling workers and the heartbeat monitor
/// (`tasks::lead`, restarted from storage each time leadership is gained); while it does not,
/// the follower that keeps its snapshot equal to the store (`ha::follow_loop`); on every
/// server, until shutdown, ending blocking queries and failing waiting writes when the server
/// stops.
pub fn start_tasks(state: &State, runner: &cluster::Runner) {
    let leading = state.clone();
    runner.leader_loop("scheduler", move |term| tasks::lead(leading.clone(), term));
    runner.local_loop(
        "scheduler follower",
        ha::follow_loop(
            state.clone(),
            state.inner.opened_at,
            runner.shutdown_token(),
        ),
    );
    let stopping = state.clone();
    let shutdown = runner.shutdown_token();
    runner.local_loop("scheduler shutdown", async move {
        shutdown.cancelled().await;
        stopping.shutdown_token().cancel();
        stopping.store().close();
    });
}
