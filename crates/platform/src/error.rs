//! The platform's error type and its mapping to HTTP.
//!
//! Invariant: one exhaustive match decides every status; bodies are JSON:API error documents
//! with `Content-Type: application/vnd.api+json` and a string `status`.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use http_kit::{ApiError, Rejection};
use jsonapi::{ErrorDocument, ErrorObject};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The resource does not exist or the caller may not see it (TFE answers both with 404).
    #[error("not found")]
    NotFound,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("{0}")]
    Rejected(Rejection),
    #[error(transparent)]
    Storage(#[from] storage::Error),
}

impl Error {
    fn title(&self, status: StatusCode) -> String {
        match self {
            Error::NotFound => "not found".to_owned(),
            Error::MethodNotAllowed => "method not allowed".to_owned(),
            Error::Rejected(_) | Error::Storage(_) => {
                status.canonical_reason().unwrap_or("error").to_lowercase()
            }
        }
    }
}

impl ApiError for Error {
    fn status(&self) -> StatusCode {
        match self {
            Error::NotFound => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Error::Rejected(rejection) => match rejection {
                // JSON:API reports unreadable documents as 422 on TFE.
                Rejection::MalformedJson(_) => StatusCode::UNPROCESSABLE_ENTITY,
                other => other.status(),
            },
            Error::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn render(&self, status: StatusCode, public_message: &str) -> Response {
        let title = self.title(status);
        let mut object = ErrorObject::new(status.as_u16(), title.clone());
        if public_message != title {
            object = object.with_detail(public_message);
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
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        http_kit::into_response(self)
    }
}
