//! Stored records and keys of the registry's kv family (see `store/mod.rs` for the layout).
//!
//! Keys:
//! ```text
//! registry/kv/<namespace>/<key>            KvRecord
//! registry/lock-delays/<namespace>/<key>   LockDelayRecord (acquire returns false until then)
//! ```
//!
//! Invariants: a KV entry's CreateIndex/ModifyIndex are its key's storage create/mod revisions;
//! the value is kept base64-encoded (as Consul sends it), `None` for an empty value (Consul's
//! `"Value": null`); namespaces never contain `/` (validated in `meta.rs`), so
//! `<namespace>/` prefixes are exact. Lock-delays are wall-clock Unix ms, read by acquire from
//! storage (they survive a restart); an expired one is deleted lazily by the next acquire.
//! An entry's `Session` is always also its `lock_record` (acquire sets both); a `lock_record`
//! naming a live session means that session's lock record for the key exists (only the
//! session's invalidation or the entry's deletion removes it).

use serde::{Deserialize, Serialize};
use storage::KeyRange;

use crate::Error;
use crate::store::{PREFIX, decode, store_key};

/// The current version of every record in this file.
pub(crate) const RECORD_VERSION: u32 = 1;

/// Every KV key of `namespace` starting with `prefix`.
pub(crate) fn kv_range(namespace: &str, prefix: &str) -> KeyRange {
    KeyRange::prefix(format!("{PREFIX}kv/{namespace}/{prefix}"))
}

pub(crate) fn kv_key(namespace: &str, key: &str) -> Vec<u8> {
    store_key(&[PREFIX, "kv/", namespace, "/", key])
}

/// The length of `registry/kv/<namespace>/`, to strip it from stored keys.
pub(crate) fn kv_key_offset(namespace: &str) -> usize {
    format!("{PREFIX}kv/{namespace}/").len()
}

pub(crate) fn lock_delay_key(namespace: &str, key: &str) -> Vec<u8> {
    store_key(&[PREFIX, "lock-delays/", namespace, "/", key])
}

/// A KV entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KvRecord {
    pub(crate) version: u32,
    #[serde(default)]
    pub(crate) flags: u64,
    /// Base64 (standard alphabet, padded); `None` for an empty value.
    #[serde(default)]
    pub(crate) value: Option<String>,
    /// The session holding the lock on this key, if any.
    #[serde(default)]
    pub(crate) session: Option<String>,
    #[serde(default)]
    pub(crate) lock_index: u64,
    /// The session whose lock record for this key (`store/sessions.rs`) was written with or
    /// before this entry: the last session to acquire the key, kept by release and plain
    /// PUTs, so a holder that releases and acquires again writes only this entry. Not shown
    /// to clients. Absent in entries written before it existed (acquire then writes the lock
    /// record again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lock_record: Option<String>,
}

/// What the KV writes read of an entry they replace: its lock fields, decoded from the same
/// JSON as [`KvRecord`] without its value (skipped unread, not copied).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct KvLockState {
    #[serde(default)]
    pub(crate) session: Option<String>,
    #[serde(default)]
    pub(crate) lock_index: u64,
    #[serde(default)]
    pub(crate) lock_record: Option<String>,
}

impl KvLockState {
    /// The lock fields of the stored entry `bytes` at `key`, as [`decode`] reads them: a scan
    /// of the flat object [`EntryRecord::encode`] writes (no whitespace; the strings read
    /// plain printable ASCII, without escapes), which leaves the value unread; anything else
    /// (escapes, whitespace, other number forms, a repeated field, a bad record) is left to
    /// [`decode`], so both give the same answer for every input.
    pub(crate) fn read(key: &[u8], bytes: &[u8]) -> Result<KvLockState, Error> {
        match scan_lock_state(bytes) {
            Some(state) => Ok(state),
            None => decode(key, bytes),
        }
    }
}

