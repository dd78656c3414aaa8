//! How a service's error becomes a response: the [`ApiError`] trait, [`into_response`], and
//! [`Rejection`], the failures of this crate's extractors.
//!
//! Each service has one `Error` enum with an exhaustive `status()` match and implements
//! `IntoResponse for Error` as `http_kit::into_response(self)`. The body is rendered by the
//! service (`render`), usually through a [`shape`](crate::shape) helper, so each API keeps its
//! upstream's format; this module decides only what message the client may see.
//!
//! Invariants:
//! - A 5xx never shows its error text to the client: the body carries
//!   [`INTERNAL_ERROR_MESSAGE`] and the cause is logged once, at `error`, inside the request's
//!   span (method, path, request id) when [`layers`](crate::layers) is installed.
//! - A 4xx shows `err.to_string()`, so a 4xx variant's Display must be fit for clients.
//! - Every [`Rejection`] maps to a 4xx (see [`Rejection::status`]).

use std::fmt;

use axum::response::Response;
use http::StatusCode;

/// What a client sees instead of a server error's text.
pub const INTERNAL_ERROR_MESSAGE: &str = "internal error";

/// A service error that knows its HTTP status and how its API renders errors.
///
/// ```
/// use axum::response::{IntoResponse, Response};
/// use http::StatusCode;
///
/// #[derive(Debug, thiserror::Error)]
/// pub enum Error {
///     #[error("secret {0} not found")]
///     NotFound(String),
///     #[error(transparent)]
///     Rejection(http_kit::Rejection),
///     #[error(transparent)]
///     Storage(#[from] storage::Error),
/// }
///
/// impl http_kit::ApiError for Error {
///     fn status(&self) -> StatusCode {
///         match self {
///             Error::NotFound(_) => StatusCode::NOT_FOUND,
///             Error::Rejection(rejection) => rejection.status(),
///             Error::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
///         }
///     }
///
///     fn render(&self, status: StatusCode, public_message: &str) -> Response {
///         http_kit::shape::errors_json(status, &[public_message])
///     }
///
///     fn from_rejection(rejection: http_kit::Rejection) -> Self {
///         Error::Rejection(rejection)
///     }
/// }
///
/// impl IntoResponse for Error {
///     fn into_response(self) -> Response {
///         http_kit::into_response(self)
///     }
/// }
/// ```
pub trait ApiError: fmt::Display + fmt::Debug + Send + Sync + 'static {
    /// The response status; one exhaustive match per service.
    fn status(&self) -> StatusCode;

    /// The response in this API's error format. `public_message` is what the client may see:
    /// the error's Display for a 4xx, [`INTERNAL_ERROR_MESSAGE`] for a 5xx. Headers the API
    /// always sends on errors (such as `X-Consul-Index`) are added here too.
    fn render(&self, status: StatusCode, public_message: &str) -> Response;

    /// Wraps a failure of one of this crate's extractors (bad JSON, body too large, ...).
    fn from_rejection(rejection: Rejection) -> Self;

    /// Whether a 5xx error's own message is meant for the client (Vault's 503 `Vault is
    /// sealed`, a 503 asking to retry). Default: no, so internal detail never leaks.
    fn is_public(&self) -> bool {
        false
    }
}

/// Turns a service error into its response; call it from the service's `IntoResponse`.
///
/// For a 5xx, logs the error (Display and Debug) once at `error` and renders
/// [`INTERNAL_ERROR_MESSAGE`]; for anything else, logs at `debug` and renders `err.to_string()`.
pub fn into_response<E: ApiError>(err: E) -> Response {
    let status = err.status();
    if status.is_server_error() && !err.is_public() {
        tracing::error!(
            message = "Request failed.",
            status = status.as_u16(),
            error = %err,
            details = ?err,
        );
        err.render(status, INTERNAL_ERROR_MESSAGE)
    } else {
        tracing::debug!(message = "Request rejected.", status = status.as_u16(), error = %err);
        let public_message = err.to_string();
        err.render(status, &public_message)
    }
}

