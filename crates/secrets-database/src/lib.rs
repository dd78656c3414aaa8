//! The `database` secrets engine (Vault's `builtin/logical/database`): connections to
//! PostgreSQL, MySQL/MariaDB and Redis, dynamic roles whose credentials are real database
//! users under a lease, and static roles whose existing users' passwords the engine rotates.
//!
//! Where it sits: the core (`crates/secrets`) builds one engine per `database` mount through
//! [`factory`] with the mount's barrier-encrypted storage view, the store's clock and the
//! password generator; every path is relative to the mount. Paths, one file per family:
//! `config/:name`, `reset/:name`, `rotate-root/:name` (`connections.rs`); `roles/:name` and
//! `static-roles/:name` (`roles.rs`); `creds/:name` with lease revoke and renew (`creds.rs`);
//! `static-creds/:name`, `rotate-role/:name` and the scheduled rotations run from
//! [`Engine::periodic`] (`rotation.rs`). Database clients are `plugins.rs`; records and keys
//! `store.rs`; credential types `credentials.rs`; username templates `template.rs`.
//!
//! Invariants:
//! - storage is the truth: the only state in memory is a cache of live clients per connection
//!   (dropped when a connection is written, reset or deleted) and the earliest time a static
//!   rotation is due (recomputed from storage whenever unknown);
//! - a connection's password is never returned, and a new password (root or static) is in
//!   storage before the database takes it (`store.rs`);
//! - bad input is a 400, where upstream sometimes answers 500 (docs/compat.md lists them).

mod connections;
mod credentials;
mod creds;
mod pg_conninfo;
mod plugins;
mod roles;
mod rotation;
mod store;
mod template;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use secrets_sdk::{
    Engine, EngineConfig, EngineError, EngineStorage, Lease, Operation, Passwords, Request,
    Response, SharedClock,
};

use crate::plugins::{Client, Kind};
use crate::store::Connection;

/// Builds a database engine for one mount.
pub fn factory(config: EngineConfig) -> Result<Arc<dyn Engine>, EngineError> {
    Ok(Arc::new(DatabaseEngine {
        storage: config.storage,
        clock: config.clock,
        passwords: config.passwords,
        clients: Mutex::new(HashMap::new()),
        next_rotation_check: AtomicI64::new(UNKNOWN),
        rotation_lock: tokio::sync::Mutex::new(()),
    }))
}

/// `next_rotation_check` when storage must be scanned.
const UNKNOWN: i64 = i64::MIN;

/// One mount of the database engine.
#[derive(Debug)]
pub struct DatabaseEngine {
    storage: Arc<dyn EngineStorage>,
    clock: SharedClock,
    passwords: Passwords,
    clients: Mutex<HashMap<String, Arc<Client>>>,
    /// Unix ms before which no static rotation is due ([`UNKNOWN`]: scan storage).
    next_rotation_check: AtomicI64,
    /// Serialises rotations (scheduled, `rotate-role`, `rotate-root`, role writes).
    rotation_lock: tokio::sync::Mutex<()>,
}

fn bad(message: impl Into<String>) -> EngineError {
    EngineError::BadRequest(message.into())
}

/// `name` from `prefix/name`, refusing empty and nested names.
fn name_in<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let name = path.strip_prefix(prefix)?;
    (!name.is_empty() && !name.contains('/')).then_some(name)
}

impl DatabaseEngine {
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn storage(&self) -> &dyn EngineStorage {
        self.storage.as_ref()
    }

    /// The stored connection `name`, if any.
    async fn connection(&self, name: &str) -> Result<Option<Connection>, EngineError> {
        store::get(self.storage(), &format!("{}{name}", store::CONFIG)).await
    }

    /// The live client for connection `name` (built and cached on first use).
    async fn client(&self, name: &str) -> Result<(Connection, Arc<Client>), EngineError> {
        let config = self.connection(name).await?.ok_or_else(|| {
            bad(format!(
                "could not find a database connection named {name:?}"
            ))
        })?;
        let cached = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned();
        if let Some(client) = cached {
            return Ok((config, client));
        }
        let kind = Kind::of(&config.plugin_name)
            .ok_or_else(|| bad(format!("unknown plugin {:?}", config.plugin_name)))?;
        let client = Arc::new(plugins::connect(kind, &config.connection_details, false).await?);
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(name.to_owned(), client.clone());
        Ok((config, client))
    }

    /// Drops (and closes) the cached client of connection `name`.
    async fn forget_client(&self, name: &str) {
        let old = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(name);
        if let Some(client) = old {
            client.close().await;
        }
    }

    fn rotation_schedule_changed(&self) {
        self.next_rotation_check.store(UNKNOWN, Ordering::SeqCst);
    }
}

#[async_trait]
impl Engine for DatabaseEngine {
    async fn handle(&self, request: Request) -> Result<Option<Response>, EngineError> {
        let path = request.path.clone();
        let op = request.operation;
        if path == "config" || path == "config/" {
            return match op {
                Operation::List => self.list(store::CONFIG).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if path == "roles" || path == "roles/" {
            return match op {
                Operation::List => self.list(store::ROLE).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if path == "static-roles" || path == "static-roles/" {
            return match op {
                Operation::List => self.list(store::STATIC_ROLE).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(name) = name_in(&path, "config/") {
            return self.handle_connection(&request, name).await;
        }
        if let Some(name) = name_in(&path, "reset/") {
            return match op {
                Operation::Create | Operation::Update => self.reset(name).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(name) = name_in(&path, "rotate-root/") {
            return match op {
                Operation::Create | Operation::Update => self.rotate_root(name).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(name) = name_in(&path, "roles/") {
            return self.handle_role(&request, name).await;
        }
        if let Some(name) = name_in(&path, "static-roles/") {
            return self.handle_static_role(&request, name).await;
        }
        if let Some(name) = name_in(&path, "creds/") {
            return match op {
                Operation::Read => self.issue(&request, name).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(name) = name_in(&path, "static-creds/") {
            return match op {
                Operation::Read => self.static_creds(name).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(name) = name_in(&path, "rotate-role/") {
            return match op {
                Operation::Create | Operation::Update => self.rotate_role(name).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        Err(EngineError::UnsupportedPath)
    }

    async fn exists(&self, request: &Request) -> Result<Option<bool>, EngineError> {
        let path = request.path.as_str();
        let key = if let Some(name) = name_in(path, "config/") {
            format!("{}{name}", store::CONFIG)
        } else if let Some(name) = name_in(path, "roles/") {
            format!("{}{name}", store::ROLE)
        } else if let Some(name) = name_in(path, "static-roles/") {
            format!("{}{name}", store::STATIC_ROLE)
        } else {
            return Ok(None);
        };
        Ok(Some(self.storage.get(&key).await?.is_some()))
    }

    async fn revoke(&self, lease: &Lease) -> Result<(), EngineError> {
        self.revoke_lease(lease).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Duration, EngineError> {
        self.renew_lease(lease).await
    }

    async fn periodic(&self) -> Result<(), EngineError> {
        self.run_due_rotations().await
    }
}

impl DatabaseEngine {
    async fn list(&self, prefix: &str) -> Result<Option<Response>, EngineError> {
        let keys: Vec<String> = self
            .storage
            .list(prefix)
            .await?
            .into_iter()
            .filter(|k| !k.ends_with('/'))
            .collect();
        Ok(Some(Response::list(keys)))
    }
}
