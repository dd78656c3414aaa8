//! The platform: a Terraform Enterprise API v2-compatible JSON:API service on its own listener
//! (default 127.0.0.1:8080), under `/api/v2`.
//!
//! Request flow: `cairn` opens the state with [`State::open`] (which bootstraps the site
//! administrator) and serves [`router`]; `routes.rs` lists every (method, path), applies the
//! per-caller rate limit (`rate_limit.rs`) and, on JSON:API routes, the content-type rule and
//! body limit. Handlers live in one file per URL family: `ping.rs`, `users.rs`,
//! `organizations.rs`, `teams.rs`, `tokens.rs`, `memberships.rs`, `invitations.rs`,
//! `workspaces/`, `configuration_versions.rs`, `runs.rs`, `oauth_clients.rs` (VCS connections),
//! `registry_modules/` (the private module registry), `registry_protocol.rs` (the module
//! registry protocol and discovery), `public_registry.rs` (the public registry proxy), `admin/` (site administration settings),
//! `policy_versions.rs` (the policy-engine version catalogue) and `objects.rs` (the signed
//! upload and download URLs). A handler starts with the `auth::Caller` extractor (except ping, the
//! invitation acceptance and the signed URLs), reads its input through `request.rs` (`Body`,
//! `Query`), persists through `store/` (runs through the workspace queue, `run_queue.rs`;
//! archives through `blobs.rs`), renders resources with `views/` and answers through
//! `render.rs`; errors go through [`Error`], rendered as JSON:API error documents by the
//! `jsonapi` crate. Mail goes out through `mail.rs` (SMTP); the one background loop,
//! `retention.rs` (the site data retention policy), starts through [`start_tasks`].
//!
//! Layers, each importing only those below it: `routes.rs`; the handlers; `views/` (how each
//! resource renders, shared by every family that answers or includes it, so no two handler
//! modules import each other) and `run_queue.rs`; `auth.rs`, `request.rs`, `render.rs`,
//! `signed_url.rs`, `mail.rs`; `store/`; `sealing.rs` (the store view that encrypts
//! credentials at rest); at the bottom `run_state.rs`, `module_config.rs` and
//! `semver.rs` (pure), `archive.rs`, `blobs.rs` and `ids.rs`.
//!
//! Invariants:
//! - Everything this crate keeps in the shared store lives under the `platform/` key prefix
//!   (`store/`); configuration archives and module tarballs live in the blob store
//!   (`blobs.rs`: [`Config::blob_dir`] or the bucket [`Config::blob_s3`]).
//! - Every response carries `TFP-API-Version: 2.5` (Terraform refuses older servers).
//! - Error `status` members are strings; "no access" is 404, never 403 (TFE's rule); a
//!   missing or invalid token is 401.
//! - Token secrets are never stored, only their SHA-256; a secret is shown once, when issued.
//! - Every other credential the platform must keep (VCS tokens, SMTP password, SMS auth
//!   token, cost-estimation secrets, the URL signing key) is sealed at rest under the key of
//!   [`Config::encryption_password`]: handlers see the store only through `sealing.rs`'s view.
//! - A write that changes several records is one storage transaction guarded by
//!   compare-and-swap on what it read; nothing holds a lock across I/O.
//! - The platform crate never depends on another service crate.

mod admin;
mod archive;
mod auth;
mod auth_cache;
mod blobs;
mod bootstrap;
mod configuration_versions;
mod error;
mod error_page;
mod ids;
mod invitations;
mod mail;
mod memberships;
mod metrics;
mod module_config;
mod oauth_clients;
mod objects;
mod organizations;
mod ping;
mod policy_versions;
mod public_registry;
mod rate_limit;
mod registry_modules;
mod registry_protocol;
mod render;
mod request;
mod retention;
mod routes;
mod run_queue;
mod run_state;
mod runs;
mod sealing;
mod semver;
mod signed_url;
mod store;
mod teams;
mod tokens;
mod users;
mod views;
mod workspaces;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use stdx::clock::{SharedClock, SystemClock};
use storage::Storage;

pub use blobs::S3Blobs;
pub use bootstrap::{ADMIN_EMAIL, ADMIN_USERNAME};
pub use error::{DeliveryFailure, Error};
pub use rate_limit::MIN_RATE_LIMIT;
pub use routes::{router, router_with};

