//! The `auth/token/*` endpoints (hvac `api/auth_methods/token.py`), reached through dispatch
//! with paths relative to `auth/token/` (`create`, `lookup-self`, `roles/x`, ...).
//!
//! Create and renew put the rendered `auth` object into `data` under
//! `dispatch::ENVELOPE_AUTH_KEY`; dispatch moves it to the envelope's `auth` (data `null`).
//! Lookups answer `data` with Vault's fields; revokes answer 204.
//!
//! Invariants: every endpoint except the role CRUD and `tidy` acts on a token that `lookup`
//! considers live; `revoke-orphan` and `accessors` need root or sudo (checked here as well as by
//! dispatch); unknown tokens on `revoke` are a no-op (204), as Vault.

use std::sync::Arc;
use std::time::Duration;

use secrets_sdk::{Data, Operation, Request, Response, fields};
use serde_json::{Value, json};
use stdx::time::format_rfc3339_millis;

use super::create::CreateKind;
use super::{TokenEntry, auth_json, roles, store};
use crate::dispatch::ENVELOPE_AUTH_KEY;
use crate::request::RequestContext;
use crate::{Error, State};

fn bad(msg: impl Into<String>) -> Error {
    Error::InvalidParameter(msg.into())
}

/// Whether the caller holds root, or `sudo` on `auth/token/<path>`.
fn has_sudo(ctx: &RequestContext, path: &str, data: &Data) -> bool {
    if ctx.token.as_deref().is_some_and(TokenEntry::is_root) {
        return true;
    }
    ctx.acl.as_ref().is_some_and(|acl| {
        acl.is_root() || acl.allows(&format!("auth/token/{path}"), Operation::Update, data, true)
    })
}

fn caller(ctx: &RequestContext) -> Result<&TokenEntry, Error> {
    ctx.token.as_deref().ok_or(Error::PermissionDenied)
}

