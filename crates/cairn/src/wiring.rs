//! Wiring: from a [`Plan`] to running services, and back down on a signal.
//!
//! `run` opens the store, binds every listener (all before serving any, so a busy port fails
//! the start cleanly), builds each service's state over the shared store, serves each on its
//! own listener, registers each service's background loops with one `cluster::Runner`, prints
//! the banner, and waits for SIGINT/SIGTERM or a failing server. One metrics registry is
//! shared by every service (each records its requests under its name and serves it at its
//! metrics endpoint), with the store's figures as a process-wide source. Then it cancels the shared
//! shutdown token, joins every server (in-flight requests finish; http-kit bounds the drain) and
//! every background loop, and closes the store.
//!
//! Invariants: the servers are owned by the `JoinSet` here and every background loop by the
//! runner created here (with the embedded store this server always leads, so cluster-wide loops
//! run at once; with `storage "etcd"` the runner follows `storage_etcd::EtcdLeadership`, so they
//! run on the elected server only, and a server resigns after its loops stopped); all are joined before the store closes; the banner's last line, `ready`, is
//! printed only once every listener is bound (so it accepts connections).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http_kit::metrics::{Family, Histogram, Metrics};
use storage::Storage;
use storage_redb::{Distribution, RedbStats, RedbStorage};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The four services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServiceKind {
    Secrets,
    Registry,
    Scheduler,
    Platform,
}

impl ServiceKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ServiceKind::Secrets => "secrets",
            ServiceKind::Registry => "registry",
            ServiceKind::Scheduler => "scheduler",
            ServiceKind::Platform => "platform",
        }
    }

    /// The upstream product's default port on loopback.
    pub(crate) fn default_addr(self) -> SocketAddr {
        let port = match self {
            ServiceKind::Secrets => 8200,
            ServiceKind::Registry => 8500,
            ServiceKind::Scheduler => 4646,
            ServiceKind::Platform => 8080,
        };
        SocketAddr::from(([127, 0, 0, 1], port))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    pub(crate) cert_file: PathBuf,
    pub(crate) key_file: PathBuf,
    /// The CA other servers' certificates for this service are verified against when this
    /// server forwards to the leader (`cluster::peer`).
    pub(crate) ca_file: Option<PathBuf>,
}

/// One service to run and where.
#[derive(Debug)]
pub(crate) struct Listen {
    pub(crate) kind: ServiceKind,
    pub(crate) addr: SocketAddr,
    pub(crate) tls: Option<TlsFiles>,
    /// The registry's ACL settings from the config file (`cairn dev` derives its own).
    pub(crate) registry_acl: Option<registry::AclConfig>,
    /// Whether the scheduler enforces ACLs, from the config file (absent: on).
    pub(crate) scheduler_acl: Option<bool>,
    /// The URL other servers and clients reach this service at (`advertise` in the config);
    /// `None`: `scheme://` + the bound address (a wildcard bind as loopback).
    pub(crate) advertise: Option<String>,
}

/// Where the store lives.
#[derive(Debug)]
pub(crate) enum DataDir {
    /// Kept across runs.
    Kept(PathBuf),
    /// Removed when the run ends (after the store has closed).
    Temporary(tempfile::TempDir),
}

impl DataDir {
    pub(crate) fn path(&self) -> &Path {
        match self {
            DataDir::Kept(path) => path,
            DataDir::Temporary(dir) => dir.path(),
        }
    }
}

