//! Go duration strings (`"20ms"`, `"10s"`, `"1m30s"`, `"1.5h"`), parsed as Go's
//! `time.ParseDuration` and formatted as `time.Duration.String()`.
//!
//! Consul and Nomad clients send them in `?wait=`, session TTLs, check intervals and job specs;
//! their APIs answer with them (`"15s"`, `"1h0m0s"`).
//!
//! Invariants: [`parse_go_nanos`] accepts exactly Go's grammar (an optional sign; a bare `"0"`;
//! one or more terms of a decimal number and a unit `ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`, `h`)
//! within `i64` nanoseconds; [`parse_go`] is the same for non-negative values up to `u64::MAX`
//! nanoseconds; [`format_go`] writes what Go's `Duration.String()` writes.

use std::fmt;
use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurationErrorKind {
    /// The input (after its sign) was empty.
    Empty,
    /// A term had no number, or a malformed one (`"s"`, `"1..2s"`).
    ExpectedNumber,
    /// A number without a unit (`"10"`).
    MissingUnit,
    /// A unit Go does not know; the unit as written.
    UnknownUnit(String),
    /// Out of range.
    TooLarge,
    /// A negative value where only non-negative ones are accepted ([`parse_go`]).
    Negative,
}

/// A rejected duration string: the input and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError {
    input: String,
    kind: DurationErrorKind,
    /// A number with a second `.` after digits (`"1..2s"`): Go reads the second `.` as where
    /// the unit should be, and says "missing unit".
    go_missing_unit: bool,
}

impl DurationError {
    fn new(input: &str, kind: DurationErrorKind) -> DurationError {
        DurationError {
            input: input.to_owned(),
            kind,
            go_missing_unit: false,
        }
    }

    /// Why the input was rejected.
    pub fn kind(&self) -> &DurationErrorKind {
        &self.kind
    }

    /// The rejected input.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// The message Go's `time.ParseDuration` returns for this input
    /// (`time: missing unit in duration "10"`).
    pub fn go_message(&self) -> String {
        let input = &self.input;
        if self.go_missing_unit {
            return format!("time: missing unit in duration {input:?}");
        }
        match &self.kind {
            DurationErrorKind::MissingUnit => format!("time: missing unit in duration {input:?}"),
            DurationErrorKind::UnknownUnit(unit) => {
                format!("time: unknown unit {unit:?} in duration {input:?}")
            }
            _ => format!("time: invalid duration {input:?}"),
        }
    }
}

impl fmt::Display for DurationError {
    /// `invalid duration "10x": unknown unit "x"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reason = match &self.kind {
            DurationErrorKind::Empty => "empty".to_owned(),
            DurationErrorKind::ExpectedNumber => "expected a number".to_owned(),
            DurationErrorKind::MissingUnit => "missing unit".to_owned(),
            DurationErrorKind::UnknownUnit(unit) => format!("unknown unit {unit:?}"),
            DurationErrorKind::TooLarge => "too large".to_owned(),
            DurationErrorKind::Negative => "must not be negative".to_owned(),
        };
        write!(f, "invalid duration {:?}: {reason}", self.input)
    }
}

impl std::error::Error for DurationError {}

/// Parses a non-negative Go duration, up to `u64::MAX` nanoseconds.
pub fn parse_go(input: &str) -> Result<Duration, DurationError> {
    let rest = input.strip_prefix('+').unwrap_or(input);
    if rest.starts_with('-') {
        return Err(DurationError::new(input, DurationErrorKind::Negative));
    }
    let nanos = parse_terms(input, rest, u128::from(u64::MAX))?;
    Ok(Duration::from_nanos(
        u64::try_from(nanos).unwrap_or(u64::MAX),
    ))
}

/// Parses a Go duration with its sign into nanoseconds, within `i64` as Go's is.
pub fn parse_go_nanos(input: &str) -> Result<i64, DurationError> {
    let (negative, rest) = match input.as_bytes().first() {
        Some(b'-') => (true, &input[1..]),
        Some(b'+') => (false, &input[1..]),
        _ => (false, input),
    };
    let limit = if negative {
        u128::from(i64::MIN.unsigned_abs())
    } else {
        u128::from(i64::MAX.unsigned_abs())
    };
    let nanos = parse_terms(input, rest, limit)?;
    let nanos = i128::try_from(nanos).unwrap_or(i128::MAX);
    let signed = if negative { -nanos } else { nanos };
    i64::try_from(signed).map_err(|_| DurationError::new(input, DurationErrorKind::TooLarge))
}

