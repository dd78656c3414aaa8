//! Policy endpoints (paths relative to `sys/`):
//!
//! - `policies/acl` LIST → `keys` (stored names, then `root`);
//!   `policies/acl/:name` GET `{name, policy}`, POST/PUT `{policy}` → 204, DELETE → 204;
//! - legacy `policy` GET or LIST → `{keys, policies}`; `policy/:name` GET `{name, rules}`,
//!   POST/PUT `{policy}` (or the deprecated `rules`, with a warning), DELETE;
//! - `policies/rgp[/:name]`, `policies/egp[/:name]`: the same CRUD with `enforcement_level`
//!   (and EGP `paths`); stored and validated, never evaluated (docs/compat.md says so). The
//!   EGP list adds `name_path_map`.
//!
//! Vault's rules (docs/design.md §U3): names are lower-cased with the warning `policy name was
//! converted to <name>`; the document may be base64-encoded; an empty document is 400 `'policy'
//! parameter not supplied or empty`; a parse error is 400; `root` cannot be written or
//! deleted, `default` cannot be deleted; deleting a missing policy is 204.
//!
//! Invariant: nothing is written unless the whole request validated.

use base64::Engine as _;
use secrets_sdk::{Data, Operation, Request, Response, fields};
use serde_json::{Value, json};

use crate::policy::{Governing, GoverningRecord};
use crate::request::RequestContext;
use crate::{Error, State};

const ENFORCEMENT_LEVELS: &[&str] = &["advisory", "soft-mandatory", "hard-mandatory"];

/// Serves `sys/policy*` and `sys/policies/*`.
pub(crate) async fn handle(
    state: &State,
    _ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    let path = req
        .path
        .strip_prefix("sys/")
        .unwrap_or(&req.path)
        .to_owned();
    if path == "policy" || path == "policy/" {
        return match req.operation {
            Operation::Read | Operation::List => Ok(Some(list_acl(state, true))),
            _ => Err(Error::UnsupportedOperation),
        };
    }
    if let Some(name) = path.strip_prefix("policy/") {
        return acl_named(state, &req, name, true).await;
    }
    let Some(rest) = path.strip_prefix("policies/") else {
        return Err(Error::UnsupportedPath);
    };
    let (kind, name) = match rest.split_once('/') {
        Some((kind, name)) => (kind, name),
        None => (rest, ""),
    };
    let governing = match kind {
        "acl" => None,
        "rgp" => Some(Governing::Rgp),
        "egp" => Some(Governing::Egp),
        _ => return Err(Error::UnsupportedPath),
    };
    if name.is_empty() {
        if req.operation != Operation::List {
            return Err(Error::UnsupportedOperation);
        }
        return match governing {
            None => Ok(Some(list_acl(state, false))),
            Some(kind) => list_governing(state, kind).await.map(Some),
        };
    }
    match governing {
        None => acl_named(state, &req, name, false).await,
        Some(kind) => governing_named(state, &req, kind, name).await,
    }
}

fn list_acl(state: &State, legacy: bool) -> Response {
    let mut keys: Vec<Value> = state
        .policies()
        .names()
        .into_iter()
        .map(Value::String)
        .collect();
    keys.push(Value::String("root".to_owned()));
    let mut data = Data::new();
    data.insert("keys".to_owned(), Value::Array(keys.clone()));
    if legacy {
        data.insert("policies".to_owned(), Value::Array(keys));
    }
    Response::data(data)
}

/// The name as stored (lower-case) and the warning when it changed.
fn normalise_name(name: &str) -> (String, Option<String>) {
    let lower = name.trim().to_lowercase();
    let warning = (lower != name).then(|| format!("policy name was converted to {lower}"));
    (lower, warning)
}

/// A policy document field: a string (possibly base64), or a JSON object (serialised).
fn document(data: &Data, field: &str) -> Result<Option<String>, Error> {
    let raw = match data.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(_) | Value::Array(_)) => data[field].to_string(),
        Some(_) => fields::string(data, field)?.unwrap_or_default(),
    };
    if raw.is_empty() {
        return Ok(None);
    }
    Ok(Some(decode_base64(raw)))
}

