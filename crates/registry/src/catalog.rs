//! `/v1/catalog/*` endpoints, the registration of this server's own node, and the catalog's
//! write operations that the agent endpoints and the check runner share.
//!
//! Where it sits: handlers decode Consul's request bodies case-insensitively (Go's
//! `encoding/json` matches field names without regard to case, and Consul also accepts
//! snake_case spellings; py-consul sends `node`, `serviceid`, `tagged_addresses`) with
//! [`decode_body`]; every write to nodes, services and checks goes through
//! [`apply_registration`], [`deregister`] or [`update_check_status`], which are single
//! compare-and-swap transactions over the records they read (retried a bounded number of
//! times), and which then invalidate the sessions bound to checks that went critical or
//! disappeared (`crate::session`).
//!
//! Invariants:
//! - A service or check is stored only while its node is stored; a check with a ServiceID only
//!   while that service is stored (both guarded in the same transaction).
//! - Rewriting an identical record is skipped, so CreateIndex/ModifyIndex (storage revisions)
//!   and blocking-query indexes move only on real changes.
//! - A check written critical, a check removed, or a node removed is followed by the session
//!   invalidation for it, after the transaction commits.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use axum::extract::{Path, State as AxumState};
use http_kit::Shutdown;
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, Visitor};
use serde_json::{Map, Value, json};
use storage::{Compare, KeyRange, Op, Storage, Txn};

use crate::acl::{Access, Authz, Resource};
use crate::meta::{Indexed, QueryParams};
use crate::store::catalog::{
    CheckDefinition, CheckKind, CheckRecord, CheckStatus, DeadlineRecord, NodeRecord,
    RECORD_VERSION, ServiceRecord, Stored, check_key, deadline_key, load_check, node_checks_range,
    node_deadlines_range, node_key, node_services_range, nodes_range, scan_records, service_key,
    services_range, valid_key_part,
};
use crate::store::{decode, encode};
use crate::{Error, SERF_HEALTH_CHECK, State};

/// How often a compare-and-swap write is retried before giving up with `Error::Contention`.
pub(crate) const MAX_ATTEMPTS: usize = 64;

/// The longest check output kept (Consul's default `check_output_max_size`).
pub(crate) const MAX_OUTPUT: usize = 4096;

/// The Consul version this server reports (`/v1/agent/self`, the `consul` service).
pub(crate) const CONSUL_VERSION: &str = "1.17.0";

/// The service every Consul server registers for itself on its node.
pub(crate) const CONSUL_SERVICE: &str = "consul";

// ---------------------------------------------------------------------------------------------
// Case-insensitive request bodies.

/// How a body field is read.
pub(crate) enum Shape {
    /// Kept as is (strings, numbers, lists of strings, and maps whose keys are user data).
    Leaf,
    /// A nested object with its own fields.
    Object(&'static [Field]),
    /// A list of nested objects.
    List(&'static [Field]),
    /// A Consul field this server accepts and ignores.
    Ignored,
}

/// A known body field: its canonical (Consul) name and shape.
pub(crate) struct Field(pub(crate) &'static str, pub(crate) Shape);

/// Field names compare like Consul's: case-insensitively, and `_`/`-` ignored (so
/// `tagged_addresses`, `TaggedAddresses` and `taggedaddresses` are one field).
fn fold(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

fn decode_error(detail: impl std::fmt::Display) -> Error {
    Error::BadRequest(format!("Request decode failed: {detail}"))
}

/// Decodes a JSON body whose field names are matched as Consul matches them; an unknown field
/// is a 400 naming it, an empty body is Consul's `Request decode failed: EOF`.
pub(crate) fn decode_body<T: DeserializeOwned>(
    bytes: &[u8],
    fields: &'static [Field],
) -> Result<T, Error> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(decode_error("EOF"));
    }
    let mut value: Value = serde_json::from_slice(bytes).map_err(decode_error)?;
    if !value.is_object() {
        return Err(decode_error("the body must be a JSON object"));
    }
    canonicalize(&mut value, fields, "")?;
    serde_json::from_value(value).map_err(decode_error)
}

fn canonicalize(value: &mut Value, fields: &[Field], path: &str) -> Result<(), Error> {
    let map = match value {
        Value::Null => return Ok(()),
        Value::Object(map) => map,
        _ => {
            return Err(decode_error(format!(
                "{} must be a JSON object",
                if path.is_empty() { "the body" } else { path }
            )));
        }
    };
    let entries = std::mem::take(map);
    for (key, mut item) in entries {
        let folded = fold(&key);
        let Some(Field(name, shape)) = fields.iter().find(|field| fold(field.0) == folded) else {
            let at = if path.is_empty() {
                String::new()
            } else {
                format!(" in {path}")
            };
            return Err(decode_error(format!("unknown field {key:?}{at}")));
        };
        let child = if path.is_empty() {
            (*name).to_owned()
        } else {
            format!("{path}.{name}")
        };
        match shape {
            Shape::Ignored => continue,
            Shape::Leaf => {}
            Shape::Object(sub) => canonicalize(&mut item, sub, &child)?,
            Shape::List(sub) => match &mut item {
                Value::Null => {}
                Value::Array(items) => {
                    for item in items {
                        canonicalize(item, sub, &child)?;
                    }
                }
                _ => return Err(decode_error(format!("{child} must be a list"))),
            },
        }
        map.insert((*name).to_owned(), item);
    }
    Ok(())
}

/// A Go `time.Duration` in a body: a duration string (`"10s"`) or integer nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct GoDuration(pub(crate) Duration);

impl GoDuration {
    pub(crate) fn millis(self) -> u64 {
        u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<GoDuration, D::Error> {
        struct DurationVisitor;
        impl Visitor<'_> for DurationVisitor {
            type Value = GoDuration;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration such as \"10s\" or integer nanoseconds")
            }
            fn visit_str<E: serde::de::Error>(self, raw: &str) -> Result<GoDuration, E> {
                if raw.is_empty() {
                    return Ok(GoDuration::default());
                }
                http_kit::parse_go_duration(raw)
                    .map(GoDuration)
                    .map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, nanos: u64) -> Result<GoDuration, E> {
                Ok(GoDuration(Duration::from_nanos(nanos)))
            }
            fn visit_i64<E: serde::de::Error>(self, nanos: i64) -> Result<GoDuration, E> {
                u64::try_from(nanos)
                    .map(|nanos| GoDuration(Duration::from_nanos(nanos)))
                    .map_err(|_| {
                        E::custom(format!("invalid duration {nanos}: must not be negative"))
                    })
            }
            fn visit_f64<E: serde::de::Error>(self, nanos: f64) -> Result<GoDuration, E> {
                if nanos.is_finite() && nanos >= 0.0 && nanos < u64::MAX as f64 {
                    Ok(GoDuration(Duration::from_nanos(nanos as u64)))
                } else {
                    Err(E::custom(format!("invalid duration {nanos}")))
                }
            }
        }
        deserializer.deserialize_any(DurationVisitor)
    }
}

/// Formats milliseconds as Go's `Duration.String()` does (`"10s"`, `"1m30s"`, `"100ms"`).
pub(crate) fn go_duration_string(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let hours = ms / 3_600_000;
    let minutes = (ms / 60_000) % 60;
    let rest_ms = ms % 60_000;
    let seconds = if rest_ms.is_multiple_of(1000) {
        (rest_ms / 1000).to_string()
    } else {
        let text = format!("{}.{:03}", rest_ms / 1000, rest_ms % 1000);
        text.trim_end_matches('0').to_owned()
    };
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

/// Cuts a check's output to [`MAX_OUTPUT`] bytes as Consul does.
pub(crate) fn truncate_output(output: &str) -> String {
    if output.len() <= MAX_OUTPUT {
        return output.to_owned();
    }
    let mut end = MAX_OUTPUT;
    while !output.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{} ... (captured {end} of {} bytes)",
        &output[..end],
        output.len()
    )
}

// ---------------------------------------------------------------------------------------------
// Validation shared with the agent endpoints.

