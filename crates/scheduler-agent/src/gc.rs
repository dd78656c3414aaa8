//! Garbage collection of terminal allocations on the client, on the server's
//! `/v1/client/allocation/:id/gc` and `/v1/client/gc` calls (Nomad's `Allocations.GarbageCollect`
//! and `GarbageCollectAll`): an allocation whose runner has finished and whose state is
//! terminal loses its state file and its allocation directory (logs, task directories).
//!
//! Invariants: a live allocation (its runner still running, tasks possibly alive) is never
//! collected: asking for it is a 400 with upstream's text; the alloc watcher keeps its own
//! record of a finished runner, so a collected allocation the server still lists is not run
//! again (and after an agent restart a terminal allocation without state is never started).

use scheduler_structs::{ALLOC_CLIENT_COMPLETE, ALLOC_CLIENT_FAILED, ALLOC_CLIENT_LOST};

use crate::Shared;
use crate::state::is_safe_component;
use crate::tunnel::Refusal;

/// Upstream's answer for an allocation that cannot be collected.
const NOT_ELIGIBLE: &str = "No such allocation on client, or allocation not eligible for GC";

/// Whether the allocation is finished on this client and may be collected.
fn collectable(shared: &Shared, alloc_id: &str) -> bool {
    if shared.controls.is_live(alloc_id) {
        return false;
    }
    shared.state.load_alloc(alloc_id).is_some_and(|record| {
        matches!(
            record.client_status.as_str(),
            ALLOC_CLIENT_COMPLETE | ALLOC_CLIENT_FAILED | ALLOC_CLIENT_LOST
        )
    })
}

/// Collects one allocation.
pub(crate) fn collect(shared: &Shared, alloc_id: &str) -> Result<(), Refusal> {
    if !is_safe_component(alloc_id) || shared.state.load_alloc(alloc_id).is_none() {
        return Err(Refusal::unknown_allocation(alloc_id));
    }
    if !collectable(shared, alloc_id) {
        return Err(Refusal::bad_request(NOT_ELIGIBLE));
    }
    tracing::info!(
        alloc_id,
        "garbage-collecting allocation (forced collection)"
    );
    shared.state.remove_alloc(alloc_id);
    Ok(())
}

/// Collects every terminal allocation of the node; returns how many.
pub(crate) fn collect_all(shared: &Shared) -> usize {
    let mut collected = 0;
    for alloc_id in shared.state.alloc_ids() {
        if collectable(shared, &alloc_id) {
            tracing::info!(
                alloc_id,
                "garbage-collecting allocation (forced full node collection)"
            );
            shared.state.remove_alloc(&alloc_id);
            collected += 1;
        }
    }
    collected
}
