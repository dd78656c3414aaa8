//! The `ad` secrets engine (upstream's `vault-plugin-secrets-ad`): the store owns the passwords
//! of existing directory service accounts, in Active Directory or OpenLDAP, rotates them and
//! hands them out, per role or by check-out from a library set.
//!
//! Where it sits: the core (`crates/secrets`) builds one engine per `ad` mount through
//! [`factory`] with the mount's barrier-encrypted storage view, the store's clock and the
//! password generator; every path is relative to the mount. Paths, one file per family:
//! `config` (`config.rs`); `roles`, `roles/:name` (`roles.rs`); `creds/:name`,
//! `rotate-role/:name` and the rotations run from [`Engine::periodic`] (`creds.rs`);
//! `rotate-root` (`rotate_root.rs`); `library`, `library/:set`, its `check-out`, `check-in`,
//! `status`, `library/manage/:set/check-in`, and the check-out leases' revoke and renew
//! (`library.rs`). The directory client is `directory.rs`; password generation `password.rs`;
//! records and keys `store.rs`.
//!
//! Rotation (docs/compat.md has the user-facing account): a role's password rotates on the
//! first `creds` read, on `rotate-role`, when a read finds the directory's password-changed time
//! (`pwdLastSet`, or OpenLDAP's `pwdChangedTime`) later than the engine's own last rotation plus
//! `last_rotation_tolerance`, and, unlike upstream's reads-only rotation, from the periodic hook
//! as soon as the role's TTL has run out (and when a periodic scan of the directory finds such
//! an out-of-band change). Every check-in (by a caller, by the manage path, at lease expiry or
//! revoke, or when an account joins a set) sets a new password.
//!
//! Invariants:
//! - storage is the truth: in memory there are only locks, the flags behind the "already in
//!   progress" warnings and the earliest time periodic work is due (recomputed from storage
//!   whenever unknown);
//! - every directory write happens under one lock, after its new password is in a `wal/` record
//!   (`store.rs`), so a password the directory may hold is never lost;
//! - `bindpass` and passwords never appear in errors or logs; bad input is a 400, where upstream
//!   sometimes answers 500 (docs/compat.md lists them).

mod config;
mod creds;
mod directory;
mod library;
mod password;
mod roles;
mod rotate_root;
mod store;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use secrets_sdk::{
    Engine, EngineConfig, EngineError, EngineStorage, Lease, Operation, Passwords, Request,
    Response, SharedClock, SpecialPaths,
};

/// Builds an `ad` engine for one mount.
pub fn factory(config: EngineConfig) -> Result<Arc<dyn Engine>, EngineError> {
    Ok(Arc::new(AdEngine {
        storage: config.storage,
        clock: config.clock,
        passwords: config.passwords,
        lock: tokio::sync::Mutex::new(()),
        root_rotating: AtomicBool::new(false),
        roles_rotating: Mutex::new(HashSet::new()),
        next_periodic: AtomicI64::new(UNKNOWN),
        next_drift_scan: AtomicI64::new(0),
    }))
}

/// `next_periodic` when storage must be scanned.
const UNKNOWN: i64 = i64::MIN;

/// One mount of the `ad` engine.
#[derive(Debug)]
pub struct AdEngine {
    storage: Arc<dyn EngineStorage>,
    clock: SharedClock,
    passwords: Passwords,
    /// Serialises every change of a password or of the records around it (rotations,
    /// check-outs, check-ins, set and role writes, config writes).
    lock: tokio::sync::Mutex<()>,
    /// A `rotate-root` is running.
    root_rotating: AtomicBool,
    /// Roles a `rotate-role` is rotating now.
    roles_rotating: Mutex<HashSet<String>>,
    /// Unix ms before which the periodic hook has nothing to do ([`UNKNOWN`]: scan storage).
    next_periodic: AtomicI64,
    /// Unix ms of the next periodic look at the directory's password-changed times.
    next_drift_scan: AtomicI64,
}

fn bad(message: impl Into<String>) -> EngineError {
    EngineError::BadRequest(message.into())
}

