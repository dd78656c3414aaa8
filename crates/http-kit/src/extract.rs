//! Extractors whose rejections are the service's own error type: [`ApiJson`] (JSON body, also a
//! JSON response), [`ApiQuery`] (query string) and [`RawBody`] (bytes).
//!
//! Each is generic over the service's error `E: ApiError`; a service fixes `E` once with type
//! aliases and uses braced patterns (tuple patterns do not work through a type alias):
//!
//! ```
//! # use axum::response::{IntoResponse, Response};
//! # use http::StatusCode;
//! # #[derive(Debug, thiserror::Error)]
//! # #[error(transparent)]
//! # pub struct Error(http_kit::Rejection);
//! # impl http_kit::ApiError for Error {
//! #     fn status(&self) -> StatusCode { self.0.status() }
//! #     fn render(&self, status: StatusCode, message: &str) -> Response {
//! #         http_kit::shape::errors_json(status, &[message])
//! #     }
//! #     fn from_rejection(rejection: http_kit::Rejection) -> Self { Error(rejection) }
//! # }
//! # impl IntoResponse for Error {
//! #     fn into_response(self) -> Response { http_kit::into_response(self) }
//! # }
//! # #[derive(serde::Deserialize)] struct CreateSession { name: String }
//! # #[derive(serde::Serialize)] struct SessionView { id: String }
//! pub(crate) type Json<T> = http_kit::ApiJson<T, Error>;
//!
//! async fn create_session(
//!     Json { value: request, .. }: Json<CreateSession>,
//! ) -> Result<Json<SessionView>, Error> {
//!     Ok(Json::new(SessionView { id: request.name }))
//! }
//! # let _: axum::Router = axum::Router::new().route("/v1/session/create", axum::routing::put(create_session));
//! ```
//!
//! Where they sit: in handler signatures, after state, auth and path extractors; the body limit
//! they enforce is the one [`layers`](crate::layers) / [`with_body_limit`](crate::with_body_limit)
//! set through axum's `DefaultBodyLimit`.
//!
//! Invariants:
//! - No Content-Type is required or checked on bodies (Vault and Consul clients often send none,
//!   and `curl -d` sends a form type with a JSON body).
//! - A body over the limit is `Rejection::BodyTooLarge` (413), never axum's text rejection.
//! - A JSON body that is empty or only whitespace is read as `null` if `T` accepts it (`Option`,
//!   `()`, `serde_json::Value`), else as `{}` (a struct whose fields all have defaults, a map),
//!   else it is `Rejection::MalformedJson("request body is empty")`. Vault treats an empty body
//!   as "no data" the same way.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::request::Parts;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{ApiError, BodyLimit, Rejection};

/// axum's body limit when no `DefaultBodyLimit` is set (2 MiB).
const AXUM_DEFAULT_BODY_LIMIT: usize = 2 * 1024 * 1024;

/// A JSON request body of type `T`, rejected as the service error `E`; as a response, `T`
/// serialized with `Content-Type: application/json`.
pub struct ApiJson<T, E> {
    pub value: T,
    error: PhantomData<fn() -> E>,
}

impl<T, E> ApiJson<T, E> {
    pub fn new(value: T) -> ApiJson<T, E> {
        ApiJson {
            value,
            error: PhantomData,
        }
    }

    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T, E> From<T> for ApiJson<T, E> {
    fn from(value: T) -> ApiJson<T, E> {
        ApiJson::new(value)
    }
}

impl<T, E> Deref for ApiJson<T, E> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T, E> DerefMut for ApiJson<T, E> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: Clone, E> Clone for ApiJson<T, E> {
    fn clone(&self) -> ApiJson<T, E> {
        ApiJson::new(self.value.clone())
    }
}

impl<T: fmt::Debug, E> fmt::Debug for ApiJson<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ApiJson").field(&self.value).finish()
    }
}

impl<T, E, S> FromRequest<S> for ApiJson<T, E>
where
    T: DeserializeOwned,
    E: ApiError + IntoResponse,
    S: Send + Sync,
{
    type Rejection = E;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(request, state).await.map_err(E::from_rejection)?;
        parse_json(&bytes)
            .map(ApiJson::new)
            .map_err(E::from_rejection)
    }
}

impl<T: Serialize, E> IntoResponse for ApiJson<T, E> {
    fn into_response(self) -> Response {
        crate::json::json_response(&self.value)
    }
}

/// Query parameters of type `T` (via `serde_urlencoded`), rejected as the service error `E`.
/// A missing query string reads as empty.
pub struct ApiQuery<T, E> {
    pub value: T,
    error: PhantomData<fn() -> E>,
}

impl<T, E> ApiQuery<T, E> {
    pub fn new(value: T) -> ApiQuery<T, E> {
        ApiQuery {
            value,
            error: PhantomData,
        }
    }

    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T, E> Deref for ApiQuery<T, E> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Clone, E> Clone for ApiQuery<T, E> {
    fn clone(&self) -> ApiQuery<T, E> {
        ApiQuery::new(self.value.clone())
    }
}

impl<T: fmt::Debug, E> fmt::Debug for ApiQuery<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ApiQuery").field(&self.value).finish()
    }
}

