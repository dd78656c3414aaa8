//! A certificate's validity window: `not_before` (backdated by `not_before_duration`, or set
//! by the role or request under `not_before_bound`) and `not_after` (the request's `ttl` or
//! `not_after`, else the role's, else the mount's; capped by the role's or mount's maximum
//! with a warning; then held to the issuer's own expiry by its `leaf_not_after_behavior`, and
//! to the role's `not_after_bound`).
//!
//! Invariant: pure functions of their inputs and "now" (Unix seconds); every refusal is
//! Vault's message as a 400.

use std::time::Duration;

use secrets_sdk::EngineError;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// An RFC 3339 time as Unix seconds (`9999-12-31T23:59:59Z` included).
pub(crate) fn parse_time(text: &str) -> Result<i64, String> {
    OffsetDateTime::parse(text.trim(), &Rfc3339)
        .map(OffsetDateTime::unix_timestamp)
        .map_err(|_| {
            format!("parsing time {text:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse")
        })
}

/// Unix seconds as RFC 3339 in UTC.
pub(crate) fn format_time(unix: i64) -> String {
    OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| unix.to_string())
}

fn go(duration: Duration) -> String {
    stdx::duration::format_go_std(duration)
}

/// What decides a certificate's validity.
#[derive(Debug, Clone, Default)]
pub(crate) struct ValidityInput {
    pub(crate) now: i64,
    /// The request's `ttl` (zero when not given).
    pub(crate) ttl: Duration,
    /// The request's `not_after`.
    pub(crate) not_after: Option<String>,
    /// The request's `not_before`.
    pub(crate) not_before: Option<String>,
    pub(crate) role_ttl: Duration,
    pub(crate) role_max_ttl: Duration,
    pub(crate) role_not_after: String,
    pub(crate) role_not_after_bound: String,
    pub(crate) role_not_before: String,
    pub(crate) role_not_before_bound: String,
    pub(crate) not_before_duration: Duration,
    pub(crate) mount_default_ttl: Duration,
    pub(crate) mount_max_ttl: Duration,
    /// The signing issuer's expiry and `leaf_not_after_behavior` (none for a self-signed root).
    pub(crate) issuer: Option<(i64, String)>,
}

/// The window decided, with warnings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Validity {
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
    pub(crate) warnings: Vec<String>,
}

fn bad(msg: String) -> EngineError {
    EngineError::BadRequest(msg)
}

/// Vault's `getCertificateNotBefore` and `getCertificateNotAfter`.
pub(crate) fn decide(input: &ValidityInput) -> Result<Validity, EngineError> {
    let not_before = not_before(input)?;
    let mut warnings = Vec::new();
    let now = input.now;

    let bound = input.role_not_after_bound.as_str();
    let timestamp_bound = match bound {
        "" | "permit" | "forbid" | "ttl-limited" => None,
        other => Some(parse_time(other).map_err(bad)?),
    };
    let mut not_after_text = input.role_not_after.clone();
    if not_after_text.is_empty()
        && let Some(requested) = &input.not_after
    {
        if bound == "forbid" {
            return Err(bad(format!(
                "not_after_bound is set to {bound}. not_after cannot be provided."
            )));
        }
        not_after_text = requested.clone();
    }
    let requested_not_after = if not_after_text.is_empty() {
        None
    } else {
        Some(parse_time(&not_after_text).map_err(bad)?)
    };
    if !input.ttl.is_zero() && requested_not_after.is_some() {
        return Err(bad(
            "Either ttl or not_after should be provided. Both should not be provided in the same request.".to_owned(),
        ));
    }

    let mut ttl = input.ttl;
    if ttl.is_zero() {
        ttl = input.role_ttl;
    }
    let mut max_ttl = input.role_max_ttl;
    if ttl.is_zero() {
        ttl = input.mount_default_ttl;
    }
    if max_ttl.is_zero() {
        max_ttl = input.mount_max_ttl;
    }
    if ttl > max_ttl {
        warnings.push(format!(
            "TTL {:?} is longer than permitted maxTTL {:?}, so maxTTL is being used",
            go(ttl),
            go(max_ttl)
        ));
        ttl = max_ttl;
    }
    let ttl_secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);

    if bound == "ttl-limited"
        && let Some(requested) = requested_not_after
        && requested > now.saturating_add(ttl_secs)
    {
        return Err(bad(format!(
            "not_after_bound is set to {bound}. Cannot satisfy request as that would result in notAfter of {} that is beyond the TTL of {}",
            format_time(requested),
            go(ttl)
        )));
    }

    let mut not_after = requested_not_after.unwrap_or_else(|| now.saturating_add(ttl_secs));
    if let Some((issuer_not_after, behavior)) = &input.issuer
        && not_after > *issuer_not_after
    {
        match behavior.as_str() {
            "permit" => {}
            "truncate" => {
                if not_after < now {
                    return Err(bad(format!(
                        "cannot satisfy request, as NotAfter date {} is in the past",
                        format_time(not_after)
                    )));
                }
                not_after = *issuer_not_after;
            }
            _ => {
                return Err(bad(format!(
                    "cannot satisfy request, as TTL would result in notAfter of {} that is beyond the expiration of the CA certificate at {}",
                    format_time(not_after),
                    format_time(*issuer_not_after)
                )));
            }
        }
    }
    if let Some(limit) = timestamp_bound
        && not_after > limit
    {
        return Err(bad(format!(
            "not_after_bound is set to {bound}. Cannot statisfy request as that would result in notAfter of {} that is beyond the maximum timestamp of {}",
            format_time(not_after),
            format_time(limit)
        )));
    }
    Ok(Validity {
        not_before,
        not_after,
        warnings,
    })
}

