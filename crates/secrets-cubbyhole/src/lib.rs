//! The `cubbyhole` secrets engine (Vault's built-in cubbyhole backend): a private key/value
//! space per token. A token sees only its own cubbyhole, and the cubbyhole goes when its token
//! is revoked or expires.
//!
//! Where it sits: the core (`crates/secrets`) mounts one instance at `cubbyhole/` in every
//! store (it cannot be unmounted, moved or mounted twice) and calls [`Engine::handle`] with
//! paths relative to the mount and the caller's [`RequestAuth::token_hash`]; it calls
//! [`Engine::token_revoked`] for every token it revokes. Response wrapping (`crates/secrets`,
//! `wrapping.rs`) keeps a wrapped response in the wrapping token's own cubbyhole, at
//! `response` and `wrapinfo`, through this same engine.
//!
//! - write (`POST`/`PUT`) stores the request data as-is (a JSON object) → 204; no data → 400
//!   `missing data fields`; the mount root → 400 `missing path`; a path ending in `/` → 400.
//! - read → `data` exactly as stored; missing → `None` (404); the mount root → 400.
//! - delete → 204 whether or not it existed.
//! - list (the path is `""` or ends in `/`) → the token's sorted immediate children,
//!   sub-directories ending in `/`; none → `None` (404).
//! - existence check: a write is `create` when nothing is stored at the path, else `update`.
//!
//! Storage keys: `<token hash>/<path>` (the SHA-256 of the token id, never the id), the value
//! the JSON of the data.
//!
//! Invariants: every key this engine reads or writes starts with the calling token's hash and
//! a `/`, so one token can never reach another's data; a request without a token hash is
//! refused (the core never sends one: the mount is not unauthenticated).

use std::sync::Arc;

use async_trait::async_trait;
use secrets_sdk::{
    Data, Engine, EngineConfig, EngineError, EngineStorage, Operation, Request, RequestAuth,
    Response,
};

/// Builds the cubbyhole engine for the `cubbyhole/` mount. It takes no options.
pub fn factory(config: EngineConfig) -> Result<Arc<dyn Engine>, EngineError> {
    Ok(Arc::new(CubbyholeEngine {
        storage: config.storage,
    }))
}

/// The per-token storage engine.
#[derive(Debug)]
pub struct CubbyholeEngine {
    storage: Arc<dyn EngineStorage>,
}

/// The storage prefix of the calling token's cubbyhole: `<token hash>/`.
fn token_prefix(auth: Option<&RequestAuth>) -> Result<String, EngineError> {
    match auth.map(|auth| auth.token_hash.as_str()) {
        Some(hash) if valid_hash(hash) => Ok(format!("{hash}/")),
        _ => Err(EngineError::Internal("client token empty".to_owned())),
    }
}

/// A token hash the engine accepts as a key segment: non-empty, one segment.
fn valid_hash(hash: &str) -> bool {
    !hash.is_empty() && !hash.contains('/')
}

impl CubbyholeEngine {
    async fn read(&self, prefix: &str, path: &str) -> Result<Option<Response>, EngineError> {
        if path.is_empty() {
            return Err(EngineError::BadRequest("missing path".to_owned()));
        }
        let Some(bytes) = self.storage.get(&format!("{prefix}{path}")).await? else {
            return Ok(None);
        };
        let data: Data = serde_json::from_slice(&bytes).map_err(|err| {
            EngineError::Internal(format!("json decoding failed for {path:?}: {err}"))
        })?;
        Ok(Some(Response::data(data)))
    }

    async fn write(
        &self,
        prefix: &str,
        path: &str,
        data: &Data,
    ) -> Result<Option<Response>, EngineError> {
        if data.is_empty() {
            return Err(EngineError::BadRequest("missing data fields".to_owned()));
        }
        if path.is_empty() {
            return Err(EngineError::BadRequest("missing path".to_owned()));
        }
        if path.ends_with('/') {
            return Err(EngineError::BadRequest(
                "cannot write to a path ending in '/'".to_owned(),
            ));
        }
        let bytes = serde_json::to_vec(data)
            .map_err(|err| EngineError::Internal(format!("json encoding failed: {err}")))?;
        self.storage.put(&format!("{prefix}{path}"), &bytes).await?;
        Ok(None)
    }

