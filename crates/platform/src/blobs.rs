//! The blob store: large binary objects (configuration archives; later module tarballs) kept in
//! an `object_store` (a local directory, `<data-dir>/blobs` under `cairn`), never in the
//! key-value store.
//!
//! Where it sits: handlers stream request bodies in with [`BlobStore::put_stream`] and serve
//! blobs with [`BlobStore::open`] (downloads); the stored records under `platform/` name each
//! blob by its key. Nothing here knows HTTP beyond `Bytes` streams and a response body.
//!
//! Invariants:
//! - An upload is never held whole in memory: the body is streamed into a multipart upload in
//!   [`PART_SIZE`] parts with at most [`PARTS_IN_FLIGHT`] being written, so one upload buffers
//!   at most about 15 MiB whatever its size. The local store writes a staging file and renames
//!   it into place on completion (fsynced), so a key is either absent or complete.
//! - An upload larger than the limit is aborted as soon as the limit is crossed (its staging
//!   file removed) and answered [`BlobError::TooLarge`]; nothing is left behind.
//! - Every stored blob comes with its size and SHA-256, computed while streaming, so callers
//!   can answer an identical repeated upload without reading anything back.
//! - The directory is created on first use; a failure to create it is a server error reported
//!   at that use (and retried at the next), never a panic at start.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use aws_lc_rs::digest;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path as BlobPath;
use object_store::{GetResultPayload, ObjectStore, ObjectStoreExt, WriteMultipart};
use tokio::sync::OnceCell;

/// The default upper bound of one upload: 100 MiB.
pub(crate) const DEFAULT_MAX_UPLOAD_BYTES: u64 = 100 * 1024 * 1024;

/// The size of one multipart part (5 MiB is also the smallest part S3-style stores accept).
const PART_SIZE: usize = 5 * 1024 * 1024;

/// How many parts of one upload may be written concurrently before the body is back-pressured.
const PARTS_IN_FLIGHT: usize = 2;

/// The read buffer for downloads of local files.
const DOWNLOAD_CHUNK: usize = 64 * 1024;

/// Why a blob operation failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BlobError {
    /// The upload crossed the size limit; nothing was stored.
    #[error("the upload is larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    /// The request body could not be read (the client went away, bad chunked encoding).
    #[error("reading the upload failed: {0}")]
    Body(String),
    /// No blob directory was configured (`Config::blob_dir` is empty).
    #[error("no blob directory is configured")]
    NotConfigured,
    /// The blob directory could not be created or opened.
    #[error("blob directory {path}: {reason}")]
    Directory { path: PathBuf, reason: String },
    /// The object store failed.
    #[error("blob store: {0}")]
    Store(#[from] object_store::Error),
}

/// A blob that was just stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredBlob {
    pub(crate) key: String,
    pub(crate) size: u64,
    /// Lowercase hex SHA-256 of the content.
    pub(crate) sha256: String,
}

/// The content of a stored blob, ready to be read once.
pub(crate) enum BlobContent {
    /// A local file (the `fs` store hands out the open file itself).
    File(std::fs::File),
    /// Any other store: a stream of chunks.
    Stream(BoxStream<'static, object_store::Result<Bytes>>),
}

impl fmt::Debug for BlobContent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlobContent::File(_) => f.write_str("BlobContent::File"),
            BlobContent::Stream(_) => f.write_str("BlobContent::Stream"),
        }
    }
}

impl BlobContent {
    /// The content as an HTTP response body, streamed in chunks.
    pub(crate) fn into_body(self) -> axum::body::Body {
        match self {
            BlobContent::File(file) => {
                let file = tokio::fs::File::from_std(file);
                axum::body::Body::from_stream(tokio_util::io::ReaderStream::with_capacity(
                    file,
                    DOWNLOAD_CHUNK,
                ))
            }
            BlobContent::Stream(stream) => axum::body::Body::from_stream(stream),
        }
    }
}

/// The platform's blob store; cheap to share behind the platform state.
#[derive(Debug)]
pub(crate) struct BlobStore {
    dir: PathBuf,
    max_upload_bytes: u64,
    store: OnceCell<Arc<dyn ObjectStore>>,
}

impl BlobStore {
    /// A store rooted in `dir` (created on first use) refusing uploads over `max_upload_bytes`.
    pub(crate) fn new(dir: PathBuf, max_upload_bytes: u64) -> BlobStore {
        BlobStore {
            dir,
            max_upload_bytes,
            store: OnceCell::new(),
        }
    }

