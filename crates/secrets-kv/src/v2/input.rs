//! Request fields of kv version 2: each path's schema, its validation before any handler runs,
//! and the parsing upstream does by hand (`options.cas`, `custom_metadata`).
//!
//! Where it sits: `engine.rs` validates a request against its path's [`Schema`] first (Vault's
//! `FieldData.Validate`: a field of the wrong type is a 400 whatever the operation), then the
//! handlers read typed values through `secrets_sdk::fields` and the functions here; after a
//! handler answers with a body, `engine.rs` adds upstream's warnings for fields the path does
//! not know ([`ignored_warning`]) and for a `path` field the URL overrode ([`replaced_warning`]).
//!
//! Invariants: bad input is always `EngineError::BadRequest` (a 400), never a panic or a 5xx;
//! messages are upstream's where it writes its own.

use std::collections::BTreeMap;

use secrets_sdk::{Data, EngineError, fields};
use serde_json::Value;
use stdx::multierror::render as multierror;

/// How a field is typed (Vault's `framework.FieldType`s that kv uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    String,
    Int,
    Bool,
    Map,
    DurationSecond,
    SignedDurationSecond,
    CommaIntSlice,
}

/// A path's fields, by name.
pub(super) type Schema = &'static [(&'static str, Kind)];

pub(super) const CONFIG: Schema = &[
    ("max_versions", Kind::Int),
    ("cas_required", Kind::Bool),
    ("delete_version_after", Kind::SignedDurationSecond),
];

pub(super) const DATA: Schema = &[
    ("path", Kind::String),
    ("version", Kind::Int),
    ("options", Kind::Map),
    ("data", Kind::Map),
];

pub(super) const METADATA: Schema = &[
    ("path", Kind::String),
    ("cas_required", Kind::Bool),
    ("max_versions", Kind::Int),
    ("delete_version_after", Kind::DurationSecond),
    ("custom_metadata", Kind::Map),
];

/// `delete/`, `undelete/` and `destroy/`.
pub(super) const VERSIONS: Schema = &[("path", Kind::String), ("versions", Kind::CommaIntSlice)];

pub(super) const SUBKEYS: Schema = &[
    ("path", Kind::String),
    ("depth", Kind::Int),
    ("version", Kind::Int),
];

/// Paths that match no route take no fields.
pub(super) const NONE: Schema = &[];

/// Checks every field of `schema` present in `data` against its type.
pub(super) fn validate(schema: Schema, data: &Data) -> Result<(), EngineError> {
    for (name, kind) in schema {
        match kind {
            Kind::String => fields::string(data, name).map(drop)?,
            Kind::Int => fields::int(data, name).map(drop)?,
            Kind::Bool => fields::bool(data, name).map(drop)?,
            Kind::Map => fields::map(data, name).map(drop)?,
            Kind::DurationSecond => fields::duration(data, name).map(drop)?,
            Kind::SignedDurationSecond => fields::signed_duration(data, name).map(drop)?,
            Kind::CommaIntSlice => fields::comma_ints(data, name).map(drop)?,
        }
    }
    Ok(())
}

/// Upstream's warning for fields `schema` does not know, if any.
pub(super) fn ignored_warning(schema: Schema, data: &Data) -> Option<String> {
    let known: Vec<&str> = schema.iter().map(|(name, _)| *name).collect();
    fields::unknown_warning(data, &known)
}

/// Upstream's warning when the body carried a `path` that the URL's path replaced.
pub(super) fn replaced_warning(schema: Schema, data: &Data) -> Option<String> {
    (schema.iter().any(|(name, _)| *name == "path") && data.contains_key("path")).then(|| {
        "Endpoint replaced the value of these parameters with the values captured from the endpoint's path: [path]"
            .to_owned()
    })
}

/// `options.cas` when sent: the version the write expects to replace (0: none yet). Parsed
/// as mapstructure's weak decode into an int does; anything else is upstream's 400.
pub(super) fn cas(data: &Data) -> Result<Option<i64>, EngineError> {
    let Some(options) = fields::map(data, "options")? else {
        return Ok(None);
    };
    let Some(raw) = options.get("cas") else {
        return Ok(None);
    };
    let bad = || EngineError::BadRequest("error parsing check-and-set parameter".to_owned());
    let cas = match raw {
        Value::Null => 0,
        Value::Bool(b) => i64::from(*b),
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.abs() < 9.0e18).map(|f| f as i64))
            .ok_or_else(bad)?,
        Value::String(s) if s.is_empty() => 0,
        Value::String(s) => s.parse::<i64>().map_err(|_| bad())?,
        Value::Array(_) | Value::Object(_) => return Err(bad()),
    };
    Ok(Some(cas))
}

/// Upstream's prefix of every `custom_metadata` error.
const CUSTOM_METADATA_ERROR: &str = "custom_metadata validation failed";
const MAX_CUSTOM_METADATA_KEYS: usize = 64;
const MAX_CUSTOM_METADATA_KEY_LENGTH: usize = 128;
const MAX_CUSTOM_METADATA_VALUE_LENGTH: usize = 512;

