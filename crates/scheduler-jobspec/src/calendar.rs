//! Time for jobspecs: Go durations (every duration attribute, e.g. `kill_timeout = "30s"`)
//! and the `formatdate`/`timeadd` functions over RFC 3339 timestamps.
//!
//! Used by the block decoder (durations) and `functions.rs`. Never reads the clock. Durations
//! and civil-date arithmetic are `stdx`'s; the timestamps are parsed here rather than with
//! `stdx::time::parse_rfc3339` because these functions keep the written UTC offset (their
//! result is in it) and take any year 0000-9999, beyond what `i64` nanoseconds hold.
//!
//! Invariants: durations are i64 nanoseconds and overflow is an error, like Go's; calendar
//! arithmetic uses the proleptic Gregorian calendar on day counts (no leap seconds), and all
//! arithmetic is checked, so no input panics.

/// Go's `time.ParseDuration` ("1h30m", "1.5s", "300ms", "-2us", "0") in nanoseconds, failing
/// with Go's message (`time: missing unit in duration "10"`).
pub(crate) fn parse_go_duration(text: &str) -> Result<i64, String> {
    stdx::duration::parse_go_nanos(text).map_err(|err| err.go_message())
}

/// A parsed RFC 3339 timestamp: seconds since the epoch (UTC) and the written UTC offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Timestamp {
    unix: i64,
    nanos: u32,
    offset_secs: i32,
}

fn parse_timestamp(text: &str) -> Result<Timestamp, String> {
    let invalid = || format!("not a valid RFC3339 timestamp: {text:?}");
    let digits = |s: &str| -> Result<u32, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        s.parse().map_err(|_| invalid())
    };
    let year = digits(text.get(0..4).ok_or_else(invalid)?)?;
    let month = digits(text.get(5..7).ok_or_else(invalid)?)?;
    let day = digits(text.get(8..10).ok_or_else(invalid)?)?;
    let hour = digits(text.get(11..13).ok_or_else(invalid)?)?;
    let minute = digits(text.get(14..16).ok_or_else(invalid)?)?;
    let second = digits(text.get(17..19).ok_or_else(invalid)?)?;
    let separators_ok = text.get(4..5) == Some("-")
        && text.get(7..8) == Some("-")
        && matches!(text.get(10..11), Some("T" | "t"))
        && text.get(13..14) == Some(":")
        && text.get(16..17) == Some(":");
    if !separators_ok
        || !(1..=12).contains(&month)
        || day == 0
        || day > stdx::time::days_in_month(i64::from(year), month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return Err(invalid());
    }
    let mut rest = text.get(19..).ok_or_else(invalid)?;
    let mut nanos = 0u32;
    if let Some(after) = rest.strip_prefix('.') {
        let len = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        if len == 0 {
            return Err(invalid());
        }
        let (frac, tail) = after.split_at(len);
        let mut scale = 100_000_000u32;
        for ch in frac.chars() {
            nanos += ch.to_digit(10).unwrap_or(0) * scale;
            scale /= 10;
        }
        rest = tail;
    }
    let offset_secs = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.get(0..1) {
                Some("+") => 1,
                Some("-") => -1,
                _ => return Err(invalid()),
            };
            if rest.len() != 6 || rest.get(3..4) != Some(":") {
                return Err(invalid());
            }
            let oh = digits(rest.get(1..3).ok_or_else(invalid)?)?;
            let om = digits(rest.get(4..6).ok_or_else(invalid)?)?;
            if oh > 23 || om > 59 {
                return Err(invalid());
            }
            sign * i32::try_from(oh * 3600 + om * 60).map_err(|_| invalid())?
        }
    };
    let days = stdx::time::days_from_civil(i64::from(year), month, day);
    let local = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second);
    Ok(Timestamp {
        unix: local - i64::from(offset_secs),
        nanos,
        offset_secs,
    })
}

/// The broken-down local time of a timestamp.
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    weekday: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

fn civil(ts: &Timestamp) -> Civil {
    let local = ts.unix + i64::from(ts.offset_secs);
    let days = local.div_euclid(86_400);
    let secs = u32::try_from(local.rem_euclid(86_400)).unwrap_or(0);
    let (year, month, day) = stdx::time::civil_from_days(days);
    Civil {
        year,
        month,
        day,
        weekday: u32::try_from((days + 4).rem_euclid(7)).unwrap_or(0),
        hour: secs / 3600,
        minute: secs / 60 % 60,
        second: secs % 60,
    }
}

fn offset_text(offset_secs: i32, colon: bool) -> String {
    let sign = if offset_secs < 0 { '-' } else { '+' };
    let abs = offset_secs.unsigned_abs();
    if colon {
        format!("{sign}{:02}:{:02}", abs / 3600, abs / 60 % 60)
    } else {
        format!("{sign}{:02}{:02}", abs / 3600, abs / 60 % 60)
    }
}

