//! The client side of the cairn-internal client protocol (JSON over HTTP on the scheduler's
//! listener), every call carrying `X-Nomad-Token: <node SecretID>`:
//!
//! - `PUT /v1/internal/node/register` `{"Node": Node}` → `{"HeartbeatTTL": ns, "Index": n}`;
//! - `PUT /v1/internal/node/:id/heartbeat` → `{"HeartbeatTTL": ns}` (404: re-register);
//! - `GET /v1/internal/node/:id/allocations?index=N&wait=30s&since=M` (blocking) →
//!   `{"Allocs": [Allocation with Job], "Index": n, "Unchanged": [{"ID", "AllocModifyIndex",
//!   "DesiredStatus"}]}`: the allocations whose `AllocModifyIndex` is at most M (the agent holds
//!   them) come as stubs in `Unchanged`, the others whole (a server without `since` sends all
//!   whole, which reads the same);
//! - `PUT /v1/internal/allocations` `{"Allocs": [AllocClientUpdate]}` → `{"Index": n}`;
//! - `GET /v1/internal/node/:id/calls?wait=30s` (long poll) → `{"Calls": [ClientCall]}`;
//! - `GET /v1/internal/node/:id/call/:call_id` upgraded to `cairn-call`: the tunnel that
//!   answers one call (see `calls.rs`);
//! - `PUT /v1/internal/node/:id/runtime` `NodeRuntimeReport` → `{"Index": n}` (see
//!   `runtime.rs`);
//! - `GET /v1/internal/node/:id/overrides?index=N&wait=30s` (blocking) →
//!   `{"Overrides": [ScheduleOverride], "Index": n}`.
//!
//! Invariants: a transport failure moves on to the next configured server; malformed data is
//! an error value, never a panic; one allocation the agent cannot decode does not hide the
//! others (its ID is still reported, so the agent does not mistake it for garbage-collected).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use scheduler_structs::{
    AllocClientUpdate, Allocation, Nanos, Node, NodeRuntimeReport, ScheduleOverride,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The header carrying the node's secret.
const TOKEN_HEADER: &str = "X-Nomad-Token";

/// The `Upgrade` protocol of a call's tunnel.
const CALL_PROTOCOL: &str = "cairn-call";

/// Timeout of the non-blocking calls.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Extra time a blocking query may take beyond its `wait` (the server adds jitter).
const BLOCKING_SLACK: Duration = Duration::from_secs(10);

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ServerError {
    #[error("server answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("cannot reach server {server}: {error}")]
    Transport { server: String, error: String },
    #[error("malformed server response: {0}")]
    Decode(String),
}

impl ServerError {
    /// Whether the server answered 404 (it does not know the node).
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, ServerError::Status { status: 404, .. })
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct RegisterResponse {
    #[serde(rename = "HeartbeatTTL")]
    pub(crate) heartbeat_ttl: Nanos,
    pub(crate) index: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct HeartbeatResponse {
    #[serde(rename = "HeartbeatTTL")]
    pub(crate) heartbeat_ttl: Nanos,
}

/// The allocations placed on this node.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeAllocations {
    /// The allocations sent whole: all of them, or, asked with `since`, those changed since.
    pub(crate) allocs: Vec<Allocation>,
    /// IDs of allocations present but not decodable (kept, never treated as gone).
    pub(crate) undecodable: Vec<String>,
    /// Asked with `since`: the allocations the server did not send whole, as it holds them
    /// (the agent holds them already, unless something went back; then it asks for all).
    pub(crate) unchanged: Vec<AllocStub>,
    pub(crate) index: u64,
}

/// An allocation the server did not send whole (its `AllocModifyIndex` is at most the `since`
/// asked with): what the agent compares with the allocation it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct AllocStub {
    #[serde(rename = "ID")]
    pub(crate) id: String,
    pub(crate) alloc_modify_index: u64,
    pub(crate) desired_status: String,
}

