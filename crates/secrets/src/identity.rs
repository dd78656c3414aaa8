//! Identity (`identity/*`): entities and entity aliases, as Vault's identity store, plus
//! [`entity_for_login`], which binds a login to an entity (created on first login, found again
//! through its alias).
//!
//! Keys (logical, through the barrier):
//! - `identity/entity/<id>` → [`Entity`]
//! - `identity/alias/<id>` → [`Alias`]
//! - `identity/entity-name/<hex of name>` → `{"id": entity id}` (names are unique)
//! - `identity/alias-index/<mount accessor>/<hex of alias name>` → `{"id": alias id}`
//!   ((mount accessor, alias name) is unique)
//! - `identity/entity-aliases/<entity id>/<alias id>` → empty (an entity's aliases)
//!
//! Endpoints (relative to `identity/`): `entity` (POST create, or update with `id`),
//! `entity/id/:id` (GET, POST, DELETE; LIST `entity/id`), `entity/name/:name` (GET, POST,
//! DELETE; LIST `entity/name`), `entity-alias` (POST), `entity-alias/id/:id` (GET, POST,
//! DELETE; LIST `entity-alias/id`). Creating answers `data {id, name}` (entities) or
//! `data {id, canonical_id}` (aliases); updating an existing item answers 204.
//!
//! Invariants: every write holds one process-wide lock, so names and (mount, alias name)
//! pairs stay unique and two first logins of one user make one entity; an entity has at most
//! one alias per mount; deleting an entity deletes its aliases.

use std::collections::BTreeMap;

use secrets_sdk::{Data, Operation, Request, Response, fields};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stdx::hex;
use stdx::time::format_rfc3339_millis;
use tokio::sync::Mutex;

use crate::mounts::MountEntry;
use crate::request::RequestContext;
use crate::tokens::store as kv;
use crate::{Error, State};

const ENTITY_PREFIX: &str = "identity/entity/";
const ALIAS_PREFIX: &str = "identity/alias/";
const ENTITY_NAME_PREFIX: &str = "identity/entity-name/";
const ALIAS_INDEX_PREFIX: &str = "identity/alias-index/";
const ENTITY_ALIASES_PREFIX: &str = "identity/entity-aliases/";

/// Serialises every identity write (uniqueness checks, first logins).
static WRITE_LOCK: Mutex<()> = Mutex::const_new(());

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entity {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) policies: Vec<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) disabled: bool,
    /// Unix milliseconds.
    pub(crate) creation_time: i64,
    pub(crate) last_update_time: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Alias {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) canonical_id: String,
    pub(crate) mount_accessor: String,
    pub(crate) mount_path: String,
    pub(crate) mount_type: String,
    pub(crate) name: String,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) custom_metadata: BTreeMap<String, String>,
    pub(crate) creation_time: i64,
    pub(crate) last_update_time: i64,
}

fn bad(msg: impl Into<String>) -> Error {
    Error::InvalidParameter(msg.into())
}

fn now(state: &State) -> i64 {
    state.now_ms()
}

fn entity_key(id: &str) -> String {
    format!("{ENTITY_PREFIX}{id}")
}

fn alias_key(id: &str) -> String {
    format!("{ALIAS_PREFIX}{id}")
}

fn name_key(name: &str) -> String {
    format!("{ENTITY_NAME_PREFIX}{}", hex::encode(name.as_bytes()))
}

fn alias_index_key(accessor: &str, name: &str) -> String {
    format!(
        "{ALIAS_INDEX_PREFIX}{}/{}",
        hex::encode(accessor.as_bytes()),
        hex::encode(name.as_bytes())
    )
}

fn entity_alias_key(entity: &str, alias: &str) -> String {
    format!("{ENTITY_ALIASES_PREFIX}{entity}/{alias}")
}

fn valid_id(id: &str) -> bool {
    !id.is_empty() && !id.contains('/')
}

async fn get_entity(state: &State, id: &str) -> Result<Option<Entity>, Error> {
    if !valid_id(id) {
        return Ok(None);
    }
    kv::get_json(state, &entity_key(id)).await
}

async fn get_alias(state: &State, id: &str) -> Result<Option<Alias>, Error> {
    if !valid_id(id) {
        return Ok(None);
    }
    kv::get_json(state, &alias_key(id)).await
}

