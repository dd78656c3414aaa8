//! The blob store: large binary objects (configuration archives and module tarballs) kept
//! outside the key-value store, in one of two places: a directory (`<data-dir>/blobs` under
//! `cairn` by default, or a directory every server shares) or an S3-compatible bucket
//! ([`S3Blobs`]; several servers over etcd need one of the two shared places, since a blob on
//! one server's disk is invisible to the others). Reads, deletes and listings go through
//! `object_store` for both; into a directory, uploads are written by [`BlobStore::put_stream`]
//! itself, which keeps the disk busy while the body still arrives; into a bucket, a body under
//! [`PART_SIZE`] is one PUT and a larger one a multipart upload of [`PART_SIZE`] parts.
//!
//! Where it sits: handlers stream request bodies in with [`BlobStore::put_stream`] and serve
//! blobs with [`BlobStore::open`] (downloads); the stored records under `platform/` name each
//! blob by its key. Nothing here knows HTTP beyond `Bytes` streams and a response body.
//!
//! Invariants:
//! - An upload is never held whole in memory: the body is copied into [`BLOCK_SIZE`] blocks
//!   that go to a writer thread through a queue of at most [`WRITE_QUEUE`] blocks (the body is
//!   back-pressured beyond that; a tap such as the archive check has its own bounded queue),
//!   and the writer appends each one to the blob's file. Blocks are recycled within an upload.
//! - Keys are fresh: [`BlobStore::put_stream`] creates its key's file and never writes over an
//!   existing one (in a bucket, callers' keys carry a fresh random id: S3 has no portable
//!   create-only PUT). When it returns `Ok`, the blob is complete and durable (its data synced, and
//!   every directory whose entries it changed: its own and any created for it); until then the
//!   file is partial and no record names the key (the caller writes the record afterwards).
//!   While the body streams, the writer syncs those directories and, every [`SYNC_STRIDE`]
//!   bytes, the data written so far, in the background (one sync at a time), so the disk
//!   writes during the upload and the final sync only flushes the tail.
//! - An upload larger than the limit, a failing body, or a request that goes away stops the
//!   writer, which removes the file (in a bucket: aborts the multipart upload, or never sends
//!   the single PUT); nothing is left behind under the key. In a bucket an upload holds at
//!   most [`PART_SIZE`] bytes plus [`PART_CONCURRENCY`] parts in flight in memory.
//! - Nothing is hashed on the upload path: callers that need to recognize a repeated upload
//!   compare blobs ([`BlobStore::same_content`]) or hash one ([`BlobStore::sha256`]) when the
//!   repeat happens, which is rare.
//! - The directory is created on first use; a failure to create it is a server error reported
//!   at that use (and retried at the next), never a panic at start. A bucket is not checked at
//!   start either: a missing bucket or bad credentials fail each use with a 500 naming them.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aws_lc_rs::digest;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as BlobPath;
use object_store::prefix::PrefixStore;
use object_store::{
    BackoffConfig, ClientOptions, GetResultPayload, ObjectStore, ObjectStoreExt, PutPayload,
    RetryConfig, WriteMultipart,
};
use tokio::sync::{OnceCell, mpsc};

/// The default upper bound of one upload: 100 MiB.
pub(crate) const DEFAULT_MAX_UPLOAD_BYTES: u64 = 100 * 1024 * 1024;

/// The size of the blocks an upload is copied into on its way to the writer (and a tap).
pub(crate) const BLOCK_SIZE: usize = 1024 * 1024;

/// How many blocks may wait for the writer thread before the body is back-pressured.
const WRITE_QUEUE: usize = 8;

/// How many bytes the writer appends between two background data syncs.
const SYNC_STRIDE: u64 = 8 * 1024 * 1024;

/// The read buffer for downloads of local files.
const DOWNLOAD_CHUNK: usize = 64 * 1024;

/// The read buffer for comparing and hashing stored blobs.
const READ_CHUNK: usize = 256 * 1024;

/// In a bucket: a body up to this size is one PUT, a larger one a multipart upload in parts of
/// this size (S3's smallest part but the last).
pub(crate) const PART_SIZE: usize = 5 * 1024 * 1024;

/// In a bucket: how many parts of one upload may be in flight at once.
const PART_CONCURRENCY: usize = 2;

