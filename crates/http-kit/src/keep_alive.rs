//! What happens to a request body the handler did not read, so that an HTTP/1.1 keep-alive
//! connection is never dropped behind the client's back (docs/compat.md, "Unread request
//! bodies"). [`serve`](crate::serve) runs every request through [`respond`] and every
//! connection's socket through [`Lingering`].
//!
//! hyper on its own, when a handler answers without reading the body, writes the answer as
//! keep-alive and then, finding the body unread, reads at most what it already has buffered
//! and closes the connection: the client, told it could reuse the connection, sends its next
//! request into a closing socket (and may even get a reset before reading the answer). Go's
//! net/http instead discards up to 256 KiB of unread body after the handler and keeps the
//! connection; past that it answers `Connection: close`, shuts its write side and lingers so
//! that the client reads the answer rather than a reset. This module does what Go does:
//!
//! 1. [`respond`] hands the router a [`TrackedBody`] instead of the request body. When the
//!    handler drops it unfinished, the real body comes back to [`respond`] (an [`Unread`]).
//! 2. After the router answered and before the answer goes to hyper, [`Unread::settle`]
//!    discards the rest: at most [`MAX_DISCARD`] bytes within [`DISCARD_TIMEOUT`]. Fully read,
//!    the connection stays open (hyper's reader is then at the start of the next request).
//!    Otherwise the answer gets `Connection: close` and the connection is marked to linger.
//! 3. hyper then finishes the answer and shuts the connection down; [`Lingering`] turns that
//!    shutdown into "write side first, then read and discard until the client closes or
//!    [`LINGER_TIMEOUT`] passes", so the client reads the answer before the socket closes.
//!
//! Invariants:
//! - An answer without `Connection: close` is never followed by the server closing the
//!   connection because of the request's body (when the handler let the body go before it
//!   answered, which every body-reading extractor and every non-reading handler does).
//! - Requests without a body and HTTP/2 requests pass through untouched (no allocation).
//! - A body is never read more than [`MAX_DISCARD`] past what the handler read, never for
//!   longer than [`DISCARD_TIMEOUT`], and never when the client waits for `100 Continue`.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode, Version, header};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;
use tower::Service;

/// The most unread request body discarded to keep a connection (Go's `maxPostHandlerReadBytes`,
/// "approximately what a typical machine's TCP buffer size is anyway").
pub(crate) const MAX_DISCARD: u64 = 256 * 1024;

/// How long discarding an unread body may take before the connection is given up instead.
pub(crate) const DISCARD_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a connection closed over an unread body keeps reading after its write side is shut
/// (Go's `rstAvoidanceDelay`).
pub(crate) const LINGER_TIMEOUT: Duration = Duration::from_millis(500);

/// Runs `request` through `router`, then settles whatever the handler left of its body: the
/// answer is unchanged when the connection can be kept, or carries `Connection: close` (and
/// `linger` is set) when it cannot.
pub(crate) async fn respond<B>(mut router: Router, request: Request<B>, linger: &Linger) -> Response
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<axum::BoxError>,
{
    if request.version() >= Version::HTTP_2 || request.body().is_end_stream() {
        return answer(&mut router, request.map(Body::new)).await;
    }
    // Discarding a body the client only sends after `100 Continue` would make hyper ask for
    // it; Go closes such a connection instead, and so does a client's own `Connection: close`.
    let may_discard = !expects_continue(request.headers()) && !wants_close(request.headers());
    let (parts, body) = request.into_parts();
    let (tracked, unread) = track(body);
    let mut response = answer(&mut router, Request::from_parts(parts, Body::new(tracked))).await;
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        return response;
    }
    if !unread.settle(may_discard).await {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        linger.request();
    }
    response
}

async fn answer(router: &mut Router, request: Request<Body>) -> Response {
    match router.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(header::EXPECT)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

fn wants_close(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("close"))
}

/// Wraps `body` for the handler; the [`Unread`] gets it back if the handler drops it early.
pub(crate) fn track<B: http_body::Body>(body: B) -> (TrackedBody<B>, Unread<B>) {
    let slot = Arc::new(Mutex::new(Leftover::Nothing));
    let tracked = TrackedBody {
        inner: Some(body),
        slot: Arc::clone(&slot),
    };
    (tracked, Unread { slot })
}

/// What the handler left of the body when it let go of it.
#[derive(Debug)]
enum Leftover<B> {
    /// Read to the end, or not let go of yet.
    Nothing,
    /// Dropped before its end.
    Unread(B),
    /// Reading it failed (a broken chunked encoding, a client gone): the connection is done.
    Failed,
}

