//! Who runs the background work: [`Leadership`] and the [`Runner`] every background loop
//! starts through.
//!
//! Some loops must run once per cluster (session TTLs and the check runner, lease expiry,
//! token tidy, the scheduler's writer, broker, workers and heartbeat monitor, rotations,
//! snapshot schedules, retention); others run on every server (a scheduler client). A service
//! registers its loops with the runner `cairn`'s wiring owns: [`Runner::leader_loop`] for the
//! first kind, [`Runner::local_loop`] for the second. Which server leads is the
//! [`Leadership`]'s business: with the embedded store there is one server and it always leads
//! ([`AlwaysLeader`]); a distributed store supplies an elected implementation, and no loop
//! changes when it does.
//!
//! Membership: each server describes itself as a [`ServerInfo`] (an id and, per service, the
//! URL clients reach it at); the leadership answers who leads ([`Leadership::leader`]) and who
//! serves ([`Leadership::peers`]), which the services' status endpoints report (Consul's
//! `/v1/status/leader`, Vault's `sys/leader`, `sys/ha-status`, `sys/health`'s standby code).
//!
//! Reaching the others: a server that forwards a request to the leader connects through
//! [`peer::connector`], trusting the CA [`Leadership::peer_tls`] gives for the service.
//!
//! Preference: an elected leadership may be asked to step down ([`Leadership::step_down`]) and
//! told whether this server is fit to lead ([`Leadership::set_fit`]: the secrets store unsealed);
//! an unfit server leads only while no fit one serves.
//!
//! Where it sits: below the service crates and `cairn`; it knows nothing of any service.
//!
//! Invariants:
//! - a leader loop runs only while this server leads, at most one instance at a time: it is
//!   started (with a fresh token) each time leadership is gained, and its token is cancelled
//!   when leadership is lost or the server shuts down; the runner waits for it to return before
//!   it can start again. A loop therefore rebuilds what it needs from storage when it starts.
//! - every task the runner starts is joined by [`Runner::shutdown_and_wait`]; nothing outlives it.
//! - a loop that panics is logged and does not take the runner, or other loops, down.
//! - [`Leadership::leader`] is `Some` only for a server known to lead now; when this server
//!   leads it is this server itself. [`Leadership::peers`] always includes this server.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub mod peer;

pub use peer::PeerTls;

/// One server of a cluster, as the others and the clients see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerInfo {
    /// Unique among the servers of one cluster (stable for the life of the process).
    pub id: String,
    /// The host name this server runs on (Vault's `sys/ha-status` `hostname`).
    pub hostname: String,
    /// Per service name (`secrets`, `registry`, `scheduler`, `platform`), the URL clients
    /// reach it at: `http://host:port` or `https://host:port`, no trailing slash.
    pub urls: BTreeMap<String, String>,
}

impl ServerInfo {
    /// A server with this id on this host and no service yet.
    pub fn new(id: impl Into<String>, hostname: impl Into<String>) -> ServerInfo {
        ServerInfo {
            id: id.into(),
            hostname: hostname.into(),
            urls: BTreeMap::new(),
        }
    }

    /// Adds the URL clients reach `service` at.
    pub fn with_url(mut self, service: &str, url: impl Into<String>) -> ServerInfo {
        self.urls.insert(service.to_owned(), url.into());
        self
    }

    /// The URL of `service` on this server, if it runs there.
    pub fn url(&self, service: &str) -> Option<&str> {
        self.urls.get(service).map(String::as_str)
    }

    /// `host:port` of `service` on this server (its URL without the scheme), as Consul's
    /// `/v1/status/leader` and Nomad's report a server.
    pub fn addr(&self, service: &str) -> Option<&str> {
        let url = self.url(service)?;
        // The scheme ends at the first `:` (a byte search, no substring searcher).
        Some(match url.split_once(':') {
            Some((_, rest)) if rest.starts_with("//") => &rest[2..],
            _ => url,
        })
    }
}

