//! Consul's request bodies as Go decodes them for the catalog and agent endpoints: field names
//! match case-insensitively (Go's `encoding/json`; Consul also accepts snake_case spellings:
//! py-consul sends `node`, `serviceid`, `tagged_addresses`), and durations are Go duration
//! strings or integer nanoseconds ([`GoDuration`]).
//!
//! Where it sits: `catalog/body.rs` and `agent/body.rs` declare their bodies as [`Field`] tables and serde
//! structs and decode them with [`decode_body`]; validation of what was decoded is theirs.
//!
//! Invariants: an unknown field is a 400 naming it (with its path when nested); an empty body is
//! Consul's `Request decode failed: EOF`; a field Consul accepts but this server ignores is
//! declared [`Shape::Ignored`] and dropped before serde sees it.

use std::time::Duration;

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, Visitor};
use serde_json::Value;

use crate::Error;

/// How a body field is read.
pub(crate) enum Shape {
    /// Kept as is (strings, numbers, lists of strings, and maps whose keys are user data).
    Leaf,
    /// A nested object with its own fields.
    Object(&'static [Field]),
    /// A list of nested objects.
    List(&'static [Field]),
    /// A Consul field this server accepts and ignores.
    Ignored,
}

/// A known body field: its canonical (Consul) name and shape.
pub(crate) struct Field(pub(crate) &'static str, pub(crate) Shape);

/// Field names compare like Consul's: case-insensitively, and `_`/`-` ignored (so
/// `tagged_addresses`, `TaggedAddresses` and `taggedaddresses` are one field).
fn fold(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

fn decode_error(detail: impl std::fmt::Display) -> Error {
    Error::BadRequest(format!("Request decode failed: {detail}"))
}

/// Decodes a JSON body whose field names are matched as Consul matches them; an unknown field
/// is a 400 naming it, an empty body is Consul's `Request decode failed: EOF`.
pub(crate) fn decode_body<T: DeserializeOwned>(
    bytes: &[u8],
    fields: &'static [Field],
) -> Result<T, Error> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(decode_error("EOF"));
    }
    let mut value: Value = serde_json::from_slice(bytes).map_err(decode_error)?;
    if !value.is_object() {
        return Err(decode_error("the body must be a JSON object"));
    }
    canonicalize(&mut value, fields, "")?;
    serde_json::from_value(value).map_err(decode_error)
}

fn canonicalize(value: &mut Value, fields: &[Field], path: &str) -> Result<(), Error> {
    let map = match value {
        Value::Null => return Ok(()),
        Value::Object(map) => map,
        _ => {
            return Err(decode_error(format!(
                "{} must be a JSON object",
                if path.is_empty() { "the body" } else { path }
            )));
        }
    };
    let entries = std::mem::take(map);
    for (key, mut item) in entries {
        let folded = fold(&key);
        let Some(Field(name, shape)) = fields.iter().find(|field| fold(field.0) == folded) else {
            let at = if path.is_empty() {
                String::new()
            } else {
                format!(" in {path}")
            };
            return Err(decode_error(format!("unknown field {key:?}{at}")));
        };
        let child = if path.is_empty() {
            (*name).to_owned()
        } else {
            format!("{path}.{name}")
        };
        match shape {
            Shape::Ignored => continue,
            Shape::Leaf => {}
            Shape::Object(sub) => canonicalize(&mut item, sub, &child)?,
            Shape::List(sub) => match &mut item {
                Value::Null => {}
                Value::Array(items) => {
                    for item in items {
                        canonicalize(item, sub, &child)?;
                    }
                }
                _ => return Err(decode_error(format!("{child} must be a list"))),
            },
        }
        map.insert((*name).to_owned(), item);
    }
    Ok(())
}

/// A Go `time.Duration` in a body: a duration string (`"10s"`) or integer nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct GoDuration(pub(crate) Duration);

impl GoDuration {
    pub(crate) fn millis(self) -> u64 {
        u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<GoDuration, D::Error> {
        struct DurationVisitor;
        impl Visitor<'_> for DurationVisitor {
            type Value = GoDuration;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration such as \"10s\" or integer nanoseconds")
            }
            fn visit_str<E: serde::de::Error>(self, raw: &str) -> Result<GoDuration, E> {
                if raw.is_empty() {
                    return Ok(GoDuration::default());
                }
                stdx::duration::parse_go(raw)
                    .map(GoDuration)
                    .map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, nanos: u64) -> Result<GoDuration, E> {
                Ok(GoDuration(Duration::from_nanos(nanos)))
            }
            fn visit_i64<E: serde::de::Error>(self, nanos: i64) -> Result<GoDuration, E> {
                u64::try_from(nanos)
                    .map(|nanos| GoDuration(Duration::from_nanos(nanos)))
                    .map_err(|_| {
                        E::custom(format!("invalid duration {nanos}: must not be negative"))
                    })
            }
            fn visit_f64<E: serde::de::Error>(self, nanos: f64) -> Result<GoDuration, E> {
                if nanos.is_finite() && nanos >= 0.0 && nanos < u64::MAX as f64 {
                    Ok(GoDuration(Duration::from_nanos(nanos as u64)))
                } else {
                    Err(E::custom(format!("invalid duration {nanos}")))
                }
            }
        }
        deserializer.deserialize_any(DurationVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_decode_from_strings_and_nanoseconds() {
        let d: GoDuration = serde_json::from_str("\"1m30s\"").unwrap();
        assert_eq!(d.millis(), 90_000);
        let d: GoDuration = serde_json::from_str("10000000000").unwrap();
        assert_eq!(d.millis(), 10_000);
        assert!(serde_json::from_str::<GoDuration>("\"10\"").is_err());
        assert!(serde_json::from_str::<GoDuration>("-1").is_err());
    }
}
