//! Snapshots: a consistent copy of the whole store at one revision, and its byte encoding.
//!
//! The encoding is self-describing and checked: a magic header, a format version, the revision,
//! the entries, and a trailing FNV-1a 64 checksum over everything before it. Decoding rejects
//! any truncation or corruption with [`Error::InvalidSnapshot`].
//!
//! Invariant: entries are in ascending key order with no duplicates.

use crate::{Error, KeyValue, Result, Revision};

const MAGIC: &[u8; 8] = b"CAIRNSNP";
const FORMAT_VERSION: u32 = 1;

/// Every key of a store at `revision`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub revision: Revision,
    pub entries: Vec<KeyValue>,
}

impl Snapshot {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            32 + self
                .entries
                .iter()
                .map(|kv| kv.key.len() + kv.value.len() + 40)
                .sum::<usize>(),
        );
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&self.revision.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for kv in &self.entries {
            out.extend_from_slice(&(kv.key.len() as u64).to_le_bytes());
            out.extend_from_slice(&kv.key);
            out.extend_from_slice(&(kv.value.len() as u64).to_le_bytes());
            out.extend_from_slice(&kv.value);
            out.extend_from_slice(&kv.create_revision.to_le_bytes());
            out.extend_from_slice(&kv.mod_revision.to_le_bytes());
            out.extend_from_slice(&kv.version.to_le_bytes());
        }
        let checksum = stdx::hash::fnv1a_64(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Snapshot> {
        let invalid = |what: &str| Error::InvalidSnapshot(what.to_owned());
        if bytes.len() < MAGIC.len() + 4 + 8 + 8 + 8 {
            return Err(invalid("too short"));
        }
        let (body, checksum) = bytes.split_at(bytes.len() - 8);
        if stdx::hash::fnv1a_64(body).to_le_bytes() != checksum {
            return Err(invalid("checksum mismatch"));
        }
        let mut reader = Reader { bytes: body };
        if reader.take(MAGIC.len())? != MAGIC {
            return Err(invalid("not a cairn snapshot"));
        }
        let version =
            u32::from_le_bytes(reader.take(4)?.try_into().map_err(|_| invalid("version"))?);
        if version != FORMAT_VERSION {
            return Err(Error::InvalidSnapshot(format!(
                "unsupported format version {version}"
            )));
        }
        let revision = reader.u64()?;
        let count = reader.u64()?;
        let mut entries = Vec::with_capacity(count.min(1 << 20) as usize);
        for _ in 0..count {
            let key_len = reader.u64()? as usize;
            let key = reader.take(key_len)?.to_vec();
            let value_len = reader.u64()? as usize;
            let value = reader.take(value_len)?.to_vec();
            let create_revision = reader.u64()?;
            let mod_revision = reader.u64()?;
            let version = reader.u64()?;
            if let Some(last) = entries.last().map(|kv: &KeyValue| &kv.key)
                && *last >= key
            {
                return Err(invalid("entries out of order"));
            }
            entries.push(KeyValue {
                key,
                value,
                create_revision,
                mod_revision,
                version,
            });
        }
        if !reader.bytes.is_empty() {
            return Err(invalid("trailing bytes"));
        }
        Ok(Snapshot { revision, entries })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.bytes.len() < n {
            return Err(Error::InvalidSnapshot("truncated".to_owned()));
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64> {
        let bytes = self.take(8)?;
        Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| {
            Error::InvalidSnapshot("truncated".to_owned())
        })?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Snapshot {
        Snapshot {
            revision: 7,
            entries: vec![
                KeyValue {
                    key: b"a".to_vec(),
                    value: b"1".to_vec(),
                    create_revision: 1,
                    mod_revision: 3,
                    version: 2,
                },
                KeyValue {
                    key: b"b".to_vec(),
                    value: vec![],
                    create_revision: 7,
                    mod_revision: 7,
                    version: 1,
                },
            ],
        }
    }

    #[test]
    fn snapshot_round_trips_through_bytes() {
        let snapshot = sample();
        assert_eq!(
            Snapshot::from_bytes(&snapshot.to_bytes()).unwrap(),
            snapshot
        );
    }

    #[test]
    fn snapshot_decode_rejects_any_flipped_byte() {
        let bytes = sample().to_bytes();
        for i in 0..bytes.len() {
            let mut corrupt = bytes.clone();
            corrupt[i] ^= 0x40;
            assert!(
                Snapshot::from_bytes(&corrupt).is_err(),
                "flip at {i} accepted"
            );
        }
    }

    #[test]
    fn snapshot_decode_rejects_truncation() {
        let bytes = sample().to_bytes();
        for len in 0..bytes.len() {
            assert!(
                Snapshot::from_bytes(&bytes[..len]).is_err(),
                "length {len} accepted"
            );
        }
    }
}
