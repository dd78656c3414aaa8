//! The kv version 2 engine: routes a request to its path family, with upstream's checks around
//! every handler.
//!
//! Where it sits: built by [`crate::factory`]; the core calls [`Engine::handle`] and
//! [`Engine::exists`] with paths relative to the mount. Before anything else a request waits
//! for the one-time upgrade of version 1 data (`upgrade.rs`), then its fields are validated
//! against the path's schema (`input.rs`), then the handler runs; a handler's body gets
//! upstream's warnings for unknown fields.
//!
//! Routes (upstream's `backend.go` path list, in its order):
//! - `config`: read, write (`config.rs`);
//! - `data/<key>` (`key` not empty, no trailing `/`): read, write, patch, delete (`data.rs`);
//! - `metadata/<key>`: read, list, write, patch, delete (`metadata.rs`);
//! - `delete/<key>`, `undelete/<key>`, `destroy/<key>`: write (`versions.rs`);
//! - `subkeys/<key>`: read (`subkeys.rs`);
//! - anything else: a 404 whose body warns that the path is not a kv v2 path.
//!
//! A known path asked for an operation it does not serve is a 405.
//!
//! Invariants: every handler gets the mount's shared state (`mount.rs`, whose key locks guard
//! every read-modify-write), never the engine; the engine's storage is only its mount's view.

use std::sync::Arc;

use async_trait::async_trait;
use secrets_sdk::{Engine, EngineError, EngineStorage, Operation, Request, Response, SharedClock};
use tokio::sync::OnceCell;

use crate::v2::input::{self, Schema};
use crate::v2::mount::Mount;
use crate::v2::{config, data, metadata, render, subkeys, upgrade, versions};

/// A kv version 2 mount.
#[derive(Debug)]
pub struct KvV2Engine {
    mount: Mount,
    /// Set once the mount's version 1 data (if any) has been upgraded.
    upgraded: OnceCell<()>,
}

