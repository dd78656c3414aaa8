//! Request bodies decoded the way Go's `encoding/json` decodes Nomad's structs, for the ACL and
//! namespace endpoints.
//!
//! Go matches object keys to struct fields ignoring case (`name` fills `Name`), ignores unknown
//! keys, and leaves a field unchanged on `null`. [`decode`] folds the keys of the top-level
//! object (and of the nested objects the caller names) to the canonical spelling before serde
//! sees them; [`null_as_default`] makes `null` mean "not given" for plain fields.
//!
//! Invariants: never panics on any input; every failure is a 400 whose text says what is wrong.
//! Keys inside free-form maps (a namespace's `Meta`) are never folded.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use crate::Error;

/// The canonical field names of one object, and of the nested objects under some of them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields {
    pub(crate) names: &'static [&'static str],
    pub(crate) nested: &'static [(&'static str, Fields)],
}

impl Fields {
    pub(crate) const fn flat(names: &'static [&'static str]) -> Fields {
        Fields { names, nested: &[] }
    }
}

/// Decodes a JSON object body into `T`, Go style. An empty body is an error (Nomad's decoder
/// answers `EOF`); so is anything that is not an object.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8], fields: Fields) -> Result<T, Error> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::BadRequest("Request body is empty".to_owned()));
    }
    let mut value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|err| Error::BadRequest(format!("Request body is not valid JSON: {err}")))?;
    if !value.is_object() {
        return Err(Error::BadRequest(
            "Request body must be a JSON object".to_owned(),
        ));
    }
    fold(&mut value, fields);
    serde_json::from_value(value)
        .map_err(|err| Error::BadRequest(format!("Request body is invalid: {err}")))
}

/// Decodes an optional body: empty means `T::default()`.
pub(crate) fn decode_optional<T: DeserializeOwned + Default>(
    bytes: &[u8],
    fields: Fields,
) -> Result<T, Error> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        decode(bytes, fields)
    }
}

fn fold(value: &mut serde_json::Value, fields: Fields) {
    let serde_json::Value::Object(object) = value else {
        return;
    };
    let mut folded = serde_json::Map::new();
    for (key, mut item) in std::mem::take(object) {
        let canonical = fields
            .names
            .iter()
            .find(|name| name.eq_ignore_ascii_case(&key))
            .map_or(key, |name| (*name).to_owned());
        if let Some((_, nested)) = fields.nested.iter().find(|(name, _)| *name == canonical) {
            fold(&mut item, *nested);
        }
        // Go keeps the last of duplicate keys; an exact-case key is as good as any other.
        folded.insert(canonical, item);
    }
    *object = folded;
}

/// `deserialize_with` for fields where JSON `null` means the default, as in Go.
pub(crate) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(rename_all = "PascalCase", default)]
    struct Outer {
        #[serde(deserialize_with = "null_as_default")]
        name: String,
        inner: Option<Inner>,
        meta: Option<BTreeMap<String, String>>,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(rename_all = "PascalCase", default)]
    struct Inner {
        value: String,
    }

    const FIELDS: Fields = Fields {
        names: &["Name", "Inner", "Meta"],
        nested: &[("Inner", Fields::flat(&["Value"]))],
    };

    #[test]
    fn keys_match_fields_ignoring_case_but_maps_keep_theirs() {
        let outer: Outer = decode(
            br#"{"name": null, "INNER": {"value": "v"}, "meta": {"Key": "x"}, "Extra": 1}"#,
            FIELDS,
        )
        .unwrap_or_default();
        assert_eq!(outer.name, "");
        assert_eq!(
            outer.inner,
            Some(Inner {
                value: "v".to_owned()
            })
        );
        assert_eq!(
            outer.meta,
            Some(BTreeMap::from([("Key".to_owned(), "x".to_owned())]))
        );
    }

    #[test]
    fn bad_bodies_are_400s() {
        for body in [&b""[..], b"  ", b"[]", b"{", b"{\"Name\": 5}"] {
            let result: Result<Outer, Error> = decode(body, FIELDS);
            assert!(matches!(result, Err(Error::BadRequest(_))), "{body:?}");
        }
        let empty: Result<Outer, Error> = decode_optional(b"", FIELDS);
        assert_eq!(empty.ok(), Some(Outer::default()));
    }
}
