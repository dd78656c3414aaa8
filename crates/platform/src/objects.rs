//! The signed object URLs (`/_archivist/v1/object/<expires>.<signature>/…`): the PUT of a
//! configuration archive to its `upload-url`, and the GET a download redirect points at.
//!
//! Where it sits: unauthenticated routes in `routes.rs` (the upload and download group: no
//! bearer, no JSON:API content type, no body limit but the upload limit); the
//! signature is checked with `signed_url.rs`, the body streamed into `blobs.rs`, whose blocks
//! also go, at the same time, to the `archive.rs` check on a blocking thread (a bounded queue
//! of [`CHECK_QUEUE`] blocks, so checking overlaps storing and memory stays bounded); the
//! outcome is written to `store/configuration_versions.rs` (with an auto-queued run through
//! `run_queue.rs`) in one transaction.
//!
//! Invariants:
//! - Nothing is read from the request but the path, `Content-Length` and the body: headers
//!   clients carry over (`Authorization`, `Accept: application/vnd.api+json`) are ignored.
//! - An upload is streamed to a fresh blob key, never into the version's accepted blob, and
//!   the version record is switched to it by compare-and-swap: concurrent or repeated PUTs
//!   cannot mix their bytes, and a losing PUT deletes its own blob.
//! - The first accepted PUT decides: `pending` → `uploaded` (200) or `errored` with `error`
//!   and `error-message` (422 naming the reason). A later PUT of the same bytes gets the same
//!   answer; of other bytes, 409. An upload over the limit is 422 and changes nothing.
//! - The upload path hashes nothing: "the same bytes" is decided when a repeat happens, by
//!   comparing with the accepted archive's blob, or with the SHA-256 kept for an errored
//!   archive (computed from its blob before the blob is discarded).
//! - The transition to `uploaded` is synchronous and durable: the PUT answers after the blob
//!   is synced (`blobs.rs`) and the version's record committed (clients that create a run
//!   right after their upload never see `pending`).

use axum::body::Body as HttpBody;
use axum::extract::{Path, State as AxumState};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http::{HeaderMap, StatusCode, header};
use storage::{Compare, Txn};

use crate::archive::{self, ArchiveError};
use crate::blobs::{BlobError, Block};
use crate::configuration_versions::{download_object, upload_object};
use crate::run_queue::{RunOptions, queue_run};
use crate::signed_url::Access;
use crate::store::configuration_versions::{
    ConfigurationVersionRecord, CvStatus, UploadRecord, blob_prefix, cv_key, load_cv,
};
use crate::store::workspaces::{load_workspace, workspace_key};
use crate::store::{MAX_ATTEMPTS, commit, put};
use crate::{Error, State, ids};

/// After an over-limit upload, at most this many further body bytes are read and discarded
/// so the client gets the 422 instead of a reset connection.
const DRAIN_LIMIT: u64 = 1024 * 1024 * 1024;

