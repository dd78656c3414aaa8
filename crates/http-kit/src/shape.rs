//! Upstream error body shapes, for services' `ApiError::render`.
//!
//! `secrets` (Vault) uses [`errors_json`]; `registry` (Consul) and `scheduler` (Nomad) use
//! [`plain_text`]. JSON:API errors (`platform`) live in the `jsonapi` crate.
//!
//! Invariant: the Content-Type of each shape is exactly what upstream sends (Vault clients
//! compare `application/json` byte for byte).

use axum::body::Body;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};

/// `{"errors":["...", ...]}` with `Content-Type: application/json` (Vault).
pub fn errors_json(status: StatusCode, messages: &[&str]) -> Response {
    let body = serde_json::json!({ "errors": messages });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The message and a newline, as `text/plain; charset=utf-8` (Consul, Nomad).
pub fn plain_text(status: StatusCode, message: &str) -> Response {
    let mut body = String::with_capacity(message.len() + 1);
    body.push_str(message);
    body.push('\n');
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::tests::body_text;

    #[tokio::test]
    async fn errors_json_lists_messages_with_exact_content_type() {
        let response = errors_json(StatusCode::BAD_REQUEST, &["bad \"thing\"", "second"]);
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(
            body_text(response).await,
            r#"{"errors":["bad \"thing\"","second"]}"#
        );
    }

    #[tokio::test]
    async fn errors_json_with_no_messages_is_an_empty_list() {
        let response = errors_json(StatusCode::FORBIDDEN, &[]);
        assert_eq!(body_text(response).await, r#"{"errors":[]}"#);
    }

    #[tokio::test]
    async fn plain_text_ends_with_a_newline() {
        let response = plain_text(StatusCode::NOT_FOUND, "Session not found");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
        assert_eq!(body_text(response).await, "Session not found\n");
    }
}
