//! The scheduler's domain and wire types (Nomad's `nomad/structs`): jobs, task groups and
//! tasks, evaluations and plans, nodes, allocations and the resources they carry.
//!
//! Where it sits: below both sides of the scheduler. The `scheduler` server stores, serves
//! and places these types; the `scheduler-agent` client registers a [`Node`], pulls its
//! [`Allocation`]s and reports [`AllocClientUpdate`]s with them, without linking the server
//! (no HTTP framework, no HCL, no persistent collections here).
//!
//! One set of types serves storage, the HTTP API and placement: field names are Nomad's
//! PascalCase, durations are integer nanoseconds, and a job is stored in its canonical form
//! (`scheduler-jobspec`'s `canonicalize` filled every default before it was deserialized
//! here), so the scheduler never guesses a default.
//!
//! Invariants:
//! - Jobs, task groups and tasks reject unknown fields (a typo in a job is a 400, not a silently
//!   dropped setting); blocks the scheduler only carries along (services, templates, volumes...)
//!   stay as JSON values.
//! - Every type here is plain data: no I/O, no clocks.

mod alloc;
mod eval;
mod job;
mod node;
mod resources;
mod services;

pub use alloc::*;
pub use eval::*;
pub use job::*;
pub use node::*;
pub use resources::*;
pub use services::*;

/// Nanoseconds, the unit of every duration on the wire.
pub type Nanos = i64;

/// One second in nanoseconds.
pub const SECOND: Nanos = 1_000_000_000;

/// The namespace every object without one lives in.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The node pool of nodes and jobs without one.
pub const DEFAULT_NODE_POOL: &str = "default";

/// The pool that matches every node (jobs only).
pub const ALL_NODE_POOL: &str = "all";
