//! The registry's background loops, each `async fn run(state, shutdown)`, rebuilt from
//! storage at start: `ttl_reaper.rs` (session TTLs) and `check_runner.rs` (TTL, HTTP and TCP
//! health checks).
//!
//! Invariant: a loop writes only through `domain/` (the same transactions the handlers use); it
//! never imports a handler.

pub(crate) mod check_runner;
pub(crate) mod ttl_reaper;