/// Whether this server is the one that runs cluster-wide work, and who the servers are.
pub trait Leadership: Send + Sync + fmt::Debug + 'static {
    /// Leadership as it changes: `true` while this server leads. The receiver sees every
    /// change; it closes only when the leadership itself is gone.
    fn watch(&self) -> watch::Receiver<bool>;

    /// Whether this server leads right now.
    fn is_leader(&self) -> bool {
        *self.watch().borrow()
    }

    /// Whether leadership is elected among several servers (Vault's `ha_enabled`): `false`
    /// for the embedded store's single server.
    fn is_elected(&self) -> bool {
        false
    }

    /// This server.
    fn this_server(&self) -> ServerInfo;

    /// The server that leads now, with its URLs; `None` while no leader is known (an
    /// election in progress, or this server cannot reach the store).
    fn leader(&self) -> Option<ServerInfo> {
        self.is_leader().then(|| self.this_server())
    }

    /// The leader's `host:port` for `service` (`""` when it does not run there); `None` while
    /// no leader is known. What `/v1/status/leader` answers on every poll: implementations
    /// that keep the leader at hand answer without building a whole [`ServerInfo`].
    fn leader_addr(&self, service: &str) -> Option<String> {
        self.leader()
            .map(|leader| leader.addr(service).unwrap_or_default().to_owned())
    }

    /// Whether a leader is known now (`leader().is_some()`, without building it): the
    /// KnownLeader headers every response carries.
    fn knows_leader(&self) -> bool {
        self.leader().is_some()
    }

    /// Every server known to serve now, this one included, ordered by id.
    fn peers(&self) -> Vec<ServerInfo> {
        vec![self.this_server()]
    }

    /// When this server's current term of leadership began; `None` while it does not lead,
    /// or where leadership is not elected (Vault's `active_time`).
    fn active_since(&self) -> Option<std::time::SystemTime> {
        None
    }

    /// Gives up leadership if this server leads, so another server takes over (Vault's
    /// `sys/step-down`); it does not campaign again for a while unless it is alone. A no-op
    /// where leadership is not elected.
    fn step_down(&self) {}

    /// Whether this server is fit to lead (`false` while the secrets store it hosts is
    /// sealed). An unfit server does not campaign, and gives up leadership, while a fit
    /// server serves; with no fit server it may lead, so the other services' leader loops
    /// still run. Every server starts fit. A no-op where leadership is not elected.
    fn set_fit(&self, _fit: bool) {}

    /// How this server verifies another server's `service` over HTTPS when it forwards a
    /// request there (the service's `tls { ca_file }`); `None`: no HTTPS peer is trusted.
    /// See [`peer`].
    fn peer_tls(&self, _service: &str) -> Option<PeerTls> {
        None
    }
}

/// The embedded store's leadership: one server, always the leader.
#[derive(Debug)]
pub struct AlwaysLeader {
    leading: watch::Sender<bool>,
    server: ServerInfo,
}

impl AlwaysLeader {
    /// A single server without a description (tests; [`AlwaysLeader::serving`] for a server).
    pub fn new() -> AlwaysLeader {
        AlwaysLeader::serving(ServerInfo::default())
    }

    /// The single server `server`, always the leader.
    pub fn serving(server: ServerInfo) -> AlwaysLeader {
        AlwaysLeader {
            leading: watch::Sender::new(true),
            server,
        }
    }
}

impl Default for AlwaysLeader {
    fn default() -> AlwaysLeader {
        AlwaysLeader::new()
    }
}

impl Leadership for AlwaysLeader {
    fn watch(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    fn this_server(&self) -> ServerInfo {
        self.server.clone()
    }

    fn is_leader(&self) -> bool {
        true
    }

    fn leader_addr(&self, service: &str) -> Option<String> {
        Some(self.server.addr(service).unwrap_or_default().to_owned())
    }

    fn knows_leader(&self) -> bool {
        true
    }
}

/// Leadership moved by hand: for tests of handover, and for tools that decide it themselves.
#[derive(Debug)]
pub struct ManualLeadership {
    leading: watch::Sender<bool>,
}

impl ManualLeadership {
    /// Starts leading or not.
    pub fn new(leading: bool) -> ManualLeadership {
        ManualLeadership {
            leading: watch::Sender::new(leading),
        }
    }

    /// Gains (`true`) or loses (`false`) leadership.
    pub fn set(&self, leading: bool) {
        self.leading.send_replace(leading);
    }
}

impl Leadership for ManualLeadership {
    fn watch(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    fn this_server(&self) -> ServerInfo {
        ServerInfo::default()
    }
}

/// Starts and owns every background loop of one server. Cheap to clone; clones share it.
#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
}

struct Inner {
    leadership: Arc<dyn Leadership>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

impl fmt::Debug for Runner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runner")
            .field("leadership", &self.inner.leadership)
            .field("tasks", &self.inner.tasks.len())
            .finish()
    }
}

