//! TOTP MFA method endpoints (paths relative to `sys/`; Vault Enterprise's legacy MFA API):
//!
//! - `mfa/method/totp` LIST → `keys` (method names, sorted; 404 when there are none);
//! - `mfa/method/totp/:name` POST/PUT the method (204), GET its fields, DELETE it (204, also
//!   when missing; its keys go with it);
//! - `mfa/method/totp/:name/generate` GET (or POST): a key for the caller's entity;
//! - `mfa/method/totp/:name/admin-generate` POST `{entity_id}`: a key for that entity;
//! - `mfa/method/:name/admin-destroy` and `mfa/method/totp/:name/admin-destroy` POST
//!   `{entity_id}`: removes that entity's key (204); `.../destroy` (both spellings) removes the
//!   caller's own.
//!
//! Write fields and Vault's checks (`parseTOTPConfig`): `issuer` (required: `issuer must be
//! set`), `period` (seconds or a duration, 30; `period must be greater than zero`), `key_size`
//! (bytes, 20; `key_size must be greater than zero`), `qr_size` (pixels, 200; 0 = no barcode),
//! `algorithm` (`SHA1`, `SHA256`, `SHA512`; else `unrecognized algorithm`), `digits` (6 or 8:
//! `digits can only be 6 or 8`), `skew` (0 or 1, default 1: `skew must be 0 or 1`),
//! `max_validation_attempts` (5; 0 means 5; negative: `max_validation_attempts must be greater
//! than zero`). A write replaces every field (unset ones take their default) and keeps the
//! method's id. Beyond Vault, so that one request cannot exhaust memory: `key_size` at most
//! 1024 and `qr_size` at most 4096 (Vault has no bound; docs/compat.md lists it), and a
//! negative `qr_size` is refused (Vault fails at generate instead).
//!
//! Generate answers `data {url, barcode}`, or, when the entity already has a key, 200 with no
//! data and the warning `Entity already has a secret for MFA method "<name>"`. A token without
//! an entity (root) gets 400 `missing entityID`; an unknown entity 400 `invalid entity ID`; an
//! unknown method 400 `configuration for method name "<name>" does not exist`.
//!
//! The validation of codes on requests is `mfa.rs`'s, called by dispatch.

use secrets_sdk::{Data, Operation, Request, Response, fields};
use serde_json::{Value, json};

use crate::mfa::{self, Generated, Method};
use crate::request::RequestContext;
use crate::{Error, State};

const MAX_KEY_SIZE: i64 = 1024;
const MAX_QR_SIZE: i64 = 4096;

