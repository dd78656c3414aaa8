//! Go `strconv` look-alikes for the filter language: the parsing rules go-bexpr applies when
//! it coerces a filter's value text to a field's kind (`ParseInt(s, 0, 64)`,
//! `ParseUint(s, 0, 64)`, `ParseFloat(s, 64)`; `ParseBool` is `stdx::strconv`'s), Go's
//! `Unquote` for string literals, and `strconv.Quote` for error texts.
//!
//! `parse.rs` runs these once per filter (so evaluation never re-parses numbers), `eval.rs`
//! formats errors with them.
//!
//! Invariants: every function is total (no panics on any input); error texts match Go's
//! (`strconv.ParseInt: parsing "x": invalid syntax`).

use std::fmt::Write as _;

/// Why a Go number parse failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumErr {
    /// Not a number of that kind at all (`strconv.ErrSyntax`).
    Syntax,
    /// A number, but it does not fit (`strconv.ErrRange`).
    Range,
}

impl NumErr {
    /// Go's `*strconv.NumError` text, e.g. `strconv.ParseInt: parsing "x": invalid syntax`.
    pub(crate) fn message(self, func: &str, input: &str) -> String {
        let why = match self {
            NumErr::Syntax => "invalid syntax",
            NumErr::Range => "value out of range",
        };
        format!("strconv.{func}: parsing {}: {why}", quote(input))
    }
}

/// `strconv.ParseUint(s, 0, 64)`: optional `0b`/`0o`/`0x`/`0` prefix, `_` separators.
pub(crate) fn parse_uint(s: &str) -> Result<u64, NumErr> {
    let bytes = s.as_bytes();
    if bytes.is_empty() {
        return Err(NumErr::Syntax);
    }
    let (base, digits): (u64, &[u8]) = match bytes {
        [b'0', p, _, ..] if p.eq_ignore_ascii_case(&b'b') => (2, &bytes[2..]),
        [b'0', p, _, ..] if p.eq_ignore_ascii_case(&b'o') => (8, &bytes[2..]),
        [b'0', p, _, ..] if p.eq_ignore_ascii_case(&b'x') => (16, &bytes[2..]),
        [b'0', ..] => (8, &bytes[1..]),
        _ => (10, bytes),
    };
    let mut n: u64 = 0;
    let mut underscores = false;
    for &c in digits {
        let d = match c {
            b'_' => {
                underscores = true;
                continue;
            }
            b'0'..=b'9' => u64::from(c - b'0'),
            b'a'..=b'z' => u64::from(c - b'a') + 10,
            b'A'..=b'Z' => u64::from(c - b'A') + 10,
            _ => return Err(NumErr::Syntax),
        };
        if d >= base {
            return Err(NumErr::Syntax);
        }
        n = n
            .checked_mul(base)
            .and_then(|n| n.checked_add(d))
            .ok_or(NumErr::Range)?;
    }
    if underscores && !underscore_ok(s) {
        return Err(NumErr::Syntax);
    }
    Ok(n)
}

/// `strconv.ParseInt(s, 0, 64)`: an optional sign, then [`parse_uint`].
pub(crate) fn parse_int(s: &str) -> Result<i64, NumErr> {
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let magnitude = parse_uint(rest)?;
    if negative {
        if magnitude > 1u64 << 63 {
            return Err(NumErr::Range);
        }
        // magnitude <= 2^63, so 0 - magnitude fits in i128 and then in i64.
        i64::try_from(-i128::from(magnitude)).map_err(|_| NumErr::Range)
    } else {
        i64::try_from(magnitude).map_err(|_| NumErr::Range)
    }
}

/// `strconv.ParseFloat(s, 64)` for decimal text, `inf`/`infinity`/`nan`.
///
/// Go also accepts hexadecimal floats (`0x1p-2`) and `_` between digits of those; both are
/// rejected here as syntax errors.
pub(crate) fn parse_float(s: &str) -> Result<f64, NumErr> {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    if s.contains('_') || unsigned.starts_with("0x") || unsigned.starts_with("0X") {
        return Err(NumErr::Syntax);
    }
    let lower = unsigned.to_ascii_lowercase();
    if lower == "nan" && unsigned.len() != s.len() {
        // Go takes no sign before NaN.
        return Err(NumErr::Syntax);
    }
    let value: f64 = s.parse().map_err(|_| NumErr::Syntax)?;
    if value.is_infinite() && !lower.starts_with("inf") {
        return Err(NumErr::Range);
    }
    Ok(value)
}

/// Go's `underscoreOK`: `_` only between digits, or between a base prefix and a digit.
fn underscore_ok(s: &str) -> bool {
    let mut s = s.as_bytes();
    if let [b'+' | b'-', rest @ ..] = s {
        s = rest;
    }
    // '^' start, '0' digit or prefix, '_' underscore, '!' anything else.
    let mut saw = b'^';
    let mut hex = false;
    if let [b'0', p, rest @ ..] = s
        && matches!(p.to_ascii_lowercase(), b'b' | b'o' | b'x')
    {
        saw = b'0';
        hex = p.eq_ignore_ascii_case(&b'x');
        s = rest;
    }
    for &c in s {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
    }
    saw != b'_'
}

