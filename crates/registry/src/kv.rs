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
//! Where it sits: handlers parse the flags and authorize; the writes and their locking rules
//! (acquire, release, lock-delays) are `domain/kv.rs`.
//!
//! Invariants: CreateIndex/ModifyIndex are the storage revisions of the entry; conflicting
//! flags (`cas` with `acquire`, ...) are a 400 before anything is written; values over 512 KiB
//! are refused with 413 (Consul's `kv_max_value_size`).

use axum::body::Body;
use axum::extract::{Path, State as StateExtractor};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http_kit::RawBody;
use serde::Serialize;
use storage::{KeyRange, KeyValue};

use crate::acl::{Access, Authz, Resource};
use crate::domain::kv::{self as domain, Put};
use crate::meta::{self, Indexed, QueryParams, resolve_namespace};
use crate::store::decode;
use crate::store::kv::{self as kv_store, KvRecord};
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
) -> Result<Response, Error> {
    read(&state, &authz, key, &query, &headers).await
}

pub(crate) async fn get_kv_root(
    StateExtractor(state): StateExtractor<State>,
    authz: Authz,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Response, Error> {
    read(&state, &authz, String::new(), &query, &headers).await
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
) -> Result<Response, Error> {
    let options = query.options(state)?;
    let namespace = resolve_namespace(query, headers, authz.namespace())?;
    let namespace = namespace.single()?.to_owned();
    if query.has("keys") {
        let separator = query
            .get("separator")
            .or_else(|| query.get("seperator"))
            .unwrap_or_default()
            .to_owned();
        let range = kv_store::kv_range(&namespace, &key);
        let ((keys, filtered), index) = options
            .read(state.storage(), range.clone(), || {
                list_keys(state, authz, &namespace, &key, &separator, range.clone())
            })
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
    let ((entries, filtered), index) = options
        .read(state.storage(), range.clone(), || {
            read_entries(state, authz, &namespace, &key, recurse, range.clone())
        })
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
) -> Result<(Vec<EntryView>, bool), Error> {
    let storage = state.storage();
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
    Ok((entries, filtered))
}

async fn list_keys(
    state: &State,
    authz: &Authz,
    namespace: &str,
    prefix: &str,
    separator: &str,
    range: KeyRange,
) -> Result<(Vec<String>, bool), Error> {
    let storage = state.storage();
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
    Ok((keys, filtered))
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
    let namespace = resolve_namespace(query, headers, authz.namespace())?;
    let namespace = namespace.single()?.to_owned();
    if key.is_empty() {
        return Err(missing_key());
    }
    conflicting_flags(query, &["cas", "acquire", "release"])?;
    let flags = query.u64("flags")?.unwrap_or(0);
    let cas = required_u64(query, "cas", "cas index")?;
    authz.check(Resource::Key, &key, Access::Write)?;
    let request = Put {
        namespace: &namespace,
        key: &key,
        flags,
        value: body,
    };
    if query.has("acquire") {
        let session = query.get("acquire").unwrap_or_default();
        if session.is_empty() {
            return Err(Error::Invalid("missing session".to_owned()));
        }
        return domain::acquire(state, &request, session).await;
    }
    if query.has("release") {
        let session = query.get("release").unwrap_or_default();
        if session.is_empty() {
            return Err(Error::Invalid("missing session".to_owned()));
        }
        return domain::release(state, &request, session).await;
    }
    domain::put(state, &request, cas).await
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
    let namespace = resolve_namespace(query, headers, authz.namespace())?;
    let namespace = namespace.single()?.to_owned();
    conflicting_flags(query, &["recurse", "cas"])?;
    if query.has("recurse") {
        // Consul refuses a recursive delete when any rule beneath the prefix denies write.
        authz.check_subtree(Resource::Key, &key, Access::Write)?;
        domain::delete_tree(state, &namespace, &key).await?;
        return Ok(true);
    }
    if key.is_empty() {
        return Err(missing_key());
    }
    let cas = required_u64(query, "cas", "cas index")?;
    authz.check(Resource::Key, &key, Access::Write)?;
    domain::delete(state, &namespace, &key, cas).await
}