/// The allocations answer, every allocation decoded straight into its type: the usual case,
/// and several times cheaper than through a `Value` (an allocation comes with its job).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TypedAllocations {
    #[serde(default)]
    allocs: Option<Vec<Allocation>>,
    #[serde(default)]
    index: u64,
    #[serde(default)]
    unchanged: Option<Vec<AllocStub>>,
}

/// The allocations answer with each allocation as a `Value`, so that each one is decoded on its
/// own: read when the typed answer does not decode (one bad allocation does not hide the
/// others).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawAllocations {
    #[serde(default)]
    allocs: Option<Vec<Value>>,
    #[serde(default)]
    index: u64,
    #[serde(default)]
    unchanged: Option<Vec<AllocStub>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct RegisterRequest<'a> {
    node: &'a Node,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct UpdateRequest<'a> {
    allocs: &'a [AllocClientUpdate],
}

/// An HTTP client for the configured servers.
#[derive(Debug)]
pub(crate) struct ServerClient {
    http: reqwest::Client,
    servers: Vec<String>,
    current: AtomicUsize,
    secret: String,
    register_token: Option<String>,
}

impl ServerClient {
    pub(crate) fn new(
        servers: &[String],
        secret: String,
        register_token: Option<String>,
    ) -> Result<ServerClient, String> {
        if servers.is_empty() {
            return Err("no servers configured".to_owned());
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|error| format!("cannot build the HTTP client: {error}"))?;
        Ok(ServerClient {
            http,
            servers: servers
                .iter()
                .map(|server| server.trim_end_matches('/').to_owned())
                .collect(),
            current: AtomicUsize::new(0),
            secret,
            register_token,
        })
    }

    pub(crate) async fn register(&self, node: &Node) -> Result<RegisterResponse, ServerError> {
        let token = self.register_token.as_deref().unwrap_or(&self.secret);
        let body = serde_json::to_vec(&RegisterRequest { node })
            .map_err(|error| ServerError::Decode(error.to_string()))?;
        let bytes = self
            .call(
                reqwest::Method::PUT,
                "/v1/internal/node/register",
                token,
                Some(body),
                CALL_TIMEOUT,
            )
            .await?;
        decode(&bytes)
    }

    pub(crate) async fn heartbeat(&self, node_id: &str) -> Result<HeartbeatResponse, ServerError> {
        let path = format!("/v1/internal/node/{node_id}/heartbeat");
        let bytes = self
            .call(
                reqwest::Method::PUT,
                &path,
                &self.secret,
                None,
                CALL_TIMEOUT,
            )
            .await?;
        decode(&bytes)
    }

    /// The blocking allocations query: returns once the index passes `index` or `wait` ends.
    /// The allocations on this node once its index passes `index` (or `wait` ends); those whose
    /// `AllocModifyIndex` is at most `since` come as stubs (a server that predates `since`
    /// sends them all whole, which reads the same).
    pub(crate) async fn allocations(
        &self,
        node_id: &str,
        index: u64,
        since: u64,
        wait: Duration,
    ) -> Result<NodeAllocations, ServerError> {
        let path = format!(
            "/v1/internal/node/{node_id}/allocations?index={index}&wait={}&since={since}",
            stdx::duration::format_go_std(wait)
        );
        let bytes = self
            .call(
                reqwest::Method::GET,
                &path,
                &self.secret,
                None,
                wait + BLOCKING_SLACK,
            )
            .await?;
        decode_allocations(&bytes)
    }

