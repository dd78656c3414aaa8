//! Password policies (paths relative to `sys/`), as Vault's `sys/policies/password`:
//!
//! - `policies/password/:name` POST/PUT `{policy}` → 204 (the HCL document, optionally
//!   base64), GET → `{policy}`, DELETE → 204 (also when missing);
//! - `policies/password/:name/generate` GET → `{password}`;
//! - `policies/password` LIST → `keys`.
//!
//! The language itself is `secrets_sdk::password` (pure); engines generate from a named policy
//! through the [`Source`] the core hands every engine in its `EngineConfig`.
//!
//! Vault's checks on write: a parse error is 400 `invalid password policy: ...`; a length
//! outside 4..=100 is 400 `passwords must be between 4 and 100 characters`; ten trial
//! generations must all succeed (400 otherwise, naming the rules impossible or too
//! restrictive). A missing policy reads and generates as upstream's 404
//! `{"errors":["policy does not exist"]}`.
//!
//! Keys (through the barrier): `sys/password_policy/<name>` → `{"version":1,"policy":raw}`.
//! Invariant: only a policy that parsed and generated is ever stored.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use secrets_sdk::{Data, EngineError, Operation, PasswordPolicy, Request, Response, fields};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::barrier::Barrier;
use crate::request::RequestContext;
use crate::{Error, State};

const KEY_PREFIX: &str = "sys/password_policy/";
const MIN_LENGTH: usize = 4;
const MAX_LENGTH: usize = 100;
const TRIALS: usize = 10;

#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    version: u32,
    policy: String,
}

/// Serves `sys/policies/password[/...]` (the path relative to `sys/`).
pub(crate) async fn handle(
    state: &State,
    _ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    let path = req.path.strip_prefix("sys/").unwrap_or(&req.path);
    let rest = path
        .strip_prefix("policies/password")
        .ok_or(Error::UnsupportedPath)?;
    let name = rest.trim_start_matches('/');
    if name.is_empty() {
        return match req.operation {
            Operation::List => {
                let keys = state.barrier().list(KEY_PREFIX).await?;
                Ok(Some(Response::list(keys)))
            }
            _ => Err(Error::UnsupportedOperation),
        };
    }
    if let Some(name) = name.strip_suffix("/generate") {
        if req.operation != Operation::Read {
            return Err(Error::UnsupportedOperation);
        }
        let Some(policy) = load(state.barrier(), name).await? else {
            return Err(missing());
        };
        let password = policy.generate().map_err(|err| {
            Error::InvalidParameter(format!("failed to generate password from policy: {err}"))
        })?;
        let mut data = Data::new();
        data.insert("password".to_owned(), Value::String(password));
        return Ok(Some(Response::data(data)));
    }
    if name.contains('/') {
        return Err(Error::UnsupportedPath);
    }
    let key = format!("{KEY_PREFIX}{name}");
    match req.operation {
        Operation::Read => match state.barrier().get(&key).await? {
            None => Err(missing()),
            Some(bytes) => {
                let stored = decode(&key, &bytes)?;
                let mut data = Data::new();
                data.insert("policy".to_owned(), Value::String(stored.policy));
                Ok(Some(Response::data(data)))
            }
        },
        Operation::Create | Operation::Update => {
            let raw = fields::string(&req.data, "policy")?.unwrap_or_default();
            if raw.is_empty() {
                return Err(Error::InvalidParameter("missing policy".to_owned()));
            }
            let raw = match base64::engine::general_purpose::STANDARD.decode(raw.trim()) {
                Ok(bytes) => String::from_utf8(bytes).unwrap_or(raw),
                Err(_) => raw,
            };
            validate(&raw)?;
            let stored = Stored {
                version: 1,
                policy: raw,
            };
            let bytes = serde_json::to_vec(&stored).map_err(|err| Error::CorruptRecord {
                key: key.clone(),
                reason: err.to_string(),
            })?;
            state.barrier().put(&key, &bytes).await?;
            Ok(None)
        }
        Operation::Delete => {
            state.barrier().delete(&key).await?;
            Ok(None)
        }
        Operation::List | Operation::Patch => Err(Error::UnsupportedOperation),
    }
}

/// Upstream's 404 for a policy that is not there (read and generate alike).
fn missing() -> Error {
    Error::Missing("policy does not exist".to_owned())
}

/// Vault's write-time checks: parses, length bounds, ten trial generations.
fn validate(raw: &str) -> Result<PasswordPolicy, Error> {
    let policy = PasswordPolicy::parse(raw)
        .map_err(|err| Error::InvalidParameter(format!("invalid password policy: {err}")))?;
    if !(MIN_LENGTH..=MAX_LENGTH).contains(&policy.length) {
        return Err(Error::InvalidParameter(format!(
            "passwords must be between {MIN_LENGTH} and {MAX_LENGTH} characters"
        )));
    }
    // Vault gives the ten trials one second together: after a trial times out, the rest
    // count as failed.
    let mut failed = 0;
    for trial in 0..TRIALS {
        if policy.generate().is_err() {
            failed = TRIALS - trial;
            break;
        }
    }
    if failed == TRIALS {
        return Err(Error::InvalidParameter(
            "unable to generate password from provided policy in 1s: are the rules impossible?"
                .to_owned(),
        ));
    }
    if failed > 0 {
        return Err(Error::InvalidParameter(format!(
            "failed to generate passwords {failed} times out of {TRIALS} attempts in 1s - is the policy too restrictive?"
        )));
    }
    Ok(policy)
}

fn decode(key: &str, bytes: &[u8]) -> Result<Stored, Error> {
    serde_json::from_slice(bytes).map_err(|err| Error::CorruptRecord {
        key: key.to_owned(),
        reason: err.to_string(),
    })
}

async fn load(barrier: &Barrier, name: &str) -> Result<Option<PasswordPolicy>, Error> {
    let key = format!("{KEY_PREFIX}{name}");
    let Some(bytes) = barrier.get(&key).await? else {
        return Ok(None);
    };
    let stored = decode(&key, &bytes)?;
    PasswordPolicy::parse(&stored.policy)
        .map(Some)
        .map_err(|reason| Error::CorruptRecord { key, reason })
}

/// Named policies for engines (`secrets_sdk::Passwords`), read through the barrier.
#[derive(Debug)]
pub(crate) struct Source {
    barrier: Arc<Barrier>,
}

impl Source {
    pub(crate) fn new(barrier: Arc<Barrier>) -> Source {
        Source { barrier }
    }
}

#[async_trait]
impl secrets_sdk::PasswordPolicySource for Source {
    async fn policy(&self, name: &str) -> Result<Option<PasswordPolicy>, EngineError> {
        load(&self.barrier, name).await.map_err(|err| match err {
            Error::Sealed => EngineError::Sealed,
            other => EngineError::Storage(other.to_string()),
        })
    }
}
