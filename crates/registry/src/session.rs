//! `/v1/session/*` endpoints (create, destroy, info, node, list, renew) and session
//! invalidation, which the TTL reaper, destroy and the catalog/health code (a check going
//! critical or deregistered, a node deregistered) all go through.
//!
//! Behaviour follows Consul (reference §1.1-1.4, §1.7) with this project's decisions: Consul's
//! 500s for invalid input are 400s (`Error::Invalid`); a malformed UUID on destroy is a 400; info
//! of an unknown or malformed id is 200 `[]`; renew of one is 404 `Session id '<id>' not found`;
//! sessions carry a namespace (`ns`, `X-Registry-Namespace`, the token's, `default`) and `ns=*`
//! spans all of them on node and list.
//!
//! Invariants:
//! - Create validates the node and every check against the catalog and commits only if none of
//!   them changed since it read them (compare-and-swap on their mod revisions), so a check that
//!   goes critical concurrently either is seen by create or invalidates the new session.
//! - Invalidation is one transaction: delete the session, apply its Behavior to every key it
//!   holds (release: clear `Session`, keep value and `LockIndex`; delete: remove the key), and
//!   put a lock-delay of `min(LockDelay, 60 s)` on each such key. An acquire that commits
//!   between invalidation's read and its transaction is caught by a follow-up pass (acquire
//!   cannot succeed once the session record is gone).
//! - The index of info, node and list is the range revision of `registry/sessions/`: it moves
//!   only when a session is created or invalidated (renew writes nothing there).

use std::time::Duration;

use axum::extract::{Path, State as StateExtractor};
use http::HeaderMap;
use http_kit::{RawBody, Shutdown, parse_go_duration};
use serde::Serialize;
use serde_json::Value;
use storage::{Compare, KeyValue, Op, Txn};

use crate::acl::{Access, Authz, Resource};
use crate::meta::{Indexed, Namespace, QueryParams, resolve_namespace};
use crate::store::catalog::{self as catalog_store, CheckStatus, NodeRecord};
use crate::store::kv::{self as kv_store, KvRecord, LockDelayRecord};
use crate::store::sessions::{
    self, Behavior, RECORD_VERSION, ServiceCheckRef, SessionLockRecord, SessionRecord,
};
use crate::store::{decode, encode};
use crate::tasks::ttl_reaper::{self, Renewal};
use crate::{Error, SERF_HEALTH_CHECK, State};

type Json<T> = http_kit::ApiJson<T, Error>;

/// Compare-and-swap loops give up after this many lost races (`Error::Contention`).
pub(crate) const MAX_ATTEMPTS: usize = 64;

/// The default lock-delay (Consul's).
const DEFAULT_LOCK_DELAY: Duration = Duration::from_secs(15);

/// A lock-delay is capped at this when applied (Consul's `MaxLockDelay`).
const MAX_LOCK_DELAY: Duration = Duration::from_secs(60);

/// A numeric or parsed LockDelay below this many nanoseconds is taken as seconds.
const LOCK_DELAY_MIN_THRESHOLD_NS: u64 = 1_000;

/// The longest session TTL (Consul's `SessionTTLMax`).
const SESSION_TTL_MAX: Duration = Duration::from_secs(24 * 3600);

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
    let namespace = resolve_namespace(&query, &headers, &authz)?;
    let namespace = namespace.single()?.to_owned();
    let request = CreateRequest::decode(&body.bytes)?;
    let mut record = request.into_record(&state, namespace)?;
    authz.check(Resource::Session, &record.node, Access::Write)?;
    let id = create(&state, &mut record).await?;
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
    let namespace = resolve_namespace(&query, &headers, &authz)?;
    let namespace = namespace.single()?;
    let id = parse_session_id(&raw_id).ok_or_else(|| {
        Error::BadRequest(format!(
            "Invalid session ID '{raw_id}': must be a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)"
        ))
    })?;
    let Some((record, _)) = load_session(&state, &id).await? else {
        return Ok(Json::new(true));
    };
    if record.namespace != namespace {
        return Ok(Json::new(true));
    }
    authz.check(Resource::Session, &record.node, Access::Write)?;
    invalidate_session(&state, &id).await?;
    Ok(Json::new(true))
}

