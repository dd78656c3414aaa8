//! The middleware every service router gets: [`layers`] (request ids, a tracing span per
//! request, panic containment, the default body limit, request metrics) and
//! [`with_body_limit`] for routes that need another limit.
//!
//! Where it sits: outermost on each service's router, so it sees every request first and every
//! response last; `cairn` calls it once per service before [`serve`](crate::serve).
//!
//! Invariants:
//! - Every response carries `X-Request-Id`: the client's, when it sent a sane one (1 to 128
//!   visible ASCII characters), otherwise a fresh UUID v4; handlers see the same value as the
//!   [`RequestId`] extension.
//! - Everything logged while a request is handled is inside its `request` span (method, path,
//!   request_id); the query string is never logged (Consul accepts `?token=`).
//! - "Request finished." is logged once per request: at `error` for a 5xx, at `debug` otherwise.
//! - A panicking handler yields a 500 (`internal error`) and an `error` log, never a dropped
//!   connection.
//! - The [`BodyLimit`] extension always equals the `DefaultBodyLimit` in force, so extractors
//!   can name the limit in their 413 message.
//! - With [`HttpOptions::metrics`], every answered request (panics included, as their 500) is
//!   recorded once, under its matched route pattern (the middleware wraps each route, so axum's
//!   `MatchedPath` is known).

use std::any::Any;
use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequestParts, MatchedPath, Request};
use axum::response::Response;
use futures::FutureExt;
use futures::future::BoxFuture;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use tower::{Layer, Service};
use tracing::Instrument;

use crate::INTERNAL_ERROR_MESSAGE;
use crate::metrics::RequestMetrics;

/// The default request body limit: 32 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 32 * 1024 * 1024;

/// The request id header, read on requests and echoed on responses.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest client-supplied request id that is kept; longer ones are replaced.
const MAX_REQUEST_ID_LEN: usize = 128;

/// Options for [`layers`].
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The largest request body, in bytes, that the body extractors accept (413 beyond it).
    pub body_limit: usize,
    /// Where to record each request's count and latency (none by default).
    pub metrics: Option<RequestMetrics>,
}

impl Default for HttpOptions {
    fn default() -> HttpOptions {
        HttpOptions {
            body_limit: DEFAULT_BODY_LIMIT,
            metrics: None,
        }
    }
}

/// The request's id, from `X-Request-Id` or generated; in request extensions under
/// [`layers`]. As an extractor it never fails: without [`layers`] it yields a fresh UUID.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let request_id = parts.extensions.get::<RequestId>().cloned();
        Ok(request_id.unwrap_or_else(|| RequestId(new_request_id())))
    }
}

/// The body limit in force for a request, in its extensions (set by [`layers`] and
/// [`with_body_limit`]). Without it, extractors assume axum's default of 2 MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimit(pub usize);

/// Wraps a service router in the shared middleware; see the module docs for what it adds.
pub fn layers<S>(router: Router<S>, options: &HttpOptions) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    // One `Router::layer` call: axum wraps every route in a boxed `Route` per call (a boxed
    // service clone and a boxed future per request each), so the three layers go in as one.
    let limit = options.body_limit;
    router.layer(
        tower::ServiceBuilder::new()
            .layer(RequestContextLayer {
                metrics: options.metrics.clone(),
            })
            .layer(axum::Extension(BodyLimit(limit)))
            .layer(DefaultBodyLimit::max(limit)),
    )
}

/// Sets the body limit for the routes in `router` (for example a larger one for snapshot
/// uploads). Inner limits win: apply this to a sub-router before merging it and calling
/// [`layers`].
pub fn with_body_limit<S>(router: Router<S>, limit: usize) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    // One `Router::layer` call (one boxed `Route` per route), as in [`layers`].
    router.layer(
        tower::ServiceBuilder::new()
            .layer(axum::Extension(BodyLimit(limit)))
            .layer(DefaultBodyLimit::max(limit)),
    )
}

/// The request-context middleware as a plain tower [`Layer`]: unlike `middleware::from_fn` it
/// boxes nothing but the one future per request (no per-request `Next` service box, no
/// response mapping layer).
#[derive(Clone)]
struct RequestContextLayer {
    metrics: Option<RequestMetrics>,
}

impl<S> Layer<S> for RequestContextLayer {
    type Service = RequestContext<S>;

