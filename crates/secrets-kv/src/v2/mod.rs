//! The kv engine, version 2 (Vault's versioned key-value backend): every write of a secret is
//! a new numbered version, kept with per-key metadata, up to a window of versions.
//!
//! Where it sits: built by [`crate::factory`] for a mount whose `version` option is `"2"`.
//! `engine.rs` routes each request to its path family: `config.rs` (`config`), `data.rs`
//! (`data/<key>`), `metadata.rs` (`metadata/<key>`), `versions.rs` (`delete/`, `undelete/`,
//! `destroy/`), `subkeys.rs` (`subkeys/<key>`); `input.rs` holds each path's fields and their
//! checks, `render.rs` the answers' shapes, `store.rs` every key and record, `upgrade.rs` the
//! one-time move of a version 1 mount's secrets.
//!
//! Upstream's behaviour kept: soft delete (`deletion_time` set, data kept, reads 404 with the
//! metadata in the body) and undelete; destroy (data gone for good, `destroyed: true`);
//! `max_versions` (key or mount, default 10) pruning the oldest versions' data;
//! check-and-set (`options.cas`, `cas_required`); `delete_version_after`; `custom_metadata`;
//! policy paths carry the `data/` and `metadata/` prefixes, as the ACL sees the full path.
//!
//! Invariants: engines reach storage only through their mount's view; every time comes from
//! the store's clock handed over in `EngineConfig`; bad input is a 400, never a 5xx.

mod config;
mod data;
mod engine;
mod input;
mod metadata;
mod mount;
mod render;
mod store;
mod subkeys;
mod upgrade;
mod versions;

#[cfg(test)]
mod tests;

pub use engine::KvV2Engine;
