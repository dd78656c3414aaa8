//! Resource ids, token secrets and their hashes, and timestamps.
//!
//! Where it sits: every family that creates a resource calls [`new_id`] with its prefix; token
//! issuing calls [`new_token_secret`] and stores only [`hash_secret`] of it; records keep times
//! as Unix milliseconds (from the state's clock, `State::now_ms`), views render them with
//! [`format_time`] and `expired-at` is read with [`parse_time`]. The calendar arithmetic and
//! the RFC 3339 rendering are `stdx::time`'s; the lenient grammar [`parse_time`] accepts is
//! this API's own.
//!
//! Invariants:
//! - An id is `<prefix>-<16 base58 characters>` (TFE's and OTF's shape), drawn from the OS
//!   CSPRNG-seeded thread RNG; prefixes: `user`, `org` (an organization's external id; the
//!   organization itself is addressed by name), `team`, `ou` (memberships), `at` (tokens),
//!   `ws` (workspaces), `cv` (configuration versions), `run`.
//! - A token secret is `<14 alphanumerics>.atlasv1.<64 alphanumerics>` (the shape secret
//!   scanners know); it is never stored, only its SHA-256 in lowercase hex.
//! - Timestamps render as ISO 8601 UTC with milliseconds: `2023-08-23T22:34:24.561Z`.

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
    stdx::hex::encode(digest::digest(&digest::SHA256, secret.as_bytes()).as_ref())
}

/// Compares two hashes without an early exit.
pub(crate) fn hashes_equal(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Unix milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn format_time(ms: u64) -> String {
    stdx::time::format_rfc3339_millis(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// Parses an ISO 8601 UTC time (`2024-01-02T03:04:05Z`, optional fraction, `Z` or `+00:00`)
/// to Unix milliseconds; `None` for anything else, a time before 1970 or one past the range.
/// Lenient where RFC 3339 is strict, as it always was here: fields of any width, a day up to
/// 31 in any month (rolling over), a leap second, a fraction of any length (read to the
/// millisecond).
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
    // Past this year the milliseconds overflow `u64` anyway; stopping here keeps the calendar
    // arithmetic in range.
    if year > 1_000_000_000 {
        return None;
    }
    let days = u64::try_from(stdx::time::days_from_civil(year, month, day)).ok()?;
    let secs = days
        .checked_mul(86_400)?
        .checked_add(hour * 3600 + minute * 60 + second)?;
    secs.checked_mul(1000)?.checked_add(millis)
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

    #[test]
    fn parse_time_keeps_its_lenient_grammar() {
        assert_eq!(parse_time("2023-8-3T1:2:3Z"), Some(1_691_024_523_000));
        assert_eq!(parse_time("2023-02-31T00:00:00Z"), Some(1_677_801_600_000));
        assert_eq!(parse_time("2023-08-23T22:34:60Z"), Some(1_692_830_100_000));
        assert_eq!(
            parse_time(" 2023-08-23T22:34:24.5612Z "),
            Some(1_692_830_064_561)
        );
        assert_eq!(parse_time("2023-08-23t22:34:24Z"), None);
        assert_eq!(parse_time("2023-08-23T22:34:24+02:00"), None);
        assert_eq!(parse_time("1969-12-31T23:59:59Z"), None);
        assert_eq!(parse_time("99999999999-01-01T00:00:00Z"), None);
    }
}
