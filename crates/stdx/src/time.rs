//! Calendar arithmetic and RFC 3339, as Go's `time.Time` marshals and parses it, plus the
//! system time.
//!
//! Stored times are Unix nanoseconds or milliseconds (`i64`); rendering to the wire happens
//! here. Civil dates use Howard Hinnant's algorithms over the proleptic Gregorian calendar.
//!
//! Invariants: every function is total (no panic on any input); `format_*` write UTC with a
//! `Z`; [`parse_rfc3339`] accepts what Go's `time.Time` JSON decoding accepts and nothing else,
//! and `parse_rfc3339(&format_rfc3339_nanos(t)) == Ok(t)`.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

const NANOS_PER_SECOND: i64 = 1_000_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// Days since 1970-01-01 for a (year, month 1-12, day 1-31) date; saturates at `i64`'s range
/// for years no calendar needs.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    // i128 holds every intermediate value for any i64 year.
    let month = i128::from(month);
    let year = i128::from(year) - i128::from(month <= 2);
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i128::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    i64::try_from(days).unwrap_or(if days < 0 { i64::MIN } else { i64::MAX })
}

/// The (year, month 1-12, day 1-31) date `days` after 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days.saturating_add(719_468);
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    // Both are in range by construction (day 1-31, month 1-12).
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The number of days in `month` of `year`.
pub fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => 0,
    }
}