impl<T, E, S> FromRequestParts<S> for ApiQuery<T, E>
where
    T: DeserializeOwned,
    E: ApiError + IntoResponse,
    S: Send + Sync,
{
    type Rejection = E;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        serde_urlencoded::from_str(query)
            .map(ApiQuery::new)
            .map_err(|err| E::from_rejection(Rejection::InvalidQuery(err.to_string())))
    }
}

/// The raw request body, within the body limit, rejected as the service error `E`.
pub struct RawBody<E> {
    pub bytes: Bytes,
    error: PhantomData<fn() -> E>,
}

impl<E> RawBody<E> {
    pub fn new(bytes: Bytes) -> RawBody<E> {
        RawBody {
            bytes,
            error: PhantomData,
        }
    }

    pub fn into_inner(self) -> Bytes {
        self.bytes
    }
}

impl<E> Clone for RawBody<E> {
    fn clone(&self) -> RawBody<E> {
        RawBody::new(self.bytes.clone())
    }
}

impl<E> fmt::Debug for RawBody<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawBody")
            .field("len", &self.bytes.len())
            .finish()
    }
}

impl<E, S> FromRequest<S> for RawBody<E>
where
    E: ApiError + IntoResponse,
    S: Send + Sync,
{
    type Rejection = E;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        read_body(request, state)
            .await
            .map(RawBody::new)
            .map_err(E::from_rejection)
    }
}

/// Buffers the body within the limit axum's `DefaultBodyLimit` sets for this request.
async fn read_body<S: Send + Sync>(request: Request, state: &S) -> Result<Bytes, Rejection> {
    let limit = request
        .extensions()
        .get::<BodyLimit>()
        .map_or(AXUM_DEFAULT_BODY_LIMIT, |l| l.0);
    Bytes::from_request(request, state)
        .await
        .map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                return Rejection::BodyTooLarge { limit };
            }
            // The innermost cause ("connection reset", ...) says the most without axum's wording.
            let mut cause: &dyn std::error::Error = &rejection;
            while let Some(source) = cause.source() {
                cause = source;
            }
            Rejection::BodyReadFailed(cause.to_string())
        })
}

