//! Checks that an uploaded configuration archive is a `.tar.gz` Terraform could unpack: gzip
//! (one or more members), then a tar stream, within entry-count and unpacked-size caps.
//!
//! Where it sits: `objects.rs` runs [`validate`] on a blocking thread over the chunks of an
//! upload while the same chunks are streamed into the blob store; a failure makes the
//! configuration version `errored` with [`ArchiveError::code`] as `error` and the Display as
//! `error-message`.
//!
//! Invariants:
//! - Pure and streaming: reads once, front to back, from the caller's buffers (a
//!   [`BufRead`]), holding one tar block, the decoder's window and one read buffer of
//!   [`READ_CHUNK`]; nothing is written anywhere.
//! - Bounded: stops with [`ArchiveError::TooManyEntries`] or [`ArchiveError::TooLarge`] as
//!   soon as a cap is crossed (a gzip bomb costs at most `max_unpacked_bytes` of decoding).
//! - The whole gzip stream is decoded, trailer included, so a truncated or corrupted archive
//!   is refused even when its tar entries happened to parse.
//! - Entry paths that are absolute or climb out with `..` are refused (they could escape the
//!   working directory of whatever later unpacks the archive).

use std::cell::Cell;
use std::io::{self, BufRead, Read};
use std::path::Component;
use std::rc::Rc;

use flate2::bufread::MultiGzDecoder;

/// Caps applied while reading an archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The most tar entries (files, directories, links) an archive may hold.
    pub(crate) max_entries: u64,
    /// The most bytes the gzip stream may decompress to.
    pub(crate) max_unpacked_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_entries: 100_000,
            max_unpacked_bytes: 1024 * 1024 * 1024,
        }
    }
}

/// What a valid archive holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) entries: u64,
    pub(crate) unpacked_bytes: u64,
}

/// Why an archive was refused. The Display is the `error-message` clients see.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ArchiveError {
    #[error("the archive is not gzip-compressed: upload a .tar.gz")]
    NotGzip,
    #[error("the archive's gzip data is corrupt or truncated: {0}")]
    CorruptGzip(String),
    #[error("the archive is not a tar archive: {0}")]
    NotTar(String),
    #[error("the archive holds more than {limit} entries")]
    TooManyEntries { limit: u64 },
    #[error("the archive unpacks to more than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("the archive has an entry with an unsafe path: {0:?}")]
    UnsafePath(String),
    #[error("reading the archive failed: {0}")]
    Read(String),
}

impl ArchiveError {
    /// The short machine-readable `error` attribute of an errored configuration version.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            ArchiveError::NotGzip => "archive_not_gzip",
            ArchiveError::CorruptGzip(_) => "archive_corrupt",
            ArchiveError::NotTar(_) => "archive_not_tar",
            ArchiveError::TooManyEntries { .. } => "archive_too_many_entries",
            ArchiveError::TooLarge { .. } => "archive_too_large",
            ArchiveError::UnsafePath(_) => "archive_unsafe_path",
            ArchiveError::Read(_) => "archive_unreadable",
        }
    }
}

/// The gzip magic bytes.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// How much decompressed data one read asks for.
const READ_CHUNK: usize = 64 * 1024;

