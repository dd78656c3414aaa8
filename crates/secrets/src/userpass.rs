//! The `userpass` auth method (Vault's `builtin/credential/userpass`): users with hashed
//! passwords, and `login/:username` returning a login `auth` that the core turns into a token
//! bound to an identity entity.
//!
//! Paths (relative to the mount, e.g. `auth/userpass/`): `users/:username` (POST create or
//! update: `password`, `token_policies`/`policies`, `token_ttl`/`ttl`,
//! `token_max_ttl`/`max_ttl`, `token_period`/`period`; GET without the password; DELETE),
//! LIST `users`, `users/:username/password`, `users/:username/policies`, and
//! `login/:username` {password} (unauthenticated). Usernames are lower-cased, as Vault.
//!
//! Storage (the mount's view, `auth/<mount uuid>/`): `user/<username>` → [`User`].
//!
//! Passwords: PBKDF2-HMAC-SHA256 with a 16-byte random salt and 600,000 iterations (OWASP's
//! 2023 figure), stored as `pbkdf2-sha256$<iterations>$<salt hex>$<hash hex>` so the cost can
//! be raised later without breaking old hashes. PBKDF2 comes from aws-lc-rs, already the
//! project's one crypto stack, so it adds no dependency and no build time (argon2 would add a
//! crate and be slow in unoptimised test builds). Hashing runs on the blocking pool.
//!
//! Invariants: a password is never stored, returned or logged in clear; a wrong password and
//! an unknown user answer the same 400 `invalid username or password`, and both pay for one
//! hash so timing does not tell them apart.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use secrets_sdk::{
    Auth, Data, Engine, EngineConfig, EngineError, EngineStorage, Operation, Request, Response,
    SpecialPaths, fields,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stdx::hex;

const ITERATIONS: u32 = 600_000;
const SALT_LEN: usize = 16;
const HASH_LEN: usize = 32;
const INVALID: &str = "invalid username or password";

/// Builds the userpass method for one mount.
pub(crate) fn factory(config: EngineConfig) -> Result<Arc<dyn Engine>, EngineError> {
    Ok(Arc::new(Userpass {
        storage: config.storage,
    }))
}

#[derive(Debug)]
struct Userpass {
    storage: Arc<dyn EngineStorage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    version: u32,
    password_hash: String,
    policies: Vec<String>,
    /// Seconds.
    ttl: u64,
    max_ttl: u64,
    period: u64,
}

fn bad(msg: impl Into<String>) -> EngineError {
    EngineError::BadRequest(msg.into())
}

fn hash_password(password: &str) -> Result<String, EngineError> {
    let mut salt = [0u8; SALT_LEN];
    aws_lc_rs::rand::fill(&mut salt).map_err(|_| EngineError::Internal("no randomness".into()))?;
    let mut out = [0u8; HASH_LEN];
    let iterations = NonZeroU32::new(ITERATIONS).unwrap_or(NonZeroU32::MIN);
    aws_lc_rs::pbkdf2::derive(
        aws_lc_rs::pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        &salt,
        password.as_bytes(),
        &mut out,
    );
    Ok(format!(
        "pbkdf2-sha256${ITERATIONS}${}${}",
        hex::encode(&salt),
        hex::encode(&out)
    ))
}

/// Constant-time check of `password` against a stored hash; `None` hashes a dummy so an
/// unknown user costs the same.
fn verify_password(stored: Option<&str>, password: &str) -> bool {
    let parsed = stored.and_then(|s| {
        let mut parts = s.split('$');
        let scheme = parts.next()?;
        let iterations: u32 = parts.next()?.parse().ok()?;
        let salt = hex::decode(parts.next()?)?;
        let hash = hex::decode(parts.next()?)?;
        (scheme == "pbkdf2-sha256").then_some((NonZeroU32::new(iterations)?, salt, hash))
    });
    let (iterations, salt, hash, real) = match parsed {
        Some((i, s, h)) => (i, s, h, true),
        None => (
            NonZeroU32::new(ITERATIONS).unwrap_or(NonZeroU32::MIN),
            vec![0u8; SALT_LEN],
            vec![0u8; HASH_LEN],
            false,
        ),
    };
    let ok = aws_lc_rs::pbkdf2::verify(
        aws_lc_rs::pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        &salt,
        password.as_bytes(),
        &hash,
    )
    .is_ok();
    ok && real
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, EngineError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|err| EngineError::Internal(format!("password hashing: {err}")))
}

fn user_key(name: &str) -> String {
    format!("user/{name}")
}

fn username(raw: &str) -> Result<String, EngineError> {
    let name = raw.trim().to_lowercase();
    if name.is_empty() || name.contains('/') {
        return Err(bad("missing username"));
    }
    Ok(name)
}

fn secs(data: &Data, new: &str, old: &str) -> Result<Option<u64>, EngineError> {
    Ok(match fields::duration(data, new)? {
        Some(d) => Some(d.as_secs()),
        None => fields::duration(data, old)?.map(|d| d.as_secs()),
    })
}