/// Node and service metadata as Consul validates it: at most 64 pairs, keys of
/// `A-Z a-z 0-9 _ -` up to 128 characters, values up to 512; the `consul-` prefix is reserved.
pub(crate) fn validate_meta(
    meta: &BTreeMap<String, String>,
    what: &str,
    allow_reserved: bool,
) -> Result<(), Error> {
    if meta.len() > 64 {
        return Err(Error::Invalid(format!(
            "{what} metadata cannot contain more than 64 key/value pairs"
        )));
    }
    for (key, value) in meta {
        if key.is_empty() {
            return Err(Error::Invalid(format!(
                "{what} metadata: key cannot be blank"
            )));
        }
        if key.len() > 128 {
            return Err(Error::Invalid(format!(
                "{what} metadata: key is too long (limit: 128 characters)"
            )));
        }
        if !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(Error::Invalid(format!(
                "{what} metadata: key {key:?} contains invalid characters"
            )));
        }
        if !allow_reserved && key.starts_with("consul-") {
            return Err(Error::Invalid(format!(
                "{what} metadata: key {key:?} uses the reserved prefix \"consul-\""
            )));
        }
        if value.len() > 512 {
            return Err(Error::Invalid(format!(
                "{what} metadata: value for key {key:?} is too long (limit: 512 characters)"
            )));
        }
    }
    Ok(())
}

/// Node names: not empty, at most 256 bytes, no `/` (they are storage key and URL segments),
/// no control characters.
pub(crate) fn validate_node_name(node: &str) -> Result<(), Error> {
    if node.is_empty() {
        return Err(Error::Invalid("Must provide node".to_owned()));
    }
    if !valid_key_part(node) || node.len() > 256 || node.chars().any(char::is_control) {
        return Err(Error::Invalid(format!("Invalid node name {node:?}")));
    }
    Ok(())
}

/// Service and check IDs: not empty, at most 256 bytes, no control characters.
pub(crate) fn validate_id(id: &str, what: &str) -> Result<(), Error> {
    if id.is_empty() {
        return Err(Error::Invalid(format!("Must provide {what}")));
    }
    if id.len() > 256 || id.chars().any(char::is_control) {
        return Err(Error::Invalid(format!("Invalid {what} {id:?}")));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Write operations.

/// What one registration writes for one node, in one transaction.
#[derive(Debug, Clone)]
pub(crate) struct Registration {
    /// The node as it should be; an empty `id` keeps the stored one (or makes a new UUID).
    pub(crate) node: NodeRecord,
    /// Leave an existing node record alone (it is still created when missing).
    pub(crate) skip_node_update: bool,
    pub(crate) services: Vec<ServiceRecord>,
    /// Checks to write; `service_name`/`service_tags` are filled in from their service.
    pub(crate) checks: Vec<CheckRecord>,
    /// Remove this service's stored checks that are not in `checks` (the agent's
    /// `replace-existing-checks`).
    pub(crate) replace_checks_of: Option<String>,
    /// The error message when a check names a service that does not exist.
    pub(crate) missing_service: fn(&str) -> String,
}

/// Consul's catalog wording for a check whose service is not registered.
pub(crate) fn missing_service_registration(service_id: &str) -> String {
    format!("Missing service registration for ServiceID {service_id:?}")
}

impl Registration {
    pub(crate) fn new(node: NodeRecord) -> Registration {
        Registration {
            node,
            skip_node_update: false,
            services: Vec::new(),
            checks: Vec::new(),
            replace_checks_of: None,
            missing_service: missing_service_registration,
        }
    }
}

fn decode_kv<T: DeserializeOwned>(kv: Option<&storage::KeyValue>) -> Result<Option<T>, Error> {
    kv.map(|kv| decode(&kv.key, &kv.value)).transpose()
}

fn check_id_of_key(key: &[u8], node: &str) -> String {
    let prefix = check_key(node, "");
    String::from_utf8_lossy(&key[prefix.len().min(key.len())..]).into_owned()
}

/// Writes a registration: node, services and checks in one compare-and-swap transaction; then
/// invalidates the sessions of checks written critical or removed.
pub(crate) async fn apply_registration(state: &State, reg: Registration) -> Result<(), Error> {
    let storage = state.storage();
    let node_name = reg.node.node.clone();
    let nkey = node_key(&node_name);
    let mut attempts = 0;
    let (critical, removed) = loop {
        attempts += 1;
        if attempts > MAX_ATTEMPTS {
            return Err(Error::Contention);
        }
        let mut compares = Vec::new();
        let mut ops = Vec::new();

        // The node.
        let node_kv = storage.get(&nkey).await?;
        let existing_node: Option<NodeRecord> = decode_kv(node_kv.as_ref())?;
        compares.push(Compare::ModRevision(
            nkey.clone(),
            node_kv.as_ref().map_or(0, |kv| kv.mod_revision),
        ));
        match &existing_node {
            Some(_) if reg.skip_node_update => {}
            existing => {
                let mut desired = reg.node.clone();
                if desired.id.is_empty() {
                    desired.id = existing
                        .as_ref()
                        .map_or_else(|| uuid::Uuid::new_v4().to_string(), |node| node.id.clone());
                }
                if existing.as_ref().is_none_or(|node| node.id != desired.id) {
                    ensure_node_id_free(storage, &desired).await?;
                }
                if existing.as_ref() != Some(&desired) {
                    ops.push(Op::Put {
                        value: encode(&nkey, &desired)?,
                        key: nkey.clone(),
                    });
                }
            }
        }

        // What the node already has.
        let stored_services = storage
            .scan(node_services_range(&node_name), None)
            .await?
            .kvs;
        let stored_checks = storage.scan(node_checks_range(&node_name), None).await?.kvs;
        let mut services: BTreeMap<String, (ServiceRecord, u64)> = BTreeMap::new();
        for kv in &stored_services {
            let record: ServiceRecord = decode(&kv.key, &kv.value)?;
            services.insert(record.id.clone(), (record, kv.mod_revision));
        }
        let mut checks: BTreeMap<String, (CheckRecord, u64)> = BTreeMap::new();
        for kv in &stored_checks {
            let record: CheckRecord = decode(&kv.key, &kv.value)?;
            checks.insert(
                check_id_of_key(&kv.key, &node_name),
                (record, kv.mod_revision),
            );
        }

        // Services, and the service name/tags their stored checks carry.
        let mut changed_services = Vec::new();
        for service in &reg.services {
            let key = service_key(&node_name, &service.id);
            let existing = services.get(&service.id);
            compares.push(Compare::ModRevision(
                key.clone(),
                existing.map_or(0, |(_, rev)| *rev),
            ));
            if existing.map(|(record, _)| record) != Some(service) {
                ops.push(Op::Put {
                    value: encode(&key, service)?,
                    key,
                });
                changed_services.push(service.id.clone());
            }
            services.insert(service.id.clone(), (service.clone(), 0));
        }

        // Checks.
        let now = state.clock().now_ms();
        let mut written: BTreeSet<String> = BTreeSet::new();
        let mut critical = Vec::new();
        for check in &reg.checks {
            let mut check = check.clone();
            if !check.service_id.is_empty() {
                let Some((service, rev)) = services.get(&check.service_id) else {
                    return Err(Error::Invalid((reg.missing_service)(&check.service_id)));
                };
                if *rev != 0 {
                    compares.push(Compare::ModRevision(
                        service_key(&node_name, &service.id),
                        *rev,
                    ));
                }
                check.service_name = service.service.clone();
                check.service_tags = service.tags.clone();
            } else {
                check.service_name.clear();
                check.service_tags.clear();
            }
            let key = check_key(&node_name, &check.check_id);
            let existing = checks.get(&check.check_id);
            compares.push(Compare::ModRevision(
                key.clone(),
                existing.map_or(0, |(_, rev)| *rev),
            ));
            if existing.map(|(record, _)| record) != Some(&check) {
                ops.push(Op::Put {
                    value: encode(&key, &check)?,
                    key,
                });
            }
            let dkey = deadline_key(&node_name, &check.check_id);
            if check.kind == CheckKind::Ttl && check.definition.ttl_ms > 0 {
                let deadline = DeadlineRecord {
                    version: RECORD_VERSION,
                    deadline_ms: now.saturating_add(check.definition.ttl_ms),
                };
                ops.push(Op::Put {
                    value: encode(&dkey, &deadline)?,
                    key: dkey,
                });
            } else if existing.is_some_and(|(record, _)| record.kind == CheckKind::Ttl) {
                ops.push(Op::Delete { key: dkey });
            }
            if check.status == CheckStatus::Critical {
                critical.push(check.check_id.clone());
            }
            written.insert(check.check_id.clone());
        }

        // Stored checks of changed services carry the new name and tags.
        for service_id in &changed_services {
            let Some((service, _)) = services.get(service_id) else {
                continue;
            };
            for (check_id, (record, rev)) in &checks {
                if record.service_id != *service_id || written.contains(check_id) {
                    continue;
                }
                if record.service_name == service.service && record.service_tags == service.tags {
                    continue;
                }
                let mut updated = record.clone();
                updated.service_name = service.service.clone();
                updated.service_tags = service.tags.clone();
                let key = check_key(&node_name, check_id);
                compares.push(Compare::ModRevision(key.clone(), *rev));
                ops.push(Op::Put {
                    value: encode(&key, &updated)?,
                    key,
                });
            }
        }

        // `replace-existing-checks`.
        let mut removed = Vec::new();
        if let Some(service_id) = &reg.replace_checks_of {
            for (check_id, (record, rev)) in &checks {
                if record.service_id == *service_id && !written.contains(check_id) {
                    let key = check_key(&node_name, check_id);
                    compares.push(Compare::ModRevision(key.clone(), *rev));
                    ops.push(Op::Delete { key });
                    ops.push(Op::Delete {
                        key: deadline_key(&node_name, check_id),
                    });
                    removed.push(check_id.clone());
                }
            }
        }

        if ops.is_empty() {
            break (critical, removed);
        }
        let txn = Txn {
            compares,
            success: ops,
            failure: Vec::new(),
        };
        if storage.txn(txn).await?.succeeded {
            break (critical, removed);
        }
    };
    for check_id in critical.iter().chain(&removed) {
        invalidate_sessions_for_check(state, &node_name, check_id).await?;
    }
    Ok(())
}

/// A node ID may name only one node.
async fn ensure_node_id_free(storage: &dyn Storage, desired: &NodeRecord) -> Result<(), Error> {
    let nodes: Vec<Stored<NodeRecord>> = scan_records(storage, nodes_range()).await?;
    if let Some(other) = nodes
        .iter()
        .find(|other| other.record.id == desired.id && other.record.node != desired.node)
    {
        return Err(Error::Invalid(format!(
            "Node ID {:?} is already registered to node {:?}",
            desired.id, other.record.node
        )));
    }
    Ok(())
}

/// What a deregistration removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Removal {
    /// The node with all its services and checks.
    Node,
    /// One service and its checks.
    Service(String),
    /// One check.
    Check(String),
}

/// Removes a node, a service or a check in one transaction, then invalidates the sessions
/// bound to what went away. Returns whether anything existed.
pub(crate) async fn deregister(state: &State, node: &str, removal: Removal) -> Result<bool, Error> {
    let storage = state.storage();
    if !valid_key_part(node) {
        return Ok(false);
    }
    let mut attempts = 0;
    let removed_checks = loop {
        attempts += 1;
        if attempts > MAX_ATTEMPTS {
            return Err(Error::Contention);
        }
        let mut txn = Txn::new();
        let mut removed_checks = Vec::new();
        match &removal {
            Removal::Node => {
                let nkey = node_key(node);
                let Some(kv) = storage.get(&nkey).await? else {
                    return Ok(false);
                };
                txn = txn
                    .when(Compare::ModRevision(nkey.clone(), kv.mod_revision))
                    .then(Op::Delete { key: nkey })
                    .then(Op::DeleteRange(node_services_range(node)))
                    .then(Op::DeleteRange(node_checks_range(node)))
                    .then(Op::DeleteRange(node_deadlines_range(node)));
            }
            Removal::Service(service_id) => {
                let skey = service_key(node, service_id);
                let Some(kv) = storage.get(&skey).await? else {
                    return Ok(false);
                };
                txn = txn
                    .when(Compare::ModRevision(skey.clone(), kv.mod_revision))
                    .then(Op::Delete { key: skey });
                let checks = storage.scan(node_checks_range(node), None).await?.kvs;
                for kv in checks {
                    let record: CheckRecord = decode(&kv.key, &kv.value)?;
                    if record.service_id == *service_id {
                        txn = txn
                            .when(Compare::ModRevision(kv.key.clone(), kv.mod_revision))
                            .then(Op::Delete { key: kv.key })
                            .then(Op::Delete {
                                key: deadline_key(node, &record.check_id),
                            });
                        removed_checks.push(record.check_id);
                    }
                }
            }
            Removal::Check(check_id) => {
                let ckey = check_key(node, check_id);
                let Some(kv) = storage.get(&ckey).await? else {
                    return Ok(false);
                };
                txn = txn
                    .when(Compare::ModRevision(ckey.clone(), kv.mod_revision))
                    .then(Op::Delete { key: ckey })
                    .then(Op::Delete {
                        key: deadline_key(node, check_id),
                    });
                removed_checks.push(check_id.clone());
            }
        }
        if storage.txn(txn).await?.succeeded {
            break removed_checks;
        }
    };
    if removal == Removal::Node {
        invalidate_sessions_for_node(state, node).await?;
    }
    for check_id in &removed_checks {
        invalidate_sessions_for_check(state, node, check_id).await?;
    }
    if let Removal::Service(service_id) = &removal {
        // A check registered for the service while this transaction was prepared committed
        // before it (a later one fails its compare on the service key): remove it too.
        for kv in storage.scan(node_checks_range(node), None).await?.kvs {
            let record: CheckRecord = decode(&kv.key, &kv.value)?;
            if record.service_id == *service_id {
                Box::pin(deregister(state, node, Removal::Check(record.check_id))).await?;
            }
        }
    }
    Ok(true)
}

/// How a status update treats the check's TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TtlUpdate {
    /// A client update (`/v1/agent/check/pass` ...): the check must be a TTL check, and its
    /// deadline moves to now + TTL.
    Heartbeat,
    /// A result of the check runner: the TTL is untouched.
    Runner,
}

