//! The registry's error type and its mapping to HTTP.
//!
//! Invariants: one exhaustive match decides every status; bodies are Consul's plain text with
//! Consul's wording; where Consul answers 500 for bad input (session validation, unknown
//! datacenter, acquire with an unknown session) we answer 400 (docs/design.md §D3, listed in
//! docs/compat.md); a 5xx never carries internal detail.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http_kit::{ApiError, Rejection};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Not found: {0}")]
    NoRoute(String),
    #[error("method {0} not allowed")]
    MethodNotAllowed(String),
    /// The body or query string could not be read.
    #[error("{}", rejection_message(.0))]
    Rejected(Rejection),
    /// A malformed parameter or body field, in Consul's words (`Invalid wait time`, ...).
    #[error("{0}")]
    BadRequest(String),
    /// A request Consul rejects with 500 but that is the client's fault (decision 3).
    #[error("{0}")]
    Invalid(String),
    /// Only the local datacenter is served.
    #[error("No path to datacenter")]
    UnknownDatacenter(String),
    /// The thing asked for does not exist, with Consul's message.
    #[error("{0}")]
    NotFound(String),
    /// The token lacks a permission: `Permission denied: token with AccessorID '…' lacks
    /// permission 'key:write' on "foo"`.
    #[error(
        "Permission denied: token with AccessorID '{accessor}' lacks permission '{permission}' on \"{resource}\""
    )]
    PermissionDenied {
        accessor: String,
        permission: String,
        resource: String,
    },
    /// The token lacks a permission that names no resource (`acl:read`, `acl:write`): the ACL
    /// endpoints need a management token.
    #[error(
        "Permission denied: token with AccessorID '{accessor}' lacks permission '{permission}'"
    )]
    AclPermissionDenied {
        accessor: String,
        permission: &'static str,
    },
    /// The presented token does not exist.
    #[error("ACL not found")]
    AclNotFound,
    /// `PUT /v1/acl/bootstrap` after the first management token exists; `reset_index` is the
    /// index at which the bootstrap happened (Consul's wording, reset file aside).
    #[error("Permission denied: ACL bootstrap no longer allowed (reset index: {reset_index})")]
    AclBootstrapNotAllowed { reset_index: u64 },
    /// An ACL endpoint was called while ACLs are disabled.
    #[error("ACL support disabled")]
    AclDisabled,
    /// A compare-and-swap loop kept losing to concurrent writers.
    #[error("too much contention, try again")]
    Contention,
    /// A stored record could not be decoded.
    #[error("corrupt record at {key}: {reason}")]
    CorruptRecord { key: String, reason: String },
    #[error(transparent)]
    Storage(#[from] storage::Error),
}

fn rejection_message(rejection: &Rejection) -> String {
    match rejection {
        Rejection::MalformedJson(detail) => format!("Request decode failed: {detail}"),
        other => other.to_string(),
    }
}

impl ApiError for Error {
    fn status(&self) -> StatusCode {
        match self {
            Error::NoRoute(_) | Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Error::Rejected(rejection) => rejection.status(),
            Error::BadRequest(_) | Error::Invalid(_) | Error::UnknownDatacenter(_) => {
                StatusCode::BAD_REQUEST
            }
            Error::PermissionDenied { .. }
            | Error::AclPermissionDenied { .. }
            | Error::AclBootstrapNotAllowed { .. }
            | Error::AclNotFound => StatusCode::FORBIDDEN,
            Error::AclDisabled => StatusCode::UNAUTHORIZED,
            Error::Contention => StatusCode::SERVICE_UNAVAILABLE,
            Error::CorruptRecord { .. } | Error::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn render(&self, status: StatusCode, public_message: &str) -> Response {
        http_kit::shape::plain_text(status, public_message)
    }

    fn from_rejection(rejection: Rejection) -> Error {
        Error::Rejected(rejection)
    }

    fn is_public(&self) -> bool {
        matches!(self, Error::Contention)
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        http_kit::into_response(self)
    }
}