/// [`KvLockState::read`]'s scan; `None` for anything it leaves to serde_json.
fn scan_lock_state(bytes: &[u8]) -> Option<KvLockState> {
    let mut state = KvLockState::default();
    let (mut session, mut lock_index, mut lock_record) = (false, false, false);
    if bytes.first() != Some(&b'{') {
        return None;
    }
    let mut at = 1;
    if bytes.get(at) == Some(&b'}') {
        return (at + 1 == bytes.len()).then_some(state);
    }
    loop {
        if bytes.get(at) != Some(&b'"') {
            return None;
        }
        let end = plain_string_end(bytes, at + 1)?;
        let name = &bytes[at + 1..end];
        at = end + 1;
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        at += 1;
        match name {
            b"session" | b"lock_record" => {
                let seen = if name == b"session" {
                    &mut session
                } else {
                    &mut lock_record
                };
                if std::mem::replace(seen, true) {
                    return None;
                }
                let value = match bytes.get(at)? {
                    b'n' => {
                        at = skip_null(bytes, at)?;
                        None
                    }
                    b'"' => {
                        let end = plain_string_end(bytes, at + 1)?;
                        let text = std::str::from_utf8(&bytes[at + 1..end]).ok()?;
                        at = end + 1;
                        Some(text.to_owned())
                    }
                    _ => return None,
                };
                if name == b"session" {
                    state.session = value;
                } else {
                    state.lock_record = value;
                }
            }
            b"lock_index" => {
                if std::mem::replace(&mut lock_index, true) {
                    return None;
                }
                let (value, end) = scan_u64(bytes, at)?;
                state.lock_index = value;
                at = end;
            }
            _ => {
                at = match bytes.get(at)? {
                    b'"' => plain_string_end(bytes, at + 1)? + 1,
                    b'n' => skip_null(bytes, at)?,
                    _ => scan_u64(bytes, at)?.1,
                };
            }
        }
        match bytes.get(at)? {
            b',' => at += 1,
            b'}' => return (at + 1 == bytes.len()).then_some(state),
            _ => return None,
        }
    }
}

/// The index of the quote closing the string whose text starts at `start`, if every byte
/// before it is printable ASCII other than `\` (so the text is exactly those bytes).
fn plain_string_end(bytes: &[u8], start: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut at = start;
    // Eight bytes a step while none is a quote, a backslash, a control byte or non-ASCII (the
    // tests flag the lowest such byte of a word, then the bytes are looked at one by one).
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().ok()?);
        let control = word.wrapping_sub(ONES * 0x20) & !word;
        let quote = (word ^ (ONES * u64::from(b'"'))).wrapping_sub(ONES)
            & !(word ^ (ONES * u64::from(b'"')));
        let backslash = (word ^ (ONES * u64::from(b'\\'))).wrapping_sub(ONES)
            & !(word ^ (ONES * u64::from(b'\\')));
        if (control | quote | backslash | word) & HIGHS != 0 {
            break;
        }
        at += 8;
    }
    while let Some(&byte) = bytes.get(at) {
        match byte {
            b'"' => return Some(at),
            b'\\' | 0..=0x1f | 0x80..=0xff => return None,
            _ => at += 1,
        }
    }
    None
}

/// The index after a `null` at `at`.
fn skip_null(bytes: &[u8], at: usize) -> Option<usize> {
    (bytes.get(at..at + 4)? == b"null").then_some(at + 4)
}

/// The unsigned integer at `at` (digits, no leading zero unless it is 0) and the index after
/// it.
fn scan_u64(bytes: &[u8], at: usize) -> Option<(u64, usize)> {
    let digits = bytes[at..]
        .iter()
        .take_while(|byte| byte.is_ascii_digit())
        .count();
    if digits == 0 || (digits > 1 && bytes[at] == b'0') {
        return None;
    }
    let mut value: u64 = 0;
    for &digit in &bytes[at..at + digits] {
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    Some((value, at + digits))
}

/// A KV entry as the writes make it, borrowing its parts: [`EntryRecord::encode`] writes
/// exactly the JSON [`encode`] writes for the equal [`KvRecord`] (with `value` base64-encoded,
/// `None` when empty).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryRecord<'a> {
    pub(crate) flags: u64,
    /// The value's bytes, as the client sent them.
    pub(crate) value: &'a [u8],
    pub(crate) session: Option<&'a str>,
    pub(crate) lock_index: u64,
    pub(crate) lock_record: Option<&'a str>,
}