/// The terms after the sign, as nanoseconds no larger than `limit`.
fn parse_terms(input: &str, mut rest: &str, limit: u128) -> Result<u128, DurationError> {
    let invalid = |kind| DurationError::new(input, kind);
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid(DurationErrorKind::Empty));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after_number) = rest.split_at(number_len);
        let unit_len = after_number
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after_number.len());
        let (unit, after_unit) = after_number.split_at(unit_len);
        rest = after_unit;

        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            let mut err = invalid(DurationErrorKind::ExpectedNumber);
            let before_second_dot = fraction.split('.').next().unwrap_or("");
            err.go_missing_unit =
                fraction.contains('.') && !(whole.is_empty() && before_second_dot.is_empty());
            return Err(err);
        }
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "" => return Err(invalid(DurationErrorKind::MissingUnit)),
            other => return Err(invalid(DurationErrorKind::UnknownUnit(other.to_owned()))),
        };
        let too_large = || invalid(DurationErrorKind::TooLarge);
        // `whole` is all digits, so parsing fails only on overflow.
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_large())?
        };
        let mut term = whole.checked_mul(unit_nanos).ok_or_else(too_large)?;
        // Digits past the 20th cannot change the result at nanosecond precision.
        let fraction = &fraction[..fraction.len().min(20)];
        if !fraction.is_empty() {
            let numerator: u128 = fraction.parse().map_err(|_| too_large())?;
            let denominator = 10u128.pow(fraction.len() as u32);
            term += numerator * unit_nanos / denominator;
        }
        total = total.checked_add(term).ok_or_else(too_large)?;
        if total > limit {
            return Err(too_large());
        }
    }
    Ok(total)
}

/// Formats nanoseconds as Go's `time.Duration.String()`: `"0s"`, `"1ns"`, `"1.5µs"`,
/// `"500ms"`, `"10s"`, `"1m30s"`, `"1h0m0s"`, `"-2m3.5s"`.
pub fn format_go(nanos: i64) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let u = nanos.unsigned_abs();
    if u == 0 {
        return "0s".to_owned();
    }
    if u < 1_000_000_000 {
        let (precision, unit) = match u {
            0..1_000 => (0, "ns"),
            1_000..1_000_000 => (3, "\u{b5}s"),
            _ => (6, "ms"),
        };
        let (whole, fraction) = split_fraction(u, precision);
        return format!("{sign}{whole}{fraction}{unit}");
    }
    let (seconds, fraction) = split_fraction(u, 9);
    let (minutes, seconds) = (seconds / 60, seconds % 60);
    let (hours, minutes) = (minutes / 60, minutes % 60);
    if hours > 0 {
        format!("{sign}{hours}h{minutes}m{seconds}{fraction}s")
    } else if minutes > 0 {
        format!("{sign}{minutes}m{seconds}{fraction}s")
    } else {
        format!("{sign}{seconds}{fraction}s")
    }
}

/// [`format_go`] for a `std::time::Duration`, saturating at Go's largest duration.
pub fn format_go_std(duration: Duration) -> String {
    format_go(i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX))
}