/// The request body as the handler sees it: the real one, handed back on an early drop.
#[derive(Debug)]
pub(crate) struct TrackedBody<B: http_body::Body> {
    /// `None` once the body ended or failed.
    inner: Option<B>,
    slot: Arc<Mutex<Leftover<B>>>,
}

impl<B: http_body::Body> TrackedBody<B> {
    fn leave(&mut self, leftover: Leftover<B>) {
        self.inner = None;
        *self
            .slot
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = leftover;
    }
}

impl<B> http_body::Body for TrackedBody<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = ready!(Pin::new(inner).poll_frame(cx));
        match &frame {
            None => self.inner = None,
            Some(Err(_)) => self.leave(Leftover::Failed),
            Some(Ok(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(B::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), B::size_hint)
    }
}

impl<B: http_body::Body> Drop for TrackedBody<B> {
    fn drop(&mut self) {
        if let Some(body) = self.inner.take() {
            // A body at its end needs nothing: hyper's reader is already past it.
            let leftover = if body.is_end_stream() {
                Leftover::Nothing
            } else {
                Leftover::Unread(body)
            };
            *self
                .slot
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()) = leftover;
        }
    }
}

/// The other end of a [`TrackedBody`]: what the handler left unread.
#[derive(Debug)]
pub(crate) struct Unread<B> {
    slot: Arc<Mutex<Leftover<B>>>,
}

impl<B> Unread<B>
where
    B: http_body::Body + Unpin,
{
    /// Discards what is left of the body (when `may_discard`) and says whether the connection
    /// can be kept: true when the handler read the body, still holds it, or left at most
    /// [`MAX_DISCARD`] bytes that arrived within [`DISCARD_TIMEOUT`].
    pub(crate) async fn settle(self, may_discard: bool) -> bool {
        let leftover = std::mem::replace(
            &mut *self
                .slot
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()),
            Leftover::Nothing,
        );
        let body = match leftover {
            Leftover::Nothing => return true,
            Leftover::Failed => return false,
            Leftover::Unread(body) => body,
        };
        if body.is_end_stream() {
            return true;
        }
        if !may_discard || body.size_hint().lower() >= MAX_DISCARD {
            return false;
        }
        tokio::time::timeout(DISCARD_TIMEOUT, discard(body))
            .await
            .unwrap_or(false)
    }
}

/// Reads `body` to its end if that takes at most [`MAX_DISCARD`] bytes.
async fn discard<B>(mut body: B) -> bool
where
    B: http_body::Body + Unpin,
{
    let mut discarded = 0u64;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return false;
        };
        if let Some(data) = frame.data_ref() {
            discarded += bytes::Buf::remaining(data) as u64;
            if discarded > MAX_DISCARD {
                return false;
            }
        }
    }
    true
}

/// A connection's "close gracefully" mark, set by [`respond`] and read by [`Lingering`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Linger(Arc<AtomicBool>);