/// Everything `run` needs.
#[derive(Debug)]
pub(crate) struct Plan {
    /// `dev` or `server`, for the banner.
    pub(crate) mode: &'static str,
    pub(crate) data_dir: DataDir,
    pub(crate) services: Vec<Listen>,
    /// `cairn dev`'s bootstrap token, given to every service.
    pub(crate) dev_root_token: Option<String>,
    /// `cairn dev --acl`: the registry and the scheduler enforce ACLs (otherwise, as upstream's
    /// dev agents, they are open). Not used by `cairn server`, which reads its config.
    pub(crate) dev_acl: bool,
    /// Where `cairn dev` writes the environment lines of its banner (mode 0600), for
    /// `cairn dev --env`; removed at exit. Empty for `cairn server`.
    pub(crate) dev_env_files: Vec<PathBuf>,
    /// The platform's API rate limiting (TFE's `api-rate-limiting-enabled`; on by default).
    pub(crate) platform_rate_limiting: bool,
    /// The upstream of the platform's public registry proxy.
    pub(crate) platform_public_registry: String,
    /// Where the platform's encryption password comes from.
    pub(crate) platform_encryption: PlatformEncryption,
    /// Whether a scheduler client (the job-running agent) runs in this process (`cairn dev`).
    pub(crate) scheduler_client: bool,
    /// Which store: the embedded one in the data dir, or etcd (several servers).
    pub(crate) storage: StorageChoice,
    /// Where the platform's blobs live (`object_store` in the config).
    pub(crate) blobs: BlobPlace,
}

/// Where the platform keeps its blobs (configuration archives, module tarballs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BlobPlace {
    /// `<data_dir>/blobs`, this server's own.
    DataDir,
    /// A directory (shared by every server when there are several).
    Dir(PathBuf),
    /// An S3-compatible bucket.
    S3(platform::S3Blobs),
}

/// Where the store lives.
#[derive(Debug)]
pub(crate) enum StorageChoice {
    /// redb in the data directory; this server always leads.
    Embedded,
    /// etcd, shared with the other servers of the cluster; leadership is elected through it.
    Etcd(storage_etcd::EtcdConfig),
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot create the data directory: {0}")]
    DataDir(std::io::Error),
    #[error("the root token must not be empty")]
    InvalidRootToken,
    #[error("{0}")]
    DevEnv(String),
    #[error("configuration: {0}")]
    Config(String),
    #[error("cannot open the store in {path}: {source}")]
    OpenStore {
        path: PathBuf,
        source: storage::Error,
    },
    #[error("cannot listen on {addr} for {service}: {source}")]
    Bind {
        service: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS for {service}: {message}")]
    Tls {
        service: &'static str,
        message: String,
    },
    #[error("cannot start {service}: {message}")]
    Service {
        service: &'static str,
        message: String,
    },
    #[error("{service} stopped serving: {source}")]
    Serve {
        service: &'static str,
        source: std::io::Error,
    },
    #[error("scheduler agent: {0}")]
    Agent(String),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("closing the store: {0}")]
    CloseStore(storage::Error),
    #[error("cannot open the store on etcd: {0}")]
    OpenEtcd(storage::Error),
}

/// Where the platform's encryption password (`platform::Config::encryption_password`) comes
/// from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PlatformEncryption {
    /// Given (the server configuration, its environment variable, or a `cairn dev` flag).
    Password(String),
    /// `cairn dev --data-dir` without one: a random password kept in the data dir's
    /// [`DEV_PLATFORM_PASSWORD_FILE`] (mode 0600), so the dev store opens again on restart.
    DevFile,
    /// `cairn dev` on a temporary store: a random key for this run only.
    RandomPerRun,
}

/// `cairn dev --data-dir` keeps its platform encryption password here (development only, as
/// the dev unseal key; `cairn server` never writes it).
const DEV_PLATFORM_PASSWORD_FILE: &str = "dev-platform-encryption-password";

/// The password in `path`, created there (32 random bytes, hex, mode 0600) when missing.
fn dev_platform_password(path: &Path) -> Result<String, String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_owned()),
        Ok(_) => return Err(format!("{} is empty", path.display())),
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("cannot read {}: {err}", path.display()));
        }
        Err(_) => {}
    }
    let mut bytes = [0u8; 32];
    rand::Rng::fill(&mut rand::rng(), &mut bytes);
    let password: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|err| format!("cannot create {}: {err}", path.display()))?;
    file.write_all(password.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|err| format!("cannot write {}: {err}", path.display()))?;
    Ok(password)
}

