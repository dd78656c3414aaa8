//! `library/:set`: sets of service accounts lent out one at a time (check-out under a lease,
//! check-in by the borrower, by a privileged caller on `library/manage/:set/check-in`, or when
//! the lease expires or is revoked), with `status` showing who holds what.
//!
//! Creating a set (or adding accounts to it) needs the config, accounts the directory finds
//! and that no other set manages (400 `"x" is already managed by another set`); each joining
//! account is checked in, so its password rotates at once. `ttl` and `max_ttl` default to 24h,
//! 0 meaning unlimited, and `max_ttl` may not be below `ttl`. An account cannot leave, nor a
//! set be deleted, while checked out.
//!
//! Check-out lends the first available account: 200 with a renewable lease of the set's `ttl`
//! (a requested `ttl` may only shorten it, or set one when the set's is unlimited) whose
//! renewals end at the set's `max_ttl`, and `password` and `service_account_name` in `data`;
//! none available is 400 `No service accounts available for check-out.`. The borrower's
//! entity, token accessor and token hash are recorded. Check-in (caller rules as upstream: the
//! same entity or token, unless the set has `disable_check_in_enforcement` or the manage path is
//! used) rotates each account's password and makes it available; `data.check_ins` lists the
//! accounts this call checked in. Each check-out carries a random id in its lease, so a lease
//! that ends after its account was checked in (and maybe lent again) checks in nothing.

use std::time::Duration;

use secrets_sdk::{Data, EngineError, Lease, LeaseOptions, Operation, Request, Response, fields};
use serde_json::{Value, json};

use crate::directory::Session;
use crate::store::{self, CheckOut, Config, LibrarySet};
use crate::{AdEngine, bad, seconds};

/// The default `ttl` and `max_ttl` of a set: 24h.
const DEFAULT_SET_TTL: u64 = 24 * 3600;

fn random_id() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..24)
        .map(|_| char::from(b"0123456789abcdefghijklmnopqrstuvwxyz"[rng.random_range(0..36)]))
        .collect()
}

fn validate(set: &LibrarySet) -> Result<(), EngineError> {
    if set.service_account_names.is_empty() {
        return Err(bad("at least one service account must be configured"));
    }
    if set.max_ttl > 0 && set.max_ttl < set.ttl {
        return Err(bad(format!(
            "max_ttl ({} seconds) may not be less than ttl ({} seconds)",
            set.max_ttl, set.ttl
        )));
    }
    Ok(())
}

/// Whether the caller of `request` is the borrower of `checkout`.
fn is_borrower(request: &Request, checkout: &CheckOut) -> bool {
    let Some(auth) = &request.auth else {
        return false;
    };
    let entity = auth.entity_id.as_deref().unwrap_or("");
    (!checkout.borrower_entity_id.is_empty() && checkout.borrower_entity_id == entity)
        || (!checkout.borrower_token_hash.is_empty()
            && checkout.borrower_token_hash == auth.token_hash)
}

impl AdEngine {
    async fn set(&self, name: &str) -> Result<Option<LibrarySet>, EngineError> {
        store::get(self.storage(), &format!("{}{name}", store::LIBRARY)).await
    }

    async fn checkout(&self, account: &str) -> Result<Option<CheckOut>, EngineError> {
        store::get(self.storage(), &format!("{}{account}", store::CHECKOUT)).await
    }

    pub(crate) async fn handle_set(
        &self,
        request: &Request,
        name: &str,
    ) -> Result<Option<Response>, EngineError> {
        match request.operation {
            Operation::Read => self.read_set(name).await,
            Operation::Create | Operation::Update => self.write_set(request, name).await,
            Operation::Delete => self.delete_set(name).await,
            _ => Err(EngineError::UnsupportedOperation),
        }
    }

    async fn read_set(&self, name: &str) -> Result<Option<Response>, EngineError> {
        let Some(set) = self.set(name).await? else {
            return Ok(None);
        };
        let mut data = Data::new();
        data.insert(
            "service_account_names".into(),
            json!(set.service_account_names),
        );
        data.insert("ttl".into(), json!(set.ttl));
        data.insert("max_ttl".into(), json!(set.max_ttl));
        data.insert(
            "disable_check_in_enforcement".into(),
            Value::Bool(set.disable_check_in_enforcement),
        );
        Ok(Some(Response::data(data)))
    }