impl Runner {
    /// A runner whose leader loops follow `leadership`, and which stops when `shutdown` is
    /// cancelled.
    pub fn new(leadership: Arc<dyn Leadership>, shutdown: CancellationToken) -> Runner {
        Runner {
            inner: Arc::new(Inner {
                leadership,
                shutdown,
                tasks: TaskTracker::new(),
            }),
        }
    }

    /// A runner for the embedded store: this server always leads.
    pub fn embedded(shutdown: CancellationToken) -> Runner {
        Runner::new(Arc::new(AlwaysLeader::new()), shutdown)
    }

    /// The token cancelled at shutdown; local loops end when it is.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }

    /// Whether this server leads right now.
    pub fn is_leader(&self) -> bool {
        self.inner.leadership.is_leader()
    }

    /// The leadership this runner follows: who leads and who the servers are.
    pub fn leadership(&self) -> Arc<dyn Leadership> {
        self.inner.leadership.clone()
    }

    /// Runs `task` on this server until it returns; it must return once
    /// [`shutdown_token`](Runner::shutdown_token) is cancelled.
    pub fn local_loop<F>(&self, name: &'static str, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let tasks = self.inner.tasks.clone();
        tracing::debug!(task = name, "starting a local loop");
        self.inner.tasks.spawn(async move {
            if let Err(err) = tasks.spawn(task).await {
                tracing::error!(task = name, error = %err, "a background loop failed");
            }
        });
    }

