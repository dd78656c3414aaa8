//! `rotate-root`: gives the bind account (`binddn`) a new password that only the store knows.
//!
//! The new password goes to `wal/root` first, then to the directory (on the entry at `binddn`,
//! which must be exactly one entry: use a fully qualified DN), then into the config, the old one
//! kept as `last_bindpass` for ten minutes of binds; a rotation interrupted after the WAL is
//! finished by the periodic hook, binding with the WAL's password when the old one no longer
//! works. A second call while one runs answers 200 with upstream's warning
//! `Root password rotation is already in progress.` instead of waiting.

use std::sync::atomic::Ordering;

use secrets_sdk::{EngineError, Response};

use crate::directory::Session;
use crate::store::{self, Config, PendingPassword};
use crate::{AdEngine, password};

/// Clears the "root rotation running" flag when dropped.
struct RotatingRoot<'a>(&'a AdEngine);

impl Drop for RotatingRoot<'_> {
    fn drop(&mut self) {
        self.0.root_rotating.store(false, Ordering::SeqCst);
    }
}

impl AdEngine {
    pub(crate) async fn rotate_root(&self) -> Result<Option<Response>, EngineError> {
        self.require_config().await?;
        if self.root_rotating.swap(true, Ordering::SeqCst) {
            return Ok(Some(
                Response::default().with_warning("Root password rotation is already in progress."),
            ));
        }
        let _running = RotatingRoot(self);
        let _guard = self.lock.lock().await;
        self.rotate_root_locked().await?;
        Ok(None)
    }

    /// Rotates (or finishes rotating) the bind password; the caller holds the lock.
    pub(crate) async fn rotate_root_locked(&self) -> Result<(), EngineError> {
        let mut config = self.require_config().await?;
        let pending = match store::get::<PendingPassword>(self.storage(), store::WAL_ROOT).await? {
            Some(pending) => pending,
            None => {
                let pending = PendingPassword {
                    version: 1,
                    password: password::generate(&config, &self.passwords).await?,
                    created_ms: self.now_ms(),
                };
                store::put(self.storage(), store::WAL_ROOT, &pending).await?;
                pending
            }
        };
        let now = self.now_ms();
        // The directory may already hold the WAL's password (an interrupted rotation).
        let binding = Config {
            last_bindpass: pending.password.clone(),
            last_bind_password_rotation_ms: now,
            ..config.clone()
        };
        let mut session = Session::open(&binding, now).await?;
        let result = async {
            let entry = session.entry_at(&config.binddn).await?;
            session.set_password(&entry.dn, &pending.password).await
        }
        .await;
        session.close().await;
        result?;
        if config.bindpass != pending.password {
            config.last_bindpass = std::mem::replace(&mut config.bindpass, pending.password);
        }
        config.last_bind_password_rotation_ms = self.now_ms();
        store::put(self.storage(), store::CONFIG, &config).await?;
        self.storage().delete(store::WAL_ROOT).await?;
        tracing::info!("rotated the bind account's password");
        Ok(())
    }
}