impl EntryRecord<'_> {
    /// The stored JSON, written directly (the value base64-encoded into it: base64 text needs
    /// no escaping).
    pub(crate) fn encode(&self) -> Vec<u8> {
        use base64::Engine;
        use http_kit::json::{write_str, write_u64};
        let strings = |text: Option<&str>| text.map_or(4, |text| text.len() + 2);
        let mut out = Vec::with_capacity(
            96 + self.value.len().div_ceil(3) * 4
                + strings(self.session)
                + strings(self.lock_record),
        );
        out.extend_from_slice(b"{\"version\":");
        write_u64(&mut out, u64::from(RECORD_VERSION));
        out.extend_from_slice(b",\"flags\":");
        write_u64(&mut out, self.flags);
        out.extend_from_slice(b",\"value\":");
        if self.value.is_empty() {
            out.extend_from_slice(b"null");
        } else {
            let base64 = &base64::engine::general_purpose::STANDARD;
            out.push(b'"');
            let start = out.len();
            out.resize(
                start + base64::encoded_len(self.value.len(), true).unwrap_or(0),
                0,
            );
            match base64.encode_slice(self.value, &mut out[start..]) {
                Ok(written) => out.truncate(start + written),
                // Only if the length above were wrong: encode it the slow way.
                Err(_) => {
                    out.truncate(start);
                    out.extend_from_slice(base64.encode(self.value).as_bytes());
                }
            }
            out.push(b'"');
        }
        out.extend_from_slice(b",\"session\":");
        match self.session {
            Some(session) => write_str(&mut out, session),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"lock_index\":");
        write_u64(&mut out, self.lock_index);
        if let Some(lock_record) = self.lock_record {
            out.extend_from_slice(b",\"lock_record\":");
            write_str(&mut out, lock_record);
        }
        out.push(b'}');
        out
    }
}