/// The JSON:API version this server speaks, sent as `TFP-API-Version`.
pub const API_VERSION: &str = "2.5";

/// How the platform is started.
#[derive(Debug, Clone)]
pub struct Config {
    /// `cairn dev`: the site administrator's token (a user token of [`ADMIN_USERNAME`]).
    pub dev_root_token: Option<String>,
    pub limits: Limits,
    /// Where configuration archives are kept (`cairn` passes `<data-dir>/blobs`); created on
    /// first use. Empty: uploads and downloads fail with a 500 naming the missing setting.
    pub blob_dir: PathBuf,
    /// An S3-compatible bucket for the archives instead of [`Config::blob_dir`] (several
    /// servers share it; a directory they all mount works too, as `blob_dir`).
    pub blob_s3: Option<S3Blobs>,
    /// The largest configuration archive accepted, in bytes (`None`: 100 MiB); larger uploads
    /// are answered 422.
    pub max_upload_bytes: Option<u64>,
    /// TFE's general setting `api-rate-limit`: requests per second per caller (per token
    /// owner; anonymous callers per client IP). Default 30; values under
    /// [`MIN_RATE_LIMIT`] (30) are raised to it. Changeable at runtime:
    /// [`State::set_api_rate_limit`].
    pub api_rate_limit: u32,
    /// TFE's general setting `api-rate-limiting-enabled` (default true); runtime:
    /// [`State::set_api_rate_limiting_enabled`].
    pub api_rate_limiting_enabled: bool,
    /// Public module curation (TFE's hosted-only feature): when off, the default as on TFE's
    /// self-hosted edition, `registry-name: public` is answered 403 and modules are private.
    pub public_module_curation: bool,
    /// The process's metrics registry (`cairn` shares one with every service); served at
    /// `/api/v2/metrics` with this service's figures.
    pub metrics: http_kit::metrics::Metrics,
    /// How long an SMTP server may take to answer each command (default 10 s); past it, the
    /// SMTP settings' test message is answered 504.
    pub smtp_timeout: Duration,
    /// How often the data retention loop looks for expired archives (default 1 h); it also
    /// runs at once whenever the policy changes.
    pub retention_interval: Duration,
    /// The upstream module registry `/api/registry/public/v1` proxies (default
    /// [`DEFAULT_PUBLIC_REGISTRY`]); its module API is read under `/v1/modules/`.
    pub public_registry_url: String,
    /// How long one request to the public registry may take, connecting included (default
    /// 10 s); past it the proxy answers 502.
    pub public_registry_timeout: Duration,
    /// How long a public registry answer is served from the cache (default 60 s).
    pub public_registry_cache_ttl: Duration,
    /// TFE's `encryption_password`: the stored credentials (VCS tokens, SMTP password, SMS
    /// auth token, cost-estimation secrets, the URL signing key) are sealed under a key
    /// derived from it (`sealing.rs`). `None`: a random key for this run only, so a store
    /// written without a password cannot be read by a later start (`cairn dev`'s temporary
    /// store). A store written with one opens only with the same one.
    pub encryption_password: Option<String>,
    /// PBKDF2 rounds when a store's key is first derived from `encryption_password` (later
    /// starts use the count the store recorded). Default 600,000 (OWASP's figure for
    /// PBKDF2-HMAC-SHA256, ~0.1-0.3 s per start here); `cairn dev` sets 1 for the 256-bit
    /// random password it generates itself, which stretching cannot strengthen.
    pub encryption_password_iterations: u32,
}

/// The public Terraform registry, the default upstream of the public registry proxy.
pub const DEFAULT_PUBLIC_REGISTRY: &str = "https://registry.terraform.io";

impl Default for Config {
    fn default() -> Config {
        Config {
            dev_root_token: None,
            limits: Limits::default(),
            blob_dir: PathBuf::new(),
            blob_s3: None,
            max_upload_bytes: None,
            api_rate_limit: MIN_RATE_LIMIT,
            api_rate_limiting_enabled: true,
            public_module_curation: false,
            metrics: http_kit::metrics::Metrics::default(),
            smtp_timeout: Duration::from_secs(10),
            retention_interval: Duration::from_secs(3600),
            public_registry_url: DEFAULT_PUBLIC_REGISTRY.to_owned(),
            public_registry_timeout: Duration::from_secs(10),
            public_registry_cache_ttl: Duration::from_secs(60),
            encryption_password: None,
            encryption_password_iterations: sealing::PBKDF2_ITERATIONS,
        }
    }
}

