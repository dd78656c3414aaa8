//! The `kv` secrets engine, version 1 (placeholder: the engine is written next).

use std::sync::Arc;

use secrets_sdk::{Engine, EngineConfig, EngineError};

/// Builds a kv engine for one mount.
pub fn factory(_config: EngineConfig) -> Result<Arc<dyn Engine>, EngineError> {
    Err(EngineError::Internal("kv engine not built yet".to_owned()))
}
