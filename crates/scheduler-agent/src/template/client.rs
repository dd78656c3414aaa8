//! The agent's HTTP client of the secrets store (Vault's API, which cairn's secrets service
//! serves): reads and writes for the template `secret` function, lease renewal, and the
//! derived task tokens (create, renew-self, revoke-self).
//!
//! The scheduler crates do not link the secrets crates (service crates are independent), so
//! the agent talks to the store over HTTP like any Vault client, whether the store runs in the
//! same `cairn dev` process or elsewhere.
//!
//! Invariants: every call carries `X-Vault-Token`; every call has a timeout; a malformed or
//! refused answer is an error value naming the path (never a panic); tokens never appear in
//! error messages or logs.

use std::time::Duration;

use serde_json::{Map, Value, json};

/// Timeout of one call.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// A secret as consul-template exposes it to templates.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Secret {
    pub(crate) request_id: String,
    pub(crate) lease_id: String,
    /// Seconds.
    pub(crate) lease_duration: u64,
    pub(crate) renewable: bool,
    pub(crate) data: Value,
    pub(crate) warnings: Value,
}

impl Secret {
    fn from_response(body: &Value) -> Secret {
        Secret {
            request_id: text(body, "request_id"),
            lease_id: text(body, "lease_id"),
            lease_duration: body["lease_duration"].as_u64().unwrap_or(0),
            renewable: body["renewable"].as_bool().unwrap_or(false),
            data: match &body["data"] {
                Value::Null => Value::Object(Map::new()),
                data => data.clone(),
            },
            warnings: match &body["warnings"] {
                Value::Null => Value::Array(Vec::new()),
                warnings => warnings.clone(),
            },
        }
    }

    /// The value templates see (`.Data`, `.LeaseID`, `.LeaseDuration`, `.Renewable`, ...).
    pub(crate) fn template_value(&self) -> Value {
        json!({
            "RequestID": self.request_id,
            "LeaseID": self.lease_id,
            "LeaseDuration": self.lease_duration,
            "Renewable": self.renewable,
            "Data": self.data,
            "Warnings": self.warnings,
        })
    }
}

/// A token created for a task.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CreatedToken {
    pub(crate) token: String,
    /// Seconds; 0 for a token that does not expire.
    pub(crate) ttl: u64,
    pub(crate) renewable: bool,
}

fn text(body: &Value, key: &str) -> String {
    body[key].as_str().unwrap_or_default().to_owned()
}

/// The secrets store's base URL and an HTTP client.
#[derive(Debug, Clone)]
pub(crate) struct SecretsClient {
    base: String,
    http: reqwest::Client,
}

impl SecretsClient {
    pub(crate) fn new(base: &str) -> Result<SecretsClient, String> {
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|error| format!("secrets client: {error}"))?;
        Ok(SecretsClient {
            base: base.trim_end_matches('/').to_owned(),
            http,
        })
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> Result<Option<Value>, String> {
        let path = path.trim_start_matches('/');
        let url = format!("{}/v1/{path}", self.base);
        let mut request = self
            .http
            .request(method, &url)
            .header("X-Vault-Token", token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|error| {
            format!(
                "{path}: cannot reach the secrets store: {}",
                without_url(&error)
            )
        })?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|error| format!("{path}: {}", without_url(&error)))?;
        if status.as_u16() == 204 || (status.is_success() && bytes.is_empty()) {
            return Ok(None);
        }
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(Some(body));
        }
        let errors: Vec<String> = body["errors"]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|e| e.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if status.as_u16() == 404 && errors.is_empty() {
            return Err(format!("no secret exists at {path}"));
        }
        Err(format!(
            "{path}: the secrets store answered {}: {}",
            status.as_u16(),
            if errors.is_empty() {
                String::from_utf8_lossy(&bytes).into_owned()
            } else {
                errors.join("; ")
            }
        ))
    }

    /// `secret "path"`.
    pub(crate) async fn read(&self, path: &str, token: &str) -> Result<Secret, String> {
        match self.call(reqwest::Method::GET, path, token, None).await? {
            Some(body) => Ok(Secret::from_response(&body)),
            None => Err(format!(
                "no secret exists at {}",
                path.trim_start_matches('/')
            )),
        }
    }

    /// `secret "path" "k=v" ...`: a write whose answer is the secret (an empty one when the
    /// store answers 204).
    pub(crate) async fn write(
        &self,
        path: &str,
        token: &str,
        data: Map<String, Value>,
    ) -> Result<Secret, String> {
        let body = self
            .call(reqwest::Method::PUT, path, token, Some(Value::Object(data)))
            .await?;
        Ok(Secret::from_response(&body.unwrap_or(Value::Null)))
    }

    /// Renews a lease by `increment` seconds; the lease's new duration.
    pub(crate) async fn renew_lease(
        &self,
        lease_id: &str,
        increment: u64,
        token: &str,
    ) -> Result<u64, String> {
        let body = self
            .call(
                reqwest::Method::PUT,
                "sys/leases/renew",
                token,
                Some(json!({"lease_id": lease_id, "increment": increment})),
            )
            .await?
            .unwrap_or(Value::Null);
        Ok(body["lease_duration"].as_u64().unwrap_or(0))
    }

    /// Creates a child of `parent` with `policies` and `meta` (Nomad's derived task token).
    pub(crate) async fn create_token(
        &self,
        parent: &str,
        policies: &[String],
        meta: &Map<String, Value>,
    ) -> Result<CreatedToken, String> {
        let body = self
            .call(
                reqwest::Method::POST,
                "auth/token/create",
                parent,
                Some(json!({"policies": policies, "meta": meta, "display_name": "task"})),
            )
            .await?
            .unwrap_or(Value::Null);
        let auth = &body["auth"];
        let token = auth["client_token"].as_str().unwrap_or_default();
        if token.is_empty() {
            return Err("auth/token/create: the answer carries no token".to_owned());
        }
        Ok(CreatedToken {
            token: token.to_owned(),
            ttl: auth["lease_duration"].as_u64().unwrap_or(0),
            renewable: auth["renewable"].as_bool().unwrap_or(false),
        })
    }

    /// Looks the token up (to check that a restored token still works); its TTL in seconds.
    pub(crate) async fn lookup_self(&self, token: &str) -> Result<u64, String> {
        let body = self
            .call(reqwest::Method::GET, "auth/token/lookup-self", token, None)
            .await?
            .unwrap_or(Value::Null);
        Ok(body["data"]["ttl"].as_u64().unwrap_or(0))
    }

    /// Renews the token; its new TTL in seconds.
    pub(crate) async fn renew_self(&self, token: &str) -> Result<u64, String> {
        let body = self
            .call(
                reqwest::Method::POST,
                "auth/token/renew-self",
                token,
                Some(json!({})),
            )
            .await?
            .unwrap_or(Value::Null);
        Ok(body["auth"]["lease_duration"].as_u64().unwrap_or(0))
    }

    /// Revokes the token (and its children and leases).
    pub(crate) async fn revoke_self(&self, token: &str) -> Result<(), String> {
        self.call(
            reqwest::Method::POST,
            "auth/token/revoke-self",
            token,
            Some(json!({})),
        )
        .await
        .map(|_| ())
    }
}

/// A reqwest error's text without its URL (which names the path already given).
fn without_url(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text
            .replace(&format!(" ({url})"), "")
            .replace(url.as_str(), "");
    }
    text
}