fn policies(data: &Data) -> Result<Option<Vec<String>>, EngineError> {
    let list = match fields::comma_list(data, "token_policies")? {
        Some(list) => Some(list),
        None => fields::comma_list(data, "policies")?,
    };
    Ok(list.map(|l| crate::policy::names::sanitize_policies(&l, false)))
}

const USER_FIELDS: &[&str] = &[
    "username",
    "password",
    "policies",
    "token_policies",
    "ttl",
    "token_ttl",
    "max_ttl",
    "token_max_ttl",
    "period",
    "token_period",
];

impl Userpass {
    async fn user(&self, name: &str) -> Result<Option<User>, EngineError> {
        match self.storage.get(&user_key(name)).await? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|err| EngineError::Internal(format!("corrupt user record: {err}"))),
        }
    }

    async fn save(&self, name: &str, user: &User) -> Result<(), EngineError> {
        let bytes = serde_json::to_vec(user)
            .map_err(|err| EngineError::Internal(format!("encoding a user: {err}")))?;
        self.storage.put(&user_key(name), &bytes).await?;
        Ok(())
    }

    async fn write_user(&self, name: &str, data: &Data) -> Result<Option<Response>, EngineError> {
        let existing = self.user(name).await?;
        let password = fields::string(data, "password")?.filter(|p| !p.is_empty());
        let mut user = match (existing, &password) {
            (Some(user), _) => user,
            (None, None) => return Err(bad("missing password")),
            (None, Some(_)) => User {
                version: 1,
                password_hash: String::new(),
                policies: Vec::new(),
                ttl: 0,
                max_ttl: 0,
                period: 0,
            },
        };
        if let Some(password) = password {
            user.password_hash = blocking(move || hash_password(&password)).await??;
        }
        if let Some(list) = policies(data)? {
            user.policies = list;
        }
        if let Some(ttl) = secs(data, "token_ttl", "ttl")? {
            user.ttl = ttl;
        }
        if let Some(max) = secs(data, "token_max_ttl", "max_ttl")? {
            user.max_ttl = max;
        }
        if let Some(period) = secs(data, "token_period", "period")? {
            user.period = period;
        }
        if user.max_ttl > 0 && user.ttl > user.max_ttl {
            return Err(bad(
                "\"token_ttl\" value must be less than \"token_max_ttl\" value",
            ));
        }
        self.save(name, &user).await?;
        Ok(fields::unknown_warning(data, USER_FIELDS).map(|w| Response::default().with_warning(w)))
    }

    fn read_user(user: &User) -> Response {
        let data = json!({
            "policies": user.policies,
            "token_policies": user.policies,
            "ttl": user.ttl,
            "token_ttl": user.ttl,
            "max_ttl": user.max_ttl,
            "token_max_ttl": user.max_ttl,
            "period": user.period,
            "token_period": user.period,
            "token_explicit_max_ttl": 0,
            "token_no_default_policy": false,
            "token_num_uses": 0,
            "token_type": "default",
            "token_bound_cidrs": [],
            "bound_cidrs": [],
        });
        match data {
            Value::Object(map) => Response::data(map),
            _ => Response::default(),
        }
    }

    async fn login(&self, name: &str, data: &Data) -> Result<Option<Response>, EngineError> {
        let password = fields::string(data, "password")?.unwrap_or_default();
        if password.is_empty() {
            return Err(bad("missing password"));
        }
        let user = self.user(name).await?;
        let stored = user.as_ref().map(|u| u.password_hash.clone());
        let ok = blocking(move || verify_password(stored.as_deref(), &password)).await?;
        let (true, Some(user)) = (ok, user) else {
            return Err(bad(INVALID));
        };
        let mut metadata = BTreeMap::new();
        metadata.insert("username".to_owned(), name.to_owned());
        let nonzero = |s: u64| (s > 0).then(|| Duration::from_secs(s));
        Ok(Some(Response {
            auth: Some(Auth {
                policies: user.policies.clone(),
                display_name: name.to_owned(),
                metadata,
                alias_name: name.to_owned(),
                ttl: nonzero(user.ttl),
                max_ttl: nonzero(user.max_ttl),
                period: nonzero(user.period),
                renewable: true,
            }),
            ..Response::default()
        }))
    }
}

