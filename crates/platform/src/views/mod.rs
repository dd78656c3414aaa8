//! How each resource renders as a JSON:API resource object: one file per resource type, each a
//! set of plain functions from stored records (and the caller's access, where permissions
//! show) to `jsonapi::Resource`.
//!
//! Where it sits: between the handlers and `store/`. Every handler that answers with a
//! resource, or `include`s one of another family, renders it from here, so no handler module
//! imports another for its view: `teams.rs` and `memberships.rs` include each other's
//! resources, and so do `runs.rs`, `configuration_versions.rs` and `workspaces/`, through this
//! layer. It imports `store/`, `auth.rs` (the access predicates that fill `permissions`),
//! `run_state.rs` and `ids.rs`, never a handler.
//!
//! Invariants: a resource renders the same wherever it appears (create, read, list and
//! `included`; go-tfe compares them deeply); rendering reads no storage, except
//! [`teams::TeamView::load`], which gathers what a team's view needs first.

pub(crate) mod configuration_versions;
pub(crate) mod memberships;
pub(crate) mod oauth_clients;
pub(crate) mod organizations;
pub(crate) mod policy_versions;
pub(crate) mod registry_modules;
pub(crate) mod runs;
pub(crate) mod site_settings;
pub(crate) mod teams;
pub(crate) mod tokens;
pub(crate) mod users;
pub(crate) mod workspaces;