/// Organization limits; an invitation past one is answered 400.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Memberships (invited and active) an organization may hold.
    pub max_organization_members: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_organization_members: 100_000,
        }
    }
}

/// Shared state of the platform; cheap to clone.
#[derive(Debug, Clone)]
pub struct State {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    storage: Arc<dyn Storage>,
    config: Config,
    /// Configuration archives (`blobs.rs`) and the URL signing key, loaded or created on
    /// first use (`signed_url.rs`).
    blobs: blobs::BlobStore,
    signer: tokio::sync::OnceCell<signed_url::Signer>,
    /// The live rate-limit settings and buckets (`rate_limit.rs`).
    rate_limiter: rate_limit::RateLimiter,
    /// Every wall-clock reading: record times, token expiry, signed URL expiry.
    clock: SharedClock,
    /// Wakes the data retention loop when the policy changes (`retention.rs`).
    retention_wake: tokio::sync::Notify,
    /// The public registry proxy's client and cache (`public_registry.rs`).
    public_registry: public_registry::PublicRegistry,
    /// One lock per organization around its membership counts' read and compare-and-swap
    /// commit (invite, accept, remove), so that concurrent requests of this server queue
    /// instead of exhausting `store::MAX_ATTEMPTS` (160 invitations at once did, answering
    /// 409); held only around that read and the commit, never across mail. The
    /// compare-and-swap stays for servers sharing a store.
    counts_locks: stdx::keyed_lock::KeyedLocks,
    /// Resolved callers and organization accesses (`auth_cache.rs`); `storage` invalidates
    /// it as it writes.
    auth_cache: auth_cache::AuthCache<auth::Caller, auth::OrgAccess>,
}

/// What [`State::open`] returns.
#[derive(Debug)]
pub struct Opened {
    pub state: State,
    /// At the first start of a store without a dev root token: the secret of a user token of
    /// the site administrator [`ADMIN_USERNAME`], shown this once (`cairn server` prints it).
    pub bootstrap_token: Option<String>,
}

impl State {
    /// Opens the platform over `storage` and bootstraps the site administrator: with a dev
    /// root token, makes it a token of [`ADMIN_USERNAME`]; without one, on the store's first
    /// start, issues a token for that user and returns it in [`Opened::bootstrap_token`].
    pub async fn open(storage: Arc<dyn Storage>, config: Config) -> Result<Opened, Error> {
        State::open_with_clock(storage, config, Arc::new(SystemClock)).await
    }

    /// [`State::open`] with `clock` as the time of every record, token expiry and signed URL
    /// (tests pass a `stdx::clock::ManualClock`).
    pub async fn open_with_clock(
        storage: Arc<dyn Storage>,
        config: Config,
        clock: SharedClock,
    ) -> Result<Opened, Error> {
        // Credentials are sealed at rest: derive the key (refusing a wrong password), seal
        // whatever an older release kept in clear, and serve everything through the sealing
        // view of the store.
        let cipher = sealing::open(
            storage.as_ref(),
            config.encryption_password.as_deref(),
            config.encryption_password_iterations,
        )
        .await?;
        let sealed = sealing::SealedStorage::new(Arc::clone(&storage), cipher);
        let migrated = sealing::migrate(storage.as_ref(), &sealed).await?;
        if migrated > 0 {
            tracing::info!(
                records = migrated,
                "sealed platform credentials stored in clear by an older release"
            );
        }
        let auth_cache = auth_cache::AuthCache::new(Arc::default());
        let storage: Arc<dyn Storage> = Arc::new(auth_cache::Invalidating::new(
            Arc::new(sealed),
            Arc::clone(auth_cache.epochs()),
        ));
        let max_upload_bytes = config
            .max_upload_bytes
            .unwrap_or(blobs::DEFAULT_MAX_UPLOAD_BYTES);
        let blobs = match &config.blob_s3 {
            None => blobs::BlobStore::new(config.blob_dir.clone(), max_upload_bytes),
            Some(bucket) => blobs::BlobStore::s3(bucket, max_upload_bytes).map_err(|err| {
                Error::Internal(format!("the blob store {}: {err}", bucket.describe()))
            })?,
        };
        let state = State {
            inner: Arc::new(Inner {
                blobs,
                signer: tokio::sync::OnceCell::new(),
                rate_limiter: rate_limit::RateLimiter::new(
                    config.api_rate_limit,
                    config.api_rate_limiting_enabled,
                ),
                storage,
                config,
                clock,
                retention_wake: tokio::sync::Notify::new(),
                public_registry: public_registry::PublicRegistry::default(),
                counts_locks: stdx::keyed_lock::KeyedLocks::default(),
                auth_cache,
            }),
        };
        let bootstrap_token = bootstrap::bootstrap(&state).await?;
        // Rate limits an administrator set outlive restarts.
        admin::general::apply_stored(&state).await?;
        Ok(Opened {
            state,
            bootstrap_token,
        })
    }