#[async_trait]
impl Engine for Userpass {
    async fn handle(&self, request: Request) -> Result<Option<Response>, EngineError> {
        let op = request.operation;
        let write = matches!(op, Operation::Create | Operation::Update);
        let data = &request.data;
        let segments: Vec<&str> = request.path.trim_end_matches('/').split('/').collect();
        match (segments.as_slice(), op) {
            (["users"], Operation::List) => {
                let keys: Vec<String> = self
                    .storage
                    .list("user/")
                    .await?
                    .into_iter()
                    .filter(|k| !k.ends_with('/'))
                    .collect();
                Ok((!keys.is_empty()).then(|| Response::list(keys)))
            }
            (["users", name], Operation::Read) => {
                let name = username(name)?;
                Ok(self.user(&name).await?.as_ref().map(Self::read_user))
            }
            (["users", name], _) if write => self.write_user(&username(name)?, data).await,
            (["users", name], Operation::Delete) => {
                self.storage.delete(&user_key(&username(name)?)).await?;
                Ok(None)
            }
            (["users", name, "password"], _) if write => {
                let name = username(name)?;
                let mut user = self
                    .user(&name)
                    .await?
                    .ok_or_else(|| bad("username does not exist"))?;
                let password = fields::string(data, "password")?
                    .filter(|p| !p.is_empty())
                    .ok_or_else(|| bad("missing password"))?;
                user.password_hash = blocking(move || hash_password(&password)).await??;
                self.save(&name, &user).await?;
                Ok(None)
            }
            (["users", name, "policies"], _) if write => {
                let name = username(name)?;
                let mut user = self
                    .user(&name)
                    .await?
                    .ok_or_else(|| bad("username does not exist"))?;
                user.policies = policies(data)?.unwrap_or_default();
                self.save(&name, &user).await?;
                Ok(None)
            }
            (["login", name], _) if write => match username(name) {
                Ok(name) => self.login(&name, data).await,
                Err(_) => Err(bad(INVALID)),
            },
            (["users" | "login", ..], _) => Err(EngineError::UnsupportedOperation),
            _ => Err(EngineError::UnsupportedPath),
        }
    }

    async fn exists(&self, request: &Request) -> Result<Option<bool>, EngineError> {
        let segments: Vec<&str> = request.path.trim_end_matches('/').split('/').collect();
        match segments.as_slice() {
            ["users", name] => match username(name) {
                Ok(name) => Ok(Some(self.user(&name).await?.is_some())),
                Err(_) => Ok(None),
            },
            _ => Ok(None),
        }
    }

    fn special_paths(&self) -> SpecialPaths {
        SpecialPaths {
            unauthenticated: vec!["login".to_owned(), "login/*".to_owned()],
            root: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use secrets_sdk::testing::engine_with_mem_storage;

    use super::*;

    fn data(value: Value) -> Data {
        value.as_object().cloned().unwrap_or_default()
    }

    fn req(op: Operation, path: &str, body: Value) -> Request {
        Request::new(op, path).with_data(data(body))
    }

    #[tokio::test]
    async fn passwords_are_stored_hashed_and_logins_check_them() {
        let (engine, storage) = engine_with_mem_storage(factory, "auth/userpass/").unwrap();
        engine
            .handle(req(
                Operation::Create,
                "users/Alice",
                json!({"password": "s3cret-pw", "token_policies": "dev,ops"}),
            ))
            .await
            .unwrap();
        let raw = storage.get("user/alice").await.unwrap().unwrap();
        let text = String::from_utf8(raw).unwrap();
        assert!(!text.contains("s3cret-pw"));
        assert!(text.contains("pbkdf2-sha256$600000$"));

        let read = engine
            .handle(req(Operation::Read, "users/alice", json!({})))
            .await
            .unwrap()
            .unwrap();
        let read = read.data.unwrap();
        assert!(!read.contains_key("password"));
        assert_eq!(read["token_policies"], json!(["dev", "ops"]));

        let login = engine
            .handle(req(
                Operation::Update,
                "login/alice",
                json!({"password": "s3cret-pw"}),
            ))
            .await
            .unwrap()
            .unwrap();
        let auth = login.auth.unwrap();
        assert_eq!(auth.policies, vec!["dev", "ops"]);
        assert_eq!(auth.alias_name, "alice");
        assert_eq!(auth.metadata["username"], "alice");

        for (user, pw) in [("alice", "wrong"), ("nobody", "s3cret-pw")] {
            let err = engine
                .handle(req(
                    Operation::Update,
                    &format!("login/{user}"),
                    json!({"password": pw}),
                ))
                .await
                .unwrap_err();
            assert_eq!(err, EngineError::BadRequest(INVALID.to_owned()));
        }
    }

    #[tokio::test]
    async fn creating_a_user_needs_a_password_and_password_updates_take_effect() {
        let (engine, _) = engine_with_mem_storage(factory, "auth/userpass/").unwrap();
        let err = engine
            .handle(req(
                Operation::Create,
                "users/bob",
                json!({"policies": "x"}),
            ))
            .await
            .unwrap_err();
        assert_eq!(err, EngineError::BadRequest("missing password".to_owned()));
        engine
            .handle(req(
                Operation::Create,
                "users/bob",
                json!({"password": "one"}),
            ))
            .await
            .unwrap();
        engine
            .handle(req(
                Operation::Update,
                "users/bob/password",
                json!({"password": "two"}),
            ))
            .await
            .unwrap();
        assert!(
            engine
                .handle(req(
                    Operation::Update,
                    "login/bob",
                    json!({"password": "one"})
                ))
                .await
                .is_err()
        );
        assert!(
            engine
                .handle(req(
                    Operation::Update,
                    "login/bob",
                    json!({"password": "two"})
                ))
                .await
                .is_ok()
        );
        let list = engine
            .handle(req(Operation::List, "users/", json!({})))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(list.data.unwrap()["keys"], json!(["bob"]));
        assert_eq!(
            engine.special_paths().unauthenticated,
            vec!["login".to_owned(), "login/*".to_owned()]
        );
    }
}
