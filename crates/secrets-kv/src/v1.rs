//! The kv engine, version 1 (Vault's passthrough backend): read, write, delete and list JSON
//! objects at any path under its mount.
//!
//! Where it sits: built by [`crate::factory`] for a mount whose `version` option is absent,
//! `""` or `"1"`; the core calls [`Engine::handle`] with paths relative to the mount.
//!
//! - write (`POST`/`PUT` any path) stores the request data as-is (a JSON object) → 204; no
//!   data → 400 `missing data fields`; the mount root or a path ending in `/` → 400.
//! - read → `data` exactly as stored (its stored text, `Response::data_text`); missing →
//!   `None` (404).
//! - delete → 204 whether or not it existed.
//! - list (`LIST` or `GET ?list=true`; the path is `""` or ends in `/`) → sorted immediate
//!   children, sub-directories ending in `/`; none → `None` (404).
//! - existence check: a write is `create` when nothing is stored at the path, else `update`.
//!
//! Storage keys: the request path itself (relative to the mount), the value the JSON of the
//! data. A mount tuned to version 2 finds these keys and upgrades them (`v2/upgrade.rs`).
//!
//! Not done (Vault's kv v1 does it): a stored `ttl`/`lease` field is returned as a
//! `lease_duration` hint without a lease; here `lease_duration` stays 0 (the SDK has no field
//! for an unleased TTL hint).

use std::sync::Arc;

use async_trait::async_trait;
use secrets_sdk::{
    Data, DataText, Engine, EngineError, EngineStorage, Operation, Request, Response,
};

/// A kv version 1 mount.
#[derive(Debug)]
pub struct KvEngine {
    storage: Arc<dyn EngineStorage>,
}

impl KvEngine {
    /// A version 1 engine over `storage`.
    pub fn new(storage: Arc<dyn EngineStorage>) -> KvEngine {
        KvEngine { storage }
    }

    async fn read(&self, path: &str) -> Result<Option<Response>, EngineError> {
        let Some(bytes) = self.storage.get(path).await? else {
            return Ok(None);
        };
        // The stored text goes into the answer as it is: it is what `write` made of a `Data`
        // (compact, as the core would write it again), so parsing it only to write it back
        // would cost the read a map of owned strings.
        let text = DataText::new(bytes).map_err(|err| {
            EngineError::Internal(format!("json decoding failed for {path:?}: {err}"))
        })?;
        Ok(Some(Response::data_text(text)))
    }

    async fn write(&self, path: &str, data: &Data) -> Result<Option<Response>, EngineError> {
        if path.is_empty() || path.ends_with('/') {
            return Err(EngineError::BadRequest(
                "cannot write to a path ending in '/'".to_owned(),
            ));
        }
        if data.is_empty() {
            return Err(EngineError::BadRequest("missing data fields".to_owned()));
        }
        let bytes = serde_json::to_vec(data)
            .map_err(|err| EngineError::Internal(format!("json encoding failed: {err}")))?;
        self.storage.put(path, &bytes).await?;
        Ok(None)
    }

    async fn list(&self, path: &str) -> Result<Option<Response>, EngineError> {
        let keys = self.storage.list(path).await?;
        if keys.is_empty() {
            return Ok(None);
        }
        Ok(Some(Response::list(keys)))
    }
}

#[async_trait]
impl Engine for KvEngine {
    async fn handle(&self, request: Request) -> Result<Option<Response>, EngineError> {
        let path = request.path.as_str();
        match request.operation {
            Operation::Read => self.read(path).await,
            Operation::Create | Operation::Update => self.write(path, &request.data).await,
            Operation::Delete => {
                self.storage.delete(path).await?;
                Ok(None)
            }
            Operation::List => self.list(path).await,
            Operation::Patch => Err(EngineError::UnsupportedOperation),
        }
    }

    async fn exists(&self, request: &Request) -> Result<Option<bool>, EngineError> {
        Ok(Some(self.storage.get(&request.path).await?.is_some()))
    }
}

#[cfg(test)]
mod tests {
    use secrets_sdk::testing::{MemEngineStorage, engine_with_mem_storage};
    use serde_json::{Value, json};

    use super::*;

    fn engine() -> (Arc<dyn Engine>, Arc<MemEngineStorage>) {
        engine_with_mem_storage(crate::factory, "secret/").unwrap()
    }

    fn data(value: Value) -> Data {
        value.as_object().unwrap().clone()
    }