fn rfc3339(ts: &Timestamp) -> String {
    let c = civil(ts);
    let zone = if ts.offset_secs == 0 {
        "Z".to_owned()
    } else {
        offset_text(ts.offset_secs, true)
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{zone}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// `formatdate(spec, timestamp)`, with Terraform's format verbs (`YYYY`, `MMM`, `hh`, `ZZZZ`…)
/// and single-quoted literals.
pub(crate) fn format_date(spec: &str, timestamp: &str) -> Result<String, String> {
    let ts = parse_timestamp(timestamp)?;
    let c = civil(&ts);
    let month_name = MONTHS
        .get(usize::try_from(c.month.saturating_sub(1)).unwrap_or(0))
        .copied()
        .unwrap_or("");
    let weekday_name = WEEKDAYS
        .get(usize::try_from(c.weekday).unwrap_or(0))
        .copied()
        .unwrap_or("");
    let chars: Vec<char> = spec.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while let Some(&ch) = chars.get(i) {
        if ch == '\'' {
            // A quoted literal; '' is a literal quote.
            if chars.get(i + 1) == Some(&'\'') {
                out.push('\'');
                i += 2;
                continue;
            }
            let mut j = i + 1;
            loop {
                match chars.get(j) {
                    None => return Err("unterminated literal '".to_owned()),
                    Some('\'') if chars.get(j + 1) == Some(&'\'') => {
                        out.push('\'');
                        j += 2;
                    }
                    Some('\'') => break,
                    Some(other) => {
                        out.push(*other);
                        j += 1;
                    }
                }
            }
            i = j + 1;
            continue;
        }
        if !ch.is_ascii_alphabetic() {
            out.push(ch);
            i += 1;
            continue;
        }
        let mut len = 1;
        while chars.get(i + len) == Some(&ch) {
            len += 1;
        }
        let hour12 = if c.hour.is_multiple_of(12) {
            12
        } else {
            c.hour % 12
        };
        let token = match (ch, len) {
            ('Y', 4) => format!("{:04}", c.year),
            ('Y', 2) => format!("{:02}", c.year.rem_euclid(100)),
            ('M', 4) => month_name.to_owned(),
            ('M', 3) => month_name.chars().take(3).collect(),
            ('M', 2) => format!("{:02}", c.month),
            ('M', 1) => c.month.to_string(),
            ('D', 2) => format!("{:02}", c.day),
            ('D', 1) => c.day.to_string(),
            ('E', 4) => weekday_name.to_owned(),
            ('E', 3) => weekday_name.chars().take(3).collect(),
            ('h', 2) => format!("{:02}", c.hour),
            ('h', 1) => c.hour.to_string(),
            ('H', 2) => format!("{hour12:02}"),
            ('H', 1) => hour12.to_string(),
            ('A', 2) => if c.hour < 12 { "AM" } else { "PM" }.to_owned(),
            ('a', 2) => if c.hour < 12 { "am" } else { "pm" }.to_owned(),
            ('m', 2) => format!("{:02}", c.minute),
            ('m', 1) => c.minute.to_string(),
            ('s', 2) => format!("{:02}", c.second),
            ('s', 1) => c.second.to_string(),
            ('Z', 5) => offset_text(ts.offset_secs, true),
            ('Z', 4) => offset_text(ts.offset_secs, false),
            ('Z', 3) => {
                if ts.offset_secs == 0 {
                    "UTC".to_owned()
                } else {
                    offset_text(ts.offset_secs, false)
                }
            }
            ('Z', 1) => {
                if ts.offset_secs == 0 {
                    "Z".to_owned()
                } else {
                    offset_text(ts.offset_secs, true)
                }
            }
            _ => {
                let verb: String = std::iter::repeat_n(ch, len).collect();
                return Err(format!("invalid date format verb {verb:?}"));
            }
        };
        out.push_str(&token);
        i += len;
    }
    Ok(out)
}

/// `timeadd(timestamp, duration)`: the timestamp moved by a Go duration, in RFC 3339.
pub(crate) fn time_add(timestamp: &str, duration: &str) -> Result<String, String> {
    let ts = parse_timestamp(timestamp)?;
    let nanos = parse_go_duration(duration)?;
    let total = i128::from(ts.unix) * 1_000_000_000 + i128::from(ts.nanos) + i128::from(nanos);
    let unix = i64::try_from(total.div_euclid(1_000_000_000))
        .map_err(|_| "the resulting time is out of range".to_owned())?;
    let nanos = u32::try_from(total.rem_euclid(1_000_000_000)).unwrap_or(0);
    Ok(rfc3339(&Timestamp {
        unix,
        nanos,
        offset_secs: ts.offset_secs,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_like_go() {
        assert_eq!(parse_go_duration("30s"), Ok(30_000_000_000));
        assert_eq!(parse_go_duration("1h30m"), Ok(5_400_000_000_000));
        assert_eq!(parse_go_duration("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_go_duration("300ms"), Ok(300_000_000));
        assert_eq!(parse_go_duration("-2us"), Ok(-2_000));
        assert_eq!(parse_go_duration("0"), Ok(0));
        assert_eq!(parse_go_duration(".5m"), Ok(30_000_000_000));
        assert!(parse_go_duration("").is_err());
        assert!(
            parse_go_duration("10")
                .unwrap_err()
                .contains("missing unit")
        );
        assert!(
            parse_go_duration("10x")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_go_duration("9999999999999h").is_err());
    }

    #[test]
    fn formatdate_and_timeadd_follow_terraform() {
        let ts = "2018-01-02T23:12:01Z";
        assert_eq!(
            format_date("DD MMM YYYY hh:mm ZZZ", ts).as_deref(),
            Ok("02 Jan 2018 23:12 UTC")
        );
        assert_eq!(
            format_date("EEEE, MMMM D, YYYY", ts).as_deref(),
            Ok("Tuesday, January 2, 2018")
        );
        assert_eq!(format_date("h:mm'h'", ts).as_deref(), Ok("23:12h"));
        assert_eq!(
            format_date("H:mmaa", "2018-01-02T23:12:01-08:00").as_deref(),
            Ok("11:12pm")
        );
        assert!(format_date("YYY", ts).is_err());
        assert_eq!(time_add(ts, "10m").as_deref(), Ok("2018-01-02T23:22:01Z"));
        assert_eq!(
            time_add("2017-11-22T00:00:00+01:00", "-1h").as_deref(),
            Ok("2017-11-21T23:00:00+01:00")
        );
        assert!(time_add("yesterday", "1h").is_err());
    }
}