    /// The calls the server has for this client, waiting up to `wait` for one.
    pub(crate) async fn calls(
        &self,
        node_id: &str,
        wait: Duration,
    ) -> Result<Vec<crate::tunnel::ClientCall>, ServerError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Calls {
            #[serde(default)]
            calls: Option<Vec<crate::tunnel::ClientCall>>,
        }
        let path = format!(
            "/v1/internal/node/{node_id}/calls?wait={}",
            stdx::duration::format_go_std(wait)
        );
        let bytes = self
            .call(
                reqwest::Method::GET,
                &path,
                &self.secret,
                None,
                wait + BLOCKING_SLACK,
            )
            .await?;
        Ok(decode::<Calls>(&bytes)?.calls.unwrap_or_default())
    }

    /// Dials back for call `call_id`: the upgraded connection is the call's tunnel. It goes to
    /// the server the calls came from (the current one).
    pub(crate) async fn dial_back(
        &self,
        node_id: &str,
        call_id: &str,
    ) -> Result<reqwest::Upgraded, ServerError> {
        let at = self.current.load(Ordering::Relaxed) % self.servers.len();
        let server = &self.servers[at];
        let transport = |error: reqwest::Error| ServerError::Transport {
            server: server.clone(),
            error: error.to_string(),
        };
        let response = self
            .http
            .get(format!(
                "{server}/v1/internal/node/{node_id}/call/{call_id}"
            ))
            .header(TOKEN_HEADER, &self.secret)
            .header(reqwest::header::CONNECTION, "upgrade")
            .header(reqwest::header::UPGRADE, CALL_PROTOCOL)
            .send()
            .await
            .map_err(transport)?;
        let status = response.status();
        if status != reqwest::StatusCode::SWITCHING_PROTOCOLS {
            let body = response.text().await.unwrap_or_default();
            return Err(ServerError::Status {
                status: status.as_u16(),
                body: body.trim().chars().take(500).collect(),
            });
        }
        response.upgrade().await.map_err(transport)
    }

    /// Sends the node's whole runtime report (services, check results, schedule states).
    pub(crate) async fn report_runtime(
        &self,
        node_id: &str,
        report: &NodeRuntimeReport,
    ) -> Result<(), ServerError> {
        let body =
            serde_json::to_vec(report).map_err(|error| ServerError::Decode(error.to_string()))?;
        let path = format!("/v1/internal/node/{node_id}/runtime");
        self.call(
            reqwest::Method::PUT,
            &path,
            &self.secret,
            Some(body),
            CALL_TIMEOUT,
        )
        .await?;
        Ok(())
    }

    /// The blocking query of the pause overrides waiting for this node's allocations.
    pub(crate) async fn overrides(
        &self,
        node_id: &str,
        index: u64,
        wait: Duration,
    ) -> Result<(Vec<ScheduleOverride>, u64), ServerError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Overrides {
            #[serde(default)]
            overrides: Option<Vec<ScheduleOverride>>,
            #[serde(default)]
            index: u64,
        }
        let path = format!(
            "/v1/internal/node/{node_id}/overrides?index={index}&wait={}",
            stdx::duration::format_go_std(wait)
        );
        let bytes = self
            .call(
                reqwest::Method::GET,
                &path,
                &self.secret,
                None,
                wait + BLOCKING_SLACK,
            )
            .await?;
        let answer: Overrides = decode(&bytes)?;
        Ok((answer.overrides.unwrap_or_default(), answer.index))
    }

    pub(crate) async fn update_allocations(
        &self,
        updates: &[AllocClientUpdate],
    ) -> Result<(), ServerError> {
        let body = serde_json::to_vec(&UpdateRequest { allocs: updates })
            .map_err(|error| ServerError::Decode(error.to_string()))?;
        self.call(
            reqwest::Method::PUT,
            "/v1/internal/allocations",
            &self.secret,
            Some(body),
            CALL_TIMEOUT,
        )
        .await?;
        Ok(())
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Vec<u8>, ServerError> {
        let at = self.current.load(Ordering::Relaxed) % self.servers.len();
        let server = &self.servers[at];
        let mut request = self
            .http
            .request(method, format!("{server}{path}"))
            .header(TOKEN_HEADER, token)
            .timeout(timeout);
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let transport = |error: reqwest::Error| {
            // Try the next server on the next call.
            self.current
                .store((at + 1) % self.servers.len(), Ordering::Relaxed);
            ServerError::Transport {
                server: server.clone(),
                error: error.to_string(),
            }
        };
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(transport)?;
        if !status.is_success() {
            return Err(ServerError::Status {
                status: status.as_u16(),
                body: String::from_utf8_lossy(&bytes)
                    .trim()
                    .chars()
                    .take(500)
                    .collect(),
            });
        }
        Ok(bytes.to_vec())
    }
}

