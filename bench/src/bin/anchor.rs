//! `anchor`: the bare hyper 1 HTTP/1.1 server every cairn scenario is compared with.
//!
//! Where it sits: `scripts/bench` starts one next to `cairn dev` and runs `loadgen` against
//! both with the same flags, so cairn's throughput and latency are read as a ratio to "the
//! least an HTTP server written with the same stack can do" on the same machine, in the same
//! minute. It has no routing, no middleware and no storage.
//!
//! Invariants:
//! - Same runtime shape as cairn: a multi-thread tokio runtime with 2 worker threads.
//! - Every request, whatever its method or path, gets `200 {"ok":true}` with
//!   `Content-Type: application/json`; request bodies are drained, connections kept alive.
//! - Binds loopback addresses only, and prints exactly one line, `listening http://ADDR`
//!   (the bound address), on stdout once it accepts connections. SIGTERM stops it.

use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const BODY: &[u8] = br#"{"ok":true}"#;

/// Bare hyper HTTP/1.1 server answering 200 {"ok":true} to everything.
#[derive(Debug, Parser)]
#[command(name = "anchor", version)]
struct Args {
    /// Loopback address to bind; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Tokio worker threads (2 matches cairn).
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    // Drain the body so keep-alive works for PUT/POST scenarios too; a broken body is the
    // client's problem, the answer is the same.
    let _ = req.into_body().collect().await;
    let mut resp = Response::new(Full::new(Bytes::from_static(BODY)));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(resp)
}

async fn serve(addr: SocketAddr) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening http://{local}")?;
        out.flush()?;
    }
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // e.g. EMFILE: keep serving the connections we have.
                eprintln!("anchor: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service_fn(handle))
                .await;
        });
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if !args.addr.ip().is_loopback() {
        eprintln!(
            "anchor: refusing to bind non-loopback address {}",
            args.addr
        );
        return ExitCode::from(2);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("anchor: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(serve(args.addr)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("anchor: {e}");
            ExitCode::FAILURE
        }
    }
}
