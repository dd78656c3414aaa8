//! Roles' passwords: `creds/:name`, `rotate-role/:name`, and the background work the core's
//! periodic hook drives ([`AdEngine::run_periodic`]).
//!
//! A read rotates the role's account first when the engine never rotated it, when the directory
//! says its password changed later than the engine's last rotation plus
//! `last_rotation_tolerance` (someone changed it outside the store), or when the role's TTL has
//! run out; otherwise it answers the stored passwords. A rotation sets the new password in the
//! directory through a `wal/role/<name>` record, then stores it as `current_password` (the
//! previous one becoming `last_password`) and the rotation time with the role.
//!
//! The periodic hook rolls interrupted rotations forward (roles, check-ins, root), rotates every
//! role whose TTL ran out (a role never read is left for its first read, as upstream), and once a
//! minute compares the directory's password-changed times with the engine's rotations. It
//! sleeps (in effect) until the earliest of those is due; a failure is logged and retried after
//! 10 s.

use std::sync::atomic::Ordering;

use secrets_sdk::{Data, EngineError, Response};
use serde_json::Value;

use crate::directory::Session;
use crate::store::{self, CheckOut, Config, Creds, PendingPassword, Role};
use crate::{AdEngine, UNKNOWN, bad, password};

/// Retry delay after failed periodic work.
const RETRY_MS: i64 = 10_000;
/// The longest the periodic hook trusts its cached next time before looking at storage again.
const RESCAN_MS: i64 = 60_000;
/// How often the periodic hook compares the directory's password-changed times.
const DRIFT_SCAN_MS: i64 = 60_000;

/// Removes a role from the set of roles being rotated when dropped.
struct RotatingRole<'a> {
    engine: &'a AdEngine,
    name: String,
}

impl Drop for RotatingRole<'_> {
    fn drop(&mut self) {
        self.engine
            .roles_rotating
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.name);
    }
}

impl AdEngine {
    /// The password at `wal_key` (an interrupted change), or a new one written there; then set
    /// on the entry `dn`. The caller holds the lock, stores the password and deletes the WAL.
    pub(crate) async fn set_new_password(
        &self,
        session: &mut Session,
        config: &Config,
        wal_key: &str,
        dn: &str,
    ) -> Result<String, EngineError> {
        let pending = match store::get::<PendingPassword>(self.storage(), wal_key).await? {
            Some(pending) => pending,
            None => {
                let pending = PendingPassword {
                    version: 1,
                    password: password::generate(config, &self.passwords).await?,
                    created_ms: self.now_ms(),
                };
                store::put(self.storage(), wal_key, &pending).await?;
                pending
            }
        };
        session.set_password(dn, &pending.password).await?;
        Ok(pending.password)
    }

    /// Rotates role `name` (whose account is the entry `dn`) now; the caller holds the lock.
    async fn rotate_role_locked(
        &self,
        session: &mut Session,
        config: &Config,
        name: &str,
        mut role: Role,
        dn: &str,
    ) -> Result<Creds, EngineError> {
        let wal_key = format!("{}{name}", store::WAL_ROLE);
        let new = self.set_new_password(session, config, &wal_key, dn).await?;
        let creds_key = format!("{}{name}", store::CREDS);
        let mut creds = store::get::<Creds>(self.storage(), &creds_key)
            .await?
            .unwrap_or_default();
        if creds.username != role.service_account_name {
            creds = Creds::default();
        }
        // A WAL rolled forward after its creds were stored must not shift them again.
        if creds.current_password != new {
            creds.last_password = std::mem::take(&mut creds.current_password);
            creds.current_password = new;
        }
        creds.version = 1;
        creds.username = role.service_account_name.clone();
        store::put(self.storage(), &creds_key, &creds).await?;
        role.last_rotation_ms = self.now_ms();
        store::put(self.storage(), &format!("{}{name}", store::ROLE), &role).await?;
        self.storage().delete(&wal_key).await?;
        self.schedule_changed();
        tracing::info!(role = %name, "rotated the service account's password");
        Ok(creds)
    }

    pub(crate) async fn read_creds(&self, name: &str) -> Result<Option<Response>, EngineError> {
        let config = self.require_config().await?;
        let _guard = self.lock.lock().await;
        let Some(role) = self.role(name).await? else {
            return Ok(None);
        };
        let mut session = Session::open(&config, self.now_ms()).await?;
        let result = self.creds_locked(&mut session, &config, name, role).await;
        session.close().await;
        let creds = result?;
        let mut data = Data::new();
        data.insert("username".into(), Value::String(creds.username));
        data.insert(
            "current_password".into(),
            Value::String(creds.current_password),
        );
        if !creds.last_password.is_empty() {
            data.insert("last_password".into(), Value::String(creds.last_password));
        }
        Ok(Some(Response::data(data)))
    }

    async fn creds_locked(
        &self,
        session: &mut Session,
        config: &Config,
        name: &str,
        role: Role,
    ) -> Result<Creds, EngineError> {
        let account = session.find_account(&role.service_account_name).await?;
        let stored =
            store::get::<Creds>(self.storage(), &format!("{}{name}", store::CREDS)).await?;
        let now = self.now_ms();
        let tolerance_ms = secs_ms(config.last_rotation_tolerance);
        let rotate = role.last_rotation_ms == 0
            || stored.is_none()
            || account
                .password_last_set_ms
                .is_some_and(|set| set > role.last_rotation_ms + tolerance_ms)
            || now >= role.last_rotation_ms + secs_ms(role.ttl);
        match stored {
            Some(creds) if !rotate => Ok(creds),
            _ => {
                self.rotate_role_locked(session, config, name, role, &account.dn)
                    .await
            }
        }
    }