    /// The largest upload [`BlobStore::put_stream`] accepts, in bytes.
    pub(crate) fn max_upload_bytes(&self) -> u64 {
        self.max_upload_bytes
    }

    async fn store(&self) -> Result<&Arc<dyn ObjectStore>, BlobError> {
        self.store
            .get_or_try_init(|| async {
                if self.dir.as_os_str().is_empty() {
                    return Err(BlobError::NotConfigured);
                }
                let directory = |reason: String| BlobError::Directory {
                    path: self.dir.clone(),
                    reason,
                };
                tokio::fs::create_dir_all(&self.dir)
                    .await
                    .map_err(|err| directory(err.to_string()))?;
                let local = LocalFileSystem::new_with_prefix(&self.dir)
                    .map_err(|err| directory(err.to_string()))?
                    .with_fsync(true)
                    .with_automatic_cleanup(true);
                Ok(Arc::new(local) as Arc<dyn ObjectStore>)
            })
            .await
    }

    /// Streams `body` into the blob `key`, replacing any blob there, and returns its size and
    /// digest. Over the limit, or when the body fails, the partial upload is removed.
    pub(crate) async fn put_stream<S, E>(&self, key: &str, body: S) -> Result<StoredBlob, BlobError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send,
        E: fmt::Display,
    {
        let store = self.store().await?;
        let location = BlobPath::from(key);
        let upload = store.put_multipart(&location).await?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut hasher = digest::Context::new(&digest::SHA256);
        let mut size: u64 = 0;
        let mut body = std::pin::pin!(body);
        while let Some(chunk) = body.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(err) => {
                    abort(writer, key).await;
                    return Err(BlobError::Body(err.to_string()));
                }
            };
            size += chunk.len() as u64;
            if size > self.max_upload_bytes {
                abort(writer, key).await;
                return Err(BlobError::TooLarge {
                    limit: self.max_upload_bytes,
                });
            }
            hasher.update(&chunk);
            if let Err(err) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                abort(writer, key).await;
                return Err(err.into());
            }
            writer.put(chunk);
        }
        writer.finish().await?;
        Ok(StoredBlob {
            key: key.to_owned(),
            size,
            sha256: hex(hasher.finish().as_ref()),
        })
    }

    /// The content of blob `key`, or `None` when there is no such blob.
    pub(crate) async fn open(&self, key: &str) -> Result<Option<BlobContent>, BlobError> {
        let store = self.store().await?;
        match store.get(&BlobPath::from(key)).await {
            Ok(result) => Ok(Some(match result.payload {
                GetResultPayload::File(file, _) => BlobContent::File(file),
                GetResultPayload::Stream(stream) => BlobContent::Stream(stream),
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    /// Removes blob `key`; removing a missing blob succeeds.
    pub(crate) async fn delete(&self, key: &str) -> Result<(), BlobError> {
        let store = self.store().await?;
        match store.delete(&BlobPath::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    /// Removes every blob whose key starts with `prefix/` (for example all uploads of one
    /// configuration version, including those a crash left behind).
    pub(crate) async fn delete_prefix(&self, prefix: &str) -> Result<(), BlobError> {
        let store = self.store().await?;
        let keys: Vec<BlobPath> = store
            .list(Some(&BlobPath::from(prefix)))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await?;
        for key in keys {
            match store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(())
    }
}

/// `n` bytes for people: `104857600 bytes (100 MiB)`, or `1000 bytes` when not whole MiB.
pub(crate) fn describe_size(n: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{n} bytes ({} MiB)", n / MIB)
    } else {
        format!("{n} bytes")
    }
}

impl crate::State {
    /// The platform's blob store.
    pub(crate) fn blobs(&self) -> &BlobStore {
        &self.inner.blobs
    }
}

/// Aborts a multipart upload; a failure to clean up is logged, not returned (the caller is
/// already answering with the reason the upload stopped).
async fn abort(writer: WriteMultipart, key: &str) {
    if let Err(err) = writer.abort().await {
        tracing::warn!(message = "Aborting a blob upload failed.", key, error = %err);
    }
}

fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        })
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;

    fn chunks(parts: &[&[u8]]) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + use<> {
        let owned: Vec<Result<Bytes, Infallible>> = parts
            .iter()
            .map(|part| Ok(Bytes::copy_from_slice(part)))
            .collect();
        futures::stream::iter(owned)
    }

    async fn read_all(content: BlobContent) -> Vec<u8> {
        axum::body::to_bytes(content.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec()
    }

    #[tokio::test]
    async fn put_stream_stores_content_with_size_and_sha256() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().join("blobs"), 1024);
        let stored = blobs
            .put_stream("cv/one.tar.gz", chunks(&[b"hello ", b"world"]))
            .await
            .unwrap();
        assert_eq!(stored.size, 11);
        assert_eq!(
            stored.sha256,
            "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
        );
        let content = blobs.open("cv/one.tar.gz").await.unwrap().unwrap();
        assert_eq!(read_all(content).await, b"hello world");
    }

    #[tokio::test]
    async fn put_stream_over_limit_is_refused_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().to_path_buf(), 8);
        let err = blobs
            .put_stream("cv/big", chunks(&[b"12345", b"6789"]))
            .await
            .unwrap_err();
        assert!(matches!(err, BlobError::TooLarge { limit: 8 }), "{err:?}");
        assert!(blobs.open("cv/big").await.unwrap().is_none());
        let leftovers: Vec<_> = walk(dir.path());
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[tokio::test]
    async fn put_stream_exactly_at_limit_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().to_path_buf(), 8);
        let stored = blobs
            .put_stream("cv/edge", chunks(&[b"1234", b"5678"]))
            .await
            .unwrap();
        assert_eq!(stored.size, 8);
    }

    #[tokio::test]
    async fn put_stream_body_error_is_reported_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().to_path_buf(), 1024);
        let body = futures::stream::iter(vec![
            Ok(Bytes::from_static(b"part")),
            Err("connection reset"),
        ]);
        let err = blobs.put_stream("cv/cut", body).await.unwrap_err();
        assert!(
            matches!(err, BlobError::Body(ref m) if m == "connection reset"),
            "{err:?}"
        );
        assert!(walk(dir.path()).is_empty());
    }

    #[tokio::test]
    async fn put_stream_larger_than_a_part_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().to_path_buf(), 64 * 1024 * 1024);
        let block = vec![7u8; 1024 * 1024];
        let parts: Vec<&[u8]> = (0..12).map(|_| block.as_slice()).collect();
        let stored = blobs.put_stream("cv/large", chunks(&parts)).await.unwrap();
        assert_eq!(stored.size, 12 * 1024 * 1024);
        let content = blobs.open("cv/large").await.unwrap().unwrap();
        let back = read_all(content).await;
        assert_eq!(back.len(), 12 * 1024 * 1024);
        assert!(back.iter().all(|byte| *byte == 7));
    }

    #[tokio::test]
    async fn delete_and_delete_prefix_remove_blobs_and_tolerate_missing() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().to_path_buf(), 1024);
        for key in ["cv-1/a", "cv-1/b", "cv-2/a"] {
            blobs.put_stream(key, chunks(&[b"x"])).await.unwrap();
        }
        blobs.delete("cv-2/a").await.unwrap();
        blobs.delete("cv-2/a").await.unwrap();
        blobs.delete_prefix("cv-1").await.unwrap();
        blobs.delete_prefix("cv-9").await.unwrap();
        for key in ["cv-1/a", "cv-1/b", "cv-2/a"] {
            assert!(blobs.open(key).await.unwrap().is_none(), "{key}");
        }
    }

    #[test]
    fn describe_size_names_whole_mebibytes() {
        assert_eq!(
            describe_size(100 * 1024 * 1024),
            "104857600 bytes (100 MiB)"
        );
        assert_eq!(describe_size(1024), "1024 bytes");
    }

    #[tokio::test]
    async fn empty_directory_setting_is_a_clear_error() {
        let blobs = BlobStore::new(PathBuf::new(), 1024);
        let err = blobs.open("x").await.unwrap_err();
        assert!(matches!(err, BlobError::NotConfigured), "{err:?}");
    }

    fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(next) = stack.pop() {
            for entry in std::fs::read_dir(&next).unwrap().flatten() {
                if entry.path().is_dir() {
                    stack.push(entry.path());
                } else {
                    files.push(entry.path());
                }
            }
        }
        files
    }
}