/// `cairn dev` keeps its single unseal key here, so a dev store with `--data-dir` unseals
/// itself on restart (development only; `cairn server` never writes it).
const DEV_UNSEAL_KEY_FILE: &str = "dev-unseal-key";

/// The file name of the embedded store inside the data directory.
const STORE_FILE: &str = "cairn.redb";

pub(crate) async fn run(plan: Plan) -> Result<(), Error> {
    let data_path = plan.data_dir.path().to_path_buf();
    std::fs::create_dir_all(&data_path).map_err(Error::DataDir)?;
    let store_path = data_path.join(STORE_FILE);
    let metrics = Metrics::new();
    if let StorageChoice::Etcd(config) = &plan.storage {
        let store = storage_etcd::EtcdStorage::open(config)
            .await
            .map_err(Error::OpenEtcd)?;
        let client = store.client().clone();
        let (key, members) = (store.leader_key(), store.members_prefix());
        let storage: Arc<dyn Storage> = Arc::new(store);
        // Campaigning starts once the listeners are bound, so this server advertises the
        // addresses it really serves on.
        let started: Arc<std::sync::OnceLock<Arc<storage_etcd::EtcdLeadership>>> = Arc::default();
        let keep = started.clone();
        let elect = move |server: cluster::ServerInfo| -> Arc<dyn cluster::Leadership> {
            let options = storage_etcd::LeadershipOptions::new(key, server.id.clone())
                .with_server(server)
                .with_members(members);
            let leadership = Arc::new(storage_etcd::EtcdLeadership::start(client, options));
            let _ = keep.set(leadership.clone());
            leadership
        };
        let result = serve_all(&plan, storage.clone(), &metrics, Box::new(elect)).await;
        // Hand over at once rather than when the lease expires.
        if let Some(leadership) = started.get() {
            leadership.resign().await;
        }
        let closed = storage.close().await.map_err(Error::CloseStore);
        drop(plan.data_dir);
        return result.and(closed);
    }
    let storage: Arc<dyn Storage> = {
        let path = store_path.clone();
        let opened = tokio::task::spawn_blocking(move || RedbStorage::open(&path))
            .await
            .map_err(|err| Error::OpenStore {
                path: store_path.clone(),
                source: storage::Error::Backend(err.to_string()),
            })?;
        let opened = opened.map_err(|source| Error::OpenStore {
            path: store_path.clone(),
            source,
        })?;
        let stats = opened.stats_source();
        metrics.add_source(move || store_families(&stats.read()));
        Arc::new(opened)
    };

    let single = |server: cluster::ServerInfo| -> Arc<dyn cluster::Leadership> {
        Arc::new(cluster::AlwaysLeader::serving(server))
    };
    let result = serve_all(&plan, storage.clone(), &metrics, Box::new(single)).await;
    let closed = storage.close().await.map_err(Error::CloseStore);
    drop(plan.data_dir); // removes a temporary data dir, now that the store is closed
    result.and(closed)
}

/// Starts the leadership for this server once its listeners are bound.
type Elect = Box<dyn FnOnce(cluster::ServerInfo) -> Arc<dyn cluster::Leadership> + Send>;

/// This server's description: a fresh id, the host name, and each service's advertised URL.
fn this_server(services: &[(ServiceKind, String)]) -> cluster::ServerInfo {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_default();
    let id = format!("cairn-{}-{:08x}", std::process::id(), rand::random::<u32>());
    services.iter().fold(
        cluster::ServerInfo::new(id, hostname),
        |server, (kind, url)| server.with_url(kind.name(), url.clone()),
    )
}

