//! Vault's weak typing of request fields (mapstructure `WeakDecode`, `parseutil`).
//!
//! Every getter treats a missing field and JSON `null` alike (`Ok(None)`), and answers a value
//! of the wrong shape with `400 Field validation failed: error converting input for field
//! "<name>": ...`, as Vault does.
//!
//! Invariants: bools accept `true`, `"true"` (any `strconv.ParseBool` spelling), `1`/`0` and
//! `""` (false); ints accept numbers and numeric strings; durations accept seconds (number or
//! string) and Go durations (`"1h30m"`, plus `d` for days), signed durations a leading `-` too;
//! comma lists accept `"a,b"` and arrays, trimmed, empty entries dropped; maps accept only
//! objects.

use std::time::Duration;

use serde_json::Value;

use crate::{Data, EngineError};

fn invalid(name: &str, why: impl std::fmt::Display) -> EngineError {
    EngineError::BadRequest(format!(
        "Field validation failed: error converting input for field \"{name}\": {why}"
    ))
}

fn present<'a>(data: &'a Data, name: &str) -> Option<&'a Value> {
    data.get(name).filter(|value| !value.is_null())
}

/// A string field; numbers and bools are turned into their text.
pub fn string(data: &Data, name: &str) -> Result<Option<String>, EngineError> {
    match present(data, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(Value::Bool(b)) => Ok(Some(b.to_string())),
        Some(other) => Err(invalid(
            name,
            format!("expected a string, got {}", kind(other)),
        )),
    }
}

/// A boolean field.
pub fn bool(data: &Data, name: &str) -> Result<Option<bool>, EngineError> {
    match present(data, name) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(0) => Ok(Some(false)),
            Some(1) => Ok(Some(true)),
            _ => Err(invalid(name, format!("cannot parse {n} as bool"))),
        },
        Some(Value::String(s)) => parse_bool(s)
            .map(Some)
            .ok_or_else(|| invalid(name, format!("cannot parse {s:?} as bool"))),
        Some(other) => Err(invalid(
            name,
            format!("expected a bool, got {}", kind(other)),
        )),
    }
}

/// Go's `strconv.ParseBool`, plus `""` as false (mapstructure's weak decode).
pub fn parse_bool(raw: &str) -> Option<bool> {
    if raw.is_empty() {
        return Some(false);
    }
    stdx::strconv::parse_bool(raw)
}

/// An integer field.
pub fn int(data: &Data, name: &str) -> Result<Option<i64>, EngineError> {
    match present(data, name) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                    .map(|f| f as i64)
            })
            .map(Some)
            .ok_or_else(|| invalid(name, format!("cannot parse {n} as int"))),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(Some(0)),
        Some(Value::String(s)) => s
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| invalid(name, format!("cannot parse {s:?} as int"))),
        Some(Value::Bool(b)) => Ok(Some(i64::from(*b))),
        Some(other) => Err(invalid(
            name,
            format!("expected an int, got {}", kind(other)),
        )),
    }
}

/// A duration field in seconds (`TypeDurationSecond`).
pub fn duration(data: &Data, name: &str) -> Result<Option<Duration>, EngineError> {
    match present(data, name) {
        None => Ok(None),
        Some(Value::Number(n)) => match n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)) {
            Some(secs) if secs >= 0 => Ok(Some(Duration::from_secs(secs as u64))),
            _ => Err(invalid(name, format!("invalid duration {n}"))),
        },
        Some(Value::String(s)) => parse_duration(s)
            .map(Some)
            .map_err(|why| invalid(name, why)),
        Some(other) => Err(invalid(
            name,
            format!("expected a duration, got {}", kind(other)),
        )),
    }
}

/// Parses `"3600"`, `"1h"`, `"1h30m"`, `"90s"`, `"2d"`, `""` (zero). Negative is an error.
///
/// Vault's `parseutil.ParseDurationSecond`: bare seconds, else Go's duration grammar with `d`
/// (24h) as one more unit. Each term is read by `stdx::duration` (exact to the nanosecond,
/// within Go's range); the messages are this function's own.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(Duration::ZERO);
    }
    if let Ok(secs) = raw.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    if raw.starts_with('-') {
        return Err(format!("invalid duration {raw:?}: negative"));
    }
    let too_large = || format!("invalid duration {raw:?}: too large");
    let mut total = Duration::ZERO;
    for (number, unit) in duration_terms(raw) {
        let term = match unit {
            "d" => go_term(raw, number, "h")?
                .checked_mul(24)
                .ok_or_else(too_large)?,
            // A number without a unit: an error, once the number itself is checked (Go reads a
            // lone `0` as zero, but a lone number never gets here).
            "" => {
                return Err(match go_term(raw, number, unit) {
                    Err(err) => err,
                    Ok(_) => missing_unit(raw),
                });
            }
            _ => go_term(raw, number, unit)?,
        };
        total = total.checked_add(term).ok_or_else(too_large)?;
    }
    if total > MAX_DURATION {
        return Err(too_large());
    }
    Ok(total)
}

