//! Time as Nomad's ACL objects carry it: RFC 3339 timestamps (`CreateTime`, `ExpirationTime`,
//! Go's `time.Time` JSON form) and Go duration strings (`ExpirationTTL`, `time.Duration`'s
//! `String()` form). Pure: no clock is read here.
//!
//! Invariants: every function is total (no panics on any input); formatting matches Go's
//! (`RFC3339Nano` with trailing fractional zeros trimmed, `Duration.String()` such as `1h0m0s`);
//! parsing accepts what Go's `time.Time` JSON decoding accepts (`Z` or a `±hh:mm` offset, an
//! optional fraction of up to nine digits).

/// Nanoseconds in one second.
const NANOS_PER_SECOND: i64 = 1_000_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// Unix nanoseconds as RFC 3339 in UTC, like Go's `time.RFC3339Nano`
/// (`2024-05-01T10:00:00.5Z`, no fraction when it is zero).
pub(crate) fn format_rfc3339(nanos: i64) -> String {
    let seconds = nanos.div_euclid(NANOS_PER_SECOND);
    let fraction = nanos.rem_euclid(NANOS_PER_SECOND);
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    );
    if fraction != 0 {
        let digits = format!("{fraction:09}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// Parses an RFC 3339 timestamp into Unix nanoseconds. The error is a client-facing detail.
pub(crate) fn parse_rfc3339(input: &str) -> Result<i64, String> {
    let invalid = || format!("parsing time {input:?} as RFC 3339: invalid timestamp");
    let bytes = input.as_bytes();
    if bytes.len() < 20 || !input.is_ascii() {
        return Err(invalid());
    }
    let number = |range: std::ops::Range<usize>| -> Result<i64, String> {
        let part = input.get(range).ok_or_else(invalid)?;
        if part.bytes().all(|byte| byte.is_ascii_digit()) {
            part.parse::<i64>().map_err(|_| invalid())
        } else {
            Err(invalid())
        }
    };
    let separators_ok = bytes[4] == b'-'
        && bytes[7] == b'-'
        && matches!(bytes[10], b'T' | b't')
        && bytes[13] == b':'
        && bytes[16] == b':';
    if !separators_ok {
        return Err(invalid());
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return Err(invalid());
    }
    let mut rest = &input[19..];
    let mut fraction: i64 = 0;
    if let Some(after_dot) = rest.strip_prefix('.') {
        let digits = after_dot
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after_dot.len());
        if digits == 0 || digits > 9 {
            return Err(invalid());
        }
        let padded = format!("{:0<9}", &after_dot[..digits]);
        fraction = padded.parse::<i64>().map_err(|_| invalid())?;
        rest = &after_dot[digits..];
    }
    let offset_seconds = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return Err(invalid()),
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return Err(invalid());
            }
            let hours = rest[1..3].parse::<i64>().map_err(|_| invalid())?;
            let minutes = rest[4..6].parse::<i64>().map_err(|_| invalid())?;
            if hours > 23 || minutes > 59 {
                return Err(invalid());
            }
            sign * (hours * 3600 + minutes * 60)
        }
    };
    let seconds =
        days_from_civil(year, month, day) * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second
            - offset_seconds;
    seconds
        .checked_mul(NANOS_PER_SECOND)
        .and_then(|nanos| nanos.checked_add(fraction))
        .ok_or_else(invalid)
}

/// A duration in nanoseconds as Go's `time.Duration.String()` writes it (`1h0m0s`, `1m30s`,
/// `1.5s`, `300ms`, `0s`).
pub(crate) fn format_go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".to_owned();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let magnitude = nanos.unsigned_abs();
    if magnitude < 1_000_000_000 {
        let (unit, scale) = match magnitude {
            0..1_000 => ("ns", 1),
            1_000..1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{sign}{}{unit}", decimal(magnitude, scale));
    }
    let whole_seconds = magnitude / 1_000_000_000;
    let seconds = decimal(magnitude % 60_000_000_000, 1_000_000_000);
    let minutes = whole_seconds / 60 % 60;
    let hours = whole_seconds / 3600;
    if hours > 0 {
        format!("{sign}{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{sign}{minutes}m{seconds}s")
    } else {
        format!("{sign}{seconds}s")
    }
}

/// `value / scale` with the remainder as a decimal fraction, trailing zeros trimmed.
fn decimal(value: u64, scale: u64) -> String {
    let whole = value / scale;
    let remainder = value % scale;
    if remainder == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let fraction = format!("{remainder:0width$}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day count since 1970-01-01 (inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_like_go_rfc3339nano() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_rfc3339(951_782_400_123_000_000),
            "2000-02-29T00:00:00.123Z"
        );
        assert_eq!(
            format_rfc3339(1_700_000_000_000_000_001),
            "2023-11-14T22:13:20.000000001Z"
        );
        assert_eq!(format_rfc3339(-1_000_000_000), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn rfc3339_parses_what_it_formats_and_offsets() {
        for nanos in [0, 951_782_400_123_000_000, 1_700_000_000_000_000_001] {
            assert_eq!(parse_rfc3339(&format_rfc3339(nanos)), Ok(nanos));
        }
        assert_eq!(
            parse_rfc3339("2023-11-14T23:13:20+01:00"),
            Ok(1_700_000_000_000_000_000)
        );
    }

    #[test]
    fn rfc3339_rejects_garbage_without_panicking() {
        for input in [
            "",
            "2023",
            "2023-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2023-01-01T00:00:00",
            "2023-01-01T00:00:00.Z",
            "2023-01-01T00:00:00+0100",
            "２０２３-01-01T00:00:00Z",
            "9999999999-01-01T00:00:00Z",
        ] {
            assert!(parse_rfc3339(input).is_err(), "{input:?}");
        }
    }

    #[test]
    fn go_duration_strings_match_go() {
        assert_eq!(format_go_duration(0), "0s");
        assert_eq!(format_go_duration(1), "1ns");
        assert_eq!(format_go_duration(1_500), "1.5µs");
        assert_eq!(format_go_duration(300_000_000), "300ms");
        assert_eq!(format_go_duration(1_500_000_000), "1.5s");
        assert_eq!(format_go_duration(90_000_000_000), "1m30s");
        assert_eq!(format_go_duration(3_600_000_000_000), "1h0m0s");
        assert_eq!(format_go_duration(86_400_000_000_000), "24h0m0s");
        assert_eq!(format_go_duration(-60_000_000_000), "-1m0s");
        assert_eq!(format_go_duration(i64::MIN), "-2562047h47m16.854775808s");
    }
}