pub(crate) async fn info_session(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    Path(raw_id): Path<String>,
    query: QueryParams,
    headers: HeaderMap,
    Shutdown(shutdown): Shutdown,
) -> Result<Indexed<Vec<SessionView>>, Error> {
    let options = query.options(&state)?;
    let namespace = resolve_namespace(&query, &headers, &authz)?;
    let namespace = namespace.single()?.to_owned();
    let id = parse_session_id(&raw_id);
    let ((sessions, filtered), index) = http_kit::blocking::block(
        state.storage(),
        sessions::sessions_range(),
        &options.blocking,
        Some(&shutdown),
        || async {
            let index = sessions_index(&state).await?;
            let Some(id) = &id else {
                return Ok(((Vec::new(), false), index));
            };
            let found = load_session(&state, id).await?;
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
            Ok::<_, Error>(((out, filtered), index))
        },
    )
    .await?;
    Ok(Indexed::new(index, sessions).filtered(filtered))
}

pub(crate) async fn node_sessions(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    Path(node): Path<String>,
    query: QueryParams,
    headers: HeaderMap,
    Shutdown(shutdown): Shutdown,
) -> Result<Indexed<Vec<SessionView>>, Error> {
    let options = query.options(&state)?;
    let namespace = resolve_namespace(&query, &headers, &authz)?;
    let node_name = resolve_node_name(&state, &node).await?;
    let ((sessions, filtered), index) = http_kit::blocking::block(
        state.storage(),
        sessions::sessions_range(),
        &options.blocking,
        Some(&shutdown),
        || {
            list_matching(&state, &authz, &namespace, |record| {
                record.node == node || node_name.as_deref() == Some(record.node.as_str())
            })
        },
    )
    .await?;
    Ok(Indexed::new(index, sessions).filtered(filtered))
}

pub(crate) async fn list_sessions(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    query: QueryParams,
    headers: HeaderMap,
    Shutdown(shutdown): Shutdown,
) -> Result<Indexed<Vec<SessionView>>, Error> {
    let options = query.options(&state)?;
    let namespace = resolve_namespace(&query, &headers, &authz)?;
    let ((sessions, filtered), index) = http_kit::blocking::block(
        state.storage(),
        sessions::sessions_range(),
        &options.blocking,
        Some(&shutdown),
        || list_matching(&state, &authz, &namespace, |_| true),
    )
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
    let namespace = resolve_namespace(&query, &headers, &authz)?;
    let namespace = namespace.single()?;
    let not_found = || Error::NotFound(format!("Session id '{raw_id}' not found"));
    let id = parse_session_id(&raw_id).ok_or_else(not_found)?;
    let (record, kv) = load_session(&state, &id).await?.ok_or_else(not_found)?;
    if record.namespace != namespace {
        return Err(not_found());
    }
    authz.check(Resource::Session, &record.node, Access::Write)?;
    if record.ttl_ms > 0 {
        let now_ms = state.clock().now_ms();
        match state.session_timers().renew(&id, now_ms) {
            Renewal::Unknown => return Err(not_found()),
            Renewal::Renewed { persist, .. } => {
                if persist {
                    ttl_reaper::persist_deadline(&state, &id).await?;
                }
            }
        }
    }
    Ok(Json::new(vec![SessionView::new(record, &kv)]))
}

// ---------------------------------------------------------------------------------------------
// Reads

/// The index of session info, node and list.
async fn sessions_index(state: &State) -> Result<u64, Error> {
    Ok(state
        .storage()
        .range_revision(sessions::sessions_range())
        .await?)
}

/// The session `id` (already normalized), with its storage entry.
pub(crate) async fn load_session(
    state: &State,
    id: &str,
) -> Result<Option<(SessionRecord, KeyValue)>, Error> {
    match state.storage().get(&sessions::session_key(id)).await? {
        Some(kv) => Ok(Some((decode(&kv.key, &kv.value)?, kv))),
        None => Ok(None),
    }
}

/// Every session in `namespace` that `keep` accepts and the token may read, with the index and
/// whether the ACL dropped some.
async fn list_matching(
    state: &State,
    authz: &Authz,
    namespace: &Namespace,
    keep: impl Fn(&SessionRecord) -> bool,
) -> Result<((Vec<SessionView>, bool), u64), Error> {
    let index = sessions_index(state).await?;
    let scanned = state
        .storage()
        .scan(sessions::sessions_range(), None)
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
    Ok(((out, filtered), index))
}