    pub(crate) async fn rotate_role(&self, name: &str) -> Result<Option<Response>, EngineError> {
        let config = self.require_config().await?;
        if self.role(name).await?.is_none() {
            return Err(bad(format!("role {name} does not exist")));
        }
        let fresh = self
            .roles_rotating
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(name.to_owned());
        if !fresh {
            return Ok(Some(Response::default().with_warning(format!(
                "Password rotation for role {name:?} is already in progress."
            ))));
        }
        let _rotating = RotatingRole {
            engine: self,
            name: name.to_owned(),
        };
        let _guard = self.lock.lock().await;
        let Some(role) = self.role(name).await? else {
            return Err(bad(format!("role {name} does not exist")));
        };
        let mut session = Session::open(&config, self.now_ms()).await?;
        let result = async {
            let account = session.find_account(&role.service_account_name).await?;
            self.rotate_role_locked(&mut session, &config, name, role, &account.dn)
                .await
        }
        .await;
        session.close().await;
        result.map(|_| None)
    }

    /// The periodic hook: cheap unless something is due (or the cache is unknown).
    pub(crate) async fn run_periodic(&self) -> Result<(), EngineError> {
        let now = self.now_ms();
        let next = self.next_periodic.load(Ordering::SeqCst);
        if next != UNKNOWN && now < next {
            return Ok(());
        }
        let _guard = self.lock.lock().await;
        let Some(config) = self.config().await? else {
            self.next_periodic.store(now + RESCAN_MS, Ordering::SeqCst);
            return Ok(());
        };
        let mut session: Option<Session> = None;
        let result = self.periodic_locked(&config, &mut session, now).await;
        if let Some(session) = session {
            session.close().await;
        }
        let earliest = match result {
            Ok(earliest) => earliest,
            Err(err) => {
                tracing::warn!(error = %err, "directory engine background work failed; retrying in 10s");
                now + RETRY_MS
            }
        };
        // Rotations above reset the cache to UNKNOWN; set it from what was seen.
        self.next_periodic.store(earliest, Ordering::SeqCst);
        Ok(())
    }

    /// One periodic pass under the lock; returns when the next one is due.
    async fn periodic_locked(
        &self,
        config: &Config,
        session: &mut Option<Session>,
        now: i64,
    ) -> Result<i64, EngineError> {
        let mut earliest = now + RESCAN_MS;
        self.roll_forward(config, session).await?;
        let drift_due = now >= self.next_drift_scan.load(Ordering::SeqCst);
        for name in self.storage().list(store::ROLE).await? {
            if name.ends_with('/') {
                continue;
            }
            let Some(role) = self.role(&name).await? else {
                continue;
            };
            if role.last_rotation_ms == 0 {
                continue;
            }
            let due = role.last_rotation_ms + secs_ms(role.ttl);
            if now < due && !drift_due {
                earliest = earliest.min(due);
                continue;
            }
            let open = open_session(session, config, now).await?;
            let account = open.find_account(&role.service_account_name).await?;
            let drifted = account.password_last_set_ms.is_some_and(|set| {
                set > role.last_rotation_ms + secs_ms(config.last_rotation_tolerance)
            });
            if now >= due || drifted {
                if drifted {
                    tracing::warn!(role = %name, "the password was changed in the directory after the store's last rotation; rotating it again");
                }
                self.rotate_role_locked(open, config, &name, role, &account.dn)
                    .await?;
            } else {
                earliest = earliest.min(due);
            }
        }
        if drift_due {
            self.next_drift_scan
                .store(now + DRIFT_SCAN_MS, Ordering::SeqCst);
        }
        Ok(earliest.min(self.next_drift_scan.load(Ordering::SeqCst).max(now + 1000)))
    }

    /// Finishes password changes a crash interrupted (their `wal/` records).
    async fn roll_forward(
        &self,
        config: &Config,
        session: &mut Option<Session>,
    ) -> Result<(), EngineError> {
        if self.storage().get(store::WAL_ROOT).await?.is_some() {
            self.rotate_root_locked().await?;
        }
        let now = self.now_ms();
        for name in self.storage().list(store::WAL_ROLE).await? {
            let wal_key = format!("{}{name}", store::WAL_ROLE);
            let Some(role) = self.role(&name).await? else {
                self.storage().delete(&wal_key).await?;
                continue;
            };
            let open = open_session(session, config, now).await?;
            let account = open.find_account(&role.service_account_name).await?;
            self.rotate_role_locked(open, config, &name, role, &account.dn)
                .await?;
        }
        for account in self.storage().list(store::WAL_ACCOUNT).await? {
            let checkout_key = format!("{}{account}", store::CHECKOUT);
            if store::get::<CheckOut>(self.storage(), &checkout_key)
                .await?
                .is_none()
            {
                self.storage()
                    .delete(&format!("{}{account}", store::WAL_ACCOUNT))
                    .await?;
                continue;
            }
            let open = open_session(session, config, now).await?;
            self.check_in_locked(open, config, &account).await?;
        }
        Ok(())
    }
}

/// The session in `slot`, opened on first use.
async fn open_session<'a>(
    slot: &'a mut Option<Session>,
    config: &Config,
    now: i64,
) -> Result<&'a mut Session, EngineError> {
    if slot.is_none() {
        *slot = Some(Session::open(config, now).await?);
    }
    slot.as_mut()
        .ok_or_else(|| EngineError::Internal("no directory session".to_owned()))
}

pub(crate) fn secs_ms(secs: u64) -> i64 {
    i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX / 4)
}