    async fn list(&self, prefix: &str, path: &str) -> Result<Option<Response>, EngineError> {
        let keys = self.storage.list(&format!("{prefix}{path}")).await?;
        if keys.is_empty() {
            return Ok(None);
        }
        Ok(Some(Response::list(keys)))
    }

    /// Deletes every key under `prefix`, depth first.
    async fn clear(&self, prefix: &str) -> Result<(), EngineError> {
        let mut pending = vec![prefix.to_owned()];
        while let Some(dir) = pending.pop() {
            for child in self.storage.list(&dir).await? {
                let key = format!("{dir}{child}");
                if child.ends_with('/') {
                    pending.push(key);
                } else {
                    self.storage.delete(&key).await?;
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Engine for CubbyholeEngine {
    async fn handle(&self, request: Request) -> Result<Option<Response>, EngineError> {
        let prefix = token_prefix(request.auth.as_deref())?;
        let path = request.path.as_str();
        match request.operation {
            Operation::Read => self.read(&prefix, path).await,
            Operation::Create | Operation::Update => self.write(&prefix, path, &request.data).await,
            Operation::Delete => {
                self.storage.delete(&format!("{prefix}{path}")).await?;
                Ok(None)
            }
            Operation::List => self.list(&prefix, path).await,
            Operation::Patch => Err(EngineError::UnsupportedOperation),
        }
    }

    async fn exists(&self, request: &Request) -> Result<Option<bool>, EngineError> {
        let prefix = token_prefix(request.auth.as_deref())?;
        let key = format!("{prefix}{}", request.path);
        Ok(Some(self.storage.get(&key).await?.is_some()))
    }

    async fn token_revoked(&self, token_hash: &str) -> Result<(), EngineError> {
        if !valid_hash(token_hash) {
            return Ok(());
        }
        self.clear(&format!("{token_hash}/")).await
    }
}

#[cfg(test)]
mod tests {
    use secrets_sdk::testing::{MemEngineStorage, engine_with_mem_storage};
    use serde_json::{Value, json};

    use super::*;

    fn engine() -> (Arc<dyn Engine>, Arc<MemEngineStorage>) {
        engine_with_mem_storage(factory, "cubbyhole/").unwrap()
    }

    fn request(token_hash: &str, op: Operation, path: &str, body: Value) -> Request {
        let mut request =
            Request::new(op, path).with_data(body.as_object().cloned().unwrap_or_default());
        request.auth = Some(std::sync::Arc::new(RequestAuth {
            token_hash: token_hash.to_owned(),
            ..RequestAuth::default()
        }));
        request
    }

    async fn call(
        engine: &Arc<dyn Engine>,
        token_hash: &str,
        op: Operation,
        path: &str,
        body: Value,
    ) -> Result<Option<Response>, EngineError> {
        engine.handle(request(token_hash, op, path, body)).await
    }

    async fn read(engine: &Arc<dyn Engine>, token_hash: &str, path: &str) -> Option<Value> {
        call(engine, token_hash, Operation::Read, path, json!({}))
            .await
            .unwrap()
            .map(|response| Value::Object(response.data.unwrap_or_default()))
    }

    #[tokio::test]
    async fn write_then_read_returns_the_data_under_the_tokens_hash() {
        let (engine, storage) = engine();
        let body = json!({"password": "hunter2", "nested": {"a": [1, null]}});
        assert_eq!(
            call(&engine, "aa", Operation::Create, "app/db", body.clone()).await,
            Ok(None)
        );
        assert_eq!(storage.keys(), vec!["aa/app/db"]);
        assert_eq!(read(&engine, "aa", "app/db").await, Some(body));
    }

    #[tokio::test]
    async fn a_token_sees_only_its_own_cubbyhole() {
        let (engine, _) = engine();
        call(&engine, "aa", Operation::Create, "x", json!({"v": 1}))
            .await
            .unwrap();
        assert_eq!(read(&engine, "bb", "x").await, None);
        assert_eq!(
            call(&engine, "bb", Operation::List, "", json!({})).await,
            Ok(None)
        );
        call(&engine, "bb", Operation::Delete, "x", json!({}))
            .await
            .unwrap();
        assert_eq!(read(&engine, "aa", "x").await, Some(json!({"v": 1})));
    }

    #[tokio::test]
    async fn list_returns_sorted_children_with_directories() {
        let (engine, _) = engine();
        for path in ["b", "a/x", "a/y/z", "c"] {
            call(&engine, "aa", Operation::Create, path, json!({"v": 1}))
                .await
                .unwrap();
        }
        let keys = |response: Option<Response>| response.unwrap().data.unwrap()["keys"].clone();
        let root = call(&engine, "aa", Operation::List, "", json!({}))
            .await
            .unwrap();
        assert_eq!(keys(root), json!(["a/", "b", "c"]));
        let sub = call(&engine, "aa", Operation::List, "a/", json!({}))
            .await
            .unwrap();
        assert_eq!(keys(sub), json!(["x", "y/"]));
        assert_eq!(
            call(&engine, "aa", Operation::List, "none/", json!({})).await,
            Ok(None)
        );
    }

    #[tokio::test]
    async fn delete_removes_the_key_and_is_idempotent() {
        let (engine, storage) = engine();
        call(&engine, "aa", Operation::Create, "x", json!({"v": 1}))
            .await
            .unwrap();
        for _ in 0..2 {
            assert_eq!(
                call(&engine, "aa", Operation::Delete, "x", json!({})).await,
                Ok(None)
            );
        }
        assert!(storage.keys().is_empty());
    }

    #[tokio::test]
    async fn token_revoked_clears_that_tokens_cubbyhole_only() {
        let (engine, storage) = engine();
        for (hash, path) in [("aa", "x"), ("aa", "d/e/f"), ("ab", "x"), ("bb", "x")] {
            call(&engine, hash, Operation::Create, path, json!({"v": 1}))
                .await
                .unwrap();
        }
        engine.token_revoked("aa").await.unwrap();
        assert_eq!(storage.keys(), vec!["ab/x", "bb/x"]);
        engine.token_revoked("").await.unwrap();
        assert_eq!(storage.keys(), vec!["ab/x", "bb/x"]);
    }

    #[tokio::test]
    async fn bad_writes_and_reads_are_400() {
        let (engine, _) = engine();
        let cases = [
            (Operation::Create, "x", json!({}), "missing data fields"),
            (Operation::Create, "", json!({"v": 1}), "missing path"),
            (
                Operation::Update,
                "dir/",
                json!({"v": 1}),
                "cannot write to a path ending in '/'",
            ),
            (Operation::Read, "", json!({}), "missing path"),
        ];
        for (op, path, body, message) in cases {
            assert_eq!(
                call(&engine, "aa", op, path, body).await,
                Err(EngineError::BadRequest(message.to_owned())),
                "{op:?} {path:?}"
            );
        }
        assert_eq!(
            call(&engine, "aa", Operation::Patch, "x", json!({"v": 1})).await,
            Err(EngineError::UnsupportedOperation)
        );
    }

    #[tokio::test]
    async fn requests_without_a_token_hash_are_refused() {
        let (engine, storage) = engine();
        for hash in ["", "a/b"] {
            let result = call(&engine, hash, Operation::Create, "x", json!({"v": 1})).await;
            assert_eq!(
                result,
                Err(EngineError::Internal("client token empty".to_owned()))
            );
        }
        let anonymous = Request::new(Operation::Read, "x");
        assert!(engine.handle(anonymous).await.is_err());
        assert!(storage.keys().is_empty());
    }

    #[tokio::test]
    async fn existence_check_reports_the_tokens_own_key() {
        let (engine, _) = engine();
        call(&engine, "aa", Operation::Create, "x", json!({"v": 1}))
            .await
            .unwrap();
        let exists = |hash: &str| request(hash, Operation::Update, "x", json!({"v": 2}));
        assert_eq!(engine.exists(&exists("aa")).await, Ok(Some(true)));
        assert_eq!(engine.exists(&exists("bb")).await, Ok(Some(false)));
    }
}