/// `/v1/session/node/:node` takes a name or a node id: the name of the node whose id is
/// `node`, if there is one.
async fn resolve_node_name(state: &State, node: &str) -> Result<Option<String>, Error> {
    if uuid::Uuid::try_parse(node).is_err() {
        return Ok(None);
    }
    let nodes: Vec<catalog_store::Stored<NodeRecord>> =
        catalog_store::scan_records(state.storage(), catalog_store::nodes_range()).await?;
    Ok(nodes
        .into_iter()
        .find(|stored| stored.record.id.eq_ignore_ascii_case(node))
        .map(|stored| stored.record.node))
}

/// A session id in its canonical form (lowercase, hyphenated), or `None` if `raw` is not one.
pub(crate) fn parse_session_id(raw: &str) -> Option<String> {
    if raw.len() != 36 {
        return None;
    }
    uuid::Uuid::try_parse(raw)
        .ok()
        .map(|uuid| uuid.hyphenated().to_string())
}

// ---------------------------------------------------------------------------------------------
// Create

/// A JSON field as Go's decoder sees it: absent, `null`, or a value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum Field<T> {
    #[default]
    Absent,
    Null,
    Value(T),
}

/// The create body, decoded the way Consul's Go decoder would: keys case-insensitively, unknown
/// keys ignored, `null` leaving a scalar at its default.
#[derive(Debug, Default)]
struct CreateRequest {
    name: Option<String>,
    node: Option<String>,
    lock_delay_ns: Option<u64>,
    behavior: Option<String>,
    ttl: Option<String>,
    checks: Field<Vec<String>>,
    node_checks: Field<Vec<String>>,
    service_checks: Field<Vec<ServiceCheckRef>>,
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

/// Go's `time.ParseDuration` error text for `input`, from http-kit's parser's error.
pub(crate) fn go_duration_error(input: &str, err: &str) -> String {
    if err.ends_with(": missing unit") {
        format!("time: missing unit in duration {input:?}")
    } else if let Some(at) = err.find(": unknown unit ") {
        let unit = &err[at + ": unknown unit ".len()..];
        format!("time: unknown unit {unit} in duration {input:?}")
    } else {
        format!("time: invalid duration {input:?}")
    }
}

/// Formats a duration as Go's `time.Duration.String` does (`10s`, `1m30s`, `24h0m0s`,
/// `100ms`).
pub(crate) fn go_duration_string(duration: Duration) -> String {
    fn with_fraction(value: u128, unit: u128, digits: usize) -> String {
        let whole = value / unit;
        let fraction = value % unit;
        if fraction == 0 {
            whole.to_string()
        } else {
            let fraction = format!("{fraction:0digits$}");
            format!("{whole}.{}", fraction.trim_end_matches('0'))
        }
    }
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}\u{b5}s", with_fraction(nanos, 1_000, 3));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", with_fraction(nanos, 1_000_000, 6));
    }
    const HOUR: u128 = 3_600_000_000_000;
    const MINUTE: u128 = 60_000_000_000;
    let hours = nanos / HOUR;
    let minutes = nanos % HOUR / MINUTE;
    let seconds = nanos % MINUTE;
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&with_fraction(seconds, 1_000_000_000, 9));
    out.push('s');
    out
}

