//! The `storage "etcd" { ... }` block of cairn's server configuration, as HCL gives it, and its
//! validation into an [`EtcdConfig`].
//!
//! ```hcl
//! storage "etcd" {
//!   endpoints = ["https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://10.0.0.3:2379"]
//!   prefix    = "cairn/"          # every server of one cairn cluster uses the same prefix
//!   username  = "cairn"           # optional, with password
//!   password  = "..."
//!   tls {                         # optional
//!     ca   = "/etc/cairn/etcd-ca.pem"
//!     cert = "/etc/cairn/etcd-client.pem"   # optional, with key
//!     key  = "/etc/cairn/etcd-client-key.pem"
//!   }
//!   history_retention = 10000     # optional; 0 leaves compaction to etcd's operator
//!   max_txn_ops       = 128       # optional: etcd's --max-txn-ops as the cluster runs it
//!   max_request_bytes = 1572864   # optional: etcd's --max-request-bytes as the cluster runs it
//! }
//! ```
//!
//! Where it sits: parsed by `cairn`'s `config.rs` (which owns the rest of the file); kept here
//! so the rules for etcd live with the backend. Invariants: unknown keys are errors; relative
//! paths are resolved against the configuration file's directory; the checks here fail with a
//! message naming the key, before anything connects.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{EtcdConfig, EtcdTls};

/// The block as written.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EtcdBlock {
    pub endpoints: Vec<String>,
    pub prefix: String,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
    #[serde(default)]
    pub tls: Option<TlsBlock>,
    #[serde(default)]
    pub history_retention: Option<u64>,
    /// etcd's `--max-txn-ops` as the cluster runs it (default etcd's 128).
    #[serde(default)]
    pub max_txn_ops: Option<usize>,
    /// etcd's `--max-request-bytes` as the cluster runs it (default etcd's 1.5 MiB).
    #[serde(default)]
    pub max_request_bytes: Option<usize>,
}

/// `tls { ca, cert, key }`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsBlock {
    #[serde(default)]
    pub ca: Option<PathBuf>,
    #[serde(default)]
    pub cert: Option<PathBuf>,
    #[serde(default)]
    pub key: Option<PathBuf>,
}

