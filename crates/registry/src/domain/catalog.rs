//! The catalog's model and its writes: node, service and check registration, deregistration,
//! this server's own registration, and the instances of a service.
//!
//! Where it sits: called by the catalog and agent handlers (`catalog/writes.rs`, `agent/`) once they
//! have decoded and authorized a request, and by the check runner (`tasks/check_runner.rs`);
//! reads and writes the records of `store/catalog.rs`; check status writes are `checks.rs`.
//!
//! Invariants:
//! - Every write is a single compare-and-swap transaction over the records it read, retried up
//!   to [`MAX_ATTEMPTS`] times, then `Error::Contention`.
//! - A service or check is stored only while its node is stored; a check with a ServiceID only
//!   while that service is stored (both guarded in the same transaction).
//! - Rewriting an identical record is skipped, so CreateIndex/ModifyIndex (storage revisions)
//!   and blocking-query indexes move only on real changes.
//! - A check written critical, a check removed, or a node removed is followed by the session
//!   invalidation for it (`sessions.rs`), after the transaction commits.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use storage::{Compare, Op, Storage, Txn};

use crate::domain::{MAX_ATTEMPTS, sessions};
use crate::store::catalog::{
    CheckDefinition, CheckKind, CheckRecord, CheckStatus, DeadlineRecord, NodeRecord,
    RECORD_VERSION, ServiceRecord, check_id_of_key, check_key, deadline_key, node_checks_range,
    node_deadlines_range, node_key, node_of_service_key, node_services_range, nodes_range,
    service_key, services_range, valid_key_part,
};
use crate::store::{Stored, decode, encode, ranges_index, scan_records};
use crate::{Error, SERF_HEALTH_CHECK, State};

/// The Consul version this server reports (`/v1/agent/self`, the `consul` service).
pub(crate) const CONSUL_VERSION: &str = "1.17.0";

/// The service every Consul server registers for itself on its node.
pub(crate) const CONSUL_SERVICE: &str = "consul";

// ---------------------------------------------------------------------------------------------
// Validation shared by the catalog and agent endpoints.

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
// Writes.

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
        let now = state.now_ms();
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
        sessions::invalidate_sessions_for_check(state, &node_name, check_id).await?;
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
        sessions::invalidate_sessions_for_node(state, node).await?;
    }
    for check_id in &removed_checks {
        sessions::invalidate_sessions_for_check(state, node, check_id).await?;
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
// Reads.

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
