//! The write-ahead log next to the redb file (`<path>.wal`): what lets a group commit cost one
//! sequential `fdatasync` instead of a durable redb commit (see `writer.rs` for when it is
//! used and `tables.rs` for what a record holds).
//!
//! Where it sits: below `writer.rs` (which appends one record per group and resets the log at
//! each checkpoint) and `lib.rs` (which replays it at open); plain file I/O, no redb.
//!
//! Layout: the file is filled with zeros ahead of the records, [`CHUNK`] bytes at a time (at
//! open, then whenever a record would pass the end, up to [`CAPACITY`]; it never shrinks), so
//! an append rewrites allocated blocks and its `fdatasync` flushes no metadata; records are
//! written from offset 0 again after every checkpoint. A record is `magic u32, body_len u32, crc32 u32, nonce u64, body`,
//! little-endian; the crc covers the nonce and the body. Records follow each other without
//! gaps, so a reader walks them from 0 and stops at the first that does not check.
//!
//! Invariants:
//! - The nonce is a random number chosen at every checkpoint and stored durably in redb's
//!   `meta` table by that checkpoint's commit; a record is only valid with the current nonce.
//!   So nothing written before the checkpoint (stale records past the new write position, or
//!   user values inside them shaped like a record) is ever read back as a record.
//! - [`Wal::append`] returns only after the record is on disk (`fdatasync`).
//! - Reading never panics and never allocates more than the file holds.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use storage::Error;

/// The log's size on disk. A record that does not fit in what is left is not logged: its
/// group commits durably into redb (a checkpoint) instead.
pub(crate) const CAPACITY: u64 = 16 << 20;
/// How much the file grows by at a time (1 MiB of zeros and a sync cost about 4 ms here; the
/// whole 16 MiB at open would cost about 19 ms on every fresh store).
const CHUNK: u64 = 1 << 20;
const MAGIC: u32 = 0x4c41_5743; // "CWAL"
const HEADER: usize = 4 + 4 + 4 + 8;

fn io_error(path: &Path, what: &str, err: std::io::Error) -> Error {
    Error::Backend(format!("write-ahead log {}: {what}: {err}", path.display()))
}

/// The log file's path for the redb file at `db`: the same name with `.wal` appended.
pub(crate) fn path_for(db: &Path) -> PathBuf {
    let mut path = db.as_os_str().to_owned();
    path.push(".wal");
    PathBuf::from(path)
}

pub(crate) struct Wal {
    path: PathBuf,
    file: File,
    /// Where the next record goes.
    position: u64,
    /// The nonce records are written with (the one the last checkpoint stored).
    nonce: u64,
    /// The file's length: zeros or records up to here.
    allocated: u64,
}

impl Wal {
    /// Opens the log (creating it, and filling a first [`CHUNK`] with zeros, if missing or
    /// short). The write position is 0 and the nonce unset until [`Wal::reset`].
    pub(crate) fn open(path: PathBuf) -> Result<Wal, Error> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|err| io_error(&path, "opening", err))?;
        let len = file
            .metadata()
            .map_err(|err| io_error(&path, "reading its size", err))?
            .len();
        let mut wal = Wal {
            path,
            file,
            position: 0,
            nonce: 0,
            allocated: len,
        };
        wal.grow_to(CHUNK)?;
        Ok(wal)
    }

    /// Fills the file with zeros up to `end` (rounded up to a [`CHUNK`], at most
    /// [`CAPACITY`]) if it is shorter, and syncs it and its directory entry.
    fn grow_to(&mut self, end: u64) -> Result<(), Error> {
        if end <= self.allocated {
            return Ok(());
        }
        let end = end.div_ceil(CHUNK).saturating_mul(CHUNK).min(CAPACITY);
        // Zeros, written (not a sparse hole), so later appends allocate nothing.
        let zeros = vec![0u8; CHUNK as usize];
        let mut at = self.allocated;
        while at < end {
            let n = (end - at).min(CHUNK) as usize;
            self.file
                .write_all_at(&zeros[..n], at)
                .map_err(|err| io_error(&self.path, "preallocating", err))?;
            at += n as u64;
        }
        self.file
            .sync_all()
            .map_err(|err| io_error(&self.path, "syncing", err))?;
        // A new file's directory entry must survive a crash too.
        if self.allocated == 0
            && let Some(dir) = self.path.parent().filter(|dir| !dir.as_os_str().is_empty())
            && let Ok(dir) = File::open(dir)
        {
            dir.sync_all()
                .map_err(|err| io_error(&self.path, "syncing its directory", err))?;
        }
        self.allocated = end;
        Ok(())
    }

    /// Every valid record written with `nonce`, from the start of the log, up to the first
    /// that does not check (a torn or stale one ends the log).
    pub(crate) fn read(&mut self, nonce: u64) -> Result<Vec<Vec<u8>>, Error> {
        let mut bytes = Vec::new();
        self.file
            .seek(SeekFrom::Start(0))
            .map_err(|err| io_error(&self.path, "seeking", err))?;
        (&self.file)
            .read_to_end(&mut bytes)
            .map_err(|err| io_error(&self.path, "reading", err))?;
        Ok(records(&bytes, nonce)
            .map(|body| body.to_vec())
            .collect::<Vec<_>>())
    }

    /// Starts the log over with `nonce` (which a durable redb commit has just stored).
    pub(crate) fn reset(&mut self, nonce: u64) {
        self.position = 0;
        self.nonce = nonce;
    }

    /// Bytes written since the last reset.
    pub(crate) fn position(&self) -> u64 {
        self.position
    }

    /// Whether a record of `body_len` bytes fits in what is left.
    pub(crate) fn fits(&self, body_len: usize) -> bool {
        self.position + (HEADER + body_len) as u64 <= CAPACITY
    }

    /// Appends one record and waits until it is on disk; returns where it starts (for
    /// [`Wal::erase`]). The caller checked [`Wal::fits`].
    pub(crate) fn append(&mut self, body: &[u8]) -> Result<u64, Error> {
        let len = u32::try_from(body.len())
            .ok()
            .filter(|_| self.fits(body.len()))
            .ok_or_else(|| Error::Backend("write-ahead log record too large".to_owned()))?;
        let mut record = Vec::with_capacity(HEADER + body.len());
        record.extend_from_slice(&MAGIC.to_le_bytes());
        record.extend_from_slice(&len.to_le_bytes());
        record.extend_from_slice(&checksum(self.nonce, body).to_le_bytes());
        record.extend_from_slice(&self.nonce.to_le_bytes());
        record.extend_from_slice(body);
        let at = self.position;
        self.grow_to(at + record.len() as u64)?;
        self.file
            .write_all_at(&record, at)
            .map_err(|err| io_error(&self.path, "appending", err))?;
        self.file
            .sync_data()
            .map_err(|err| io_error(&self.path, "syncing", err))?;
        self.position += record.len() as u64;
        Ok(at)
    }

    /// Undoes the append of the record at `at` (its group did not commit): overwrites its
    /// header with zeros, syncs, and writes the next record there.
    pub(crate) fn erase(&mut self, at: u64) -> Result<(), Error> {
        self.file
            .write_all_at(&[0u8; HEADER], at)
            .map_err(|err| io_error(&self.path, "erasing", err))?;
        self.file
            .sync_data()
            .map_err(|err| io_error(&self.path, "syncing", err))?;
        self.position = at;
        Ok(())
    }
}

