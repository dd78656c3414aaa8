//! The `kv` secrets engine (Vault's `vault-plugin-secrets-kv`), in both of its versions:
//!
//! - version 1 ([`v1`], the passthrough backend): one JSON object per path, written over in
//!   place;
//! - version 2 ([`v2`], the versioned backend): every write is a new numbered version, with
//!   per-key metadata, soft delete, undelete, destroy, check-and-set and the `data/`,
//!   `metadata/`, `delete/`, `undelete/`, `destroy/`, `subkeys/` and `config` paths.
//!
//! Where it sits: the core (`crates/secrets`) builds one engine per mount through [`factory`],
//! handing it the mount's barrier-encrypted storage view, its `options` and the store's clock;
//! it then calls [`secrets_sdk::Engine::handle`] with paths relative to the mount.
//!
//! The mount option `version` picks the backend: absent, `""` or `"1"` is version 1, `"2"` is
//! version 2; anything else is refused with a 400 when mounting. A version 1 mount tuned to
//! version 2 is upgraded in place the first time the version 2 engine serves a request (its
//! secrets become version 1 of each key), as Vault does.
//!
//! Invariants: an engine reaches storage only through its view; version 2 keeps every record
//! of its own under one prefix ([`v2`]'s `store.rs`), so the two layouts never overlap.

use std::sync::Arc;

use secrets_sdk::{Engine, EngineConfig, EngineError};

pub mod v1;
pub mod v2;

/// Builds a kv engine for one mount: version 1 or 2 after the mount's `version` option.
pub fn factory(config: EngineConfig) -> Result<Arc<dyn Engine>, EngineError> {
    match config.options.get("version").map(String::as_str) {
        None | Some("" | "1") => Ok(Arc::new(v1::KvEngine::new(config.storage))),
        Some("2") => Ok(Arc::new(v2::KvV2Engine::new(config.storage, config.clock))),
        Some(other) => Err(EngineError::BadRequest(format!(
            "invalid version provided: {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use secrets_sdk::testing::MemEngineStorage;

    use super::*;

    fn config(version: Option<&str>) -> EngineConfig {
        EngineConfig {
            mount_point: "kv/".to_owned(),
            storage: Arc::new(MemEngineStorage::default()),
            options: version
                .map(|v| BTreeMap::from([("version".to_owned(), v.to_owned())]))
                .unwrap_or_default(),
            clock: Arc::new(stdx::clock::SystemClock),
            passwords: Default::default(),
        }
    }

    #[test]
    fn version_option_picks_the_backend_and_refuses_others() {
        for version in [None, Some(""), Some("1")] {
            let engine = factory(config(version)).unwrap();
            assert!(format!("{engine:?}").starts_with("KvEngine"), "{version:?}");
        }
        let engine = factory(config(Some("2"))).unwrap();
        assert!(format!("{engine:?}").starts_with("KvV2Engine"));
        assert_eq!(
            factory(config(Some("3"))).unwrap_err(),
            EngineError::BadRequest("invalid version provided: 3".to_owned())
        );
    }
}
