//! JSON out: the [`Json`] response (a body serialised into a `Vec`), [`to_vec`] (the same text
//! for a stored record), and compact JSON text of `serde_json` values for hot response paths: [`write_value`], with `json_text`'s
//! [`write_str`], [`write_u64`], [`write_i64`] and `json_ser`'s [`write_map_key`], append
//! exactly the bytes `serde_json::to_vec` writes (same escapes, same key order, same number
//! text), with a string escape that skips plain bytes a word at a time.
//!
//! Why [`Json`] rather than axum's: axum serialises through a `BytesMut` writer, one
//! `put_slice` call per token, which cost a health answer more than the rest of its handler;
//! [`Json`] writes into a `Vec` it grows in place, through `json_ser` (a compact serde
//! serialiser whose strings go through [`write_str`]; its bytes are `serde_json::to_vec`'s).
//!
//! Why: a secret's value is a long string, and `serde_json`'s escape visits it byte by byte
//! through a table; that loop was the largest single cost of a kv read after the HTTP path.
//! Callers that build an envelope by hand (`secrets`' dispatch) write their fixed keys as
//! literals and their values through here.
//!
//! Invariants: output is byte-identical to `serde_json::to_vec` of the same value (tested
//! below against it on strings with every escape class, non-ASCII text, numbers and nesting);
//! nothing here allocates beyond growing `out`; nothing panics.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde::Serialize;
use serde_json::Value;

use crate::INTERNAL_ERROR_MESSAGE;
pub use crate::json_text::{write_i64, write_str, write_u64};

/// A `200 application/json` response of `T` (wrap it in a tuple with a status for another),
/// as axum's `Json` responds, with the body `serde_json::to_vec` would write (written by
/// `json_ser`, which escapes strings through [`write_str`]). A value that cannot be
/// serialised is a logged 500.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        json_response(&self.0)
    }
}

/// Room for the headers a JSON answer ends up with (its content type, the service's index and
/// leader headers under both spellings, the request id), so adding them never regrows the map
/// (a regrowth moves every entry and rebuilds the index).
const JSON_RESPONSE_HEADERS: usize = 12;

/// The `200 application/json` response of `value`, or a logged 500.
pub(crate) fn json_response<T: Serialize + ?Sized>(value: &T) -> Response {
    match crate::json_ser::to_vec(value) {
        Ok(body) => {
            let mut response = Response::new(axum::body::Body::from(body));
            let mut headers = http::HeaderMap::with_capacity(JSON_RESPONSE_HEADERS);
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            *response.headers_mut() = headers;
            response
        }
        Err(err) => {
            tracing::error!(message = "Response serialization failed.", error = %err);
            crate::shape::plain_text(StatusCode::INTERNAL_SERVER_ERROR, INTERNAL_ERROR_MESSAGE)
        }
    }
}

/// Appends the compact JSON text of `value`, as `serde_json::to_vec` writes it.
pub fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(number) => {
            // Numbers are rare on these paths: serde_json's own formatting, so the text is its.
            if serde_json::to_writer(&mut *out, number).is_err() {
                out.extend_from_slice(b"null");
            }
        }
        Value::String(text) => write_str(out, text),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(fields) => {
            out.push(b'{');
            for (i, (key, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, key);
                out.push(b':');
                write_value(out, item);
            }
            out.push(b'}');
        }
    }
}

/// The compact JSON text of `value`, exactly `serde_json::to_vec`'s (error included), written by
/// `json_ser`: for services that store JSON records on a hot write path.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    crate::json_ser::to_vec(value)
}

/// Appends `key` as serde_json writes an object's key (a string, a char or a unit variant as a
/// string, an integer as its text in quotes, a newtype around one of those), and answers
/// `true`; answers `false` and appends nothing for any other key (serde_json accepts some,
/// refuses others: a writer that gets `false` leaves the value to serde_json).
pub fn write_map_key<T: Serialize + ?Sized>(out: &mut Vec<u8>, key: &T) -> bool {
    crate::json_ser::write_key(out, key)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ours(value: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        write_value(&mut out, value);
        out
    }

    #[test]
    fn strings_escape_exactly_as_serde_json() {
        let mut samples: Vec<String> = vec![
            String::new(),
            "plain".to_owned(),
            "exactly8".to_owned(),
            "a \"quoted\" \\ back\\slash".to_owned(),
            "tabs\tnew\nlines\rand\u{8}\u{c}feeds".to_owned(),
            "\u{0}\u{1}\u{1f}\u{7f} controls and DEL".to_owned(),
            "héllo wörld — ✓ 🦀 ünïcödé spanning eight-byte chunks".to_owned(),
            "x".repeat(256),
        ];
        // Every byte value below 0x80 at every offset of a 41-byte string (16 + 16 + 8 + 1),
        // so each escape class falls in both halves of a 16-byte step, in an 8-byte step, at
        // a step's edge and in the tail.
        for byte in 0u8..0x80 {
            for at in 0..41 {
                let mut text: Vec<u8> = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNO".to_vec();
                text[at] = byte;
                samples.push(String::from_utf8(text).unwrap());
            }
        }
        for sample in samples {
            let value = Value::String(sample.clone());
            assert_eq!(
                ours(&value),
                serde_json::to_vec(&value).unwrap(),
                "{sample:?}"
            );
        }
    }

    #[test]
    fn values_are_written_as_serde_json_writes_them() {
        let values = [
            json!(null),
            json!(true),
            json!(false),
            json!(0),
            json!(-17),
            json!(u64::MAX),
            json!(1.5),
            json!(1e300),
            json!(-0.000_001),
            json!([]),
            json!({}),
            json!({"b": 1, "a": [1, "two", null, {"x": "y\n"}], "c": {"d": false}}),
            json!({"value": "s".repeat(300), "ttl": "1h", "n": 3.25}),
        ];
        for value in values {
            assert_eq!(ours(&value), serde_json::to_vec(&value).unwrap(), "{value}");
        }
    }
}
