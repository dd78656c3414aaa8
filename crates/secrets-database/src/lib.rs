//! The `database` secrets engine (Vault's `builtin/logical/database`): connections to
//! PostgreSQL, MySQL/MariaDB and Redis, dynamic roles whose credentials are real database users
//! under a lease, and static roles whose existing users' passwords the engine rotates.
//!
//! Where it sits: the core (`crates/secrets`) builds one engine per `database` mount through
//! [`factory`] with the mount's barrier-encrypted storage view; every path is relative to the
//! mount.

use std::sync::Arc;

use async_trait::async_trait;
use secrets_sdk::{Engine, EngineConfig, EngineError, Request, Response};

/// Builds a database engine for one mount.
pub fn factory(_config: EngineConfig) -> Result<Arc<dyn Engine>, EngineError> {
    Ok(Arc::new(DatabaseEngine))
}

/// One mount of the database engine.
#[derive(Debug)]
pub struct DatabaseEngine;

#[async_trait]
impl Engine for DatabaseEngine {
    async fn handle(&self, _request: Request) -> Result<Option<Response>, EngineError> {
        Err(EngineError::UnsupportedPath)
    }
}
