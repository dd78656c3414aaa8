//! The scheduler's error type and its mapping to HTTP.
//!
//! Invariant: one exhaustive match decides every status; bodies are Nomad's plain text.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http_kit::{ApiError, Rejection};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nomad's wording for an unknown path.
    #[error("Invalid path")]
    NoRoute,
    #[error("Invalid method")]
    MethodNotAllowed,
    #[error("{0}")]
    Rejected(Rejection),
    #[error(transparent)]
    Storage(#[from] storage::Error),
}

impl ApiError for Error {
    fn status(&self) -> StatusCode {
        match self {
            Error::NoRoute => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Error::Rejected(rejection) => rejection.status(),
            Error::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn render(&self, status: StatusCode, public_message: &str) -> Response {
        http_kit::shape::plain_text(status, public_message)
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
