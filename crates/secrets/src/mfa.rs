//! TOTP MFA methods (Vault Enterprise's legacy `sys/mfa/method/totp`): the stored methods,
//! the TOTP keys generated for entities, and the check dispatch runs on paths whose ACL rule
//! lists `mfa_methods`. The handlers live in `sys/mfa.rs`; the TOTP arithmetic, URL and
//! barcode in the `secrets-totp` crate.
//!
//! Keys (logical, through the barrier, so every key is encrypted at rest):
//! - `sys/mfa/method/totp/<name>` → [`Method`];
//! - `sys/mfa/totp-key/<method id>/<entity id>` → [`EntitySecret`] (the key and the
//!   parameters it was generated with, as Vault keeps them on the entity);
//! - `sys/mfa/totp-state/<method id>/<entity id>` → [`ValidationState`] (codes already used
//!   and the failed-attempt counter), so a restart forgets neither.
//!
//! Validation ([`enforce`]), per method the rule lists, as Vault's `validateTOTP`: the token
//! must have an entity; the `X-Vault-MFA` header must carry `<method>:<code>`; the entity must
//! have a key for the method; a code already used is refused until `period × (2 + skew)` after
//! its use; every attempt counts against `max_validation_attempts` within a window of `period`
//! seconds from the first attempt (the attempt after the last allowed one is refused with
//! Vault's "maximum TOTP validation attempts" message until the window ends); a valid code
//! clears the counter and is recorded as used. Keys are per (method id, entity), so deleting a
//! method and creating it again under the same name invalidates every key.
//!
//! Invariants: one process-wide lock serialises every read-modify-write of a validation state
//! and every key generation, so two requests never both spend one code or both create a key;
//! a key never leaves this module except in the generate answer (URL and barcode).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::tokens::TokenEntry;
use crate::tokens::store as kv;
use crate::{Error, State};

const METHOD_PREFIX: &str = "sys/mfa/method/totp/";
const KEY_PREFIX: &str = "sys/mfa/totp-key/";
const STATE_PREFIX: &str = "sys/mfa/totp-state/";

/// Serialises key generation and validation-state updates.
static LOCK: Mutex<()> = Mutex::const_new(());

/// A configured TOTP method (Vault's read fields, plus its id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Method {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) issuer: String,
    pub(crate) period: u64,
    pub(crate) key_size: u32,
    pub(crate) qr_size: u32,
    /// `SHA1`, `SHA256` or `SHA512`.
    pub(crate) algorithm: String,
    pub(crate) digits: u8,
    pub(crate) skew: u8,
    pub(crate) max_validation_attempts: u32,
}

/// An entity's key for one method, with the parameters in force when it was generated.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct EntitySecret {
    pub(crate) version: u32,
    /// Base32, no padding.
    pub(crate) key: String,
    pub(crate) issuer: String,
    pub(crate) period: u64,
    pub(crate) algorithm: String,
    pub(crate) digits: u8,
    pub(crate) skew: u8,
}

/// What validation remembers for one (method, entity).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ValidationState {
    pub(crate) version: u32,
    /// Attempts in the current window (0: no window).
    pub(crate) attempts: u32,
    /// Unix milliseconds at which the attempt window ends.
    pub(crate) attempts_until_ms: i64,
    /// Used codes → Unix milliseconds until which they stay refused.
    pub(crate) used: BTreeMap<String, i64>,
}

fn method_key(name: &str) -> String {
    format!("{METHOD_PREFIX}{name}")
}

fn secret_key(method_id: &str, entity_id: &str) -> String {
    format!("{KEY_PREFIX}{method_id}/{entity_id}")
}

fn state_key(method_id: &str, entity_id: &str) -> String {
    format!("{STATE_PREFIX}{method_id}/{entity_id}")
}

/// Vault's `GenericNameRegex` (`\w(([\w-.]+)?\w)?`): what a method name may be.
pub(crate) fn valid_name(name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let (Some(first), Some(last)) = (name.chars().next(), name.chars().last()) else {
        return false;
    };
    word(first) && word(last) && name.chars().all(|c| word(c) || c == '-' || c == '.')
}

/// An id usable as one key segment (entity ids are uuids; anything with `/` is not one).
fn valid_id(id: &str) -> bool {
    !id.is_empty() && !id.contains('/')
}

pub(crate) async fn get_method(state: &State, name: &str) -> Result<Option<Method>, Error> {
    if !valid_name(name) {
        return Ok(None);
    }
    kv::get_json(state, &method_key(name)).await
}

pub(crate) async fn put_method(state: &State, method: &Method) -> Result<(), Error> {
    kv::put_json(state, &method_key(&method.name), method).await
}

