//! The heartbeat monitor (Nomad's `heartbeat.go`): a node that misses its heartbeat TTL plus
//! the grace period is marked down, which makes its allocations lost and replaced.
//!
//! Deadlines live in memory only (heartbeats are not written to storage); at start every node
//! that is not down gets a fresh deadline, as Nomad's new leader does, so a restart never marks
//! a healthy node down and never forgets a dead one.

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
pub struct Heartbeats {
    deadlines: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Heartbeats {
    /// The node was heard from: it must be heard from again within `ttl` (plus grace).
    pub fn reset(&self, node_id: &str, within: Duration) {
        if let Ok(mut deadlines) = self.deadlines.lock() {
            deadlines.insert(node_id.to_owned(), Instant::now() + within);
        }
    }

    /// Whether the monitor is tracking the node.
    pub fn tracks(&self, node_id: &str) -> bool {
        self.deadlines
            .lock()
            .is_ok_and(|deadlines| deadlines.contains_key(node_id))
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

pub(crate) async fn run(state: State, shutdown: CancellationToken) {
    let within = state.heartbeat_ttl() + state.config().heartbeat_grace;
    for node in state.store().snapshot().nodes.values() {
        if node.status != NODE_STATUS_DOWN {
            state.heartbeats().reset(&node.id, within);
        }
    }
    let tick = (state.config().heartbeat_grace / 4)
        .clamp(Duration::from_millis(20), Duration::from_secs(1));
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
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
