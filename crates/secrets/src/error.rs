//! The secrets service's error type and its mapping to HTTP.
//!
//! Invariant: one exhaustive match decides every status; every body is Vault's
//! `{"errors":["..."]}` with `Content-Type: application/json` exactly; 5xx bodies never carry
//! internal detail (http-kit logs it instead).

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http_kit::{ApiError, Rejection};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No mount or system path handles this path (Vault's wording).
    #[error("no handler for route \"{0}\". route entry not found.")]
    NoHandler(String),
    #[error("unsupported operation")]
    UnsupportedOperation,
    /// A query parameter had an invalid value.
    #[error("{0}")]
    InvalidParameter(String),
    /// The request itself could not be read (malformed JSON, body too large, ...).
    #[error("{0}")]
    Rejected(Rejection),
    /// A stored record could not be decoded.
    #[error("corrupt record at {key}: {reason}")]
    CorruptRecord { key: String, reason: String },
    #[error(transparent)]
    Storage(#[from] storage::Error),
}

impl ApiError for Error {
    fn status(&self) -> StatusCode {
        match self {
            Error::NoHandler(_) => StatusCode::NOT_FOUND,
            Error::UnsupportedOperation => StatusCode::METHOD_NOT_ALLOWED,
            Error::InvalidParameter(_) => StatusCode::BAD_REQUEST,
            Error::Rejected(rejection) => rejection.status(),
            Error::CorruptRecord { .. } | Error::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn render(&self, status: StatusCode, public_message: &str) -> Response {
        http_kit::shape::errors_json(status, &[public_message])
    }

    fn from_rejection(rejection: Rejection) -> Error {
        Error::Rejected(rejection)
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        http_kit::into_response(self)
    }
}
