//! Time rendering as Nomad's JSON and messages show it: RFC 3339 with nanoseconds (Go's
//! `time.Time` JSON) and Go's `time.Duration` string (`1h0m0s`, `15.2s`, `100ms`).
//!
//! Invariant: pure functions of their arguments (the clock is read only by [`now_nanos`]).

use std::time::Duration;

pub(crate) use scheduler::now_nanos;

/// Unix nanoseconds as Go renders a UTC `time.Time` in JSON (RFC 3339, fraction trimmed).
pub(crate) fn rfc3339_nanos(unix_nanos: i64) -> String {
    let secs = unix_nanos.div_euclid(1_000_000_000);
    let frac = unix_nanos.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    if frac != 0 {
        let digits = format!("{frac:09}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// Now as an RFC 3339 string.
pub(crate) fn now_rfc3339() -> String {
    rfc3339_nanos(now_nanos())
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Go's `time.Duration.String()` for a nanosecond count.
pub(crate) fn go_duration(nanos: i64) -> String {
    let negative = nanos < 0;
    let magnitude = nanos.unsigned_abs();
    let mut out = if magnitude == 0 {
        return "0s".to_owned();
    } else if magnitude < 1_000 {
        format!("{magnitude}ns")
    } else if magnitude < 1_000_000 {
        format!("{}µs", fraction(magnitude, 3))
    } else if magnitude < 1_000_000_000 {
        format!("{}ms", fraction(magnitude, 6))
    } else {
        let seconds_part = fraction(magnitude % 60_000_000_000, 9);
        let minutes_total = magnitude / 60_000_000_000;
        if minutes_total == 0 {
            format!("{seconds_part}s")
        } else {
            let hours = minutes_total / 60;
            let minutes = minutes_total % 60;
            if hours == 0 {
                format!("{minutes}m{seconds_part}s")
            } else {
                format!("{hours}h{minutes}m{seconds_part}s")
            }
        }
    };
    if negative {
        out.insert(0, '-');
    }
    out
}

/// `Duration` flavour of [`go_duration`].
pub(crate) fn go_duration_of(duration: Duration) -> String {
    go_duration(nanos_of(duration))
}

/// A `Duration` as wire nanoseconds, saturating.
pub(crate) fn nanos_of(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

/// Wire nanoseconds as a `Duration` (negative is zero).
pub(crate) fn duration_of(nanos: i64) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(0))
}

/// `value / 10^digits` with the fraction's trailing zeros trimmed (Go's `fmtFrac`+`fmtInt`).
fn fraction(value: u64, digits: u32) -> String {
    let scale = 10u64.pow(digits);
    let whole = value / scale;
    let frac = value % scale;
    if frac == 0 {
        return whole.to_string();
    }
    let text = format!("{frac:0width$}", width = digits as usize);
    format!("{whole}.{}", text.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_render_like_go() {
        let s = 1_000_000_000;
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(1), "1ns");
        assert_eq!(go_duration(1_500), "1.5µs");
        assert_eq!(go_duration(100_000_000), "100ms");
        assert_eq!(go_duration(s), "1s");
        assert_eq!(go_duration(15 * s + 250_000_000), "15.25s");
        assert_eq!(go_duration(60 * s), "1m0s");
        assert_eq!(go_duration(90 * s), "1m30s");
        assert_eq!(go_duration(30 * 60 * s), "30m0s");
        assert_eq!(go_duration(3600 * s), "1h0m0s");
        assert_eq!(go_duration(24 * 3600 * s), "24h0m0s");
        assert_eq!(go_duration(-2 * s), "-2s");
        assert_eq!(go_duration(s + 1), "1.000000001s");
    }

    #[test]
    fn rfc3339_renders_utc_with_trimmed_nanos() {
        assert_eq!(rfc3339_nanos(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339_nanos(1_700_000_000_123_000_000),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(
            rfc3339_nanos(951_782_400_000_000_001),
            "2000-02-29T00:00:00.000000001Z"
        );
    }
}