    pub(crate) fn storage(&self) -> &dyn Storage {
        self.inner.storage.as_ref()
    }

    pub(crate) fn auth_cache(&self) -> &auth_cache::AuthCache<auth::Caller, auth::OrgAccess> {
        &self.inner.auth_cache
    }

    /// Whether the auth cache serves (its watch runs: `start_tasks` started it); for tests
    /// that must know the cache is in play.
    #[doc(hidden)]
    pub fn auth_cache_serves(&self) -> bool {
        self.inner.auth_cache.epochs().serves()
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn public_registry(&self) -> &public_registry::PublicRegistry {
        &self.inner.public_registry
    }

    pub(crate) fn rate_limiter(&self) -> &rate_limit::RateLimiter {
        &self.inner.rate_limiter
    }

    /// Waits for `organization`'s membership counts lock (see `Inner::counts_locks`).
    pub(crate) async fn lock_counts(&self, organization: &str) -> stdx::keyed_lock::KeyedGuard<'_> {
        self.inner.counts_locks.lock(organization).await
    }

    /// Now, in Unix milliseconds (0 before the epoch), as records store times.
    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.inner.clock.now_ms()).unwrap_or(0)
    }

    /// Now, in whole Unix seconds, as signed URLs carry their expiry.
    pub(crate) fn now_secs(&self) -> u64 {
        self.now_ms() / 1000
    }

    /// The effective API rate limit, in requests per second per caller.
    pub fn api_rate_limit(&self) -> u32 {
        self.inner.rate_limiter.limit()
    }

    /// Changes the API rate limit at runtime; values under [`MIN_RATE_LIMIT`] are raised.
    pub fn set_api_rate_limit(&self, limit: u32) {
        self.inner.rate_limiter.set_limit(limit);
    }

    /// Whether API rate limiting is on.
    pub fn api_rate_limiting_enabled(&self) -> bool {
        self.inner.rate_limiter.enabled()
    }

    /// Turns API rate limiting on or off at runtime.
    pub fn set_api_rate_limiting_enabled(&self, enabled: bool) {
        self.inner.rate_limiter.set_enabled(enabled);
    }

    /// Asks the data retention loop for a pass now (the policy changed). The wake is kept if
    /// the loop is busy, so it is never lost.
    pub(crate) fn wake_retention(&self) {
        self.inner.retention_wake.notify_one();
    }

    /// Resolves when [`State::wake_retention`] was called.
    pub(crate) async fn retention_woken(&self) {
        self.inner.retention_wake.notified().await;
    }

    /// Notified when a manual clock jumps (`None` for the system clock).
    pub(crate) fn clock_jumped(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.inner.clock.jumped()
    }
}

/// Starts the platform's background loops through `runner` and returns at once: the data
/// retention loop (`retention.rs`), a leader loop, so one server applies the site's policy;
/// and on every server the auth cache's watch (`auth_cache.rs`), without which the cache
/// serves nothing.
pub fn start_tasks(state: &State, runner: &cluster::Runner) {
    runner.local_loop(
        "platform auth cache",
        auth_cache::follow(
            Arc::clone(&state.inner.storage),
            Arc::clone(state.inner.auth_cache.epochs()),
            runner.shutdown_token(),
        ),
    );
    let leading = state.clone();
    runner.leader_loop("platform data retention", move |term| {
        retention::run(leading.clone(), term)
    });
}
