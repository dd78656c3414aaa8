//! Placement: the pure core of the scheduler (Nomad's `scheduler/`). Being written.
//!
//! `compute(snapshot, eval, ctx) -> Plan` reads a snapshot and produces a plan; it does no I/O,
//! reads no clock (the time comes in `ctx`) and draws randomness only from `ctx.seed`.

use crate::state::Snapshot;
use crate::structs::{Evaluation, Plan};

/// What a placement run gets besides the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementContext {
    /// Unix nanoseconds "now" (for reschedule delays and timestamps).
    pub now: i64,
    /// Seeds node shuffling and new allocation/evaluation IDs.
    pub seed: u64,
}

/// Processes one evaluation against a snapshot.
pub fn compute(snapshot: &Snapshot, eval: &Evaluation, ctx: &PlacementContext) -> Plan {
    let _ = (snapshot, ctx);
    Plan {
        eval: eval.clone(),
        ..Plan::default()
    }
}