/// Vault decodes the document when it is valid standard base64 (and, here, valid UTF-8).
fn decode_base64(raw: String) -> String {
    match base64::engine::general_purpose::STANDARD.decode(raw.trim()) {
        Ok(bytes) => String::from_utf8(bytes).unwrap_or(raw),
        Err(_) => raw,
    }
}

async fn acl_named(
    state: &State,
    req: &Request,
    name: &str,
    legacy: bool,
) -> Result<Option<Response>, Error> {
    let field = if legacy { "rules" } else { "policy" };
    match req.operation {
        Operation::Read => {
            let name = name.trim().to_lowercase();
            let raw = if name == "root" {
                String::new()
            } else {
                match state.policies().get(&name) {
                    Some(record) => record.raw,
                    None => return Ok(None),
                }
            };
            let mut data = Data::new();
            data.insert("name".to_owned(), Value::String(name));
            data.insert(field.to_owned(), Value::String(raw));
            Ok(Some(Response::data(data)))
        }
        Operation::Create | Operation::Update => {
            let (name, name_warning) = normalise_name(name);
            let mut warnings: Vec<String> = name_warning.into_iter().collect();
            let mut raw = document(&req.data, "policy")?;
            if raw.is_none() && legacy {
                raw = document(&req.data, "rules")?;
                if raw.is_some() {
                    warnings.push("'rules' is deprecated, please use 'policy' instead".to_owned());
                }
            }
            let Some(raw) = raw else {
                return Err(Error::InvalidParameter(
                    "'policy' parameter not supplied or empty".to_owned(),
                ));
            };
            state.policies().set(state, &name, &raw).await?;
            Ok(warned(warnings))
        }
        Operation::Delete => {
            let (name, _) = normalise_name(name);
            state.policies().delete(state, &name).await?;
            Ok(None)
        }
        Operation::List | Operation::Patch => Err(Error::UnsupportedOperation),
    }
}

fn warned(warnings: Vec<String>) -> Option<Response> {
    (!warnings.is_empty()).then(|| Response {
        warnings,
        ..Response::default()
    })
}

async fn list_governing(state: &State, kind: Governing) -> Result<Response, Error> {
    let records = state.policies().list_governing(state, kind).await?;
    let keys: Vec<String> = records.iter().map(|r| r.name.clone()).collect();
    let mut response = Response::list(keys);
    if kind == Governing::Egp {
        let map: serde_json::Map<String, Value> = records
            .iter()
            .map(|r| {
                let paths: Vec<Value> = r
                    .paths
                    .iter()
                    .map(|p| match p.strip_suffix('*') {
                        Some(prefix) => json!({"path": prefix, "glob": true}),
                        None => json!({"path": p, "glob": false}),
                    })
                    .collect();
                (r.name.clone(), Value::Array(paths))
            })
            .collect();
        if let Some(data) = response.data.as_mut() {
            data.insert("name_path_map".to_owned(), Value::Object(map));
        }
    }
    Ok(response)
}

async fn governing_named(
    state: &State,
    req: &Request,
    kind: Governing,
    name: &str,
) -> Result<Option<Response>, Error> {
    match req.operation {
        Operation::Read => {
            let name = name.trim().to_lowercase();
            let Some(record) = state.policies().get_governing(state, kind, &name).await? else {
                return Ok(None);
            };
            let mut data = Data::new();
            data.insert("name".to_owned(), Value::String(record.name));
            data.insert("policy".to_owned(), Value::String(record.policy));
            data.insert(
                "enforcement_level".to_owned(),
                Value::String(record.enforcement_level),
            );
            if kind == Governing::Egp {
                data.insert("paths".to_owned(), json!(record.paths));
            }
            Ok(Some(Response::data(data)))
        }
        Operation::Create | Operation::Update => {
            let (name, name_warning) = normalise_name(name);
            let record = validate_governing(&req.data, kind, name)?;
            state.policies().set_governing(state, kind, &record).await?;
            Ok(warned(name_warning.into_iter().collect()))
        }
        Operation::Delete => {
            let (name, _) = normalise_name(name);
            state
                .policies()
                .delete_governing(state, kind, &name)
                .await?;
            Ok(None)
        }
        Operation::List | Operation::Patch => Err(Error::UnsupportedOperation),
    }
}