async fn index_id(state: &State, key: &str) -> Result<Option<String>, Error> {
    Ok(kv::get_json::<Value>(state, key)
        .await?
        .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_owned)))
}

async fn entity_by_name(state: &State, name: &str) -> Result<Option<Entity>, Error> {
    match index_id(state, &name_key(name)).await? {
        Some(id) => get_entity(state, &id).await,
        None => Ok(None),
    }
}

async fn aliases_of(state: &State, entity_id: &str) -> Result<Vec<Alias>, Error> {
    let mut out = Vec::new();
    for alias_id in kv::list(state, &format!("{ENTITY_ALIASES_PREFIX}{entity_id}/")).await? {
        if let Some(alias) = get_alias(state, alias_id.trim_end_matches('/')).await? {
            out.push(alias);
        }
    }
    Ok(out)
}

async fn put_entity(state: &State, entity: &Entity, old_name: Option<&str>) -> Result<(), Error> {
    kv::put_json(state, &entity_key(&entity.id), entity).await?;
    if let Some(old) = old_name
        && old != entity.name
    {
        kv::delete(state, &name_key(old)).await?;
    }
    kv::put_json(state, &name_key(&entity.name), &json!({ "id": entity.id })).await
}

async fn put_alias(state: &State, alias: &Alias) -> Result<(), Error> {
    kv::put_json(state, &alias_key(&alias.id), alias).await?;
    kv::put_json(
        state,
        &alias_index_key(&alias.mount_accessor, &alias.name),
        &json!({ "id": alias.id }),
    )
    .await?;
    kv::put(
        state,
        &entity_alias_key(&alias.canonical_id, &alias.id),
        b"",
    )
    .await
}

async fn delete_alias_record(state: &State, alias: &Alias) -> Result<(), Error> {
    kv::delete(state, &alias_index_key(&alias.mount_accessor, &alias.name)).await?;
    kv::delete(state, &entity_alias_key(&alias.canonical_id, &alias.id)).await?;
    kv::delete(state, &alias_key(&alias.id)).await
}

fn new_entity(state: &State, name: Option<String>) -> Entity {
    let id = uuid::Uuid::new_v4().to_string();
    let name = name
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("entity_{}", &id[..8]));
    let at = now(state);
    Entity {
        version: 1,
        id,
        name,
        policies: Vec::new(),
        metadata: BTreeMap::new(),
        disabled: false,
        creation_time: at,
        last_update_time: at,
    }
}

/// The entity a login through `mount` as `alias_name` belongs to: found through the alias
/// (mount accessor, alias name), or created together with that alias on first login.
pub(crate) async fn entity_for_login(
    state: &State,
    mount: &MountEntry,
    alias_name: &str,
) -> Result<String, Error> {
    let _guard = WRITE_LOCK.lock().await;
    if let Some(alias_id) = index_id(state, &alias_index_key(&mount.accessor, alias_name)).await?
        && let Some(alias) = get_alias(state, &alias_id).await?
        && get_entity(state, &alias.canonical_id).await?.is_some()
    {
        return Ok(alias.canonical_id);
    }
    let entity = new_entity(state, None);
    put_entity(state, &entity, None).await?;
    let at = now(state);
    let alias = Alias {
        version: 1,
        id: uuid::Uuid::new_v4().to_string(),
        canonical_id: entity.id.clone(),
        mount_accessor: mount.accessor.clone(),
        mount_path: mount.path.clone(),
        mount_type: mount.kind.clone(),
        name: alias_name.to_owned(),
        metadata: BTreeMap::new(),
        custom_metadata: BTreeMap::new(),
        creation_time: at,
        last_update_time: at,
    };
    put_alias(state, &alias).await?;
    Ok(entity.id)
}

/// Whether the entity exists and is not disabled (tokens of disabled entities are refused).
#[allow(dead_code, reason = "for token lookups that honour disabled entities")]
pub(crate) async fn entity_enabled(state: &State, id: &str) -> Result<bool, Error> {
    Ok(get_entity(state, id).await?.is_some_and(|e| !e.disabled))
}

