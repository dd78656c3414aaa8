//! `/v1/kv/*key`: Consul's key-value store with session locks.
//!
//! - GET: one entry, or with `recurse` every entry under the prefix, or with `keys` the key
//!   names (grouped up to `separator`); `raw` answers one entry's bytes. Blocking (`index`,
//!   `wait`) on the key or the prefix; a missing key (or an empty prefix) is a 404 with an empty
//!   body and the index headers.
//! - PUT: the body is the value; `flags`, `cas`, `acquire=<session>`, `release=<session>`;
//!   answers the JSON `true` or `false`.
//! - DELETE: one key, or with `recurse` the prefix; `cas`; answers `true` or `false`.
//!
//! Acquire and release follow Consul exactly (reference §1.5): a live lock-delay on the key makes
//! acquire answer `false` before anything else; an unknown session is a 400
//! `invalid session "<id>"` (Consul: 500); the holder re-acquiring keeps `LockIndex`; another
//! holder gets `false`; a free key gets `LockIndex + 1`, a new one 1. Release by a non-holder is
//! `false` and does not look the session up. Plain PUTs keep the entry's `Session` and
//! `LockIndex` (locks are advisory); neither release nor DELETE sets a lock-delay.
//!
//! Invariants: every write is one transaction guarded by the key's mod revision (and for acquire
//! the session's), retried on a lost race; an acquire or release writes or deletes the
//! session's lock record (`store/sessions.rs`) in the same transaction; CreateIndex/ModifyIndex
//! are the storage revisions of the entry; values over 512 KiB are refused with 413 (Consul's
//! `kv_max_value_size`).

use axum::body::Body;
use axum::extract::{Path, State as StateExtractor};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http_kit::{RawBody, Shutdown};
use serde::Serialize;
use storage::{Compare, KeyRange, KeyValue, Op, Txn};

use crate::acl::{Access, Authz, Resource};
use crate::meta::{self, Indexed, QueryParams, resolve_namespace};
use crate::session::{MAX_ATTEMPTS, load_session, lock_record_op, parse_session_id};
use crate::store::kv::{self as kv_store, KvRecord, LockDelayRecord, RECORD_VERSION};
use crate::store::sessions;
use crate::store::{decode, encode};
use crate::{Error, State};

type Json<T> = http_kit::ApiJson<T, Error>;

/// The largest value accepted (Consul's default `kv_max_value_size`).
pub(crate) const MAX_VALUE_SIZE: usize = 512 * 1024;

/// A KV entry as Consul returns it.
#[derive(Debug, Serialize)]
struct EntryView {
    #[serde(rename = "LockIndex")]
    lock_index: u64,
    #[serde(rename = "Key")]
    key: String,
    #[serde(rename = "Flags")]
    flags: u64,
    /// Base64, or `null` for an empty value.
    #[serde(rename = "Value")]
    value: Option<String>,
    #[serde(rename = "Session", skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    #[serde(rename = "CreateIndex")]
    create_index: u64,
    #[serde(rename = "ModifyIndex")]
    modify_index: u64,
}