/// A lock-delay on a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LockDelayRecord {
    pub(crate) version: u32,
    /// Unix ms before which acquire returns `false`.
    pub(crate) until_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_state_reads_the_lock_fields_of_a_stored_entry() {
        let record = KvRecord {
            version: RECORD_VERSION,
            flags: 3,
            value: Some("dmFsdWU=".to_owned()),
            session: Some("s".to_owned()),
            lock_index: 7,
            lock_record: Some("s".to_owned()),
        };
        let key = kv_key("default", "k");
        let state: KvLockState =
            crate::store::decode(&key, &crate::store::encode(&key, &record).unwrap()).unwrap();
        assert_eq!(
            state,
            KvLockState {
                session: Some("s".to_owned()),
                lock_index: 7,
                lock_record: Some("s".to_owned()),
            }
        );
        // An entry written before `lock_record` existed.
        let old = br#"{"version":1,"flags":0,"value":null,"session":null,"lock_index":2}"#;
        let state: KvLockState = crate::store::decode(&key, old).unwrap();
        assert_eq!(state.lock_index, 2);
        assert_eq!(state.lock_record, None);
    }

    /// What serde_json reads, for comparing [`KvLockState::read`] against it.
    fn serde_read(bytes: &[u8]) -> Option<KvLockState> {
        serde_json::from_slice(bytes).ok()
    }

    #[test]
    fn lock_state_read_agrees_with_serde_json_on_every_record() {
        let key = kv_key("default", "k");
        let mut inputs: Vec<Vec<u8>> = Vec::new();
        let sessions = [None, Some(""), Some("0f0e0d0c-0b0a-4908-8706-050403020100")];
        for value in [&b""[..], b"v", b"value!", &[0xff; 300][..]] {
            for session in sessions {
                for lock_record in sessions {
                    for lock_index in [0, 1, 99, u64::MAX] {
                        let record = EntryRecord {
                            flags: 7,
                            value,
                            session,
                            lock_index,
                            lock_record,
                        }
                        .encode();
                        // What the writes store is read by the scan, not serde_json.
                        assert!(scan_lock_state(&record).is_some());
                        inputs.push(record);
                    }
                }
            }
        }
        // Forms the scan leaves to serde_json, and records serde_json refuses.
        let odd: [&[u8]; 27] = [
            br#"{}"#,
            br#" {}"#,
            br#"{} "#,
            br#"{"session":"s","session":"t"}"#,
            br#"{"lock_index":1,"lock_index":1}"#,
            br#"{"lock_index":01}"#,
            br#"{"lock_index":-1}"#,
            br#"{"lock_index":1.0}"#,
            br#"{"lock_index":1e2}"#,
            br#"{"lock_index":18446744073709551616}"#,
            br#"{"lock_index":"1"}"#,
            br#"{"session":5}"#,
            br#"{"session":"a\"b"}"#,
            br#"{"session":"\u0061"}"#,
            "{\"session\":\"caf\u{e9}\"}".as_bytes(),
            br#"{"value":"a\"b","session":"s"}"#,
            b"{\"value\":\"a\x01b\",\"session\":\"s\"}",
            b"{\"value\":\"\xff\xfe\",\"session\":\"s\"}",
            br#"{"value":true,"session":"s"}"#,
            br#"{"value":{"a":1},"session":"s"}"#,
            br#"{"version":1, "session":"s"}"#,
            br#"{"session":"s",}"#,
            br#"{"session":"s""#,
            br#"{"session":nul}"#,
            br#"{"sess\u0069on":"s"}"#,
            br#"{"session":"s"}x"#,
            br#"{"version":1,"flags":0,"value":null,"session":null,"lock_index":2}"#,
        ];
        inputs.extend(odd.iter().map(|input| input.to_vec()));
        // Every truncation of a full record.
        let full = inputs[inputs.len() - odd.len() - 1].clone();
        inputs.extend((0..full.len()).map(|cut| full[..cut].to_vec()));
        for input in &inputs {
            let read = KvLockState::read(&key, input).ok();
            assert_eq!(
                read,
                serde_read(input),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn plain_strings_end_at_their_quote_at_every_offset() {
        for length in 0..40 {
            for special in [b'"', b'\\', 0x01, 0x1f, 0x80, 0xff] {
                for at in 0..length {
                    let mut text = vec![b'a'; length];
                    text[at] = special;
                    text.push(b'"');
                    let expected = (special == b'"').then_some(at);
                    assert_eq!(plain_string_end(&text, 0), expected, "{length} {at}");
                }
                let mut text = vec![b'~'; length];
                text.push(b'"');
                assert_eq!(plain_string_end(&text, 0), Some(length));
                assert_eq!(plain_string_end(&text[..length], 0), None);
            }
        }
    }

    #[test]
    fn entry_record_encodes_as_the_equal_kv_record() {
        let key = kv_key("default", "k");
        let sessions = [
            None,
            Some("0f0e0d0c-0b0a-4908-8706-050403020100"),
            Some("a\"\n"),
        ];
        for value in [&b""[..], b"a", b"ab", b"abc", &[0xfe; 256][..]] {
            for session in sessions {
                for lock_record in sessions {
                    let entry = EntryRecord {
                        flags: u64::MAX,
                        value,
                        session,
                        lock_index: 12,
                        lock_record,
                    };
                    let record = KvRecord {
                        version: RECORD_VERSION,
                        flags: u64::MAX,
                        value: (!value.is_empty()).then(|| {
                            use base64::Engine;
                            base64::engine::general_purpose::STANDARD.encode(value)
                        }),
                        session: session.map(str::to_owned),
                        lock_index: 12,
                        lock_record: lock_record.map(str::to_owned),
                    };
                    assert_eq!(
                        entry.encode(),
                        crate::store::encode(&key, &record).unwrap(),
                        "{value:?} {session:?} {lock_record:?}"
                    );
                    assert_eq!(entry.encode(), serde_json::to_vec(&record).unwrap());
                }
            }
        }
    }

    #[test]
    fn kv_key_offset_strips_the_namespace_prefix() {
        let key = kv_key("default", "a/b");
        assert_eq!(&key[kv_key_offset("default")..], b"a/b");
        assert!(kv_range("default", "a/").contains(&key));
        assert!(!kv_range("other", "").contains(&key));
    }
}
