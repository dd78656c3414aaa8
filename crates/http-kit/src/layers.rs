//! The middleware every service router gets: [`layers`] (request ids, a log scope per
//! request, panic containment, the default body limit, request metrics), with the service's own
//! [`Hooks`] (header aliases, an admission check, a response finisher) run inside the same
//! layer by
//! [`layers_with_hooks`], and [`with_body_limit`] for routes that need another limit.
//!
//! Why one layer: axum wraps every route in one boxed `Route` per `Router::layer` call (a boxed
//! service clone, a boxed future and a move of the request on every request), so everything a
//! service adds to every request goes into the one tower service here ([`hooks`] alone, for
//! tests that build a service's router without the rest).
//!
//! Where it sits: outermost on each service's router, so it sees every request first and every
//! response last; `cairn` calls it once per service before [`serve`](crate::serve).
//!
//! Invariants:
//! - Every response carries `X-Request-Id`: the client's, when it sent a sane one (1 to 128
//!   visible ASCII characters), otherwise a fresh UUID v4; handlers see the same value as the
//!   [`RequestId`] extension.
//! - Everything logged while a request is handled names the request (method, path,
//!   request_id): inside its `request` span, or, unless a span filter or a terminal's colours
//!   need the span, through its task-local scope, which logs the same text for a fraction of
//!   the cost (`request_scope.rs`); the query string is never logged (Consul accepts `?token=`).
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
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
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
use crate::request_scope::RequestScope;

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

/// Adds a service's headers to a response: what it can add at once it adds to `response`; what
/// needs an await it answers as a future of more headers, inserted when it resolves.
pub type Finish = Arc<dyn Fn(&mut Response) -> Option<BoxFuture<'static, HeaderMap>> + Send + Sync>;

/// Decides, before the handler runs (inside the route, so `MatchedPath` is known, and after the
/// request aliases), whether a request goes on: a rate limit, a content-type rule.
pub type Admit = Arc<dyn Fn(&mut Request) -> Admission + Send + Sync>;

/// What a service's [`Admit`] decided about one request.
pub enum Admission {
    /// The handler runs.
    Pass,
    /// The handler does not run; this is the answer (finished like any other response).
    Refuse(Response),
    /// Deciding needs an await (a token lookup, say): on `Ok` the extensions are added to the
    /// request and the handler runs; `Err` is the answer. Boxed, so only requests that need it
    /// pay for it.
    Later(BoxFuture<'static, Result<http::Extensions, Response>>),
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Admission::Pass => f.write_str("Pass"),
            Admission::Refuse(response) => {
                f.debug_tuple("Refuse").field(&response.status()).finish()
            }
            Admission::Later(_) => f.write_str("Later"),
        }
    }
}

/// What a service adds to each of its requests and responses, run by [`layers_with_hooks`]
/// (or [`hooks`]) inside the one shared layer.
#[derive(Clone, Default)]
pub struct Hooks {
    /// `(canonical prefix, upstream prefix)` header pairs (`headers.rs`: requests get the
    /// canonical spelling, responses both).
    pub aliases: &'static [(&'static str, &'static str)],
    /// Runs on every request before its handler (a panic in it is a 500, as in a handler).
    pub admit: Option<Admit>,
    /// Runs on every response (errors, 404s and refused admissions included) before the
    /// aliases are copied.
    pub finish: Option<Finish>,
    /// For a service whose catch-all is its router's fallback: what the request metrics call
    /// the requests it serves.
    pub fallback_route: Option<FallbackRoute>,
}

/// A service's catch-all served as its router's fallback (axum matches a fallback without
/// parsing a pattern's parameters, so it costs less than a `{*path}` route): the requests
/// strictly under `prefix` (not the prefix itself) are its, and the request metrics record
/// them under `label` instead of `unmatched`. The service's fallback handler asks
/// [`FallbackRoute::holds`] too, so the label and the handler agree on which requests those are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FallbackRoute {
    pub prefix: &'static str,
    pub label: &'static str,
}

impl FallbackRoute {
    /// Whether `path` is strictly under the prefix (the prefix alone is not).
    pub fn holds(&self, path: &str) -> bool {
        path.strip_prefix(self.prefix)
            .is_some_and(|rest| !rest.is_empty())
    }
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("aliases", &self.aliases)
            .field("admit", &self.admit.is_some())
            .field("finish", &self.finish.is_some())
            .field("fallback_route", &self.fallback_route)
            .finish()
    }
}