/// `PUT /_archivist/v1/object/:signature/configuration-versions/:id`: the archive upload.
/// 200 when uploaded; 422 when over the size limit or not a .tar.gz (the version is then
/// `errored`); 409 when another archive was accepted before; 404 for a bad or expired URL.
pub(crate) async fn upload_configuration_archive(
    AxumState(state): AxumState<State>,
    Path((signature, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: HttpBody,
) -> Result<Response, Error> {
    let signer = state.signer().await?;
    signer
        .verify(
            Access::Upload,
            &upload_object(&id),
            &signature,
            state.now_secs(),
        )
        .map_err(|_| Error::NotFound)?;
    let cv = load_cv(state.storage(), &id)
        .await?
        .ok_or(Error::NotFound)?;
    let mut stream = body.into_data_stream();
    if cv.record.status == CvStatus::Archived {
        drain(&mut stream).await;
        return Err(Error::Conflict(
            "the configuration version is archived".to_owned(),
        ));
    }
    let limit = state.blobs().max_upload_bytes();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        drain(&mut stream).await;
        return Err(Error::ArchiveTooLarge { limit });
    }

    let started_at = state.now_ms();
    let blob_key = format!("{}/{}.tar.gz", blob_prefix(&id), ids::new_id("upload"));
    // The archive check reads the same blocks on a blocking thread while they are written,
    // so checking overlaps storing instead of following it.
    let (blocks, check) = start_check();
    let stored = state
        .blobs()
        .put_stream(&blob_key, &mut stream, Some(&blocks))
        .await;
    // The end of the input for the check (it may still be reading the last blocks).
    drop(blocks);
    let verdict = check
        .await
        .map_err(|err| Error::Internal(format!("the archive check failed: {err}")));
    let stored = match stored {
        Ok(stored) => stored,
        Err(BlobError::TooLarge { limit }) => {
            drain(&mut stream).await;
            return Err(Error::ArchiveTooLarge { limit });
        }
        Err(BlobError::Body(reason)) => {
            return Err(Error::Rejected(http_kit::Rejection::BodyReadFailed(reason)));
        }
        Err(other) => return Err(Error::Internal(other.to_string())),
    };
    let verdict = match verdict {
        Ok(verdict) => verdict,
        Err(err) => {
            discard(&state, &blob_key).await;
            return Err(err);
        }
    };
    // An errored archive's blob is discarded, so its digest is kept to recognize a repeat of
    // it (an accepted archive is compared with its blob instead).
    let digest = match &verdict {
        Ok(_) => None,
        Err(_) => match state.blobs().sha256(&stored.key).await {
            Ok(digest) => Some(digest),
            Err(err) => {
                discard(&state, &blob_key).await;
                return Err(Error::Internal(err.to_string()));
            }
        },
    };
    let outcome = record_upload(&state, &id, started_at, &stored, digest, &verdict).await;
    let keep_blob = matches!(outcome, Ok(Recorded::Accepted)) && verdict.is_ok();
    if !keep_blob {
        discard(&state, &blob_key).await;
    }
    match outcome? {
        Recorded::Accepted => answer(&verdict.map(|_| ()).map_err(|err| err.to_string())),
        Recorded::Repeat(answer_of_first) => answer(&answer_of_first),
    }
}

/// Reads and discards what is left of a refused body, up to [`DRAIN_LIMIT`].
async fn drain<S, E>(stream: &mut S)
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
{
    let mut drained: u64 = 0;
    while let Some(Ok(chunk)) = stream.next().await {
        drained += chunk.len() as u64;
        if drained > DRAIN_LIMIT {
            break;
        }
    }
}

async fn discard(state: &State, blob_key: &str) {
    if let Err(err) = state.blobs().delete(blob_key).await {
        tracing::warn!(message = "Deleting an unused upload failed.", key = blob_key, error = %err);
    }
}

/// How many blocks ([`crate::blobs::BLOCK_SIZE`]) may wait for the archive check.
const CHECK_QUEUE: usize = 8;

/// Starts the archive check on a blocking thread: send it the body's blocks, drop the sender
/// at the end of the body, and await its verdict.
fn start_check() -> (
    tokio::sync::mpsc::Sender<Block>,
    tokio::task::JoinHandle<Result<archive::Summary, ArchiveError>>,
) {
    let (sender, receiver) = tokio::sync::mpsc::channel(CHECK_QUEUE);
    let check = tokio::task::spawn_blocking(move || {
        archive::validate(
            BlockReader {
                receiver,
                current: None,
                offset: 0,
            },
            archive::Limits::default(),
        )
    });
    (sender, check)
}

/// A blocking reader over blocks sent from the async side; end of input when every sender is
/// gone. It lends each block out as its buffer ([`std::io::BufRead`]), so the check reads the
/// body without copying it first, and drops a block as soon as it is read.
struct BlockReader {
    receiver: tokio::sync::mpsc::Receiver<Block>,
    current: Option<Block>,
    /// How much of `current` was consumed.
    offset: usize,
}

impl std::io::Read for BlockReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let available = std::io::BufRead::fill_buf(self)?;
        let n = buf.len().min(available.len());
        buf[..n].copy_from_slice(&available[..n]);
        std::io::BufRead::consume(self, n);
        Ok(n)
    }
}

impl std::io::BufRead for BlockReader {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self
            .current
            .as_ref()
            .is_none_or(|block| self.offset >= block.bytes().len())
        {
            self.offset = 0;
            // Dropping the read block returns its buffer (when the writer is done with it too).
            self.current = self.receiver.blocking_recv();
            if self.current.is_none() {
                break;
            }
        }
        Ok(self
            .current
            .as_ref()
            .map_or(&[], |block| &block.bytes()[self.offset..]))
    }

    fn consume(&mut self, amount: usize) {
        self.offset += amount;
    }
}

/// The answer to an upload: 200, or the 422 naming why the archive was refused.
fn answer(outcome: &Result<(), String>) -> Result<Response, Error> {
    match outcome {
        Ok(()) => Ok(StatusCode::OK.into_response()),
        Err(message) => Err(Error::InvalidArchive(message.clone())),
    }
}

/// What recording an upload did.
#[derive(Debug)]
enum Recorded {
    /// This upload was the first: the version is now `uploaded` or `errored`.
    Accepted,
    /// An identical upload was recorded before; its outcome (`Err` holds its error message).
    Repeat(Result<(), String>),
}

