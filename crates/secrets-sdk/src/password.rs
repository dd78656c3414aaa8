//! Password policies: Vault's policy language (`sys/policies/password/:name`) and the
//! generator engines draw passwords from.
//!
//! A policy is HCL: `length = 20` and one or more `rule "charset" { charset = "abc"
//! min-chars = 1 }` blocks. A password is `length` characters drawn uniformly from the union of
//! every rule's charset, redrawn until each rule's minimum is met (rejection sampling, as
//! Vault's `random.StringGenerator`), for at most [`GENERATE_TIMEOUT`].
//!
//! Engines reach named policies through [`Passwords`] (in [`crate::EngineConfig`]); the empty
//! name is the default policy: 20 characters, at least one lowercase letter, one uppercase
//! letter, one digit and one dash (Vault's `DefaultStringGenerator`).
//!
//! Invariants: parsing and generating are pure (no I/O, the OS random source only); a parsed
//! policy always has a non-empty charset and a length of at least 1.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rand::Rng;

use crate::EngineError;

/// How long generation may try before giving up (Vault's one second).
pub const GENERATE_TIMEOUT: Duration = Duration::from_secs(1);

/// One `rule "charset"`: at least `min_chars` of the password come from `charset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharsetRule {
    pub charset: Vec<char>,
    pub min_chars: usize,
}

/// A parsed password policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswordPolicy {
    pub length: usize,
    pub rules: Vec<CharsetRule>,
    /// The union of every rule's charset, sorted and without duplicates.
    charset: Vec<char>,
}

impl PasswordPolicy {
    /// A policy from its parts; errors as [`PasswordPolicy::parse`].
    pub fn new(length: usize, rules: Vec<CharsetRule>) -> Result<PasswordPolicy, String> {
        if length == 0 {
            return Err("length must be > 0".to_owned());
        }
        let mut charset: Vec<char> = rules.iter().flat_map(|r| r.charset.clone()).collect();
        charset.sort_unstable();
        charset.dedup();
        if charset.is_empty() {
            return Err("no charset specified".to_owned());
        }
        Ok(PasswordPolicy {
            length,
            rules,
            charset,
        })
    }

    /// Vault's default: 20 characters from `a-z A-Z 0-9 -`, at least one of each class.
    pub fn default_policy() -> PasswordPolicy {
        let class = |chars: &str| CharsetRule {
            charset: chars.chars().collect(),
            min_chars: 1,
        };
        PasswordPolicy::new(
            20,
            vec![
                class("abcdefghijklmnopqrstuvwxyz"),
                class("ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
                class("0123456789"),
                class("-"),
            ],
        )
        .unwrap_or_else(|_| unreachable!("the default policy is valid"))
    }

    /// Parses the HCL policy language.
    pub fn parse(raw: &str) -> Result<PasswordPolicy, String> {
        let body: hcl::Body =
            hcl::from_str(raw).map_err(|err| format!("unable to decode: {err}"))?;
        let mut length: Option<usize> = None;
        let mut rules = Vec::new();
        for structure in body.into_iter() {
            match structure {
                hcl::Structure::Attribute(attr) if attr.key.as_str() == "length" => {
                    length = Some(whole_number(&attr.expr, "length")?);
                }
                hcl::Structure::Attribute(attr) => {
                    return Err(format!("unrecognized field {:?}", attr.key.as_str()));
                }
                hcl::Structure::Block(block) if block.identifier.as_str() == "rule" => {
                    let kind = block
                        .labels
                        .first()
                        .map(|l| l.as_str().to_owned())
                        .unwrap_or_default();
                    if kind != "charset" {
                        return Err(format!("unrecognized rule type {kind:?}"));
                    }
                    let mut charset = None;
                    let mut min_chars = 0;
                    for inner in block.body.into_iter() {
                        let hcl::Structure::Attribute(attr) = inner else {
                            return Err("unexpected block in charset rule".to_owned());
                        };
                        match attr.key.as_str() {
                            "charset" => match &attr.expr {
                                hcl::Expression::String(s) => charset = Some(s.clone()),
                                _ => return Err("charset must be a string".to_owned()),
                            },
                            "min-chars" | "min_chars" => {
                                min_chars = whole_number(&attr.expr, "min-chars")?;
                            }
                            other => return Err(format!("unrecognized field {other:?}")),
                        }
                    }
                    let charset: Vec<char> = charset
                        .filter(|s| !s.is_empty())
                        .ok_or_else(|| "charset rule requires a non-empty charset".to_owned())?
                        .chars()
                        .collect();
                    rules.push(CharsetRule { charset, min_chars });
                }
                hcl::Structure::Block(block) => {
                    return Err(format!(
                        "unrecognized block {:?}",
                        block.identifier.as_str()
                    ));
                }
            }
        }
        PasswordPolicy::new(length.unwrap_or(0), rules)
    }

    /// Draws a password, redrawing until every rule holds; gives up after
    /// [`GENERATE_TIMEOUT`] (`timed out generating string`).
    pub fn generate(&self) -> Result<String, String> {
        let started = Instant::now();
        let mut rng = rand::rng();
        loop {
            let candidate: Vec<char> = (0..self.length)
                .map(|_| self.charset[rng.random_range(0..self.charset.len())])
                .collect();
            if self.accepts(&candidate) {
                return Ok(candidate.into_iter().collect());
            }
            if started.elapsed() > GENERATE_TIMEOUT {
                return Err("timed out generating string".to_owned());
            }
        }
    }

    /// Whether `password` meets every rule.
    pub fn accepts(&self, password: &[char]) -> bool {
        self.rules.iter().all(|rule| {
            password.iter().filter(|c| rule.charset.contains(c)).count() >= rule.min_chars
        })
    }
}

fn whole_number(expr: &hcl::Expression, field: &str) -> Result<usize, String> {
    match expr {
        hcl::Expression::Number(n) => n
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| format!("{field} must be a whole number >= 0")),
        _ => Err(format!("{field} must be a number")),
    }
}