/// Wraps a service router in the shared middleware; see the module docs for what it adds.
pub fn layers<S>(router: Router<S>, options: &HttpOptions) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    layers_with_hooks(router, options, Hooks::default())
}

/// [`layers`] with the service's [`Hooks`] run inside the same layer.
pub fn layers_with_hooks<S>(router: Router<S>, options: &HttpOptions, hooks: Hooks) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    // One `Router::layer` call for everything (see the module docs).
    let limit = options.body_limit;
    router.layer(
        tower::ServiceBuilder::new()
            .layer(StackLayer {
                context: Some(ContextOptions {
                    metrics: options.metrics.clone(),
                    body_limit: limit,
                }),
                hooks: Arc::new(hooks),
            })
            .layer(DefaultBodyLimit::max(limit)),
    )
}

/// Only the service's [`Hooks`], without request ids, spans, limits or metrics: a service's
/// own router as its tests use it.
pub fn hooks<S>(router: Router<S>, hooks: Hooks) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    router.layer(StackLayer {
        context: None,
        hooks: Arc::new(hooks),
    })
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

/// The shared middleware as a plain tower [`Layer`]: unlike `middleware::from_fn` it boxes
/// nothing but the one future per request (no per-request `Next` service box, no response
/// mapping layer).
#[derive(Clone)]
struct StackLayer {
    /// Request ids, the span, panic containment and metrics; `None` for [`hooks`] alone.
    context: Option<ContextOptions>,
    hooks: Arc<Hooks>,
}

#[derive(Clone)]
struct ContextOptions {
    metrics: Option<RequestMetrics>,
    /// Inserted as the [`BodyLimit`] extension here rather than by an `Extension` layer (one
    /// service call less per request); an inner [`with_body_limit`] overwrites it.
    body_limit: usize,
}

impl<S> Layer<S> for StackLayer {
    type Service = Stack<S>;

    fn layer(&self, inner: S) -> Stack<S> {
        Stack {
            inner,
            context: self.context.clone(),
            hooks: Arc::clone(&self.hooks),
        }
    }
}

#[derive(Clone)]
struct Stack<S> {
    inner: S,
    context: Option<ContextOptions>,
    hooks: Arc<Hooks>,
}

impl<S> Service<Request> for Stack<S>
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

    fn call(&mut self, mut request: Request) -> Self::Future {
        // The service that was polled ready handles this request; a clone stays for the next.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        for (canonical, upstream) in self.hooks.aliases {
            crate::headers::copy_prefixed(request.headers_mut(), upstream, canonical);
        }
        let hooks = Arc::clone(&self.hooks);
        match &self.context {
            Some(context) => {
                request
                    .extensions_mut()
                    .insert(BodyLimit(context.body_limit));
                Box::pin(request_context(
                    inner,
                    context.metrics.clone(),
                    hooks,
                    request,
                ))
            }
            None => Box::pin(async move {
                let response = admit_and_call(inner, &hooks, request).await;
                Ok(finish(&hooks, response).await)
            }),
        }
    }
}

/// The service's admission check, then (if it lets the request through) the handler.
async fn admit_and_call<S>(mut inner: S, hooks: &Hooks, mut request: Request) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    if let Some(admit) = &hooks.admit {
        match admit(&mut request) {
            Admission::Pass => {}
            Admission::Refuse(response) => return response,
            Admission::Later(later) => match later.await {
                Ok(extensions) => request.extensions_mut().extend(extensions),
                Err(response) => return response,
            },
        }
    }
    let Ok(response) = inner.call(request).await;
    response
}

/// The service's finisher, then its aliases, on one response.
async fn finish(hooks: &Hooks, mut response: Response) -> Response {
    if let Some(finish) = &hooks.finish
        && let Some(later) = finish(&mut response)
    {
        let headers = later.await;
        response.headers_mut().extend(headers);
    }
    for (canonical, upstream) in hooks.aliases {
        crate::headers::copy_prefixed(response.headers_mut(), canonical, upstream);
    }
    response
}