/// Which operation a `sys/mfa/method/...` path names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target<'a> {
    List,
    Method(&'a str),
    Generate(&'a str),
    AdminGenerate(&'a str),
    AdminDestroy(&'a str),
    Destroy(&'a str),
}

fn target(path: &str) -> Option<Target<'_>> {
    let rest = path.strip_prefix("mfa/method/")?.trim_end_matches('/');
    let parts: Vec<&str> = rest.split('/').collect();
    Some(match parts.as_slice() {
        ["totp"] => Target::List,
        ["totp", name] => Target::Method(name),
        ["totp", name, "generate"] => Target::Generate(name),
        ["totp", name, "admin-generate"] => Target::AdminGenerate(name),
        ["totp", name, "admin-destroy"] | [name, "admin-destroy"] => Target::AdminDestroy(name),
        ["totp", name, "destroy"] | [name, "destroy"] => Target::Destroy(name),
        _ => return None,
    })
}

/// Serves `sys/mfa/method/*`.
pub(crate) async fn handle(
    state: &State,
    ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    let path = req.path.strip_prefix("sys/").unwrap_or(&req.path);
    let target = target(path).ok_or(Error::UnsupportedPath)?;
    let writes = matches!(req.operation, Operation::Update | Operation::Create);
    match target {
        Target::List => match req.operation {
            Operation::List => Ok(Some(Response::list(mfa::method_names(state).await?))),
            _ => Err(Error::UnsupportedOperation),
        },
        Target::Method(name) => {
            if !mfa::valid_name(name) {
                return Err(Error::UnsupportedPath);
            }
            match req.operation {
                Operation::Read => Ok(mfa::get_method(state, name)
                    .await?
                    .map(|method| Response::data(method_data(&method)))),
                Operation::Update | Operation::Create => {
                    write_method(state, name, &req.data).await.map(|()| None)
                }
                Operation::Delete => mfa::delete_method(state, name).await.map(|()| None),
                _ => Err(Error::UnsupportedOperation),
            }
        }
        Target::Generate(name) => {
            if !matches!(req.operation, Operation::Read) && !writes {
                return Err(Error::UnsupportedOperation);
            }
            let entity_id = caller_entity(ctx)?;
            generate(state, name, &entity_id).await
        }
        Target::AdminGenerate(name) => {
            if !writes {
                return Err(Error::UnsupportedOperation);
            }
            let entity_id = fields::string(&req.data, "entity_id")?.unwrap_or_default();
            if entity_id.is_empty() {
                return Err(bad("missing entityID"));
            }
            generate(state, name, &entity_id).await
        }
        Target::AdminDestroy(name) => {
            if !writes {
                return Err(Error::UnsupportedOperation);
            }
            let entity_id = fields::string(&req.data, "entity_id")?.unwrap_or_default();
            if entity_id.is_empty() {
                return Err(bad("missing entity ID"));
            }
            destroy(state, name, &entity_id).await
        }
        Target::Destroy(name) => {
            if !writes {
                return Err(Error::UnsupportedOperation);
            }
            let entity_id = caller_entity(ctx)?;
            destroy(state, name, &entity_id).await
        }
    }
}

fn bad(message: impl Into<String>) -> Error {
    Error::InvalidParameter(message.into())
}

fn caller_entity(ctx: &RequestContext) -> Result<String, Error> {
    ctx.token
        .as_ref()
        .and_then(|token| token.entity_id.clone())
        .filter(|id| !id.is_empty())
        .ok_or_else(|| bad("missing entityID"))
}

async fn existing_method(state: &State, name: &str) -> Result<Method, Error> {
    mfa::get_method(state, name).await?.ok_or_else(|| {
        bad(format!(
            "configuration for method name {name:?} does not exist"
        ))
    })
}

async fn generate(state: &State, name: &str, entity_id: &str) -> Result<Option<Response>, Error> {
    let method = existing_method(state, name).await?;
    if !mfa::entity_exists(state, entity_id).await? {
        return Err(bad("invalid entity ID"));
    }
    Ok(Some(
        match mfa::generate(state, &method, entity_id).await? {
            Generated::New { url, barcode } => {
                let mut data = Data::new();
                data.insert("url".to_owned(), Value::String(url));
                data.insert("barcode".to_owned(), Value::String(barcode));
                Response::data(data)
            }
            Generated::AlreadyExists => Response::default().with_warning(format!(
                "Entity already has a secret for MFA method {name:?}"
            )),
        },
    ))
}

async fn destroy(state: &State, name: &str, entity_id: &str) -> Result<Option<Response>, Error> {
    let method = existing_method(state, name).await?;
    if !mfa::entity_exists(state, entity_id).await? {
        return Err(bad("invalid entity ID"));
    }
    mfa::destroy(state, &method, entity_id).await?;
    Ok(None)
}

fn method_data(method: &Method) -> Data {
    let value = json!({
        "algorithm": method.algorithm,
        "digits": method.digits,
        "id": method.id,
        "issuer": method.issuer,
        "key_size": method.key_size,
        "max_validation_attempts": method.max_validation_attempts,
        "name": method.name,
        "period": method.period,
        "qr_size": method.qr_size,
        "skew": method.skew,
        "type": "totp",
    });
    match value {
        Value::Object(map) => map,
        _ => Data::new(),
    }
}

/// Validates a write (module docs) and stores the method, keeping an existing method's id.
async fn write_method(state: &State, name: &str, data: &Data) -> Result<(), Error> {
    let algorithm = fields::string(data, "algorithm")?.unwrap_or_else(|| "SHA1".to_owned());
    if secrets_totp::Algorithm::parse(&algorithm).is_none() {
        return Err(bad("unrecognized algorithm"));
    }
    let digits = match fields::int(data, "digits")?.unwrap_or(6) {
        6 => 6,
        8 => 8,
        _ => return Err(bad("digits can only be 6 or 8")),
    };
    let period = fields::signed_duration(data, "period")?.unwrap_or(30);
    let period = u64::try_from(period)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| bad("period must be greater than zero"))?;
    let skew = match fields::int(data, "skew")?.unwrap_or(1) {
        0 => 0,
        1 => 1,
        _ => return Err(bad("skew must be 0 or 1")),
    };
    let key_size = fields::int(data, "key_size")?.unwrap_or(20);
    if key_size <= 0 {
        return Err(bad("key_size must be greater than zero"));
    }
    if key_size > MAX_KEY_SIZE {
        return Err(bad(format!("key_size must be at most {MAX_KEY_SIZE}")));
    }
    let issuer = fields::string(data, "issuer")?.unwrap_or_default();
    if issuer.is_empty() {
        return Err(bad("issuer must be set"));
    }
    let attempts = fields::int(data, "max_validation_attempts")?.unwrap_or(5);
    if attempts < 0 {
        return Err(bad("max_validation_attempts must be greater than zero"));
    }
    let attempts = if attempts == 0 { 5 } else { attempts };
    let qr_size = fields::int(data, "qr_size")?.unwrap_or(200);
    if !(0..=MAX_QR_SIZE).contains(&qr_size) {
        return Err(bad(format!("qr_size must be between 0 and {MAX_QR_SIZE}")));
    }
    let id = match mfa::get_method(state, name).await? {
        Some(existing) => existing.id,
        None => uuid::Uuid::new_v4().to_string(),
    };
    let method = Method {
        version: 1,
        id,
        name: name.to_owned(),
        issuer,
        period,
        key_size: u32::try_from(key_size).unwrap_or(20),
        qr_size: u32::try_from(qr_size).unwrap_or(200),
        algorithm,
        digits,
        skew,
        max_validation_attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
    };
    mfa::put_method(state, &method).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_targets_with_both_destroy_spellings() {
        assert_eq!(target("mfa/method/totp"), Some(Target::List));
        assert_eq!(target("mfa/method/totp/"), Some(Target::List));
        assert_eq!(target("mfa/method/totp/m"), Some(Target::Method("m")));
        assert_eq!(
            target("mfa/method/totp/m/generate"),
            Some(Target::Generate("m"))
        );
        assert_eq!(
            target("mfa/method/totp/m/admin-generate"),
            Some(Target::AdminGenerate("m"))
        );
        assert_eq!(
            target("mfa/method/totp/m/admin-destroy"),
            Some(Target::AdminDestroy("m"))
        );
        assert_eq!(
            target("mfa/method/m/admin-destroy"),
            Some(Target::AdminDestroy("m"))
        );
        assert_eq!(target("mfa/method/m/destroy"), Some(Target::Destroy("m")));
        assert_eq!(
            target("mfa/method/totp/m/destroy"),
            Some(Target::Destroy("m"))
        );
        assert_eq!(target("mfa/method/m"), None);
        assert_eq!(target("mfa/method/totp/m/other"), None);
        assert_eq!(target("mfa/validate"), None);
    }
}
