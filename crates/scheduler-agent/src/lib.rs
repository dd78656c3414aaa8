//! The scheduler's client agent (Nomad's client): registers its node with a scheduler server,
//! heartbeats, pulls the allocations placed on it and runs their tasks with the `raw_exec`
//! driver, reporting task states and allocation `ClientStatus` back.
//!
//! The agent talks to the server only over the server's HTTP API (the `/v1/internal/*` client
//! endpoints, `server_client.rs`), whether it runs in the `cairn dev` process or as
//! `cairn agent --servers ADDR`. Of the server it links only the wire types
//! (`scheduler-structs`), so its dependency tree has no axum, hcl-rs or imbl.
//!
//! Structure: [`run`] (or [`Agent::run`]) drives three loops concurrently and owns every task
//! it starts: `node.rs` (fingerprint, register, heartbeat), `alloc_watcher.rs` (the blocking
//! allocations query; one `alloc_runner.rs` per allocation, one `task_runner.rs` per task, the
//! process itself from `driver/raw_exec.rs` with `env.rs` building its environment and
//! `restarts.rs` deciding restarts) and `updater.rs` (batched status reports). `state.rs`
//! persists what a restarted agent needs; `handles.rs` is the map through which the client
//! allocation endpoints (signal, restart, exec) reach running tasks. A fourth loop,
//! `calls.rs`, long-polls the server for the calls its client endpoints make (signal,
//! restart, `exec/` sessions, `fs.rs` files and logs) and answers each over a connection it
//! dials back, so the agent needs no listener of its own. Two more run the runtime of the
//! allocations (`runtime.rs`): the node's runtime report (the services `services.rs` registers
//! with the dynamic ports `ports.rs` assigns, the results of `checks.rs`, each scheduled task's
//! state from `schedule.rs`) and the pull of pause overrides. `template/` renders a task's
//! `template` blocks (secrets read from the secrets store over HTTP, with a token derived for
//! the task from its `vault` block) before it starts and re-renders them while it runs.
//!
//! Invariants:
//! - nothing outlives `run`: every spawned task lives in a `JoinSet` owned (transitively) by
//!   `run` and is joined before it returns;
//! - shutdown leaves task processes running and state persisted; the next `run` with the same
//!   data dir is the same node and re-attaches to them (or accounts for the ones that ended);
//! - bad data from the server (unknown driver, missing job, odd ids) becomes task events or a
//!   failed allocation, never a panic.

mod alloc_runner;
mod alloc_watcher;
mod backoff;
mod calls;
mod checks;
mod consul;
mod driver;
mod env;
mod events;
mod exec;
mod fs;
mod gc;
mod handles;
mod node;
mod ports;
mod restarts;
mod runtime;
mod schedule;
mod server_client;
mod services;
mod state;
mod stats;
mod task_runner;
mod template;
mod time;
mod tunnel;
mod updater;
mod zoneinfo;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use scheduler_structs::{AllocClientUpdate, Node};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

pub use consul::ConsulSettings;
pub use handles::{
    AllocControls, ControlError, REASON_RESTART_ALL, REASON_RESTART_RUNNING, REASON_RESTART_TASK,
};
pub use template::TemplateSettings;

use server_client::ServerClient;
use state::StateDir;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Server base URLs, e.g. `http://127.0.0.1:4646`; tried in turn on failure.
    pub servers: Vec<String>,
    /// Where the node identity, allocation state and allocation directories live.
    pub data_dir: PathBuf,
    /// The node's name (default: the host name).
    pub node_name: String,
    /// Default `dc1`.
    pub datacenter: String,
    /// Default `default`.
    pub node_pool: String,
    /// Default empty.
    pub node_class: String,
    pub meta: BTreeMap<String, String>,
    /// The address this client advertises (`Node.HTTPAddr`), e.g. `127.0.0.1:4646`.
    pub http_addr: String,
    /// An ACL token sent as `X-Nomad-Token` on registration instead of the node's SecretID
    /// (every other call sends the SecretID). `None` in `cairn dev`.
    pub token: Option<String>,
    /// The cap on any task's kill timeout (Nomad's `max_kill_timeout`, 30 s).
    pub max_kill_timeout: Duration,
    /// How long status updates are coalesced before being sent (100 ms).
    pub update_interval: Duration,
    /// The `wait` of the blocking allocations query (30 s).
    pub alloc_query_wait: Duration,
    /// How often a re-attached task's pid is checked (250 ms).
    pub reattach_poll_interval: Duration,
    /// Task templates: the secrets store they read and how (`template/`).
    pub templates: TemplateSettings,
    /// Where provider-`consul` services are registered (`None`: nowhere).
    pub consul: Option<ConsulSettings>,
}

impl AgentConfig {
    /// A configuration with upstream's defaults.
    pub fn new(servers: Vec<String>, data_dir: PathBuf) -> AgentConfig {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|name| name.trim().to_owned())
            .ok()
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "cairn-client".to_owned());
        AgentConfig {
            servers,
            data_dir,
            node_name: hostname,
            datacenter: "dc1".to_owned(),
            node_pool: scheduler_structs::DEFAULT_NODE_POOL.to_owned(),
            node_class: String::new(),
            meta: BTreeMap::new(),
            http_addr: String::new(),
            token: None,
            max_kill_timeout: Duration::from_secs(30),
            update_interval: Duration::from_millis(100),
            alloc_query_wait: Duration::from_secs(30),
            reattach_poll_interval: Duration::from_millis(250),
            templates: TemplateSettings::default(),
            consul: None,
        }
    }
}

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("data dir {path}: {source}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid agent configuration: {0}")]
    Config(String),
}

