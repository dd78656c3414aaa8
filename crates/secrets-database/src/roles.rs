//! `roles/:name` (dynamic) and `static-roles/:name` (write with create vs update, read,
//! delete; LISTs in `lib.rs`), with Vault's checks: names unique across both kinds, `db_name`
//! required, a valid `credential_type` and `credential_config`; a static role needs `username`
//! (never changed later) and either `rotation_period` (at least 5 s) or a cron
//! `rotation_schedule` (with an optional `rotation_window` of at least 1 h), and its
//! connection must allow it.
//!
//! Creating a static role rotates its password at once (so the engine knows it); deleting one
//! leaves the database user as it is, and deletes its WAL.

use secrets_sdk::{Data, EngineError, Operation, Request, Response, fields};
use serde_json::{Value, json};

use crate::connections::statements;
use crate::store::{self, Credentials, Role, StaticRole};
use crate::{DatabaseEngine, bad, credentials};

/// Vault's static role minimum (its rotation queue's tick).
pub(crate) const MIN_ROTATION_PERIOD: u64 = 5;
/// Vault's minimum `rotation_window`.
const MIN_ROTATION_WINDOW: u64 = 3600;

fn strings(list: &[String]) -> Value {
    Value::Array(list.iter().cloned().map(Value::String).collect())
}

fn credential_fields(data: &Data, current: &Credentials) -> Result<Credentials, EngineError> {
    let credential_type = fields::string(data, "credential_type")?
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| {
            if current.credential_type.is_empty() {
                "password".to_owned()
            } else {
                current.credential_type.clone()
            }
        });
    let config = match fields::string_map(data, "credential_config")? {
        Some(config) => config,
        None => current.credential_config.clone(),
    };
    let config = credentials::validate(&credential_type, &config)?;
    Ok(Credentials {
        credential_type,
        credential_config: config,
    })
}

/// A cron schedule: five fields (minute first), or six with seconds first, as croner reads.
pub(crate) fn parse_schedule(raw: &str) -> Result<croner::Cron, String> {
    let seconds = raw.split_whitespace().count() == 6;
    croner::parser::CronParser::builder()
        .seconds(if seconds {
            croner::parser::Seconds::Required
        } else {
            croner::parser::Seconds::Disallowed
        })
        .build()
        .parse(raw)
        .map_err(|err| err.to_string())
}

impl DatabaseEngine {
    pub(crate) async fn handle_role(
        &self,
        request: &Request,
        name: &str,
    ) -> Result<Option<Response>, EngineError> {
        let key = format!("{}{name}", store::ROLE);
        match request.operation {
            Operation::Read => {
                let Some(role) = store::get::<Role>(self.storage(), &key).await? else {
                    return Ok(None);
                };
                let mut data = Data::new();
                data.insert("db_name".into(), Value::String(role.db_name.clone()));
                data.insert(
                    "creation_statements".into(),
                    strings(&role.creation_statements),
                );
                data.insert(
                    "revocation_statements".into(),
                    strings(&role.revocation_statements),
                );
                data.insert(
                    "rollback_statements".into(),
                    strings(&role.rollback_statements),
                );
                data.insert("renew_statements".into(), strings(&role.renew_statements));
                data.insert("default_ttl".into(), json!(role.default_ttl));
                data.insert("max_ttl".into(), json!(role.max_ttl));
                data.insert(
                    "credential_type".into(),
                    Value::String(role.credentials.credential_type.clone()),
                );
                if !role.credentials.credential_config.is_empty() {
                    data.insert(
                        "credential_config".into(),
                        json!(role.credentials.credential_config),
                    );
                }
                Ok(Some(Response::data(data)))
            }
            Operation::Delete => {
                self.storage().delete(&key).await?;
                Ok(None)
            }
            Operation::Create | Operation::Update => {
                let static_key = format!("{}{name}", store::STATIC_ROLE);
                if self.storage().get(&static_key).await?.is_some() {
                    return Err(bad("Role and Static Role names must be unique"));
                }
                let data = &request.data;
                let mut role = store::get::<Role>(self.storage(), &key)
                    .await?
                    .unwrap_or(Role {
                        version: 1,
                        ..Role::default()
                    });
                if let Some(db) = fields::string(data, "db_name")? {
                    role.db_name = db;
                }
                if role.db_name.is_empty() {
                    return Err(bad("database name is required"));
                }
                role.credentials = credential_fields(data, &role.credentials)?;
                if let Some(s) = statements(data, "creation_statements")? {
                    role.creation_statements = s;
                }
                if let Some(s) = statements(data, "revocation_statements")? {
                    role.revocation_statements = s;
                }
                if let Some(s) = statements(data, "rollback_statements")? {
                    role.rollback_statements = s;
                }
                if let Some(s) = statements(data, "renew_statements")? {
                    role.renew_statements = s;
                }
                if let Some(ttl) = fields::duration(data, "default_ttl")? {
                    role.default_ttl = ttl.as_secs();
                }
                if let Some(ttl) = fields::duration(data, "max_ttl")? {
                    role.max_ttl = ttl.as_secs();
                }
                if role.max_ttl > 0 && role.default_ttl > role.max_ttl {
                    return Err(bad("default_ttl cannot be greater than max_ttl"));
                }
                store::put(self.storage(), &key, &role).await?;
                Ok(None)
            }
            _ => Err(EngineError::UnsupportedOperation),
        }
    }