    async fn write_set(
        &self,
        request: &Request,
        name: &str,
    ) -> Result<Option<Response>, EngineError> {
        let data = &request.data;
        let config = self.require_config().await?;
        let names = fields::comma_list(data, "service_account_names")?;
        let ttl = fields::duration(data, "ttl")?.map(|d| d.as_secs());
        let max_ttl = fields::duration(data, "max_ttl")?.map(|d| d.as_secs());
        let enforcement = fields::bool(data, "disable_check_in_enforcement")?;
        let _guard = self.lock.lock().await;
        let existing = self.set(name).await?;
        let creating = existing.is_none();
        if creating && names.as_ref().is_none_or(Vec::is_empty) {
            return Err(bad("\"service_account_names\" must be provided"));
        }
        let mut set = existing.clone().unwrap_or(LibrarySet {
            version: 1,
            service_account_names: Vec::new(),
            ttl: DEFAULT_SET_TTL,
            max_ttl: DEFAULT_SET_TTL,
            disable_check_in_enforcement: false,
        });
        let old_names = set.service_account_names.clone();
        if let Some(mut names) = names {
            names.dedup();
            set.service_account_names = names;
        }
        // Upstream resets unsent fields to their defaults on update.
        set.ttl = ttl.unwrap_or(if creating { DEFAULT_SET_TTL } else { set.ttl });
        set.max_ttl = max_ttl.unwrap_or(if creating {
            DEFAULT_SET_TTL
        } else {
            set.max_ttl
        });
        set.disable_check_in_enforcement = enforcement.unwrap_or(false);
        let joining: Vec<String> = set
            .service_account_names
            .iter()
            .filter(|n| !old_names.contains(n))
            .cloned()
            .collect();
        let leaving: Vec<String> = old_names
            .iter()
            .filter(|n| !set.service_account_names.contains(n))
            .cloned()
            .collect();
        for account in &joining {
            if self.checkout(account).await?.is_some() {
                return Err(bad(format!(
                    "{account:?} is already managed by another set"
                )));
            }
        }
        for account in &leaving {
            if self.checkout(account).await?.is_some_and(|c| !c.available) {
                return Err(bad(format!(
                    "{account:?} can't be deleted because it is currently checked out"
                )));
            }
        }
        validate(&set)?;
        if !joining.is_empty() {
            let mut session = Session::open(&config, self.now_ms()).await?;
            let result = async {
                for account in &joining {
                    session.find_account(account).await?;
                }
                for account in &joining {
                    self.check_in_locked(&mut session, &config, account).await?;
                }
                Ok::<(), EngineError>(())
            }
            .await;
            session.close().await;
            result?;
        }
        for account in &leaving {
            self.forget_account(account).await?;
        }
        store::put(self.storage(), &format!("{}{name}", store::LIBRARY), &set).await?;
        Ok(None)
    }

    async fn forget_account(&self, account: &str) -> Result<(), EngineError> {
        for prefix in [store::PASSWORD, store::CHECKOUT, store::WAL_ACCOUNT] {
            self.storage().delete(&format!("{prefix}{account}")).await?;
        }
        Ok(())
    }

    async fn delete_set(&self, name: &str) -> Result<Option<Response>, EngineError> {
        let _guard = self.lock.lock().await;
        let Some(set) = self.set(name).await? else {
            return Ok(None);
        };
        for account in &set.service_account_names {
            if self.checkout(account).await?.is_some_and(|c| !c.available) {
                return Err(bad(format!(
                    "{account:?} can't be deleted because it is currently checked out"
                )));
            }
        }
        for account in &set.service_account_names {
            self.forget_account(account).await?;
        }
        self.storage()
            .delete(&format!("{}{name}", store::LIBRARY))
            .await?;
        Ok(None)
    }