/// Why one of this crate's extractors refused a request. Every variant is a client error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The body is not valid JSON for the expected type; carries serde's message with line and
    /// column.
    #[error("failed to parse JSON input: {0}")]
    MalformedJson(String),
    /// The body is larger than the route's limit.
    #[error("request body too large: the limit is {limit} bytes")]
    BodyTooLarge { limit: usize },
    /// The query string does not fit the expected parameters.
    #[error("invalid query parameters: {0}")]
    InvalidQuery(String),
    /// The request's Content-Type is not one the endpoint accepts.
    #[error("unsupported media type: {0}")]
    UnsupportedMediaType(String),
    /// The body could not be read (the client went away, bad chunked encoding, ...).
    #[error("failed to read request body: {0}")]
    BodyReadFailed(String),
}

impl Rejection {
    /// 413 for [`Rejection::BodyTooLarge`], 415 for [`Rejection::UnsupportedMediaType`], 400
    /// for the rest.
    pub fn status(&self) -> StatusCode {
        match self {
            Rejection::MalformedJson(_)
            | Rejection::InvalidQuery(_)
            | Rejection::BodyReadFailed(_) => StatusCode::BAD_REQUEST,
            Rejection::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use axum::response::IntoResponse;

    use super::*;
    use crate::shape;

    /// A Vault-shaped service error, as a service would write it.
    #[derive(Debug, thiserror::Error)]
    pub(crate) enum TestError {
        #[error("secret {0} not found")]
        NotFound(String),
        #[error("database password is hunter2")]
        Backend,
        #[error("store is sealed")]
        Sealed,
        #[error(transparent)]
        Rejection(Rejection),
        #[error(transparent)]
        Storage(#[from] storage::Error),
    }

    impl ApiError for TestError {
        fn status(&self) -> StatusCode {
            match self {
                TestError::NotFound(_) => StatusCode::NOT_FOUND,
                TestError::Backend | TestError::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
                TestError::Sealed => StatusCode::SERVICE_UNAVAILABLE,
                TestError::Rejection(rejection) => rejection.status(),
            }
        }

        fn render(&self, status: StatusCode, public_message: &str) -> Response {
            shape::errors_json(status, &[public_message])
        }

        fn from_rejection(rejection: Rejection) -> Self {
            TestError::Rejection(rejection)
        }

        fn is_public(&self) -> bool {
            matches!(self, TestError::Sealed)
        }
    }

    impl IntoResponse for TestError {
        fn into_response(self) -> Response {
            into_response(self)
        }
    }

    pub(crate) async fn body_text(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn into_response_client_error_shows_its_message() {
        let response = into_response(TestError::NotFound("db/creds".to_owned()));
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            body_text(response).await,
            r#"{"errors":["secret db/creds not found"]}"#
        );
    }

    #[tokio::test]
    async fn into_response_server_error_hides_its_message() {
        let response = into_response(TestError::Backend);
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            body_text(response).await,
            r#"{"errors":["internal error"]}"#
        );
    }

    #[tokio::test]
    async fn into_response_public_server_error_shows_its_message() {
        let response = into_response(TestError::Sealed);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body_text(response).await,
            r#"{"errors":["store is sealed"]}"#
        );
    }

    #[test]
    fn rejection_statuses_are_client_errors() {
        let cases = [
            (Rejection::MalformedJson("x".to_owned()), 400),
            (Rejection::BodyTooLarge { limit: 10 }, 413),
            (Rejection::InvalidQuery("x".to_owned()), 400),
            (Rejection::UnsupportedMediaType("text/html".to_owned()), 415),
            (Rejection::BodyReadFailed("reset".to_owned()), 400),
        ];
        for (rejection, status) in cases {
            assert_eq!(rejection.status().as_u16(), status, "{rejection:?}");
        }
    }

    #[test]
    fn rejection_messages_are_client_facing() {
        assert_eq!(
            Rejection::BodyTooLarge { limit: 1024 }.to_string(),
            "request body too large: the limit is 1024 bytes"
        );
        assert_eq!(
            Rejection::MalformedJson("expected value at line 1 column 1".to_owned()).to_string(),
            "failed to parse JSON input: expected value at line 1 column 1"
        );
    }
}
