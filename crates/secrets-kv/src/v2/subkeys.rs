//! `subkeys/<key>`: the shape of a secret version without its values.
//!
//! Where it sits: routed here by `mount.rs` (reads only); reads `store.rs` records under the
//! key's shared lock.
//!
//! - read (`?version=n`, else the current version; `?depth=d`, 0 for no limit) → `{subkeys,
//!   metadata}` where `subkeys` is the data with every leaf (a non-object, an empty object, or
//!   an object at depth `d`) replaced by `null`; no key or no such version → 404; a deleted or
//!   destroyed version → 404 with `subkeys: null` and the metadata in the body.
//!
//! Invariant: no value of the secret ever appears in the answer.

use secrets_sdk::{Data, EngineError, Response, fields};
use serde_json::{Value, json};

use crate::v2::mount::Mount;
use crate::v2::render;

pub(super) async fn read(
    mount: &Mount,
    key: &str,
    body: &Data,
) -> Result<Option<Response>, EngineError> {
    let depth = fields::int(body, "depth")?.unwrap_or(0);
    let requested = fields::int(body, "version")?.unwrap_or(0);
    let _guard = mount.lock(key).read().await;
    let Some(meta) = mount.store.load_metadata(key).await? else {
        return Ok(None);
    };
    let number = u64::try_from(requested)
        .ok()
        .filter(|n| *n > 0)
        .unwrap_or(meta.current_version);
    let Some(version_meta) = meta.versions.get(&number) else {
        return Ok(None);
    };
    let metadata = render::version_metadata(number, version_meta, &meta.custom_metadata);
    if version_meta.destroyed || version_meta.is_deleted_at(mount.now()) {
        let data = render::object(json!({ "subkeys": null, "metadata": metadata }));
        return Ok(Some(render::not_found_with(Some(data), &[])));
    }
    let version = mount
        .store
        .load_version(key, number)
        .await?
        .ok_or_else(|| EngineError::Internal("could not find version data".to_owned()))?;
    let mut subkeys = version.data;
    strip_values(&mut subkeys, 1, depth);
    Ok(Some(Response::data(render::object(json!({
        "subkeys": subkeys,
        "metadata": metadata,
    })))))
}

/// Replaces every leaf under `map` (at nesting `depth`, the top being 1) with `null`; an
/// object deeper than `max_depth` (unless it is 0) counts as a leaf.
fn strip_values(map: &mut Data, depth: i64, max_depth: i64) {
    for value in map.values_mut() {
        let next = depth + 1;
        match value {
            Value::Object(inner) if !inner.is_empty() && (max_depth == 0 || next <= max_depth) => {
                strip_values(inner, next, max_depth);
            }
            other => *other = Value::Null,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripped(value: Value, max_depth: i64) -> Value {
        let mut map = render::object(value);
        strip_values(&mut map, 1, max_depth);
        Value::Object(map)
    }

    #[test]
    fn subkeys_keep_the_nesting_and_drop_every_value() {
        let secret = json!({"a": 1, "b": {"c": "x", "d": {"e": [1]}, "f": {}}, "g": null});
        assert_eq!(
            stripped(secret.clone(), 0),
            json!({"a": null, "b": {"c": null, "d": {"e": null}, "f": null}, "g": null})
        );
        assert_eq!(
            stripped(secret.clone(), 2),
            json!({"a": null, "b": {"c": null, "d": null, "f": null}, "g": null})
        );
        assert_eq!(
            stripped(secret, 1),
            json!({"a": null, "b": null, "g": null})
        );
    }
}