async fn serve_all(
    plan: &Plan,
    storage: Arc<dyn Storage>,
    metrics: &Metrics,
    elect: Elect,
) -> Result<(), Error> {
    let signals = Signals::install()?;
    let mut bound = Vec::new();
    let mut peer_tls = std::collections::BTreeMap::new();
    for service in &plan.services {
        let listener = TcpListener::bind(service.addr)
            .await
            .map_err(|source| Error::Bind {
                service: service.kind.name(),
                addr: service.addr,
                source,
            })?;
        let local = listener.local_addr().map_err(|source| Error::Bind {
            service: service.kind.name(),
            addr: service.addr,
            source,
        })?;
        let tls = match &service.tls {
            None => None,
            Some(files) => Some(
                http_kit::load_tls_config(&files.cert_file, &files.key_file).map_err(|err| {
                    Error::Tls {
                        service: service.kind.name(),
                        message: err.to_string(),
                    }
                })?,
            ),
        };
        if let Some(ca_file) = service
            .tls
            .as_ref()
            .and_then(|files| files.ca_file.as_ref())
        {
            let trust = cluster::PeerTls::from_ca_file(ca_file).map_err(|message| Error::Tls {
                service: service.kind.name(),
                message,
            })?;
            peer_tls.insert(service.kind.name().to_owned(), trust);
        }
        bound.push((service, listener, local, tls));
    }

    let advertised: Vec<(ServiceKind, String)> = bound
        .iter()
        .map(|(service, _, local, tls)| {
            let url = service.advertise.clone().unwrap_or_else(|| {
                let scheme = if tls.is_some() { "https" } else { "http" };
                format!("{scheme}://{}", advertise(*local))
            });
            (service.kind, url)
        })
        .collect();
    let leadership = cluster::peer::with_peer_tls(elect(this_server(&advertised)), peer_tls);
    let shutdown = CancellationToken::new();
    // With the embedded store this server always leads; on etcd, leadership is elected.
    let runner = cluster::Runner::new(leadership, shutdown.clone());
    let mut tasks = JoinSet::new();
    let mut banner = vec![format!("cairn {}", plan.mode)];
    let mut urls = Vec::new();
    // The in-process scheduler client reads task templates' secrets from this listener.
    let secrets_url = bound
        .iter()
        .find(|(service, ..)| service.kind == ServiceKind::Secrets)
        .map(|(_, _, local, tls)| {
            let scheme = if tls.is_some() { "https" } else { "http" };
            format!("{scheme}://{}", advertise(*local))
        });
    // The in-process scheduler client registers provider-`consul` services in this listener.
    let registry_url = bound
        .iter()
        .find(|(service, ..)| service.kind == ServiceKind::Registry)
        .map(|(_, _, local, tls)| {
            let scheme = if tls.is_some() { "https" } else { "http" };
            format!("{scheme}://{}", advertise(*local))
        });
    for (service, listener, local, tls) in bound {
        let kind = service.kind;
        let built = build_service(
            kind,
            service,
            local,
            plan,
            storage.clone(),
            metrics,
            &runner,
            secrets_url.as_deref(),
            registry_url.as_deref(),
        )
        .await;
        let router = match built {
            Ok(router) => router,
            Err(err) => {
                runner.shutdown_and_wait().await;
                return Err(err);
            }
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        banner.push(format!("  {:<11} {scheme}://{local}", kind.name()));
        urls.push((kind.name(), format!("{scheme}://{local}")));
        let token = shutdown.clone();
        tasks.spawn(async move {
            let served = match tls {
                Some(tls) => http_kit::serve_tls(listener, tls, router, token).await,
                None => http_kit::serve(listener, router, token).await,
            };
            served.map_err(|source| Error::Serve {
                service: kind.name(),
                source,
            })
        });
    }
    let kept = match plan.data_dir {
        DataDir::Kept(_) => "",
        DataDir::Temporary(_) => " (removed on exit)",
    };
    banner.push(format!(
        "  {:<11} {}{kept}",
        "data dir",
        plan.data_dir.path().display()
    ));
    if let Some(token) = &plan.dev_root_token {
        banner.push(format!("  {:<11} {token}", "root token"));
    }
    banner.push("ready".to_owned());
    // `cairn dev` ends its banner with the lines upstream tools read, ready to paste (and in
    // a file for `cairn dev --env`).
    let dev_env = plan.dev_root_token.as_ref().map(|token| {
        crate::dev_env::render(&crate::dev_env::DevEnv {
            urls: &urls,
            token,
            acl: plan.dev_acl,
        })
    });
    if let Some(lines) = &dev_env {
        banner.push(lines.trim_end().to_owned());
        crate::dev_env::write(&plan.dev_env_files, lines);
    }
    crate::println_stdout(&banner.join("\n"));
    tracing::info!(
        message = "Cairn is ready.",
        mode = plan.mode,
        services = plan.services.len()
    );

    // Run until a signal arrives or a server fails; then stop everything.
    let mut failure = None;
    tokio::select! {
        signal = signals.recv() => tracing::info!(message = "Shutting down.", %signal),
        Some(joined) = tasks.join_next() => failure = Some(flatten(joined)),
    }
    shutdown.cancel();
    while let Some(joined) = tasks.join_next().await {
        if let Err(err) = flatten(joined)
            && failure.is_none()
        {
            failure = Some(Err(err));
        }
    }
    runner.shutdown_and_wait().await;
    if let Some(lines) = &dev_env {
        crate::dev_env::remove(&plan.dev_env_files, lines);
    }
    tracing::info!(message = "All services stopped.");
    match failure {
        Some(Err(err)) => Err(err),
        _ => Ok(()),
    }
}

/// `CAIRN_TEMPLATE_REFRESH` (a Go duration): how often the in-process client re-reads template
/// secrets that have no lease (default 5m, as consul-template).
fn template_refresh_from_env(
    templates: &mut scheduler_agent::TemplateSettings,
) -> Result<(), Error> {
    match std::env::var("CAIRN_TEMPLATE_REFRESH") {
        Ok(text) if !text.trim().is_empty() => templates
            .set_refresh_interval(&text)
            .map_err(|err| Error::Config(format!("CAIRN_TEMPLATE_REFRESH: {err}"))),
        _ => Ok(()),
    }
}

fn flatten(joined: Result<Result<(), Error>, tokio::task::JoinError>) -> Result<(), Error> {
    joined.map_err(|err| Error::Service {
        service: "task",
        message: err.to_string(),
    })?
}

/// Builds a service's state over the store, registers its background loops with `runner`, and
/// returns its router.
#[allow(
    clippy::too_many_arguments,
    reason = "one call site, each argument a distinct piece of the plan"
)]
async fn build_service(
    kind: ServiceKind,
    listen: &Listen,
    local: SocketAddr,
    plan: &Plan,
    storage: Arc<dyn Storage>,
    metrics: &Metrics,
    runner: &cluster::Runner,
    secrets_url: Option<&str>,
    registry_url: Option<&str>,
) -> Result<axum::Router, Error> {
    // The shared request layer (request ids, spans, limits, metrics), which each service puts
    // around its routes together with its own header hooks: one layer per route.
    let options = http_kit::HttpOptions {
        metrics: Some(metrics.requests(kind.name())),
        ..http_kit::HttpOptions::default()
    };
    let dev_root_token = plan.dev_root_token.clone();
    let failed = |message: String| Error::Service {
        service: kind.name(),
        message,
    };
    Ok(match kind {
        ServiceKind::Secrets => {
            let config = secrets::Config {
                dev_unseal_key_file: dev_root_token
                    .as_ref()
                    .map(|_| plan.data_dir.path().join(DEV_UNSEAL_KEY_FILE)),
                dev_root_token,
                metrics: metrics.clone(),
                cluster: Some(runner.leadership()),
            };
            let state = secrets::State::open(storage, config)
                .await
                .map_err(|err| failed(err.to_string()))?;
            secrets::start_tasks(&state, runner);
            secrets::router_with(state, &options)
        }
        ServiceKind::Registry => {
            let mut config = registry::Config::new(advertise(local));
            config.metrics = metrics.clone();
            config.cluster = Some(runner.leadership());
            config.acl = match (&dev_root_token, &listen.registry_acl) {
                // `cairn dev --acl`: the root token is the initial management token.
                (Some(token), _) if plan.dev_acl => registry::AclConfig {
                    enabled: true,
                    initial_management_token: Some(token.clone()),
                    default_policy_allow: false,
                },
                // `cairn dev`: open, as `consul agent -dev`.
                (Some(_), _) => registry::AclConfig::default(),
                (None, Some(acl)) => acl.clone(),
                // `cairn server` without an acl block: on, bootstrapped through the API.
                (None, None) => registry::AclConfig {
                    enabled: true,
                    ..registry::AclConfig::default()
                },
            };
            let state = registry::State::open(storage, config, Arc::new(registry::SystemClock))
                .await
                .map_err(|err| failed(err.to_string()))?;
            registry::start_tasks(&state, runner);
            registry::router_with(state, &options)
        }
        ServiceKind::Scheduler => {
            let config = scheduler::Config {
                client_enabled: plan.scheduler_client,
                // `cairn dev`: open unless --acl (as `nomad agent -dev`); `cairn server`: the
                // config's acl block, on by default.
                acl_enabled: if dev_root_token.is_some() {
                    plan.dev_acl
                } else {
                    listen.scheduler_acl.unwrap_or(true)
                },
                dev_root_token,
                metrics: metrics.clone(),
                cluster: scheduler_cluster(runner),
                forward_tls: runner.leadership().peer_tls("scheduler"),
                ..scheduler::Config::default()
            };
            let state = scheduler::State::open(storage, config)
                .await
                .map_err(|err| failed(err.to_string()))?;
            scheduler::start_tasks(&state, runner);
            if plan.scheduler_client {
                let scheme = if listen.tls.is_some() {
                    "https"
                } else {
                    "http"
                };
                let advertised = advertise(local);
                let client_dir = plan.data_dir.path().join("client");
                let mut agent_config = scheduler_agent::AgentConfig::new(
                    vec![format!("{scheme}://{advertised}")],
                    client_dir.clone(),
                );
                agent_config.http_addr = advertised.to_string();
                // Templates read this process's secrets store; tokens for tasks with a `vault`
                // block derive from the dev root token when the job carries none (the role of
                // a Nomad server's own Vault token).
                agent_config.templates.secrets_url = secrets_url.map(str::to_owned);
                agent_config.templates.secrets_token = plan.dev_root_token.clone();
                template_refresh_from_env(&mut agent_config.templates)?;
                // Provider-`consul` services go to this process's session registry.
                agent_config.consul = registry_url.map(|address| scheduler_agent::ConsulSettings {
                    address: address.to_owned(),
                    token: plan.dev_root_token.clone(),
                });
                let agent = scheduler_agent::Agent::new(agent_config)
                    .map_err(|err| failed(err.to_string()))?;
                // A client runs on every server, leader or not.
                let token = runner.shutdown_token();
                runner.local_loop("scheduler client", async move {
                    if let Err(err) = agent.run(token).await {
                        tracing::error!(error = %err, "the scheduler client stopped");
                    }
                    // As Nomad's dev agent: a dev client's tasks end with it (`cairn
                    // agent` leaves them running and re-attaches).
                    let killed = scheduler_agent::kill_leftover_tasks(&client_dir);
                    tracing::info!(killed, "stopped the dev client's tasks");
                });
            }
            scheduler::router_with(state, &options)
        }
        ServiceKind::Platform => {
            let encryption_password = match &plan.platform_encryption {
                PlatformEncryption::Password(password) => Some(password.clone()),
                PlatformEncryption::DevFile => Some(
                    dev_platform_password(&plan.data_dir.path().join(DEV_PLATFORM_PASSWORD_FILE))
                        .map_err(failed)?,
                ),
                PlatformEncryption::RandomPerRun => None,
            };
            let config = platform::Config {
                dev_root_token,
                blob_dir: match &plan.blobs {
                    BlobPlace::Dir(dir) => dir.clone(),
                    _ => plan.data_dir.path().join("blobs"),
                },
                blob_s3: match &plan.blobs {
                    BlobPlace::S3(bucket) => Some(bucket.clone()),
                    _ => None,
                },
                api_rate_limiting_enabled: plan.platform_rate_limiting,
                metrics: metrics.clone(),
                public_registry_url: plan.platform_public_registry.clone(),
                encryption_password,
                // The dev file's password is 32 random bytes: stretching adds nothing to
                // them, and 600,000 rounds cost ~0.1-0.3 s of every `cairn dev` start.
                encryption_password_iterations: match &plan.platform_encryption {
                    PlatformEncryption::DevFile => 1,
                    _ => platform::Config::default().encryption_password_iterations,
                },
                ..platform::Config::default()
            };
            let opened = platform::State::open(storage, config)
                .await
                .map_err(|err| failed(err.to_string()))?;
            // The first start of `cairn server` issues the site administrator's token; it is
            // shown once, here, just before the banner (the store keeps only its hash).
            if let Some(token) = &opened.bootstrap_token {
                crate::println_stdout(&format!("  platform bootstrap token  {token}"));
            }
            platform::start_tasks(&opened.state, runner);
            platform::router_with(opened.state, &options)
        }
    })
}

