//! What an engine answers.
//!
//! Invariants: a response with only warnings is still a 200; `secret` makes the core create a
//! lease; `auth` (logins only) makes the core create a token; `raw` bypasses the JSON envelope;
//! at most one of `data` and `data_text` is set, and a [`DataText`] is always the text of one
//! JSON object (checked when it is made).

use std::time::Duration;

use crate::Data;

/// A successful answer. The core wraps it in Vault's envelope.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Response {
    pub data: Option<Data>,
    /// The data as JSON text an engine already holds (a stored kv secret): the core writes it
    /// into the envelope as it is instead of parsing it into `data` and writing it again.
    pub data_text: Option<DataText>,
    /// Set when the answer is a leased secret (dynamic credentials, OTPs, check-outs).
    pub secret: Option<LeaseOptions>,
    /// Set by auth methods on a successful login.
    pub auth: Option<Auth>,
    pub warnings: Vec<String>,
    /// A non-JSON answer (PEM, DER) with its own status and content type.
    pub raw: Option<RawResponse>,
}

impl Response {
    /// `{"data": data}`.
    pub fn data(data: Data) -> Response {
        Response {
            data: Some(data),
            ..Response::default()
        }
    }

    /// `{"data": text}`, the text written into the envelope as it is.
    pub fn data_text(text: DataText) -> Response {
        Response {
            data_text: Some(text),
            ..Response::default()
        }
    }

    /// The data, whichever way the engine gave it (`data_text` parsed).
    pub fn data_map(&self) -> Option<Data> {
        match (&self.data, &self.data_text) {
            (Some(data), _) => Some(data.clone()),
            (None, Some(text)) => Some(text.to_data()),
            (None, None) => None,
        }
    }

    /// `{"data": {"keys": [...]}}` (keys sorted by the caller).
    pub fn list(keys: Vec<String>) -> Response {
        let mut data = Data::new();
        data.insert(
            "keys".to_owned(),
            keys.into_iter().map(serde_json::Value::String).collect(),
        );
        Response::data(data)
    }

    pub fn with_warning(mut self, warning: impl Into<String>) -> Response {
        self.warnings.push(warning.into());
        self
    }
}

/// The lease an engine asks the core to track for a secret.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeaseOptions {
    /// Requested TTL; the core caps it by the mount's max.
    pub ttl: Duration,
    /// The longest the lease may live through renewals (`None`: the mount's max).
    pub max_ttl: Option<Duration>,
    pub renewable: bool,
    /// Engine-private data kept with the lease and handed back on revoke and renew (for
    /// example the username to drop). Stored encrypted; never shown to clients.
    pub internal: Data,
}

/// What a successful login grants; the core turns it into a token.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Auth {
    pub policies: Vec<String>,
    pub display_name: String,
    pub metadata: std::collections::BTreeMap<String, String>,
    /// The login's alias name (the username), used to find or create the identity entity.
    pub alias_name: String,
    pub ttl: Option<Duration>,
    pub max_ttl: Option<Duration>,
    pub period: Option<Duration>,
    pub renewable: bool,
}

/// A non-JSON response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawResponse {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

/// The JSON text of one object, as an engine stored it (`serde_json::to_vec` of a [`Data`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataText(Vec<u8>);

impl DataText {
    /// Checks that `bytes` are one JSON object (syntax only: nothing is built) and keeps them.
    pub fn new(bytes: Vec<u8>) -> Result<DataText, serde_json::Error> {
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') {
            // Whatever it is, the error a `Data` parse gives names it.
            return Err(serde_json::from_slice::<Data>(&bytes)
                .err()
                .unwrap_or_else(|| serde::de::Error::custom("expected a JSON object")));
        }
        serde_json::from_slice::<serde::de::IgnoredAny>(&bytes)?;
        Ok(DataText(bytes))
    }

    /// The text.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The object as a map (its text was checked, so this only fails on nesting deeper than
    /// serde_json's limit, read as no fields).
    pub fn to_data(&self) -> Data {
        serde_json::from_slice(&self.0).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_text_keeps_an_object_and_parses_back_to_it() {
        let text = DataText::new(br#"{"a":1,"b":{"c":"\u00e9\n"}}"#.to_vec()).unwrap();
        assert_eq!(text.as_bytes(), br#"{"a":1,"b":{"c":"\u00e9\n"}}"#);
        let data = text.to_data();
        assert_eq!(data["a"], 1);
        assert_eq!(data["b"]["c"], "\u{e9}\n");
    }

    #[test]
    fn data_text_refuses_anything_but_one_object() {
        for bad in [
            &b"[1]"[..],
            b"\"a\"",
            b"",
            b"{\"a\":",
            b"{} {}",
            b"{\"a\":1}x",
            b"null",
        ] {
            assert!(
                DataText::new(bad.to_vec()).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn data_map_reads_either_form() {
        let text = DataText::new(br#"{"k":"v"}"#.to_vec()).unwrap();
        let from_text = Response::data_text(text).data_map().unwrap();
        let mut expected = Data::new();
        expected.insert("k".to_owned(), "v".into());
        assert_eq!(from_text, expected);
        assert_eq!(Response::data(expected.clone()).data_map(), Some(expected));
        assert_eq!(Response::default().data_map(), None);
    }
}