    fn layer(&self, inner: S) -> RequestContext<S> {
        RequestContext {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

#[derive(Clone)]
struct RequestContext<S> {
    inner: S,
    metrics: Option<RequestMetrics>,
}

impl<S> Service<Request> for RequestContext<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // The service that was polled ready handles this request; a clone stays for the next.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(request_context(inner, self.metrics.clone(), request))
    }
}

async fn request_context<S>(
    mut inner: S,
    metrics: Option<RequestMetrics>,
    mut request: Request,
) -> Result<Response, Infallible>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    let request_id = client_request_id(request.headers()).unwrap_or_else(new_request_id);
    let header = HeaderValue::from_str(&request_id).ok();
    // The span is at `error` level so that it is enabled whenever errors are logged: a 5xx's
    // cause must always come with its request context, whatever the filter.
    let span = tracing::error_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id = %request_id,
    );
    request.extensions_mut().insert(RequestId(request_id));
    let method = request.method().clone();
    let route = request.extensions().get::<MatchedPath>().cloned();
    let started = Instant::now();
    let outcome = AssertUnwindSafe(inner.call(request))
        .catch_unwind()
        .instrument(span.clone())
        .await;
    let mut response = match outcome {
        Ok(Ok(response)) => response,
        Ok(Err(never)) => match never {},
        Err(panic) => {
            span.in_scope(|| {
                tracing::error!(
                    message = "Handler panicked.",
                    panic = panic_message(&*panic)
                );
            });
            crate::shape::plain_text(StatusCode::INTERNAL_SERVER_ERROR, INTERNAL_ERROR_MESSAGE)
        }
    };
    if let Some(value) = header {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }

    let status = response.status();
    let elapsed = started.elapsed();
    if let Some(metrics) = &metrics {
        metrics.record(
            route.as_ref().map(MatchedPath::as_str),
            &method,
            status,
            elapsed,
        );
    }
    if status.is_server_error() {
        let latency_ms = elapsed.as_secs_f64() * 1000.0;
        span.in_scope(|| {
            tracing::error!(
                message = "Request finished.",
                status = status.as_u16(),
                latency_ms
            );
        });
    } else if tracing::enabled!(tracing::Level::DEBUG) {
        let latency_ms = elapsed.as_secs_f64() * 1000.0;
        span.in_scope(|| {
            tracing::debug!(
                message = "Request finished.",
                status = status.as_u16(),
                latency_ms
            );
        });
    }
    Ok(response)
}

/// A fresh request id: a random UUID v4 in its hyphenated lower-case form, formatted without
/// going through `fmt`.
fn new_request_id() -> String {
    let mut buffer = uuid::Uuid::encode_buffer();
    let text: &str = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buffer);
    text.to_owned()
}

/// The client's request id, if it is one we are willing to echo and log.
fn client_request_id(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(REQUEST_ID_HEADER)?.to_str().ok()?;
    let sane = !value.is_empty()
        && value.len() <= MAX_REQUEST_ID_LEN
        && value.bytes().all(|byte| byte.is_ascii_graphic());
    sane.then(|| value.to_owned())
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    if let Some(message) = panic.downcast_ref::<&str>() {
        message
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message
    } else {
        "non-string panic payload"
    }
}

#[cfg(test)]
mod tests {
    use axum::body::{Body, Bytes};
    use axum::routing::{get, post};
    use tower::ServiceExt;

    use super::*;
    use crate::error::tests::body_text;