/// Every method's name, sorted.
pub(crate) async fn method_names(state: &State) -> Result<Vec<String>, Error> {
    let mut names: Vec<String> = kv::list(state, METHOD_PREFIX)
        .await?
        .into_iter()
        .filter(|name| !name.ends_with('/'))
        .collect();
    names.sort();
    Ok(names)
}

/// Deletes a method with every key and validation state made for it (a missing method is
/// fine).
pub(crate) async fn delete_method(state: &State, name: &str) -> Result<(), Error> {
    let Some(method) = get_method(state, name).await? else {
        return Ok(());
    };
    let _guard = LOCK.lock().await;
    kv::delete(state, &method_key(name)).await?;
    for prefix in [KEY_PREFIX, STATE_PREFIX] {
        let under = format!("{prefix}{}/", method.id);
        for (key, _) in kv::scan(state, &under).await? {
            kv::delete(state, &key).await?;
        }
    }
    Ok(())
}

/// Whether an identity entity with this id exists (read-only view of identity.rs's
/// `identity/entity/<id>` record).
pub(crate) async fn entity_exists(state: &State, entity_id: &str) -> Result<bool, Error> {
    if !valid_id(entity_id) {
        return Ok(false);
    }
    Ok(kv::get(state, &format!("identity/entity/{entity_id}"))
        .await?
        .is_some())
}

/// The answer to a generate request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Generated {
    /// A new key: the otpauth URL and the base64 PNG barcode (empty when `qr_size` is 0).
    New { url: String, barcode: String },
    /// The entity already had a key for the method; nothing was made.
    AlreadyExists,
}

/// Generates a key for `entity_id` on `method` unless it has one (Vault's
/// `handleMFAGenerateTOTP`). The entity must exist (checked by the caller).
pub(crate) async fn generate(
    state: &State,
    method: &Method,
    entity_id: &str,
) -> Result<Generated, Error> {
    if !valid_id(entity_id) {
        return Err(Error::InvalidParameter("invalid entity ID".to_owned()));
    }
    let _guard = LOCK.lock().await;
    let key_name = secret_key(&method.id, entity_id);
    if kv::get(state, &key_name).await?.is_some() {
        return Ok(Generated::AlreadyExists);
    }
    let params = params_of(&method.algorithm, method.digits, method.period, method.skew)?;
    let key = secrets_totp::generate_key(usize::try_from(method.key_size).unwrap_or(0));
    let url = secrets_totp::otpauth_url(&method.issuer, entity_id, &key, &params);
    let barcode = if method.qr_size == 0 {
        String::new()
    } else {
        secrets_totp::qr_png_base64(&url, method.qr_size).map_err(|err| {
            Error::InvalidParameter(format!("failed to generate QR code image: {err}"))
        })?
    };
    let secret = EntitySecret {
        version: 1,
        key: secrets_totp::encode_base32(&key),
        issuer: method.issuer.clone(),
        period: method.period,
        algorithm: method.algorithm.clone(),
        digits: method.digits,
        skew: method.skew,
    };
    kv::put_json(state, &key_name, &secret).await?;
    // A fresh key starts with no used codes and no failures.
    kv::delete(state, &state_key(&method.id, entity_id)).await?;
    Ok(Generated::New { url, barcode })
}

/// Removes `entity_id`'s key for `method` (and its validation state); missing is fine.
pub(crate) async fn destroy(state: &State, method: &Method, entity_id: &str) -> Result<(), Error> {
    if !valid_id(entity_id) {
        return Ok(());
    }
    let _guard = LOCK.lock().await;
    kv::delete(state, &secret_key(&method.id, entity_id)).await?;
    kv::delete(state, &state_key(&method.id, entity_id)).await
}

fn params_of(
    algorithm: &str,
    digits: u8,
    period: u64,
    skew: u8,
) -> Result<secrets_totp::Params, Error> {
    let algorithm =
        secrets_totp::Algorithm::parse(algorithm).ok_or_else(|| Error::CorruptRecord {
            key: "sys/mfa".to_owned(),
            reason: format!("unknown algorithm {algorithm:?}"),
        })?;
    Ok(secrets_totp::Params {
        algorithm,
        digits,
        period,
        skew,
    })
}

/// MFA credentials from the `X-Vault-MFA` headers: method name → passcodes, in order.
pub(crate) type Credentials = BTreeMap<String, Vec<String>>;

/// Parses `X-Vault-MFA` values as Vault's `parseMFAHeader`: `<method>[:<value>]` per value; a
/// value may also list several, comma-separated (what proxies make of repeated headers).
/// An empty method name or an empty value after `:` is 400.
pub(crate) fn parse_credentials<'a>(
    values: impl IntoIterator<Item = &'a str>,
) -> Result<Credentials, Error> {
    let mut creds = Credentials::new();
    for value in values {
        for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((name, passcode)) = item.split_once(':') else {
                creds.entry(item.to_owned()).or_default();
                continue;
            };
            if name.is_empty() {
                return Err(Error::InvalidParameter(
                    "invalid data in header \"X-Vault-Mfa\"; missing method name or ID".to_owned(),
                ));
            }
            if passcode.is_empty() {
                return Err(Error::InvalidParameter(
                    "invalid data in header \"X-Vault-Mfa\"; missing method value".to_owned(),
                ));
            }
            creds
                .entry(name.to_owned())
                .or_default()
                .push(passcode.to_owned());
        }
    }
    Ok(creds)
}