fn map(value: Value) -> Data {
    match value {
        Value::Object(map) => map,
        _ => Data::new(),
    }
}

fn opt_map(m: &BTreeMap<String, String>) -> Value {
    if m.is_empty() { Value::Null } else { json!(m) }
}

fn alias_json(alias: &Alias) -> Value {
    json!({
        "id": alias.id,
        "canonical_id": alias.canonical_id,
        "name": alias.name,
        "mount_accessor": alias.mount_accessor,
        "mount_path": alias.mount_path,
        "mount_type": alias.mount_type,
        "metadata": opt_map(&alias.metadata),
        "custom_metadata": alias.custom_metadata,
        "creation_time": format_rfc3339_millis(alias.creation_time),
        "last_update_time": format_rfc3339_millis(alias.last_update_time),
        "merged_from_canonical_ids": Value::Null,
        "namespace_id": "root",
        "local": false,
    })
}

async fn entity_response(state: &State, entity: &Entity) -> Result<Response, Error> {
    let aliases: Vec<Value> = aliases_of(state, &entity.id)
        .await?
        .iter()
        .map(alias_json)
        .collect();
    Ok(Response::data(map(json!({
        "id": entity.id,
        "name": entity.name,
        "aliases": aliases,
        "policies": entity.policies,
        "metadata": opt_map(&entity.metadata),
        "disabled": entity.disabled,
        "creation_time": format_rfc3339_millis(entity.creation_time),
        "last_update_time": format_rfc3339_millis(entity.last_update_time),
        "direct_group_ids": [],
        "group_ids": [],
        "inherited_group_ids": [],
        "merged_entity_ids": Value::Null,
        "namespace_id": "root",
        "mfa_secrets": {},
    }))))
}

/// Creates or updates an entity. `existing` is the entity addressed by id or name.
async fn write_entity(
    state: &State,
    existing: Option<Entity>,
    data: &Data,
    name_from_path: Option<&str>,
) -> Result<Option<Response>, Error> {
    let requested_name = match name_from_path {
        Some(name) => Some(name.to_owned()),
        None => fields::string(data, "name")?,
    };
    let is_new = existing.is_none();
    let mut entity = match existing {
        Some(entity) => entity,
        None => {
            let mut fresh = new_entity(state, None);
            if let Some(id) = fields::string(data, "id")?.filter(|id| !id.is_empty()) {
                if !valid_id(&id) {
                    return Err(bad("invalid entity id"));
                }
                fresh.id = id;
            }
            fresh
        }
    };
    let old_name = (!is_new).then(|| entity.name.clone());
    if let Some(name) = requested_name.filter(|n| !n.is_empty())
        && name != entity.name
    {
        if let Some(other) = entity_by_name(state, &name).await?
            && other.id != entity.id
        {
            return Err(bad("entity name is already in use"));
        }
        entity.name = name;
    }
    if let Some(policies) = fields::comma_list(data, "policies")? {
        entity.policies = crate::policy::names::sanitize_policies(&policies, false);
    }
    if let Some(metadata) = fields::string_map(data, "metadata")? {
        entity.metadata = metadata;
    }
    if let Some(disabled) = fields::bool(data, "disabled")? {
        entity.disabled = disabled;
    }
    entity.last_update_time = now(state);
    put_entity(state, &entity, old_name.as_deref()).await?;
    if !is_new {
        return Ok(None);
    }
    let aliases: Vec<String> = Vec::new();
    Ok(Some(Response::data(map(json!({
        "id": entity.id,
        "name": entity.name,
        "aliases": aliases,
    })))))
}

async fn delete_entity(state: &State, entity: Option<Entity>) -> Result<Option<Response>, Error> {
    if let Some(entity) = entity {
        for alias in aliases_of(state, &entity.id).await? {
            delete_alias_record(state, &alias).await?;
        }
        kv::delete(state, &name_key(&entity.name)).await?;
        kv::delete(state, &entity_key(&entity.id)).await?;
    }
    Ok(None)
}

