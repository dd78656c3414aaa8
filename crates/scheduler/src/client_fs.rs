//! `/v1/client/fs/*`: an allocation's files (`ls`, `stat`, `cat`, `readat`, `stream`) and its
//! tasks' logs (`logs`), served by the client that runs the allocation through a call
//! (`client_rpc.rs`); the client resolves paths inside the allocation directory and streams
//! the answer, which passes through here unchanged (a followed log streams until the task's
//! allocation is done or the HTTP client goes away).
//!
//! Query parameters are checked here with upstream's texts (all 400s): `logs` needs `task`
//! (`must provide task name`), a `type` of stdout or stderr, an `origin` of start or end,
//! integer `offset`, boolean `follow` and `plain`; `readat` needs integer `offset` and
//! `limit`; `path` defaults to `/`, except for `stream`, which needs one (`must provide a file
//! name`) and follows unless `follow=false`. ACL: `read-fs` for files, `read-logs` for logs, in the
//! allocation's namespace.
//!
//! Invariants: nothing reaches a client before the allocation, the token and the parameters
//! are checked; a path escaping the allocation directory is the client's 400.

use axum::extract::{Path, State};
use axum::response::Response;
use serde_json::{Value, json};

use crate::Error;
use crate::acl::{Authz, Capability};
use crate::client_rpc::{client_alloc, forward};
use crate::meta::QueryParams;

/// `?path=` (default `/`).
fn path_param(query: &QueryParams) -> String {
    match query.get("path") {
        None | Some("") => "/".to_owned(),
        Some(path) => path.to_owned(),
    }
}

/// An integer parameter, or `default` when absent.
fn int_param(query: &QueryParams, name: &str, default: Option<i64>) -> Result<i64, Error> {
    match (query.get(name), default) {
        (None | Some(""), Some(default)) => Ok(default),
        (raw, _) => {
            let raw = raw.unwrap_or("");
            raw.parse::<i64>().map_err(|_| {
                Error::BadRequest(format!(
                    "error parsing {name}: strconv.ParseInt: parsing {raw:?}: invalid syntax"
                ))
            })
        }
    }
}

/// A boolean parameter in upstream's words.
fn bool_param(query: &QueryParams, name: &str) -> Result<bool, Error> {
    match query.get(name) {
        None | Some("") => Ok(false),
        Some(raw) => stdx::strconv::parse_bool(raw).ok_or_else(|| {
            Error::BadRequest(format!(
                "failed to parse {name} field to boolean: strconv.ParseBool: parsing {raw:?}: invalid syntax"
            ))
        }),
    }
}

async fn files(
    authz: &Authz,
    state: &crate::State,
    alloc_id: &str,
    op: &str,
    params: Value,
) -> Result<Response, Error> {
    let alloc = client_alloc(state, alloc_id)?;
    authz.allow_namespace(&alloc.namespace, Capability::ReadFs)?;
    forward(state, &alloc, op, params).await
}

/// `GET /v1/client/fs/ls/:alloc_id?path=`.
pub(crate) async fn ls(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    query: QueryParams,
) -> Result<Response, Error> {
    let params = json!({ "Path": path_param(&query) });
    files(&authz, &state, &alloc_id, "fs/ls", params).await
}

/// `GET /v1/client/fs/stat/:alloc_id?path=`.
pub(crate) async fn stat(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    query: QueryParams,
) -> Result<Response, Error> {
    let params = json!({ "Path": path_param(&query) });
    files(&authz, &state, &alloc_id, "fs/stat", params).await
}

/// `GET /v1/client/fs/cat/:alloc_id?path=`.
pub(crate) async fn cat(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    query: QueryParams,
) -> Result<Response, Error> {
    let params = json!({ "Path": path_param(&query) });
    files(&authz, &state, &alloc_id, "fs/cat", params).await
}

/// `GET /v1/client/fs/readat/:alloc_id?path=&offset=&limit=`.
pub(crate) async fn readat(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    query: QueryParams,
) -> Result<Response, Error> {
    let offset = int_param(&query, "offset", None)?;
    let limit = int_param(&query, "limit", None)?;
    if offset < 0 || limit < 0 {
        return Err(Error::BadRequest(
            "offset and limit must be non-negative".to_owned(),
        ));
    }
    let params = json!({ "Path": path_param(&query), "Offset": offset, "Limit": limit });
    files(&authz, &state, &alloc_id, "fs/readat", params).await
}

/// `GET /v1/client/fs/logs/:alloc_id?task=&type=&follow=&offset=&origin=&plain=`.
pub(crate) async fn logs(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    query: QueryParams,
) -> Result<Response, Error> {
    let task = query.get("task").unwrap_or("");
    if task.is_empty() {
        return Err(Error::BadRequest("must provide task name".to_owned()));
    }
    let follow = bool_param(&query, "follow")?;
    let plain = bool_param(&query, "plain")?;
    let kind = query.get("type").unwrap_or("");
    if kind != "stdout" && kind != "stderr" {
        return Err(Error::BadRequest(
            "must provide log type (stdout/stderr)".to_owned(),
        ));
    }
    let offset = int_param(&query, "offset", Some(0))?;
    if offset < 0 {
        return Err(Error::BadRequest("offset must be non-negative".to_owned()));
    }
    let origin = match query.get("origin") {
        None | Some("") => "start",
        Some(origin @ ("start" | "end")) => origin,
        Some(_) => {
            return Err(Error::BadRequest("origin must be start or end".to_owned()));
        }
    };
    let alloc = client_alloc(&state, &alloc_id)?;
    authz.allow_namespace(&alloc.namespace, Capability::ReadLogs)?;
    let params = json!({
        "Task": task,
        "Type": kind,
        "Follow": follow,
        "Plain": plain,
        "Offset": offset,
        "Origin": origin,
    });
    forward(&state, &alloc, "fs/logs", params).await
}

/// `GET /v1/client/fs/stream/:alloc_id?path=&offset=&origin=&follow=`: a file of the
/// allocation in Nomad's frames, followed by default.
pub(crate) async fn stream(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    query: QueryParams,
) -> Result<Response, Error> {
    let path = query.get("path").unwrap_or("");
    if path.is_empty() {
        return Err(Error::BadRequest("must provide a file name".to_owned()));
    }
    let follow = match query.get("follow") {
        None | Some("") => true,
        Some(_) => bool_param(&query, "follow")?,
    };
    let offset = int_param(&query, "offset", Some(0))?;
    let origin = match query.get("origin") {
        None | Some("") => "start",
        Some(origin @ ("start" | "end")) => origin,
        Some(_) => {
            return Err(Error::BadRequest("origin must be start or end".to_owned()));
        }
    };
    let params = json!({
        "Path": path,
        "Offset": offset,
        "Origin": origin,
        "Follow": follow,
    });
    files(&authz, &state, &alloc_id, "fs/stream", params).await
}
