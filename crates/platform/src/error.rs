//! The platform's error type and its mapping to HTTP.
//!
//! Where it sits: every handler and extractor returns [`Error`]; `http_kit::into_response`
//! logs it (5xx at `error` with the cause, 4xx at `debug`) and calls [`ApiError::render`].
//!
//! Invariants: one exhaustive match decides every status; bodies are JSON:API error documents
//! with `Content-Type: application/vnd.api+json` and a string `status`; "no access" is 404
//! ([`Error::NotFound`]), never 403 (403 is only for the spec's few cases, such as removing
//! oneself from an organization one owns); 401 is for a missing, unknown or expired token, and
//! for SMTP credentials the mail server refused (the spec's answer to an SMTP settings update);
//! a 422 names the offending member with `source.pointer`; a 5xx shows no internal detail,
//! except a delivery failure's reply from the outside server ([`Error::Delivery`]).

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use http_kit::{ApiError, Rejection};
use jsonapi::{ErrorDocument, ErrorObject};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No token, or one that is unknown or expired.
    #[error("unauthorized")]
    Unauthorized,
    /// The resource does not exist or the caller may not see it (TFE answers both with 404).
    #[error("not found")]
    NotFound,
    /// The spec's few real 403s (removing oneself from an owned organization, ...).
    #[error("{0}")]
    Forbidden(String),
    /// A validation failure of the request document, pointing at the member at fault
    /// (`/data/attributes/email`); `None` when no single member is to blame.
    #[error("{detail}")]
    Invalid {
        pointer: Option<String>,
        detail: String,
    },
    /// A bad request outside the document: a query parameter (`parameter` names it, such as
    /// `include` or `page[size]`) or an organization limit.
    #[error("{detail}")]
    BadRequest {
        parameter: Option<String>,
        detail: String,
    },
    /// A state conflict (archiving a configuration version in use, a locked workspace, ...).
    #[error("{0}")]
    Conflict(String),
    /// A state change the resource's state machine refuses (archiving a
    /// configuration version in use, a run action in the wrong status); go-tfe matches the
    /// title `transition not allowed` and the detail.
    #[error("{0}")]
    TransitionNotAllowed(String),
    /// An upload over the configured limit; nothing was stored.
    #[error("the configuration archive is larger than the limit of {}", crate::blobs::describe_size(*limit))]
    ArchiveTooLarge { limit: u64 },
    /// An uploaded archive that is not a .tar.gz (the version is now `errored`).
    #[error("the configuration version errored: {0}")]
    InvalidArchive(String),
    /// A mutating request without `Content-Type: application/vnd.api+json`.
    #[error("unsupported media type: send Content-Type: application/vnd.api+json")]
    UnsupportedMediaType,
    #[error("method not allowed")]
    MethodNotAllowed,
    /// Over the caller's API rate limit (`rate_limit.rs` adds the rate-limit headers).
    #[error("You have exceeded the API's rate limit.")]
    TooManyRequests,
    /// Sending through an outside service failed: the SMTP test message of the SMTP settings,
    /// a test SMS. The status is the spec's for each [`DeliveryFailure`]; the detail (the
    /// server's reply) is shown, also on a 5xx.
    #[error("{detail}")]
    Delivery {
        failure: DeliveryFailure,
        detail: String,
    },
    /// An upstream the platform proxies (the public module registry) could not be reached,
    /// timed out, failed or answered something unusable; the detail names which (502).
    #[error("{0}")]
    BadGateway(String),
    /// The credentials' encryption key could not be had: a wrong or missing encryption
    /// password at start-up (`sealing.rs`); the message says what to do.
    #[error("{0}")]
    Encryption(String),
    /// A compare-and-swap loop kept losing to concurrent writers.
    #[error("the resource changed concurrently; retry the request")]
    Contention,
    /// The body or query string could not be read by an http-kit extractor.
    #[error("{0}")]
    Rejected(Rejection),
    /// A stored record could not be decoded or encoded.
    #[error("corrupt record at {key}: {reason}")]
    CorruptRecord { key: String, reason: String },
    /// Anything else that is the server's fault (the blob store failing, ...).
    #[error("{0}")]
    Internal(String),
    #[error(transparent)]
    Storage(#[from] storage::Error),
}

/// Why a delivery ([`Error::Delivery`]) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryFailure {
    /// The server refused the credentials (401, the spec's answer for SMTP).
    Credentials,
    /// The server answered with another error reply (500, the spec's answer for SMTP).
    Reply,
    /// The server did not answer in time, or could not be reached (504).
    Timeout,
    /// An HTTP provider could not be reached or failed on its side (502).
    Unreachable,
}