async fn request_context<S>(
    inner: S,
    metrics: Option<RequestMetrics>,
    hooks: Arc<Hooks>,
    mut request: Request,
) -> Result<Response, Infallible>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    let request_id = client_request_id(request.headers()).unwrap_or_else(new_request_id);
    let header = HeaderValue::from_str(&request_id).ok();
    let method = request.method().clone();
    let uri = request.uri().clone();
    request
        .extensions_mut()
        .insert(RequestId(request_id.clone()));
    let route = request.extensions().get::<MatchedPath>().cloned();
    let fallback_route = match (&route, hooks.fallback_route) {
        (None, Some(fallback)) if fallback.holds(uri.path()) => Some(fallback.label),
        _ => None,
    };
    let started = Instant::now();
    let handled = handle(inner, &hooks, request, started);
    let (mut response, elapsed) = if crate::request_scope::spans_in_use() {
        // At `error` level so that it is enabled whenever errors are logged: a 5xx's cause
        // must always come with its request, whatever the filter.
        let span = tracing::error_span!(
            "request",
            method = %method,
            path = %uri.path(),
            request_id = %request_id,
        );
        handled.instrument(span).await
    } else {
        let scope = RequestScope {
            method: method.clone(),
            uri,
            request_id,
        };
        scope.run(handled).await
    };
    if let Some(value) = header {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    if let Some(metrics) = &metrics {
        metrics.record(
            route.as_ref().map(MatchedPath::as_str).or(fallback_route),
            &method,
            response.status(),
            elapsed,
        );
    }
    Ok(response)
}

