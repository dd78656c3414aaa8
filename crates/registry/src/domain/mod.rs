//! The registry's model and its transactions, below the HTTP layer: what a write does to the
//! stored records, whoever asks for it (a handler, a background loop, `State::open`).
//!
//! - `catalog.rs`: node, service and check registration and deregistration, this server's own
//!   registration, the instances of a service.
//! - `checks.rs`: check status writes (client updates, probe results) and TTL expiry.
//! - `sessions.rs`: session create and invalidation (Behavior, lock-delays).
//! - `session_timers.rs`: the in-memory TTL deadlines of sessions, their renewal, checkpoints and
//!   rebuild from storage.
//! - `kv.rs`: KV puts, lock acquire and release, deletes.
//! - `acl.rs`: ACL policy and token writes and the bootstrap of the built-in ones.
//!
//! Where it sits: above `store/` (keys and records), below the handlers and `tasks/`, which
//! both call it. It takes already decoded and authorized input, and never renders HTTP.
//!
//! Invariants: a write that changes several records is one storage transaction guarded by
//! compare-and-swap on what it read, retried at most [`MAX_ATTEMPTS`] times, then
//! `Error::Contention`; nothing holds a lock across I/O.

pub(crate) mod acl;
pub(crate) mod catalog;
pub(crate) mod checks;
pub(crate) mod kv;
pub(crate) mod session_timers;
pub(crate) mod sessions;

/// How often a compare-and-swap write is retried before giving up with `Error::Contention`.
pub(crate) const MAX_ATTEMPTS: usize = 64;
