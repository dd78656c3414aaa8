//! `roles/:name`: a role ties a name to one existing service account.
//!
//! A write needs the config (400 `the config is currently unset`) and a `service_account_name`
//! that the directory finds under `userdn` (400 otherwise); `ttl` defaults to the config's and
//! may not exceed its `max_ttl`. Rewriting a role keeps its last rotation time unless the
//! account changes, in which case its stored passwords go (the next read rotates the new
//! account). A read adds the engine's last rotation (`last_vault_rotation`, also as
//! `last_store_rotation`) and, when the directory answers, `password_last_set`. A delete
//! leaves the account's password as it is and forgets it.

use secrets_sdk::{Data, EngineError, Operation, Request, Response, fields};
use serde_json::{Value, json};

use crate::directory::Session;
use crate::store::{self, Role};
use crate::{AdEngine, bad};

pub(crate) fn rfc3339(ms: i64) -> Value {
    Value::String(stdx::time::format_rfc3339_nanos(
        ms.saturating_mul(1_000_000),
    ))
}

impl AdEngine {
    pub(crate) async fn role(&self, name: &str) -> Result<Option<Role>, EngineError> {
        store::get(self.storage(), &format!("{}{name}", store::ROLE)).await
    }

    pub(crate) async fn handle_role(
        &self,
        request: &Request,
        name: &str,
    ) -> Result<Option<Response>, EngineError> {
        match request.operation {
            Operation::Read => self.read_role(name).await,
            Operation::Create | Operation::Update => self.write_role(request, name).await,
            Operation::Delete => {
                let _guard = self.lock.lock().await;
                for prefix in [store::ROLE, store::CREDS, store::WAL_ROLE] {
                    self.storage().delete(&format!("{prefix}{name}")).await?;
                }
                self.schedule_changed();
                Ok(None)
            }
            _ => Err(EngineError::UnsupportedOperation),
        }
    }

    async fn write_role(
        &self,
        request: &Request,
        name: &str,
    ) -> Result<Option<Response>, EngineError> {
        let data = &request.data;
        let config = self.require_config().await?;
        let account = fields::string(data, "service_account_name")?
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| bad("\"service_account_name\" is required"))?;
        let mut session = Session::open(&config, self.now_ms()).await?;
        let found = session.find_account(&account).await;
        session.close().await;
        found?;
        let ttl = match fields::duration(data, "ttl")?.map_or(0, |d| d.as_secs()) {
            0 => config.ttl,
            ttl => ttl,
        };
        if ttl > config.max_ttl {
            return Err(bad(format!(
                "requested ttl of {ttl} seconds is over the max ttl of {} seconds",
                config.max_ttl
            )));
        }
        let _guard = self.lock.lock().await;
        let old = self.role(name).await?;
        let mut role = Role {
            version: 1,
            service_account_name: account,
            ttl,
            last_rotation_ms: 0,
        };
        match old {
            Some(old) if old.service_account_name == role.service_account_name => {
                role.last_rotation_ms = old.last_rotation_ms;
            }
            Some(_) => {
                self.storage()
                    .delete(&format!("{}{name}", store::CREDS))
                    .await?;
            }
            None => {}
        }
        store::put(self.storage(), &format!("{}{name}", store::ROLE), &role).await?;
        self.schedule_changed();
        Ok(None)
    }

    async fn read_role(&self, name: &str) -> Result<Option<Response>, EngineError> {
        let Some(role) = self.role(name).await? else {
            return Ok(None);
        };
        let mut data = Data::new();
        data.insert(
            "service_account_name".into(),
            Value::String(role.service_account_name.clone()),
        );
        data.insert("ttl".into(), json!(role.ttl));
        if role.last_rotation_ms > 0 {
            data.insert("last_vault_rotation".into(), rfc3339(role.last_rotation_ms));
            data.insert("last_store_rotation".into(), rfc3339(role.last_rotation_ms));
        }
        let mut response = Response::default();
        match self.password_last_set(&role.service_account_name).await {
            Ok(Some(ms)) => {
                data.insert("password_last_set".into(), rfc3339(ms));
            }
            Ok(None) => {}
            Err(err) => {
                response
                    .warnings
                    .push(format!("could not read password_last_set: {err}"));
            }
        }
        response.data = Some(data);
        Ok(Some(response))
    }

    /// When the directory says `account`'s password last changed.
    async fn password_last_set(&self, account: &str) -> Result<Option<i64>, EngineError> {
        let config = self.require_config().await?;
        let mut session = Session::open(&config, self.now_ms()).await?;
        let found = session.find_account(account).await;
        session.close().await;
        Ok(found?.password_last_set_ms)
    }
}
