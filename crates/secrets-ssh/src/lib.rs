//! The `ssh` secrets engine (Vault's ssh): one-time passwords, dynamic keys and a CA signing
//! user and host certificates.
//!
//! Where it sits: the core (`crates/secrets`) mounts it for `sys/mounts` type `ssh` at any
//! path and calls [`Engine::handle`] with paths relative to the mount.
//!
//! Scaffolding: the engine is being built (issue 13); until then every path is unknown.

use std::sync::Arc;

use async_trait::async_trait;
use secrets_sdk::{Engine, EngineConfig, EngineError, Request, Response};

/// Builds the engine for one `ssh` mount.
pub fn factory(_config: EngineConfig) -> Result<Arc<dyn Engine>, EngineError> {
    Ok(Arc::new(SshEngine))
}

#[derive(Debug)]
struct SshEngine;

#[async_trait]
impl Engine for SshEngine {
    async fn handle(&self, _request: Request) -> Result<Option<Response>, EngineError> {
        Ok(None)
    }
}
