//! The secrets service's error type and its mapping to HTTP.
//!
//! Invariant: one exhaustive match decides every status; every body is Vault's
//! `{"errors":["..."]}` with `Content-Type: application/json` exactly; 5xx bodies never carry
//! internal detail (http-kit logs it instead).

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http_kit::{ApiError, Rejection};
use secrets_sdk::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No mount or system path handles this path (Vault's wording).
    #[error("no handler for route \"{0}\". route entry not found.")]
    NoHandler(String),
    /// A mounted backend does not serve this sub-path.
    #[error("unsupported path")]
    UnsupportedPath,
    #[error("unsupported operation")]
    UnsupportedOperation,
    /// Missing, invalid or expired token, or a missing capability.
    #[error("permission denied")]
    PermissionDenied,
    /// A path's ACL rule lists `mfa_methods` and the request did not satisfy one (`mfa.rs`):
    /// 403 with the reason, then `permission denied`.
    #[error("{0}")]
    MfaDenied(String),
    /// `sys/wrapping/*` named a token that is not a live wrapping token (or was just spent).
    #[error("wrapping token is not valid or does not exist")]
    InvalidWrappingToken,
    /// Everything but health, seal status, init and unseal answers this while sealed.
    #[error("Vault is sealed")]
    Sealed,
    /// `sys/init` on an initialized store, or an operation that needs initialization.
    #[error("{0}")]
    InitState(String),
    /// Bad input, with Vault's message.
    #[error("{0}")]
    InvalidParameter(String),
    /// A mount path conflict (`path is already in use at secret/`).
    #[error("{0}")]
    Conflict(String),
    /// Mounting on a reserved path (`cannot mount "sys/"`).
    #[error("{0}")]
    Forbidden(String),
    /// `PATCH` without `application/merge-patch+json`.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Nothing to return for a read: 404 with `{"errors":[]}`.
    #[error("")]
    NotFound,
    /// Nothing at the path, where upstream says so in words (`policy does not exist`): 404
    /// with the message.
    #[error("{0}")]
    Missing(String),
    /// The request itself could not be read (malformed JSON, body too large, ...).
    #[error("{0}")]
    Rejected(Rejection),
    /// An engine's error, mapped by its own variant.
    #[error("{0}")]
    Engine(EngineError),
    /// A stored record could not be decoded, or the barrier failed to decrypt.
    #[error("corrupt record at {key}: {reason}")]
    CorruptRecord { key: String, reason: String },
    /// A cryptographic operation failed (key generation, sealing).
    #[error("crypto: {0}")]
    Crypto(String),
    #[error(transparent)]
    Storage(#[from] storage::Error),
}

impl From<EngineError> for Error {
    fn from(err: EngineError) -> Error {
        Error::Engine(err)
    }
}

impl ApiError for Error {
    fn status(&self) -> StatusCode {
        match self {
            Error::NoHandler(_) | Error::UnsupportedPath | Error::NotFound | Error::Missing(_) => {
                StatusCode::NOT_FOUND
            }
            Error::UnsupportedOperation => StatusCode::METHOD_NOT_ALLOWED,
            Error::PermissionDenied | Error::Forbidden(_) | Error::MfaDenied(_) => {
                StatusCode::FORBIDDEN
            }
            Error::Sealed => StatusCode::SERVICE_UNAVAILABLE,
            Error::InitState(_) | Error::InvalidParameter(_) | Error::InvalidWrappingToken => {
                StatusCode::BAD_REQUEST
            }
            Error::Conflict(_) => StatusCode::CONFLICT,
            Error::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Error::Rejected(rejection) => rejection.status(),
            Error::Engine(err) => match err {
                EngineError::BadRequest(_) | EngineError::Conflict(_) => StatusCode::BAD_REQUEST,
                EngineError::UnsupportedPath => StatusCode::NOT_FOUND,
                EngineError::UnsupportedOperation => StatusCode::METHOD_NOT_ALLOWED,
                EngineError::PermissionDenied => StatusCode::FORBIDDEN,
                EngineError::Internal(_) | EngineError::Storage(_) => {
                    StatusCode::INTERNAL_SERVER_ERROR
                }
                EngineError::Sealed => StatusCode::SERVICE_UNAVAILABLE,
            },
            Error::CorruptRecord { .. } | Error::Crypto(_) | Error::Storage(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    fn render(&self, status: StatusCode, public_message: &str) -> Response {
        if let Error::MfaDenied(_) = self {
            return http_kit::shape::errors_json(status, &[public_message, "permission denied"]);
        }
        if public_message.is_empty() {
            http_kit::shape::errors_json(status, &[])
        } else {
            http_kit::shape::errors_json(status, &[public_message])
        }
    }

    fn from_rejection(rejection: Rejection) -> Error {
        Error::Rejected(rejection)
    }

    fn is_public(&self) -> bool {
        matches!(self, Error::Sealed | Error::Engine(EngineError::Sealed))
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        http_kit::into_response(self)
    }
}