    async fn call(
        engine: &Arc<dyn Engine>,
        op: Operation,
        path: &str,
        body: Value,
    ) -> Result<Option<Response>, EngineError> {
        engine
            .handle(Request::new(op, path).with_data(data(body)))
            .await
    }

    #[tokio::test]
    async fn write_then_read_returns_the_data_as_stored() {
        let (engine, storage) = engine();
        let body = json!({"password": "hunter2", "n": 3, "nested": {"a": [1, null]}});
        assert_eq!(
            call(&engine, Operation::Create, "app/db", body.clone()).await,
            Ok(None)
        );
        assert_eq!(storage.keys(), vec!["app/db"]);
        let read = call(&engine, Operation::Read, "app/db", json!({}))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(Value::Object(read.data_map().unwrap()), body);
        // The answer is the stored text itself, not a map parsed from it.
        assert!(read.data.is_none());
        assert_eq!(
            read.data_text.unwrap().as_bytes(),
            serde_json::to_vec(&body).unwrap()
        );
    }

    #[tokio::test]
    async fn a_stored_value_that_is_not_an_object_is_an_internal_error() {
        let (engine, storage) = engine();
        storage.put("bad", b"[1,2]").await.unwrap();
        assert!(matches!(
            call(&engine, Operation::Read, "bad", json!({})).await,
            Err(EngineError::Internal(message)) if message.contains("json decoding failed")
        ));
    }

    #[tokio::test]
    async fn update_replaces_the_whole_secret() {
        let (engine, _) = engine();
        call(&engine, Operation::Create, "a", json!({"x": 1, "y": 2}))
            .await
            .unwrap();
        call(&engine, Operation::Update, "a", json!({"z": 3}))
            .await
            .unwrap();
        let read = call(&engine, Operation::Read, "a", json!({}))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(Value::Object(read.data_map().unwrap()), json!({"z": 3}));
    }

    #[tokio::test]
    async fn read_of_a_missing_secret_is_none() {
        let (engine, _) = engine();
        assert_eq!(
            call(&engine, Operation::Read, "nope", json!({})).await,
            Ok(None)
        );
    }

    #[tokio::test]
    async fn write_without_data_is_400() {
        let (engine, _) = engine();
        assert_eq!(
            call(&engine, Operation::Update, "a", json!({})).await,
            Err(EngineError::BadRequest("missing data fields".to_owned()))
        );
        assert!(matches!(
            call(&engine, Operation::Update, "dir/", json!({"a": 1})).await,
            Err(EngineError::BadRequest(_))
        ));
    }

    #[tokio::test]
    async fn delete_removes_and_is_idempotent() {
        let (engine, storage) = engine();
        call(&engine, Operation::Create, "a", json!({"x": 1}))
            .await
            .unwrap();
        assert_eq!(
            call(&engine, Operation::Delete, "a", json!({})).await,
            Ok(None)
        );
        assert!(storage.keys().is_empty());
        assert_eq!(
            call(&engine, Operation::Delete, "a", json!({})).await,
            Ok(None)
        );
    }

    #[tokio::test]
    async fn list_returns_children_and_none_when_empty() {
        let (engine, _) = engine();
        assert_eq!(
            call(&engine, Operation::List, "", json!({})).await,
            Ok(None)
        );
        for path in ["a", "b/c", "b/d/e"] {
            call(&engine, Operation::Create, path, json!({"v": 1}))
                .await
                .unwrap();
        }
        let keys = |r: Option<Response>| r.unwrap().data.unwrap()["keys"].clone();
        assert_eq!(
            keys(call(&engine, Operation::List, "", json!({})).await.unwrap()),
            json!(["a", "b/"])
        );
        assert_eq!(
            keys(
                call(&engine, Operation::List, "b/", json!({}))
                    .await
                    .unwrap()
            ),
            json!(["c", "d/"])
        );
        assert_eq!(
            call(&engine, Operation::List, "zz/", json!({})).await,
            Ok(None)
        );
    }

    #[tokio::test]
    async fn existence_check_tells_create_from_update() {
        let (engine, _) = engine();
        let req = Request::new(Operation::Update, "a");
        assert_eq!(engine.exists(&req).await, Ok(Some(false)));
        call(&engine, Operation::Create, "a", json!({"x": 1}))
            .await
            .unwrap();
        assert_eq!(engine.exists(&req).await, Ok(Some(true)));
    }

    #[tokio::test]
    async fn patch_is_unsupported_in_version_1() {
        let (engine, _) = engine();
        assert_eq!(
            call(&engine, Operation::Patch, "a", json!({"x": 1})).await,
            Err(EngineError::UnsupportedOperation)
        );
    }
}