/// Serves `auth/token/*`.
pub(crate) async fn handle(
    state: &State,
    ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    let path = req.path.strip_prefix("auth/token/").unwrap_or(&req.path);
    let path = path.trim_start_matches('/').to_owned();
    let op = req.operation;
    let data = &req.data;
    let write = matches!(op, Operation::Create | Operation::Update);
    let (head, rest) = match path.split_once('/') {
        Some((head, rest)) => (head, rest),
        None => (path.as_str(), ""),
    };
    match (head, rest, op) {
        ("create", "", _) if write => create(state, ctx, data, CreateKind::Normal).await,
        ("create-orphan", "", _) if write => create(state, ctx, data, CreateKind::Orphan).await,
        ("create", role, _) if write && !role.contains('/') => {
            let Some(role) = roles::get(state, role).await? else {
                return Err(bad(format!("unknown role {role}")));
            };
            create(state, ctx, data, CreateKind::Role(&role)).await
        }
        ("lookup", "", Operation::Read) | ("lookup-self", "", Operation::Read) => {
            lookup(state, ctx, data, head == "lookup").await
        }
        ("lookup", "", _) | ("lookup-self", "", _) if write => {
            lookup(state, ctx, data, head == "lookup").await
        }
        ("lookup-accessor", acc, _) if write || op == Operation::Read => {
            let accessor = accessor_field(data, acc)?;
            let entry = state
                .tokens()
                .lookup_accessor(state, &accessor)
                .await?
                .ok_or_else(|| bad("invalid accessor"))?;
            Ok(Some(lookup_response(state, &entry, false)))
        }
        ("renew", tok, _) if write => {
            let token = token_field(data, tok)?.ok_or_else(|| bad("missing token"))?;
            let entry = state
                .tokens()
                .lookup(state, &token)
                .await?
                .ok_or_else(|| bad("invalid token"))?;
            renew(state, Arc::unwrap_or_clone(entry), data).await
        }
        ("renew-self", "", _) if write => renew(state, caller(ctx)?.clone(), data).await,
        ("renew-accessor", acc, _) if write => {
            let accessor = accessor_field(data, acc)?;
            let entry = state
                .tokens()
                .lookup_accessor(state, &accessor)
                .await?
                .ok_or_else(|| bad("invalid accessor"))?;
            let mut response = renew(state, entry, data).await?;
            // Renewing by accessor must not hand out the token itself.
            if let Some(Value::Object(auth)) = response
                .as_mut()
                .and_then(|r| r.data.as_mut())
                .and_then(|d| d.get_mut(ENVELOPE_AUTH_KEY))
            {
                auth.insert("client_token".to_owned(), Value::String(String::new()));
            }
            Ok(response)
        }
        ("revoke", tok, _) if write => {
            let token = token_field(data, tok)?.ok_or_else(|| bad("missing token"))?;
            state
                .tokens()
                .revoke_tree(state, &store::hash_id(&token))
                .await?;
            Ok(None)
        }
        ("revoke-self", "", _) if write => {
            let me = caller(ctx)?;
            state.tokens().revoke_tree(state, &me.hash()).await?;
            Ok(None)
        }
        ("revoke-accessor", acc, _) if write => {
            let accessor = accessor_field(data, acc)?;
            let entry = state
                .tokens()
                .lookup_accessor(state, &accessor)
                .await?
                .ok_or_else(|| bad("invalid accessor"))?;
            state.tokens().revoke_tree(state, &entry.hash()).await?;
            Ok(None)
        }
        ("revoke-orphan", tok, _) if write => {
            if !has_sudo(ctx, &path, data) {
                return Err(Error::Forbidden(
                    "root or sudo privileges required to revoke and orphan".to_owned(),
                ));
            }
            let token = token_field(data, tok)?.ok_or_else(|| bad("missing token"))?;
            state
                .tokens()
                .revoke_one(state, &store::hash_id(&token), true)
                .await?;
            Ok(None)
        }
        ("accessors", "", Operation::List) => {
            if !has_sudo(ctx, &path, data) {
                return Err(Error::PermissionDenied);
            }
            let keys: Vec<String> = store::list(state, store::ACCESSOR_PREFIX)
                .await?
                .into_iter()
                .filter(|k| !k.ends_with('/'))
                .collect();
            Ok((!keys.is_empty()).then(|| Response::list(keys)))
        }
        ("roles", "", Operation::List) => roles::list(state).await,
        ("roles", name, Operation::Read) if !name.is_empty() => roles::read(state, name).await,
        ("roles", name, _) if write && !name.is_empty() => roles::write(state, name, data).await,
        ("roles", name, Operation::Delete) if !name.is_empty() => roles::delete(state, name).await,
        ("tidy", "", _) if write => {
            super::tidy(state).await?;
            state.leases().tidy(state).await?;
            Ok(Some(Response::default().with_warning(
                "Tidy operation successfully started. Any information from the operation will be printed to Vault's server logs.",
            )))
        }
        (
            "create" | "create-orphan" | "lookup" | "lookup-self" | "lookup-accessor" | "renew"
            | "renew-self" | "renew-accessor" | "revoke" | "revoke-self" | "revoke-accessor"
            | "revoke-orphan" | "accessors" | "roles" | "tidy",
            _,
            _,
        ) => Err(Error::UnsupportedOperation),
        _ => Err(Error::UnsupportedPath),
    }
}

/// `token` from the body, else from the path (legacy `revoke/<token>`).
fn token_field(data: &Data, from_path: &str) -> Result<Option<String>, Error> {
    Ok(fields::string(data, "token")?
        .filter(|t| !t.is_empty())
        .or_else(|| (!from_path.is_empty()).then(|| from_path.to_owned())))
}

fn accessor_field(data: &Data, from_path: &str) -> Result<String, Error> {
    fields::string(data, "accessor")?
        .filter(|a| !a.is_empty())
        .or_else(|| (!from_path.is_empty()).then(|| from_path.to_owned()))
        .ok_or_else(|| bad("missing accessor"))
}

fn with_auth(state: &State, entry: &TokenEntry, warnings: Vec<String>) -> Response {
    let mut data = Data::new();
    data.insert(
        ENVELOPE_AUTH_KEY.to_owned(),
        auth_json(entry, state.now_ms()),
    );
    Response {
        data: Some(data),
        warnings,
        ..Response::default()
    }
}

async fn create(
    state: &State,
    ctx: &RequestContext,
    data: &Data,
    kind: CreateKind<'_>,
) -> Result<Option<Response>, Error> {
    let parent = caller(ctx)?;
    let path = match kind {
        CreateKind::Normal => "create".to_owned(),
        CreateKind::Orphan => "create-orphan".to_owned(),
        CreateKind::Role(role) => format!("create/{}", role.name),
    };
    let sudo = has_sudo(ctx, &path, data);
    let (entry, warnings) = state
        .tokens()
        .create_token(state, parent, sudo, data, kind)
        .await?;
    Ok(Some(with_auth(state, &entry, warnings)))
}