/// Decodes an allocations answer: every allocation that decodes, and the IDs of those that do
/// not (a string `ID` is all they need to be kept).
fn decode_allocations(bytes: &[u8]) -> Result<NodeAllocations, ServerError> {
    if let Ok(typed) = serde_json::from_slice::<TypedAllocations>(bytes) {
        return Ok(NodeAllocations {
            allocs: typed.allocs.unwrap_or_default(),
            undecodable: Vec::new(),
            unchanged: typed.unchanged.unwrap_or_default(),
            index: typed.index,
        });
    }
    let raw: RawAllocations = decode(bytes)?;
    let mut result = NodeAllocations {
        index: raw.index,
        unchanged: raw.unchanged.unwrap_or_default(),
        ..NodeAllocations::default()
    };
    for value in raw.allocs.unwrap_or_default() {
        let id = value.get("ID").and_then(Value::as_str).map(str::to_owned);
        match serde_json::from_value::<Allocation>(value) {
            Ok(alloc) => result.allocs.push(alloc),
            Err(error) => {
                tracing::warn!(alloc_id = ?id, %error, "cannot decode an allocation from the server");
                result.undecodable.extend(id);
            }
        }
    }
    Ok(result)
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ServerError> {
    serde_json::from_slice(bytes).map_err(|error| ServerError::Decode(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allocation_that_does_not_decode_is_reported_by_id_beside_the_others() {
        let body = br#"{"Allocs":[
            {"ID":"a1","NodeID":"n1","ClientStatus":"pending","AllocModifyIndex":7,
             "Metrics":{"ScoreMetaData":[{"NodeID":"n1","Scores":{"binpack":0.25},"NormScore":0.25}]}},
            {"ID":"a2","CreateIndex":"not a number"},
            {"CreateIndex":"neither has an ID"}
        ],"Index":9}"#;
        let answer = decode_allocations(body).expect("the answer decodes");
        assert_eq!(answer.index, 9);
        assert_eq!(answer.allocs.len(), 1);
        let alloc = &answer.allocs[0];
        assert_eq!((alloc.id.as_str(), alloc.alloc_modify_index), ("a1", 7));
        assert_eq!(alloc.metrics.score_meta_data[0].scores["binpack"], 0.25);
        assert_eq!(answer.undecodable, vec!["a2".to_owned()]);
    }

    #[test]
    fn stubs_of_unchanged_allocations_are_read_beside_whole_ones() {
        let body = br#"{"Allocs":[{"ID":"a3","AllocModifyIndex":12}],"Index":14,
            "Unchanged":[{"ID":"a1","AllocModifyIndex":7,"DesiredStatus":"run"},
                         {"ID":"a2","AllocModifyIndex":9,"DesiredStatus":"stop"}]}"#;
        let answer = decode_allocations(body).expect("the answer decodes");
        assert_eq!(answer.allocs.len(), 1);
        let stub = |id: &str, index: u64, desired: &str| AllocStub {
            id: id.to_owned(),
            alloc_modify_index: index,
            desired_status: desired.to_owned(),
        };
        assert_eq!(
            answer.unchanged,
            vec![stub("a1", 7, "run"), stub("a2", 9, "stop")]
        );
        // Beside an allocation that does not decode, the stubs are still read.
        let body = br#"{"Allocs":[{"ID":"a3","CreateIndex":"x"}],"Index":14,
            "Unchanged":[{"ID":"a1","AllocModifyIndex":7,"DesiredStatus":"run"}]}"#;
        let answer = decode_allocations(body).expect("the answer decodes");
        assert_eq!(answer.undecodable, vec!["a3".to_owned()]);
        assert_eq!(answer.unchanged, vec![stub("a1", 7, "run")]);
    }

    #[test]
    fn an_answer_without_allocations_is_empty() {
        let answer = decode_allocations(br#"{"Allocs":null,"Index":3}"#).expect("decodes");
        assert!(answer.allocs.is_empty() && answer.undecodable.is_empty());
        assert_eq!(answer.index, 3);
        assert!(decode_allocations(b"not json").is_err());
    }
}