/// Sets a check's status and output. Returns whether the stored check changed. A check that
/// ends up critical has its sessions invalidated (always for a client update; for the runner
/// only when the status changed).
pub(crate) async fn update_check_status(
    state: &State,
    node: &str,
    check_id: &str,
    status: CheckStatus,
    output: &str,
    mode: TtlUpdate,
) -> Result<bool, Error> {
    let storage = state.storage();
    let output = truncate_output(output);
    let mut attempts = 0;
    let changed = loop {
        attempts += 1;
        if attempts > MAX_ATTEMPTS {
            return Err(Error::Contention);
        }
        let ckey = check_key(node, check_id);
        let Some(kv) = (if valid_key_part(node) {
            storage.get(&ckey).await?
        } else {
            None
        }) else {
            return Err(unknown_check(check_id));
        };
        let record: CheckRecord = decode(&kv.key, &kv.value)?;
        let mut txn = Txn::new().when(Compare::ModRevision(ckey.clone(), kv.mod_revision));
        if mode == TtlUpdate::Heartbeat {
            if record.kind != CheckKind::Ttl {
                return Err(Error::Invalid(format!(
                    "CheckID {check_id:?} does not have associated TTL"
                )));
            }
            let dkey = deadline_key(node, check_id);
            let deadline = DeadlineRecord {
                version: RECORD_VERSION,
                deadline_ms: state
                    .clock()
                    .now_ms()
                    .saturating_add(record.definition.ttl_ms),
            };
            txn = txn.then(Op::Put {
                value: encode(&dkey, &deadline)?,
                key: dkey,
            });
        }
        let mut updated = record.clone();
        updated.status = status;
        updated.output.clone_from(&output);
        let changed = updated != record;
        if changed {
            txn = txn.then(Op::Put {
                value: encode(&ckey, &updated)?,
                key: ckey,
            });
        }
        if txn.success.is_empty() || storage.txn(txn).await?.succeeded {
            break changed;
        }
    };
    if status == CheckStatus::Critical && (changed || mode == TtlUpdate::Heartbeat) {
        invalidate_sessions_for_check(state, node, check_id).await?;
    }
    Ok(changed)
}