impl Linger {
    pub(crate) fn request(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn requested(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A connection's socket (plain or TLS) whose shutdown, once [`Linger`] is set, shuts the write
/// side and then reads and discards until the client closes, reading fails, or
/// [`LINGER_TIMEOUT`] passes. Without the mark, shutdown is the socket's own.
#[derive(Debug)]
pub(crate) struct Lingering<S> {
    io: S,
    linger: Linger,
    write_shut: bool,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<S> Lingering<S> {
    pub(crate) fn new(io: S, linger: Linger) -> Lingering<S> {
        Lingering {
            io,
            linger,
            write_shut: false,
            deadline: None,
        }
    }
}

impl<S: AsyncRead + Unpin> Lingering<S> {
    /// Ready once the client closed, reading failed, or the linger time is over.
    fn poll_linger(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(LINGER_TIMEOUT)));
        if deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        let mut scratch = [0u8; 8 * 1024];
        loop {
            let mut buf = ReadBuf::new(&mut scratch);
            match ready!(Pin::new(&mut self.io).poll_read(cx, &mut buf)) {
                Ok(()) if buf.filled().is_empty() => return Poll::Ready(()),
                Ok(()) => continue,
                Err(_) => return Poll::Ready(()),
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Lingering<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Lingering<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.write_shut {
            ready!(Pin::new(&mut this.io).poll_shutdown(cx))?;
            this.write_shut = true;
        }
        if this.linger.requested() {
            ready!(this.poll_linger(cx));
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use axum::routing::post;
    use futures::StreamExt;
    use futures::stream::{self, BoxStream};
    use http_body_util::StreamBody;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const KIB: usize = 1024;

    /// A body of unknown length (like a chunked one) that counts the chunks taken from it.
    type Chunks = StreamBody<BoxStream<'static, Result<Frame<Bytes>, io::Error>>>;

    fn chunks(sizes: &[usize], taken: &Arc<AtomicUsize>) -> Chunks {
        let taken = Arc::clone(taken);
        let frames: Vec<_> = sizes
            .iter()
            .map(|size| Ok(Frame::data(Bytes::from(vec![b'x'; *size]))))
            .collect();
        StreamBody::new(
            stream::iter(frames)
                .inspect(move |_| {
                    taken.fetch_add(1, Ordering::Relaxed);
                })
                .boxed(),
        )
    }

    /// One chunk, then nothing ever again (a client that stopped sending).
    fn stalled() -> Chunks {
        let first = stream::iter([Ok(Frame::data(Bytes::from_static(b"x")))]);
        StreamBody::new(first.chain(stream::pending()).boxed())
    }

    /// A body that fails on its first read (a broken chunked encoding).
    fn broken() -> Chunks {
        StreamBody::new(stream::iter([Err(io::Error::other("bad chunk"))]).boxed())
    }

    /// A body of announced length (like one with `Content-Length`) that records being read.
    #[derive(Debug)]
    struct Announced {
        left: u64,
        read: Arc<AtomicBool>,
    }

    impl http_body::Body for Announced {
        type Data = Bytes;
        type Error = io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
            self.read.store(true, Ordering::Relaxed);
            let size = self.left.min(16 * KIB as u64);
            if size == 0 {
                return Poll::Ready(None);
            }
            self.left -= size;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![
                b'x';
                size as usize
            ])))))
        }

        fn size_hint(&self) -> SizeHint {
            SizeHint::with_exact(self.left)
        }
    }