    /// Runs a cluster-wide loop while this server leads: `start(token)` is called each time
    /// leadership is gained; `token` is cancelled when it is lost or at shutdown, and the loop
    /// must then return. A loop that returns on its own is started again only after the next
    /// gain of leadership.
    pub fn leader_loop<F, Fut>(&self, name: &'static str, mut start: F)
    where
        F: FnMut(CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let leadership = self.inner.leadership.clone();
        let mut leading = leadership.watch();
        let shutdown = self.inner.shutdown.clone();
        let tasks = self.inner.tasks.clone();
        self.inner.tasks.spawn(async move {
            // The loop keeps the leadership alive, so dropping every `Runner` handle does not
            // end it; only shutdown (or the leadership closing by itself) does.
            let _leadership = leadership;
            loop {
                if !wait_until(&mut leading, true, &shutdown).await {
                    return;
                }
                let term = shutdown.child_token();
                tracing::debug!(task = name, "this server leads: starting");
                let mut running = tasks.spawn(start(term.clone()));
                let ended_by_itself = tokio::select! {
                    joined = &mut running => {
                        if let Err(err) = joined {
                            tracing::error!(task = name, error = %err, "a background loop failed");
                        }
                        true
                    }
                    still = wait_until(&mut leading, false, &shutdown) => {
                        term.cancel();
                        if let Err(err) = running.await {
                            tracing::error!(task = name, error = %err, "a background loop failed");
                        }
                        if !still {
                            return;
                        }
                        tracing::info!(task = name, "leadership lost: stopped");
                        false
                    }
                };
                if ended_by_itself && !wait_until(&mut leading, false, &shutdown).await {
                    return;
                }
            }
        });
    }

    /// Cancels the shutdown token and waits for every loop to return.
    pub async fn shutdown_and_wait(&self) {
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}

/// Waits until leadership is `wanted`; `false` if shutdown came first or the leadership is
/// gone.
async fn wait_until(
    leading: &mut watch::Receiver<bool>,
    wanted: bool,
    shutdown: &CancellationToken,
) -> bool {
    tokio::select! {
        biased;
        () = shutdown.cancelled() => false,
        changed = leading.wait_for(|now| *now == wanted) => changed.is_ok(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::*;

    /// A leader loop that reports each start and each stop.
    fn reporting_loop(
        runner: &Runner,
    ) -> (mpsc::UnboundedReceiver<&'static str>, Arc<AtomicUsize>) {
        let (events, received) = mpsc::unbounded_channel();
        let running = Arc::new(AtomicUsize::new(0));
        let counter = running.clone();
        runner.leader_loop("test", move |token| {
            let events = events.clone();
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = events.send("started");
                token.cancelled().await;
                counter.fetch_sub(1, Ordering::SeqCst);
                let _ = events.send("stopped");
            }
        });
        (received, running)
    }

    async fn next(events: &mut mpsc::UnboundedReceiver<&'static str>) -> &'static str {
        tokio::time::timeout(Duration::from_secs(5), events.recv())
            .await
            .expect("an event within 5 s")
            .expect("the loop's sender is alive")
    }

    #[test]
    fn a_server_address_is_its_url_without_the_scheme() {
        let server = ServerInfo::new("one", "host")
            .with_url("registry", "http://127.0.0.1:8500")
            .with_url("secrets", "https://[::1]:8200")
            .with_url("bare", "10.0.0.1:4646");
        assert_eq!(server.addr("registry"), Some("127.0.0.1:8500"));
        assert_eq!(server.addr("secrets"), Some("[::1]:8200"));
        assert_eq!(server.addr("bare"), Some("10.0.0.1:4646"));
    }

    #[test]
    fn a_single_server_is_its_own_leader_and_only_peer() {
        let me = ServerInfo::new("one", "host").with_url("registry", "http://127.0.0.1:8500");
        let leadership = AlwaysLeader::serving(me.clone());
        assert!(leadership.is_leader());
        assert!(!leadership.is_elected());
        assert_eq!(leadership.leader(), Some(me.clone()));
        assert_eq!(leadership.peers(), vec![me.clone()]);
        assert_eq!(me.addr("registry"), Some("127.0.0.1:8500"));
        assert_eq!(me.addr("secrets"), None);
        assert_eq!(
            leadership.leader_addr("registry").as_deref(),
            Some("127.0.0.1:8500")
        );
        assert_eq!(leadership.leader_addr("secrets").as_deref(), Some(""));
        let follower = ManualLeadership::new(false);
        assert_eq!(
            follower.leader(),
            None,
            "a follower of nobody knows no leader"
        );
        assert_eq!(follower.leader_addr("registry"), None);
    }

    #[tokio::test]
    async fn an_embedded_runner_starts_leader_loops_at_once_and_joins_them() {
        let runner = Runner::embedded(CancellationToken::new());
        assert!(runner.is_leader());
        let (mut events, running) = reporting_loop(&runner);
        assert_eq!(next(&mut events).await, "started");
        runner.shutdown_and_wait().await;
        assert_eq!(next(&mut events).await, "stopped");
        assert_eq!(running.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn leader_loops_follow_leadership_one_instance_at_a_time() {
        let leadership = Arc::new(ManualLeadership::new(false));
        let runner = Runner::new(leadership.clone(), CancellationToken::new());
        let (mut events, running) = reporting_loop(&runner);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(events.try_recv().is_err(), "no start before leading");

        leadership.set(true);
        assert_eq!(next(&mut events).await, "started");
        leadership.set(false);
        assert_eq!(next(&mut events).await, "stopped");
        leadership.set(true);
        assert_eq!(next(&mut events).await, "started");
        assert_eq!(running.load(Ordering::SeqCst), 1);

        runner.shutdown_and_wait().await;
        assert_eq!(next(&mut events).await, "stopped");
        assert_eq!(running.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn leader_loops_outlive_the_runner_handle_until_shutdown() {
        let shutdown = CancellationToken::new();
        let runner = Runner::embedded(shutdown.clone());
        let (mut events, running) = reporting_loop(&runner);
        assert_eq!(next(&mut events).await, "started");
        drop(runner);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            running.load(Ordering::SeqCst),
            1,
            "still running without a handle"
        );
        shutdown.cancel();
        assert_eq!(next(&mut events).await, "stopped");
    }

    #[tokio::test]
    async fn local_loops_run_without_leadership_until_shutdown() {
        let runner = Runner::new(
            Arc::new(ManualLeadership::new(false)),
            CancellationToken::new(),
        );
        let (started, mut seen) = mpsc::unbounded_channel();
        let token = runner.shutdown_token();
        runner.local_loop("local", async move {
            let _ = started.send(());
            token.cancelled().await;
        });
        tokio::time::timeout(Duration::from_secs(5), seen.recv())
            .await
            .expect("the local loop started");
        runner.shutdown_and_wait().await;
    }

    #[tokio::test]
    async fn a_panicking_loop_does_not_stop_the_others() {
        let runner = Runner::embedded(CancellationToken::new());
        runner.leader_loop("panics", |_token| async { panic!("boom") });
        let (mut events, _running) = reporting_loop(&runner);
        assert_eq!(next(&mut events).await, "started");
        runner.shutdown_and_wait().await;
        assert_eq!(next(&mut events).await, "stopped");
    }
}
