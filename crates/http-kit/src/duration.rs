//! Go duration strings (`"20ms"`, `"10s"`, `"1m30s"`, `"1.5h"`), as Consul and Nomad clients
//! send them in `?wait=`, session TTLs and job specs.
//!
//! Used by [`blocking`](crate::blocking) and by services parsing their own duration fields.
//!
//! Invariant: accepts exactly Go's `time.ParseDuration` grammar for non-negative values (units
//! `ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`, `h`; decimals; several terms; a bare `"0"`), and
//! rejects negatives and values over `u64::MAX` nanoseconds with an error that quotes the input.

use std::time::Duration;

/// Parses a non-negative Go duration; see the module docs for the grammar.
pub fn parse_go_duration(input: &str) -> Result<Duration, String> {
    let invalid = |reason: &str| format!("invalid duration {input:?}: {reason}");
    let mut rest = input.strip_prefix('+').unwrap_or(input);
    if rest.starts_with('-') {
        return Err(invalid("must not be negative"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid("empty"));
    }
    let mut total_nanos: u128 = 0;
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
            return Err(invalid("expected a number"));
        }
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "" => return Err(invalid("missing unit")),
            other => return Err(invalid(&format!("unknown unit {other:?}"))),
        };
        let too_large = || invalid("too large");
        // `whole` is all digits, so parsing fails only on overflow.
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_large())?
        };
        let mut term_nanos = whole.checked_mul(unit_nanos).ok_or_else(too_large)?;
        // Digits past the 20th cannot change the result at nanosecond precision.
        let fraction = &fraction[..fraction.len().min(20)];
        if !fraction.is_empty() {
            let numerator: u128 = fraction.parse().map_err(|_| too_large())?;
            let denominator = 10u128.pow(fraction.len() as u32);
            term_nanos += numerator * unit_nanos / denominator;
        }
        total_nanos = total_nanos.checked_add(term_nanos).ok_or_else(too_large)?;
        if total_nanos > u128::from(u64::MAX) {
            return Err(too_large());
        }
    }
    Ok(Duration::from_nanos(total_nanos as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(input: &str, expected: Result<Duration, &str>) {
        assert_eq!(
            parse_go_duration(input),
            expected.map_err(str::to_owned),
            "input {input:?}"
        );
    }

    #[test]
    fn parse_go_duration_accepts_single_units() {
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
    fn parse_go_duration_accepts_compound_and_decimal_terms() {
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
    fn parse_go_duration_rejects_bad_input() {
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
    fn parse_go_duration_rejects_overflow() {
        check(
            "99999999999999999999h",
            Err(r#"invalid duration "99999999999999999999h": too large"#),
        );
        check(
            "999999999999999999999999999999999999999999s",
            Err(r#"invalid duration "999999999999999999999999999999999999999999s": too large"#),
        );
    }
}
