//! The heartbeat monitor (Nomad's `heartbeat.go`): a node that misses its heartbeat TTL plus
//! the grace period is marked down, which makes its allocations lost and replaced.
//!
//! Deadlines live in memory only (heartbeats are not written to storage); when the monitor
//! starts (each time this server gains leadership) every node that is not down gets a fresh
//! deadline (with several servers at least `Config::failover_heartbeat_ttl`, 5 min, as
//! Nomad's), as Nomad's new leader does, so a restart or a change of leader never marks a
//! healthy node down and never forgets a dead one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::State;
use crate::state::Command;
use crate::structs::NODE_STATUS_DOWN;

/// When each live node must next be heard from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Heartbeats {
    deadlines: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Heartbeats {
    /// The node was heard from: it must be heard from again within `ttl` (plus grace).
    pub(crate) fn reset(&self, node_id: &str, within: Duration) {
        if let Ok(mut deadlines) = self.deadlines.lock() {
            deadlines.insert(node_id.to_owned(), Instant::now() + within);
        }
    }

    /// Gives each of `node_ids` a deadline at least `within` from now (the start of a
    /// monitor). Deadlines already set stay (a node may register while the term starts, before
    /// its record is in the snapshot the monitor read); a later one wins.
    fn restart<'a>(&self, node_ids: impl Iterator<Item = &'a str>, within: Duration) {
        let due = Instant::now() + within;
        if let Ok(mut deadlines) = self.deadlines.lock() {
            for id in node_ids {
                let deadline = deadlines.entry(id.to_owned()).or_insert(due);
                *deadline = (*deadline).max(due);
            }
        }
    }

    fn take_expired(&self) -> Vec<String> {
        let now = Instant::now();
        let Ok(mut deadlines) = self.deadlines.lock() else {
            return Vec::new();
        };
        let expired: Vec<String> = deadlines
            .iter()
            .filter(|(_, deadline)| **deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            deadlines.remove(id);
        }
        expired
    }
}

/// Marks nodes down as their deadlines pass, until `term` ends. At start every node that is
/// not down gets a fresh deadline: the TTL plus grace, or with several servers at least the
/// failover TTL (a failover must not mark every node down while agents find the new leader).
pub(crate) async fn run(state: State, term: CancellationToken) {
    let config = state.config();
    let mut within = state.heartbeat_ttl() + config.heartbeat_grace;
    if config.cluster.is_some() {
        within = within.max(config.failover_heartbeat_ttl);
    }
    let snapshot = state.store().snapshot();
    let live = snapshot
        .nodes
        .values()
        .filter(|node| node.status != NODE_STATUS_DOWN)
        .map(|node| node.id.as_str());
    state.heartbeats().restart(live, within);
    let tick = (state.config().heartbeat_grace / 4)
        .clamp(Duration::from_millis(20), Duration::from_secs(1));
    loop {
        tokio::select! {
            biased;
            () = term.cancelled() => return,
            () = tokio::time::sleep(tick) => {}
        }
        for node_id in state.heartbeats().take_expired() {
            tracing::info!(node = %node_id, "node missed its heartbeat; marking it down");
            let command = Command::SetNodeStatus {
                node_id: node_id.clone(),
                status: NODE_STATUS_DOWN.to_owned(),
            };
            if let Err(err) = state.store().apply(command).await {
                tracing::warn!(node = %node_id, error = %err, "cannot mark a node down");
            }
        }
    }
}
