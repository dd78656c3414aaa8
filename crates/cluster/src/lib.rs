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
//! Where it sits: below the service crates and `cairn`; it knows nothing of any service.
//!
//! Invariants:
//! - a leader loop runs only while this server leads, at most one instance at a time: it is
//!   started (with a fresh token) each time leadership is gained, and its token is cancelled
//!   when leadership is lost or the server shuts down; the runner waits for it to return before
//!   it can start again. A loop therefore rebuilds what it needs from storage when it starts.
//! - every task the runner starts is joined by [`Runner::shutdown_and_wait`]; nothing outlives it.
//! - a loop that panics is logged and does not take the runner, or other loops, down.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Whether this server is the one that runs cluster-wide work.
pub trait Leadership: Send + Sync + fmt::Debug + 'static {
    /// Leadership as it changes: `true` while this server leads. The receiver sees every
    /// change; it closes only when the leadership itself is gone.
    fn watch(&self) -> watch::Receiver<bool>;
}

/// The embedded store's leadership: one server, always the leader.
#[derive(Debug)]
pub struct AlwaysLeader {
    leading: watch::Sender<bool>,
}

impl AlwaysLeader {
    pub fn new() -> AlwaysLeader {
        AlwaysLeader {
            leading: watch::Sender::new(true),
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
        *self.inner.leadership.watch().borrow()
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