fn validate_governing(
    data: &Data,
    kind: Governing,
    name: String,
) -> Result<GoverningRecord, Error> {
    let Some(policy) = document(data, "policy")? else {
        return Err(Error::InvalidParameter(
            "'policy' parameter not supplied or empty".to_owned(),
        ));
    };
    let level = fields::string(data, "enforcement_level")?.unwrap_or_default();
    if level.is_empty() {
        return Err(Error::InvalidParameter(
            "'enforcement_level' parameter not supplied or empty".to_owned(),
        ));
    }
    if !ENFORCEMENT_LEVELS.contains(&level.as_str()) {
        return Err(Error::InvalidParameter(format!(
            "invalid enforcement_level {level:?}: must be one of advisory, soft-mandatory, hard-mandatory"
        )));
    }
    let mut paths = Vec::new();
    if kind == Governing::Egp {
        paths = fields::comma_list(data, "paths")?.unwrap_or_default();
        if paths.is_empty() {
            return Err(Error::InvalidParameter(
                "'paths' parameter not supplied or empty".to_owned(),
            ));
        }
        for path in &mut paths {
            if let Some(stripped) = path.strip_prefix('/') {
                *path = stripped.to_owned();
            }
            let body = path.strip_suffix('*').unwrap_or(path);
            if body.contains('*') {
                return Err(Error::InvalidParameter(format!(
                    "path {path:?}: a glob is only allowed as the last character"
                )));
            }
        }
    }
    Ok(GoverningRecord {
        version: 1,
        name,
        policy,
        enforcement_level: level,
        paths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lower_cased_with_a_warning() {
        assert_eq!(normalise_name("dev"), ("dev".to_owned(), None));
        assert_eq!(
            normalise_name("DevOps"),
            (
                "devops".to_owned(),
                Some("policy name was converted to devops".to_owned())
            )
        );
    }

    #[test]
    fn documents_may_be_base64_or_json_objects() {
        let encoded = base64::engine::general_purpose::STANDARD
            .encode(r#"path "a" { capabilities = ["read"] }"#);
        let data = json!({ "policy": encoded, "obj": {"path": {"a": {"capabilities": ["read"]}}}, "empty": "" });
        let data = data.as_object().unwrap();
        assert_eq!(
            document(data, "policy").unwrap().unwrap(),
            r#"path "a" { capabilities = ["read"] }"#
        );
        assert!(document(data, "obj").unwrap().unwrap().starts_with('{'));
        assert_eq!(document(data, "empty").unwrap(), None);
        assert_eq!(document(data, "missing").unwrap(), None);
    }

    #[test]
    fn governing_policies_validate_level_and_paths() {
        let ok = json!({"policy": "main = rule { true }", "enforcement_level": "soft-mandatory", "paths": "secret/*,sys/mounts"});
        let record =
            validate_governing(ok.as_object().unwrap(), Governing::Egp, "e".into()).unwrap();
        assert_eq!(record.paths, vec!["secret/*", "sys/mounts"]);
        for (body, kind, needle) in [
            (
                json!({"enforcement_level": "advisory"}),
                Governing::Rgp,
                "'policy'",
            ),
            (
                json!({"policy": "x"}),
                Governing::Rgp,
                "'enforcement_level'",
            ),
            (
                json!({"policy": "x", "enforcement_level": "strict"}),
                Governing::Rgp,
                "invalid enforcement_level",
            ),
            (
                json!({"policy": "x", "enforcement_level": "advisory"}),
                Governing::Egp,
                "'paths'",
            ),
            (
                json!({"policy": "x", "enforcement_level": "advisory", "paths": ["a*b"]}),
                Governing::Egp,
                "glob",
            ),
        ] {
            let err = validate_governing(body.as_object().unwrap(), kind, "n".into()).unwrap_err();
            assert!(err.to_string().contains(needle), "{err}");
        }
    }
}