async fn list_entities(state: &State, by_name: bool) -> Result<Option<Response>, Error> {
    let mut keys = Vec::new();
    let mut key_info = Data::new();
    for id in kv::list(state, ENTITY_PREFIX).await? {
        if id.ends_with('/') {
            continue;
        }
        let Some(entity) = get_entity(state, &id).await? else {
            continue;
        };
        if by_name {
            keys.push(entity.name);
        } else {
            let aliases: Vec<Value> = aliases_of(state, &id)
                .await?
                .iter()
                .map(|a| {
                    json!({"id": a.id, "name": a.name, "mount_accessor": a.mount_accessor,
                           "mount_path": a.mount_path, "mount_type": a.mount_type})
                })
                .collect();
            key_info.insert(id.clone(), json!({"name": entity.name, "aliases": aliases}));
            keys.push(id);
        }
    }
    if keys.is_empty() {
        return Ok(None);
    }
    keys.sort();
    let mut response = Response::list(keys);
    if !by_name && let Some(data) = response.data.as_mut() {
        data.insert("key_info".to_owned(), Value::Object(key_info));
    }
    Ok(Some(response))
}

/// Creates (no `existing`) or updates an alias.
async fn write_alias(
    state: &State,
    existing: Option<Alias>,
    data: &Data,
) -> Result<Option<Response>, Error> {
    let name = fields::string(data, "name")?.filter(|n| !n.is_empty());
    let canonical = fields::string(data, "canonical_id")?.filter(|c| !c.is_empty());
    let accessor = fields::string(data, "mount_accessor")?.filter(|a| !a.is_empty());
    let is_new = existing.is_none();
    let mut alias = match existing {
        Some(alias) => alias,
        None => {
            let at = now(state);
            Alias {
                version: 1,
                id: uuid::Uuid::new_v4().to_string(),
                canonical_id: String::new(),
                mount_accessor: accessor
                    .clone()
                    .ok_or_else(|| bad("missing mount_accessor"))?,
                mount_path: String::new(),
                mount_type: String::new(),
                name: name.clone().ok_or_else(|| bad("missing alias name"))?,
                metadata: BTreeMap::new(),
                custom_metadata: BTreeMap::new(),
                creation_time: at,
                last_update_time: at,
            }
        }
    };
    let before = (!is_new).then(|| alias.clone());
    if let Some(name) = name {
        alias.name = name;
    }
    if let Some(accessor) = accessor {
        alias.mount_accessor = accessor;
    }
    let Some(mount) = state.mounts().by_accessor(&alias.mount_accessor) else {
        return Err(bad(format!(
            "invalid mount accessor {:?}",
            alias.mount_accessor
        )));
    };
    alias.mount_path = mount.path.clone();
    alias.mount_type = mount.kind.clone();
    if let Some(custom) = fields::string_map(data, "custom_metadata")? {
        alias.custom_metadata = custom;
    }
    // The entity: given, kept, or a new one.
    let mut created_entity = None;
    match canonical {
        Some(id) => {
            if get_entity(state, &id).await?.is_none() {
                return Err(bad("invalid canonical ID"));
            }
            alias.canonical_id = id;
        }
        None if is_new => {
            let entity = new_entity(state, None);
            alias.canonical_id = entity.id.clone();
            created_entity = Some(entity);
        }
        None => {}
    }
    if let Some(other_id) =
        index_id(state, &alias_index_key(&alias.mount_accessor, &alias.name)).await?
        && other_id != alias.id
        && get_alias(state, &other_id).await?.is_some()
    {
        return Err(bad("combination of mount and alias name is already in use"));
    }
    for other in aliases_of(state, &alias.canonical_id).await? {
        if other.id != alias.id && other.mount_accessor == alias.mount_accessor {
            return Err(bad(format!(
                "mount accessor {:?} already in use by alias ID {:?}",
                alias.mount_accessor, other.id
            )));
        }
    }
    if let Some(entity) = &created_entity {
        put_entity(state, entity, None).await?;
    }
    if let Some(before) = &before {
        delete_alias_record(state, before).await?;
    }
    alias.last_update_time = now(state);
    put_alias(state, &alias).await?;
    if !is_new {
        return Ok(None);
    }
    Ok(Some(Response::data(map(json!({
        "id": alias.id,
        "canonical_id": alias.canonical_id,
    })))))
}