/// An S3-compatible bucket that holds the platform's blobs (`cairn server`'s
/// `object_store "s3"` block).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct S3Blobs {
    pub bucket: String,
    /// `http(s)://host:port` of an S3-compatible service (MinIO, Ceph, moto); `None`: AWS.
    pub endpoint: Option<String>,
    /// Default `us-east-1`.
    pub region: Option<String>,
    /// With `secret_access_key`; `None`: the AWS_* environment or the instance's role.
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// Prepended to every key (`cairn/` keeps blobs under `cairn/...` in a shared bucket).
    pub prefix: String,
}

impl fmt::Debug for S3Blobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Blobs")
            .field("bucket", &self.bucket)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl S3Blobs {
    /// `s3://bucket/prefix`, for messages.
    pub fn describe(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix.trim_matches('/'))
    }

    fn build(&self) -> Result<Arc<dyn ObjectStore>, BlobError> {
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&self.bucket)
            .with_region(self.region.as_deref().unwrap_or("us-east-1"))
            // A few quick retries: a request waits on them, so an unreachable store fails
            // within seconds instead of the client's default three minutes.
            .with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: 3,
                retry_timeout: std::time::Duration::from_secs(15),
            });
        let mut allow_http = false;
        if let Some(endpoint) = &self.endpoint {
            allow_http = endpoint.starts_with("http://");
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(id) = &self.access_key_id {
            builder = builder.with_access_key_id(id);
        }
        if let Some(secret) = &self.secret_access_key {
            builder = builder.with_secret_access_key(secret);
        }
        let bucket = builder
            .with_client_options(
                ClientOptions::new()
                    .with_allow_http(allow_http)
                    .with_timeout(std::time::Duration::from_secs(60))
                    .with_connect_timeout(std::time::Duration::from_secs(5)),
            )
            .build()
            .map_err(BlobError::Store)?;
        let prefix = self.prefix.trim_matches('/');
        Ok(if prefix.is_empty() {
            Arc::new(bucket)
        } else {
            Arc::new(PrefixStore::new(bucket, prefix))
        })
    }
}

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
    /// Writing or reading a blob's file failed.
    #[error("blob file {path}: {reason}")]
    File { path: PathBuf, reason: String },
    /// The object store failed.
    #[error("blob store: {0}")]
    Store(#[from] object_store::Error),
}

impl BlobError {
    fn file(path: &Path) -> impl FnOnce(io::Error) -> BlobError + '_ {
        move |err| BlobError::File {
            path: path.to_path_buf(),
            reason: err.to_string(),
        }
    }
}

/// A blob that was just stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredBlob {
    pub(crate) key: String,
    pub(crate) size: u64,
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
    max_upload_bytes: u64,
    backend: Backend,
}

/// Where the blobs are.
#[derive(Debug)]
enum Backend {
    /// A directory (created on first use), written by this module's own writer thread.
    Dir {
        dir: PathBuf,
        store: OnceCell<Arc<LocalFileSystem>>,
    },
    /// An object store reached over the network (an S3-compatible bucket).
    Remote(Arc<dyn ObjectStore>),
}

/// A block of an upload's bytes, shared by the writer and a tap (the archive check). Dropping
/// the last holder of a block returns its buffer to the upload's pool, so an upload reuses a
/// few buffers instead of allocating (and page-faulting) fresh memory for every piece.
#[derive(Debug)]
pub(crate) struct Block {
    data: Option<Arc<Vec<u8>>>,
    pool: Arc<BlockPool>,
}

impl Block {
    pub(crate) fn bytes(&self) -> &[u8] {
        self.data.as_deref().map_or(&[], Vec::as_slice)
    }

    /// Another holder of the same bytes.
    fn share(&self) -> Block {
        Block {
            data: self.data.clone(),
            pool: Arc::clone(&self.pool),
        }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // `Arc::into_inner` hands the buffer to exactly one of the holders: the last.
        if let Some(buffer) = self.data.take().and_then(Arc::into_inner) {
            self.pool.put(buffer);
        }
    }
}

/// The free buffers of one upload.
#[derive(Debug, Default)]
struct BlockPool {
    free: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl BlockPool {
    fn take(&self) -> Vec<u8> {
        self.free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BLOCK_SIZE))
    }

    fn put(&self, mut buffer: Vec<u8>) {
        buffer.clear();
        self.free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(buffer);
    }
}

