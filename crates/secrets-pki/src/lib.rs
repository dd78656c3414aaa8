//! The `pki` secrets engine (Vault's pki): certificate authorities with several issuers per
//! mount, roles, issuance and signing, revocation and CRLs.
//!
//! Where it sits: the core (`crates/secrets`) mounts it for `sys/mounts` type `pki` at any
//! path and calls [`Engine::handle`] with paths relative to the mount.
//!
//! Scaffolding: the engine is being built (issue 12); until then every path is unknown.

use std::sync::Arc;

use async_trait::async_trait;
use secrets_sdk::{Engine, EngineConfig, EngineError, Request, Response};

/// Builds the engine for one `pki` mount.
pub fn factory(_config: EngineConfig) -> Result<Arc<dyn Engine>, EngineError> {
    Ok(Arc::new(PkiEngine))
}

#[derive(Debug)]
struct PkiEngine;

#[async_trait]
impl Engine for PkiEngine {
    async fn handle(&self, _request: Request) -> Result<Option<Response>, EngineError> {
        Ok(None)
    }
}