/// Consul's LockDelay: a Go duration string or a number of nanoseconds; below 1000 ns it is
/// taken as seconds (`15` and `"15ns"` both mean 15 s).
fn parse_lock_delay(value: &Value) -> Result<Option<u64>, Error> {
    let nanos = match value {
        Value::Null => return Ok(None),
        Value::String(text) => parse_go_duration(text)
            .map_err(|err| decode_failed(go_duration_error(text, &err)))?
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

impl CreateRequest {
    fn decode(bytes: &[u8]) -> Result<CreateRequest, Error> {
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

    /// Applies Consul's defaults, its Checks/NodeChecks fixup and its validation.
    fn into_record(self, state: &State, namespace: String) -> Result<SessionRecord, Error> {
        let config = state.config();
        let node = self.node.unwrap_or_else(|| config.node_name.clone());
        if node.is_empty() {
            return Err(Error::Invalid("Must provide Node".to_owned()));
        }
        let behavior_text = self.behavior.unwrap_or_default();
        let behavior = Behavior::parse(&behavior_text)
            .ok_or_else(|| Error::Invalid(format!("Invalid Behavior setting '{behavior_text}'")))?;
        let ttl = self.ttl.unwrap_or_default();
        let ttl_ms = if ttl.is_empty() {
            0
        } else {
            let parsed = parse_go_duration(&ttl).map_err(|err| {
                Error::Invalid(format!(
                    "Session TTL '{ttl}' invalid: {}",
                    go_duration_error(&ttl, &err)
                ))
            })?;
            if !parsed.is_zero() && (parsed < config.session_ttl_min || parsed > SESSION_TTL_MAX) {
                return Err(Error::Invalid(format!(
                    "Invalid Session TTL '{}', must be between [{}={}]",
                    parsed.as_nanos(),
                    go_duration_string(config.session_ttl_min),
                    go_duration_string(SESSION_TTL_MAX)
                )));
            }
            // Whole milliseconds, rounded up (never early).
            u64::try_from(parsed.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
        };

        // Defaults before decoding are Checks = NodeChecks = [serfHealth]; a `null` sets nil.
        let default_checks = || vec![SERF_HEALTH_CHECK.to_owned()];
        let mut checks = match self.checks {
            Field::Absent => Some(default_checks()),
            Field::Null => None,
            Field::Value(list) => Some(list),
        };
        let mut node_checks = match self.node_checks {
            Field::Absent => Some(default_checks()),
            Field::Null => None,
            Field::Value(list) => Some(list),
        };
        // Consul's fixupEmptySessionChecks.
        if checks.as_ref().is_none_or(Vec::is_empty) {
            node_checks = Some(Vec::new());
        } else if checks.as_deref() == Some(&[SERF_HEALTH_CHECK.to_owned()][..])
            || node_checks.as_ref().is_none_or(Vec::is_empty)
        {
            // Checks equal to the default defer to NodeChecks; an empty NodeChecks drops the
            // Checks too (Consul drops them even when they were given).
            checks = None;
        }
        let service_checks = match self.service_checks {
            Field::Value(list) => list,
            Field::Absent | Field::Null => Vec::new(),
        };
        Ok(SessionRecord {
            version: RECORD_VERSION,
            id: String::new(),
            namespace,
            name: self.name.unwrap_or_default(),
            node,
            lock_delay_ns: self
                .lock_delay_ns
                .unwrap_or(DEFAULT_LOCK_DELAY.as_nanos() as u64),
            behavior,
            ttl,
            ttl_ms,
            checks: checks.filter(|list| !list.is_empty()),
            node_checks: node_checks.unwrap_or_default(),
            service_checks,
            expires_at_ms: None,
        })
    }
}

/// Validates the session's node and checks against the catalog and stores it; returns its id.
async fn create(state: &State, record: &mut SessionRecord) -> Result<String, Error> {
    let storage = state.storage();
    let check_ids: Vec<String> = record.check_ids().into_iter().map(str::to_owned).collect();
    for _ in 0..MAX_ATTEMPTS {
        // A fresh id per attempt: an id collision (Missing fails) retries with another, as
        // Consul does.
        let id = uuid::Uuid::new_v4().hyphenated().to_string();
        record.id.clone_from(&id);
        let key = sessions::session_key(&id);
        let node = catalog_store::load_node(storage, &record.node)
            .await?
            .ok_or_else(|| Error::Invalid("Missing node registration".to_owned()))?;
        let mut txn = Txn::new()
            .when(Compare::Missing(key.clone()))
            .when(Compare::ModRevision(
                catalog_store::node_key(&record.node),
                node.modify_index,
            ));
        for check_id in &check_ids {
            let check = catalog_store::load_check(storage, &record.node, check_id)
                .await?
                .ok_or_else(|| {
                    Error::Invalid(format!("Missing check '{check_id}' registration"))
                })?;
            if check.record.status == CheckStatus::Critical {
                return Err(Error::Invalid(format!(
                    "Check '{check_id}' is in critical state"
                )));
            }
            txn = txn.when(Compare::ModRevision(
                catalog_store::check_key(&record.node, check_id),
                check.modify_index,
            ));
        }
        let now_ms = state.clock().now_ms();
        record.expires_at_ms = (record.ttl_ms > 0).then(|| now_ms.saturating_add(record.ttl_ms));
        let value = encode(&key, &*record)?;
        txn = txn.then(Op::Put {
            key: key.clone(),
            value,
        });
        // Armed before the commit so that a renew right after the create finds it.
        if let Some(deadline_ms) = record.expires_at_ms {
            state.session_timers().arm(&id, record.ttl_ms, deadline_ms);
        }
        let result = storage.txn(txn).await;
        match result {
            Ok(result) if result.succeeded => return Ok(id),
            Ok(_) => state.session_timers().disarm(&id),
            Err(err) => {
                state.session_timers().disarm(&id);
                return Err(err.into());
            }
        }
    }
    Err(Error::Contention)
}

// ---------------------------------------------------------------------------------------------
// Invalidation

/// Invalidates session `id` (a lowercase UUID): deletes it, applies its Behavior to every key it
/// holds and puts a lock-delay on them, in one transaction (see the module docs). Invalidating
/// a session that does not exist is not an error.
pub(crate) async fn invalidate_session(state: &State, id: &str) -> Result<(), Error> {
    let storage = state.storage();
    let session_key = sessions::session_key(id);
    for _ in 0..MAX_ATTEMPTS {
        let Some((record, kv)) = load_session(state, id).await? else {
            state.session_timers().disarm(id);
            // A previous invalidation may have left keys acquired in its race window.
            return release_leftovers(state, id, Behavior::Release, 0).await;
        };
        let now_ms = state.clock().now_ms();
        let delay_ms = lock_delay_ms(record.lock_delay_ns);
        let mut txn = Txn::new()
            .when(Compare::ModRevision(session_key.clone(), kv.mod_revision))
            .then(Op::Delete {
                key: session_key.clone(),
            })
            .then(Op::Delete {
                key: sessions::deadline_key(id),
            });
        txn = held_keys_txn(state, id, record.behavior, now_ms, delay_ms, txn).await?;
        if storage.txn(txn).await?.succeeded {
            state.session_timers().disarm(id);
            tracing::debug!(message = "Session invalidated.", session = %id);
            return release_leftovers(state, id, record.behavior, delay_ms).await;
        }
    }
    Err(Error::Contention)
}

/// Invalidates every session bound to check `check_id` of `node` (the check went critical or
/// was deregistered).
pub(crate) async fn invalidate_sessions_for_check(
    state: &State,
    node: &str,
    check_id: &str,
) -> Result<(), Error> {
    for id in sessions_where(state, |record| {
        record.node == node && record.check_ids().contains(&check_id)
    })
    .await?
    {
        invalidate_session(state, &id).await?;
    }
    Ok(())
}

/// Invalidates every session of `node` (the node was deregistered).
pub(crate) async fn invalidate_sessions_for_node(state: &State, node: &str) -> Result<(), Error> {
    for id in sessions_where(state, |record| record.node == node).await? {
        invalidate_session(state, &id).await?;
    }
    Ok(())
}

async fn sessions_where(
    state: &State,
    keep: impl Fn(&SessionRecord) -> bool,
) -> Result<Vec<String>, Error> {
    let scanned = state
        .storage()
        .scan(sessions::sessions_range(), None)
        .await?;
    let mut ids = Vec::new();
    for kv in scanned.kvs {
        let record: SessionRecord = decode(&kv.key, &kv.value)?;
        if keep(&record) {
            ids.push(record.id);
        }
    }
    Ok(ids)
}

/// `min(lock_delay, 60 s)` in whole milliseconds, rounded up.
fn lock_delay_ms(lock_delay_ns: u64) -> u64 {
    let capped = lock_delay_ns.min(MAX_LOCK_DELAY.as_nanos() as u64);
    capped.div_ceil(1_000_000)
}

/// Adds to `txn` what invalidating session `id` does to the keys its lock records name: the
/// Behavior, the lock-delay, and the removal of the lock records. Every KV key involved is
/// compared on its mod revision, so a concurrent acquire, release or write retries the caller.
async fn held_keys_txn(
    state: &State,
    id: &str,
    behavior: Behavior,
    now_ms: u64,
    delay_ms: u64,
    mut txn: Txn,
) -> Result<Txn, Error> {
    let storage = state.storage();
    let locks = storage
        .scan(sessions::session_locks_range(id), None)
        .await?;
    for lock in locks.kvs {
        txn = txn.then(Op::Delete {
            key: lock.key.clone(),
        });
        let Some((namespace, key)) = sessions::parse_session_lock_key(id, &lock.key) else {
            continue;
        };
        let kv_key = kv_store::kv_key(&namespace, &key);
        let entry = storage.get(&kv_key).await?;
        txn = txn.when(Compare::ModRevision(
            kv_key.clone(),
            entry.as_ref().map_or(0, |kv| kv.mod_revision),
        ));
        let Some(entry) = entry else { continue };
        let mut record: KvRecord = decode(&entry.key, &entry.value)?;
        if record.session.as_deref() != Some(id) {
            // Stale lock record: the key was deleted, released or re-locked since.
            continue;
        }
        match behavior {
            Behavior::Release => {
                record.session = None;
                let value = encode(&kv_key, &record)?;
                txn = txn.then(Op::Put { key: kv_key, value });
            }
            Behavior::Delete => txn = txn.then(Op::Delete { key: kv_key }),
        }
        if delay_ms > 0 {
            let delay_key = kv_store::lock_delay_key(&namespace, &key);
            let value = encode(
                &delay_key,
                &LockDelayRecord {
                    version: kv_store::RECORD_VERSION,
                    until_ms: now_ms.saturating_add(delay_ms),
                },
            )?;
            txn = txn.then(Op::Put {
                key: delay_key,
                value,
            });
        }
    }
    Ok(txn)
}

/// After the session record is gone no acquire can succeed, so lock records still present were
/// written by acquires that raced the invalidation: apply the Behavior to them too.
async fn release_leftovers(
    state: &State,
    id: &str,
    behavior: Behavior,
    delay_ms: u64,
) -> Result<(), Error> {
    let storage = state.storage();
    for _ in 0..MAX_ATTEMPTS {
        let remaining = storage
            .scan(sessions::session_locks_range(id), Some(1))
            .await?;
        if remaining.kvs.is_empty() {
            return Ok(());
        }
        let now_ms = state.clock().now_ms();
        let txn = held_keys_txn(state, id, behavior, now_ms, delay_ms, Txn::new()).await?;
        storage.txn(txn).await?;
    }
    Err(Error::Contention)
}

/// The lock record put when session `id` acquires `key`.
pub(crate) fn lock_record_op(id: &str, namespace: &str, key: &str) -> Result<Op, Error> {
    let lock_key = sessions::session_lock_key(id, namespace, key);
    let value = encode(
        &lock_key,
        &SessionLockRecord {
            version: RECORD_VERSION,
        },
    )?;
    Ok(Op::Put {
        key: lock_key,
        value,
    })
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use storage::{MemStorage, Storage};

    use super::*;
    use crate::{Clock, Config, ManualClock};

    async fn test_state() -> (State, Arc<MemStorage>, ManualClock) {
        let storage = Arc::new(MemStorage::new());
        let clock = ManualClock::new(1_000_000);
        let mut config = Config::new(SocketAddr::from(([127, 0, 0, 1], 8500)));
        config.node_name = "n1".to_owned();
        let state = State::open(
            Arc::clone(&storage) as Arc<dyn Storage>,
            config,
            Arc::new(clock.clone()),
        )
        .await
        .unwrap();
        (state, storage, clock)
    }

    /// Writes what a successful acquire by `id` of `key` writes.
    async fn fake_acquire(storage: &MemStorage, id: &str, key: &str) {
        let kv_key = kv_store::kv_key("default", key);
        let record = KvRecord {
            version: kv_store::RECORD_VERSION,
            flags: 0,
            value: None,
            session: Some(id.to_owned()),
            lock_index: 1,
        };
        let txn = Txn::new()
            .then(Op::Put {
                value: encode(&kv_key, &record).unwrap(),
                key: kv_key,
            })
            .then(lock_record_op(id, "default", key).unwrap());
        storage.txn(txn).await.unwrap();
    }

    async fn kv_session(storage: &MemStorage, key: &str) -> Option<Option<String>> {
        let kv = storage
            .get(&kv_store::kv_key("default", key))
            .await
            .unwrap()?;
        Some(decode::<KvRecord>(&kv.key, &kv.value).unwrap().session)
    }

    /// An acquire that commits after invalidation read the session's lock records but before
    /// its transaction leaves a lock record behind; the follow-up pass (and any later
    /// invalidation of the gone session) applies the Behavior to it.
    #[tokio::test]
    async fn invalidation_handles_keys_acquired_in_its_race_window() {
        let (state, storage, clock) = test_state().await;
        let id = "0f0e0d0c-0b0a-4908-8706-050403020100";
        // The race outcome: the session record is gone, its acquire committed anyway.
        fake_acquire(&storage, id, "late").await;
        release_leftovers(&state, id, Behavior::Delete, 5_000)
            .await
            .unwrap();
        assert_eq!(kv_session(&storage, "late").await, None, "deleted");
        let delay = storage
            .get(&kv_store::lock_delay_key("default", "late"))
            .await
            .unwrap()
            .unwrap();
        let delay: LockDelayRecord = decode(&delay.key, &delay.value).unwrap();
        assert_eq!(delay.until_ms, clock.now_ms() + 5_000);
        assert!(
            storage
                .scan(sessions::session_locks_range(id), None)
                .await
                .unwrap()
                .kvs
                .is_empty()
        );

        // Invalidating a session that is already gone still releases what it holds.
        fake_acquire(&storage, id, "later").await;
        invalidate_session(&state, id).await.unwrap();
        assert_eq!(kv_session(&storage, "later").await, Some(None), "released");
    }

    /// A stale lock record (the key was re-locked by another session) is dropped without
    /// touching the key.
    #[tokio::test]
    async fn invalidation_ignores_stale_lock_records() {
        let (state, storage, _clock) = test_state().await;
        let id = "0f0e0d0c-0b0a-4908-8706-050403020100";
        let other = "1f0e0d0c-0b0a-4908-8706-050403020100";
        fake_acquire(&storage, id, "k").await;
        fake_acquire(&storage, other, "k").await;
        invalidate_session(&state, id).await.unwrap();
        assert_eq!(
            kv_session(&storage, "k").await,
            Some(Some(other.to_owned()))
        );
    }

    #[test]
    fn go_duration_strings_match_go() {
        let cases = [
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(24 * 3600), "24h0m0s"),
            (Duration::from_secs(180), "3m0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(100), "100ms"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(20), "20ns"),
            (Duration::ZERO, "0s"),
        ];
        for (duration, expected) in cases {
            assert_eq!(go_duration_string(duration), expected);
        }
    }

    #[test]
    fn go_duration_errors_match_go() {
        let err = parse_go_duration("10").unwrap_err();
        assert_eq!(
            go_duration_error("10", &err),
            r#"time: missing unit in duration "10""#
        );
        let err = parse_go_duration("5x").unwrap_err();
        assert_eq!(
            go_duration_error("5x", &err),
            r#"time: unknown unit "x" in duration "5x""#
        );
        let err = parse_go_duration("soon").unwrap_err();
        assert_eq!(
            go_duration_error("soon", &err),
            r#"time: invalid duration "soon""#
        );
    }

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

    #[test]
    fn session_ids_must_be_hyphenated_uuids() {
        assert_eq!(
            parse_session_id("ADF4238A-882B-9DDC-4A9D-5B6758E4159E").as_deref(),
            Some("adf4238a-882b-9ddc-4a9d-5b6758e4159e")
        );
        assert_eq!(parse_session_id(&"1".repeat(36)), None);
        assert_eq!(parse_session_id("adf4238a882b9ddc4a9d5b6758e4159e"), None);
        assert_eq!(parse_session_id("x"), None);
    }

    #[test]
    fn lock_delay_is_capped_at_a_minute() {
        assert_eq!(lock_delay_ms(15_000_000_000), 15_000);
        assert_eq!(lock_delay_ms(600_000_000_000), 60_000);
        assert_eq!(lock_delay_ms(1), 1);
        assert_eq!(lock_delay_ms(0), 0);
    }
}
