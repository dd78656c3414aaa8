//! `/v1/session/*` endpoints: create, destroy, info, node, list, renew.
//!
//! Behaviour follows Consul (docs/design.md §U7) with this project's decisions: Consul's
//! 500s for invalid input are 400s (`Error::Invalid`); a malformed UUID on destroy is a 400; info
//! of an unknown or malformed id is 200 `[]`; renew of one is 404 `Session id '<id>' not found`;
//! sessions carry a namespace (`ns`, `X-Registry-Namespace`, the token's, `default`) and `ns=*`
//! spans all of them on node and list.
//!
//! Where it sits: handlers decode the create body as Consul's Go decoder would (its error
//! messages included), authorize, and call `domain/sessions.rs` (create, invalidation) and
//! `domain/session_timers.rs` (renew); reads render `store/sessions.rs` records.
//!
//! Invariant: the index of node and list is the range revision of `registry/sessions/`, that
//! of info the revision of the one session's record (computing a range's revision visits the
//! range, so info stays O(1) in the number of sessions): either moves only when a session is
//! created or invalidated (renew writes nothing there).

use axum::extract::{Path, State as StateExtractor};
use http::HeaderMap;
use http_kit::RawBody;
use serde::Serialize;
use serde_json::Value;
use storage::{KeyRange, KeyValue};

use crate::acl::{Access, Authz, Resource};
use crate::domain::session_timers::{self, Renewal};
use crate::domain::sessions::{self, CreateRequest, Field};
use crate::meta::{Indexed, Namespace, QueryParams, resolve_namespace};
use crate::store::catalog::{self as catalog_store, NodeRecord};
use crate::store::sessions::{self as sessions_store, ServiceCheckRef, SessionRecord};
use crate::store::{Stored, decode, scan_records};
use crate::{Error, State};

type Json<T> = http_kit::ApiJson<T, Error>;

/// A numeric or parsed LockDelay below this many nanoseconds is taken as seconds.
const LOCK_DELAY_MIN_THRESHOLD_NS: u64 = 1_000;

// ---------------------------------------------------------------------------------------------
// Views

/// A session as Consul returns it.
#[derive(Debug, Serialize)]
pub(crate) struct SessionView {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "Node")]
    node: String,
    /// Nanoseconds.
    #[serde(rename = "LockDelay")]
    lock_delay: u64,
    #[serde(rename = "Behavior")]
    behavior: &'static str,
    #[serde(rename = "TTL")]
    ttl: String,
    #[serde(rename = "Namespace")]
    namespace: String,
    /// Deprecated; omitted when empty (Go's `omitempty`).
    #[serde(rename = "Checks", skip_serializing_if = "Option::is_none")]
    checks: Option<Vec<String>>,
    #[serde(rename = "NodeChecks")]
    node_checks: Vec<String>,
    #[serde(rename = "ServiceChecks")]
    service_checks: Option<Vec<ServiceCheckView>>,
    #[serde(rename = "CreateIndex")]
    create_index: u64,
    #[serde(rename = "ModifyIndex")]
    modify_index: u64,
}

#[derive(Debug, Serialize)]
struct ServiceCheckView {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "Namespace")]
    namespace: String,
}