/// Checks every method in `methods` for the request of `token` carrying `creds` (module
/// docs). Any failure is 403 with the reason next to `permission denied`.
pub(crate) async fn enforce(
    state: &State,
    token: &TokenEntry,
    methods: &[String],
    creds: &Credentials,
) -> Result<(), Error> {
    for name in methods {
        validate_one(state, token, name, creds).await?;
    }
    Ok(())
}

fn denied(reason: impl Into<String>) -> Error {
    Error::MfaDenied(reason.into())
}

async fn validate_one(
    state: &State,
    token: &TokenEntry,
    name: &str,
    creds: &Credentials,
) -> Result<(), Error> {
    let Some(entity_id) = token.entity_id.as_deref().filter(|id| !id.is_empty()) else {
        return Err(denied("MFA validation requires a token with an entity"));
    };
    let Some(method) = get_method(state, name).await? else {
        return Err(denied(format!("MFA method {name:?} not found")));
    };
    let Some(passcode) = creds.get(name).and_then(|codes| codes.first()) else {
        return Err(denied("MFA credentials not supplied"));
    };
    let Some(secret) =
        kv::get_json::<EntitySecret>(state, &secret_key(&method.id, entity_id)).await?
    else {
        return Err(denied("entity does not contain the TOTP secret"));
    };
    let params = params_of(&secret.algorithm, secret.digits, secret.period, secret.skew)?;
    let key = secrets_totp::decode_base32(&secret.key).ok_or_else(|| Error::CorruptRecord {
        key: secret_key(&method.id, entity_id),
        reason: "the key is not base32".to_owned(),
    })?;
    let period_ms = i64::try_from(secret.period.saturating_mul(1000)).unwrap_or(i64::MAX);

    let _guard = LOCK.lock().await;
    let now = state.now_ms();
    let state_name = state_key(&method.id, entity_id);
    let mut memo: ValidationState = kv::get_json(state, &state_name).await?.unwrap_or_default();
    memo.version = 1;
    memo.used.retain(|_, until| *until > now);
    if memo.attempts_until_ms <= now {
        memo.attempts = 0;
    }
    if memo.used.contains_key(passcode) {
        return Err(denied(format!(
            "code already used; new code is available in {} seconds",
            secret.period
        )));
    }
    if memo.attempts == 0 {
        memo.attempts = 1;
        memo.attempts_until_ms = now.saturating_add(period_ms);
    } else if memo.attempts >= method.max_validation_attempts {
        kv::put_json(state, &state_name, &memo).await?;
        return Err(denied(format!(
            "maximum TOTP validation attempts {} exceeded the allowed attempts {}. Please try again in {} seconds",
            memo.attempts + 1,
            method.max_validation_attempts,
            stdx::duration::format_go_std(std::time::Duration::from_secs(secret.period)),
        )));
    } else {
        memo.attempts += 1;
    }
    let unix_secs = u64::try_from(now / 1000).unwrap_or(0);
    if secrets_totp::verify(&key, &params, passcode, unix_secs).is_none() {
        kv::put_json(state, &state_name, &memo).await?;
        return Err(denied("failed to validate TOTP passcode"));
    }
    let window = period_ms.saturating_mul(2 + i64::from(secret.skew));
    memo.used
        .insert(passcode.clone(), now.saturating_add(window));
    memo.attempts = 0;
    memo.attempts_until_ms = 0;
    kv::put_json(state, &state_name, &memo).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_vaults_generic_name_regex() {
        for good in ["a", "my_totp", "my-totp.2", "A1"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "-a", "a-", ".a", "a/b", "a b", "a:b"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn credentials_come_from_repeated_or_comma_separated_headers() {
        let creds = parse_credentials(["my_totp:123456", "other:1, third:22", "bare"]).unwrap();
        assert_eq!(creds["my_totp"], ["123456"]);
        assert_eq!(creds["other"], ["1"]);
        assert_eq!(creds["third"], ["22"]);
        assert!(creds["bare"].is_empty());
        let twice = parse_credentials(["m:1", "m:2"]).unwrap();
        assert_eq!(twice["m"], ["1", "2"]);
        assert!(parse_credentials([":1"]).is_err());
        assert!(parse_credentials(["m:"]).is_err());
        assert!(parse_credentials(Vec::<&str>::new()).unwrap().is_empty());
    }
}