    /// Gives `account` a new password and makes it available; the caller holds the lock.
    pub(crate) async fn check_in_locked(
        &self,
        session: &mut Session,
        config: &Config,
        account: &str,
    ) -> Result<(), EngineError> {
        let entry = session.find_account(account).await?;
        let wal_key = format!("{}{account}", store::WAL_ACCOUNT);
        let password = self
            .set_new_password(session, config, &wal_key, &entry.dn)
            .await?;
        store::put(
            self.storage(),
            &format!("{}{account}", store::PASSWORD),
            &password,
        )
        .await?;
        store::put(
            self.storage(),
            &format!("{}{account}", store::CHECKOUT),
            &CheckOut::available(),
        )
        .await?;
        self.storage().delete(&wal_key).await?;
        tracing::info!(account = %account, "checked in; the password was rotated");
        Ok(())
    }

    pub(crate) async fn check_out(
        &self,
        request: &Request,
        name: &str,
    ) -> Result<Option<Response>, EngineError> {
        let requested = fields::duration(&request.data, "ttl")?;
        let _guard = self.lock.lock().await;
        let Some(set) = self.set(name).await? else {
            return Err(bad(format!("{name:?} doesn't exist")));
        };
        let mut ttl = set.ttl;
        if let Some(requested) = requested.map(|d| d.as_secs())
            && ((set.ttl == 0 && requested > 0) || (set.ttl > 0 && requested < set.ttl))
        {
            ttl = requested;
        }
        for account in &set.service_account_names {
            let Some(current) = self.checkout(account).await? else {
                continue;
            };
            if !current.available {
                continue;
            }
            let password: String =
                store::get(self.storage(), &format!("{}{account}", store::PASSWORD))
                    .await?
                    .ok_or_else(|| {
                        EngineError::Internal(format!("no stored password for {account:?}"))
                    })?;
            let auth = request.auth.as_deref().cloned().unwrap_or_default();
            let checkout = CheckOut {
                version: 1,
                available: false,
                borrower_entity_id: auth.entity_id.unwrap_or_default(),
                borrower_accessor: auth.accessor,
                borrower_token_hash: auth.token_hash,
                checkout_id: random_id(),
            };
            store::put(
                self.storage(),
                &format!("{}{account}", store::CHECKOUT),
                &checkout,
            )
            .await?;
            let mut data = Data::new();
            data.insert(
                "service_account_name".into(),
                Value::String(account.clone()),
            );
            data.insert("password".into(), Value::String(password));
            let mut internal = Data::new();
            internal.insert(
                "service_account_name".into(),
                Value::String(account.clone()),
            );
            internal.insert("set_name".into(), Value::String(name.to_owned()));
            internal.insert(
                "checkout_id".into(),
                Value::String(checkout.checkout_id.clone()),
            );
            let mut response = Response::data(data);
            response.secret = Some(LeaseOptions {
                ttl: seconds(ttl),
                max_ttl: (set.max_ttl > 0).then(|| seconds(set.max_ttl)),
                renewable: true,
                internal,
            });
            return Ok(Some(response));
        }
        Err(bad("No service accounts available for check-out."))
    }

