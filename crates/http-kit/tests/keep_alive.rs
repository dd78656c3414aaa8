//! Keep-alive after a request body the handler did not read, on real sockets (127.0.0.1, port
//! 0) with a raw HTTP/1.1 client (`testkit::RawConnection`): bodies up to 256 KiB are discarded
//! and the connection kept, larger ones (or ones that do not arrive in time, or that the client
//! holds back for `100 Continue`) get `Connection: close` and an orderly close, never a reset or
//! a silently dropped connection. See docs/compat.md, "Unread request bodies".
//!
//! Invariant: every server started here is cancelled when its `Server` drops; the slowest test
//! waits out the one-second discard timeout once.

use std::net::SocketAddr;

use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::routing::{get, post};
use http::StatusCode;
use http_body_util::BodyExt;
use http_kit::HttpOptions;
use testkit::{RawConnection, RawResponse};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const BODY_LIMIT: usize = 64 * 1024;
const KIB: usize = 1024;

/// `/reject` answers 403 without reading; `/partial` reads one frame then answers 403;
/// `/size` reads the body (413 past [`BODY_LIMIT`]); any other path is a 404.
fn app() -> Router {
    let router = Router::new()
        .route("/hello", get(|| async { "hello" }))
        .route(
            "/reject",
            post(|| async { (StatusCode::FORBIDDEN, "permission denied") }),
        )
        .route(
            "/partial",
            post(|request: Request| async move {
                let mut body = request.into_body();
                let _ = body.frame().await;
                (StatusCode::FORBIDDEN, "read a little")
            }),
        )
        .route(
            "/size",
            post(|body: Bytes| async move { body.len().to_string() }),
        );
    http_kit::layers(
        router,
        &HttpOptions {
            body_limit: BODY_LIMIT,
            ..HttpOptions::default()
        },
    )
}

struct Server {
    address: SocketAddr,
    shutdown: CancellationToken,
}