impl EtcdBlock {
    /// Validates the block; relative paths are relative to `base` (the file's directory).
    pub fn into_config(self, base: &Path) -> Result<EtcdConfig, String> {
        let endpoints: Vec<String> = self
            .endpoints
            .into_iter()
            .map(|endpoint| endpoint.trim().to_owned())
            .collect();
        if endpoints.is_empty() || endpoints.iter().any(String::is_empty) {
            return Err("storage \"etcd\": endpoints must list at least one address".to_owned());
        }
        if self.prefix.is_empty() {
            return Err(
                "storage \"etcd\": prefix must not be empty (servers of one cluster share it)"
                    .to_owned(),
            );
        }
        if self.username.is_some() != self.password.is_some() {
            return Err("storage \"etcd\": username and password go together".to_owned());
        }
        let resolve = |path: PathBuf| {
            if path.is_relative() {
                base.join(path)
            } else {
                path
            }
        };
        let tls = match self.tls {
            None => None,
            Some(tls) => {
                if tls.cert.is_some() != tls.key.is_some() {
                    return Err("storage \"etcd\": tls cert and key go together".to_owned());
                }
                Some(EtcdTls {
                    ca: tls.ca.map(resolve),
                    cert: tls.cert.map(resolve),
                    key: tls.key.map(resolve),
                })
            }
        };
        let history_retention = match self.history_retention {
            None => Some(storage::DEFAULT_HISTORY_RETENTION),
            Some(0) => None,
            Some(retention) => Some(retention),
        };
        let max_txn_ops = self.max_txn_ops.unwrap_or(crate::DEFAULT_MAX_TXN_OPS);
        if max_txn_ops < crate::MIN_MAX_TXN_OPS {
            return Err(format!(
                "storage \"etcd\": max_txn_ops must be at least {} (etcd's --max-txn-ops; its default is {})",
                crate::MIN_MAX_TXN_OPS,
                crate::DEFAULT_MAX_TXN_OPS
            ));
        }
        let max_request_bytes = self
            .max_request_bytes
            .unwrap_or(crate::DEFAULT_MAX_REQUEST_BYTES);
        if max_request_bytes < crate::MIN_MAX_REQUEST_BYTES {
            return Err(format!(
                "storage \"etcd\": max_request_bytes must be at least {} (etcd's --max-request-bytes; its default is {})",
                crate::MIN_MAX_REQUEST_BYTES,
                crate::DEFAULT_MAX_REQUEST_BYTES
            ));
        }
        Ok(EtcdConfig {
            endpoints,
            prefix: self.prefix,
            username: self.username,
            password: self.password,
            tls,
            history_retention,
            max_txn_ops,
            max_request_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct File {
        storage: Storage,
    }

    #[derive(Debug, Deserialize)]
    struct Storage {
        etcd: EtcdBlock,
    }

    fn parse(text: &str) -> Result<EtcdConfig, String> {
        let file: File = hcl::from_str(text).map_err(|err| err.to_string())?;
        file.storage.etcd.into_config(Path::new("/etc/cairn"))
    }

    #[test]
    fn the_block_reads_endpoints_credentials_tls_and_retention() {
        let config = parse(
            r#"
            storage "etcd" {
              endpoints = ["10.0.0.1:2379", "https://10.0.0.2:2379"]
              prefix = "cairn/"
              username = "cairn"
              password = "secret"
              tls {
                ca = "ca.pem"
                cert = "/abs/client.pem"
                key = "client-key.pem"
              }
              history_retention = 500
              max_txn_ops = 1000
              max_request_bytes = 10485760
            }
            "#,
        )
        .expect("valid");
        assert_eq!(config.endpoints, ["10.0.0.1:2379", "https://10.0.0.2:2379"]);
        assert_eq!(config.prefix, "cairn/");
        assert_eq!(config.username.as_deref(), Some("cairn"));
        assert!(
            !format!("{config:?}").contains("secret"),
            "password redacted"
        );
        let tls = config.tls.clone().expect("tls");
        assert_eq!(tls.ca, Some(PathBuf::from("/etc/cairn/ca.pem")));
        assert_eq!(tls.cert, Some(PathBuf::from("/abs/client.pem")));
        assert_eq!(tls.key, Some(PathBuf::from("/etc/cairn/client-key.pem")));
        assert_eq!(config.history_retention, Some(500));
        assert_eq!(config.max_txn_ops, 1000);
        assert_eq!(config.max_request_bytes, 10_485_760);
        let limits = config.txn_limits();
        assert_eq!(limits.max_ops, 998);
        assert!(limits.max_bytes < 10_485_760 && limits.max_bytes > 10_000_000);
    }

    #[test]
    fn the_transaction_limits_default_to_etcds_defaults() {
        let config = parse("storage \"etcd\" {\n endpoints = [\"a:1\"]\n prefix = \"p/\"\n}")
            .expect("valid");
        assert_eq!(config.max_txn_ops, 128);
        assert_eq!(config.max_request_bytes, 1_572_864);
    }

    #[test]
    fn retention_defaults_to_the_trait_default_and_zero_turns_it_off() {
        let config = parse("storage \"etcd\" {\n endpoints = [\"a:1\"]\n prefix = \"p/\"\n}")
            .expect("valid");
        assert_eq!(
            config.history_retention,
            Some(storage::DEFAULT_HISTORY_RETENTION)
        );
        let config = parse(
            "storage \"etcd\" {\n endpoints = [\"a:1\"]\n prefix = \"p/\"\n history_retention = 0\n}",
        )
        .expect("valid");
        assert_eq!(config.history_retention, None);
    }

    #[test]
    fn bad_blocks_are_refused_with_the_key_named() {
        for (text, wanted) in [
            ("endpoints = []\n prefix = \"p/\"", "endpoints"),
            ("endpoints = [\"a:1\"]\n prefix = \"\"", "prefix"),
            (
                "endpoints = [\"a:1\"]\n prefix = \"p/\"\n username = \"u\"",
                "username and password",
            ),
            (
                "endpoints = [\"a:1\"]\n prefix = \"p/\"\n tls {\n cert = \"c\"\n }",
                "cert and key",
            ),
            (
                "endpoints = [\"a:1\"]\n prefix = \"p/\"\n endpoint = \"x\"",
                "endpoint",
            ),
            (
                "endpoints = [\"a:1\"]\n prefix = \"p/\"\n max_txn_ops = 4",
                "max_txn_ops must be at least 16",
            ),
            (
                "endpoints = [\"a:1\"]\n prefix = \"p/\"\n max_request_bytes = 1000",
                "max_request_bytes must be at least",
            ),
        ] {
            let err = parse(&format!("storage \"etcd\" {{\n {text}\n}}")).expect_err(text);
            assert!(err.contains(wanted), "{text}: {err}");
        }
    }
}