/// Go's `strconv.Unquote` for the body of a double-quoted literal (without the quotes).
///
/// `None` is Go's `invalid syntax`. Go strings may hold any bytes (`"\xff"`); a result that is
/// not UTF-8 is also `None`, since no JSON string could ever equal it.
pub(crate) fn unquote_double(body: &str) -> Option<String> {
    if body.contains('\n') {
        return None;
    }
    if !body.contains('\\') {
        return Some(body.to_owned());
    }
    let mut out: Vec<u8> = Vec::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c == '"' {
            return None;
        }
        if c != '\\' {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let escape = chars.next()?;
        let simple = match escape {
            'a' => Some(0x07),
            'b' => Some(0x08),
            'f' => Some(0x0c),
            'n' => Some(b'\n'),
            'r' => Some(b'\r'),
            't' => Some(b'\t'),
            'v' => Some(0x0b),
            '\\' => Some(b'\\'),
            '"' => Some(b'"'),
            _ => None,
        };
        if let Some(byte) = simple {
            out.push(byte);
            continue;
        }
        match escape {
            'x' | 'u' | 'U' => {
                let width = match escape {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let mut value: u32 = 0;
                for _ in 0..width {
                    let digit = chars.next()?.to_digit(16)?;
                    value = (value << 4) | digit;
                }
                if escape == 'x' {
                    // Two hex digits: at most 0xff, a single raw byte in Go.
                    out.push(u8::try_from(value).ok()?);
                } else {
                    let rune = char::from_u32(value)?;
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(rune.encode_utf8(&mut buf).as_bytes());
                }
            }
            '0'..='7' => {
                let mut value = escape.to_digit(8)?;
                for _ in 0..2 {
                    value = (value << 3) | chars.next()?.to_digit(8)?;
                }
                out.push(u8::try_from(value).ok()?);
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

/// Go's `strconv.Quote` (close enough for error texts): `"…"` with `\"`, `\\`, the C escapes,
/// and `\x`/`\u` for other control characters.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{07}' => out.push_str("\\a"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{0b}' => out.push_str("\\v"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_int_follows_go_base_prefixes_and_underscores() {
        assert_eq!(parse_int("42"), Ok(42));
        assert_eq!(parse_int("-42"), Ok(-42));
        assert_eq!(parse_int("+7"), Ok(7));
        assert_eq!(parse_int("0x1f"), Ok(31));
        assert_eq!(parse_int("0o17"), Ok(15));
        assert_eq!(parse_int("017"), Ok(15));
        assert_eq!(parse_int("0b101"), Ok(5));
        assert_eq!(parse_int("0"), Ok(0));
        assert_eq!(parse_int("1_000"), Ok(1000));
        assert_eq!(parse_int("0x_1f"), Ok(31));
        assert_eq!(parse_int("-9223372036854775808"), Ok(i64::MIN));
        assert_eq!(parse_int("9223372036854775807"), Ok(i64::MAX));
        assert_eq!(parse_int("9223372036854775808"), Err(NumErr::Range));
        assert_eq!(parse_int("-9223372036854775809"), Err(NumErr::Range));
        for bad in [
            "", "-", "1.0", "abc", "08", "0x", "1__0", "_1", "1_", "1e3", " 1",
        ] {
            assert_eq!(parse_int(bad), Err(NumErr::Syntax), "{bad}");
        }
    }

    #[test]
    fn parse_uint_rejects_signs_and_overflow() {
        assert_eq!(parse_uint("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_uint("18446744073709551616"), Err(NumErr::Range));
        assert_eq!(parse_uint("-1"), Err(NumErr::Syntax));
        assert_eq!(parse_uint("+1"), Err(NumErr::Syntax));
    }

    #[test]
    fn parse_float_accepts_go_decimal_forms() {
        assert_eq!(parse_float("1.5"), Ok(1.5));
        assert_eq!(parse_float("-0.2"), Ok(-0.2));
        assert_eq!(parse_float("1e3"), Ok(1000.0));
        assert_eq!(parse_float(".5"), Ok(0.5));
        assert_eq!(parse_float("Inf"), Ok(f64::INFINITY));
        assert_eq!(parse_float("-infinity"), Ok(f64::NEG_INFINITY));
        assert!(parse_float("NaN").is_ok_and(f64::is_nan));
        assert_eq!(parse_float("1e400"), Err(NumErr::Range));
        for bad in ["", "abc", "1_0", "0x1p-2", "+nan", "1.2.3"] {
            assert_eq!(parse_float(bad), Err(NumErr::Syntax), "{bad}");
        }
    }

    #[test]
    fn unquote_handles_go_escapes() {
        assert_eq!(unquote_double("plain").as_deref(), Some("plain"));
        assert_eq!(unquote_double(r"a\tb\n").as_deref(), Some("a\tb\n"));
        assert_eq!(unquote_double(r"\u00e9\U0001F600").as_deref(), Some("é😀"));
        assert_eq!(unquote_double(r"\x41\101\\").as_deref(), Some("AA\\"));
        assert_eq!(unquote_double(r"\'"), None);
        assert_eq!(unquote_double(r"\q"), None);
        assert_eq!(unquote_double("trailing\\"), None);
        assert_eq!(unquote_double(r"\uD800"), None);
        assert_eq!(unquote_double(r"\400"), None);
        assert_eq!(unquote_double("line\nbreak"), None);
        assert_eq!(unquote_double(r"\xff"), None);
    }

    #[test]
    fn quote_escapes_like_go() {
        assert_eq!(quote("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\x01é\"");
        assert_eq!(
            NumErr::Syntax.message("ParseBool", "yes"),
            "strconv.ParseBool: parsing \"yes\": invalid syntax"
        );
    }
}