/// What the body side tells the writer thread.
#[derive(Debug)]
enum WriteCommand {
    Chunk(Block),
    /// The body ended: sync, publish, answer. (A queue closed without it means the upload
    /// stopped: the writer removes the file.)
    Finish,
}

impl BlobStore {
    /// A store rooted in `dir` (created on first use) refusing uploads over `max_upload_bytes`.
    pub(crate) fn new(dir: PathBuf, max_upload_bytes: u64) -> BlobStore {
        BlobStore {
            max_upload_bytes,
            backend: Backend::Dir {
                dir,
                store: OnceCell::new(),
            },
        }
    }

    /// A store in an S3-compatible bucket; an error only for a configuration the client
    /// refuses (a bad endpoint URL), never for an unreachable service.
    pub(crate) fn s3(bucket: &S3Blobs, max_upload_bytes: u64) -> Result<BlobStore, BlobError> {
        Ok(BlobStore {
            max_upload_bytes,
            backend: Backend::Remote(bucket.build()?),
        })
    }

    /// The largest upload [`BlobStore::put_stream`] accepts, in bytes.
    pub(crate) fn max_upload_bytes(&self) -> u64 {
        self.max_upload_bytes
    }

    /// The directory's store (created on first use); `None` for a remote store.
    async fn local(&self) -> Result<Option<&Arc<LocalFileSystem>>, BlobError> {
        let Backend::Dir { dir, store } = &self.backend else {
            return Ok(None);
        };
        store
            .get_or_try_init(|| async {
                if dir.as_os_str().is_empty() {
                    return Err(BlobError::NotConfigured);
                }
                let directory = |reason: String| BlobError::Directory {
                    path: dir.clone(),
                    reason,
                };
                tokio::fs::create_dir_all(dir)
                    .await
                    .map_err(|err| directory(err.to_string()))?;
                let local = LocalFileSystem::new_with_prefix(dir)
                    .map_err(|err| directory(err.to_string()))?
                    .with_fsync(true)
                    .with_automatic_cleanup(true);
                Ok(Arc::new(local))
            })
            .await
            .map(Some)
    }

    /// The object store behind either backend.
    async fn store(&self) -> Result<Arc<dyn ObjectStore>, BlobError> {
        match &self.backend {
            Backend::Remote(store) => Ok(Arc::clone(store)),
            Backend::Dir { .. } => {
                let local = self.local().await?.ok_or(BlobError::NotConfigured)?;
                Ok(Arc::clone(local) as Arc<dyn ObjectStore>)
            }
        }
    }

    /// The file that holds blob `key`; `None` in a remote store.
    async fn file_path(&self, key: &str) -> Result<Option<PathBuf>, BlobError> {
        match self.local().await? {
            Some(local) => Ok(Some(local.path_to_filesystem(&BlobPath::from(key))?)),
            None => Ok(None),
        }
    }