/// The store's figures, as every metrics endpoint reports them.
fn store_families(stats: &RedbStats) -> Vec<Family> {
    let histogram = |distribution: &Distribution| Histogram {
        bounds: distribution.bounds,
        counts: distribution.counts.clone(),
        count: distribution.count,
        sum: distribution.sum,
        min: distribution.min,
        max: distribution.max,
        sum_squares: distribution.sum_squares,
    };
    vec![
        Family::counter(
            "cairn_store_commits",
            "Durable commits of the embedded store (each a group of transactions).",
            vec![(Vec::new(), stats.commits)],
        ),
        Family::counter(
            "cairn_store_transactions",
            "Transactions (and restores) the embedded store applied.",
            vec![(Vec::new(), stats.requests)],
        ),
        Family::histogram(
            "cairn_store_commit_duration_seconds",
            "Time from a group's write transaction to its durable commit, in seconds.",
            vec![(Vec::new(), histogram(&stats.commit_seconds))],
        ),
        Family::histogram(
            "cairn_store_commit_batch_size",
            "Transactions per durable commit (group commit).",
            vec![(Vec::new(), histogram(&stats.batch_sizes))],
        ),
    ]
}

/// The address other parties should use: a wildcard bind is advertised as loopback.
fn advertise(local: SocketAddr) -> SocketAddr {
    if local.ip().is_unspecified() {
        let ip = if local.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        };
        SocketAddr::new(ip, local.port())
    } else {
        local
    }
}

/// SIGINT and SIGTERM, installed before the banner so an early signal is never lost.
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl fmt::Debug for Signals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signals").finish_non_exhaustive()
    }
}

impl Signals {
    pub(crate) fn install() -> Result<Signals, Error> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt()).map_err(Error::Signals)?,
            terminate: signal(SignalKind::terminate()).map_err(Error::Signals)?,
        })
    }

    pub(crate) async fn recv(mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}

/// With elected leadership (several servers), who leads and who serves, for the scheduler's
/// forwarding and status endpoints; `None` for the embedded store's single server.
fn scheduler_cluster(runner: &cluster::Runner) -> Option<scheduler::ClusterView> {
    let leadership = runner.leadership();
    if !leadership.is_elected() {
        return None;
    }
    let leader = leadership.clone();
    Some(scheduler::ClusterView {
        leader_url: Arc::new(move || {
            leader
                .leader()
                .and_then(|server| server.url("scheduler").map(str::to_owned))
        }),
        peers: Arc::new(move || {
            leadership
                .peers()
                .iter()
                .filter_map(|server| server.addr("scheduler").map(str::to_owned))
                .collect()
        }),
    })
}