    async fn explode() -> &'static str {
        panic!("handler exploded")
    }

    fn app() -> Router {
        let router = Router::new()
            .route("/id", get(|RequestId(id): RequestId| async move { id }))
            .route("/fail", get(|| async { StatusCode::SERVICE_UNAVAILABLE }))
            .route("/panic", get(explode))
            .route(
                "/limit",
                get(
                    |axum::Extension(BodyLimit(limit)): axum::Extension<BodyLimit>| async move {
                        limit.to_string()
                    },
                ),
            )
            .route("/echo", post(|body: Bytes| async move { body }));
        layers(
            router,
            &HttpOptions {
                body_limit: 16,
                metrics: None,
            },
        )
    }

    async fn send(request: http::Request<Body>) -> Response {
        app().oneshot(request).await.unwrap()
    }

    fn get_request(uri: &str) -> http::Request<Body> {
        http::Request::get(uri).body(Body::empty()).unwrap()
    }

    #[tokio::test]
    async fn request_id_generated_when_absent_and_echoed() {
        let response = send(get_request("/id")).await;
        let echoed = response.headers()[REQUEST_ID_HEADER]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(uuid::Uuid::parse_str(&echoed).is_ok(), "{echoed}");
        assert_eq!(body_text(response).await, echoed);
    }

    #[tokio::test]
    async fn request_id_from_client_is_kept_and_echoed() {
        let request = http::Request::get("/id")
            .header("X-Request-Id", "abc-123")
            .body(Body::empty())
            .unwrap();
        let response = send(request).await;
        assert_eq!(response.headers()[REQUEST_ID_HEADER], "abc-123");
        assert_eq!(body_text(response).await, "abc-123");
    }

    #[tokio::test]
    async fn request_id_from_client_with_spaces_is_replaced() {
        let request = http::Request::get("/id")
            .header("X-Request-Id", "has spaces")
            .body(Body::empty())
            .unwrap();
        let response = send(request).await;
        let echoed = response.headers()[REQUEST_ID_HEADER].to_str().unwrap();
        assert!(uuid::Uuid::parse_str(echoed).is_ok(), "{echoed}");
    }

    #[tokio::test]
    async fn request_id_too_long_is_replaced() {
        let long = "a".repeat(MAX_REQUEST_ID_LEN + 1);
        let request = http::Request::get("/id")
            .header("X-Request-Id", &long)
            .body(Body::empty())
            .unwrap();
        let response = send(request).await;
        assert_ne!(response.headers()[REQUEST_ID_HEADER], long.as_str());
    }

    #[tokio::test]
    async fn request_id_is_echoed_on_server_errors() {
        let response = send(get_request("/fail")).await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().contains_key(REQUEST_ID_HEADER));
    }

    #[tokio::test]
    async fn handler_panic_becomes_internal_error() {
        let response = send(get_request("/panic")).await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(response.headers().contains_key(REQUEST_ID_HEADER));
        assert_eq!(body_text(response).await, "internal error\n");
    }

    #[tokio::test]
    async fn body_limit_extension_matches_options() {
        let response = send(get_request("/limit")).await;
        assert_eq!(body_text(response).await, "16");
    }

    #[tokio::test]
    async fn body_over_limit_is_refused_by_axum_extractors() {
        let request = http::Request::post("/echo")
            .body(Body::from("x".repeat(17)))
            .unwrap();
        let response = send(request).await;
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let request = http::Request::post("/echo")
            .body(Body::from("x".repeat(16)))
            .unwrap();
        let response = send(request).await;
        assert_eq!(response.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn inner_body_limit_overrides_outer() {
        let upload = with_body_limit(
            Router::new().route(
                "/upload",
                post(|body: Bytes| async move { body.len().to_string() }),
            ),
            64,
        );
        let app = layers(
            upload,
            &HttpOptions {
                body_limit: 16,
                metrics: None,
            },
        );
        let request = http::Request::post("/upload")
            .body(Body::from("x".repeat(40)))
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(body_text(response).await, "40");
    }

    #[tokio::test]
    async fn requests_are_recorded_under_their_matched_route() {
        let metrics = crate::metrics::Metrics::new();
        let router = Router::new()
            .route("/items/{id}", get(|| async { "item" }))
            .route("/panic", get(explode));
        let app = layers(
            router,
            &HttpOptions {
                metrics: Some(metrics.requests("test")),
                ..HttpOptions::default()
            },
        );
        for uri in ["/items/1", "/items/2", "/panic", "/nowhere"] {
            app.clone().oneshot(get_request(uri)).await.unwrap();
        }
        let families = metrics.gather("test", Vec::new());
        let crate::metrics::Samples::Counter(counts) = &families[0].samples else {
            panic!("{families:?}");
        };
        let seen: Vec<(&str, &str, u64)> = counts
            .iter()
            .map(|(labels, count)| (labels[1].1.as_str(), labels[3].1.as_str(), *count))
            .collect();
        assert_eq!(
            seen,
            [
                ("/items/{id}", "200", 2),
                ("/panic", "500", 1),
                ("unmatched", "404", 1)
            ]
        );
    }

    #[test]
    fn http_options_default_is_32_mib() {
        assert_eq!(HttpOptions::default().body_limit, 32 * 1024 * 1024);
    }
}