    fn announced(size: usize) -> (Announced, Arc<AtomicBool>) {
        let read = Arc::new(AtomicBool::new(false));
        let body = Announced {
            left: size as u64,
            read: Arc::clone(&read),
        };
        (body, read)
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_leaves_nothing_to_settle() {
        let taken = Arc::new(AtomicUsize::new(0));
        let (tracked, unread) = track(chunks(&[KIB, KIB], &taken));
        let collected = tracked.collect().await.unwrap().to_bytes();
        assert_eq!(collected.len(), 2 * KIB);
        assert!(unread.settle(true).await);
    }

    #[tokio::test]
    async fn a_body_the_handler_still_holds_is_left_alone() {
        let taken = Arc::new(AtomicUsize::new(0));
        let (tracked, unread) = track(chunks(&[KIB], &taken));
        assert!(unread.settle(true).await);
        assert_eq!(taken.load(Ordering::Relaxed), 0);
        drop(tracked);
    }

    #[tokio::test]
    async fn an_unread_body_within_256_kib_is_discarded_and_the_connection_kept() {
        let taken = Arc::new(AtomicUsize::new(0));
        let sizes = [64 * KIB, 64 * KIB, 64 * KIB, 64 * KIB];
        let (tracked, unread) = track(chunks(&sizes, &taken));
        drop(tracked);
        assert!(unread.settle(true).await);
        assert_eq!(taken.load(Ordering::Relaxed), 4);
    }

    #[tokio::test]
    async fn a_partly_read_body_is_discarded_from_where_the_handler_stopped() {
        let taken = Arc::new(AtomicUsize::new(0));
        let sizes = [200 * KIB, 200 * KIB];
        let (mut tracked, unread) = track(chunks(&sizes, &taken));
        tracked.frame().await.unwrap().unwrap();
        drop(tracked);
        assert!(unread.settle(true).await);
        assert_eq!(taken.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn an_unread_body_past_256_kib_closes_the_connection() {
        let taken = Arc::new(AtomicUsize::new(0));
        let sizes = [128 * KIB, 128 * KIB, 1];
        let (tracked, unread) = track(chunks(&sizes, &taken));
        drop(tracked);
        assert!(!unread.settle(true).await);
    }

    #[tokio::test]
    async fn an_announced_length_past_256_kib_closes_without_reading() {
        let (body, read) = announced(256 * KIB);
        let (tracked, unread) = track(body);
        drop(tracked);
        assert!(!unread.settle(true).await);
        assert!(!read.load(Ordering::Relaxed));

        let (body, read) = announced(256 * KIB - 1);
        let (tracked, unread) = track(body);
        drop(tracked);
        assert!(unread.settle(true).await);
        assert!(read.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn a_body_that_may_not_be_discarded_closes_without_reading() {
        let (body, read) = announced(KIB);
        let (tracked, unread) = track(body);
        drop(tracked);
        assert!(!unread.settle(false).await);
        assert!(!read.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn a_body_that_stops_arriving_closes_after_the_discard_timeout() {
        let (tracked, unread) = track(stalled());
        drop(tracked);
        let started = std::time::Instant::now();
        assert!(!unread.settle(true).await);
        let took = started.elapsed();
        assert!(
            took >= DISCARD_TIMEOUT && took < 2 * DISCARD_TIMEOUT,
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn a_body_that_failed_closes_the_connection() {
        let (mut tracked, unread) = track(broken());
        assert!(tracked.frame().await.unwrap().is_err());
        drop(tracked);
        assert!(!unread.settle(true).await);

        let (tracked, unread) = track(broken());
        drop(tracked);
        assert!(!unread.settle(true).await);
    }

    fn router() -> Router {
        Router::new().route(
            "/reject",
            post(|| async { (StatusCode::FORBIDDEN, "permission denied") }),
        )
    }

    #[tokio::test]
    async fn respond_keeps_or_closes_by_what_is_left_of_the_body() {
        let taken = Arc::new(AtomicUsize::new(0));
        let linger = Linger::default();
        let small = Request::post("/reject")
            .body(chunks(&[100 * KIB], &taken))
            .unwrap();
        let response = respond(router(), small, &linger).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        assert!(response.headers().get(header::CONNECTION).is_none());
        assert!(!linger.requested());

        let large = Request::post("/reject")
            .body(chunks(&[200 * KIB, 200 * KIB], &taken))
            .unwrap();
        let response = respond(router(), large, &linger).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        assert_eq!(response.headers()[header::CONNECTION], "close");
        assert!(linger.requested());
    }

    #[tokio::test]
    async fn respond_closes_when_the_client_waits_for_100_continue() {
        let linger = Linger::default();
        let (body, read) = announced(KIB);
        let request = Request::post("/reject")
            .header(header::EXPECT, "100-continue")
            .body(body)
            .unwrap();
        let response = respond(router(), request, &linger).await;
        assert_eq!(response.headers()[header::CONNECTION], "close");
        assert!(linger.requested());
        assert!(!read.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn respond_leaves_http2_and_bodiless_requests_alone() {
        let linger = Linger::default();
        let taken = Arc::new(AtomicUsize::new(0));
        let http2 = Request::post("/reject")
            .version(Version::HTTP_2)
            .body(chunks(&[400 * KIB], &taken))
            .unwrap();
        let response = respond(router(), http2, &linger).await;
        assert!(response.headers().get(header::CONNECTION).is_none());
        let empty = Request::post("/reject").body(chunks(&[], &taken)).unwrap();
        let response = respond(router(), empty, &linger).await;
        assert!(response.headers().get(header::CONNECTION).is_none());
        assert!(!linger.requested());
        assert_eq!(taken.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_lingering_shutdown_waits_for_the_client_to_close() {
        let (server, mut client) = tokio::io::duplex(64);
        let linger = Linger::default();
        linger.request();
        let mut server = Lingering::new(server, linger);
        let shutdown = tokio::spawn(async move { server.shutdown().await });
        // The client sees the end of the server's writes first, while the server still reads.
        let mut rest = Vec::new();
        client.write_all(b"more body").await.unwrap();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(!shutdown.is_finished());
        drop(client);
        let started = std::time::Instant::now();
        shutdown.await.unwrap().unwrap();
        assert!(started.elapsed() < LINGER_TIMEOUT / 2);
    }

    #[tokio::test]
    async fn a_lingering_shutdown_gives_up_after_the_linger_timeout() {
        let (server, _client) = tokio::io::duplex(64);
        let linger = Linger::default();
        linger.request();
        let mut server = Lingering::new(server, linger);
        let started = std::time::Instant::now();
        server.shutdown().await.unwrap();
        let took = started.elapsed();
        assert!(
            took >= LINGER_TIMEOUT && took < 2 * LINGER_TIMEOUT,
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn without_the_mark_shutdown_does_not_linger() {
        let (server, _client) = tokio::io::duplex(64);
        let mut server = Lingering::new(server, Linger::default());
        let started = std::time::Instant::now();
        server.shutdown().await.unwrap();
        assert!(started.elapsed() < LINGER_TIMEOUT / 2);
    }
}