/// `YYYY-MM-DDTHH:MM:SS` for whole Unix seconds, UTC, without zone.
fn date_time(unix_secs: i64) -> String {
    let (year, month, day) = civil_from_days(unix_secs.div_euclid(SECONDS_PER_DAY));
    let of_day = unix_secs.rem_euclid(SECONDS_PER_DAY);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Unix nanoseconds as Go's `RFC3339Nano` in UTC: `2024-05-01T10:00:00.5Z`, no fraction when
/// it is zero (how Go marshals a `time.Time` to JSON).
pub fn format_rfc3339_nanos(unix_nanos: i64) -> String {
    let mut out = date_time(unix_nanos.div_euclid(NANOS_PER_SECOND));
    let fraction = unix_nanos.rem_euclid(NANOS_PER_SECOND);
    if fraction != 0 {
        let digits = format!("{fraction:09}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// Unix milliseconds as RFC 3339 in UTC with exactly three fraction digits:
/// `2024-05-01T12:00:00.123Z`.
pub fn format_rfc3339_millis(unix_ms: i64) -> String {
    let millis = unix_ms.rem_euclid(1000);
    format!("{}.{millis:03}Z", date_time(unix_ms.div_euclid(1000)))
}

/// Unix seconds as RFC 3339 in UTC without a fraction: `2024-05-01T12:00:00Z`.
pub fn format_rfc3339_secs(unix_secs: i64) -> String {
    format!("{}Z", date_time(unix_secs))
}

/// A string that is not an RFC 3339 timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rfc3339Error {
    input: String,
}

impl Rfc3339Error {
    /// The rejected input.
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl fmt::Display for Rfc3339Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "parsing time {:?} as RFC 3339: invalid timestamp",
            self.input
        )
    }
}

impl std::error::Error for Rfc3339Error {}

/// Parses an RFC 3339 timestamp (`2024-05-01T10:00:00Z`, `2024-05-01t10:00:00.123+02:00`) into
/// Unix nanoseconds: `T` or `t`, an optional fraction of one or more digits (beyond nine
/// ignored), then `Z`, `z` or `±hh:mm`. Dates and times are range-checked.
pub fn parse_rfc3339(input: &str) -> Result<i64, Rfc3339Error> {
    parse_parts(input).ok_or_else(|| Rfc3339Error {
        input: input.to_owned(),
    })
}

fn parse_parts(input: &str) -> Option<i64> {
    let bytes = input.as_bytes();
    if bytes.len() < 20 || !input.is_ascii() {
        return None;
    }
    let number = |from: usize, to: usize| -> Option<i64> {
        let part = &bytes[from..to];
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        input[from..to].parse().ok()
    };
    let separators = bytes[4] == b'-'
        && bytes[7] == b'-'
        && matches!(bytes[10], b'T' | b't')
        && bytes[13] == b':'
        && bytes[16] == b':';
    if !separators {
        return None;
    }
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    let month = u32::try_from(month).ok().filter(|m| (1..=12).contains(m))?;
    let day = u32::try_from(day)
        .ok()
        .filter(|d| *d >= 1 && *d <= days_in_month(year, month))?;
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut rest = &input[19..];
    let mut fraction_nanos = 0;
    if let Some(after_dot) = rest.strip_prefix('.') {
        let digits = after_dot.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let kept = &after_dot[..digits.min(9)];
        fraction_nanos = kept.parse::<i64>().ok()? * 10i64.pow(9 - kept.len() as u32);
        rest = &after_dot[digits..];
    }
    let offset_secs = match rest.as_bytes() {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let digits = [*h1, *h2, *m1, *m2];
            if !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let hours = i64::from((h1 - b'0') * 10 + (h2 - b'0'));
            let minutes = i64::from((m1 - b'0') * 10 + (m2 - b'0'));
            if hours > 23 || minutes > 59 {
                return None;
            }
            let magnitude = hours * 3600 + minutes * 60;
            if *sign == b'-' { -magnitude } else { magnitude }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days
        .checked_mul(SECONDS_PER_DAY)?
        .checked_add(hour * 3600 + minute * 60 + second)?
        .checked_sub(offset_secs)?;
    seconds
        .checked_mul(NANOS_PER_SECOND)?
        .checked_add(fraction_nanos)
}

/// The system time in Unix nanoseconds (0 before the epoch, saturating far after it).
pub fn unix_now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// The system time in Unix milliseconds (0 before the epoch).
pub fn unix_now_ms() -> i64 {
    unix_now_nanos() / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_round_trip_across_eras() {
        for days in [
            -800_000, -719_468, -1, 0, 1, 59, 60, 10_957, 19_844, 2_932_896,
        ] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{days}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_844), (2024, 5, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert!(days_from_civil(i64::MAX, 12, 31) > 0);
        assert!(days_from_civil(i64::MIN, 1, 1) < 0);
        let _ = civil_from_days(i64::MIN);
        let _ = civil_from_days(i64::MAX);
    }

    #[test]
    fn rfc3339_formats_like_go() {
        let t = 1_714_557_600; // 2024-05-01T10:00:00Z
        assert_eq!(format_rfc3339_secs(t), "2024-05-01T10:00:00Z");
        assert_eq!(
            format_rfc3339_nanos(t * NANOS_PER_SECOND),
            "2024-05-01T10:00:00Z"
        );
        assert_eq!(
            format_rfc3339_nanos(t * NANOS_PER_SECOND + 500_000_000),
            "2024-05-01T10:00:00.5Z"
        );
        assert_eq!(
            format_rfc3339_nanos(t * NANOS_PER_SECOND + 1),
            "2024-05-01T10:00:00.000000001Z"
        );
        assert_eq!(
            format_rfc3339_millis(t * 1000 + 123),
            "2024-05-01T10:00:00.123Z"
        );
        assert_eq!(format_rfc3339_millis(t * 1000), "2024-05-01T10:00:00.000Z");
        assert_eq!(format_rfc3339_millis(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_rfc3339_nanos(0), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn rfc3339_parses_what_it_formats_and_offsets() {
        for nanos in [0, 1, 1_714_557_600_500_000_000, -1_500_000_000] {
            assert_eq!(parse_rfc3339(&format_rfc3339_nanos(nanos)), Ok(nanos));
        }
        assert_eq!(
            parse_rfc3339("2024-05-01T12:00:00+02:00"),
            parse_rfc3339("2024-05-01T10:00:00Z")
        );
        assert_eq!(
            parse_rfc3339("2024-05-01t09:30:00.25-00:30"),
            Ok(1_714_557_600_250_000_000)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T10:00:00.1234567891Z"),
            Ok(1_714_557_600_123_456_789)
        );
    }

    #[test]
    fn rfc3339_rejects_garbage_without_panicking() {
        for bad in [
            "",
            "2024-05-01",
            "2024-05-01 10:00:00Z",
            "2024-13-01T10:00:00Z",
            "2024-02-30T10:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T10:00:60Z",
            "2024-05-01T10:00:00",
            "2024-05-01T10:00:00.Z",
            "2024-05-01T10:00:00+0200",
            "2024-05-01T10:00:00+2:00",
            "2024-05-01T10:00:00Zjunk",
            "2024-05-01T10:00:0é0Z",
            "+024-05-01T10:00:00Z",
        ] {
            assert!(parse_rfc3339(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_rfc3339("nope-nope-nope-nope")
                .unwrap_err()
                .to_string(),
            r#"parsing time "nope-nope-nope-nope" as RFC 3339: invalid timestamp"#
        );
    }

    #[test]
    fn leap_years_follow_the_gregorian_rule() {
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(1900, 2), 28);
        assert_eq!(days_in_month(2000, 2), 29);
        assert!(parse_rfc3339("2024-02-29T00:00:00Z").is_ok());
        assert!(parse_rfc3339("2023-02-29T00:00:00Z").is_err());
    }
}
