//! The on-disk encoding of the `kv` and `history` tables' values and of write-ahead log
//! records ([`Redo`] changes), by hand: a format byte, then little-endian integers and
//! length-prefixed byte strings.
//!
//! Where it sits: below `tables.rs` (which reads and writes redb) and above nothing; pure
//! functions, no I/O.
//!
//! Invariants: decoding never panics and never allocates more than the record holds: any
//! truncation, overlong length, unknown format byte, unknown event kind or trailing garbage is
//! an [`Error::Backend`] naming the record. Encodings are stable: changing one means a new
//! format byte and decoding the old one too.

use storage::{Error, Event, EventKind, KeyValue, Revision};

/// Format byte of a `kv` record: `create_rev u64, mod_rev u64, version u64, value_len u64,
/// value`.
const KV_FORMAT: u8 = 1;
/// Format byte of a `history` record written before values were shared with `kv`: `count u64`,
/// then per event `kind u8, key_len u64, key, value_len u64, value` (kinds [`PUT`] and
/// [`DELETE`] only). Still read; no longer written.
const HISTORY_FORMAT_INLINE: u8 = 1;
/// Format byte of a `history` record: `count u64`, then per event `kind u8, key_len u64, key`,
/// for [`PUT`] `value_len u64, value`, and with the [`PREVIOUS`] bit `previous_len u64,
/// previous`. A [`PUT_STORED`] event carries no value: it is its key's last change in the
/// transaction, so its value is the `kv` record's as long as the key's mod revision is this
/// revision; the key's next change, which can only come in a later revision, carries that
/// value as its `previous` (see `tables.rs`). The revision is the record's key.
const HISTORY_FORMAT: u8 = 2;
const PUT: u8 = 1;
const DELETE: u8 = 2;
const PUT_STORED: u8 = 3;
/// Bit of a [`HISTORY_FORMAT`] event's kind: the value the key held before follows.
const PREVIOUS: u8 = 0x10;

/// Offset of `mod_rev` in a `kv` record.
const MOD_REVISION_AT: usize = 1 + 8;

pub(crate) fn encode_kv(
    value: &[u8],
    create_revision: Revision,
    mod_revision: Revision,
    version: u64,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(kv_len(value));
    write_kv(&mut out, value, create_revision, mod_revision, version);
    out
}

/// The length of a `kv` record holding `value`.
fn kv_len(value: &[u8]) -> usize {
    1 + 8 * 4 + value.len()
}

fn write_kv(
    out: &mut Vec<u8>,
    value: &[u8],
    create_revision: Revision,
    mod_revision: Revision,
    version: u64,
) {
    out.push(KV_FORMAT);
    out.extend_from_slice(&create_revision.to_le_bytes());
    out.extend_from_slice(&mod_revision.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    put_bytes(out, value);
}

/// A `kv` record read in place: its revisions, version and a borrowed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KvRecord<'a> {
    pub(crate) create_revision: Revision,
    pub(crate) mod_revision: Revision,
    pub(crate) version: u64,
    pub(crate) value: &'a [u8],
}

/// Reads a `kv` record without copying its value.
pub(crate) fn read_kv<'a>(key: &[u8], record: &'a [u8]) -> Result<KvRecord<'a>, Error> {
    let what = || format!("kv record for key {:?}", String::from_utf8_lossy(key));
    let mut reader = Reader::new(record, &what);
    if reader.u8()? != KV_FORMAT {
        return Err(reader.corrupt("unknown format"));
    }
    let create_revision = reader.u64()?;
    let mod_revision = reader.u64()?;
    let version = reader.u64()?;
    let value = reader.bytes()?;
    reader.finish()?;
    Ok(KvRecord {
        create_revision,
        mod_revision,
        version,
        value,
    })
}

pub(crate) fn decode_kv(key: &[u8], record: &[u8]) -> Result<KeyValue, Error> {
    let kv = read_kv(key, record)?;
    Ok(KeyValue {
        key: key.to_vec(),
        value: kv.value.to_vec(),
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
    })
}

/// Just the mod revision of a `kv` record, without copying its value.
pub(crate) fn decode_mod_revision(key: &[u8], record: &[u8]) -> Result<Revision, Error> {
    let what = || format!("kv record for key {:?}", String::from_utf8_lossy(key));
    let mut reader = Reader::new(record, &what);
    if reader.u8()? != KV_FORMAT {
        return Err(reader.corrupt("unknown format"));
    }
    reader.take(MOD_REVISION_AT - 1)?;
    reader.u64()
}

