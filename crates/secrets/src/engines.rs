//! The engine registry: every mount type the store can instantiate, by name.
//!
//! Secrets engines (`sys/mounts`) and auth methods (`sys/auth`) share one map but are kept
//! apart by [`AUTH_METHODS`]: `kv` cannot be enabled as an auth method, nor `userpass` as a
//! secrets engine. Later engines join by adding one line to [`registry`] (and, for auth
//! methods, to [`AUTH_METHODS`]). The built-in `system`, `identity` and `token` backends are not
//! in the registry: `mounts.rs` builds them itself and never lets users mount them; `cubbyhole`
//! is, but `mounts.rs` mounts it once, at `cubbyhole/`, and refuses it anywhere else.
//!
//! Invariant: a factory only builds an engine over the storage view it is handed; it never
//! reaches other storage.

use std::collections::HashMap;

use secrets_sdk::Factory;

/// Registry names that are auth methods (mounted under `auth/`).
pub(crate) const AUTH_METHODS: &[&str] = &["userpass"];

/// Every engine and auth method type, by name.
pub(crate) fn registry() -> HashMap<&'static str, Factory> {
    let mut engines: HashMap<&'static str, Factory> = HashMap::new();
    engines.insert("kv", secrets_kv::factory);
    engines.insert("cubbyhole", secrets_cubbyhole::factory);
    engines.insert("pki", secrets_pki::factory);
    engines.insert("ssh", secrets_ssh::factory);
    engines.insert("database", secrets_database::factory);
    engines.insert("ad", secrets_ad::factory);
    engines.insert("userpass", crate::userpass::factory);
    engines
}

/// Whether `kind` can be mounted as an auth method (`auth == true`) or a secrets engine.
pub(crate) fn is_known(kind: &str, auth: bool) -> bool {
    AUTH_METHODS.contains(&kind) == auth && registry().contains_key(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_is_a_secrets_engine_and_userpass_an_auth_method() {
        assert!(is_known("kv", false));
        assert!(!is_known("kv", true));
        assert!(is_known("userpass", true));
        assert!(!is_known("userpass", false));
        assert!(!is_known("nope", false));
    }
}
