//! How the engine makes a new password: from the configured `password_policy` (through the
//! store's password policies), else the deprecated `length`/`formatter` settings: base62
//! characters, either prefixed with `?@09AZ` (so every directory complexity rule is met) to
//! `length` characters, or put in place of the formatter's one `{{PASSWORD}}` so the whole is
//! `length` characters.
//!
//! Invariant: [`validate`] accepts exactly the settings [`generate`] can honour, with the
//! upstream plugin's messages.

use rand::Rng;
use secrets_sdk::{EngineError, Passwords};

use crate::store::Config;

/// The prefix of every password made without a formatter.
pub(crate) const COMPLEXITY_PREFIX: &str = "?@09AZ";
/// The formatter's placeholder.
pub(crate) const PLACEHOLDER: &str = "{{PASSWORD}}";
/// The fewest random characters a password may have.
const MIN_RANDOM: u64 = 8;
/// The default `length`.
pub(crate) const DEFAULT_LENGTH: u64 = 64;

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Checks the password settings of a configuration.
pub(crate) fn validate(policy: &str, length: u64, formatter: &str) -> Result<(), String> {
    if !policy.is_empty() && (length != 0 || !formatter.is_empty()) {
        return Err("cannot set password_policy and either length or formatter".to_owned());
    }
    if !policy.is_empty() {
        return Ok(());
    }
    let prefix = COMPLEXITY_PREFIX.len() as u64;
    if formatter.is_empty() {
        if length < prefix + MIN_RANDOM {
            return Err(format!(
                "it's not possible to generate a _secure_ password of length {length}, please boost length to {}, though Vault recommends higher",
                prefix + MIN_RANDOM
            ));
        }
        return Ok(());
    }
    let text = (formatter.len() - formatter.matches(PLACEHOLDER).count().min(1) * PLACEHOLDER.len())
        as u64;
    if length.saturating_sub(text) < MIN_RANDOM || length < text {
        return Err(format!(
            "since the desired length is {length}, it isn't possible to generate a sufficiently complex password - please increase desired length or remove characters from the formatter"
        ));
    }
    match formatter.matches(PLACEHOLDER).count() {
        0 => Err(format!(
            "{formatter} must contain password replacement field of {PLACEHOLDER}"
        )),
        1 => Ok(()),
        _ => Err(format!(
            "{formatter} must contain ONE password replacement field of {PLACEHOLDER}"
        )),
    }
}

fn base62(count: u64) -> String {
    let mut rng = rand::rng();
    (0..count)
        .map(|_| char::from(BASE62[rng.random_range(0..BASE62.len())]))
        .collect()
}

/// A new password for the configuration.
pub(crate) async fn generate(
    config: &Config,
    passwords: &Passwords,
) -> Result<String, EngineError> {
    validate(&config.password_policy, config.length, &config.formatter)
        .map_err(EngineError::BadRequest)?;
    if !config.password_policy.is_empty() {
        return passwords.generate(&config.password_policy).await;
    }
    if config.formatter.is_empty() {
        let random = config.length - COMPLEXITY_PREFIX.len() as u64;
        return Ok(format!("{COMPLEXITY_PREFIX}{}", base62(random)));
    }
    let random = config.length - (config.formatter.len() - PLACEHOLDER.len()) as u64;
    Ok(config.formatter.replacen(PLACEHOLDER, &base62(random), 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(policy: &str, length: u64, formatter: &str) -> Config {
        Config {
            password_policy: policy.to_owned(),
            length,
            formatter: formatter.to_owned(),
            ..Config::default()
        }
    }

    #[tokio::test]
    async fn without_a_formatter_passwords_start_with_the_complexity_prefix() {
        let password = generate(&config("", 64, ""), &Passwords::default())
            .await
            .unwrap();
        assert_eq!(password.len(), 64);
        assert!(password.starts_with("?@09AZ"));
        assert!(password[6..].bytes().all(|b| b.is_ascii_alphanumeric()));
    }

    #[tokio::test]
    async fn a_formatter_wraps_the_random_part_to_the_length() {
        let password = generate(
            &config("", 20, "pre{{PASSWORD}}post"),
            &Passwords::default(),
        )
        .await
        .unwrap();
        assert_eq!(password.len(), 20);
        assert!(password.starts_with("pre") && password.ends_with("post"));
        assert!(!password.contains("?@09AZ"));
    }

    #[tokio::test]
    async fn a_password_policy_generates_through_the_store() {
        let password = generate(&config("", 0, ""), &Passwords::default()).await;
        assert!(password.is_err(), "length 0 without a policy is refused");
        let err = generate(&config("nope", 0, ""), &Passwords::default())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
    }

    #[test]
    fn invalid_settings_are_refused_with_upstreams_messages() {
        assert_eq!(
            validate("p", 64, "").unwrap_err(),
            "cannot set password_policy and either length or formatter"
        );
        assert!(validate("p", 0, "{{PASSWORD}}").is_err());
        assert!(
            validate("", 13, "")
                .unwrap_err()
                .contains("boost length to 14")
        );
        assert!(validate("", 14, "").is_ok());
        assert!(
            validate("", 20, "abc")
                .unwrap_err()
                .contains("must contain password replacement")
        );
        assert!(
            validate("", 40, "{{PASSWORD}}{{PASSWORD}}")
                .unwrap_err()
                .contains("ONE password replacement")
        );
        assert!(
            validate("", 10, "abcdef{{PASSWORD}}")
                .unwrap_err()
                .contains("sufficiently complex")
        );
        assert!(validate("p", 0, "").is_ok());
    }
}