/// Reads `input` to its end and says whether it is an acceptable `.tar.gz`.
pub(crate) fn validate(mut input: impl BufRead, limits: Limits) -> Result<Summary, ArchiveError> {
    // The magic bytes are read however the input is split, then handed to the decoder again.
    let mut magic = [0u8; 2];
    let mut n_magic = 0;
    while n_magic < magic.len() {
        match input.read(&mut magic[n_magic..]) {
            Ok(0) => return Err(ArchiveError::NotGzip),
            Ok(n) => n_magic += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(ArchiveError::Read(err.to_string())),
        }
    }
    if magic != GZIP_MAGIC {
        return Err(ArchiveError::NotGzip);
    }

    let outcome = Rc::new(Outcome::default());
    let decoded = Metered {
        inner: MultiGzDecoder::new((&magic[..]).chain(input)),
        outcome: Rc::clone(&outcome),
        limit: limits.max_unpacked_bytes,
    };
    let mut archive = tar::Archive::new(decoded);
    let mut entries: u64 = 0;
    let classify = |err: io::Error| outcome.classify(err, limits);
    let mut buffer = vec![0; READ_CHUNK];

    for entry in archive.entries().map_err(classify)? {
        let mut entry = entry.map_err(classify)?;
        entries += 1;
        if entries > limits.max_entries {
            return Err(ArchiveError::TooManyEntries {
                limit: limits.max_entries,
            });
        }
        let path = entry.path().map_err(classify)?;
        if path.components().any(|part| {
            matches!(
                part,
                Component::ParentDir | Component::RootDir | Component::Prefix(_)
            )
        }) {
            return Err(ArchiveError::UnsafePath(
                path.to_string_lossy().into_owned(),
            ));
        }
        skip(&mut entry, &mut buffer).map_err(classify)?;
    }
    // The tar end marker may come before the end of the gzip data: decode the rest so the
    // gzip trailer (CRC and length) is checked too.
    let mut rest = archive.into_inner();
    skip(&mut rest, &mut buffer).map_err(|err| outcome.classify(err, limits))?;

    let unpacked_bytes = outcome.bytes.get();
    if unpacked_bytes == 0 {
        return Err(ArchiveError::NotTar("the archive is empty".to_owned()));
    }
    Ok(Summary {
        entries,
        unpacked_bytes,
    })
}

