//! JSON:API error objects and documents.
//!
//! Invariant: `status` is serialized as a string of the numeric HTTP status.

use serde::{Deserialize, Serialize};

/// One error object: `{"status":"422","title":"invalid attribute","detail":"...","source":{"pointer":"/data/attributes/name"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub status: String,
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<ErrorSource>,
}

/// Where in the request document an error points.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorSource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameter: Option<String>,
}

impl ErrorObject {
    /// An error with a status and title, such as `(404, "not found")`.
    pub fn new(status: u16, title: impl Into<String>) -> ErrorObject {
        ErrorObject {
            status: status.to_string(),
            title: title.into(),
            detail: None,
            source: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> ErrorObject {
        self.detail = Some(detail.into());
        self
    }

    /// Points the error at a member of the request document, e.g. `/data/attributes/email`.
    pub fn with_pointer(mut self, pointer: impl Into<String>) -> ErrorObject {
        self.source = Some(ErrorSource {
            pointer: Some(pointer.into()),
            parameter: None,
        });
        self
    }

    /// Points the error at a query parameter, e.g. `page[size]`.
    pub fn with_parameter(mut self, parameter: impl Into<String>) -> ErrorObject {
        self.source = Some(ErrorSource {
            pointer: None,
            parameter: Some(parameter.into()),
        });
        self
    }
}

/// `{"errors":[...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDocument {
    pub errors: Vec<ErrorObject>,
}

impl ErrorDocument {
    pub fn single(error: ErrorObject) -> ErrorDocument {
        ErrorDocument {
            errors: vec![error],
        }
    }

    pub fn to_json(&self) -> String {
        // Serializing plain strings and options cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| {
            r#"{"errors":[{"status":"500","title":"internal error"}]}"#.to_owned()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_status_serializes_as_string() {
        let doc = ErrorDocument::single(ErrorObject::new(404, "not found"));
        assert_eq!(
            doc.to_json(),
            r#"{"errors":[{"status":"404","title":"not found"}]}"#
        );
    }

    #[test]
    fn error_pointer_serializes_under_source() {
        let doc = ErrorDocument::single(
            ErrorObject::new(422, "invalid attribute")
                .with_detail("Email is invalid")
                .with_pointer("/data/attributes/email"),
        );
        let value: serde_json::Value = serde_json::from_str(&doc.to_json()).unwrap();
        assert_eq!(value["errors"][0]["status"], "422");
        assert_eq!(
            value["errors"][0]["source"]["pointer"],
            "/data/attributes/email"
        );
        assert_eq!(value["errors"][0]["detail"], "Email is invalid");
    }
}
