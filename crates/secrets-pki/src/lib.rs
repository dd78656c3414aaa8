//! The `pki` secrets engine (Vault's pki): certificate authorities with several issuers per
//! mount, roles, issuance and signing, revocation and CRLs, with real X.509 (rcgen builds,
//! x509-parser reads and verifies, aws-lc-rs makes keys).
//!
//! Where it sits: the core (`crates/secrets`) mounts it for `sys/mounts` type `pki` at any
//! path through [`factory`] and calls [`Engine::handle`](secrets_sdk::Engine::handle) with
//! paths relative to the mount; `engine.rs` lists every path. The model sits below the
//! handlers: `store.rs` (keys and records), `ca.rs` (issuers, keys, chains, serials),
//! `signing.rs` (issuers parsed once and cached per mount), `template.rs` (building
//! certificates, CSRs and CRLs), `cert.rs` (reading them), `keys.rs`,
//! `names.rs` (role name policy), `sans.rs` (SAN syntax), `validity.rs`, `render.rs`; the handlers are one file per
//! path family (`roles.rs`, `root.rs`, `intermediate.rs`, `issuers.rs`, `issue.rs`,
//! `fetch.rs`, `revoke.rs`, `crl.rs`, `tidy.rs`), importing the model and never each other
//! except for shared issuance steps (`root.rs` uses `issue.rs`'s).
//!
//! Invariants: storage only through the mount's view (keys under the mount, encrypted by the
//! core's barrier); private keys of issued certificates are never stored; every time comes
//! from the store's clock; bad input is a 400 in Vault's words, never a 5xx; the mount's
//! certificate TTLs default to and are capped by the mount's lease TTLs (its tuning, else the
//! system's 768h) as the core hands them in each request.

use std::sync::Arc;

use secrets_sdk::{Engine, EngineConfig, EngineError};

mod ca;
mod cert;
mod crl;
mod der;
mod engine;
mod fetch;
mod generate;
mod intermediate;
mod issue;
mod issuers;
mod keys;
mod mount;
mod names;
mod pem;
mod render;
mod revoke;
mod roles;
mod root;
mod sans;
mod signing;
mod store;
mod template;
mod tidy;
mod tidy_status;
mod validity;

pub use engine::PkiEngine;

/// Builds the engine for one `pki` mount. It takes no options.
pub fn factory(config: EngineConfig) -> Result<Arc<dyn Engine>, EngineError> {
    Ok(Arc::new(PkiEngine::new(mount::Mount::new(
        config.storage,
        config.clock,
    ))))
}
