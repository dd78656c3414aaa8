//! The scheduler's background loops, each `async fn run(state, shutdown)`, rebuilt from
//! storage alone at start: the state writer (`state::run_writer`), the scheduling workers
//! (`worker.rs`) and the heartbeat monitor (`heartbeat.rs`).

pub(crate) mod heartbeat;
pub(crate) mod worker;
