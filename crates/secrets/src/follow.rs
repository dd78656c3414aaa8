//! Following the shared store: on several servers (storage on etcd), what one server changes
//! reaches every other server's memory through the store's watch.
//!
//! Where it sits: a local loop (every server, leader or not) registered by `start_tasks` when
//! leadership is elected (`cluster::Leadership::is_elected`); with the embedded store a single
//! server makes every change itself and nothing needs following. It watches the `secrets/`
//! prefix and, while the barrier is unsealed:
//! - the keyring (`barrier::KEYRING_KEY`, a `sys/rotate` elsewhere) → re-read and installed,
//!   so this server encrypts with the newest term too (decrypting an unknown term already
//!   re-reads the keyring, `barrier.rs`);
//! - a token entry (`sys/token/id/<hash>`: created, used, renewed, revoked) → dropped from
//!   the token cache, so the next lookup reads the store;
//! - an ACL policy (`sys/policy/`) → the policies reloaded;
//! - the mount tables (`core/mounts`, `core/auth`) → reloaded, backends rebuilt;
//! - on the leader only, whose lease loop expires them: a lease (`sys/expire/id/`) or a token
//!   entry another server wrote → its timer set from the stored deadline (or dropped), so a
//!   lease issued or renewed on a follower expires on time (a new leader's loop rebuilds every
//!   timer from the store when it starts).
//!
//! Invariants: changes are applied in revision order, the events that are ready at once as
//! one batch (a reload per batch, not per event); when the watch fails (history compacted,
//! store unreachable), everything above is refreshed from the store and the watch starts again
//! from the revision read before the refresh, so no change is missed; nothing here writes.

use std::time::Duration;

use futures::{FutureExt, StreamExt};
use storage::{Event, KeyRange};
use tokio_util::sync::CancellationToken;

use crate::barrier::{DATA_PREFIX, KEYRING_KEY};
use crate::{State, leases, mounts, policy, tokens};

/// What a batch of events asks for.
#[derive(Debug, Default)]
struct Changes {
    keyring: bool,
    policies: bool,
    mounts: bool,
    tokens: Vec<String>,
    leases: Vec<String>,
}

impl Changes {
    fn note(&mut self, event: &Event) {
        let Ok(key) = std::str::from_utf8(&event.key) else {
            return;
        };
        if key == KEYRING_KEY {
            self.keyring = true;
            return;
        }
        let Some(logical) = key.strip_prefix(DATA_PREFIX) else {
            return;
        };
        if let Some(hash) = logical.strip_prefix(tokens::store::ID_PREFIX) {
            self.tokens.push(hash.to_owned());
        } else if let Some(lease_id) = logical.strip_prefix(leases::ID_PREFIX) {
            self.leases.push(lease_id.to_owned());
        } else if logical.starts_with(policy::ACL_PREFIX) {
            self.policies = true;
        } else if logical == mounts::MOUNTS_KEY || logical == mounts::AUTH_KEY {
            self.mounts = true;
        }
    }

    /// Everything, after the watch lost its place.
    fn all() -> Changes {
        Changes {
            keyring: true,
            policies: true,
            mounts: true,
            tokens: Vec::new(),
            leases: Vec::new(),
        }
    }
}

/// The loop: follows the store until `shutdown`.
pub(crate) async fn run(state: State, shutdown: CancellationToken) {
    let mut refresh = false;
    loop {
        let followed = follow(&state, refresh);
        let ended = tokio::select! {
            () = shutdown.cancelled() => return,
            ended = followed => ended,
        };
        tracing::warn!(error = %ended, "following the shared store: refreshing and starting over");
        refresh = true;
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

/// Watches from the current revision (after a refresh when `refresh`); returns why it stopped.
async fn follow(state: &State, refresh: bool) -> String {
    let storage = state.barrier().storage().clone();
    let from = match storage.revision().await {
        Ok(revision) => revision,
        Err(err) => return err.to_string(),
    };
    if refresh {
        state.tokens().forget_all();
        apply(state, Changes::all()).await;
    }
    let mut watch = match storage
        .watch(KeyRange::prefix(crate::store::PREFIX), from)
        .await
    {
        Ok(watch) => watch,
        Err(err) => return err.to_string(),
    };
    loop {
        let mut changes = Changes::default();
        match watch.next().await {
            None => return "the watch ended".to_owned(),
            Some(Err(err)) => return err.to_string(),
            Some(Ok(event)) => changes.note(&event),
        }
        // Take what is ready too, so one reload serves a burst of changes.
        while let Some(ready) = watch.next().now_or_never() {
            match ready {
                None => return "the watch ended".to_owned(),
                Some(Err(err)) => return err.to_string(),
                Some(Ok(event)) => changes.note(&event),
            }
        }
        apply(state, changes).await;
    }
}

async fn apply(state: &State, changes: Changes) {
    for hash in &changes.tokens {
        state.tokens().forget(hash);
    }
    // Sealed: the next unseal loads everything from the store anyway.
    if !state.seal().is_unsealed() {
        return;
    }
    if changes.keyring
        && let Err(err) = state.barrier().reload_keyring_from_storage().await
    {
        tracing::warn!(error = %err, "re-reading the keyring another server changed");
    }
    if changes.policies
        && let Err(err) = state.policies().load(state).await
    {
        tracing::warn!(error = %err, "reloading the policies another server changed");
    }
    if changes.mounts
        && let Err(err) = state.mounts().load(state).await
    {
        tracing::warn!(error = %err, "reloading the mounts another server changed");
    }
    if !is_leader(state) {
        return;
    }
    for hash in &changes.tokens {
        if let Err(err) = state.tokens().follow_stored(state, hash).await {
            tracing::warn!(error = %err, "indexing a token another server wrote");
        }
    }
    for lease_id in &changes.leases {
        if let Err(err) = state.leases().follow_stored(state, lease_id).await {
            tracing::warn!(error = %err, "timing a lease another server wrote");
        }
    }
}

fn is_leader(state: &State) -> bool {
    state
        .config()
        .cluster
        .as_ref()
        .is_some_and(|cluster| cluster.is_leader())
}