    pub(crate) async fn handle_static_role(
        &self,
        request: &Request,
        name: &str,
    ) -> Result<Option<Response>, EngineError> {
        let key = format!("{}{name}", store::STATIC_ROLE);
        match request.operation {
            Operation::Read => {
                let Some(role) = store::get::<StaticRole>(self.storage(), &key).await? else {
                    return Ok(None);
                };
                Ok(Some(Response::data(static_view(&role))))
            }
            Operation::Delete => {
                let _guard = self.rotation_lock.lock().await;
                self.storage().delete(&key).await?;
                self.storage()
                    .delete(&format!("{}{name}", store::WAL_STATIC))
                    .await?;
                self.rotation_schedule_changed();
                Ok(None)
            }
            Operation::Create | Operation::Update => self.write_static_role(request, name).await,
            _ => Err(EngineError::UnsupportedOperation),
        }
    }

    async fn write_static_role(
        &self,
        request: &Request,
        name: &str,
    ) -> Result<Option<Response>, EngineError> {
        let key = format!("{}{name}", store::STATIC_ROLE);
        if self
            .storage()
            .get(&format!("{}{name}", store::ROLE))
            .await?
            .is_some()
        {
            return Err(bad("Role and Static Role names must be unique"));
        }
        let data = &request.data;
        let _guard = self.rotation_lock.lock().await;
        let existing = store::get::<StaticRole>(self.storage(), &key).await?;
        let create = existing.is_none();
        let mut role = existing.unwrap_or(StaticRole {
            version: 1,
            ..StaticRole::default()
        });
        if let Some(db) = fields::string(data, "db_name")? {
            role.db_name = db;
        }
        if role.db_name.is_empty() {
            return Err(bad("database name is a required field"));
        }
        let username = fields::string(data, "username")?.unwrap_or_default();
        if username.is_empty() && create {
            return Err(bad(
                "username is a required field to create a static account",
            ));
        }
        if !username.is_empty() {
            if !role.username.is_empty() && role.username != username {
                return Err(bad("cannot update static account username"));
            }
            role.username = username;
        }
        let period = fields::duration(data, "rotation_period")?;
        let schedule = fields::string(data, "rotation_schedule")?.filter(|s| !s.is_empty());
        let window = fields::duration(data, "rotation_window")?;
        if period.is_some() && schedule.is_some() {
            return Err(bad(
                "mutually exclusive fields rotation_period and rotation_schedule were both specified; only one of them can be provided",
            ));
        }
        if create && period.is_none() && schedule.is_none() {
            return Err(bad(
                "one of rotation_schedule or rotation_period must be provided to create a static account",
            ));
        }
        if let Some(period) = period {
            if period.as_secs() < MIN_ROTATION_PERIOD {
                return Err(bad(format!(
                    "rotation_period must be {MIN_ROTATION_PERIOD} seconds or more"
                )));
            }
            role.rotation_period = period.as_secs();
            role.rotation_schedule.clear();
            role.rotation_window = 0;
        }
        if let Some(schedule) = schedule {
            parse_schedule(&schedule)
                .map_err(|err| bad(format!("could not parse rotation_schedule: {err}")))?;
            role.rotation_schedule = schedule;
            role.rotation_period = 0;
        }
        if let Some(window) = window {
            if role.rotation_schedule.is_empty() {
                return Err(bad(
                    "rotation_window is invalid with use of rotation_period",
                ));
            }
            if window.as_secs() != 0 && window.as_secs() < MIN_ROTATION_WINDOW {
                return Err(bad("rotation_window must be 3600 seconds or more"));
            }
            role.rotation_window = window.as_secs();
        }
        if let Some(s) = statements(data, "rotation_statements")? {
            role.rotation_statements = s;
        }
        role.credentials = credential_fields(data, &role.credentials)?;
        if role.credentials.credential_type == "client_certificate" {
            return Err(bad(
                "unsupported credential_type: \"client_certificate\" for static roles",
            ));
        }
        let connection = self.connection(&role.db_name).await?.ok_or_else(|| {
            bad(format!(
                "could not find a database connection named {:?}",
                role.db_name
            ))
        })?;
        if !connection.allows(name) {
            return Err(bad(format!("{name:?} is not an allowed role")));
        }
        if create {
            // The engine must know the password: rotate now (WAL first, see rotation.rs).
            self.rotate_static(name, role).await?;
        } else {
            role.next_rotation_ms = self.next_rotation(&role, role.last_rotation_ms)?;
            store::put(self.storage(), &key, &role).await?;
        }
        self.rotation_schedule_changed();
        Ok(None)
    }
}

/// The static role read view (Vault's fields; `last_vault_rotation` also as the spec's
/// `last_store_rotation`).
fn static_view(role: &StaticRole) -> Data {
    let mut data = Data::new();
    data.insert("db_name".into(), Value::String(role.db_name.clone()));
    data.insert("username".into(), Value::String(role.username.clone()));
    data.insert(
        "rotation_statements".into(),
        strings(&role.rotation_statements),
    );
    data.insert(
        "credential_type".into(),
        Value::String(role.credentials.credential_type.clone()),
    );
    if !role.credentials.credential_config.is_empty() {
        data.insert(
            "credential_config".into(),
            json!(role.credentials.credential_config),
        );
    }
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
    if role.last_rotation_ms > 0 {
        let at = Value::String(stdx::time::format_rfc3339_millis(role.last_rotation_ms));
        data.insert("last_vault_rotation".into(), at.clone());
        data.insert("last_store_rotation".into(), at);
    }
    data.insert(
        "next_vault_rotation".into(),
        Value::String(stdx::time::format_rfc3339_millis(role.next_rotation_ms)),
    );
    data
}