/// The longest duration [`parse_duration`] accepts (10^15 seconds).
const MAX_DURATION: Duration = Duration::from_secs(1_000_000_000_000_000);

/// `raw` split into terms as Go's parser reads them: a number (digits and dots) and the unit
/// after it (up to the next digit or dot).
fn duration_terms(raw: &str) -> impl Iterator<Item = (&str, &str)> {
    let mut rest = raw;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        rest = after;
        Some((number, unit))
    })
}

/// One term (`number` then `unit`) as a Go duration; errors name the whole input `raw`.
fn go_term(raw: &str, number: &str, unit: &str) -> Result<Duration, String> {
    use stdx::duration::DurationErrorKind;
    stdx::duration::parse_go(&format!("{number}{unit}")).map_err(|err| match err.kind() {
        DurationErrorKind::MissingUnit => missing_unit(raw),
        DurationErrorKind::UnknownUnit(unit) => {
            format!("time: unknown unit {unit:?} in duration {raw:?}")
        }
        DurationErrorKind::TooLarge => format!("invalid duration {raw:?}: too large"),
        DurationErrorKind::Empty
        | DurationErrorKind::ExpectedNumber
        | DurationErrorKind::Negative => format!("invalid duration {raw:?}"),
    })
}

fn missing_unit(raw: &str) -> String {
    format!("time: missing unit in duration {raw:?}")
}

/// A signed duration in whole seconds (`TypeSignedDurationSecond`): what [`duration`] accepts,
/// plus a leading `-` (a negative number of seconds, or `"-1h"`). Fractions of a second are
/// dropped, as Vault's `int(d.Seconds())`.
pub fn signed_duration(data: &Data, name: &str) -> Result<Option<i64>, EngineError> {
    let seconds = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    match present(data, name) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.abs() < 9.0e18).map(|f| f as i64))
            .map(Some)
            .ok_or_else(|| invalid(name, format!("invalid duration {n}"))),
        Some(Value::String(s)) => {
            let raw = s.trim();
            let (sign, magnitude) = match raw.strip_prefix('-') {
                Some(rest) => (-1, rest),
                None => (1, raw),
            };
            parse_duration(magnitude)
                .map(|d| Some(sign * seconds(d)))
                .map_err(|why| invalid(name, why))
        }
        Some(other) => Err(invalid(
            name,
            format!("expected a duration, got {}", kind(other)),
        )),
    }
}

/// A map of arbitrary JSON values (`TypeMap`): an object; anything else is a field error.
pub fn map(data: &Data, name: &str) -> Result<Option<Data>, EngineError> {
    match present(data, name) {
        None => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map.clone())),
        Some(other) => Err(invalid(
            name,
            format!("expected a map, got {}", kind(other)),
        )),
    }
}

/// A list of integers (`TypeCommaIntSlice`): `[1, "2"]`, `"1,2"` or a single number; every
/// item must be an integer.
pub fn comma_ints(data: &Data, name: &str) -> Result<Option<Vec<i64>>, EngineError> {
    let Some(items) = comma_list(data, name)? else {
        return Ok(None);
    };
    items
        .iter()
        .map(|item| {
            item.parse::<i64>()
                .map_err(|_| invalid(name, format!("cannot parse {item:?} as int")))
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// A comma-separated string list (`TypeCommaStringSlice`).
pub fn comma_list(data: &Data, name: &str) -> Result<Option<Vec<String>>, EngineError> {
    let clean = |items: Vec<String>| {
        items
            .into_iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    };
    match present(data, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(clean(s.split(',').map(str::to_owned).collect()))),
        Some(Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::String(s) => out.extend(s.split(',').map(str::to_owned)),
                    Value::Number(n) => out.push(n.to_string()),
                    Value::Bool(b) => out.push(b.to_string()),
                    other => return Err(invalid(name, format!("list item is {}", kind(other)))),
                }
            }
            Ok(Some(clean(out)))
        }
        Some(Value::Number(n)) => Ok(Some(vec![n.to_string()])),
        Some(other) => Err(invalid(
            name,
            format!("expected a list, got {}", kind(other)),
        )),
    }
}