/// Which path family a request addresses, with the key it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route<'a> {
    Config,
    Data(&'a str),
    Metadata(&'a str),
    Delete(&'a str),
    Undelete(&'a str),
    Destroy(&'a str),
    Subkeys(&'a str),
    /// `data`, `metadata`, `delete`, `undelete` or `destroy` without a key.
    Root,
    Invalid,
}

fn route(path: &str) -> Route<'_> {
    match path {
        "config" => return Route::Config,
        "data" | "metadata" | "delete" | "undelete" | "destroy" => return Route::Root,
        _ => {}
    }
    let Some((family, key)) = path.split_once('/') else {
        return Route::Invalid;
    };
    match family {
        "data" if !key.is_empty() && !key.ends_with('/') => Route::Data(key),
        "metadata" => Route::Metadata(key),
        "delete" => Route::Delete(key),
        "undelete" => Route::Undelete(key),
        "destroy" => Route::Destroy(key),
        "subkeys" => Route::Subkeys(key),
        _ => Route::Invalid,
    }
}

impl Route<'_> {
    fn schema(self) -> Schema {
        match self {
            Route::Config => input::CONFIG,
            Route::Data(_) => input::DATA,
            Route::Metadata(_) => input::METADATA,
            Route::Delete(_) | Route::Undelete(_) | Route::Destroy(_) => input::VERSIONS,
            Route::Subkeys(_) => input::SUBKEYS,
            Route::Root | Route::Invalid => input::NONE,
        }
    }
}

impl KvV2Engine {
    /// A version 2 engine over its mount's `storage`, stamping times from `clock`.
    pub fn new(storage: Arc<dyn EngineStorage>, clock: SharedClock) -> KvV2Engine {
        KvV2Engine {
            mount: Mount::new(storage, clock),
            upgraded: OnceCell::new(),
        }
    }

    /// Waits until version 1 data is upgraded (the first caller runs the upgrade; a failed
    /// upgrade is retried by the next request).
    async fn ready(&self) -> Result<(), EngineError> {
        self.upgraded
            .get_or_try_init(|| upgrade::run(&self.mount.store, self.mount.now()))
            .await
            .map(drop)
    }

    async fn dispatch(
        &self,
        route: Route<'_>,
        request: &Request,
    ) -> Result<Option<Response>, EngineError> {
        use Operation::{Create, Delete, List, Patch, Read, Update};
        let body = &request.data;
        let mount = &self.mount;
        match (route, request.operation) {
            (Route::Config, Read) => config::read(mount).await,
            (Route::Config, Create | Update) => config::write(mount, body).await,
            (Route::Data(key), Read) => data::read(mount, key, body).await,
            (Route::Data(key), Create | Update) => data::write(mount, key, body).await,
            (Route::Data(key), Patch) => data::patch(mount, key, body).await,
            (Route::Data(key), Delete) => data::delete(mount, key).await,
            (Route::Metadata(key), Read) => metadata::read(mount, key).await,
            (Route::Metadata(key), List) => metadata::list(mount, key).await,
            (Route::Metadata(key), Create | Update) => metadata::write(mount, key, body).await,
            (Route::Metadata(key), Patch) => metadata::patch(mount, key, body).await,
            (Route::Metadata(key), Delete) => metadata::delete(mount, key).await,
            (Route::Delete(key), Create | Update) => versions::delete(mount, key, body).await,
            (Route::Undelete(key), Create | Update) => versions::undelete(mount, key, body).await,
            (Route::Destroy(key), Create | Update) => versions::destroy(mount, key, body).await,
            (Route::Subkeys(key), Read) => subkeys::read(mount, key, body).await,
            (Route::Root, _) => Ok(Some(render::not_found_with(
                None,
                &["Non-listing operations on the root of a K/V v2 mount are not supported."],
            ))),
            (Route::Invalid, operation) => Ok(Some(invalid_path(operation))),
            _ => Err(EngineError::UnsupportedOperation),
        }
    }
}

/// Upstream's answer to a path that is not a kv v2 path: a 404 pointing at the CLI command
/// for the operation.
fn invalid_path(operation: Operation) -> Response {
    let command = match operation {
        Operation::Create | Operation::Update => "put",
        Operation::Patch => "patch",
        Operation::Read => "get",
        Operation::List => "list",
        Operation::Delete => "delete",
    };
    render::not_found_with(
        None,
        &[&format!(
            "Invalid path for a versioned K/V secrets engine. See the API docs for the appropriate API endpoints to use. If using the Vault CLI, use 'vault kv {command}' for this operation."
        )],
    )
}

#[async_trait]
impl Engine for KvV2Engine {
    async fn handle(&self, request: Request) -> Result<Option<Response>, EngineError> {
        self.ready().await?;
        let route = route(&request.path);
        let schema = route.schema();
        input::validate(schema, &request.data)?;
        let mut answer = self.dispatch(route, &request).await?;
        if let Some(response) = answer.as_mut().filter(|r| r.raw.is_none()) {
            let warnings = [
                input::ignored_warning(schema, &request.data),
                input::replaced_warning(schema, &request.data),
            ];
            response.warnings.extend(warnings.into_iter().flatten());
        }
        Ok(answer)
    }

    async fn exists(&self, request: &Request) -> Result<Option<bool>, EngineError> {
        let key = match route(&request.path) {
            Route::Data(key) | Route::Metadata(key) => key,
            _ => return Ok(None),
        };
        self.ready().await?;
        Ok(Some(self.mount.store.load_metadata(key).await?.is_some()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_follow_upstreams_patterns() {
        assert_eq!(route("config"), Route::Config);
        assert_eq!(route("config/"), Route::Invalid);
        assert_eq!(route("data/a/b"), Route::Data("a/b"));
        assert_eq!(route("data/a/"), Route::Invalid);
        assert_eq!(route("data/"), Route::Invalid);
        assert_eq!(route("data"), Route::Root);
        assert_eq!(route("metadata/"), Route::Metadata(""));
        assert_eq!(route("metadata/a/"), Route::Metadata("a/"));
        assert_eq!(route("delete/a"), Route::Delete("a"));
        assert_eq!(route("undelete/a"), Route::Undelete("a"));
        assert_eq!(route("destroy/a"), Route::Destroy("a"));
        assert_eq!(route("subkeys/a"), Route::Subkeys("a"));
        assert_eq!(route("subkeys"), Route::Invalid);
        assert_eq!(route("foo"), Route::Invalid);
        assert_eq!(route(""), Route::Invalid);
    }
}