/// What the agent's loops share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) node: Arc<Node>,
    pub(crate) state: StateDir,
    pub(crate) updates: mpsc::UnboundedSender<AllocClientUpdate>,
    pub(crate) controls: AllocControls,
    /// Services, check results, schedule states and overrides of this node's allocations.
    pub(crate) runtime: Arc<runtime::Runtime>,
    /// The dynamic ports this node's allocations hold.
    pub(crate) ports: ports::PortTable,
    pub(crate) host_env: Arc<Vec<(String, String)>>,
    pub(crate) max_kill_timeout: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) templates: Arc<TemplateSettings>,
    /// Provider-`consul` registrations.
    pub(crate) consul: consul::Consul,
    pub(crate) shutdown: CancellationToken,
}

/// A configured agent, before it runs: its node identity is settled, so its node ID and the
/// handle map can be handed out first.
#[derive(Debug)]
pub struct Agent {
    config: AgentConfig,
    node: Arc<Node>,
    state: StateDir,
    controls: AllocControls,
    client: Arc<ServerClient>,
}

impl Agent {
    /// Prepares the data dir, loads (or creates) the node identity and fingerprints the host.
    pub fn new(config: AgentConfig) -> Result<Agent, AgentError> {
        let state = StateDir::new(config.data_dir.clone());
        let data_dir_error = |source| AgentError::DataDir {
            path: config.data_dir.clone(),
            source,
        };
        state.init().map_err(data_dir_error)?;
        let identity = state.node_identity().map_err(data_dir_error)?;
        let node = node::fingerprint(&config, &identity);
        let client = ServerClient::new(
            &config.servers,
            identity.secret_id.clone(),
            config.token.clone(),
        )
        .map_err(AgentError::Config)?;
        Ok(Agent {
            config,
            node: Arc::new(node),
            state,
            controls: AllocControls::default(),
            client: Arc::new(client),
        })
    }

    /// The node's ID (stable for a data dir).
    pub fn node_id(&self) -> &str {
        &self.node.id
    }

    /// The node as registered.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The handle map for the client allocation endpoints (signal, restart).
    pub fn controls(&self) -> AllocControls {
        self.controls.clone()
    }

    /// Registers, heartbeats, watches and runs allocations until `shutdown`, then returns
    /// leaving task processes running.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), AgentError> {
        let (updates_tx, updates_rx) = mpsc::unbounded_channel();
        let (epoch_tx, epoch_rx) = watch::channel(0_u64);
        let shared = Arc::new(Shared {
            node: self.node.clone(),
            state: self.state.clone(),
            updates: updates_tx,
            controls: self.controls.clone(),
            runtime: Arc::new(runtime::Runtime::restored(self.state.clone())),
            ports: ports::PortTable::restored(&self.state),
            host_env: Arc::new(std::env::vars().collect()),
            max_kill_timeout: self.config.max_kill_timeout,
            poll_interval: self.config.reattach_poll_interval,
            templates: Arc::new(self.config.templates.clone()),
            consul: consul::Consul::new(self.config.consul.as_ref(), &self.node.id),
            shutdown: shutdown.clone(),
        });
        tracing::info!(node_id = %self.node.id, name = %self.node.name, servers = ?self.config.servers, "client agent starting");

        // The updater outlives the watcher so the runners' last reports are flushed.
        let updater_stop = CancellationToken::new();
        let watcher = async {
            alloc_watcher::run(
                shared.clone(),
                self.client.clone(),
                epoch_rx,
                self.config.alloc_query_wait,
            )
            .await;
            updater_stop.cancel();
        };
        let calls = calls::run(
            shared.clone(),
            self.client.clone(),
            epoch_tx.subscribe(),
            self.config.alloc_query_wait,
        );
        let reporter =
            runtime::run_reporter(shared.clone(), self.client.clone(), epoch_tx.subscribe());
        let overrides = runtime::run_override_puller(
            shared.clone(),
            self.client.clone(),
            epoch_tx.subscribe(),
            self.config.alloc_query_wait,
        );
        tokio::join!(
            node::maintain(&self.client, &self.node, &epoch_tx, &shutdown),
            calls,
            reporter,
            overrides,
            updater::run(
                &self.client,
                updates_rx,
                self.config.update_interval,
                &updater_stop
            ),
            watcher,
            shared.consul.run(shutdown.clone()),
        );
        tracing::info!(node_id = %self.node.id, "client agent stopped; tasks left running");
        Ok(())
    }
}

/// Runs a client agent with `config` until `shutdown` (see [`Agent::run`]).
pub async fn run(config: AgentConfig, shutdown: CancellationToken) -> Result<(), AgentError> {
    Agent::new(config)?.run(shutdown).await
}

/// Kills every task process an agent with this data dir left running (matched by pid *and*
/// start time, so an unrelated process that reused a pid is never touched). `cairn dev` calls
/// it after its in-process agent stopped, as Nomad's dev agent ends its tasks with it (a kept
/// data dir then accounts for them as exited at the next start). Returns how many process
/// groups were killed.
pub fn kill_leftover_tasks(data_dir: &std::path::Path) -> usize {
    let state = StateDir::new(data_dir.to_path_buf());
    let mut killed = 0;
    for alloc_id in state.alloc_ids() {
        let Some(record) = state.load_alloc(&alloc_id) else {
            continue;
        };
        for task in record.tasks.values() {
            let (Some(pid), Some(start_time)) = (task.local.pid, task.local.start_time) else {
                continue;
            };
            if driver::raw_exec::is_alive(pid, start_time)
                && nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                )
                .is_ok()
            {
                killed += 1;
            }
        }
    }
    killed
}