impl Error {
    /// A 422 pointing at `pointer` (`/data/attributes/name`).
    pub fn invalid(pointer: impl Into<String>, detail: impl Into<String>) -> Error {
        Error::Invalid {
            pointer: Some(pointer.into()),
            detail: detail.into(),
        }
    }

    /// A 422 pointing at `/data/attributes/<name>`.
    pub fn invalid_attribute(name: &str, detail: impl Into<String>) -> Error {
        Error::invalid(format!("/data/attributes/{name}"), detail)
    }

    /// A 400 naming a query parameter.
    pub fn bad_parameter(parameter: impl Into<String>, detail: impl Into<String>) -> Error {
        Error::BadRequest {
            parameter: Some(parameter.into()),
            detail: detail.into(),
        }
    }

    fn title(&self, status: StatusCode) -> String {
        match self {
            Error::Unauthorized => "unauthorized".to_owned(),
            Error::NotFound => "not found".to_owned(),
            Error::Forbidden(_) => "forbidden".to_owned(),
            Error::Invalid { .. } => "invalid attribute".to_owned(),
            Error::BadRequest { .. } => "bad request".to_owned(),
            Error::Conflict(_) | Error::Contention => "conflict".to_owned(),
            Error::TransitionNotAllowed(_) => "transition not allowed".to_owned(),
            Error::ArchiveTooLarge { .. } => "archive too large".to_owned(),
            Error::InvalidArchive(_) => "invalid archive".to_owned(),
            Error::UnsupportedMediaType => "unsupported media type".to_owned(),
            Error::MethodNotAllowed => "method not allowed".to_owned(),
            Error::TooManyRequests => "Too many requests".to_owned(),
            Error::Delivery { failure, .. } => match failure {
                DeliveryFailure::Credentials => "authentication failed",
                DeliveryFailure::Reply => "delivery failed",
                DeliveryFailure::Timeout => "gateway timeout",
                DeliveryFailure::Unreachable => "bad gateway",
            }
            .to_owned(),
            Error::BadGateway(_) => "bad gateway".to_owned(),
            Error::Rejected(_)
            | Error::CorruptRecord { .. }
            | Error::Encryption(_)
            | Error::Internal(_)
            | Error::Storage(_) => status.canonical_reason().unwrap_or("error").to_lowercase(),
        }
    }
}

impl ApiError for Error {
    fn status(&self) -> StatusCode {
        match self {
            Error::Unauthorized => StatusCode::UNAUTHORIZED,
            Error::NotFound => StatusCode::NOT_FOUND,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Error::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Error::Conflict(_) | Error::Contention => StatusCode::CONFLICT,
            Error::TransitionNotAllowed(_) => StatusCode::CONFLICT,
            Error::ArchiveTooLarge { .. } | Error::InvalidArchive(_) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            Error::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Error::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            Error::Delivery { failure, .. } => match failure {
                DeliveryFailure::Credentials => StatusCode::UNAUTHORIZED,
                DeliveryFailure::Reply => StatusCode::INTERNAL_SERVER_ERROR,
                DeliveryFailure::Timeout => StatusCode::GATEWAY_TIMEOUT,
                DeliveryFailure::Unreachable => StatusCode::BAD_GATEWAY,
            },
            Error::BadGateway(_) => StatusCode::BAD_GATEWAY,
            Error::Rejected(rejection) => match rejection {
                // JSON:API reports unreadable documents as 422 on TFE.
                Rejection::MalformedJson(_) => StatusCode::UNPROCESSABLE_ENTITY,
                other => other.status(),
            },
            Error::CorruptRecord { .. }
            | Error::Encryption(_)
            | Error::Internal(_)
            | Error::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn render(&self, status: StatusCode, public_message: &str) -> Response {
        let title = self.title(status);
        let mut object = ErrorObject::new(status.as_u16(), title.clone());
        if public_message != title {
            object = object.with_detail(public_message);
        }
        if !status.is_server_error() {
            match self {
                Error::Invalid {
                    pointer: Some(pointer),
                    ..
                } => object = object.with_pointer(pointer.clone()),
                Error::BadRequest {
                    parameter: Some(parameter),
                    ..
                } => object = object.with_parameter(parameter.clone()),
                _ => {}
            }
        }
        let mut response = (status, ErrorDocument::single(object).to_json()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(jsonapi::MEDIA_TYPE),
        );
        response
    }

    fn from_rejection(rejection: Rejection) -> Error {
        Error::Rejected(rejection)
    }

    fn is_public(&self) -> bool {
        matches!(self, Error::Delivery { .. } | Error::BadGateway(_))
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        http_kit::into_response(self)
    }
}
