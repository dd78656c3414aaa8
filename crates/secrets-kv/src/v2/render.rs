//! The JSON shapes kv version 2 answers with, as hvac and the Vault CLI read them.
//!
//! Where it sits: called by the handlers; the core wraps a normal [`Response`] in Vault's
//! envelope itself. The 404s that carry a body (a deleted or destroyed version, a path that is
//! not a kv v2 path) are upstream's `RespondWithStatusCode`: the whole envelope, written here
//! as a raw response because it is not a 200.
//!
//! Invariants: times are RFC 3339 with nanoseconds in UTC (Go's `RFC3339Nano`), `""` when
//! unset; an empty `custom_metadata` is `null` (upstream's protobuf map round trip);
//! durations are Go's `Duration.String()`.

use std::collections::BTreeMap;

use secrets_sdk::{Data, RawResponse, Response};
use serde_json::{Value, json};

use crate::v2::store::VersionMetadata;

/// A stored time (Unix nanoseconds) as upstream shows it.
pub(super) fn time(nanos: Option<i64>) -> Value {
    Value::String(
        nanos
            .map(stdx::time::format_rfc3339_nanos)
            .unwrap_or_default(),
    )
}

/// Whole seconds as Go's `Duration.String()` (`0s`, `30m0s`, `-1s`).
pub(super) fn seconds(secs: i64) -> Value {
    Value::String(stdx::duration::format_go(
        secs.saturating_mul(1_000_000_000),
    ))
}

pub(super) fn custom_metadata(metadata: &BTreeMap<String, String>) -> Value {
    if metadata.is_empty() {
        Value::Null
    } else {
        json!(metadata)
    }
}

/// One version's metadata as `data/` and `subkeys/` answer it.
pub(super) fn version_metadata(
    number: u64,
    version: &VersionMetadata,
    custom: &BTreeMap<String, String>,
) -> Value {
    json!({
        "version": number,
        "created_time": time(version.created_time),
        "deletion_time": time(version.deletion_time),
        "destroyed": version.destroyed,
        "custom_metadata": custom_metadata(custom),
    })
}

/// `value` (a JSON object) as response data.
pub(super) fn object(value: Value) -> Data {
    match value {
        Value::Object(map) => map,
        _ => Data::new(),
    }
}

/// A 404 whose body is Vault's envelope around `data` and `warnings` (upstream's
/// `RespondWithStatusCode(resp, req, 404)`). The engine does not know the request id; the
/// body's `request_id` is empty.
pub(super) fn not_found_with(data: Option<Data>, warnings: &[&str]) -> Response {
    let body = json!({
        "request_id": "",
        "lease_id": "",
        "renewable": false,
        "lease_duration": 0,
        "data": data.map_or(Value::Null, Value::Object),
        "wrap_info": null,
        "warnings": if warnings.is_empty() { Value::Null } else { json!(warnings) },
        "auth": null,
    });
    raw_not_found(body.to_string().into_bytes())
}

/// A 404 with an empty body (upstream's `RespondWithStatusCode(nil, req, 404)`).
pub(super) fn not_found_empty() -> Response {
    raw_not_found(Vec::new())
}

fn raw_not_found(body: Vec<u8>) -> Response {
    Response {
        raw: Some(RawResponse {
            status: 404,
            content_type: "application/json".to_owned(),
            body,
        }),
        ..Response::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations_use_gos_spellings() {
        assert_eq!(time(None), json!(""));
        assert_eq!(
            time(Some(1_714_557_600_123_456_789)),
            json!("2024-05-01T10:00:00.123456789Z")
        );
        assert_eq!(
            time(Some(1_714_557_600_000_000_000)),
            json!("2024-05-01T10:00:00Z")
        );
        assert_eq!(seconds(0), json!("0s"));
        assert_eq!(seconds(1800), json!("30m0s"));
        assert_eq!(seconds(-1), json!("-1s"));
    }

    #[test]
    fn a_not_found_with_data_is_the_whole_envelope() {
        let response = not_found_with(Some(object(json!({"data": null}))), &[]);
        let raw = response.raw.unwrap();
        assert_eq!(
            (raw.status, raw.content_type.as_str()),
            (404, "application/json")
        );
        let body: Value = serde_json::from_slice(&raw.body).unwrap();
        assert_eq!(
            body,
            json!({"request_id": "", "lease_id": "", "renewable": false, "lease_duration": 0,
                   "data": {"data": null}, "wrap_info": null, "warnings": null, "auth": null})
        );
    }
}