fn not_before(input: &ValidityInput) -> Result<i64, EngineError> {
    let backdated = input
        .now
        .saturating_sub(i64::try_from(input.not_before_duration.as_secs()).unwrap_or(0));
    if !input.role_not_before.is_empty() {
        return parse_time(&input.role_not_before).map_err(bad);
    }
    let Some(requested) = &input.not_before else {
        return Ok(backdated);
    };
    let bound = input.role_not_before_bound.as_str();
    match bound {
        "forbid" => Err(bad(format!(
            "not_before_bound is set to {bound}. not_before cannot be provided."
        ))),
        "duration" => {
            let at = parse_time(requested).map_err(bad)?;
            if at < backdated {
                return Err(bad(format!(
                    "not_before_bound is set to {bound}. Cannot satisfy request as it would result in notBefore of {} that is older than the allowed not_before_duration of {}",
                    format_time(at),
                    go(input.not_before_duration)
                )));
            }
            Ok(at)
        }
        _ => parse_time(requested).map_err(bad),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_714_557_600;
    const HOUR: Duration = Duration::from_secs(3600);

    fn input() -> ValidityInput {
        ValidityInput {
            now: NOW,
            not_before_duration: Duration::from_secs(30),
            mount_default_ttl: 768 * HOUR,
            mount_max_ttl: 768 * HOUR,
            ..ValidityInput::default()
        }
    }

    #[test]
    fn the_requested_ttl_wins_and_not_before_is_backdated() {
        let v = decide(&ValidityInput {
            ttl: HOUR,
            ..input()
        })
        .unwrap();
        assert_eq!(v.not_before, NOW - 30);
        assert_eq!(v.not_after, NOW + 3600);
        assert!(v.warnings.is_empty());
    }

    #[test]
    fn a_ttl_above_the_roles_max_is_capped_with_a_warning() {
        let v = decide(&ValidityInput {
            ttl: 10 * HOUR,
            role_max_ttl: 2 * HOUR,
            ..input()
        })
        .unwrap();
        assert_eq!(v.not_after, NOW + 7200);
        assert_eq!(
            v.warnings,
            vec![
                r#"TTL "10h0m0s" is longer than permitted maxTTL "2h0m0s", so maxTTL is being used"#
            ]
        );
    }

    #[test]
    fn not_after_reaches_the_year_9999_and_excludes_ttl() {
        let v = decide(&ValidityInput {
            not_after: Some("9999-12-31T23:59:59Z".into()),
            ..input()
        })
        .unwrap();
        assert_eq!(format_time(v.not_after), "9999-12-31T23:59:59Z");
        let both = decide(&ValidityInput {
            ttl: HOUR,
            not_after: Some("2030-01-01T00:00:00Z".into()),
            ..input()
        });
        assert!(
            both.unwrap_err()
                .to_string()
                .starts_with("Either ttl or not_after")
        );
    }

    #[test]
    fn the_issuers_expiry_is_enforced_by_its_behaviour() {
        let issuer_end = NOW + 3600;
        let asked = |behavior: &str| {
            decide(&ValidityInput {
                ttl: 2 * HOUR,
                issuer: Some((issuer_end, behavior.to_owned())),
                ..input()
            })
        };
        assert!(
            asked("err")
                .unwrap_err()
                .to_string()
                .contains("beyond the expiration of the CA")
        );
        assert_eq!(asked("truncate").unwrap().not_after, issuer_end);
        assert_eq!(asked("permit").unwrap().not_after, NOW + 7200);
    }

    #[test]
    fn not_after_bounds_forbid_limit_and_cap() {
        let forbid = decide(&ValidityInput {
            not_after: Some("2030-01-01T00:00:00Z".into()),
            role_not_after_bound: "forbid".into(),
            ..input()
        });
        assert!(
            forbid
                .unwrap_err()
                .to_string()
                .contains("not_after cannot be provided")
        );
        let limited = decide(&ValidityInput {
            not_after: Some("2030-01-01T00:00:00Z".into()),
            role_not_after_bound: "ttl-limited".into(),
            ..input()
        });
        assert!(limited.unwrap_err().to_string().contains("beyond the TTL"));
        let capped = decide(&ValidityInput {
            role_not_after_bound: "2024-05-02T00:00:00Z".into(),
            ..input()
        });
        assert!(
            capped
                .unwrap_err()
                .to_string()
                .contains("maximum timestamp")
        );
    }
}
