//! The HTTP glue every cairn service shares.
//!
//! Each service (`secrets`, `registry`, `scheduler`, `platform`) builds an `axum::Router` of its
//! own handlers and hands it to this crate, which owns everything around the handlers:
//!
//! - [`serve`] / [`serve_tls`]: the accept loop (the caller binds the listener, so tests use port
//!   0), TLS handshakes per connection, graceful drain on shutdown ([`DRAIN_TIMEOUT`]), and the
//!   [`Shutdown`] token plus `ConnectInfo<SocketAddr>` in every request's extensions, and
//!   keep-alive kept across request bodies a handler did not read (discarded up to 256 KiB as
//!   Go does, else `Connection: close` and a graceful close; see `keep_alive`).
//! - [`layers`]: request ids ([`RequestId`], `X-Request-Id`), the request every log line
//!   written while handling it names (`request_scope`),
//!   the default body limit ([`HttpOptions`]), and a service's [`Hooks`] (header aliases, an
//!   admission check and a response finisher) in the same layer ([`layers_with_hooks`]); [`init_tracing`] sets up
//!   logging to stderr.
//! - [`ApiError`] and [`into_response`]: how a service's error enum becomes a response in its
//!   upstream's body shape (see [`shape`]), with 5xx causes logged once and hidden from clients.
//! - [`ApiJson`], [`ApiQuery`], [`RawBody`]: extractors whose rejections are the service's own
//!   error type (never axum's plain-text rejections).
//! - [`Hooks`]' header aliases and [`bearer_token`]: spec header names and upstream names both
//!   work.
//! - [`query`]: Consul's and Nomad's query options ([`query::QueryParams`], first value wins,
//!   typed [`query::QueryError`]s) and read answers with their index headers
//!   ([`query::Indexed`]).
//! - [`metrics`]: the process's metrics registry ([`metrics::Metrics`]), the request figures
//!   [`layers`] records into it, and the Prometheus text format and JSON summary every
//!   metrics endpoint answers with.
//! - [`json`]: compact JSON text of `serde_json` values, byte-identical to `serde_json`'s,
//!   with a faster string escape, for responses built by hand on hot paths.
//! - [`blocking`]: Consul/Nomad-style `?index=N&wait=5m` long polls, built on `Storage::watch`
//!   (or on a `tokio::sync::watch` of in-memory state).
//!
//! Where it sits: above `storage` (only [`blocking`] touches it) and `stdx` (Go durations and
//! booleans, which this crate reads but does not own), below every service crate and `cairn`.
//! It holds only HTTP glue and no service policy: body shapes, statuses and messages are the
//! services'.
//!
//! Invariants:
//! - No request can make this crate panic or answer with axum's default rejection text: every
//!   extractor failure becomes a [`Rejection`] handed to the service's `ApiError::from_rejection`.
//! - A 5xx response never carries the error's text; the cause is logged once, at `error`.
//! - Shutdown never hangs: after [`DRAIN_TIMEOUT`] remaining connections are dropped.
//! - An HTTP/1.1 answer without `Connection: close` is never followed by the server closing the
//!   connection over the request's unread body.

pub mod blocking;
mod error;
mod extract;
mod headers;
pub mod json;
mod json_ser;
mod json_text;
mod keep_alive;
mod layers;
mod logging;
pub mod metrics;
pub mod query;
mod request_scope;
mod serve;
pub mod shape;
mod tls;

pub use error::{ApiError, INTERNAL_ERROR_MESSAGE, Rejection, into_response};
pub use extract::{ApiJson, ApiQuery, RawBody};
pub use headers::bearer_token;
pub use json::Json;
pub use layers::{
    Admission, Admit, BodyLimit, DEFAULT_BODY_LIMIT, FallbackRoute, Finish, Hooks, HttpOptions,
    REQUEST_ID_HEADER, RequestId, hooks, layers, layers_with_hooks, with_body_limit,
};
pub use logging::{LogFormat, ParseLogFormatError, init_tracing};
pub use serve::{DRAIN_TIMEOUT, Shutdown, serve, serve_tls};
pub use tls::{TlsError, load_tls_config};
