//! Static roles' passwords: `static-creds/:name`, `rotate-role/:name`, and the scheduled
//! rotations the core's periodic hook drives ([`DatabaseEngine::run_due_rotations`]).
//!
//! A rotation writes the new password to `wal/static/<name>` first, then has the database
//! take it (`rotation_statements` or the plugin default), then stores the role with it (last
//! and next rotation times) and deletes the WAL. A WAL found later (a crash between the steps)
//! is rolled forward: the database takes the WAL's password again and the role stores it.
//! A failed rotation is retried 10 s later (Vault's), the old password staying in force.
//!
//! Scheduling: `rotation_period` rotates at `last + period`; `rotation_schedule` (cron) at the
//! next time the schedule names after the last rotation, and with a `rotation_window` a
//! rotation that could not run within the window waits for the next scheduled time. The next
//! time is stored with the role, so restarts keep the schedule (nothing rotates on start).

use std::sync::atomic::Ordering;

use secrets_sdk::{Data, EngineError, Response};
use serde_json::{Value, json};

use crate::store::{self, PendingPassword, StaticRole};
use crate::{DatabaseEngine, UNKNOWN, bad, credentials};

/// Vault's retry delay after a failed rotation.
const RETRY_MS: i64 = 10_000;
/// The longest the periodic hook trusts its cached next time before looking at storage again.
const RESCAN_MS: i64 = 60_000;

impl DatabaseEngine {
    /// When `role`, last rotated at `last_ms`, rotates next.
    pub(crate) fn next_rotation(
        &self,
        role: &StaticRole,
        last_ms: i64,
    ) -> Result<i64, EngineError> {
        if role.rotation_schedule.is_empty() {
            return Ok(last_ms + i64::try_from(role.rotation_period).unwrap_or(0) * 1000);
        }
        let cron = crate::roles::parse_schedule(&role.rotation_schedule).map_err(bad)?;
        let from = chrono::DateTime::from_timestamp_millis(last_ms)
            .unwrap_or_default()
            .with_timezone(&chrono::Utc);
        let next = cron
            .find_next_occurrence(&from, false)
            .map_err(|err| bad(format!("rotation_schedule: {err}")))?;
        Ok(next.timestamp_millis())
    }

    /// Rotates static role `name` now (the caller holds `rotation_lock`) and stores it.
    pub(crate) async fn rotate_static(
        &self,
        name: &str,
        mut role: StaticRole,
    ) -> Result<(), EngineError> {
        let (config, client) = self.client(&role.db_name).await?;
        let wal_key = format!("{}{name}", store::WAL_STATIC);
        let pending = match store::get::<PendingPassword>(self.storage(), &wal_key).await? {
            // An interrupted rotation: roll its password forward.
            Some(pending) => pending,
            None => {
                let (password, private_key) =
                    if role.credentials.credential_type == "rsa_private_key" {
                        let (public, private) =
                            credentials::rsa_key_pair(&role.credentials.credential_config)?;
                        (public, private)
                    } else {
                        let policy = role
                            .credentials
                            .credential_config
                            .get("password_policy")
                            .filter(|p| !p.is_empty())
                            .unwrap_or(&config.password_policy);
                        (self.passwords.generate(policy).await?, String::new())
                    };
                let pending = PendingPassword {
                    version: 1,
                    password,
                    private_key,
                    created_ms: self.now_ms(),
                };
                store::put(self.storage(), &wal_key, &pending).await?;
                pending
            }
        };
        client
            .change_password(&role.username, &pending.password, &role.rotation_statements)
            .await?;
        let now = self.now_ms();
        if role.credentials.credential_type == "rsa_private_key" {
            role.private_key = pending.private_key;
            role.password.clear();
        } else {
            role.password = pending.password;
        }
        role.last_rotation_ms = now;
        role.next_rotation_ms = self.next_rotation(&role, now)?;
        store::put(
            self.storage(),
            &format!("{}{name}", store::STATIC_ROLE),
            &role,
        )
        .await?;
        self.storage().delete(&wal_key).await?;
        self.rotation_schedule_changed();
        Ok(())
    }