/// What a `history` record says one event changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change<'a> {
    /// A put, with its value.
    Put(&'a [u8]),
    /// A put whose value is in `kv`, or carried by the key's next change (see
    /// [`HISTORY_FORMAT`]).
    PutStored,
    Delete,
}

/// One event of a `history` record, read in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Logged<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) change: Change<'a>,
    /// The value the key held before this event, when its put is recorded as
    /// [`Change::PutStored`] in a revision history still holds.
    pub(crate) previous: Option<&'a [u8]>,
}

/// Encodes a transaction's events as its `history` record: `stored[i]` says event `i` is a
/// put recorded without its value (it must be the last event of its key), `previous[i]` is
/// the value its key held before, when a stored put needs it.
pub(crate) fn encode_history(
    events: &[Event],
    stored: &[bool],
    previous: &[Option<Vec<u8>>],
) -> Vec<u8> {
    debug_assert_eq!(events.len(), stored.len());
    debug_assert_eq!(events.len(), previous.len());
    let size = events
        .iter()
        .zip(stored)
        .zip(previous)
        .map(|((event, stored), previous)| {
            1 + 8
                + event.key.len()
                + if *stored { 0 } else { 8 + event.value.len() }
                + previous.as_ref().map_or(0, |previous| 8 + previous.len())
        })
        .sum::<usize>();
    let mut out = Vec::with_capacity(1 + 8 + size);
    out.push(HISTORY_FORMAT);
    out.extend_from_slice(&(events.len() as u64).to_le_bytes());
    for ((event, stored), previous) in events.iter().zip(stored).zip(previous) {
        let kind = match (event.kind, stored) {
            (EventKind::Put, false) => PUT,
            (EventKind::Put, true) => PUT_STORED,
            (EventKind::Delete, _) => DELETE,
        };
        out.push(kind | if previous.is_some() { PREVIOUS } else { 0 });
        put_bytes(&mut out, &event.key);
        if kind == PUT {
            put_bytes(&mut out, &event.value);
        }
        if let Some(previous) = previous {
            put_bytes(&mut out, previous);
        }
    }
    out
}

/// Reads a `history` record in place: each event, in order.
pub(crate) fn read_history(revision: Revision, record: &[u8]) -> Result<Vec<Logged<'_>>, Error> {
    let what = || format!("history record for revision {revision}");
    let mut reader = Reader::new(record, &what);
    let format = reader.u8()?;
    if format != HISTORY_FORMAT && format != HISTORY_FORMAT_INLINE {
        return Err(reader.corrupt("unknown format"));
    }
    let count = reader.u64()?;
    // Each event takes at least 9 bytes; a larger count is corruption, not a reason to
    // allocate.
    if count > (reader.remaining() / 9) as u64 {
        return Err(reader.corrupt("event count exceeds the record"));
    }
    let mut events = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let kind = reader.u8()?;
        let key = reader.bytes()?;
        let (change, previous) = if format == HISTORY_FORMAT_INLINE {
            let value = reader.bytes()?;
            match kind {
                PUT => (Change::Put(value), false),
                // The first format wrote an empty value after every delete.
                DELETE if value.is_empty() => (Change::Delete, false),
                _ => return Err(reader.corrupt("unknown event kind")),
            }
        } else {
            let change = match kind & !PREVIOUS {
                PUT => Change::Put(reader.bytes()?),
                DELETE => Change::Delete,
                PUT_STORED => Change::PutStored,
                _ => return Err(reader.corrupt("unknown event kind")),
            };
            (change, kind & PREVIOUS != 0)
        };
        let previous = if previous {
            Some(reader.bytes()?)
        } else {
            None
        };
        events.push(Logged {
            key,
            change,
            previous,
        });
    }
    reader.finish()?;
    Ok(events)
}