/// Marks a TTL check critical with Output "TTL expired" if its stored deadline is still
/// `deadline_ms` and has passed. Returns whether it expired the check.
pub(crate) async fn expire_ttl_check(
    state: &State,
    node: &str,
    check_id: &str,
    deadline_ms: u64,
) -> Result<bool, Error> {
    let storage = state.storage();
    for _ in 0..MAX_ATTEMPTS {
        let dkey = deadline_key(node, check_id);
        let Some(deadline_kv) = storage.get(&dkey).await? else {
            return Ok(false);
        };
        let deadline: DeadlineRecord = decode(&deadline_kv.key, &deadline_kv.value)?;
        if deadline.deadline_ms != deadline_ms || state.clock().now_ms() < deadline_ms {
            return Ok(false);
        }
        let ckey = check_key(node, check_id);
        let mut txn = Txn::new()
            .when(Compare::ModRevision(dkey.clone(), deadline_kv.mod_revision))
            .then(Op::Delete { key: dkey });
        let check_kv = storage.get(&ckey).await?;
        if let Some(kv) = &check_kv {
            let record: CheckRecord = decode(&kv.key, &kv.value)?;
            let mut updated = record.clone();
            updated.status = CheckStatus::Critical;
            updated.output = crate::tasks::check_runner::TTL_EXPIRED.to_owned();
            txn = txn.when(Compare::ModRevision(ckey.clone(), kv.mod_revision));
            if updated != record {
                txn = txn.then(Op::Put {
                    value: encode(&ckey, &updated)?,
                    key: ckey,
                });
            }
        } else {
            txn = txn.when(Compare::Missing(ckey));
        }
        if storage.txn(txn).await?.succeeded {
            if check_kv.is_some() {
                invalidate_sessions_for_check(state, node, check_id).await?;
            }
            return Ok(check_kv.is_some());
        }
    }
    Err(Error::Contention)
}

/// Consul's 404 for an unknown check ID on the agent endpoints.
pub(crate) fn unknown_check(check_id: &str) -> Error {
    Error::NotFound(format!(
        "Unknown check ID {check_id:?}. Ensure that the check ID is passed, not the check name."
    ))
}

/// Session binding: sessions bound to `check_id` of `node` are invalidated (their Behavior is
/// applied to the keys they hold).
pub(crate) async fn invalidate_sessions_for_check(
    state: &State,
    node: &str,
    check_id: &str,
) -> Result<(), Error> {
    crate::session::invalidate_sessions_for_check(state, node, check_id).await
}

/// Session binding: every session of `node` is invalidated.
pub(crate) async fn invalidate_sessions_for_node(state: &State, node: &str) -> Result<(), Error> {
    crate::session::invalidate_sessions_for_node(state, node).await
}

// ---------------------------------------------------------------------------------------------
// This server's own node.

/// This server's node record (its ID is kept from storage, or made on first start).
pub(crate) fn self_node(state: &State) -> NodeRecord {
    let config = state.config();
    let address = config.advertise_addr.ip().to_string();
    let mut tagged = BTreeMap::new();
    let family = if config.advertise_addr.is_ipv4() {
        "ipv4"
    } else {
        "ipv6"
    };
    for scope in ["lan", "wan"] {
        tagged.insert(scope.to_owned(), address.clone());
        tagged.insert(format!("{scope}_{family}"), address.clone());
    }
    NodeRecord {
        version: RECORD_VERSION,
        id: String::new(),
        node: config.node_name.clone(),
        address,
        datacenter: config.datacenter.clone(),
        tagged_addresses: tagged,
        meta: BTreeMap::from([("consul-network-segment".to_owned(), String::new())]),
    }
}

fn self_registration(state: &State) -> Registration {
    let config = state.config();
    let mut reg = Registration::new(self_node(state));
    reg.services.push(ServiceRecord {
        version: RECORD_VERSION,
        id: CONSUL_SERVICE.to_owned(),
        service: CONSUL_SERVICE.to_owned(),
        tags: Vec::new(),
        address: String::new(),
        port: config.advertise_addr.port(),
        meta: BTreeMap::from([
            ("version".to_owned(), CONSUL_VERSION.to_owned()),
            ("raft_version".to_owned(), "3".to_owned()),
        ]),
        enable_tag_override: false,
    });
    reg.checks.push(CheckRecord {
        version: RECORD_VERSION,
        node: config.node_name.clone(),
        check_id: SERF_HEALTH_CHECK.to_owned(),
        name: "Serf Health Status".to_owned(),
        status: CheckStatus::Passing,
        notes: String::new(),
        output: "Agent alive and reachable".to_owned(),
        service_id: String::new(),
        service_name: String::new(),
        service_tags: Vec::new(),
        kind: CheckKind::None,
        definition: CheckDefinition::default(),
    });
    reg
}

/// Registers this server's node with a passing `serfHealth` check and the `consul` service
/// (idempotent: nothing is written when they are already stored as they should be).
pub(crate) async fn register_self(state: &State) -> Result<(), Error> {
    validate_node_name(&state.config().node_name)?;
    apply_registration(state, self_registration(state)).await
}

// ---------------------------------------------------------------------------------------------
// Views: Consul's JSON shapes.

pub(crate) fn node_json(node: &Stored<NodeRecord>) -> Value {
    let record = &node.record;
    json!({
        "ID": record.id,
        "Node": record.node,
        "Address": record.address,
        "Datacenter": record.datacenter,
        "TaggedAddresses": record.tagged_addresses,
        "Meta": record.meta,
        "CreateIndex": node.create_index,
        "ModifyIndex": node.modify_index,
    })
}

/// A service as `/v1/catalog/node/:node` and `/v1/health/service/:service` show it.
pub(crate) fn service_json(service: &Stored<ServiceRecord>) -> Value {
    let record = &service.record;
    json!({
        "ID": record.id,
        "Service": record.service,
        "Tags": record.tags,
        "Address": record.address,
        "Meta": record.meta,
        "Port": record.port,
        "Weights": {"Passing": 1, "Warning": 1},
        "EnableTagOverride": record.enable_tag_override,
        "Proxy": {"Mode": "", "MeshGateway": {}, "Expose": {}},
        "Connect": {},
        "PeerName": "",
        "CreateIndex": service.create_index,
        "ModifyIndex": service.modify_index,
    })
}

/// A service instance as `/v1/catalog/service/:service` shows it (node fields flattened).
fn service_node_json(node: &Stored<NodeRecord>, service: &Stored<ServiceRecord>) -> Value {
    let (n, s) = (&node.record, &service.record);
    json!({
        "ID": n.id,
        "Node": n.node,
        "Address": n.address,
        "Datacenter": n.datacenter,
        "TaggedAddresses": n.tagged_addresses,
        "NodeMeta": n.meta,
        "ServiceKind": "",
        "ServiceID": s.id,
        "ServiceName": s.service,
        "ServiceTags": s.tags,
        "ServiceAddress": s.address,
        "ServiceWeights": {"Passing": 1, "Warning": 1},
        "ServiceMeta": s.meta,
        "ServicePort": s.port,
        "ServiceSocketPath": "",
        "ServiceEnableTagOverride": s.enable_tag_override,
        "ServiceProxy": {"Mode": "", "MeshGateway": {}, "Expose": {}},
        "ServiceConnect": {},
        "CreateIndex": service.create_index,
        "ModifyIndex": service.modify_index,
    })
}

fn duration_field(ms: u64) -> String {
    if ms == 0 {
        String::new()
    } else {
        go_duration_string(ms)
    }
}