impl Server {
    async fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        tokio::spawn(http_kit::serve(listener, app(), shutdown.clone()));
        Server { address, shutdown }
    }

    async fn connect(&self) -> RawConnection {
        RawConnection::connect(self.address).await.unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// One request and its response on `connection`; panics on a connection error.
async fn call(
    connection: &mut RawConnection,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> RawResponse {
    let response = connection.request(method, path, headers, body).await;
    response.unwrap_or_else(|err| panic!("{method} {path}: {err}"))
}

#[track_caller]
fn assert_kept(response: &RawResponse, status: u16) {
    assert_eq!(response.status, status, "{}", response.text());
    assert!(!response.closes(), "{:?}", response.headers);
}

/// `size` bytes as chunked transfer coding, in 16 KiB chunks.
fn chunked(size: usize) -> Vec<u8> {
    let mut encoded = Vec::new();
    let mut left = size;
    while left > 0 {
        let chunk = left.min(16 * KIB);
        encoded.extend_from_slice(format!("{chunk:x}\r\n").as_bytes());
        encoded.extend(std::iter::repeat_n(b'x', chunk));
        encoded.extend_from_slice(b"\r\n");
        left -= chunk;
    }
    encoded.extend_from_slice(b"0\r\n\r\n");
    encoded
}

#[tokio::test]
async fn unread_bodies_up_to_256_kib_keep_the_connection() {
    let server = Server::start().await;
    let mut connection = server.connect().await;
    for (round, size) in [50 * KIB, 200 * KIB, 256 * KIB - 1]
        .iter()
        .cycle()
        .take(300)
        .enumerate()
    {
        let body = vec![b'x'; *size];
        let path = if round % 2 == 0 {
            "/reject"
        } else {
            "/nowhere"
        };
        let rejected = connection.request("POST", path, &[], &body).await;
        let rejected = rejected.unwrap_or_else(|err| panic!("round {round}: {err}"));
        assert_kept(&rejected, if round % 2 == 0 { 403 } else { 404 });
        let hello = connection.request("GET", "/hello", &[], b"").await;
        let hello = hello.unwrap_or_else(|err| panic!("round {round}: {err}"));
        assert_kept(&hello, 200);
        assert_eq!(hello.text(), "hello");
    }
}

#[tokio::test]
async fn a_handler_that_read_part_of_the_body_keeps_the_connection() {
    let server = Server::start().await;
    let mut connection = server.connect().await;
    for _ in 0..20 {
        let rejected = call(
            &mut connection,
            "POST",
            "/partial",
            &[],
            &vec![b'x'; 150 * KIB],
        )
        .await;
        assert_kept(&rejected, 403);
        assert_kept(&call(&mut connection, "GET", "/hello", &[], b"").await, 200);
    }
}

#[tokio::test]
async fn unread_chunked_bodies_are_discarded_up_to_256_kib() {
    let server = Server::start().await;
    let mut connection = server.connect().await;
    let chunked_header = [("Transfer-Encoding", "chunked")];
    for _ in 0..20 {
        let rejected = call(
            &mut connection,
            "POST",
            "/reject",
            &chunked_header,
            &chunked(200 * KIB),
        )
        .await;
        assert_kept(&rejected, 403);
        assert_kept(&call(&mut connection, "GET", "/hello", &[], b"").await, 200);
    }
    let rejected = connection
        .request("POST", "/reject", &chunked_header, &chunked(300 * KIB))
        .await
        .unwrap();
    assert_eq!(rejected.status, 403);
    assert!(rejected.closes(), "{:?}", rejected.headers);
    connection.expect_closed().await.unwrap();
}

#[tokio::test]
async fn an_unread_body_past_256_kib_gets_connection_close_and_an_orderly_close() {
    let server = Server::start().await;
    for path in ["/reject", "/nowhere"] {
        let mut connection = server.connect().await;
        let rejected = connection
            .request("POST", path, &[], &vec![b'x'; 2 * KIB * KIB])
            .await
            .unwrap();
        assert!(
            rejected.status == 403 || rejected.status == 404,
            "{}",
            rejected.status
        );
        assert!(rejected.closes(), "{:?}", rejected.headers);
        // The server shuts its side after the answer: an end of stream, not a reset.
        connection.expect_closed().await.unwrap();

        let mut next = server.connect().await;
        assert_kept(&next.request("GET", "/hello", &[], b"").await.unwrap(), 200);
    }
}

#[tokio::test]
async fn the_body_limit_answer_follows_the_same_rule() {
    let server = Server::start().await;
    let mut connection = server.connect().await;
    for _ in 0..20 {
        // 100 KiB against a 64 KiB limit: 36 KiB left to discard.
        let too_large = call(
            &mut connection,
            "POST",
            "/size",
            &[],
            &vec![b'x'; 100 * KIB],
        )
        .await;
        assert_kept(&too_large, 413);
        let fits = call(&mut connection, "POST", "/size", &[], &vec![b'x'; 10 * KIB]).await;
        assert_kept(&fits, 200);
        assert_eq!(fits.text(), (10 * KIB).to_string());
    }
    let far_too_large = connection
        .request("POST", "/size", &[], &vec![b'x'; KIB * KIB])
        .await
        .unwrap();
    assert_eq!(far_too_large.status, 413);
    assert!(far_too_large.closes(), "{:?}", far_too_large.headers);
    connection.expect_closed().await.unwrap();
}

#[tokio::test]
async fn a_body_held_back_for_100_continue_is_not_asked_for() {
    let server = Server::start().await;
    let mut connection = server.connect().await;
    let headers = [("Expect", "100-continue"), ("Content-Length", "50000")];
    connection
        .send("POST", "/reject", &headers, b"")
        .await
        .unwrap();
    // The final answer comes first (no `100 Continue`) and closes the connection, as Go does:
    // what the client sends next could be the body or the next request.
    let rejected = connection.read_response().await.unwrap();
    assert_eq!(rejected.status, 403);
    assert!(rejected.closes(), "{:?}", rejected.headers);
    connection.expect_closed().await.unwrap();
}

#[tokio::test]
async fn a_body_that_stops_arriving_gets_connection_close_after_the_discard_timeout() {
    let server = Server::start().await;
    let mut connection = server.connect().await;
    // 10 KiB of a promised 100 KiB, then nothing.
    let headers = [("Content-Length", "102400")];
    connection
        .send("POST", "/reject", &headers, &[b'x'; 10 * KIB])
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let rejected = connection.read_response().await.unwrap();
    assert_eq!(rejected.status, 403);
    assert!(rejected.closes(), "{:?}", rejected.headers);
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    connection.expect_closed().await.unwrap();
}

#[tokio::test]
async fn requests_without_unread_bodies_are_untouched() {
    let server = Server::start().await;
    let mut connection = server.connect().await;
    for _ in 0..20 {
        let read = call(&mut connection, "POST", "/size", &[], &vec![b'x'; 60 * KIB]).await;
        assert_kept(&read, 200);
        assert_eq!(read.text(), (60 * KIB).to_string());
        assert_kept(&call(&mut connection, "GET", "/hello", &[], b"").await, 200);
    }
    // The client's own `Connection: close` is honoured as before.
    let last = connection
        .request("GET", "/hello", &[("Connection", "close")], b"")
        .await
        .unwrap();
    assert!(last.closes());
    connection.expect_closed().await.unwrap();
}

#[tokio::test]
async fn handlers_still_read_whole_bodies() {
    let server = Server::start().await;
    let mut connection = server.connect().await;
    let chunked_header = [("Transfer-Encoding", "chunked")];
    let read = connection
        .request("POST", "/size", &chunked_header, &chunked(40 * KIB))
        .await
        .unwrap();
    assert_kept(&read, 200);
    assert_eq!(read.text(), (40 * KIB).to_string());
}
