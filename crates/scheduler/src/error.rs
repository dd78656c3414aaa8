//! The scheduler's error type and its mapping to HTTP.
//!
//! Invariant: one exhaustive match decides every status; bodies are Nomad's plain text, and a
//! list of problems is always rendered by [`multierror`].

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
    /// Bad input: the message says what is wrong.
    #[error("{0}")]
    BadRequest(String),
    /// An unknown object: the message names it (`job not found`, `alloc not found`...).
    #[error("{0}")]
    NotFound(String),
    /// A write whose precondition no longer holds (EnforceIndex, a refused plan).
    #[error("{0}")]
    Conflict(String),
    #[error("Permission denied")]
    PermissionDenied,
    /// No or an unknown token where one is needed.
    #[error("ACL token not found")]
    TokenNotFound,
    /// The state writer has stopped (the server is shutting down).
    #[error("the scheduler is shutting down")]
    ShuttingDown,
    /// No server is known to lead (Nomad's `structs.ErrNoLeader`).
    #[error("No cluster leader")]
    NoLeader,
    /// A request could not be forwarded to the leader (the message is for the log).
    #[error("forwarding to the leader: {0}")]
    Forward(String),
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    Storage(#[from] storage::Error),
}

impl ApiError for Error {
    fn status(&self) -> StatusCode {
        match self {
            Error::NoRoute | Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Error::Rejected(rejection) => rejection.status(),
            Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::Conflict(_) => StatusCode::CONFLICT,
            Error::PermissionDenied | Error::TokenNotFound => StatusCode::FORBIDDEN,
            Error::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            Error::NoLeader | Error::Forward(_) | Error::Internal(_) | Error::Storage(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    fn is_public(&self) -> bool {
        matches!(self, Error::ShuttingDown | Error::NoLeader)
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

/// Several problems in one message, as go-multierror renders them (upstream joins validation
/// errors with it).
pub(crate) use stdx::multierror::render as multierror;