async fn lookup(
    state: &State,
    ctx: &RequestContext,
    data: &Data,
    by_body: bool,
) -> Result<Option<Response>, Error> {
    let requested = if by_body {
        fields::string(data, "token")?.filter(|t| !t.is_empty())
    } else {
        None
    };
    let entry = match requested {
        Some(token) => state
            .tokens()
            .lookup(state, &token)
            .await?
            .map(Arc::unwrap_or_clone)
            .ok_or_else(|| Error::Forbidden("bad token".to_owned()))?,
        None => {
            // Re-read: dispatch may have just counted a use.
            let me = caller(ctx)?;
            let fresh = state.tokens().read(state, &me.hash()).await?;
            let mut entry = fresh.unwrap_or_else(|| me.clone());
            entry.num_uses = entry.num_uses.max(0);
            entry
        }
    };
    Ok(Some(lookup_response(state, &entry, true)))
}

/// Vault's lookup `data` (`token_store.go: handleLookup`).
fn lookup_response(state: &State, entry: &TokenEntry, show_id: bool) -> Response {
    let now = state.now_ms();
    let mut data = json!({
        "id": if show_id { entry.id.clone() } else { String::new() },
        "accessor": entry.accessor,
        "policies": entry.policies,
        "path": entry.path,
        "meta": if entry.meta.is_empty() { Value::Null } else { json!(entry.meta) },
        "display_name": entry.display_name,
        "num_uses": entry.num_uses.max(0),
        "orphan": entry.parent.is_none(),
        "creation_time": entry.creation_time.div_euclid(1000),
        "creation_ttl": entry.ttl,
        "expire_time": Value::Null,
        "ttl": 0,
        "explicit_max_ttl": entry.explicit_max_ttl,
        "entity_id": entry.entity_id.clone().unwrap_or_default(),
        "type": entry.token_type,
    });
    let map = data.as_object_mut().expect("a JSON object");
    if let Some(role) = &entry.role {
        map.insert("role".to_owned(), json!(role));
    }
    if entry.period > 0 {
        map.insert("period".to_owned(), json!(entry.period));
    }
    if let Some(expire) = entry.expire_time {
        map.insert(
            "expire_time".to_owned(),
            json!(format_rfc3339_millis(expire)),
        );
        map.insert("ttl".to_owned(), json!(entry.ttl_left(now)));
        map.insert("renewable".to_owned(), json!(entry.renewable));
        map.insert(
            "issue_time".to_owned(),
            json!(format_rfc3339_millis(entry.creation_time)),
        );
        if let Some(at) = entry.last_renewal {
            map.insert("last_renewal".to_owned(), json!(format_rfc3339_millis(at)));
            map.insert("last_renewal_time".to_owned(), json!(at.div_euclid(1000)));
        }
    }
    Response::data(roles::as_map(data))
}

/// Renews a token (`increment` in the body, seconds or a duration string).
async fn renew(state: &State, entry: TokenEntry, data: &Data) -> Result<Option<Response>, Error> {
    let increment = fields::duration(data, "increment")?.unwrap_or_default();
    if entry.expire_time.is_none() {
        // Root-like tokens have no lease: nothing to extend.
        return Ok(Some(with_auth(state, &entry, Vec::new())));
    }
    if !entry.renewable {
        return Err(bad("lease is not renewable"));
    }
    let tokens = state.tokens();
    let _guard = tokens.write_lock.lock().await;
    let Some(mut entry) =
        store::get_json::<TokenEntry>(state, &store::id_key(&entry.hash())).await?
    else {
        return Err(bad("invalid token"));
    };
    let now = state.now_ms();
    if entry.is_dead(now) {
        return Err(bad("invalid token"));
    }
    let ttl = if entry.period > 0 {
        Duration::from_secs(entry.period)
    } else if !increment.is_zero() {
        increment
    } else {
        Duration::from_secs(entry.ttl)
    };
    let mut warnings = Vec::new();
    let mut expire = now + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2);
    if let Some(max) = entry.max_expire
        && expire > max
    {
        warnings.push(format!(
            "TTL of \"{}s\" exceeded the effective max_ttl of \"{}s\"; TTL value is capped accordingly",
            ttl.as_secs(),
            (max - now).max(0) / 1000
        ));
        expire = max;
    }
    entry.expire_time = Some(expire);
    entry.last_renewal = Some(now);
    tokens.write(state, &entry).await?;
    Ok(Some(with_auth(state, &entry, warnings)))
}