/// `name` from `prefix/name`, refusing empty and nested names; lower-cased, as upstream's
/// `TypeLowerCaseString` names.
fn name_in(path: &str, prefix: &str) -> Option<String> {
    let name = path.strip_prefix(prefix)?;
    (!name.is_empty() && !name.contains('/')).then(|| name.to_lowercase())
}

/// `set` from `library/<set>/<action>`.
fn set_action(path: &str, action: &str) -> Option<String> {
    let rest = path.strip_prefix(store::LIBRARY)?;
    let name = rest.strip_suffix(action)?.strip_suffix('/')?;
    (!name.is_empty() && !name.contains('/') && name != "manage").then(|| name.to_lowercase())
}

fn seconds(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

impl AdEngine {
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn storage(&self) -> &dyn EngineStorage {
        self.storage.as_ref()
    }

    /// Something periodic work depends on changed: look at storage on the next tick.
    fn schedule_changed(&self) {
        self.next_periodic.store(UNKNOWN, Ordering::SeqCst);
    }

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

#[async_trait]
impl Engine for AdEngine {
    async fn handle(&self, request: Request) -> Result<Option<Response>, EngineError> {
        let path = request.path.clone();
        let op = request.operation;
        let write = matches!(op, Operation::Create | Operation::Update);
        if path == "config" {
            return self.handle_config(&request).await;
        }
        if path == "roles" || path == "roles/" {
            return match op {
                Operation::List | Operation::Read => self.list(store::ROLE).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if path == "library" || path == "library/" {
            return match op {
                Operation::List => self.list(store::LIBRARY).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if path == "rotate-root" {
            return match op {
                Operation::Read | Operation::Create | Operation::Update => self.rotate_root().await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(name) = name_in(&path, "roles/") {
            return self.handle_role(&request, &name).await;
        }
        if let Some(name) = name_in(&path, "creds/") {
            return match op {
                Operation::Read => self.read_creds(&name).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(name) = name_in(&path, "rotate-role/") {
            return match op {
                Operation::Create | Operation::Update => self.rotate_role(&name).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(set) = path
            .strip_prefix("library/manage/")
            .and_then(|rest| rest.strip_suffix("/check-in"))
            .filter(|s| !s.is_empty() && !s.contains('/'))
        {
            return match op {
                _ if write => self.check_in(&request, &set.to_lowercase(), true).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(set) = set_action(&path, "check-out") {
            return match op {
                _ if write => self.check_out(&request, &set).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(set) = set_action(&path, "check-in") {
            return match op {
                _ if write => self.check_in(&request, &set, false).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(set) = set_action(&path, "status") {
            return match op {
                Operation::Read => self.status(&set).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(set) = name_in(&path, store::LIBRARY) {
            return self.handle_set(&request, &set).await;
        }
        Err(EngineError::UnsupportedPath)
    }

    async fn exists(&self, request: &Request) -> Result<Option<bool>, EngineError> {
        // Only library sets tell create from update (upstream's one existence check).
        match name_in(&request.path, store::LIBRARY) {
            Some(set) if set != "manage" => Ok(Some(
                self.storage
                    .get(&format!("{}{set}", store::LIBRARY))
                    .await?
                    .is_some(),
            )),
            _ => Ok(None),
        }
    }

    async fn revoke(&self, lease: &Lease) -> Result<(), EngineError> {
        self.end_check_out(lease).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Duration, EngineError> {
        self.renew_check_out(lease).await
    }

    async fn periodic(&self) -> Result<(), EngineError> {
        self.run_periodic().await
    }

    fn special_paths(&self) -> SpecialPaths {
        SpecialPaths::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_paths_name_their_set() {
        assert_eq!(
            set_action("library/Team/check-out", "check-out").as_deref(),
            Some("team")
        );
        assert_eq!(set_action("library//check-out", "check-out"), None);
        assert_eq!(set_action("library/a/b/check-in", "check-in"), None);
        assert_eq!(name_in("library/x", "library/").as_deref(), Some("x"));
        assert_eq!(name_in("library/x/status", "library/"), None);
    }
}
