//! JSON out: the [`Json`] response (a body serialised into a `Vec`), and compact JSON text of
//! `serde_json` values for hot response paths: [`write_value`] and [`write_str`] append
//! exactly the bytes `serde_json::to_vec` writes (same escapes, same key order, same number
//! text), with a string escape that skips eight plain bytes at a time.
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

/// The `200 application/json` response of `value`, or a logged 500.
pub(crate) fn json_response<T: Serialize + ?Sized>(value: &T) -> Response {
    match crate::json_ser::to_vec(value) {
        Ok(body) => {
            let mut response = Response::new(axum::body::Body::from(body));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
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

/// The two digits of every number below 100, in order: "00", "01", ... "99".
const DIGIT_PAIRS: [u8; 200] = {
    let mut pairs = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        pairs[2 * i] = b'0' + (i / 10) as u8;
        pairs[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    pairs
};

/// Appends `value` in decimal, as serde_json writes it (two digits a step: records and answers
/// hold many integers, most timestamps of 19 digits).
pub fn write_u64(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while value >= 100 {
        let pair = (value % 100) as usize * 2;
        value /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if value >= 10 {
        let pair = value as usize * 2;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        digits[at] = b'0' + value as u8;
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends `value` in decimal, as serde_json writes it.
pub fn write_i64(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    write_u64(out, value.unsigned_abs());
}

/// Appends `key` as serde_json writes an object's key (a string, a char or a unit variant as a
/// string, an integer as its text in quotes, a newtype around one of those), and answers
/// `true`; answers `false` and appends nothing for any other key (serde_json accepts some,
/// refuses others: a writer that gets `false` leaves the value to serde_json).
pub fn write_map_key<T: Serialize + ?Sized>(out: &mut Vec<u8>, key: &T) -> bool {
    crate::json_ser::write_key(out, key)
}

/// Appends `text` as a JSON string literal, quoted and escaped as `serde_json` does: `\"`,
/// `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, other control characters as `\u00xx` (lower-case
/// hex); everything else, DEL and non-ASCII included, as is.
pub fn write_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Sixteen, then eight bytes a step while none of them needs an escape.
        if let Some(chunk) = bytes.get(i..i + 16) {
            let (low, high) = chunk.split_at(8);
            let low = u64::from_le_bytes(low.try_into().unwrap_or([0; 8]));
            let high = u64::from_le_bytes(high.try_into().unwrap_or([0; 8]));
            if !needs_escape(low) && !needs_escape(high) {
                i += 16;
                continue;
            }
        }
        if let Some(chunk) = bytes.get(i..i + 8) {
            let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
            if !needs_escape(word) {
                i += 8;
                continue;
            }
        }
        // The next eight bytes (or the short tail, or a short string) one at a time through a
        // table, as serde_json does: no per-byte branch on the byte's class.
        let stop = bytes.len().min(i + 8);
        while i < stop {
            let byte = bytes[i];
            if ESCAPED[usize::from(byte)] {
                out.extend_from_slice(&bytes[start..i]);
                write_escape(out, byte);
                start = i + 1;
            }
            i += 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// The bytes a JSON string must escape: control characters, `"` and `\`.
static ESCAPED: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// The escape of one byte [`ESCAPED`] names, as serde_json writes it.
fn write_escape(out: &mut Vec<u8>, byte: u8) {
    let short: &[u8] = match byte {
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        0x08 => b"\\b",
        0x0c => b"\\f",
        b'\n' => b"\\n",
        b'\r' => b"\\r",
        b'\t' => b"\\t",
        _ => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xf)]);
            return;
        }
    };
    out.extend_from_slice(short);
}

/// Whether any of the eight bytes in `word` is a control character (< 0x20), `"` or `\`.
/// Exact: each test is the classic "has a zero byte" / "has a byte less than n" bit trick,
/// which has no false negatives and, as a yes/no, no false positives.
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Each mask has a lane's high bit set where that lane is the thing tested for (exact as a
    // yes/no); the three are tested at once, without a branch each.
    let zero_lanes = |v: u64| v.wrapping_sub(ONES) & !v;
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = zero_lanes(word ^ (ONES * u64::from(b'"')));
    let backslash = zero_lanes(word ^ (ONES * u64::from(b'\\')));
    (control | quote | backslash) & HIGHS != 0
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

    #[test]
    fn the_chunk_test_finds_each_escape_class_in_every_lane() {
        for lane in 0..8 {
            for byte in [0u8, 0x1f, b'"', b'\\', b'\n'] {
                let mut chunk = *b"abcdefgh";
                chunk[lane] = byte;
                assert!(
                    needs_escape(u64::from_le_bytes(chunk)),
                    "{byte:#x} at {lane}"
                );
            }
            for byte in [b' ', b'!', b'#', b'[', b']', 0x7f, 0x80, 0xff] {
                let mut chunk = *b"abcdefgh";
                chunk[lane] = byte;
                assert!(
                    !needs_escape(u64::from_le_bytes(chunk)),
                    "{byte:#x} at {lane}"
                );
            }
        }
    }

    #[test]
    fn integers_are_their_decimal_text() {
        let mut samples: Vec<u64> = (0..1000).collect();
        let mut power = 1u64;
        while let Some(next) = power.checked_mul(10) {
            samples.extend([power - 1, power, power + 1, next - 1]);
            power = next;
        }
        samples.extend([u64::MAX, u64::MAX - 1, 1_795_874_641_540_756_952]);
        for value in samples {
            let mut out = Vec::new();
            write_u64(&mut out, value);
            assert_eq!(out, value.to_string().into_bytes());
            let signed = i64::try_from(value).map_or(i64::MIN, |value| -value);
            let mut out = Vec::new();
            write_i64(&mut out, signed);
            assert_eq!(out, signed.to_string().into_bytes());
        }
    }
}