    pub(crate) async fn check_in(
        &self,
        request: &Request,
        name: &str,
        manage: bool,
    ) -> Result<Option<Response>, EngineError> {
        let requested =
            fields::comma_list(&request.data, "service_account_names")?.unwrap_or_default();
        let config = self.require_config().await?;
        let _guard = self.lock.lock().await;
        let Some(set) = self.set(name).await? else {
            return Err(bad(format!("{name:?} doesn't exist")));
        };
        let unenforced = manage || set.disable_check_in_enforcement;
        let mut to_check_in = Vec::new();
        if requested.is_empty() {
            for account in &set.service_account_names {
                let Some(checkout) = self.checkout(account).await? else {
                    continue;
                };
                if checkout.available || (!unenforced && !is_borrower(request, &checkout)) {
                    continue;
                }
                to_check_in.push(account.clone());
            }
            if to_check_in.len() > 1 {
                return Err(bad(
                    "when multiple service accounts are checked out, the \"service_account_names\" to check in must be provided",
                ));
            }
        } else {
            for account in &requested {
                if !set.service_account_names.contains(account) {
                    return Err(bad(format!("{account:?} is not managed by set {name:?}")));
                }
                let Some(checkout) = self.checkout(account).await? else {
                    continue;
                };
                if checkout.available {
                    continue;
                }
                if !unenforced && !is_borrower(request, &checkout) {
                    return Err(bad(format!(
                        "{account:?} can't be checked in because it wasn't checked out by the caller"
                    )));
                }
                if !to_check_in.contains(account) {
                    to_check_in.push(account.clone());
                }
            }
        }
        if !to_check_in.is_empty() {
            let mut session = Session::open(&config, self.now_ms()).await?;
            let result = async {
                for account in &to_check_in {
                    self.check_in_locked(&mut session, &config, account).await?;
                }
                Ok::<(), EngineError>(())
            }
            .await;
            session.close().await;
            result?;
        }
        let mut data = Data::new();
        data.insert("check_ins".into(), json!(to_check_in));
        Ok(Some(Response::data(data)))
    }

    pub(crate) async fn status(&self, name: &str) -> Result<Option<Response>, EngineError> {
        let Some(set) = self.set(name).await? else {
            return Err(bad(format!("{name:?} doesn't exist")));
        };
        let mut data = Data::new();
        for account in &set.service_account_names {
            let Some(checkout) = self.checkout(account).await? else {
                continue;
            };
            let mut status = Data::new();
            status.insert("available".into(), Value::Bool(checkout.available));
            if !checkout.available {
                if !checkout.borrower_accessor.is_empty() {
                    status.insert(
                        "borrower_client_token".into(),
                        Value::String(checkout.borrower_accessor),
                    );
                }
                if !checkout.borrower_entity_id.is_empty() {
                    status.insert(
                        "borrower_entity_id".into(),
                        Value::String(checkout.borrower_entity_id),
                    );
                }
            }
            data.insert(account.clone(), Value::Object(status));
        }
        Ok(Some(Response::data(data)))
    }

    /// The check-out a lease holds, if it is still the account's current one.
    async fn leased_checkout(
        &self,
        lease: &Lease,
    ) -> Result<Option<(String, CheckOut)>, EngineError> {
        let account = fields::string(&lease.internal, "service_account_name")?.unwrap_or_default();
        let id = fields::string(&lease.internal, "checkout_id")?.unwrap_or_default();
        let Some(checkout) = self.checkout(&account).await? else {
            return Ok(None);
        };
        if checkout.available || (!id.is_empty() && checkout.checkout_id != id) {
            return Ok(None);
        }
        Ok(Some((account, checkout)))
    }

    /// A check-out lease expired or was revoked: check its account in.
    pub(crate) async fn end_check_out(&self, lease: &Lease) -> Result<(), EngineError> {
        let _guard = self.lock.lock().await;
        let Some((account, _)) = self.leased_checkout(lease).await? else {
            return Ok(());
        };
        let config = self.require_config().await?;
        let mut session = Session::open(&config, self.now_ms()).await?;
        let result = self.check_in_locked(&mut session, &config, &account).await;
        session.close().await;
        result
    }

    /// Renewing a check-out lease: the set's `ttl` again (the core caps it at the lease's max),
    /// unless the account was checked in meanwhile.
    pub(crate) async fn renew_check_out(&self, lease: &Lease) -> Result<Duration, EngineError> {
        let set_name = fields::string(&lease.internal, "set_name")?.unwrap_or_default();
        let _guard = self.lock.lock().await;
        let Some(set) = self.set(&set_name).await? else {
            return Err(bad(format!("{set_name:?} doesn't exist")));
        };
        if self.leased_checkout(lease).await?.is_none() {
            let account =
                fields::string(&lease.internal, "service_account_name")?.unwrap_or_default();
            return Err(bad(format!(
                "{account} is already checked in, please call check-out to regain it"
            )));
        }
        Ok(match set.ttl {
            0 => lease.increment.unwrap_or(Duration::ZERO),
            ttl => seconds(ttl),
        })
    }
}