/// `custom_metadata` as strings (numbers and bools weakly decoded, as upstream), validated:
/// at most 64 keys, each key 1..=128 bytes and each value 1..=512 bytes, all printable. With
/// `drop_nulls` (a patch), `null` values are left out (they delete a key); otherwise a `null`
/// is an empty value (and fails validation).
pub(super) fn custom_metadata(
    raw: &Data,
    drop_nulls: bool,
) -> Result<BTreeMap<String, String>, EngineError> {
    let mut out = BTreeMap::new();
    for (key, value) in raw {
        let text = match value {
            Value::Null if drop_nulls => continue,
            Value::Null => String::new(),
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => if *b { "1" } else { "0" }.to_owned(),
            Value::Array(_) | Value::Object(_) => {
                return Err(EngineError::BadRequest(format!(
                    "{CUSTOM_METADATA_ERROR}: value for key {key:?} is not a string"
                )));
            }
        };
        out.insert(key.clone(), text);
    }
    validate_custom_metadata(&out)?;
    Ok(out)
}

fn validate_custom_metadata(metadata: &BTreeMap<String, String>) -> Result<(), EngineError> {
    if metadata.len() > MAX_CUSTOM_METADATA_KEYS {
        return Err(EngineError::BadRequest(multierror(&[format!(
            "{CUSTOM_METADATA_ERROR}: payload must contain at most {MAX_CUSTOM_METADATA_KEYS} keys, provided {}",
            metadata.len()
        )])));
    }
    let mut errors = Vec::new();
    for (key, value) in metadata {
        if key.is_empty() || key.len() > MAX_CUSTOM_METADATA_KEY_LENGTH {
            errors.push(format!(
                "{CUSTOM_METADATA_ERROR}: length of key {key:?} is {} but must be 0 < len(key) <= {MAX_CUSTOM_METADATA_KEY_LENGTH}",
                key.len()
            ));
        }
        if value.is_empty() || value.len() > MAX_CUSTOM_METADATA_VALUE_LENGTH {
            errors.push(format!(
                "{CUSTOM_METADATA_ERROR}: length of value for key {key:?} is {} but must be 0 < len(value) <= {MAX_CUSTOM_METADATA_VALUE_LENGTH}",
                value.len()
            ));
        }
        if !printable(key) {
            errors.push(format!(
                "{CUSTOM_METADATA_ERROR}: key {key:?} ({key}) contains unprintable characters"
            ));
        }
        if !printable(value) {
            errors.push(format!(
                "{CUSTOM_METADATA_ERROR}: value for key {key:?} contains unprintable characters"
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(EngineError::BadRequest(multierror(&errors)))
    }
}

/// Go's `strutil.Printable` as far as std can tell: no control characters and no whitespace
/// but the ASCII space (Go also refuses unassigned and format characters).
fn printable(text: &str) -> bool {
    text.chars()
        .all(|c| !c.is_control() && (c == ' ' || !c.is_whitespace()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn data(value: Value) -> Data {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn cas_is_read_as_a_weakly_typed_int() {
        let cas_of = |options: Value| cas(&data(json!({ "options": options })));
        assert_eq!(cas_of(json!({})), Ok(None));
        assert_eq!(cas_of(json!({"cas": 3})), Ok(Some(3)));
        assert_eq!(cas_of(json!({"cas": "2"})), Ok(Some(2)));
        assert_eq!(cas_of(json!({"cas": -1})), Ok(Some(-1)));
        assert_eq!(cas_of(json!({"cas": null})), Ok(Some(0)));
        assert_eq!(
            cas_of(json!({"cas": "x"})),
            Err(EngineError::BadRequest(
                "error parsing check-and-set parameter".to_owned()
            ))
        );
        assert_eq!(cas(&data(json!({}))), Ok(None));
    }

    #[test]
    fn custom_metadata_refuses_empty_and_oversized_entries() {
        assert_eq!(
            custom_metadata(&data(json!({"n": 1, "b": true, "s": "x"})), false).unwrap(),
            BTreeMap::from([
                ("b".to_owned(), "1".to_owned()),
                ("n".to_owned(), "1".to_owned()),
                ("s".to_owned(), "x".to_owned()),
            ])
        );
        assert_eq!(
            custom_metadata(&data(json!({"a": "", "b": "tab\there"})), false).unwrap_err(),
            EngineError::BadRequest(
                "2 errors occurred:\n\t* custom_metadata validation failed: length of value for key \"a\" is 0 but must be 0 < len(value) <= 512\n\t* custom_metadata validation failed: value for key \"b\" contains unprintable characters\n\n"
                    .to_owned()
            )
        );
        let many: Data = (0..65).map(|i| (format!("k{i}"), json!("v"))).collect();
        assert!(custom_metadata(&many, false).is_err());
        assert_eq!(
            custom_metadata(&data(json!({"gone": null, "kept": "v"})), true).unwrap(),
            BTreeMap::from([("kept".to_owned(), "v".to_owned())])
        );
    }

    #[test]
    fn validation_checks_every_known_field_present() {
        assert!(validate(DATA, &data(json!({"version": "abc"}))).is_err());
        assert!(validate(DATA, &data(json!({"data": "not a map"}))).is_err());
        assert!(validate(DATA, &data(json!({"data": {}, "other": "x"}))).is_ok());
        assert!(validate(CONFIG, &data(json!({"delete_version_after": "-1s"}))).is_ok());
        assert!(validate(METADATA, &data(json!({"delete_version_after": "-1s"}))).is_err());
        assert!(validate(VERSIONS, &data(json!({"versions": ["one"]}))).is_err());
    }

    #[test]
    fn warnings_name_ignored_and_replaced_fields() {
        let body = data(json!({"data": {}, "zeta": 1, "alpha": 2, "path": "x"}));
        assert_eq!(
            ignored_warning(DATA, &body).unwrap(),
            "Endpoint ignored these unrecognized parameters: [alpha zeta]"
        );
        assert!(replaced_warning(DATA, &body).is_some());
        assert_eq!(replaced_warning(CONFIG, &body), None);
    }
}