/// A check's `Definition`, with Consul's omitempty fields.
fn definition_json(definition: &CheckDefinition) -> Value {
    let mut map = Map::new();
    let mut text = |name: &str, value: &str| {
        if !value.is_empty() {
            map.insert(name.to_owned(), Value::String(value.to_owned()));
        }
    };
    text("HTTP", &definition.http);
    text("TLSServerName", &definition.tls_server_name);
    text("Method", &definition.method);
    text("Body", &definition.body);
    text("TCP", &definition.tcp);
    text("Interval", &duration_field(definition.interval_ms));
    text("Timeout", &duration_field(definition.timeout_ms));
    text(
        "DeregisterCriticalServiceAfter",
        &duration_field(definition.deregister_critical_service_after_ms),
    );
    text("TTL", &duration_field(definition.ttl_ms));
    if definition.tls_skip_verify {
        map.insert("TLSSkipVerify".to_owned(), Value::Bool(true));
    }
    if !definition.header.is_empty() {
        map.insert("Header".to_owned(), json!(definition.header));
    }
    Value::Object(map)
}

/// A health check as the health, catalog and agent endpoints show it.
pub(crate) fn check_json(check: &Stored<CheckRecord>) -> Value {
    let record = &check.record;
    let (interval, timeout) = match record.kind {
        CheckKind::Http | CheckKind::Tcp => (
            duration_field(record.definition.interval_ms),
            duration_field(record.definition.timeout_ms),
        ),
        CheckKind::Ttl | CheckKind::None => (String::new(), String::new()),
    };
    json!({
        "Node": record.node,
        "CheckID": record.check_id,
        "Name": record.name,
        "Status": record.status.as_str(),
        "Notes": record.notes,
        "Output": record.output,
        "ServiceID": record.service_id,
        "ServiceName": record.service_name,
        "ServiceTags": record.service_tags,
        "Type": record.kind.type_name(),
        "Interval": interval,
        "Timeout": timeout,
        "ExposedPort": 0,
        "Definition": definition_json(&record.definition),
        "CreateIndex": check.create_index,
        "ModifyIndex": check.modify_index,
    })
}

// ---------------------------------------------------------------------------------------------
// Query filters shared with the health endpoints.

/// `?node-meta=key:value` filters (every pair must match).
pub(crate) fn node_meta_filter(query: &QueryParams) -> Result<Vec<(String, String)>, Error> {
    query
        .get_all("node-meta")
        .map(|pair| match pair.split_once(':') {
            Some((key, value)) => Ok((key.to_owned(), value.to_owned())),
            None => Err(Error::BadRequest(format!(
                "Invalid node-meta {pair:?}: expected key:value"
            ))),
        })
        .collect()
}

pub(crate) fn node_matches_meta(node: &NodeRecord, filter: &[(String, String)]) -> bool {
    filter
        .iter()
        .all(|(key, value)| node.meta.get(key) == Some(value))
}

/// `?tag=` filters (every tag must be present).
pub(crate) fn tag_filter(query: &QueryParams) -> Vec<String> {
    query.get_all("tag").map(str::to_owned).collect()
}

pub(crate) fn service_has_tags(service: &ServiceRecord, tags: &[String]) -> bool {
    tags.iter().all(|tag| service.tags.contains(tag))
}

/// The index of several ranges: the last change to any of them.
pub(crate) async fn ranges_index(storage: &dyn Storage, ranges: &[KeyRange]) -> Result<u64, Error> {
    let mut index = 0;
    for range in ranges {
        index = index.max(storage.range_revision(range.clone()).await?);
    }
    Ok(index)
}

// ---------------------------------------------------------------------------------------------
// Handlers.

const NODE_DEFINITION_FIELDS: &[Field] = &[
    Field("Interval", Shape::Leaf),
    Field("Timeout", Shape::Leaf),
    Field("HTTP", Shape::Leaf),
    Field("Method", Shape::Leaf),
    Field("Header", Shape::Leaf),
    Field("Body", Shape::Leaf),
    Field("TLSServerName", Shape::Leaf),
    Field("TLSSkipVerify", Shape::Leaf),
    Field("TCP", Shape::Leaf),
    Field("TTL", Shape::Leaf),
    Field("DeregisterCriticalServiceAfter", Shape::Leaf),
    Field("DisableRedirects", Shape::Ignored),
    Field("TCPUseTLS", Shape::Ignored),
    Field("UDP", Shape::Ignored),
    Field("H2PING", Shape::Ignored),
    Field("H2PingUseTLS", Shape::Ignored),
    Field("OSService", Shape::Ignored),
    Field("OutputMaxSize", Shape::Ignored),
    Field("ScriptArgs", Shape::Ignored),
    Field("DockerContainerID", Shape::Ignored),
    Field("Shell", Shape::Ignored),
    Field("GRPC", Shape::Ignored),
    Field("GRPCUseTLS", Shape::Ignored),
    Field("AliasNode", Shape::Ignored),
    Field("AliasService", Shape::Ignored),
];

const CATALOG_CHECK_FIELDS: &[Field] = &[
    Field("Node", Shape::Leaf),
    Field("CheckID", Shape::Leaf),
    Field("Name", Shape::Leaf),
    Field("Status", Shape::Leaf),
    Field("Notes", Shape::Leaf),
    Field("Output", Shape::Leaf),
    Field("ServiceID", Shape::Leaf),
    Field("Definition", Shape::Object(NODE_DEFINITION_FIELDS)),
    Field("ServiceName", Shape::Ignored),
    Field("ServiceTags", Shape::Ignored),
    Field("Type", Shape::Ignored),
    Field("Interval", Shape::Ignored),
    Field("Timeout", Shape::Ignored),
    Field("ExposedPort", Shape::Ignored),
    Field("PeerName", Shape::Ignored),
    Field("Namespace", Shape::Ignored),
    Field("Partition", Shape::Ignored),
    Field("CreateIndex", Shape::Ignored),
    Field("ModifyIndex", Shape::Ignored),
];

const CATALOG_SERVICE_FIELDS: &[Field] = &[
    Field("ID", Shape::Leaf),
    Field("Service", Shape::Leaf),
    Field("Tags", Shape::Leaf),
    Field("Address", Shape::Leaf),
    Field("Port", Shape::Leaf),
    Field("Meta", Shape::Leaf),
    Field("EnableTagOverride", Shape::Leaf),
    Field("Kind", Shape::Ignored),
    Field("TaggedAddresses", Shape::Ignored),
    Field("Weights", Shape::Ignored),
    Field("SocketPath", Shape::Ignored),
    Field("Proxy", Shape::Ignored),
    Field("Connect", Shape::Ignored),
    Field("PeerName", Shape::Ignored),
    Field("Namespace", Shape::Ignored),
    Field("Partition", Shape::Ignored),
    Field("Datacenter", Shape::Ignored),
    Field("Locality", Shape::Ignored),
    Field("ContentHash", Shape::Ignored),
    Field("CreateIndex", Shape::Ignored),
    Field("ModifyIndex", Shape::Ignored),
];

const REGISTER_FIELDS: &[Field] = &[
    Field("ID", Shape::Leaf),
    Field("Node", Shape::Leaf),
    Field("Address", Shape::Leaf),
    Field("Datacenter", Shape::Leaf),
    Field("TaggedAddresses", Shape::Leaf),
    Field("NodeMeta", Shape::Leaf),
    Field("Service", Shape::Object(CATALOG_SERVICE_FIELDS)),
    Field("Check", Shape::Object(CATALOG_CHECK_FIELDS)),
    Field("Checks", Shape::List(CATALOG_CHECK_FIELDS)),
    Field("SkipNodeUpdate", Shape::Leaf),
    Field("WriteRequest", Shape::Ignored),
    Field("Token", Shape::Ignored),
    Field("Partition", Shape::Ignored),
    Field("Namespace", Shape::Ignored),
    Field("PeerName", Shape::Ignored),
    Field("Locality", Shape::Ignored),
];

const DEREGISTER_FIELDS: &[Field] = &[
    Field("Node", Shape::Leaf),
    Field("Datacenter", Shape::Leaf),
    Field("ServiceID", Shape::Leaf),
    Field("CheckID", Shape::Leaf),
    Field("WriteRequest", Shape::Ignored),
    Field("Token", Shape::Ignored),
    Field("Partition", Shape::Ignored),
    Field("Namespace", Shape::Ignored),
    Field("PeerName", Shape::Ignored),
];