impl EntryView {
    fn new(key: String, record: KvRecord, kv: &KeyValue) -> EntryView {
        EntryView {
            lock_index: record.lock_index,
            key,
            flags: record.flags,
            value: record.value,
            session: record.session,
            create_index: kv.create_revision,
            modify_index: kv.mod_revision,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Handlers

pub(crate) async fn get_kv(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    Path(key): Path<String>,
    query: QueryParams,
    headers: HeaderMap,
    Shutdown(shutdown): Shutdown,
) -> Result<Response, Error> {
    read(&state, &authz, key, &query, &headers, &shutdown).await
}

pub(crate) async fn get_kv_root(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    query: QueryParams,
    headers: HeaderMap,
    Shutdown(shutdown): Shutdown,
) -> Result<Response, Error> {
    read(&state, &authz, String::new(), &query, &headers, &shutdown).await
}

pub(crate) async fn put_kv(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    Path(key): Path<String>,
    query: QueryParams,
    headers: HeaderMap,
    body: RawBody<Error>,
) -> Result<Json<bool>, Error> {
    write(&state, &authz, key, &query, &headers, &body.bytes)
        .await
        .map(Json::new)
}

pub(crate) async fn put_kv_root(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    query: QueryParams,
    headers: HeaderMap,
    body: RawBody<Error>,
) -> Result<Json<bool>, Error> {
    write(&state, &authz, String::new(), &query, &headers, &body.bytes)
        .await
        .map(Json::new)
}

pub(crate) async fn delete_kv(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    Path(key): Path<String>,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Json<bool>, Error> {
    delete(&state, &authz, key, &query, &headers)
        .await
        .map(Json::new)
}

pub(crate) async fn delete_kv_root(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Json<bool>, Error> {
    delete(&state, &authz, String::new(), &query, &headers)
        .await
        .map(Json::new)
}

fn missing_key() -> Error {
    Error::BadRequest("Missing key name".to_owned())
}

/// Consul's `Conflicting flags: <params>` when more than one of `flags` is present (Consul
/// prints every query parameter, encoded and sorted; this prints the conflicting ones).
fn conflicting_flags(query: &QueryParams, flags: &[&str]) -> Result<(), Error> {
    let mut given: Vec<(&str, &str)> = flags
        .iter()
        .filter_map(|flag| query.get(flag).map(|value| (*flag, value)))
        .collect();
    if given.len() > 1 {
        given.sort_unstable();
        let params = serde_urlencoded::to_string(given).unwrap_or_default();
        return Err(Error::BadRequest(format!("Conflicting flags: {params}")));
    }
    Ok(())
}

/// An unsigned integer parameter that, when present, must parse (`?cas=` included).
fn required_u64(query: &QueryParams, name: &str, what: &str) -> Result<Option<u64>, Error> {
    if !query.has(name) {
        return Ok(None);
    }
    let raw = query.get(name).unwrap_or_default();
    raw.parse::<u64>().map(Some).map_err(|_| {
        Error::BadRequest(format!(
            "Invalid {what}: {raw:?} is not an unsigned integer"
        ))
    })
}

/// A 404 with an empty body and the index of what the query read.
fn not_found(index: u64) -> Response {
    let mut response = StatusCode::NOT_FOUND.into_response();
    meta::set_index(response.headers_mut(), index);
    response
}

// ---------------------------------------------------------------------------------------------
// GET

async fn read(
    state: &State,
    authz: &Authz,
    key: String,
    query: &QueryParams,
    headers: &HeaderMap,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<Response, Error> {
    let options = query.options(state)?;
    let namespace = resolve_namespace(query, headers, authz)?;
    let namespace = namespace.single()?.to_owned();
    if query.has("keys") {
        let separator = query
            .get("separator")
            .or_else(|| query.get("seperator"))
            .unwrap_or_default()
            .to_owned();
        let range = kv_store::kv_range(&namespace, &key);
        let ((keys, filtered), index) = http_kit::blocking::block(
            state.storage(),
            range.clone(),
            &options.blocking,
            Some(shutdown),
            || list_keys(state, authz, &namespace, &key, &separator, range.clone()),
        )
        .await?;
        if keys.is_empty() && !key.is_empty() {
            return Ok(not_found(index));
        }
        return Ok(Indexed::new(index, keys).filtered(filtered).into_response());
    }
    let recurse = query.has("recurse");
    if !recurse {
        if key.is_empty() {
            return Err(missing_key());
        }
        authz.check(Resource::Key, &key, Access::Read)?;
    }
    let range = if recurse {
        kv_store::kv_range(&namespace, &key)
    } else {
        KeyRange::key(kv_store::kv_key(&namespace, &key))
    };
    let ((entries, filtered), index) = http_kit::blocking::block(
        state.storage(),
        range.clone(),
        &options.blocking,
        Some(shutdown),
        || read_entries(state, authz, &namespace, &key, recurse, range.clone()),
    )
    .await?;
    if entries.is_empty() {
        return Ok(not_found(index));
    }
    if query.has("raw") && !recurse {
        return Ok(raw_response(index, &entries[0]));
    }
    Ok(Indexed::new(index, entries)
        .filtered(filtered)
        .into_response())
}

async fn read_entries(
    state: &State,
    authz: &Authz,
    namespace: &str,
    key: &str,
    recurse: bool,
    range: KeyRange,
) -> Result<((Vec<EntryView>, bool), u64), Error> {
    let storage = state.storage();
    let index = storage.range_revision(range.clone()).await?;
    let kvs = if recurse {
        storage.scan(range, None).await?.kvs
    } else {
        storage
            .get(&kv_store::kv_key(namespace, key))
            .await?
            .into_iter()
            .collect()
    };
    let offset = kv_store::kv_key_offset(namespace);
    let mut filtered = false;
    let mut entries = Vec::with_capacity(kvs.len());
    for kv in kvs {
        let name = String::from_utf8_lossy(&kv.key[offset..]).into_owned();
        if recurse && !authz.allows(Resource::Key, &name, Access::Read) {
            filtered = true;
            continue;
        }
        let record: KvRecord = decode(&kv.key, &kv.value)?;
        entries.push(EntryView::new(name, record, &kv));
    }
    Ok(((entries, filtered), index))
}

async fn list_keys(
    state: &State,
    authz: &Authz,
    namespace: &str,
    prefix: &str,
    separator: &str,
    range: KeyRange,
) -> Result<((Vec<String>, bool), u64), Error> {
    let storage = state.storage();
    let index = storage.range_revision(range.clone()).await?;
    let scanned = storage.scan(range, None).await?;
    let offset = kv_store::kv_key_offset(namespace);
    let mut filtered = false;
    let mut keys: Vec<String> = Vec::new();
    for kv in scanned.kvs {
        let name = String::from_utf8_lossy(&kv.key[offset..]).into_owned();
        let after = &name[prefix.len().min(name.len())..];
        let listed = match (separator.is_empty(), after.find(separator)) {
            (false, Some(at)) => name[..prefix.len() + at + separator.len()].to_owned(),
            _ => name,
        };
        if keys.last() == Some(&listed) {
            continue;
        }
        if !authz.allows(Resource::Key, &listed, Access::Read) {
            filtered = true;
            continue;
        }
        keys.push(listed);
    }
    Ok(((keys, filtered), index))
}

fn raw_response(index: u64, entry: &EntryView) -> Response {
    let bytes = entry
        .value
        .as_deref()
        .and_then(|value| BASE64.decode(value).ok())
        .unwrap_or_default();
    let mut response = Response::new(Body::from(bytes));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox"),
    );
    meta::set_index(headers, index);
    response
}

// ---------------------------------------------------------------------------------------------
// PUT

async fn write(
    state: &State,
    authz: &Authz,
    key: String,
    query: &QueryParams,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<bool, Error> {
    query.options(state)?;
    let namespace = resolve_namespace(query, headers, authz)?;
    let namespace = namespace.single()?.to_owned();
    if key.is_empty() {
        return Err(missing_key());
    }
    conflicting_flags(query, &["cas", "acquire", "release"])?;
    let flags = query.u64("flags")?.unwrap_or(0);
    let cas = required_u64(query, "cas", "cas index")?;
    authz.check(Resource::Key, &key, Access::Write)?;
    let value = (!body.is_empty()).then(|| BASE64.encode(body));
    let request = Put {
        namespace: &namespace,
        key: &key,
        flags,
        value,
    };
    if query.has("acquire") {
        let session = query.get("acquire").unwrap_or_default();
        if session.is_empty() {
            return Err(Error::Invalid("missing session".to_owned()));
        }
        return acquire(state, &request, session).await;
    }
    if query.has("release") {
        let session = query.get("release").unwrap_or_default();
        if session.is_empty() {
            return Err(Error::Invalid("missing session".to_owned()));
        }
        return release(state, &request, session).await;
    }
    put(state, &request, cas).await
}

/// What a PUT writes.
#[derive(Debug)]
struct Put<'a> {
    namespace: &'a str,
    key: &'a str,
    flags: u64,
    value: Option<String>,
}

impl Put<'_> {
    fn record(&self, session: Option<String>, lock_index: u64) -> KvRecord {
        KvRecord {
            version: RECORD_VERSION,
            flags: self.flags,
            value: self.value.clone(),
            session,
            lock_index,
        }
    }
}

/// Reads the entry at `kv_key`, decoded, with its mod revision (0 when missing).
async fn load_entry(state: &State, kv_key: &[u8]) -> Result<(Option<KvRecord>, u64), Error> {
    match state.storage().get(kv_key).await? {
        Some(kv) => Ok((Some(decode(&kv.key, &kv.value)?), kv.mod_revision)),
        None => Ok((None, 0)),
    }
}

/// A plain or check-and-set PUT: keeps the entry's session and lock index.
async fn put(state: &State, request: &Put<'_>, cas: Option<u64>) -> Result<bool, Error> {
    let kv_key = kv_store::kv_key(request.namespace, request.key);
    for _ in 0..MAX_ATTEMPTS {
        let (existing, revision) = load_entry(state, &kv_key).await?;
        if cas.is_some_and(|cas| cas != revision) {
            return Ok(false);
        }
        let (session, lock_index) = existing.map_or((None, 0), |e| (e.session, e.lock_index));
        let value = encode(&kv_key, &request.record(session, lock_index))?;
        let txn = Txn::new()
            .when(Compare::ModRevision(kv_key.clone(), revision))
            .then(Op::Put {
                key: kv_key.clone(),
                value,
            });
        if state.storage().txn(txn).await?.succeeded {
            return Ok(true);
        }
        if cas.is_some() {
            return Ok(false);
        }
    }
    Err(Error::Contention)
}

async fn acquire(state: &State, request: &Put<'_>, session: &str) -> Result<bool, Error> {
    let storage = state.storage();
    let kv_key = kv_store::kv_key(request.namespace, request.key);
    let delay_key = kv_store::lock_delay_key(request.namespace, request.key);
    let invalid = || Error::Invalid(format!("invalid session {session:?}"));
    for _ in 0..MAX_ATTEMPTS {
        // 1. A live lock-delay refuses before anything else.
        let mut txn = Txn::new();
        if let Some(delay) = storage.get(&delay_key).await? {
            let record: LockDelayRecord = decode(&delay.key, &delay.value)?;
            if record.until_ms > state.clock().now_ms() {
                tracing::debug!(message = "Rejecting lock of key due to lock-delay.", key = %request.key);
                return Ok(false);
            }
            // Expired: clean it up with this write.
            txn = txn
                .when(Compare::ModRevision(delay_key.clone(), delay.mod_revision))
                .then(Op::Delete {
                    key: delay_key.clone(),
                });
        }
        // 2. The session must exist.
        let id = parse_session_id(session).ok_or_else(invalid)?;
        let (_, session_kv) = load_session(state, &id).await?.ok_or_else(invalid)?;
        // 3. The key's holder decides.
        let (existing, revision) = load_entry(state, &kv_key).await?;
        let lock_index = match existing {
            None => 1,
            Some(entry) => match entry.session {
                Some(holder) if holder == id => entry.lock_index,
                Some(_) => return Ok(false),
                None => entry.lock_index + 1,
            },
        };
        let value = encode(&kv_key, &request.record(Some(id.clone()), lock_index))?;
        txn = txn
            .when(Compare::ModRevision(kv_key.clone(), revision))
            .when(Compare::ModRevision(
                sessions::session_key(&id),
                session_kv.mod_revision,
            ))
            .then(Op::Put {
                key: kv_key.clone(),
                value,
            })
            .then(lock_record_op(&id, request.namespace, request.key)?);
        if storage.txn(txn).await?.succeeded {
            return Ok(true);
        }
    }
    Err(Error::Contention)
}

async fn release(state: &State, request: &Put<'_>, session: &str) -> Result<bool, Error> {
    let kv_key = kv_store::kv_key(request.namespace, request.key);
    let id = parse_session_id(session).unwrap_or_else(|| session.to_owned());
    for _ in 0..MAX_ATTEMPTS {
        let (existing, revision) = load_entry(state, &kv_key).await?;
        let Some(entry) = existing else {
            return Ok(false);
        };
        if entry.session.as_deref() != Some(id.as_str()) {
            return Ok(false);
        }
        let value = encode(&kv_key, &request.record(None, entry.lock_index))?;
        let txn = Txn::new()
            .when(Compare::ModRevision(kv_key.clone(), revision))
            .then(Op::Put {
                key: kv_key.clone(),
                value,
            })
            .then(Op::Delete {
                key: sessions::session_lock_key(&id, request.namespace, request.key),
            });
        if state.storage().txn(txn).await?.succeeded {
            return Ok(true);
        }
    }
    Err(Error::Contention)
}

// ---------------------------------------------------------------------------------------------
// DELETE

async fn delete(
    state: &State,
    authz: &Authz,
    key: String,
    query: &QueryParams,
    headers: &HeaderMap,
) -> Result<bool, Error> {
    query.options(state)?;
    let namespace = resolve_namespace(query, headers, authz)?;
    let namespace = namespace.single()?.to_owned();
    conflicting_flags(query, &["recurse", "cas"])?;
    if query.has("recurse") {
        // Consul refuses a recursive delete when any rule beneath the prefix denies write.
        authz.check_subtree(Resource::Key, &key, Access::Write)?;
        // Lock records of deleted keys go stale; invalidation ignores those.
        let txn = Txn::new().then(Op::DeleteRange(kv_store::kv_range(&namespace, &key)));
        state.storage().txn(txn).await?;
        return Ok(true);
    }
    if key.is_empty() {
        return Err(missing_key());
    }
    let cas = required_u64(query, "cas", "cas index")?;
    authz.check(Resource::Key, &key, Access::Write)?;
    let kv_key = kv_store::kv_key(&namespace, &key);
    for _ in 0..MAX_ATTEMPTS {
        let (existing, revision) = load_entry(state, &kv_key).await?;
        let Some(entry) = existing else {
            // Consul: deleting a missing key succeeds, with or without cas.
            return Ok(true);
        };
        if cas.is_some_and(|cas| cas != revision) {
            return Ok(false);
        }
        let mut txn = Txn::new()
            .when(Compare::ModRevision(kv_key.clone(), revision))
            .then(Op::Delete {
                key: kv_key.clone(),
            });
        if let Some(holder) = &entry.session {
            txn = txn.then(Op::Delete {
                key: sessions::session_lock_key(holder, &namespace, &key),
            });
        }
        if state.storage().txn(txn).await?.succeeded {
            return Ok(true);
        }
        if cas.is_some() {
            return Ok(false);
        }
    }
    Err(Error::Contention)
}