/// Moves version `id` out of `pending` with this upload's outcome, queueing a run when the
/// version asks for one; or, when an upload was recorded first, compares with it. `digest` is
/// the SHA-256 of an errored upload.
async fn record_upload(
    state: &State,
    id: &str,
    started_at: u64,
    stored: &crate::blobs::StoredBlob,
    digest: Option<String>,
    verdict: &Result<archive::Summary, ArchiveError>,
) -> Result<Recorded, Error> {
    for _ in 0..MAX_ATTEMPTS {
        let cv = load_cv(state.storage(), id).await?.ok_or(Error::NotFound)?;
        if let Some(previous) = &cv.record.upload {
            return repeat(state, &cv.record, previous, stored, digest.as_deref()).await;
        }
        if cv.record.status == CvStatus::Archived {
            return Err(Error::Conflict(
                "the configuration version is archived".to_owned(),
            ));
        }
        let workspace = load_workspace(state.storage(), &cv.record.workspace_id)
            .await?
            .ok_or(Error::NotFound)?;
        let finished_at = state.now_ms();
        let mut next = cv.record.clone();
        next.status_timestamps
            .insert("started-at".to_owned(), started_at);
        next.status_timestamps
            .insert("finished-at".to_owned(), finished_at);
        next.upload = Some(UploadRecord {
            sha256: digest.clone(),
            size: stored.size,
            blob_key: verdict.is_ok().then(|| stored.key.clone()),
        });
        let mut workspace_after = workspace.record.clone();
        let mut run_ops = Vec::new();
        match verdict {
            Ok(_) => {
                next.status = CvStatus::Uploaded;
                next.status_timestamps
                    .insert("uploaded-at".to_owned(), finished_at);
                if !next.speculative && !next.provisional {
                    workspace_after.current_configuration_version_id = Some(id.to_owned());
                }
                if next.auto_queue_runs {
                    let (_, ops) = queue_run(
                        &mut workspace_after,
                        &next,
                        RunOptions::auto_queued(),
                        None,
                        state.now_ms(),
                    )?;
                    run_ops = ops;
                }
            }
            Err(err) => {
                next.status = CvStatus::Errored;
                next.status_timestamps
                    .insert("errored-at".to_owned(), finished_at);
                next.error = Some(err.code().to_owned());
                next.error_message = Some(err.to_string());
            }
        }
        let mut txn = Txn::new()
            .when(Compare::ModRevision(cv_key(id), cv.revision))
            .when(Compare::ModRevision(
                workspace_key(&workspace.record.id),
                workspace.revision,
            ))
            .then(put(cv_key(id), &next)?);
        if workspace_after != workspace.record {
            workspace_after.updated_at_ms = finished_at;
            txn = txn.then(put(workspace_key(&workspace_after.id), &workspace_after)?);
        }
        txn.success.extend(run_ops);
        if commit(state.storage(), txn).await? {
            return Ok(Recorded::Accepted);
        }
    }
    Err(Error::Contention)
}

/// The answer to a PUT after an upload was recorded: the same outcome for the same bytes,
/// 409 for others. Same bytes: the same size and, for an accepted archive, the same content as
/// its blob, for an errored one the same SHA-256 (`digest`, this upload's when it errored
/// too; an accepted upload cannot match an errored one, the check being deterministic).
async fn repeat(
    state: &State,
    cv: &ConfigurationVersionRecord,
    previous: &UploadRecord,
    stored: &crate::blobs::StoredBlob,
    digest: Option<&str>,
) -> Result<Recorded, Error> {
    let read_failed = |err: crate::blobs::BlobError| Error::Internal(err.to_string());
    let same = previous.size == stored.size
        && match (&previous.blob_key, &previous.sha256, digest) {
            (Some(previous_key), _, _) => state
                .blobs()
                .same_content(previous_key, &stored.key)
                .await
                .map_err(read_failed)?,
            (None, Some(previous_digest), Some(digest)) => previous_digest == digest,
            (None, _, _) => false,
        };
    if !same {
        return Err(Error::Conflict(
            "a different archive was already uploaded to this configuration version; create a new one"
                .to_owned(),
        ));
    }
    Ok(Recorded::Repeat(match cv.status {
        CvStatus::Errored => Err(cv.error_message.clone().unwrap_or_default()),
        _ => Ok(()),
    }))
}

/// `GET /_archivist/v1/object/:signature/configuration-versions/:file` (`cv-….tar.gz`): the
/// archive bytes as `application/octet-stream`; 404 for a bad or expired URL or a version
/// that is no longer `uploaded`.
pub(crate) async fn download_configuration_archive(
    AxumState(state): AxumState<State>,
    Path((signature, file)): Path<(String, String)>,
) -> Result<Response, Error> {
    let id = file.strip_suffix(".tar.gz").ok_or(Error::NotFound)?;
    let signer = state.signer().await?;
    signer
        .verify(
            Access::Download,
            &download_object(id),
            &signature,
            state.now_secs(),
        )
        .map_err(|_| Error::NotFound)?;
    let cv = load_cv(state.storage(), id).await?.ok_or(Error::NotFound)?;
    let upload = cv
        .record
        .upload
        .as_ref()
        .filter(|_| cv.record.status == CvStatus::Uploaded);
    let (Some(upload), Some(key)) = (upload, upload.and_then(|u| u.blob_key.as_deref())) else {
        return Err(Error::NotFound);
    };
    let content = state
        .blobs()
        .open(key)
        .await
        .map_err(|err| Error::Internal(err.to_string()))?
        .ok_or(Error::NotFound)?;
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, upload.size.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{id}.tar.gz\""),
            ),
        ],
        content.into_body(),
    )
        .into_response())
}
