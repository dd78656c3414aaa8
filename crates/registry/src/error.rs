//! The registry's error type and its mapping to HTTP.
//!
//! Invariant: one exhaustive match decides every status; bodies are Consul's plain text; a
//! validation failure is a 4xx even where Consul answers 500 (DESIGN.md decision 3).

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http_kit::{ApiError, Rejection};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Not found: {0}")]
    NoRoute(String),
    #[error("method {0} not allowed")]
    MethodNotAllowed(String),
    #[error("{0}")]
    Rejected(Rejection),
    #[error(transparent)]
    Storage(#[from] storage::Error),
}

impl ApiError for Error {
    fn status(&self) -> StatusCode {
        match self {
            Error::NoRoute(_) => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
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