    /// Streams `body` into the new blob `key` and returns its size once the blob is durable.
    /// Over the limit, or when the body fails, the partial upload is removed. The body is
    /// copied into [`BLOCK_SIZE`] blocks (each body chunk is released at once, so the HTTP
    /// server reuses its buffer); `tap`, when given, receives every block too, in order (a tap
    /// that went away is skipped, the upload goes on).
    pub(crate) async fn put_stream<S, E>(
        &self,
        key: &str,
        body: S,
        tap: Option<&mpsc::Sender<Block>>,
    ) -> Result<StoredBlob, BlobError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send,
        E: fmt::Display,
    {
        let (commands, queue) = mpsc::channel(WRITE_QUEUE);
        let writer = match self.file_path(key).await? {
            Some(path) => tokio::task::spawn_blocking(move || write_blob(queue, &path)),
            // A task of its own: when this future is dropped midway, it still sees the queue
            // close and aborts the upload.
            None => tokio::spawn(write_remote(
                queue,
                self.store().await?,
                BlobPath::from(key),
            )),
        };
        let pool = Arc::new(BlockPool::default());
        let mut filling = pool.take();
        let mut size: u64 = 0;
        let mut body = std::pin::pin!(body);
        let streamed = 'body: loop {
            let chunk = match body.next().await {
                None => break Ok(()),
                Some(Ok(chunk)) => chunk,
                Some(Err(err)) => break Err(BlobError::Body(err.to_string())),
            };
            size += chunk.len() as u64;
            if size > self.max_upload_bytes {
                break Err(BlobError::TooLarge {
                    limit: self.max_upload_bytes,
                });
            }
            let mut rest: &[u8] = &chunk;
            while !rest.is_empty() {
                let n = (BLOCK_SIZE - filling.len()).min(rest.len());
                filling.extend_from_slice(&rest[..n]);
                rest = &rest[n..];
                if filling.len() == BLOCK_SIZE {
                    let full = std::mem::replace(&mut filling, pool.take());
                    if !send_block(full, &pool, &commands, tap).await {
                        // The writer stopped on an error; its answer below says which.
                        break 'body Ok(());
                    }
                }
            }
        };
        if streamed.is_ok()
            && (filling.is_empty() || send_block(filling, &pool, &commands, tap).await)
        {
            // A send error means the writer already stopped; its answer says why.
            let _ = commands.send(WriteCommand::Finish).await;
        }
        drop(commands);
        let written = writer.await.map_err(|err| BlobError::File {
            path: PathBuf::from(key),
            reason: format!("the writer thread failed: {err}"),
        })?;
        streamed?;
        written?;
        Ok(StoredBlob {
            key: key.to_owned(),
            size,
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

    /// The content of blob `key` as a file positioned at its start, or `None` when there is
    /// no such blob: the stored file itself in a directory, a private temporary copy of a
    /// remote blob otherwise (for readers that need to rewind, such as the module parser).
    pub(crate) async fn open_file(&self, key: &str) -> Result<Option<File>, BlobError> {
        let stream = match self.open(key).await? {
            None => return Ok(None),
            Some(BlobContent::File(file)) => return Ok(Some(file)),
            Some(BlobContent::Stream(stream)) => stream,
        };
        let spool =
            blocking(|| tempfile::tempfile().map_err(BlobError::file(Path::new("tmp")))).await?;
        let mut spool = tokio::fs::File::from_std(spool);
        let mut stream = stream;
        while let Some(chunk) = stream.try_next().await? {
            tokio::io::AsyncWriteExt::write_all(&mut spool, &chunk)
                .await
                .map_err(BlobError::file(Path::new(key)))?;
        }
        let mut spool = spool.into_std().await;
        io::Seek::rewind(&mut spool).map_err(BlobError::file(Path::new(key)))?;
        Ok(Some(spool))
    }

    /// Whether blobs `a` and `b` hold the same bytes (read back and compared; in a remote
    /// store, their sizes and then their SHA-256 digests).
    pub(crate) async fn same_content(&self, a: &str, b: &str) -> Result<bool, BlobError> {
        if let (Some(a), Some(b)) = (self.file_path(a).await?, self.file_path(b).await?) {
            return blocking(move || same_files(&a, &b)).await;
        }
        let store = self.store().await?;
        let (meta_a, meta_b) = (
            store.head(&BlobPath::from(a)).await?,
            store.head(&BlobPath::from(b)).await?,
        );
        if meta_a.size != meta_b.size {
            return Ok(false);
        }
        Ok(self.sha256(a).await? == self.sha256(b).await?)
    }

    /// The SHA-256 of blob `key`, lowercase hex (read back).
    pub(crate) async fn sha256(&self, key: &str) -> Result<String, BlobError> {
        let Some(path) = self.file_path(key).await? else {
            let store = self.store().await?;
            let mut stream = store.get(&BlobPath::from(key)).await?.into_stream();
            let mut context = digest::Context::new(&digest::SHA256);
            while let Some(chunk) = stream.try_next().await? {
                context.update(&chunk);
            }
            return Ok(stdx::hex::encode(context.finish().as_ref()));
        };
        blocking(move || {
            let mut file = File::open(&path).map_err(BlobError::file(&path))?;
            let mut context = digest::Context::new(&digest::SHA256);
            let mut buffer = vec![0; READ_CHUNK];
            loop {
                let n = file.read(&mut buffer).map_err(BlobError::file(&path))?;
                if n == 0 {
                    return Ok(stdx::hex::encode(context.finish().as_ref()));
                }
                context.update(&buffer[..n]);
            }
        })
        .await
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
    /// configuration version, including a partial one a crash left behind).
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

/// Hands a full block to the writer and to `tap`; `false` when the writer has stopped.
async fn send_block(
    buffer: Vec<u8>,
    pool: &Arc<BlockPool>,
    commands: &mpsc::Sender<WriteCommand>,
    tap: Option<&mpsc::Sender<Block>>,
) -> bool {
    let block = Block {
        data: Some(Arc::new(buffer)),
        pool: Arc::clone(pool),
    };
    if let Some(tap) = tap {
        // A tap that stopped early (a refused archive) no longer needs the bytes.
        let _ = tap.send(block.share()).await;
    }
    commands.send(WriteCommand::Chunk(block)).await.is_ok()
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, BlobError> + Send + 'static,
) -> Result<T, BlobError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| BlobError::File {
            path: PathBuf::new(),
            reason: format!("the blob task failed: {err}"),
        })?
}

/// The writer of one upload into a remote store: buffers blocks until [`PART_SIZE`] bytes
/// arrived, then switches to a multipart upload of [`PART_SIZE`] parts (at most
/// [`PART_CONCURRENCY`] in flight, which back-pressures the queue); at
/// [`WriteCommand::Finish`] completes it, or PUTs the buffered body whole when it stayed
/// small. A queue closed without `Finish`, or a failing part, aborts the multipart upload.
async fn write_remote(
    mut queue: mpsc::Receiver<WriteCommand>,
    store: Arc<dyn ObjectStore>,
    key: BlobPath,
) -> Result<(), BlobError> {
    let mut held: Vec<Block> = Vec::new();
    let mut held_bytes = 0;
    let mut upload: Option<WriteMultipart> = None;
    loop {
        match queue.recv().await {
            Some(WriteCommand::Chunk(block)) => match upload.as_mut() {
                Some(parts) => {
                    if let Err(err) = parts.wait_for_capacity(PART_CONCURRENCY).await {
                        if let Some(parts) = upload.take() {
                            let _ = parts.abort().await;
                        }
                        return Err(err.into());
                    }
                    parts.write(block.bytes());
                }
                None => {
                    held_bytes += block.bytes().len();
                    held.push(block);
                    if held_bytes >= PART_SIZE {
                        let mut parts = WriteMultipart::new_with_chunk_size(
                            store.put_multipart(&key).await?,
                            PART_SIZE,
                        );
                        for block in held.drain(..) {
                            parts.write(block.bytes());
                        }
                        upload = Some(parts);
                    }
                }
            },
            Some(WriteCommand::Finish) => {
                return match upload {
                    // `finish` aborts the upload itself when a part or the completion fails.
                    Some(parts) => parts.finish().await.map(|_| ()).map_err(Into::into),
                    None => {
                        let payload: PutPayload = held
                            .iter()
                            .map(|block| Bytes::copy_from_slice(block.bytes()))
                            .collect();
                        store
                            .put(&key, payload)
                            .await
                            .map(|_| ())
                            .map_err(Into::into)
                    }
                };
            }
            None => {
                if let Some(parts) = upload {
                    let _ = parts.abort().await;
                }
                return Err(BlobError::Body(
                    "the upload stopped before its end".to_owned(),
                ));
            }
        }
    }
}

/// The writer thread of one upload: creates the blob's file at `path`, appends the queued
/// chunks and syncs it at [`WriteCommand::Finish`]; on any failure, or when the queue closes
/// without `Finish`, removes the file.
fn write_blob(queue: mpsc::Receiver<WriteCommand>, path: &Path) -> Result<(), BlobError> {
    let mut created = false;
    let written = write_file(queue, path, &mut created);
    if written.is_err() && created {
        // Nothing may stay behind (a failure to remove is reported by the write's error).
        let _ = std::fs::remove_file(path);
    }
    written
}

fn write_file(
    mut queue: mpsc::Receiver<WriteCommand>,
    path: &Path,
    created: &mut bool,
) -> Result<(), BlobError> {
    let directory = path.parent().ok_or_else(|| BlobError::File {
        path: path.to_path_buf(),
        reason: "a blob path has a directory".to_owned(),
    })?;
    // Every directory whose entries change: the blob's, the ones created for it, and the
    // existing one they were created in (found before creating anything).
    let mut changed = vec![directory.to_path_buf()];
    while let Some(parent) = changed
        .last()
        .filter(|dir| !dir.exists())
        .and_then(|dir| dir.parent())
    {
        changed.push(parent.to_path_buf());
    }
    std::fs::create_dir_all(directory).map_err(BlobError::file(directory))?;
    // A fresh key: an existing file (another upload's) is never written over.
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(BlobError::file(path))?;
    *created = true;
    std::thread::scope(|scope| {
        // The directory entries are made durable while the body streams, not after it.
        let mut syncing = Some(scope.spawn(|| {
            changed
                .iter()
                .try_for_each(|dir| File::open(dir)?.sync_all())
        }));
        let mut unsynced: u64 = 0;
        loop {
            match queue.blocking_recv() {
                Some(WriteCommand::Chunk(block)) => {
                    file.write_all(block.bytes())
                        .map_err(BlobError::file(path))?;
                    unsynced += block.bytes().len() as u64;
                    drop(block);
                    if unsynced >= SYNC_STRIDE
                        && syncing.as_ref().is_none_or(|sync| sync.is_finished())
                    {
                        if let Some(done) = syncing.take() {
                            join_sync(done, path)?;
                        }
                        let handle = file.try_clone().map_err(BlobError::file(path))?;
                        syncing = Some(scope.spawn(move || handle.sync_data()));
                        unsynced = 0;
                    }
                }
                Some(WriteCommand::Finish) => break,
                None => {
                    return Err(BlobError::Body(
                        "the upload stopped before its end".to_owned(),
                    ));
                }
            }
        }
        match syncing {
            Some(last) => join_sync(last, path),
            None => Ok(()),
        }
    })?;
    // Content and size; the directory entries were synced above.
    file.sync_data().map_err(BlobError::file(path))
}

/// Waits for a background data sync and reports its failure.
fn join_sync(
    sync: std::thread::ScopedJoinHandle<'_, io::Result<()>>,
    path: &Path,
) -> Result<(), BlobError> {
    match sync.join() {
        Ok(synced) => synced.map_err(BlobError::file(path)),
        Err(_) => Err(BlobError::File {
            path: path.to_path_buf(),
            reason: "the sync thread panicked".to_owned(),
        }),
    }
}

/// Whether two files hold the same bytes.
fn same_files(a: &Path, b: &Path) -> Result<bool, BlobError> {
    let mut file_a = File::open(a).map_err(BlobError::file(a))?;
    let mut file_b = File::open(b).map_err(BlobError::file(b))?;
    let length = |file: &File, path: &Path| {
        file.metadata()
            .map(|m| m.len())
            .map_err(BlobError::file(path))
    };
    if length(&file_a, a)? != length(&file_b, b)? {
        return Ok(false);
    }
    let mut buffer_a = vec![0; READ_CHUNK];
    let mut buffer_b = vec![0; READ_CHUNK];
    loop {
        let n_a = read_full(&mut file_a, &mut buffer_a).map_err(BlobError::file(a))?;
        let n_b = read_full(&mut file_b, &mut buffer_b).map_err(BlobError::file(b))?;
        if n_a != n_b || buffer_a[..n_a] != buffer_b[..n_b] {
            return Ok(false);
        }
        if n_a == 0 {
            return Ok(true);
        }
    }
}

/// Reads until `buffer` is full or the file ends; the number of bytes read.
fn read_full(file: &mut File, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
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

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::io::Read;

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
    async fn put_stream_stores_content_with_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().join("blobs"), 1024);
        let stored = blobs
            .put_stream("cv/one.tar.gz", chunks(&[b"hello ", b"world"]), None)
            .await
            .unwrap();
        assert_eq!(stored.size, 11);
        let content = blobs.open("cv/one.tar.gz").await.unwrap().unwrap();
        assert_eq!(read_all(content).await, b"hello world");
        assert_eq!(walk(dir.path()).len(), 1);
    }

