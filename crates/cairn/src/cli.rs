//! The command line: `cairn dev`, `cairn server`, `cairn version`.
//!
//! Invariant: every `dev` flag can also come from a `CAIRN_*` environment variable; flags win.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use http_kit::LogFormat;

#[derive(Debug, Parser)]
#[command(
    name = "cairn",
    version,
    about = "Secrets, sessions, jobs and an IaC platform in one binary."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Runs all four services on 127.0.0.1 with an embedded store, for development and tests.
    Dev(DevArgs),
    /// Runs the services described by an HCL configuration file.
    Server(ServerArgs),
    /// Runs a scheduler client (job-running agent) against scheduler servers.
    Agent(AgentArgs),
    /// Prints the version.
    Version,
}

#[derive(Debug, Args)]
pub(crate) struct DevArgs {
    /// Keep the store in DIR across runs (default: a fresh temporary directory, removed on exit).
    #[arg(long, env = "CAIRN_DATA_DIR", value_name = "DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// The bootstrap token for every service (default: random, printed at start).
    #[arg(long, env = "CAIRN_ROOT_TOKEN", value_name = "TOKEN")]
    pub(crate) root_token: Option<String>,
    /// Enforce ACLs in the registry and the scheduler too, with the root token as their initial
    /// management token (default: open, as `consul agent -dev` and `nomad agent -dev`; the
    /// secrets store and the platform always require tokens).
    #[arg(long, env = "CAIRN_ACL")]
    pub(crate) acl: bool,
    /// Print the environment lines of a running `cairn dev` (VAULT_ADDR, VAULT_TOKEN,
    /// CONSUL_HTTP_ADDR, NOMAD_ADDR, TFE_ADDRESS, ...) and exit: `eval "$(cairn dev --env)"`.
    /// Reads `--data-dir`'s `dev.env` if given, else the per-user file the last dev server wrote
    /// ($CAIRN_DEV_ENV_FILE, or cairn-dev.env in $XDG_RUNTIME_DIR, or ~/.cairn-dev.env).
    #[arg(long)]
    pub(crate) env: bool,
    /// Secrets store listen address.
    #[arg(
        long,
        env = "CAIRN_SECRETS_ADDR",
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:8200"
    )]
    pub(crate) secrets_addr: SocketAddr,
    /// Session registry listen address.
    #[arg(
        long,
        env = "CAIRN_REGISTRY_ADDR",
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:8500"
    )]
    pub(crate) registry_addr: SocketAddr,
    /// Job scheduler listen address.
    #[arg(
        long,
        env = "CAIRN_SCHEDULER_ADDR",
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:4646"
    )]
    pub(crate) scheduler_addr: SocketAddr,
    /// Platform listen address.
    #[arg(
        long,
        env = "CAIRN_PLATFORM_ADDR",
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:8080"
    )]
    pub(crate) platform_addr: SocketAddr,
    /// The platform's per-user API rate limiting (30 requests/s, as TFE): true or false.
    #[arg(
        long,
        env = "CAIRN_PLATFORM_RATE_LIMITING",
        value_name = "BOOL",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub(crate) platform_rate_limiting: bool,
    /// The upstream registry the platform's `/api/registry/public/v1` proxies.
    #[arg(
        long,
        env = "CAIRN_PLATFORM_PUBLIC_REGISTRY",
        value_name = "URL",
        default_value = platform::DEFAULT_PUBLIC_REGISTRY
    )]
    pub(crate) platform_public_registry: String,
    /// The password the platform's stored credentials are encrypted under (TFE's
    /// `encryption_password`). Default: with `--data-dir`, a random one kept in the data dir's
    /// `dev-platform-encryption-password` (development only); without, a random key for this
    /// run only.
    #[arg(
        long,
        env = "CAIRN_PLATFORM_ENCRYPTION_PASSWORD",
        value_name = "PASSWORD",
        hide_env_values = true
    )]
    pub(crate) platform_encryption_password: Option<String>,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    /// The HCL configuration file.
    #[arg(long, env = "CAIRN_CONFIG", value_name = "FILE")]
    pub(crate) config: PathBuf,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// Scheduler servers to join: HOST:PORT or URLs, comma-separated.
    #[arg(
        long,
        env = "CAIRN_SERVERS",
        value_name = "ADDRS",
        value_delimiter = ',',
        required = true
    )]
    pub(crate) servers: Vec<String>,
    /// Where the node identity, task state and allocation directories live (kept across runs,
    /// so a restarted agent is the same node and re-attaches to its tasks).
    #[arg(long, env = "CAIRN_DATA_DIR", value_name = "DIR")]
    pub(crate) data_dir: PathBuf,
    /// The node's name (default: the host name).
    #[arg(long, env = "CAIRN_NODE_NAME", value_name = "NAME")]
    pub(crate) node_name: Option<String>,
    #[arg(
        long,
        env = "CAIRN_DATACENTER",
        value_name = "DC",
        default_value = "dc1"
    )]
    pub(crate) datacenter: String,
    #[arg(
        long,
        env = "CAIRN_NODE_POOL",
        value_name = "POOL",
        default_value = "default"
    )]
    pub(crate) node_pool: String,
    /// An ACL token for the node's registration.
    #[arg(long, env = "CAIRN_TOKEN", value_name = "TOKEN")]
    pub(crate) token: Option<String>,
    /// A Consul-compatible registry (HOST:PORT or URL) where services with provider `consul`
    /// are registered (Nomad's client `consul { address }`); none by default.
    #[arg(long, env = "CAIRN_CONSUL_ADDR", value_name = "ADDR")]
    pub(crate) consul_addr: Option<String>,
    /// The ACL token sent to that registry.
    #[arg(long, env = "CAIRN_CONSUL_TOKEN", value_name = "TOKEN")]
    pub(crate) consul_token: Option<String>,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct LogArgs {
    /// Log format on stderr: json or text.
    #[arg(
        long,
        env = "CAIRN_LOG_FORMAT",
        value_name = "FORMAT",
        default_value = "text"
    )]
    pub(crate) log_format: LogFormat,
    /// Log filter, in tracing's EnvFilter syntax.
    #[arg(
        long,
        env = "CAIRN_LOG_LEVEL",
        value_name = "FILTER",
        default_value = "info"
    )]
    pub(crate) log_level: String,
}