#[derive(Debug, Default, Deserialize)]
struct DefinitionBody {
    #[serde(rename = "Interval", default)]
    interval: Option<GoDuration>,
    #[serde(rename = "Timeout", default)]
    timeout: Option<GoDuration>,
    #[serde(rename = "HTTP", default)]
    http: Option<String>,
    #[serde(rename = "Method", default)]
    method: Option<String>,
    #[serde(rename = "Header", default)]
    header: Option<BTreeMap<String, Vec<String>>>,
    #[serde(rename = "Body", default)]
    body: Option<String>,
    #[serde(rename = "TLSServerName", default)]
    tls_server_name: Option<String>,
    #[serde(rename = "TLSSkipVerify", default)]
    tls_skip_verify: Option<bool>,
    #[serde(rename = "TCP", default)]
    tcp: Option<String>,
    #[serde(rename = "TTL", default)]
    ttl: Option<GoDuration>,
    #[serde(rename = "DeregisterCriticalServiceAfter", default)]
    deregister_critical_service_after: Option<GoDuration>,
}

impl DefinitionBody {
    fn into_definition(self) -> CheckDefinition {
        CheckDefinition {
            interval_ms: self.interval.unwrap_or_default().millis(),
            timeout_ms: self.timeout.unwrap_or_default().millis(),
            http: self.http.unwrap_or_default(),
            method: self.method.unwrap_or_default(),
            header: self.header.unwrap_or_default(),
            body: self.body.unwrap_or_default(),
            tls_skip_verify: self.tls_skip_verify.unwrap_or_default(),
            tls_server_name: self.tls_server_name.unwrap_or_default(),
            tcp: self.tcp.unwrap_or_default(),
            ttl_ms: self.ttl.unwrap_or_default().millis(),
            deregister_critical_service_after_ms: self
                .deregister_critical_service_after
                .unwrap_or_default()
                .millis(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct CatalogCheckBody {
    #[serde(rename = "Node", default)]
    node: Option<String>,
    #[serde(rename = "CheckID", default)]
    check_id: Option<String>,
    #[serde(rename = "Name", default)]
    name: Option<String>,
    #[serde(rename = "Status", default)]
    status: Option<String>,
    #[serde(rename = "Notes", default)]
    notes: Option<String>,
    #[serde(rename = "Output", default)]
    output: Option<String>,
    #[serde(rename = "ServiceID", default)]
    service_id: Option<String>,
    #[serde(rename = "Definition", default)]
    definition: Option<DefinitionBody>,
}

#[derive(Debug, Default, Deserialize)]
struct CatalogServiceBody {
    #[serde(rename = "ID", default)]
    id: Option<String>,
    #[serde(rename = "Service", default)]
    service: Option<String>,
    #[serde(rename = "Tags", default)]
    tags: Option<Vec<String>>,
    #[serde(rename = "Address", default)]
    address: Option<String>,
    #[serde(rename = "Port", default)]
    port: Option<u16>,
    #[serde(rename = "Meta", default)]
    meta: Option<BTreeMap<String, String>>,
    #[serde(rename = "EnableTagOverride", default)]
    enable_tag_override: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
struct RegisterBody {
    #[serde(rename = "ID", default)]
    id: Option<String>,
    #[serde(rename = "Node", default)]
    node: Option<String>,
    #[serde(rename = "Address", default)]
    address: Option<String>,
    #[serde(rename = "Datacenter", default)]
    datacenter: Option<String>,
    #[serde(rename = "TaggedAddresses", default)]
    tagged_addresses: Option<BTreeMap<String, String>>,
    #[serde(rename = "NodeMeta", default)]
    node_meta: Option<BTreeMap<String, String>>,
    #[serde(rename = "Service", default)]
    service: Option<CatalogServiceBody>,
    #[serde(rename = "Check", default)]
    check: Option<CatalogCheckBody>,
    #[serde(rename = "Checks", default)]
    checks: Option<Vec<CatalogCheckBody>>,
    #[serde(rename = "SkipNodeUpdate", default)]
    skip_node_update: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
struct DeregisterBody {
    #[serde(rename = "Node", default)]
    node: Option<String>,
    #[serde(rename = "Datacenter", default)]
    datacenter: Option<String>,
    #[serde(rename = "ServiceID", default)]
    service_id: Option<String>,
    #[serde(rename = "CheckID", default)]
    check_id: Option<String>,
}

/// A `Datacenter` in a body must be ours (or empty).
fn check_body_datacenter(state: &State, datacenter: Option<&str>) -> Result<(), Error> {
    match datacenter {
        Some(dc) if !dc.is_empty() && dc != state.config().datacenter => {
            Err(Error::UnknownDatacenter(dc.to_owned()))
        }
        _ => Ok(()),
    }
}

/// Parses a check status; `None` or empty means critical, as Consul defaults.
pub(crate) fn parse_status(raw: Option<&str>) -> Result<CheckStatus, Error> {
    match raw {
        None | Some("") => Ok(CheckStatus::Critical),
        Some(raw) => CheckStatus::parse(raw)
            .ok_or_else(|| Error::Invalid(format!("Invalid check status: {raw:?}"))),
    }
}

/// `PUT /v1/catalog/register`: registers or updates a node, optionally with a service and
/// checks. Answers `true`.
pub(crate) async fn update_registration(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
    http_kit::RawBody { bytes, .. }: http_kit::RawBody<Error>,
) -> Result<axum::Json<bool>, Error> {
    query.options(&state)?;
    let body: RegisterBody = decode_body(&bytes, REGISTER_FIELDS)?;
    check_body_datacenter(&state, body.datacenter.as_deref())?;
    let node_name = body.node.unwrap_or_default();
    validate_node_name(&node_name)?;
    let skip_node_update = body.skip_node_update.unwrap_or(false);
    let address = body.address.unwrap_or_default();
    if address.is_empty() && !skip_node_update {
        return Err(Error::Invalid("Must provide address".to_owned()));
    }
    let id = body.id.unwrap_or_default();
    if !id.is_empty() && uuid::Uuid::parse_str(&id).is_err() {
        return Err(Error::Invalid(format!(
            "Invalid node ID {id:?}: must be a UUID"
        )));
    }
    let node_meta = body.node_meta.unwrap_or_default();
    validate_meta(&node_meta, "Node", true)?;
    let mut reg = Registration::new(NodeRecord {
        version: RECORD_VERSION,
        id: id.to_lowercase(),
        node: node_name.clone(),
        address,
        datacenter: state.config().datacenter.clone(),
        tagged_addresses: body.tagged_addresses.unwrap_or_default(),
        meta: node_meta,
    });
    reg.skip_node_update = skip_node_update;
    // SkipNodeUpdate leaves an existing node alone (no node:write needed); a missing node is
    // still created, which needs node:write.
    if !skip_node_update
        || crate::store::catalog::load_node(state.storage(), &node_name)
            .await?
            .is_none()
    {
        authz.check(Resource::Node, &node_name, Access::Write)?;
    }

    if let Some(service) = body.service {
        let name = service.service.unwrap_or_default();
        if name.is_empty() {
            return Err(Error::Invalid("Must provide service name".to_owned()));
        }
        let id = service
            .id
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| name.clone());
        validate_id(&id, "service ID")?;
        let meta = service.meta.unwrap_or_default();
        validate_meta(&meta, "Service", false)?;
        authz.check(Resource::Service, &name, Access::Write)?;
        reg.services.push(ServiceRecord {
            version: RECORD_VERSION,
            id,
            service: name,
            tags: service.tags.unwrap_or_default(),
            address: service.address.unwrap_or_default(),
            port: service.port.unwrap_or_default(),
            meta,
            enable_tag_override: service.enable_tag_override.unwrap_or(false),
        });
    }

    let checks = body
        .check
        .into_iter()
        .chain(body.checks.unwrap_or_default());
    let mut seen = BTreeSet::new();
    for check in checks {
        let check_node = check
            .node
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| node_name.clone());
        let name = check.name.unwrap_or_default();
        let check_id = check
            .check_id
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| name.clone());
        if check_node != node_name {
            return Err(Error::Invalid(format!(
                "Node '{check_node}' for check '{check_id}' doesn't match register request node '{node_name}'"
            )));
        }
        validate_id(&check_id, "check ID")?;
        if !seen.insert(check_id.clone()) {
            return Err(Error::Invalid(format!("Duplicate check ID {check_id:?}")));
        }
        let service_id = check.service_id.unwrap_or_default();
        // A service check needs service:write on its service (checked below once the service
        // is known); a node check needs node:write.
        if service_id.is_empty() {
            authz.check(Resource::Node, &node_name, Access::Write)?;
        }
        reg.checks.push(CheckRecord {
            version: RECORD_VERSION,
            node: node_name.clone(),
            name: if name.is_empty() {
                check_id.clone()
            } else {
                name
            },
            check_id,
            status: parse_status(check.status.as_deref())?,
            notes: check.notes.unwrap_or_default(),
            output: truncate_output(&check.output.unwrap_or_default()),
            service_id,
            service_name: String::new(),
            service_tags: Vec::new(),
            kind: CheckKind::None,
            definition: check
                .definition
                .map(DefinitionBody::into_definition)
                .unwrap_or_default(),
        });
    }
    authorize_service_checks(&state, &authz, &reg).await?;
    apply_registration(&state, reg).await?;
    Ok(axum::Json(true))
}

/// Service checks need service:write on the service they belong to.
async fn authorize_service_checks(
    state: &State,
    authz: &Authz,
    reg: &Registration,
) -> Result<(), Error> {
    for check in reg.checks.iter().filter(|c| !c.service_id.is_empty()) {
        let in_request = reg.services.iter().find(|s| s.id == check.service_id);
        let name = match in_request {
            Some(service) => service.service.clone(),
            None => match state
                .storage()
                .get(&service_key(&reg.node.node, &check.service_id))
                .await?
            {
                Some(kv) => decode::<ServiceRecord>(&kv.key, &kv.value)?.service,
                None => return Err(Error::Invalid((reg.missing_service)(&check.service_id))),
            },
        };
        authz.check(Resource::Service, &name, Access::Write)?;
    }
    Ok(())
}

/// `PUT /v1/catalog/deregister`: removes a node (with everything on it), one service (with its
/// checks) or one check. Answers `true`, also when nothing matched.
pub(crate) async fn delete_registration(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
    http_kit::RawBody { bytes, .. }: http_kit::RawBody<Error>,
) -> Result<axum::Json<bool>, Error> {
    query.options(&state)?;
    let body: DeregisterBody = decode_body(&bytes, DEREGISTER_FIELDS)?;
    check_body_datacenter(&state, body.datacenter.as_deref())?;
    let node = body.node.unwrap_or_default();
    validate_node_name(&node)?;
    let service_id = body.service_id.unwrap_or_default();
    let check_id = body.check_id.unwrap_or_default();
    let removal = match (service_id.is_empty(), check_id.is_empty()) {
        (true, true) => {
            authz.check(Resource::Node, &node, Access::Write)?;
            Removal::Node
        }
        (false, _) => {
            authz_service_of(&state, &authz, &node, &service_id).await?;
            Removal::Service(service_id)
        }
        (true, false) => {
            match load_check(state.storage(), &node, &check_id).await? {
                Some(check) if !check.record.service_id.is_empty() => {
                    authz.check(Resource::Service, &check.record.service_name, Access::Write)?;
                }
                _ => authz.check(Resource::Node, &node, Access::Write)?,
            }
            Removal::Check(check_id)
        }
    };
    deregister(&state, &node, removal).await?;
    Ok(axum::Json(true))
}

/// service:write on the stored service (node:write when it does not exist).
async fn authz_service_of(
    state: &State,
    authz: &Authz,
    node: &str,
    service_id: &str,
) -> Result<(), Error> {
    match state.storage().get(&service_key(node, service_id)).await? {
        Some(kv) => {
            let service: ServiceRecord = decode(&kv.key, &kv.value)?;
            authz.check(Resource::Service, &service.service, Access::Write)
        }
        None => authz.check(Resource::Node, node, Access::Write),
    }
}

/// `GET /v1/catalog/datacenters`: only ours.
pub(crate) async fn list_datacenters(
    AxumState(state): AxumState<State>,
) -> axum::Json<Vec<String>> {
    axum::Json(vec![state.config().datacenter.clone()])
}

/// `GET /v1/catalog/nodes`: every node the token may read (blocking; `?node-meta=`).
pub(crate) async fn list_nodes(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Shutdown(shutdown): Shutdown,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    let options = query.options(&state)?;
    let meta_filter = node_meta_filter(&query)?;
    let filter = crate::health::filter_param(&query)?;
    let ((mut nodes, filtered), index) = http_kit::blocking::block(
        state.storage(),
        nodes_range(),
        &options.blocking,
        Some(&shutdown),
        || read_nodes(&state, &authz, &meta_filter),
    )
    .await?;
    crate::health::apply_filter(filter.as_ref(), &mut nodes);
    Ok(Indexed::new(index, nodes).filtered(filtered))
}

async fn read_nodes(
    state: &State,
    authz: &Authz,
    meta_filter: &[(String, String)],
) -> Result<((Vec<Value>, bool), u64), Error> {
    let storage = state.storage();
    let index = storage.range_revision(nodes_range()).await?;
    let nodes: Vec<Stored<NodeRecord>> = scan_records(storage, nodes_range()).await?;
    let mut filtered = false;
    let mut out = Vec::new();
    for node in &nodes {
        if !authz.allows(Resource::Node, &node.record.node, Access::Read) {
            filtered = true;
            continue;
        }
        if node_matches_meta(&node.record, meta_filter) {
            out.push(node_json(node));
        }
    }
    Ok(((out, filtered), index))
}

pub(crate) async fn read_node_unnamed() -> Error {
    Error::BadRequest("Missing node name".to_owned())
}

pub(crate) async fn list_service_instances_unnamed() -> Error {
    Error::BadRequest("Missing service name".to_owned())
}

/// `GET /v1/catalog/node/:node`: the node and its services (`null` for an unknown node, as
/// Consul answers). Blocking.
pub(crate) async fn read_node(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Shutdown(shutdown): Shutdown,
    Path(node): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Value>, Error> {
    let options = query.options(&state)?;
    let range = crate::store::catalog::catalog_range();
    let ((body, filtered), index) = http_kit::blocking::block(
        state.storage(),
        range,
        &options.blocking,
        Some(&shutdown),
        || read_node_services(&state, &authz, &node),
    )
    .await?;
    Ok(Indexed::new(index, body).filtered(filtered))
}

async fn read_node_services(
    state: &State,
    authz: &Authz,
    node: &str,
) -> Result<((Value, bool), u64), Error> {
    let storage = state.storage();
    if !valid_key_part(node) {
        let index = ranges_index(storage, &[nodes_range()]).await?;
        return Ok(((Value::Null, false), index));
    }
    let index = ranges_index(
        storage,
        &[KeyRange::prefix(node_key(node)), node_services_range(node)],
    )
    .await?;
    let Some(stored) = crate::store::catalog::load_node(storage, node).await? else {
        return Ok(((Value::Null, false), index));
    };
    if !authz.allows(Resource::Node, node, Access::Read) {
        return Ok(((Value::Null, true), index));
    }
    let services: Vec<Stored<ServiceRecord>> =
        scan_records(storage, node_services_range(node)).await?;
    let mut filtered = false;
    let mut map = Map::new();
    for service in &services {
        if authz.allows(Resource::Service, &service.record.service, Access::Read) {
            map.insert(service.record.id.clone(), service_json(service));
        } else {
            filtered = true;
        }
    }
    Ok((
        (
            json!({"Node": node_json(&stored), "Services": Value::Object(map)}),
            filtered,
        ),
        index,
    ))
}

/// `GET /v1/catalog/services`: service name → the union of its instances' tags. Blocking.
pub(crate) async fn list_services(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Shutdown(shutdown): Shutdown,
    query: QueryParams,
) -> Result<Indexed<BTreeMap<String, Vec<String>>>, Error> {
    let options = query.options(&state)?;
    let meta_filter = node_meta_filter(&query)?;
    let ((services, filtered), index) = http_kit::blocking::block(
        state.storage(),
        crate::store::catalog::catalog_range(),
        &options.blocking,
        Some(&shutdown),
        || read_services(&state, &authz, &meta_filter),
    )
    .await?;
    Ok(Indexed::new(index, services).filtered(filtered))
}

async fn read_services(
    state: &State,
    authz: &Authz,
    meta_filter: &[(String, String)],
) -> Result<((BTreeMap<String, Vec<String>>, bool), u64), Error> {
    let storage = state.storage();
    let mut ranges = vec![services_range()];
    if !meta_filter.is_empty() {
        ranges.push(nodes_range());
    }
    let index = ranges_index(storage, &ranges).await?;
    let nodes: BTreeMap<String, NodeRecord> = if meta_filter.is_empty() {
        BTreeMap::new()
    } else {
        scan_records::<NodeRecord>(storage, nodes_range())
            .await?
            .into_iter()
            .map(|node| (node.record.node.clone(), node.record))
            .collect()
    };
    let scanned = storage.scan(services_range(), None).await?;
    let mut filtered = false;
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for kv in &scanned.kvs {
        let record: ServiceRecord = decode(&kv.key, &kv.value)?;
        if !authz.allows(Resource::Service, &record.service, Access::Read) {
            filtered = true;
            continue;
        }
        if !meta_filter.is_empty() {
            let node = node_of_service_key(&kv.key).and_then(|name| nodes.get(&name));
            if !node.is_some_and(|node| node_matches_meta(node, meta_filter)) {
                continue;
            }
        }
        out.entry(record.service).or_default().extend(record.tags);
    }
    let out = out
        .into_iter()
        .map(|(name, tags)| (name, tags.into_iter().collect()))
        .collect();
    Ok(((out, filtered), index))
}

/// The node name in a service key (`registry/catalog/services/<node>/<id>`).
pub(crate) fn node_of_service_key(key: &[u8]) -> Option<String> {
    let prefix_len = crate::store::catalog::services_prefix().len();
    let rest = String::from_utf8_lossy(key.get(prefix_len..)?).into_owned();
    rest.split_once('/').map(|(node, _)| node.to_owned())
}

/// `GET /v1/catalog/service/:service`: the instances of a service, with their nodes
/// (`?tag=`, `?node-meta=`). Blocking.
pub(crate) async fn list_service_instances(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Shutdown(shutdown): Shutdown,
    Path(service): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    let options = query.options(&state)?;
    let meta_filter = node_meta_filter(&query)?;
    let tags = tag_filter(&query);
    let filter = crate::health::filter_param(&query)?;
    let ((mut instances, filtered), index) = http_kit::blocking::block(
        state.storage(),
        crate::store::catalog::catalog_range(),
        &options.blocking,
        Some(&shutdown),
        || async {
            let instances = service_instances(state.storage(), &service).await?;
            let mut filtered = false;
            let mut out = Vec::new();
            for (node, svc) in &instances.items {
                if !authz.allows(Resource::Service, &svc.record.service, Access::Read)
                    || !authz.allows(Resource::Node, &node.record.node, Access::Read)
                {
                    filtered = true;
                    continue;
                }
                if node_matches_meta(&node.record, &meta_filter)
                    && service_has_tags(&svc.record, &tags)
                {
                    out.push(service_node_json(node, svc));
                }
            }
            Ok::<_, Error>(((out, filtered), instances.index))
        },
    )
    .await?;
    crate::health::apply_filter(filter.as_ref(), &mut instances);
    Ok(Indexed::new(index, instances).filtered(filtered))
}

/// Every instance of a service with its node, and the index of what was read.
pub(crate) struct Instances {
    pub(crate) items: Vec<(Stored<NodeRecord>, Stored<ServiceRecord>)>,
    pub(crate) index: u64,
}

/// Reads the instances of `service` (by name) with their nodes, in (node, service ID) order.
pub(crate) async fn service_instances(
    storage: &dyn Storage,
    service: &str,
) -> Result<Instances, Error> {
    let index = ranges_index(storage, &[services_range(), nodes_range()]).await?;
    let nodes: BTreeMap<String, Stored<NodeRecord>> =
        scan_records::<NodeRecord>(storage, nodes_range())
            .await?
            .into_iter()
            .map(|node| (node.record.node.clone(), node))
            .collect();
    let scanned = storage.scan(services_range(), None).await?;
    let mut items = Vec::new();
    for kv in &scanned.kvs {
        let stored: Stored<ServiceRecord> = Stored::from_kv(kv)?;
        if stored.record.service != service {
            continue;
        }
        let Some(node_name) = node_of_service_key(&kv.key) else {
            continue;
        };
        if let Some(node) = nodes.get(&node_name) {
            items.push((node.clone(), stored));
        }
    }
    Ok(Instances { items, index })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_format_like_go() {
        assert_eq!(go_duration_string(0), "0s");
        assert_eq!(go_duration_string(100), "100ms");
        assert_eq!(go_duration_string(1_500), "1.5s");
        assert_eq!(go_duration_string(10_000), "10s");
        assert_eq!(go_duration_string(90_000), "1m30s");
        assert_eq!(go_duration_string(3_600_000), "1h0m0s");
    }

    #[test]
    fn body_fields_match_case_insensitively() {
        let body: RegisterBody = decode_body(
            br#"{"node":"n1","address":"10.0.0.1","tagged_addresses":{"Lan":"x"},
                 "service":{"service":"web","enabletagoverride":true},
                 "WriteRequest":{"Token":"t"}}"#,
            REGISTER_FIELDS,
        )
        .unwrap();
        assert_eq!(body.node.as_deref(), Some("n1"));
        assert_eq!(body.tagged_addresses.unwrap()["Lan"], "x");
        let service = body.service.unwrap();
        assert_eq!(service.service.as_deref(), Some("web"));
        assert_eq!(service.enable_tag_override, Some(true));
    }

    #[test]
    fn unknown_body_fields_are_rejected() {
        let err =
            decode_body::<RegisterBody>(br#"{"Node":"n","Bogus":1}"#, REGISTER_FIELDS).unwrap_err();
        assert!(err.to_string().contains("unknown field \"Bogus\""), "{err}");
        let err = decode_body::<RegisterBody>(b"  ", REGISTER_FIELDS).unwrap_err();
        assert_eq!(err.to_string(), "Request decode failed: EOF");
    }

    #[test]
    fn durations_decode_from_strings_and_nanoseconds() {
        let d: GoDuration = serde_json::from_str("\"1m30s\"").unwrap();
        assert_eq!(d.millis(), 90_000);
        let d: GoDuration = serde_json::from_str("10000000000").unwrap();
        assert_eq!(d.millis(), 10_000);
        assert!(serde_json::from_str::<GoDuration>("\"10\"").is_err());
        assert!(serde_json::from_str::<GoDuration>("-1").is_err());
    }

    #[test]
    fn repeated_query_filters_are_all_kept() {
        let query = QueryParams::from_pairs(&[
            ("node-meta", "rack:r1"),
            ("node-meta", "zone:a:b"),
            ("tag", "x"),
            ("tag", "y"),
        ]);
        assert_eq!(
            node_meta_filter(&query).unwrap(),
            vec![
                ("rack".to_owned(), "r1".to_owned()),
                ("zone".to_owned(), "a:b".to_owned())
            ]
        );
        assert_eq!(tag_filter(&query), vec!["x", "y"]);
        let bad = QueryParams::from_pairs(&[("node-meta", "novalue")]);
        assert!(node_meta_filter(&bad).is_err());
    }

    #[test]
    fn long_output_is_truncated() {
        let long = "x".repeat(MAX_OUTPUT + 10);
        let cut = truncate_output(&long);
        assert!(cut.starts_with(&"x".repeat(MAX_OUTPUT)));
        assert!(cut.ends_with(&format!(
            "(captured {MAX_OUTPUT} of {} bytes)",
            MAX_OUTPUT + 10
        )));
    }
}