/// A map of strings (`TypeKVPairs`): an object, or `["k=v", ...]`.
pub fn string_map(
    data: &Data,
    name: &str,
) -> Result<Option<std::collections::BTreeMap<String, String>>, EngineError> {
    match present(data, name) {
        None => Ok(None),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                Value::Number(n) => Ok((k.clone(), n.to_string())),
                Value::Bool(b) => Ok((k.clone(), b.to_string())),
                other => Err(invalid(name, format!("value of {k:?} is {}", kind(other)))),
            })
            .collect::<Result<_, _>>()
            .map(Some),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                let s = item
                    .as_str()
                    .ok_or_else(|| invalid(name, "expected \"key=value\" strings"))?;
                let (k, v) = s
                    .split_once('=')
                    .ok_or_else(|| invalid(name, format!("{s:?} is not key=value")))?;
                Ok((k.to_owned(), v.to_owned()))
            })
            .collect::<Result<_, _>>()
            .map(Some),
        Some(Value::String(s)) if s.is_empty() => Ok(Some(Default::default())),
        Some(other) => Err(invalid(
            name,
            format!("expected a map, got {}", kind(other)),
        )),
    }
}

/// The names in `data` that are not in `known`, sorted: the core turns them into Vault's
/// `Endpoint ignored these unrecognized parameters: [...]` warning.
pub fn unknown(data: &Data, known: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = data
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .cloned()
        .collect();
    names.sort();
    names
}

