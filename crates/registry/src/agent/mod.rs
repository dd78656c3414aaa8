//! `/v1/agent/*` endpoints: this server as a Consul agent. Services and checks registered here
//! belong to this server's own node (`Config::node_name`) and go straight to the catalog
//! (there is no separate agent state to sync); HTTP and TCP checks are run, and TTL checks
//! timed, by `tasks/check_runner.rs`.
//!
//! - `node.rs`: `/v1/agent/self`, `/v1/agent/members`, and the registration agent writes start
//!   from.
//! - `checks.rs`: `/v1/agent/checks`, `/v1/agent/check/*`.
//! - `services.rs`: `/v1/agent/services`, `/v1/agent/service/*`.
//! - `maintenance.rs`: node and service maintenance mode.
//! - `metrics.rs`: `/v1/agent/metrics` (Prometheus text or go-metrics' JSON summary).
//! - `body.rs`: the agent's request bodies and their validation into check records.
//!
//! Invariant: the agent views hide what a Consul agent does not own: the leader-managed
//! `serfHealth` check and the server's own `consul` service.

mod body;
pub(crate) mod checks;
pub(crate) mod maintenance;
pub(crate) mod metrics;
pub(crate) mod node;
pub(crate) mod services;