/// Reads `reader` to its end through `buffer` (larger reads than `io::copy`'s, so fewer calls
/// into the decoder).
fn skip(reader: &mut impl Read, buffer: &mut [u8]) -> io::Result<()> {
    loop {
        match reader.read(buffer) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
}

/// What the decompressing reader saw, shared with the tar reader's error handling so that a
/// gzip failure surfacing through `tar` is reported as a gzip failure.
#[derive(Debug, Default)]
struct Outcome {
    bytes: Cell<u64>,
    gzip_error: Cell<bool>,
    over_limit: Cell<bool>,
}

impl Outcome {
    fn classify(&self, err: io::Error, limits: Limits) -> ArchiveError {
        if self.over_limit.get() {
            ArchiveError::TooLarge {
                limit: limits.max_unpacked_bytes,
            }
        } else if self.gzip_error.get() {
            ArchiveError::CorruptGzip(err.to_string())
        } else {
            ArchiveError::NotTar(err.to_string())
        }
    }
}

/// Counts decompressed bytes, fails past the limit, and records decoder errors.
struct Metered<R> {
    inner: R,
    outcome: Rc<Outcome>,
    limit: u64,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf).inspect_err(|_| {
            self.outcome.gzip_error.set(true);
        })?;
        let total = self.outcome.bytes.get() + n as u64;
        self.outcome.bytes.set(total);
        if total > self.limit {
            self.outcome.over_limit.set(true);
            return Err(io::Error::other("unpacked size limit exceeded"));
        }
        Ok(n)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;

    use flate2::Compression;
    use flate2::write::GzEncoder;

    use super::*;

    /// A `.tar.gz` holding `files` (path, content), as Terraform's tooling would pack it.
    pub(crate) fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
        gzip(&tar(files))
    }

    fn tar(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, content) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, path, *content).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn check(bytes: &[u8]) -> Result<Summary, ArchiveError> {
        validate(bytes, Limits::default())
    }

    #[test]
    fn valid_tar_gz_is_accepted_with_its_counts() {
        let archive = tar_gz(&[
            ("main.tf", b"resource \"null_resource\" \"x\" {}\n"),
            ("modules/a/main.tf", b""),
        ]);
        let summary = check(&archive).unwrap();
        assert_eq!(summary.entries, 2);
        assert!(summary.unpacked_bytes >= 3 * 512, "{summary:?}");
    }

    #[test]
    fn empty_tar_gz_is_accepted() {
        // `tar czf x.tar.gz -T /dev/null` writes only the end-of-archive blocks.
        let summary = check(&gzip(&[0u8; 1024])).unwrap();
        assert_eq!(summary.entries, 0);
    }

    #[test]
    fn plain_tar_is_not_gzip() {
        assert_eq!(
            check(&tar(&[("main.tf", b"x")])),
            Err(ArchiveError::NotGzip)
        );
    }

    #[test]
    fn empty_or_tiny_input_is_not_gzip() {
        assert_eq!(check(b""), Err(ArchiveError::NotGzip));
        assert_eq!(check(b"\x1f"), Err(ArchiveError::NotGzip));
        assert_eq!(check(b"hello world"), Err(ArchiveError::NotGzip));
    }

    #[test]
    fn archive_arriving_byte_by_byte_is_read_whole() {
        // The magic bytes may arrive split; the input is a chain of one-byte buffers.
        let archive = tar_gz(&[("main.tf", b"x")]);
        let bytes: Vec<&[u8]> = archive.chunks(1).collect();
        let input = bytes
            .iter()
            .fold(Box::new(io::empty()) as Box<dyn BufRead>, |acc, byte| {
                Box::new(acc.chain(*byte))
            });
        assert_eq!(validate(input, Limits::default()).unwrap().entries, 1);
    }

    #[test]
    fn gzip_of_text_is_not_tar() {
        let err = check(&gzip(b"just some text, not a tar archive")).unwrap_err();
        assert!(matches!(err, ArchiveError::NotTar(_)), "{err:?}");
        assert_eq!(err.code(), "archive_not_tar");
    }

    #[test]
    fn gzip_of_nothing_is_not_tar() {
        let err = check(&gzip(b"")).unwrap_err();
        assert!(matches!(err, ArchiveError::NotTar(_)), "{err:?}");
    }

    #[test]
    fn gzip_of_garbage_blocks_is_not_tar() {
        let err = check(&gzip(&[0x41; 4096])).unwrap_err();
        assert!(matches!(err, ArchiveError::NotTar(_)), "{err:?}");
    }

    #[test]
    fn truncated_gzip_is_corrupt() {
        let archive = tar_gz(&[("main.tf", &[b'x'; 20_000])]);
        let err = check(&archive[..archive.len() / 2]).unwrap_err();
        assert!(matches!(err, ArchiveError::CorruptGzip(_)), "{err:?}");
    }

    #[test]
    fn flipped_trailer_byte_is_corrupt() {
        let mut archive = tar_gz(&[("main.tf", b"x")]);
        let crc_at = archive.len() - 8;
        archive[crc_at] ^= 0xff;
        let err = check(&archive).unwrap_err();
        assert!(matches!(err, ArchiveError::CorruptGzip(_)), "{err:?}");
    }

    #[test]
    fn too_many_entries_is_refused() {
        let files: Vec<(String, &[u8])> = (0..5).map(|i| (format!("f{i}.tf"), &b""[..])).collect();
        let files: Vec<(&str, &[u8])> = files.iter().map(|(p, c)| (p.as_str(), *c)).collect();
        let limits = Limits {
            max_entries: 4,
            ..Limits::default()
        };
        assert_eq!(
            validate(tar_gz(&files).as_slice(), limits),
            Err(ArchiveError::TooManyEntries { limit: 4 })
        );
    }

    #[test]
    fn unpacked_size_over_cap_is_refused() {
        let archive = tar_gz(&[("big.bin", &vec![0u8; 1024 * 1024])]);
        let limits = Limits {
            max_unpacked_bytes: 64 * 1024,
            ..Limits::default()
        };
        assert_eq!(
            validate(archive.as_slice(), limits),
            Err(ArchiveError::TooLarge { limit: 64 * 1024 })
        );
    }

    #[test]
    fn parent_dir_entry_is_unsafe() {
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_mode(0o644);
        // `append_data` refuses `..`; write the raw name like a hostile tool would.
        header.as_gnu_mut().unwrap().name[..12].copy_from_slice(b"../escape.tf");
        header.set_cksum();
        let mut builder = tar::Builder::new(Vec::new());
        builder.append(&header, &b"x"[..]).unwrap();
        let archive = gzip(&builder.into_inner().unwrap());
        assert_eq!(
            check(&archive),
            Err(ArchiveError::UnsafePath("../escape.tf".to_owned()))
        );
    }

    #[test]
    fn concatenated_gzip_members_are_read_whole() {
        let body = tar(&[("main.tf", b"x")]);
        let (first, second) = body.split_at(700);
        let mut archive = gzip(first);
        archive.extend(gzip(second));
        assert_eq!(check(&archive).unwrap().entries, 1);
    }
}