/// The warning Vault adds for unknown parameters, if any.
pub fn unknown_warning(data: &Data, known: &[&str]) -> Option<String> {
    let names = unknown(data, known);
    (!names.is_empty()).then(|| {
        format!(
            "Endpoint ignored these unrecognized parameters: [{}]",
            names.join(" ")
        )
    })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn data(value: Value) -> Data {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn bools_accept_vaults_weak_spellings() {
        let d = data(
            json!({"a": true, "b": "true", "c": "1", "d": 1, "e": "", "f": null, "g": "maybe"}),
        );
        assert_eq!(bool(&d, "a").unwrap(), Some(true));
        assert_eq!(bool(&d, "b").unwrap(), Some(true));
        assert_eq!(bool(&d, "c").unwrap(), Some(true));
        assert_eq!(bool(&d, "d").unwrap(), Some(true));
        assert_eq!(bool(&d, "e").unwrap(), Some(false));
        assert_eq!(bool(&d, "f").unwrap(), None);
        assert_eq!(bool(&d, "missing").unwrap(), None);
        assert!(
            bool(&d, "g")
                .unwrap_err()
                .to_string()
                .starts_with("Field validation failed")
        );
    }

    #[test]
    fn durations_accept_seconds_and_go_durations() {
        let d = data(
            json!({"a": 3600, "b": "3600", "c": "1h30m", "d": "2d", "e": "-1s", "f": "10", "g": "5x"}),
        );
        assert_eq!(duration(&d, "a").unwrap(), Some(Duration::from_secs(3600)));
        assert_eq!(duration(&d, "b").unwrap(), Some(Duration::from_secs(3600)));
        assert_eq!(duration(&d, "c").unwrap(), Some(Duration::from_secs(5400)));
        assert_eq!(
            duration(&d, "d").unwrap(),
            Some(Duration::from_secs(172_800))
        );
        assert!(duration(&d, "e").is_err());
        assert_eq!(duration(&d, "f").unwrap(), Some(Duration::from_secs(10)));
        assert!(duration(&d, "g").is_err());
    }

    #[test]
    fn durations_add_days_to_gos_grammar_and_keep_their_messages() {
        let ok = |raw: &str| parse_duration(raw).unwrap();
        assert_eq!(ok(" 90 "), Duration::from_secs(90));
        assert_eq!(ok("1.5d"), Duration::from_secs(129_600));
        assert_eq!(ok("2d12h"), Duration::from_secs(216_000));
        assert_eq!(ok("1h0.5s"), Duration::from_millis(3_600_500));
        assert_eq!(ok("1.5µs"), Duration::from_nanos(1_500));
        assert_eq!(ok(""), Duration::ZERO);
        let err = |raw: &str| parse_duration(raw).unwrap_err();
        assert_eq!(err("-1s"), r#"invalid duration "-1s": negative"#);
        assert_eq!(err("+5s"), r#"invalid duration "+5s""#);
        assert_eq!(err("1..2s"), r#"invalid duration "1..2s""#);
        assert_eq!(err("d"), r#"invalid duration "d""#);
        assert_eq!(err("1.5"), r#"time: missing unit in duration "1.5""#);
        assert_eq!(err("5s0"), r#"time: missing unit in duration "5s0""#);
        assert_eq!(err("5x"), r#"time: unknown unit "x" in duration "5x""#);
        assert_eq!(
            err("1h5dd"),
            r#"time: unknown unit "dd" in duration "1h5dd""#
        );
        assert_eq!(
            err("99999999999999999999s"),
            r#"invalid duration "99999999999999999999s": too large"#
        );
    }

    #[test]
    fn parse_bool_is_gos_plus_the_empty_string_as_false() {
        assert_eq!(parse_bool(""), Some(false));
        assert_eq!(parse_bool("T"), Some(true));
        assert_eq!(parse_bool("False"), Some(false));
        assert_eq!(parse_bool("yes"), None);
    }

    #[test]
    fn comma_lists_accept_strings_and_arrays() {
        let d = data(json!({"a": "x, y,,z", "b": ["x", "y,z"], "c": ""}));
        assert_eq!(
            comma_list(&d, "a").unwrap(),
            Some(vec!["x".into(), "y".into(), "z".into()])
        );
        assert_eq!(
            comma_list(&d, "b").unwrap(),
            Some(vec!["x".into(), "y".into(), "z".into()])
        );
        assert_eq!(comma_list(&d, "c").unwrap(), Some(vec![]));
    }

    #[test]
    fn ints_accept_numbers_and_numeric_strings() {
        let d = data(json!({"a": 22, "b": "22", "c": "x"}));
        assert_eq!(int(&d, "a").unwrap(), Some(22));
        assert_eq!(int(&d, "b").unwrap(), Some(22));
        assert!(int(&d, "c").is_err());
    }

    #[test]
    fn signed_durations_take_a_sign_and_drop_fractions() {
        let d = data(json!({"a": -1, "b": "-1h", "c": "90m", "d": "1.9s", "e": "x", "f": []}));
        assert_eq!(signed_duration(&d, "a").unwrap(), Some(-1));
        assert_eq!(signed_duration(&d, "b").unwrap(), Some(-3600));
        assert_eq!(signed_duration(&d, "c").unwrap(), Some(5400));
        assert_eq!(signed_duration(&d, "d").unwrap(), Some(1));
        assert!(signed_duration(&d, "e").is_err());
        assert!(signed_duration(&d, "f").is_err());
        assert_eq!(signed_duration(&d, "missing").unwrap(), None);
    }

    #[test]
    fn maps_accept_objects_only() {
        let d = data(json!({"a": {"x": [1]}, "b": "x", "c": null}));
        assert_eq!(map(&d, "a").unwrap(), Some(data(json!({"x": [1]}))));
        assert!(map(&d, "b").is_err());
        assert_eq!(map(&d, "c").unwrap(), None);
    }

    #[test]
    fn comma_ints_accept_lists_strings_and_numbers() {
        let d = data(json!({"a": [1, "2"], "b": "3,4", "c": 5, "d": "", "e": ["x"]}));
        assert_eq!(comma_ints(&d, "a").unwrap(), Some(vec![1, 2]));
        assert_eq!(comma_ints(&d, "b").unwrap(), Some(vec![3, 4]));
        assert_eq!(comma_ints(&d, "c").unwrap(), Some(vec![5]));
        assert_eq!(comma_ints(&d, "d").unwrap(), Some(vec![]));
        assert!(comma_ints(&d, "e").is_err());
    }

    #[test]
    fn unknown_fields_become_vaults_warning() {
        let d = data(json!({"b": 1, "a": 2, "known": 3}));
        assert_eq!(
            unknown_warning(&d, &["known"]).unwrap(),
            "Endpoint ignored these unrecognized parameters: [a b]"
        );
        assert_eq!(unknown_warning(&d, &["a", "b", "known"]), None);
    }
}