/// Where [`Passwords`] finds named policies (the core's `sys/policies/password`).
#[async_trait]
pub trait PasswordPolicySource: Send + Sync + std::fmt::Debug {
    /// The policy stored under `name`, or `None` when there is none.
    async fn policy(&self, name: &str) -> Result<Option<PasswordPolicy>, EngineError>;
}

/// An engine's handle for generating passwords: the default policy always, named policies
/// when the core supplied a source (engines built in tests without one know only the default).
#[derive(Debug, Clone, Default)]
pub struct Passwords {
    source: Option<Arc<dyn PasswordPolicySource>>,
}

impl Passwords {
    pub fn new(source: Arc<dyn PasswordPolicySource>) -> Passwords {
        Passwords {
            source: Some(source),
        }
    }

    /// A password from the policy `name`, or from the default policy when `name` is empty.
    /// An unknown policy is a 400.
    pub async fn generate(&self, name: &str) -> Result<String, EngineError> {
        let policy = if name.is_empty() {
            PasswordPolicy::default_policy()
        } else {
            let found = match &self.source {
                Some(source) => source.policy(name).await?,
                None => None,
            };
            found.ok_or_else(|| {
                EngineError::BadRequest(format!("password policy {name:?} does not exist"))
            })?
        };
        policy.generate().map_err(|err| {
            EngineError::BadRequest(format!("failed to generate password from policy: {err}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_policy_gives_20_characters_with_every_class() {
        let policy = PasswordPolicy::default_policy();
        for _ in 0..50 {
            let password = policy.generate().unwrap();
            assert_eq!(password.chars().count(), 20);
            assert!(password.chars().any(|c| c.is_ascii_lowercase()));
            assert!(password.chars().any(|c| c.is_ascii_uppercase()));
            assert!(password.chars().any(|c| c.is_ascii_digit()));
            assert!(password.contains('-'));
            assert!(
                password
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-')
            );
        }
    }

    #[test]
    fn a_policy_with_rules_is_parsed_and_honoured() {
        let policy = PasswordPolicy::parse(
            "length = 12\nrule \"charset\" {\n  charset = \"abc\"\n  min-chars = 2\n}\nrule \"charset\" {\n  charset = \"XYZ\"\n  min-chars = 3\n}\n",
        )
        .unwrap();
        assert_eq!(policy.length, 12);
        let password = policy.generate().unwrap();
        assert_eq!(password.len(), 12);
        assert!(password.chars().filter(|c| "abc".contains(*c)).count() >= 2);
        assert!(password.chars().filter(|c| "XYZ".contains(*c)).count() >= 3);
        assert!(password.chars().all(|c| "abcXYZ".contains(c)));
    }

    #[test]
    fn bad_policies_are_refused_with_a_reason() {
        assert!(
            PasswordPolicy::parse("length = 10")
                .unwrap_err()
                .contains("charset")
        );
        assert!(
            PasswordPolicy::parse("rule \"charset\" { charset = \"a\" }")
                .unwrap_err()
                .contains("length")
        );
        assert!(PasswordPolicy::parse("length = 5\nrule \"nope\" {}").is_err());
        assert!(PasswordPolicy::parse("length = {").is_err());
    }

    #[test]
    fn impossible_rules_time_out() {
        let policy = PasswordPolicy::parse(
            "length = 2\nrule \"charset\" {\n charset = \"a\"\n min-chars = 3\n}",
        )
        .unwrap();
        assert_eq!(
            policy.generate().unwrap_err(),
            "timed out generating string"
        );
    }
}