    #[tokio::test]
    async fn put_stream_tap_sees_every_byte_in_order_in_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().to_path_buf(), 64 * 1024 * 1024);
        let content: Vec<u8> = (0..(2 * BLOCK_SIZE + 12_345))
            .map(|index| (index % 251) as u8)
            .collect();
        let parts: Vec<&[u8]> = content.chunks(700 * 1024).collect();
        let (tap, mut tapped) = mpsc::channel(64);
        let stored = blobs
            .put_stream("cv/tapped", chunks(&parts), Some(&tap))
            .await
            .unwrap();
        drop(tap);
        let mut seen = Vec::new();
        let mut sizes = Vec::new();
        while let Some(block) = tapped.recv().await {
            sizes.push(block.bytes().len());
            seen.extend_from_slice(block.bytes());
        }
        assert_eq!(sizes, [BLOCK_SIZE, BLOCK_SIZE, 12_345]);
        assert_eq!(seen, content);
        assert_eq!(stored.size, content.len() as u64);
        let stored_bytes = read_all(blobs.open("cv/tapped").await.unwrap().unwrap()).await;
        assert_eq!(stored_bytes, content);
    }

    #[tokio::test]
    async fn sha256_and_same_content_read_stored_blobs_back() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().to_path_buf(), 1024);
        for (key, parts) in [
            ("cv/a", &[&b"hello "[..], b"world"][..]),
            ("cv/b", &[&b"hello world"[..]][..]),
            ("cv/c", &[&b"hello there"[..]][..]),
            ("cv/d", &[&b"hello"[..]][..]),
        ] {
            blobs.put_stream(key, chunks(parts), None).await.unwrap();
        }
        assert_eq!(
            blobs.sha256("cv/a").await.unwrap(),
            "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
        );
        assert!(blobs.same_content("cv/a", "cv/b").await.unwrap());
        assert!(!blobs.same_content("cv/a", "cv/c").await.unwrap());
        assert!(!blobs.same_content("cv/a", "cv/d").await.unwrap());
    }

    #[tokio::test]
    async fn put_stream_dropped_midway_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().to_path_buf(), 1024);
        // A body that yields one chunk and then never ends, like a client that stalls.
        let body = futures::stream::iter(vec![Ok::<_, Infallible>(Bytes::from_static(b"part"))])
            .chain(futures::stream::pending());
        let upload = blobs.put_stream("cv/stalled", body, None);
        let timed_out = tokio::time::timeout(std::time::Duration::from_millis(100), upload).await;
        assert!(timed_out.is_err());
        // The writer notices the closed queue and removes the partial file.
        for _ in 0..100 {
            if walk(dir.path()).is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(walk(dir.path()).is_empty(), "{:?}", walk(dir.path()));
        assert!(blobs.open("cv/stalled").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn put_stream_over_limit_is_refused_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().to_path_buf(), 8);
        let err = blobs
            .put_stream("cv/big", chunks(&[b"12345", b"6789"]), None)
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
            .put_stream("cv/edge", chunks(&[b"1234", b"5678"]), None)
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
        let err = blobs.put_stream("cv/cut", body, None).await.unwrap_err();
        assert!(
            matches!(err, BlobError::Body(ref m) if m == "connection reset"),
            "{err:?}"
        );
        assert!(walk(dir.path()).is_empty());
    }

    #[tokio::test]
    async fn put_stream_past_a_background_sync_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().to_path_buf(), 64 * 1024 * 1024);
        let block = vec![7u8; 1024 * 1024];
        // 12 MiB in chunks of 1 MiB: one background sync at 8 MiB, the tail at the end.
        let parts: Vec<&[u8]> = (0..12).map(|_| block.as_slice()).collect();
        let stored = blobs
            .put_stream("cv/large", chunks(&parts), None)
            .await
            .unwrap();
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
            blobs.put_stream(key, chunks(&[b"x"]), None).await.unwrap();
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

    /// A fresh bucket on the local S3 emulator (moto, `scripts/services`, 127.0.0.1:9020).
    async fn moto_bucket(prefix: &str) -> BlobStore {
        let bucket = format!("blobs-{}", crate::ids::new_id("t").to_lowercase());
        let created = reqwest::Client::new()
            .put(format!("http://127.0.0.1:9020/{bucket}"))
            .send()
            .await
            .expect("moto runs on 127.0.0.1:9020 (scripts/services)");
        assert!(created.status().is_success(), "{}", created.status());
        let config = S3Blobs {
            bucket,
            endpoint: Some("http://127.0.0.1:9020".to_owned()),
            region: Some("us-east-1".to_owned()),
            access_key_id: Some("testing".to_owned()),
            secret_access_key: Some("testing".to_owned()),
            prefix: prefix.to_owned(),
        };
        BlobStore::s3(&config, 16 * 1024 * 1024).unwrap()
    }

    #[tokio::test]
    async fn s3_blobs_round_trip_small_and_multipart_uploads() {
        let blobs = moto_bucket("cairn/").await;
        let stored = blobs
            .put_stream("cv/small.tar.gz", chunks(&[b"hello ", b"world"]), None)
            .await
            .unwrap();
        assert_eq!(stored.size, 11);
        let content = blobs.open("cv/small.tar.gz").await.unwrap().unwrap();
        assert!(matches!(content, BlobContent::Stream(_)), "{content:?}");
        assert_eq!(read_all(content).await, b"hello world");
        // Past PART_SIZE: a multipart upload of two full parts and a tail.
        let large: Vec<u8> = (0..(2 * PART_SIZE + 77_777))
            .map(|index| (index % 253) as u8)
            .collect();
        let parts: Vec<&[u8]> = large.chunks(300 * 1024).collect();
        let (tap, mut tapped) = mpsc::channel(64);
        let stored = blobs
            .put_stream("cv/large.tar.gz", chunks(&parts), Some(&tap))
            .await
            .unwrap();
        drop(tap);
        let mut seen = 0;
        while let Some(block) = tapped.recv().await {
            seen += block.bytes().len();
        }
        assert_eq!((stored.size, seen), (large.len() as u64, large.len()));
        let back = read_all(blobs.open("cv/large.tar.gz").await.unwrap().unwrap()).await;
        assert!(back == large, "the multipart blob reads back the same");
        let mut file = blobs.open_file("cv/large.tar.gz").await.unwrap().unwrap();
        let mut copied = Vec::new();
        file.read_to_end(&mut copied).unwrap();
        assert!(copied == large, "the spooled file holds the blob");
        assert!(blobs.open_file("cv/none").await.unwrap().is_none());
        assert!(blobs.open("cv/none").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn s3_blobs_hash_compare_and_delete_by_prefix() {
        let blobs = moto_bucket("").await;
        for (key, parts) in [
            ("cv-1/a", &[&b"hello "[..], b"world"][..]),
            ("cv-1/b", &[&b"hello world"[..]][..]),
            ("cv-2/c", &[&b"hello there"[..]][..]),
        ] {
            blobs.put_stream(key, chunks(parts), None).await.unwrap();
        }
        assert_eq!(
            blobs.sha256("cv-1/a").await.unwrap(),
            "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
        );
        assert!(blobs.same_content("cv-1/a", "cv-1/b").await.unwrap());
        assert!(!blobs.same_content("cv-1/a", "cv-2/c").await.unwrap());
        blobs.delete_prefix("cv-1").await.unwrap();
        blobs.delete("cv-2/c").await.unwrap();
        blobs.delete("cv-2/c").await.unwrap();
        for key in ["cv-1/a", "cv-1/b", "cv-2/c"] {
            assert!(blobs.open(key).await.unwrap().is_none(), "{key}");
        }
    }

    #[tokio::test]
    async fn s3_blobs_refused_or_broken_uploads_leave_nothing() {
        let blobs = moto_bucket("p").await;
        let body = futures::stream::iter(vec![
            Ok(Bytes::from(vec![1u8; PART_SIZE + 1024])),
            Err("connection reset"),
        ]);
        let err = blobs.put_stream("cv/cut", body, None).await.unwrap_err();
        assert!(matches!(err, BlobError::Body(_)), "{err:?}");
        let big = vec![0u8; 17 * 1024 * 1024];
        let err = blobs
            .put_stream("cv/big", chunks(&[&big]), None)
            .await
            .unwrap_err();
        assert!(matches!(err, BlobError::TooLarge { .. }), "{err:?}");
        for key in ["cv/cut", "cv/big"] {
            assert!(blobs.open(key).await.unwrap().is_none(), "{key}");
        }
    }

    #[tokio::test]
    async fn s3_blobs_unreachable_service_is_an_error_not_a_panic() {
        let config = S3Blobs {
            bucket: "nowhere".to_owned(),
            endpoint: Some("http://127.0.0.1:9".to_owned()),
            access_key_id: Some("a".to_owned()),
            secret_access_key: Some("b".to_owned()),
            ..S3Blobs::default()
        };
        let blobs = BlobStore::s3(&config, 1024).unwrap();
        let err = blobs.open("x").await.unwrap_err();
        assert!(matches!(err, BlobError::Store(_)), "{err:?}");
        assert!(
            !format!("{config:?}").contains("\"b\""),
            "the secret is redacted"
        );
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