/// `value` split at `precision` decimal digits: the whole part and the fraction as Go prints
/// it (`".25"`, trailing zeros dropped, `""` when zero).
fn split_fraction(value: u64, precision: u32) -> (u64, String) {
    let scale = 10u64.pow(precision);
    let fraction = value % scale;
    let text = if fraction == 0 {
        String::new()
    } else {
        let digits = format!("{fraction:0width$}", width = precision as usize);
        format!(".{}", digits.trim_end_matches('0'))
    };
    (value / scale, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(input: &str, expected: Result<Duration, &str>) {
        assert_eq!(
            parse_go(input).map_err(|err| err.to_string()),
            expected.map_err(str::to_owned),
            "input {input:?}"
        );
    }

    #[test]
    fn parse_go_accepts_single_units() {
        check("20ms", Ok(Duration::from_millis(20)));
        check("10s", Ok(Duration::from_secs(10)));
        check("5m", Ok(Duration::from_secs(300)));
        check("2h", Ok(Duration::from_secs(7200)));
        check("7ns", Ok(Duration::from_nanos(7)));
        check("3us", Ok(Duration::from_micros(3)));
        check("3µs", Ok(Duration::from_micros(3)));
        check("3μs", Ok(Duration::from_micros(3)));
    }

    #[test]
    fn parse_go_accepts_compound_and_decimal_terms() {
        check("1m30s", Ok(Duration::from_secs(90)));
        check("1h2m3s4ms", Ok(Duration::from_millis(3_723_004)));
        check("1.5h", Ok(Duration::from_secs(5400)));
        check(".5s", Ok(Duration::from_millis(500)));
        check("1.s", Ok(Duration::from_secs(1)));
        check("+10s", Ok(Duration::from_secs(10)));
        check("0", Ok(Duration::ZERO));
        check("0s", Ok(Duration::ZERO));
    }

    #[test]
    fn parse_go_rejects_bad_input_saying_why() {
        check("", Err(r#"invalid duration "": empty"#));
        check("10", Err(r#"invalid duration "10": missing unit"#));
        check("10x", Err(r#"invalid duration "10x": unknown unit "x""#));
        check("s", Err(r#"invalid duration "s": expected a number"#));
        check(
            "1..2s",
            Err(r#"invalid duration "1..2s": expected a number"#),
        );
        check(
            "-5s",
            Err(r#"invalid duration "-5s": must not be negative"#),
        );
        check("10 s", Err(r#"invalid duration "10 s": unknown unit " s""#));
    }

    #[test]
    fn parse_go_rejects_overflow() {
        check(
            "99999999999999999999h",
            Err(r#"invalid duration "99999999999999999999h": too large"#),
        );
        check(
            "999999999999999999999999999999999999999999s",
            Err(r#"invalid duration "999999999999999999999999999999999999999999s": too large"#),
        );
    }

    #[test]
    fn parse_go_nanos_takes_a_sign_and_stays_within_i64() {
        assert_eq!(parse_go_nanos("-1.5s"), Ok(-1_500_000_000));
        assert_eq!(parse_go_nanos("+2m"), Ok(120_000_000_000));
        assert_eq!(parse_go_nanos("-0"), Ok(0));
        assert_eq!(parse_go_nanos("2562047h47m16.854775807s"), Ok(i64::MAX));
        assert_eq!(parse_go_nanos("-2562047h47m16.854775808s"), Ok(i64::MIN));
        let err = parse_go_nanos("2562047h47m16.854775808s").unwrap_err();
        assert_eq!(err.kind(), &DurationErrorKind::TooLarge);
        assert_eq!(
            parse_go_nanos("-").unwrap_err().kind(),
            &DurationErrorKind::Empty
        );
    }

    #[test]
    fn go_messages_match_time_parse_duration() {
        let message = |input: &str| parse_go_nanos(input).unwrap_err().go_message();
        assert_eq!(message("10"), r#"time: missing unit in duration "10""#);
        assert_eq!(
            message("10x"),
            r#"time: unknown unit "x" in duration "10x""#
        );
        assert_eq!(message("abc"), r#"time: invalid duration "abc""#);
        assert_eq!(message(""), r#"time: invalid duration """#);
        assert_eq!(
            message("1..2s"),
            r#"time: missing unit in duration "1..2s""#
        );
        assert_eq!(
            message("1.2.3s"),
            r#"time: missing unit in duration "1.2.3s""#
        );
        assert_eq!(message(".5.m"), r#"time: missing unit in duration ".5.m""#);
        assert_eq!(message("..5s"), r#"time: invalid duration "..5s""#);
    }

    #[test]
    fn format_go_writes_what_go_writes() {
        let cases: [(i64, &str); 16] = [
            (0, "0s"),
            (1, "1ns"),
            (999, "999ns"),
            (1_000, "1µs"),
            (1_500, "1.5µs"),
            (1_000_000, "1ms"),
            (1_234_567, "1.234567ms"),
            (500_000_000, "500ms"),
            (1_000_000_000, "1s"),
            (1_500_000_000, "1.5s"),
            (90_000_000_000, "1m30s"),
            (3_600_000_000_000, "1h0m0s"),
            (86_400_000_000_000, "24h0m0s"),
            (-123_500_000_000, "-2m3.5s"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ];
        for (nanos, expected) in cases {
            assert_eq!(format_go(nanos), expected, "{nanos}");
        }
        assert_eq!(format_go_std(Duration::from_secs(10)), "10s");
        assert_eq!(format_go_std(Duration::MAX), "2562047h47m16.854775807s");
    }
}
