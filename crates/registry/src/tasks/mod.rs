//! The registry's background loops, each `async fn run(state, token)`, started by
//! `registry::start_tasks` as leader loops of a `cluster::Runner` (one instance per cluster,
//! stopped when the token is cancelled): `ttl_reaper.rs` (session TTLs, over the timers
//! `State::open` rebuilt from storage) and `check_runner.rs` (TTL, HTTP and TCP health checks,
//! rebuilt from storage each time it starts). With elected leadership (several servers) also
//! `follow_sessions.rs`, a local loop on every server keeping the session timers equal to
//! what any server created, renewed or invalidated.
//!
//! Invariant: a loop writes only through `domain/` (the same transactions the handlers use); it
//! never imports a handler.

pub(crate) mod check_runner;
pub(crate) mod follow_sessions;
pub(crate) mod ttl_reaper;