async fn list_aliases(state: &State) -> Result<Option<Response>, Error> {
    let mut keys = Vec::new();
    let mut key_info = Data::new();
    for id in kv::list(state, ALIAS_PREFIX).await? {
        if id.ends_with('/') {
            continue;
        }
        if let Some(alias) = get_alias(state, &id).await? {
            key_info.insert(
                id.clone(),
                json!({"canonical_id": alias.canonical_id, "name": alias.name,
                       "mount_accessor": alias.mount_accessor, "mount_path": alias.mount_path,
                       "mount_type": alias.mount_type}),
            );
            keys.push(id);
        }
    }
    if keys.is_empty() {
        return Ok(None);
    }
    let mut response = Response::list(keys);
    if let Some(data) = response.data.as_mut() {
        data.insert("key_info".to_owned(), Value::Object(key_info));
    }
    Ok(Some(response))
}

/// Serves `identity/*` (paths relative to `identity/`).
pub(crate) async fn handle(
    state: &State,
    _ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    let path = req.path.strip_prefix("identity/").unwrap_or(&req.path);
    let path = path.trim_start_matches('/').to_owned();
    let op = req.operation;
    let write = matches!(op, Operation::Create | Operation::Update);
    let data = &req.data;
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    match (segments.as_slice(), op) {
        (["entity"], _) if write => {
            let _guard = WRITE_LOCK.lock().await;
            let existing = match fields::string(data, "id")?.filter(|id| !id.is_empty()) {
                Some(id) => get_entity(state, &id).await?,
                None => None,
            };
            write_entity(state, existing, data, None).await
        }
        (["entity", "id"], Operation::List) => list_entities(state, false).await,
        (["entity", "name"], Operation::List) => list_entities(state, true).await,
        (["entity", "id", id], Operation::Read) => match get_entity(state, id).await? {
            Some(entity) => Ok(Some(entity_response(state, &entity).await?)),
            None => Ok(None),
        },
        (["entity", "name", name], Operation::Read) => match entity_by_name(state, name).await? {
            Some(entity) => Ok(Some(entity_response(state, &entity).await?)),
            None => Ok(None),
        },
        (["entity", "id", id], _) if write => {
            let _guard = WRITE_LOCK.lock().await;
            match get_entity(state, id).await? {
                Some(entity) => write_entity(state, Some(entity), data, None).await,
                None => Err(bad("entity not found from id")),
            }
        }
        (["entity", "name", name], _) if write => {
            let _guard = WRITE_LOCK.lock().await;
            let existing = entity_by_name(state, name).await?;
            write_entity(state, existing, data, Some(name)).await
        }
        (["entity", "id", id], Operation::Delete) => {
            let _guard = WRITE_LOCK.lock().await;
            let entity = get_entity(state, id).await?;
            delete_entity(state, entity).await
        }
        (["entity", "name", name], Operation::Delete) => {
            let _guard = WRITE_LOCK.lock().await;
            let entity = entity_by_name(state, name).await?;
            delete_entity(state, entity).await
        }
        (["entity-alias"], _) if write => {
            let _guard = WRITE_LOCK.lock().await;
            let existing = match fields::string(data, "id")?.filter(|id| !id.is_empty()) {
                Some(id) => get_alias(state, &id).await?,
                None => None,
            };
            write_alias(state, existing, data).await
        }
        (["entity-alias", "id"], Operation::List) => list_aliases(state).await,
        (["entity-alias", "id", id], Operation::Read) => match get_alias(state, id).await? {
            Some(alias) => Ok(Some(Response::data(map(alias_json(&alias))))),
            None => Ok(None),
        },
        (["entity-alias", "id", id], _) if write => {
            let _guard = WRITE_LOCK.lock().await;
            match get_alias(state, id).await? {
                Some(alias) => write_alias(state, Some(alias), data).await,
                None => Err(bad("invalid alias ID provided")),
            }
        }
        (["entity-alias", "id", id], Operation::Delete) => {
            let _guard = WRITE_LOCK.lock().await;
            if let Some(alias) = get_alias(state, id).await? {
                delete_alias_record(state, &alias).await?;
            }
            Ok(None)
        }
        (["entity" | "entity-alias", ..], _) => Err(Error::UnsupportedOperation),
        _ => Err(Error::UnsupportedPath),
    }
}
