//! This server's part in a cluster of scheduler servers over one shared store: whether it
//! leads, who else does, and the follower that keeps its snapshot current while it does not.
//!
//! Where it sits: `crate::start_tasks` runs [`follow_loop`] on every server and `tasks::lead`
//! opens a [`Term`] for each term of leadership; `forward.rs` asks [`Role::leading`] whether a
//! write is applied here or forwarded to the leader, whose address comes from
//! [`ClusterView`] (filled by `cairn`'s wiring from the cluster membership).
//!
//! Invariants:
//! - Exactly one of the follower and the writer publishes snapshots at a time: both hold the
//!   publisher lock while they do; a term sets `leading` before it takes the lock, and the
//!   follower lets go as soon as it sees `leading`, so a term starts promptly.
//! - `leading` is true from the start of a term (before its catch-up) to its end, so a command
//!   taken locally always finds a writer (now or after the catch-up).
//! - After a term ends the follower reloads from the store before following again (the
//!   writer's last snapshot may be ahead of what a new leader keeps).

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use storage::Revision;
use tokio::sync::{OwnedMutexGuard, watch};
use tokio_util::sync::CancellationToken;

use crate::State;

/// Who leads the cluster, as the membership knows it (absent: one server, always the leader).
#[derive(Clone)]
pub struct ClusterView {
    /// The leader's scheduler base URL (`http://10.0.0.1:4646`), or `None` while no leader is
    /// known. Called for each forwarded request; keep it cheap.
    pub leader_url: Arc<dyn Fn() -> Option<String> + Send + Sync>,
    /// Every server's scheduler address (`10.0.0.1:4646`), this one included
    /// (`/v1/status/peers`).
    pub peers: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
}

impl fmt::Debug for ClusterView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterView")
            .field("leader_url", &(self.leader_url)())
            .finish_non_exhaustive()
    }
}

impl ClusterView {
    /// The leader's address as Nomad's `/v1/status/leader` gives it (`ip:port`).
    pub(crate) fn leader_address(&self) -> Option<String> {
        (self.leader_url)().map(|url| address_of(&url))
    }
}

/// `http://host:port/` → `host:port`.
fn address_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// Whether this server leads, and what the follower last confirmed.
#[derive(Debug)]
pub(crate) struct Role {
    leading: watch::Sender<bool>,
    /// Held by whoever publishes snapshots: the writer's term or the follower.
    publisher: Arc<tokio::sync::Mutex<()>>,
    /// When the follower last knew its snapshot was up to date with the store.
    last_contact: Mutex<Option<Instant>>,
}

impl Default for Role {
    fn default() -> Role {
        Role {
            leading: watch::Sender::new(false),
            publisher: Arc::default(),
            last_contact: Mutex::new(None),
        }
    }
}

impl Role {
    /// Whether a term of leadership runs here (the writer runs or is about to).
    pub(crate) fn leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Waits up to `within` for a term to start here; whether one did.
    pub(crate) async fn wait_leading(&self, within: Duration) -> bool {
        let mut leading = self.leading.subscribe();
        tokio::time::timeout(within, leading.wait_for(|leading| *leading))
            .await
            .is_ok_and(|seen| seen.is_ok())
    }

    /// Starts a term: from now on commands are applied here. Waits for the follower to stop
    /// publishing.
    pub(crate) async fn begin_term(self: &Arc<Role>) -> Term {
        self.leading.send_replace(true);
        let publisher = Arc::clone(&self.publisher).lock_owned().await;
        Term {
            role: Arc::clone(self),
            _publisher: publisher,
        }
    }

    fn contact(&self) {
        *self
            .last_contact
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// How stale this server's answers may be, in ms (Nomad's `X-Nomad-LastContact`): 0 while
    /// it leads, else the time since the follower last knew it was up to date.
    pub(crate) fn last_contact_ms(&self) -> u64 {
        if self.leading() {
            return 0;
        }
        let last = *self
            .last_contact
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        last.map_or(u64::MAX, |at| {
            u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX)
        })
    }
}

/// One term of leadership; ends (and lets the follower resume) when dropped.
#[derive(Debug)]
pub(crate) struct Term {
    role: Arc<Role>,
    _publisher: OwnedMutexGuard<()>,
}

impl Drop for Term {
    fn drop(&mut self) {
        self.role.leading.send_replace(false);
    }
}

/// Follows the store whenever no term runs here, until `shutdown`. `opened_at`: the revision
/// the state was loaded at when the server started.
pub(crate) async fn follow_loop(state: State, opened_at: Revision, shutdown: CancellationToken) {
    let role = Arc::clone(state.role());
    let mut leading = role.leading.subscribe();
    let mut from = Some(opened_at);
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            seen = leading.wait_for(|leading| !*leading) => if seen.is_err() { return },
        }
        let _publisher = tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            guard = Arc::clone(&role.publisher).lock_owned() => guard,
        };
        if role.leading() {
            continue;
        }
        tracing::debug!("this server does not lead: following the scheduler state");
        let contact = || role.contact();
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            _ = leading.wait_for(|leading| *leading) => {}
            () = state.store().follow(from.take(), contact) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_address_is_the_urls_host_and_port() {
        assert_eq!(address_of("http://10.0.0.1:4646"), "10.0.0.1:4646");
        assert_eq!(address_of("http://127.0.0.1:4646/"), "127.0.0.1:4646");
        assert_eq!(address_of("https://[::1]:4646/x"), "[::1]:4646");
        assert_eq!(address_of("127.0.0.1:4646"), "127.0.0.1:4646");
    }

    #[test]
    fn last_contact_is_zero_while_leading_and_grows_while_following() {
        let role = Arc::new(Role::default());
        assert_eq!(role.last_contact_ms(), u64::MAX, "never in contact yet");
        role.contact();
        assert!(role.last_contact_ms() < 60_000);
        role.leading.send_replace(true);
        assert_eq!(role.last_contact_ms(), 0);
    }
}
