//! What an engine answers.
//!
//! Invariants: a response with only warnings is still a 200; `secret` makes the core create a
//! lease; `auth` (logins only) makes the core create a token; `raw` bypasses the JSON envelope.

use std::time::Duration;

use crate::Data;

/// A successful answer. The core wraps it in Vault's envelope.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Response {
    pub data: Option<Data>,
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