/// The request's handling inside its span or scope: the service's admission and the handler (a
/// panic in either becomes a 500), the service's finisher and aliases, and the "Request
/// finished." line.
async fn handle<S>(
    inner: S,
    hooks: &Hooks,
    request: Request,
    started: Instant,
) -> (Response, std::time::Duration)
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    let outcome = AssertUnwindSafe(admit_and_call(inner, hooks, request))
        .catch_unwind()
        .await;
    let response = match outcome {
        Ok(response) => response,
        Err(panic) => {
            tracing::error!(
                message = "Handler panicked.",
                panic = panic_message(&*panic)
            );
            crate::shape::plain_text(StatusCode::INTERNAL_SERVER_ERROR, INTERNAL_ERROR_MESSAGE)
        }
    };
    let response = finish(hooks, response).await;
    let status = response.status();
    let elapsed = started.elapsed();
    if status.is_server_error() {
        let latency_ms = elapsed.as_secs_f64() * 1000.0;
        tracing::error!(
            message = "Request finished.",
            status = status.as_u16(),
            latency_ms
        );
    } else if tracing::enabled!(tracing::Level::DEBUG) {
        let latency_ms = elapsed.as_secs_f64() * 1000.0;
        tracing::debug!(
            message = "Request finished.",
            status = status.as_u16(),
            latency_ms
        );
    }
    (response, elapsed)
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
    use axum::response::IntoResponse;
    use axum::routing::{get, post};
    use tower::ServiceExt;

    use super::*;
    use crate::error::tests::body_text;

    #[test]
    fn a_fallback_route_holds_the_paths_strictly_under_its_prefix() {
        let route = FallbackRoute {
            prefix: "/v1/",
            label: "/v1/{*path}",
        };
        assert!(route.holds("/v1/secret/data/a"));
        assert!(!route.holds("/v1/"));
        assert!(!route.holds("/v1"));
        assert!(!route.holds("/v2/secret"));
    }

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

    /// A service's hooks as a registry uses them: the aliases both ways, and a finisher that
    /// sets one header at once and another after an await, unless the handler set it.
    fn hooked_app() -> Router {
        let router = Router::new()
            .route(
                "/token",
                get(|headers: HeaderMap| async move {
                    headers
                        .get("x-registry-token")
                        .map(|value| value.to_str().unwrap().to_owned())
                        .unwrap_or_default()
                }),
            )
            .route(
                "/indexed",
                get(|| async { ([("x-registry-index", "7")], "indexed") }),
            )
            .route("/panic", get(explode));
        let finish: Finish = Arc::new(|response: &mut Response| {
            response
                .headers_mut()
                .insert("x-registry-knownleader", HeaderValue::from_static("true"));
            if response.headers().contains_key("x-registry-index") {
                return None;
            }
            Some(Box::pin(async {
                tokio::task::yield_now().await;
                let mut headers = HeaderMap::new();
                headers.insert("x-registry-index", HeaderValue::from_static("42"));
                headers
            }))
        });
        let hooks = Hooks {
            aliases: &[("x-registry-", "x-consul-")],
            admit: None,
            finish: Some(finish),
            fallback_route: None,
        };
        layers_with_hooks(router, &HttpOptions::default(), hooks)
    }

    #[tokio::test]
    async fn hooks_run_inside_the_shared_layer() {
        let request = http::Request::get("/token")
            .header("X-Consul-Token", "abc")
            .body(Body::empty())
            .unwrap();
        let response = hooked_app().oneshot(request).await.unwrap();
        let headers = response.headers().clone();
        assert_eq!(headers["x-registry-index"], "42");
        assert_eq!(headers["x-consul-index"], "42");
        assert_eq!(headers["x-consul-knownleader"], "true");
        assert!(headers.contains_key(REQUEST_ID_HEADER));
        assert_eq!(body_text(response).await, "abc");

        let response = hooked_app().oneshot(get_request("/indexed")).await.unwrap();
        assert_eq!(response.headers()["x-consul-index"], "7");
        assert_eq!(
            response
                .headers()
                .get_all("x-registry-index")
                .iter()
                .count(),
            1
        );
    }

    #[tokio::test]
    async fn hooks_finish_unmatched_and_panicking_requests() {
        for uri in ["/nowhere", "/panic"] {
            let response = hooked_app().oneshot(get_request(uri)).await.unwrap();
            assert_eq!(response.headers()["x-consul-index"], "42", "{uri}");
            assert!(response.headers().contains_key(REQUEST_ID_HEADER), "{uri}");
        }
    }

    /// Who the admission check found, as the handler reads it from the extensions.
    #[derive(Clone)]
    struct Admitted(&'static str);

    /// A router whose admission check refuses `/refused` at once, decides `/later` after an
    /// await (letting `x-admit: yes` through with an extension, refusing anything else),
    /// panics on `/admit-panic` and lets everything else through.
    fn admitting_app() -> Router {
        let router = Router::new()
            .route(
                "/later",
                get(|extensions: http::Extensions| async move {
                    extensions.get::<Admitted>().map_or("none", |who| who.0)
                }),
            )
            .route("/refused", get(|| async { "handler ran" }))
            .route("/admit-panic", get(|| async { "handler ran" }))
            .route("/open", get(|| async { "open" }));
        let admit: Admit = Arc::new(|request: &mut Request| match request.uri().path() {
            "/refused" => {
                Admission::Refuse((StatusCode::TOO_MANY_REQUESTS, "refused").into_response())
            }
            "/admit-panic" => panic!("admission exploded"),
            "/later" => {
                let allowed = request.headers().get("x-admit").is_some_and(|v| v == "yes");
                Admission::Later(Box::pin(async move {
                    tokio::task::yield_now().await;
                    if allowed {
                        let mut extensions = http::Extensions::new();
                        extensions.insert(Admitted("admitted later"));
                        Ok(extensions)
                    } else {
                        Err((StatusCode::FORBIDDEN, "no").into_response())
                    }
                }))
            }
            _ => Admission::Pass,
        });
        let hooks = Hooks {
            aliases: &[("x-registry-", "x-consul-")],
            admit: Some(admit),
            finish: Some(Arc::new(|response: &mut Response| {
                response
                    .headers_mut()
                    .insert("x-registry-finished", HeaderValue::from_static("yes"));
                None
            })),
            fallback_route: None,
        };
        layers_with_hooks(router, &HttpOptions::default(), hooks)
    }

    #[tokio::test]
    async fn admission_refused_answers_without_the_handler_and_is_finished() {
        let response = admitting_app()
            .oneshot(get_request("/refused"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["x-consul-finished"], "yes");
        assert!(response.headers().contains_key(REQUEST_ID_HEADER));
        assert_eq!(body_text(response).await, "refused");
    }

    #[tokio::test]
    async fn admission_decided_later_passes_its_extensions_to_the_handler_or_answers() {
        let request = http::Request::get("/later")
            .header("x-admit", "yes")
            .body(Body::empty())
            .unwrap();
        let response = admitting_app().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(body_text(response).await, "admitted later");

        let response = admitting_app()
            .oneshot(get_request("/later"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        assert_eq!(response.headers()["x-consul-finished"], "yes");
        assert_eq!(body_text(response).await, "no");
    }

    #[tokio::test]
    async fn admission_that_passes_runs_the_handler_and_a_panicking_one_is_a_500() {
        let response = admitting_app().oneshot(get_request("/open")).await.unwrap();
        assert_eq!(body_text(response).await, "open");
        let response = admitting_app()
            .oneshot(get_request("/admit-panic"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(response.headers()["x-consul-finished"], "yes");
        assert_eq!(body_text(response).await, "internal error\n");
    }

    #[tokio::test]
    async fn hooks_alone_add_no_request_id() {
        let router = Router::new().route("/", get(|| async { "ok" }));
        let app = hooks(
            router,
            Hooks {
                aliases: &[("x-registry-", "x-consul-")],
                admit: None,
                finish: None,
                fallback_route: None,
            },
        );
        let response = app.oneshot(get_request("/")).await.unwrap();
        assert!(!response.headers().contains_key(REQUEST_ID_HEADER));
    }

    /// The header aliases (`headers.rs`'s rule) as a service's hooks apply them.
    mod aliases {
        use super::*;

        const PAIRS: &[(&str, &str)] = &[("x-registry-", "x-consul-"), ("x-secrets-", "x-vault-")];

        /// Echoes the request's `x-registry-token` and `x-secrets-token` values, and sets
        /// `X-Registry-Index: 7` and `X-Registry-KnownLeader: true` on the response (plus
        /// `X-Consul-KnownLeader: false` when asked, to show a handler's own value wins).
        fn app() -> Router {
            let router = Router::new().route(
                "/",
                get(|headers: HeaderMap| async move {
                    let tokens: Vec<_> = headers
                        .get_all("x-registry-token")
                        .iter()
                        .chain(headers.get_all("x-secrets-token"))
                        .map(|value| value.to_str().unwrap().to_owned())
                        .collect();
                    let mut response = Response::new(Body::from(tokens.join(",")));
                    let response_headers = response.headers_mut();
                    response_headers.insert("X-Registry-Index", HeaderValue::from_static("7"));
                    response_headers
                        .insert("X-Registry-KnownLeader", HeaderValue::from_static("true"));
                    if headers.contains_key("x-test-own-upstream") {
                        response_headers
                            .insert("X-Consul-KnownLeader", HeaderValue::from_static("false"));
                    }
                    response
                }),
            );
            hooks(
                router,
                Hooks {
                    aliases: PAIRS,
                    admit: None,
                    finish: None,
                    fallback_route: None,
                },
            )
        }

        async fn send(headers: &[(&str, &str)]) -> Response {
            let mut request = http::Request::get("/");
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            app()
                .oneshot(request.body(Body::empty()).unwrap())
                .await
                .unwrap()
        }

        #[tokio::test]
        async fn request_upstream_header_is_copied_to_canonical() {
            let response = send(&[("X-Consul-Token", "abc")]).await;
            assert_eq!(body_text(response).await, "abc");
        }

        #[tokio::test]
        async fn request_every_pair_is_aliased() {
            let response = send(&[("X-Consul-Token", "abc"), ("X-Vault-Token", "s.1")]).await;
            assert_eq!(body_text(response).await, "abc,s.1");
        }

        #[tokio::test]
        async fn request_canonical_header_wins_over_upstream() {
            let response = send(&[
                ("X-Registry-Token", "canonical"),
                ("X-Consul-Token", "upstream"),
            ])
            .await;
            assert_eq!(body_text(response).await, "canonical");
        }

        #[tokio::test]
        async fn request_multi_valued_upstream_header_keeps_every_value() {
            let response = send(&[("X-Consul-Token", "one"), ("X-Consul-Token", "two")]).await;
            assert_eq!(body_text(response).await, "one,two");
        }

        #[tokio::test]
        async fn response_canonical_headers_are_also_sent_upstream() {
            let response = send(&[]).await;
            let headers = response.headers();
            assert_eq!(headers["x-registry-index"], "7");
            assert_eq!(headers["x-consul-index"], "7");
            assert_eq!(headers["x-consul-knownleader"], "true");
            assert!(!headers.contains_key("x-vault-index"));
        }

        #[tokio::test]
        async fn response_upstream_header_set_by_handler_is_kept() {
            let response = send(&[("x-test-own-upstream", "1")]).await;
            assert_eq!(response.headers()["x-consul-knownleader"], "false");
            assert_eq!(
                response
                    .headers()
                    .get_all("x-consul-knownleader")
                    .iter()
                    .count(),
                1
            );
        }
    }

    #[test]
    fn http_options_default_is_32_mib() {
        assert_eq!(HttpOptions::default().body_limit, 32 * 1024 * 1024);
    }
}