impl SessionView {
    fn new(record: SessionRecord, kv: &KeyValue) -> SessionView {
        SessionView {
            id: record.id,
            name: record.name,
            node: record.node,
            lock_delay: record.lock_delay_ns,
            behavior: record.behavior.as_str(),
            ttl: record.ttl,
            namespace: record.namespace,
            checks: record.checks.filter(|checks| !checks.is_empty()),
            node_checks: record.node_checks,
            service_checks: (!record.service_checks.is_empty()).then(|| {
                record
                    .service_checks
                    .into_iter()
                    .map(|check| ServiceCheckView {
                        id: check.id,
                        namespace: check.namespace,
                    })
                    .collect()
            }),
            create_index: kv.create_revision,
            modify_index: kv.mod_revision,
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct CreatedView {
    #[serde(rename = "ID")]
    id: String,
}

// ---------------------------------------------------------------------------------------------
// Handlers

pub(crate) async fn missing_session() -> Error {
    Error::BadRequest("Missing session".to_owned())
}

pub(crate) async fn missing_node() -> Error {
    Error::BadRequest("Missing node name".to_owned())
}

pub(crate) async fn create_session(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    query: QueryParams,
    headers: HeaderMap,
    body: RawBody<Error>,
) -> Result<Json<CreatedView>, Error> {
    query.options(&state)?;
    let namespace = resolve_namespace(&query, &headers, authz.namespace())?;
    let namespace = namespace.single()?.to_owned();
    let request = decode_create(&body.bytes)?;
    let mut record = request.into_record(&state, namespace)?;
    authz.check(Resource::Session, &record.node, Access::Write)?;
    let id = sessions::create(&state, &mut record).await?;
    Ok(Json::new(CreatedView { id }))
}

pub(crate) async fn destroy_session(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    Path(raw_id): Path<String>,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Json<bool>, Error> {
    query.options(&state)?;
    let namespace = resolve_namespace(&query, &headers, authz.namespace())?;
    let namespace = namespace.single()?;
    let id = sessions::parse_session_id(&raw_id).ok_or_else(|| {
        Error::BadRequest(format!(
            "Invalid session ID '{raw_id}': must be a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)"
        ))
    })?;
    let Some((record, kv)) = sessions::load_session(&state, &id).await? else {
        return Ok(Json::new(true));
    };
    if record.namespace != namespace {
        return Ok(Json::new(true));
    }
    authz.check(Resource::Session, &record.node, Access::Write)?;
    sessions::invalidate_session_read(&state, &id, Some((record, kv))).await?;
    Ok(Json::new(true))
}

pub(crate) async fn info_session(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    Path(raw_id): Path<String>,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Indexed<Vec<SessionView>>, Error> {
    let options = query.options(&state)?;
    let namespace = resolve_namespace(&query, &headers, authz.namespace())?;
    let namespace = namespace.single()?.to_owned();
    let id = sessions::parse_session_id(&raw_id);
    // The index (and what a blocking query watches) is this session's own record, not every
    // session's: the index of a range is computed by visiting the range, which made one info
    // cost O(sessions). It still rises when the session is created, changed or destroyed.
    let range = match &id {
        Some(id) => KeyRange::key(sessions_store::session_key(id)),
        None => sessions_store::sessions_range(),
    };
    let ((sessions, filtered), index) = options
        .read(state.storage(), range, || async {
            let Some(id) = &id else {
                return Ok((Vec::new(), false));
            };
            let found = sessions::load_session(&state, id).await?;
            let mut filtered = false;
            let mut out = Vec::new();
            if let Some((record, kv)) = found
                && record.namespace == namespace
            {
                if authz.allows(Resource::Session, &record.node, Access::Read) {
                    out.push(SessionView::new(record, &kv));
                } else {
                    filtered = true;
                }
            }
            Ok((out, filtered))
        })
        .await?;
    Ok(Indexed::new(index, sessions).filtered(filtered))
}

pub(crate) async fn node_sessions(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    Path(node): Path<String>,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Indexed<Vec<SessionView>>, Error> {
    let options = query.options(&state)?;
    let namespace = resolve_namespace(&query, &headers, authz.namespace())?;
    let node_name = resolve_node_name(&state, &node).await?;
    let ((sessions, filtered), index) = options
        .read(state.storage(), sessions_store::sessions_range(), || {
            list_matching(&state, &authz, &namespace, |record| {
                record.node == node || node_name.as_deref() == Some(record.node.as_str())
            })
        })
        .await?;
    Ok(Indexed::new(index, sessions).filtered(filtered))
}

pub(crate) async fn list_sessions(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Indexed<Vec<SessionView>>, Error> {
    let options = query.options(&state)?;
    let namespace = resolve_namespace(&query, &headers, authz.namespace())?;
    let ((sessions, filtered), index) = options
        .read(state.storage(), sessions_store::sessions_range(), || {
            list_matching(&state, &authz, &namespace, |_| true)
        })
        .await?;
    Ok(Indexed::new(index, sessions).filtered(filtered))
}

pub(crate) async fn renew_session(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    Path(raw_id): Path<String>,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Json<Vec<SessionView>>, Error> {
    query.options(&state)?;
    let namespace = resolve_namespace(&query, &headers, authz.namespace())?;
    let namespace = namespace.single()?;
    let not_found = || Error::NotFound(format!("Session id '{raw_id}' not found"));
    let id = sessions::parse_session_id(&raw_id).ok_or_else(not_found)?;
    let (record, kv) = sessions::load_session(&state, &id)
        .await?
        .ok_or_else(not_found)?;
    if record.namespace != namespace {
        return Err(not_found());
    }
    authz.check(Resource::Session, &record.node, Access::Write)?;
    if record.ttl_ms > 0 {
        let now_ms = state.now_ms();
        match state.session_timers().renew(&id, now_ms) {
            Renewal::Unknown => return Err(not_found()),
            Renewal::Renewed { persist, .. } => {
                if persist {
                    session_timers::persist_deadline(&state, &id).await?;
                }
            }
        }
    }
    Ok(Json::new(vec![SessionView::new(record, &kv)]))
}

// ---------------------------------------------------------------------------------------------
// Reads

/// Every session in `namespace` that `keep` accepts and the token may read, and whether the ACL
/// dropped some.
async fn list_matching(
    state: &State,
    authz: &Authz,
    namespace: &Namespace,
    keep: impl Fn(&SessionRecord) -> bool,
) -> Result<(Vec<SessionView>, bool), Error> {
    let scanned = state
        .storage()
        .scan(sessions_store::sessions_range(), None)
        .await?;
    let mut filtered = false;
    let mut out = Vec::new();
    for kv in scanned.kvs {
        let record: SessionRecord = decode(&kv.key, &kv.value)?;
        if !namespace.contains(&record.namespace) || !keep(&record) {
            continue;
        }
        if authz.allows(Resource::Session, &record.node, Access::Read) {
            out.push(SessionView::new(record, &kv));
        } else {
            filtered = true;
        }
    }
    Ok((out, filtered))
}

/// `/v1/session/node/:node` takes a name or a node id: the name of the node whose id is
/// `node`, if there is one.
async fn resolve_node_name(state: &State, node: &str) -> Result<Option<String>, Error> {
    if uuid::Uuid::try_parse(node).is_err() {
        return Ok(None);
    }
    let nodes: Vec<Stored<NodeRecord>> =
        scan_records(state.storage(), catalog_store::nodes_range()).await?;
    Ok(nodes
        .into_iter()
        .find(|stored| stored.record.id.eq_ignore_ascii_case(node))
        .map(|stored| stored.record.node))
}

// ---------------------------------------------------------------------------------------------
// The create body

/// Decodes a create body the way Consul's Go decoder would: keys case-insensitively, unknown keys
/// ignored, `null` leaving a scalar at its default.
fn decode_create(bytes: &[u8]) -> Result<CreateRequest, Error> {
    let mut request = CreateRequest::default();
    // Consul decodes the body only when there is one.
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(request);
    }
    let value: Value = serde_json::from_slice(bytes).map_err(decode_failed)?;
    let fields = match value {
        Value::Object(fields) => fields,
        Value::Null => return Ok(request),
        other => {
            return Err(decode_failed(format!(
                "json: cannot unmarshal {} into Go value of type structs.Session",
                json_kind(&other)
            )));
        }
    };
    for (key, value) in &fields {
        match key.to_ascii_lowercase().as_str() {
            "name" => {
                if let Some(name) = string_field(value, "Name")? {
                    request.name = Some(name);
                }
            }
            "node" => {
                if let Some(node) = string_field(value, "Node")? {
                    request.node = Some(node);
                }
            }
            "behavior" => {
                if let Some(behavior) = string_field(value, "Behavior")? {
                    request.behavior = Some(behavior);
                }
            }
            "ttl" => {
                if let Some(ttl) = string_field(value, "TTL")? {
                    request.ttl = Some(ttl);
                }
            }
            "lockdelay" => {
                if let Some(nanos) = parse_lock_delay(value)? {
                    request.lock_delay_ns = Some(nanos);
                }
            }
            "checks" => request.checks = string_list(value, "Checks", "types.CheckID")?,
            "nodechecks" => request.node_checks = string_list(value, "NodeChecks", "string")?,
            "servicechecks" => request.service_checks = service_check_list(value)?,
            _ => {}
        }
    }
    Ok(request)
}

fn decode_failed(detail: impl std::fmt::Display) -> Error {
    Error::BadRequest(format!("Request decode failed: {detail}"))
}

/// Go's name for a JSON value's kind, as its decode errors spell it.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn wrong_type(value: &Value, field: &str, go_type: &str) -> Error {
    decode_failed(format!(
        "json: cannot unmarshal {} into Go struct field Session.{field} of type {go_type}",
        json_kind(value)
    ))
}

fn string_field(value: &Value, field: &str) -> Result<Option<String>, Error> {
    match value {
        Value::Null => Ok(None),
        Value::String(text) => Ok(Some(text.clone())),
        other => Err(wrong_type(other, field, "string")),
    }
}

fn string_list(value: &Value, field: &str, go_type: &str) -> Result<Field<Vec<String>>, Error> {
    match value {
        Value::Null => Ok(Field::Null),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => Ok(text.clone()),
                other => Err(wrong_type(other, field, go_type)),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Field::Value),
        other => Err(wrong_type(other, field, &format!("[]{go_type}"))),
    }
}

fn service_check_list(value: &Value) -> Result<Field<Vec<ServiceCheckRef>>, Error> {
    const FIELD: &str = "ServiceChecks";
    const GO_TYPE: &str = "structs.ServiceCheck";
    let items = match value {
        Value::Null => return Ok(Field::Null),
        Value::Array(items) => items,
        other => return Err(wrong_type(other, FIELD, "[]structs.ServiceCheck")),
    };
    let mut checks = Vec::with_capacity(items.len());
    for item in items {
        let Value::Object(fields) = item else {
            return Err(wrong_type(item, FIELD, GO_TYPE));
        };
        let mut check = ServiceCheckRef {
            id: String::new(),
            namespace: String::new(),
        };
        for (key, value) in fields {
            match key.to_ascii_lowercase().as_str() {
                "id" => check.id = string_field(value, "ServiceChecks.ID")?.unwrap_or_default(),
                "namespace" => {
                    check.namespace =
                        string_field(value, "ServiceChecks.Namespace")?.unwrap_or_default();
                }
                _ => {}
            }
        }
        checks.push(check);
    }
    Ok(Field::Value(checks))
}

/// Consul's LockDelay: a Go duration string or a number of nanoseconds; below 1000 ns it is
/// taken as seconds (`15` and `"15ns"` both mean 15 s).
fn parse_lock_delay(value: &Value) -> Result<Option<u64>, Error> {
    let nanos = match value {
        Value::Null => return Ok(None),
        Value::String(text) => stdx::duration::parse_go(text)
            .map_err(|err| decode_failed(err.go_message()))?
            .as_nanos()
            .min(u128::from(u64::MAX)) as u64,
        Value::Number(number) => {
            let Some(float) = number.as_f64().filter(|f| f.is_finite() && *f >= 0.0) else {
                return Err(decode_failed(format!(
                    "LockDelay {number} is not a non-negative duration"
                )));
            };
            // Go converts the float64 to a Duration, truncating.
            float.min(u64::MAX as f64) as u64
        }
        other => return Err(wrong_type(other, "LockDelay", "time.Duration")),
    };
    let nanos = if nanos < LOCK_DELAY_MIN_THRESHOLD_NS {
        nanos * 1_000_000_000
    } else {
        nanos
    };
    Ok(Some(nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_delay_small_values_are_seconds() {
        let parse = |json: &str| parse_lock_delay(&serde_json::from_str(json).unwrap());
        assert_eq!(parse("15").unwrap(), Some(15_000_000_000));
        assert_eq!(parse(r#""15s""#).unwrap(), Some(15_000_000_000));
        assert_eq!(parse(r#""20ns""#).unwrap(), Some(20_000_000_000));
        assert_eq!(parse("5000").unwrap(), Some(5_000));
        assert_eq!(parse("0").unwrap(), Some(0));
        assert_eq!(parse("null").unwrap(), None);
        assert!(parse(r#""20""#).is_err());
        assert!(parse("-1").is_err());
        assert!(parse("true").is_err());
    }
}