/// One change to a table, as a write-ahead log record lists it (see `tables.rs`): replaying a
/// group's changes in order on the state before the group reproduces the state after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Redo<'a> {
    /// `kv[key] = record` (an encoded kv record).
    KvPut(&'a [u8], &'a [u8]),
    KvDelete(&'a [u8]),
    TombstonePut(&'a [u8], Revision),
    TombstoneDelete(&'a [u8]),
    /// `history[revision] = record` (encoded events).
    HistoryPut(Revision, &'a [u8]),
    HistoryDelete(Revision),
}

const REDO_KV_PUT: u8 = 1;
const REDO_KV_DELETE: u8 = 2;
const REDO_TOMBSTONE_PUT: u8 = 3;
const REDO_TOMBSTONE_DELETE: u8 = 4;
const REDO_HISTORY_PUT: u8 = 5;
const REDO_HISTORY_DELETE: u8 = 6;
/// Format byte of a redo record: `format u8, first_revision u64, meta [u64; REDO_META]`, then
/// changes until the end, each `tag u8` and its fields (byte strings length-prefixed).
const REDO_FORMAT: u8 = 1;
/// How many meta words a redo record carries (`tables::Meta`'s fields).
pub(crate) const REDO_META: usize = 4;
/// The size of a redo record's header, reserved by [`redo_start`] and filled by
/// [`redo_finish`].
const REDO_HEADER: usize = 1 + 8 + 8 * REDO_META;

/// Starts a redo record in `buffer` (emptied, its capacity kept): room for its header, then
/// [`encode_redo`] appends changes.
pub(crate) fn redo_start(mut buffer: Vec<u8>) -> Vec<u8> {
    buffer.clear();
    buffer.resize(REDO_HEADER, 0);
    buffer
}

/// Appends the change `Redo::KvPut(key, record)` for the `kv` record of `value` (as
/// [`encode_kv`] makes it), encoding the record in place; returns where the record starts in
/// `out`, so the caller can store those very bytes.
pub(crate) fn encode_redo_kv_put(
    out: &mut Vec<u8>,
    key: &[u8],
    value: &[u8],
    create_revision: Revision,
    mod_revision: Revision,
    version: u64,
) -> usize {
    out.reserve(1 + 16 + key.len() + kv_len(value));
    out.push(REDO_KV_PUT);
    put_bytes(out, key);
    out.extend_from_slice(&(kv_len(value) as u64).to_le_bytes());
    let at = out.len();
    write_kv(out, value, create_revision, mod_revision, version);
    at
}

/// Fills in the header of a redo record begun by [`redo_start`].
pub(crate) fn redo_finish(record: &mut [u8], first: Revision, meta: [u64; REDO_META]) {
    record[0] = REDO_FORMAT;
    record[1..9].copy_from_slice(&first.to_le_bytes());
    for (i, word) in meta.iter().enumerate() {
        record[9 + 8 * i..17 + 8 * i].copy_from_slice(&word.to_le_bytes());
    }
}

pub(crate) fn encode_redo(out: &mut Vec<u8>, change: Redo<'_>) {
    match change {
        Redo::KvPut(key, record) => {
            out.push(REDO_KV_PUT);
            put_bytes(out, key);
            put_bytes(out, record);
        }
        Redo::KvDelete(key) => {
            out.push(REDO_KV_DELETE);
            put_bytes(out, key);
        }
        Redo::TombstonePut(key, revision) => {
            out.push(REDO_TOMBSTONE_PUT);
            put_bytes(out, key);
            out.extend_from_slice(&revision.to_le_bytes());
        }
        Redo::TombstoneDelete(key) => {
            out.push(REDO_TOMBSTONE_DELETE);
            put_bytes(out, key);
        }
        Redo::HistoryPut(revision, record) => {
            out.push(REDO_HISTORY_PUT);
            out.extend_from_slice(&revision.to_le_bytes());
            put_bytes(out, record);
        }
        Redo::HistoryDelete(revision) => {
            out.push(REDO_HISTORY_DELETE);
            out.extend_from_slice(&revision.to_le_bytes());
        }
    }
}

/// A redo record's first revision, meta words and changes.
pub(crate) type RedoRecord<'a> = (Revision, [u64; REDO_META], Vec<Redo<'a>>);

fn redo_what() -> String {
    "write-ahead log record".to_owned()
}

pub(crate) fn decode_redo(record: &[u8]) -> Result<RedoRecord<'_>, Error> {
    let mut reader = Reader::new(record, &redo_what);
    if reader.u8()? != REDO_FORMAT {
        return Err(reader.corrupt("unknown format"));
    }
    let first = reader.u64()?;
    let mut meta = [0u64; REDO_META];
    for word in &mut meta {
        *word = reader.u64()?;
    }
    let mut changes = Vec::new();
    while reader.remaining() > 0 {
        changes.push(match reader.u8()? {
            REDO_KV_PUT => Redo::KvPut(reader.bytes()?, reader.bytes()?),
            REDO_KV_DELETE => Redo::KvDelete(reader.bytes()?),
            REDO_TOMBSTONE_PUT => Redo::TombstonePut(reader.bytes()?, reader.u64()?),
            REDO_TOMBSTONE_DELETE => Redo::TombstoneDelete(reader.bytes()?),
            REDO_HISTORY_PUT => Redo::HistoryPut(reader.u64()?, reader.bytes()?),
            REDO_HISTORY_DELETE => Redo::HistoryDelete(reader.u64()?),
            _ => return Err(reader.corrupt("unknown change")),
        });
    }
    Ok((first, meta, changes))
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

struct Reader<'a, 'w, W: Fn() -> String> {
    bytes: &'a [u8],
    what: &'w W,
}

impl<'a, 'w, W: Fn() -> String> Reader<'a, 'w, W> {
    fn new(bytes: &'a [u8], what: &'w W) -> Reader<'a, 'w, W> {
        Reader { bytes, what }
    }

    fn corrupt(&self, why: &str) -> Error {
        Error::Backend(format!("corrupt {}: {why}", (self.what)()))
    }

    fn remaining(&self) -> usize {
        self.bytes.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.bytes.len() < n {
            return Err(self.corrupt("truncated"));
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, Error> {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(bytes))
    }

    /// A length-prefixed byte string.
    fn bytes(&mut self) -> Result<&'a [u8], Error> {
        let len = self.u64()?;
        let len = usize::try_from(len).map_err(|_| self.corrupt("length overflows"))?;
        self.take(len)
    }

    fn finish(&self) -> Result<(), Error> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(self.corrupt("trailing bytes"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_events() -> Vec<Event> {
        vec![
            Event {
                kind: EventKind::Put,
                key: b"a".to_vec(),
                value: b"1".to_vec(),
                revision: 9,
            },
            Event {
                kind: EventKind::Delete,
                key: b"\x00\xff".to_vec(),
                value: Vec::new(),
                revision: 9,
            },
            Event {
                kind: EventKind::Put,
                key: Vec::new(),
                value: vec![0; 300],
                revision: 9,
            },
        ]
    }

    #[test]
    fn kv_record_round_trips() {
        let record = encode_kv(b"value", 3, 7, 2);
        let kv = decode_kv(b"k", &record).unwrap();
        assert_eq!(
            kv,
            KeyValue {
                key: b"k".to_vec(),
                value: b"value".to_vec(),
                create_revision: 3,
                mod_revision: 7,
                version: 2
            }
        );
        assert_eq!(decode_mod_revision(b"k", &record).unwrap(), 7);
    }

    /// The last put is stored; the delete and the stored put carry the values their keys held.
    const SAMPLE_STORED: [bool; 3] = [false, false, true];

    fn sample_previous() -> Vec<Option<Vec<u8>>> {
        vec![None, Some(b"was".to_vec()), Some(Vec::new())]
    }

    fn sample_history() -> Vec<u8> {
        encode_history(&sample_events(), &SAMPLE_STORED, &sample_previous())
    }

    fn logged<'a>(key: &'a [u8], change: Change<'a>, previous: Option<&'a [u8]>) -> Logged<'a> {
        Logged {
            key,
            change,
            previous,
        }
    }

    /// A record as the first history format wrote it (every value inline).
    fn encode_inline(events: &[Event]) -> Vec<u8> {
        let mut out = vec![HISTORY_FORMAT_INLINE];
        out.extend_from_slice(&(events.len() as u64).to_le_bytes());
        for event in events {
            out.push(match event.kind {
                EventKind::Put => PUT,
                EventKind::Delete => DELETE,
            });
            put_bytes(&mut out, &event.key);
            put_bytes(&mut out, &event.value);
        }
        out
    }

    #[test]
    fn history_record_round_trips_with_stored_puts_and_previous_values() {
        let record = sample_history();
        let value = vec![0; 300];
        assert_eq!(
            read_history(9, &record).unwrap(),
            vec![
                logged(b"a", Change::Put(b"1"), None),
                logged(b"\x00\xff", Change::Delete, Some(b"was")),
                logged(b"", Change::PutStored, Some(b"")),
            ]
        );
        assert!(
            record.len() < value.len(),
            "the stored value is not in the record"
        );
        let inline = encode_history(&sample_events(), &[false; 3], &[None, None, None]);
        assert_eq!(
            read_history(9, &inline).unwrap()[2],
            logged(b"", Change::Put(&value), None)
        );
        assert_eq!(
            read_history(4, &encode_history(&[], &[], &[])).unwrap(),
            vec![]
        );
    }

    #[test]
    fn history_records_of_the_first_format_are_still_read() {
        let value = vec![0; 300];
        assert_eq!(
            read_history(9, &encode_inline(&sample_events())).unwrap(),
            vec![
                logged(b"a", Change::Put(b"1"), None),
                logged(b"\x00\xff", Change::Delete, None),
                logged(b"", Change::Put(&value), None),
            ]
        );
        // The first format had no stored puts and no previous values.
        for kind in [PUT_STORED, PUT | PREVIOUS] {
            let mut record = encode_inline(&sample_events());
            record[9] = kind;
            assert!(read_history(9, &record).is_err(), "kind {kind}");
        }
    }

    #[test]
    fn redo_record_round_trips_and_truncation_is_an_error() {
        let changes = [
            Redo::KvPut(b"k", b"record"),
            Redo::KvDelete(b""),
            Redo::TombstonePut(b"t", 5),
            Redo::TombstoneDelete(b"t"),
            Redo::HistoryPut(6, b"events"),
            Redo::HistoryDelete(2),
        ];
        let mut record = redo_start(vec![7; 3]);
        for change in changes {
            encode_redo(&mut record, change);
        }
        redo_finish(&mut record, 5, [6, 2, 1, 99]);
        let (first, meta, decoded) = decode_redo(&record).unwrap();
        assert_eq!((first, meta), (5, [6, 2, 1, 99]));
        assert_eq!(decoded, changes);
        for len in 0..record.len() {
            // A cut at a change boundary is a shorter valid record; anywhere else an error.
            if let Ok((_, _, decoded)) = decode_redo(&record[..len]) {
                assert!(decoded.len() < changes.len(), "length {len}");
            }
        }
    }

    #[test]
    fn a_kv_put_encoded_in_place_equals_its_change_and_record() {
        let mut record = redo_start(Vec::new());
        let at = encode_redo_kv_put(&mut record, b"key", b"value", 3, 7, 2);
        assert_eq!(&record[at..], encode_kv(b"value", 3, 7, 2));
        redo_finish(&mut record, 7, [7, 0, 0, 0]);
        let (_, _, changes) = decode_redo(&record).unwrap();
        assert_eq!(
            changes,
            [Redo::KvPut(b"key", &encode_kv(b"value", 3, 7, 2))]
        );
    }

    #[test]
    fn truncated_records_are_backend_errors_not_panics() {
        let kv = encode_kv(b"value", 3, 7, 2);
        for len in 0..kv.len() {
            assert!(
                matches!(decode_kv(b"k", &kv[..len]), Err(Error::Backend(_))),
                "kv length {len}"
            );
        }
        for len in 0..MOD_REVISION_AT + 8 {
            assert!(
                decode_mod_revision(b"k", &kv[..len]).is_err(),
                "mod revision length {len}"
            );
        }
        for history in [sample_history(), encode_inline(&sample_events())] {
            for len in 0..history.len() {
                assert!(
                    matches!(read_history(1, &history[..len]), Err(Error::Backend(_))),
                    "history length {len}"
                );
            }
        }
    }

    #[test]
    fn garbage_records_are_backend_errors_not_panics() {
        let mut kv = encode_kv(b"value", 3, 7, 2);
        kv.push(0);
        assert!(decode_kv(b"k", &kv).is_err(), "trailing byte");
        let mut huge = encode_kv(b"", 1, 1, 1);
        let len_at = huge.len() - 8;
        huge[len_at..].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode_kv(b"k", &huge).is_err(), "overlong length");
        let mut wrong_format = encode_kv(b"v", 1, 1, 1);
        wrong_format[0] = 99;
        assert!(decode_kv(b"k", &wrong_format).is_err());

        let mut history = sample_history();
        history[1..9].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(read_history(1, &history).is_err(), "absurd event count");
        let mut history = sample_history();
        history[9] = 7;
        assert!(read_history(1, &history).is_err(), "unknown event kind");
        // Every single-byte flip either decodes to something or fails cleanly.
        let history = sample_history();
        for i in 0..history.len() {
            let mut flipped = history.clone();
            flipped[i] ^= 0x80;
            let _ = read_history(1, &flipped);
        }
    }
}