fn checksum(nonce: u64, body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&nonce.to_le_bytes());
    hasher.update(body);
    hasher.finalize()
}

/// The bodies of the valid records at the start of `bytes`.
fn records(bytes: &[u8], nonce: u64) -> impl Iterator<Item = &[u8]> {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        let header = rest.get(..HEADER)?;
        let word = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(header.get(at..at + 4)?.try_into().ok()?))
        };
        if word(0)? != MAGIC {
            return None;
        }
        let len = word(4)? as usize;
        let crc = word(8)?;
        let record_nonce = u64::from_le_bytes(header.get(12..20)?.try_into().ok()?);
        let body = rest.get(HEADER..HEADER + len)?;
        if record_nonce != nonce || checksum(nonce, body) != crc {
            return None;
        }
        rest = &rest[HEADER + len..];
        Some(body)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log file holding `bodies`, appended with `nonce`.
    fn log_with(bodies: &[&[u8]], nonce: u64) -> Vec<u8> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.wal");
        let mut wal = Wal::open(path.clone()).expect("open");
        wal.reset(nonce);
        for body in bodies {
            wal.append(body).expect("append");
        }
        std::fs::read(&path).expect("read")
    }

    #[test]
    fn appended_records_read_back_in_order_with_their_nonce_only() {
        let bytes = log_with(&[b"one", b"two", b""], 7);
        assert_eq!(bytes.len() as u64, CHUNK);
        let read: Vec<&[u8]> = records(&bytes, 7).collect();
        assert_eq!(read, vec![&b"one"[..], b"two", b""]);
        assert_eq!(records(&bytes, 8).count(), 0);
    }

    #[test]
    fn the_file_grows_by_chunks_of_zeros_as_records_pass_its_end() {
        let large = vec![9u8; (CHUNK + CHUNK / 2) as usize];
        let bytes = log_with(&[b"small", &large, b"after"], 5);
        assert_eq!(bytes.len() as u64, 2 * CHUNK);
        let read: Vec<&[u8]> = records(&bytes, 5).collect();
        assert_eq!(read, vec![&b"small"[..], &large[..], b"after"]);
        assert!(
            bytes[3 * HEADER + 5 + large.len() + 5..]
                .iter()
                .all(|b| *b == 0)
        );
    }

    #[test]
    fn a_torn_or_flipped_record_ends_the_log() {
        let bytes = log_with(&[b"first", b"second record"], 1);
        let second_at = HEADER + 5;
        for cut in second_at..second_at + HEADER + 13 {
            let mut torn = bytes[..cut].to_vec();
            torn.resize(bytes.len(), 0);
            assert_eq!(records(&torn, 1).count(), 1, "cut at {cut}");
        }
        for flip in second_at..second_at + HEADER + 13 {
            let mut flipped = bytes.clone();
            flipped[flip] ^= 0x10;
            assert_eq!(records(&flipped, 1).count(), 1, "flip at {flip}");
        }
    }

    #[test]
    fn an_erased_record_is_not_read_and_the_next_takes_its_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.wal");
        let mut wal = Wal::open(path.clone()).expect("open");
        wal.reset(3);
        wal.append(b"kept").expect("append");
        let at = wal.append(b"a long record that failed").expect("append");
        wal.erase(at).expect("erase");
        assert_eq!(wal.read(3).expect("read"), vec![b"kept".to_vec()]);
        wal.append(b"next").expect("append");
        assert_eq!(
            wal.read(3).expect("read"),
            vec![b"kept".to_vec(), b"next".to_vec()]
        );
    }
}