    pub(crate) async fn static_creds(&self, name: &str) -> Result<Option<Response>, EngineError> {
        let Some(role) =
            store::get::<StaticRole>(self.storage(), &format!("{}{name}", store::STATIC_ROLE))
                .await?
        else {
            return Err(bad(format!("unknown role: {name}")));
        };
        let config = self.connection(&role.db_name).await?.ok_or_else(|| {
            bad(format!(
                "could not find a database connection named {:?}",
                role.db_name
            ))
        })?;
        if !config.allows(name) {
            return Err(bad(format!("{name:?} is not an allowed role")));
        }
        let now = self.now_ms();
        let last = Value::String(stdx::time::format_rfc3339_millis(role.last_rotation_ms));
        let mut data = Data::new();
        data.insert("username".into(), Value::String(role.username.clone()));
        if role.credentials.credential_type == "rsa_private_key" {
            data.insert(
                "rsa_private_key".into(),
                Value::String(role.private_key.clone()),
            );
        } else {
            data.insert("password".into(), Value::String(role.password.clone()));
        }
        data.insert("last_vault_rotation".into(), last.clone());
        data.insert("last_store_rotation".into(), last);
        data.insert(
            "ttl".into(),
            json!((role.next_rotation_ms - now).max(0) / 1000),
        );
        if role.rotation_schedule.is_empty() {
            data.insert("rotation_period".into(), json!(role.rotation_period));
        } else {
            data.insert(
                "rotation_schedule".into(),
                Value::String(role.rotation_schedule.clone()),
            );
            if role.rotation_window > 0 {
                data.insert("rotation_window".into(), json!(role.rotation_window));
            }
        }
        Ok(Some(Response::data(data)))
    }

    pub(crate) async fn rotate_role(&self, name: &str) -> Result<Option<Response>, EngineError> {
        let _guard = self.rotation_lock.lock().await;
        let Some(role) =
            store::get::<StaticRole>(self.storage(), &format!("{}{name}", store::STATIC_ROLE))
                .await?
        else {
            return Err(bad("no static role found for role name"));
        };
        self.rotate_static(name, role).await?;
        Ok(None)
    }

    /// The periodic hook: cheap unless something is due (or the cache is unknown), then rolls
    /// interrupted root and static rotations forward and rotates every static role due.
    pub(crate) async fn run_due_rotations(&self) -> Result<(), EngineError> {
        let now = self.now_ms();
        let next = self.next_rotation_check.load(Ordering::SeqCst);
        if next != UNKNOWN && now < next {
            return Ok(());
        }
        let _guard = self.rotation_lock.lock().await;
        for name in self.storage().list(store::WAL_ROOT).await? {
            if let Err(err) = self.roll_forward_root(&name).await {
                tracing::warn!(connection = %name, error = %err, "rolling a root rotation forward failed");
            }
        }
        let mut earliest = now + RESCAN_MS;
        let wals = self.storage().list(store::WAL_STATIC).await?;
        for name in self.storage().list(store::STATIC_ROLE).await? {
            let key = format!("{}{name}", store::STATIC_ROLE);
            let Some(mut role) = store::get::<StaticRole>(self.storage(), &key).await? else {
                continue;
            };
            let interrupted = wals.contains(&name);
            if !interrupted && role.next_rotation_ms > now {
                earliest = earliest.min(role.next_rotation_ms);
                continue;
            }
            // A scheduled time whose window passed: wait for the next one.
            if !interrupted
                && role.rotation_window > 0
                && now
                    > role.next_rotation_ms
                        + i64::try_from(role.rotation_window).unwrap_or(0) * 1000
            {
                role.next_rotation_ms = self.next_rotation(&role, now)?;
                store::put(self.storage(), &key, &role).await?;
                earliest = earliest.min(role.next_rotation_ms);
                continue;
            }
            if let Err(err) = self.rotate_static(&name, role).await {
                tracing::warn!(role = %name, error = %err, "static role rotation failed; retrying in 10s");
                earliest = earliest.min(now + RETRY_MS);
            }
        }
        for name in wals {
            // A WAL whose role is gone is dropped (Vault deletes WALs with their role).
            if self
                .storage()
                .get(&format!("{}{name}", store::STATIC_ROLE))
                .await?
                .is_none()
            {
                self.storage()
                    .delete(&format!("{}{name}", store::WAL_STATIC))
                    .await?;
            }
        }
        // Rotations above reset the cache to UNKNOWN; set it from what was seen.
        self.next_rotation_check.store(earliest, Ordering::SeqCst);
        Ok(())
    }
}
