//! Resource ids, token secrets and their hashes, and timestamps.
//!
//! Where it sits: every family that creates a resource calls [`new_id`] with its prefix; token
//! issuing calls [`new_token_secret`] and stores only [`hash_secret`] of it; records keep times
//! as Unix milliseconds ([`now_ms`]) and views render them with [`format_time`].
//!
//! Invariants:
//! - An id is `<prefix>-<16 base58 characters>` (TFE's and OTF's shape), drawn from the OS
//!   CSPRNG-seeded thread RNG; prefixes: `user`, `org` (an organization's external id; the
//!   organization itself is addressed by name), `team`, `ou` (memberships), `at` (tokens),
//!   `ws` (workspaces), `cv` (configuration versions), `run`.
//! - A token secret is `<14 alphanumerics>.atlasv1.<64 alphanumerics>` (the shape secret
//!   scanners know); it is never stored, only its SHA-256 in lowercase hex.
//! - Timestamps render as ISO 8601 UTC with milliseconds: `2023-08-23T22:34:24.561Z`.

use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::digest;
use rand::Rng;
use rand::distr::Alphanumeric;

/// The base58 alphabet (no `0`, `O`, `I`, `l`).
const BASE58: &[u8] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/// A fresh id such as `user-2Qhk7LHgbMrm3grF`.
pub(crate) fn new_id(prefix: &str) -> String {
    let mut rng = rand::rng();
    let mut id = String::with_capacity(prefix.len() + 17);
    id.push_str(prefix);
    id.push('-');
    for _ in 0..16 {
        id.push(BASE58[rng.random_range(0..BASE58.len())] as char);
    }
    id
}

/// A fresh token secret: `<14 alnum>.atlasv1.<64 alnum>`.
pub(crate) fn new_token_secret() -> String {
    let part = |n: usize| -> String {
        rand::rng()
            .sample_iter(&Alphanumeric)
            .take(n)
            .map(char::from)
            .collect()
    };
    format!("{}.atlasv1.{}", part(14), part(64))
}

/// The lookup key of a secret: SHA-256, lowercase hex.
pub(crate) fn hash_secret(secret: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = digest::digest(&digest::SHA256, secret.as_bytes());
    let mut out = String::with_capacity(64);
    for byte in digest.as_ref() {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    out
}

/// Compares two hashes without an early exit.
pub(crate) fn hashes_equal(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Now, in Unix milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Unix milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn format_time(ms: u64) -> String {
    let secs = ms / 1000;
    let millis = ms % 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Parses an ISO 8601 UTC time (`2024-01-02T03:04:05Z`, optional fraction, `Z` or `+00:00`)
/// to Unix milliseconds; `None` for anything else.
pub(crate) fn parse_time(raw: &str) -> Option<u64> {
    let raw = raw.trim();
    let body = raw
        .strip_suffix('Z')
        .or_else(|| raw.strip_suffix("+00:00"))?;
    let (date, time) = body.split_once('T')?;
    let mut date_parts = date.split('-');
    let year: i64 = date_parts.next()?.parse().ok()?;
    let month: u32 = date_parts.next()?.parse().ok()?;
    let day: u32 = date_parts.next()?.parse().ok()?;
    if date_parts.next().is_some() || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock_parts = clock.split(':');
    let hour: u64 = clock_parts.next()?.parse().ok()?;
    let minute: u64 = clock_parts.next()?.parse().ok()?;
    let second: u64 = clock_parts.next()?.parse().ok()?;
    if clock_parts.next().is_some() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    if !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let millis: u64 = format!("{fraction:0<3}")[..3].parse().ok()?;
    let days = days_from_civil(year, month, day);
    let secs = u64::try_from(days).ok()? * 86_400 + hour * 3600 + minute * 60 + second;
    Some(secs * 1000 + millis)
}

/// (year, month, day) to days since 1970-01-01 (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let month = i64::from(month);
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_id_has_prefix_and_sixteen_base58_characters() {
        let id = new_id("ou");
        let rest = id.strip_prefix("ou-").expect("prefix");
        assert_eq!(rest.len(), 16);
        assert!(rest.bytes().all(|b| BASE58.contains(&b)), "{id}");
        assert_ne!(new_id("ou"), id);
    }

    #[test]
    fn token_secret_has_the_atlasv1_shape() {
        let secret = new_token_secret();
        let parts: Vec<&str> = secret.split('.').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(
            (parts[0].len(), parts[1], parts[2].len()),
            (14, "atlasv1", 64)
        );
    }

    #[test]
    fn hash_secret_is_sha256_hex() {
        assert_eq!(
            hash_secret("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(hashes_equal(&hash_secret("x"), &hash_secret("x")));
        assert!(!hashes_equal(&hash_secret("x"), &hash_secret("y")));
    }

    #[test]
    fn format_time_is_iso8601_with_milliseconds() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_time(1_692_830_064_561), "2023-08-23T22:34:24.561Z");
        assert_eq!(format_time(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn parse_time_reads_what_format_time_writes() {
        for ms in [0, 951_782_400_000, 1_692_830_064_561] {
            assert_eq!(parse_time(&format_time(ms)), Some(ms));
        }
        assert_eq!(parse_time("2023-08-23T22:34:24Z"), Some(1_692_830_064_000));
        assert_eq!(
            parse_time("2023-08-23T22:34:24+00:00"),
            Some(1_692_830_064_000)
        );
        assert_eq!(parse_time("2023-08-23"), None);
        assert_eq!(parse_time("2023-13-01T00:00:00Z"), None);
        assert_eq!(parse_time("tomorrow"), None);
    }
}