/// Parses a JSON body; see the module docs for how an empty body reads.
fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Rejection> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return serde_json::from_slice(b"null")
            .or_else(|_| serde_json::from_slice(b"{}"))
            .map_err(|_| Rejection::MalformedJson("request body is empty".to_owned()));
    }
    serde_json::from_slice(bytes).map_err(|err| Rejection::MalformedJson(err.to_string()))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use axum::Router;
    use axum::body::Body;
    use axum::routing::{get, post};
    use serde::Deserialize;
    use tower::ServiceExt;

    use super::*;
    use crate::error::tests::{TestError, body_text};
    use crate::{HttpOptions, layers};

    type Json<T> = ApiJson<T, TestError>;
    type Query<T> = ApiQuery<T, TestError>;

    #[derive(Debug, Deserialize, Serialize)]
    struct Payload {
        name: String,
    }

    #[derive(Debug, Default, Deserialize, Serialize)]
    #[serde(default)]
    struct Optional {
        ttl: Option<String>,
    }

    #[derive(Debug, Deserialize)]
    struct Params {
        index: u64,
    }

    fn app() -> Router {
        let router = Router::new()
            .route(
                "/payload",
                post(|Json { value, .. }: Json<Payload>| async move { Json::new(value) }),
            )
            .route(
                "/optional",
                post(|Json { value, .. }: Json<Optional>| async move { Json::new(value) }),
            )
            .route(
                "/value",
                post(|Json { value, .. }: Json<serde_json::Value>| async move { Json::new(value) }),
            )
            .route(
                "/map",
                post(|body: Json<HashMap<String, String>>| async move { body.len().to_string() }),
            )
            .route(
                "/raw",
                post(|body: RawBody<TestError>| async move { body.bytes.len().to_string() }),
            )
            .route(
                "/query",
                get(|query: Query<Params>| async move { query.index.to_string() }),
            );
        layers(
            router,
            &HttpOptions {
                body_limit: 64,
                ..HttpOptions::default()
            },
        )
    }

    #[track_caller]
    fn check_status(status: StatusCode, expected: u16) {
        assert_eq!(status.as_u16(), expected);
    }

    async fn post_body(uri: &str, body: impl Into<Body>) -> (StatusCode, String) {
        let request = http::Request::post(uri).body(body.into()).unwrap();
        let response = app().oneshot(request).await.unwrap();
        let status = response.status();
        (status, body_text(response).await)
    }

    #[tokio::test]
    async fn json_without_content_type_is_accepted() {
        let (status, body) = post_body("/payload", r#"{"name":"web"}"#).await;
        check_status(status, 200);
        assert_eq!(body, r#"{"name":"web"}"#);
    }

    #[tokio::test]
    async fn json_with_form_content_type_is_accepted() {
        let request = http::Request::post("/payload")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(r#"{"name":"web"}"#))
            .unwrap();
        let response = app().oneshot(request).await.unwrap();
        check_status(response.status(), 200);
    }

    #[tokio::test]
    async fn json_malformed_is_service_shaped_400_with_position() {
        let (status, body) = post_body("/payload", "{\"name\":").await;
        check_status(status, 400);
        assert_eq!(
            body,
            r#"{"errors":["failed to parse JSON input: EOF while parsing a value at line 1 column 8"]}"#
        );
    }

    #[tokio::test]
    async fn json_wrong_type_is_service_shaped_400() {
        let (status, body) = post_body("/payload", r#"{"name": 3}"#).await;
        check_status(status, 400);
        assert_eq!(
            body,
            r#"{"errors":["failed to parse JSON input: invalid type: integer `3`, expected a string at line 1 column 10"]}"#
        );
    }

    #[tokio::test]
    async fn json_over_limit_is_service_shaped_413() {
        let (status, body) =
            post_body("/payload", format!(r#"{{"name":"{}"}}"#, "x".repeat(64))).await;
        check_status(status, 413);
        assert_eq!(
            body,
            r#"{"errors":["request body too large: the limit is 64 bytes"]}"#
        );
    }

    #[tokio::test]
    async fn json_empty_body_with_required_fields_is_malformed() {
        let (status, body) = post_body("/payload", "").await;
        check_status(status, 400);
        assert_eq!(
            body,
            r#"{"errors":["failed to parse JSON input: request body is empty"]}"#
        );
    }

    #[tokio::test]
    async fn json_empty_body_reads_as_defaults() {
        let (status, body) = post_body("/optional", " \n").await;
        check_status(status, 200);
        assert_eq!(body, r#"{"ttl":null}"#);
    }

    #[tokio::test]
    async fn json_empty_body_reads_as_null_value() {
        let (status, body) = post_body("/value", "").await;
        check_status(status, 200);
        assert_eq!(body, "null");
    }

    #[tokio::test]
    async fn json_empty_body_reads_as_empty_map() {
        let (status, body) = post_body("/map", "").await;
        check_status(status, 200);
        assert_eq!(body, "0");
    }

    #[tokio::test]
    async fn json_response_has_exact_content_type() {
        let response = Json::new(Payload {
            name: "a".to_owned(),
        })
        .into_response();
        assert_eq!(
            response.headers()[http::header::CONTENT_TYPE],
            "application/json"
        );
    }

    #[tokio::test]
    async fn raw_body_within_limit_is_read() {
        let (status, body) = post_body("/raw", "x".repeat(64)).await;
        check_status(status, 200);
        assert_eq!(body, "64");
    }

    #[tokio::test]
    async fn raw_body_over_limit_is_413() {
        let (status, body) = post_body("/raw", "x".repeat(65)).await;
        check_status(status, 413);
        assert_eq!(
            body,
            r#"{"errors":["request body too large: the limit is 64 bytes"]}"#
        );
    }

    #[tokio::test]
    async fn raw_body_without_layers_uses_axum_default_limit_in_message() {
        let router = Router::new().route(
            "/raw",
            post(|body: RawBody<TestError>| async move { body.bytes.len().to_string() }),
        );
        let request = http::Request::post("/raw")
            .body(Body::from(vec![b'x'; 3 << 20]))
            .unwrap();
        let response = router.oneshot(request).await.unwrap();
        check_status(response.status(), 413);
        assert_eq!(
            body_text(response).await,
            r#"{"errors":["request body too large: the limit is 2097152 bytes"]}"#
        );
    }

    async fn get_query(uri: &str) -> (StatusCode, String) {
        let request = http::Request::get(uri).body(Body::empty()).unwrap();
        let response = app().oneshot(request).await.unwrap();
        let status = response.status();
        (status, body_text(response).await)
    }

    #[tokio::test]
    async fn query_is_parsed() {
        let (status, body) = get_query("/query?index=42&wait=5s").await;
        check_status(status, 200);
        assert_eq!(body, "42");
    }

    #[tokio::test]
    async fn query_invalid_number_is_service_shaped_400() {
        let (status, body) = get_query("/query?index=abc").await;
        check_status(status, 400);
        assert_eq!(
            body,
            r#"{"errors":["invalid query parameters: invalid digit found in string"]}"#
        );
    }

    #[tokio::test]
    async fn query_missing_field_is_service_shaped_400() {
        let (status, body) = get_query("/query").await;
        check_status(status, 400);
        assert_eq!(
            body,
            r#"{"errors":["invalid query parameters: missing field `index`"]}"#
        );
    }
}
